// Package clocktest has a fake clock.Clock for tests: its time moves only
// when the test calls Advance, and a test waits, with a context, until the
// code under test is parked on a timer (BlockUntil, WaitTimer) before it
// advances. No sleeps, no wall-clock thresholds.
//
// Unlike a count of waiters alone, WaitTimer names the wait by its
// duration, so a test can tell "parked on the 2 s backoff" from "ticking
// in a heartbeat loop" in code that has both.
package clocktest
