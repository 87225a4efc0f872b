// Package clock is the time source of code whose waits tests must
// control: the daemon's NIC supervisor (reset backoff, liveness probe,
// rescans) and anything else that takes a Clock in its options. Real is
// the package time; package clock/clocktest has a fake whose time moves
// only when a test advances it, so a test of a 30-second backoff takes no
// 30 seconds and cannot race the wall clock.
//
// It is a leaf below every other package of the module (it imports only
// the standard library), so data-path packages may use it too. Hot paths
// do not: a clock call per packet costs an interface call, and the waits
// that matter to a test are the slow ones.
package clock
