// Package echo is the guest side of vmbusd's test device class
// (vmbus.ClassTest), whose simulated host echoes every inband packet: it
// sends stamped packets and verifies each echo. The demo and the tests use
// it to drive a channel end to end.
package echo
