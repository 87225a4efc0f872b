package main

import (
	"fmt"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// waiter is what a side does while the ring is full (sender) or empty
// (receiver): spin with PAUSE, or with -w sleep in nanosleep(2) like
// ringpeer's usleep. It gives up, exit status 1, after the -t timeout
// without progress.
type waiter struct {
	sleep   unix.Timespec // zero: spin
	timeout time.Duration
	since   time.Time // start of the current stall, or zero
	spins   uint64
}

func newWaiter(o *options) *waiter {
	w := &waiter{timeout: time.Duration(o.timeout * float64(time.Second))}
	if o.waitUS > 0 {
		w.sleep = unix.NsecToTimespec(int64(o.waitUS) * 1000)
	}
	return w
}

// idle waits once. The clock is read only every 65536 spins when spinning.
func (w *waiter) idle() {
	w.spins++
	if w.sleep.Nsec == 0 && w.sleep.Sec == 0 {
		pause()
		if w.spins&0xffff != 0 {
			return
		}
		runtime.Gosched() // let the runtime's own goroutines in now and then
	} else {
		ts := w.sleep
		for unix.Nanosleep(&ts, &ts) == unix.EINTR {
		}
	}
	now := time.Now()
	if w.since.IsZero() {
		w.since = now
	} else if now.Sub(w.since) > w.timeout {
		fmt.Fprintf(os.Stderr, "ringbench: no progress for %.0f s, giving up\n", w.timeout.Seconds())
		os.Exit(1)
	}
}

// progress resets the stall clock.
func (w *waiter) progress() { w.since = time.Time{} }

// pin locks the calling goroutine to its OS thread and that thread to cpu.
// GOMAXPROCS drops to 1 first: the data path is one goroutine, and a second
// P would only let runtime work compete with the peer for the other CPU.
func pin(cpu int) error {
	runtime.GOMAXPROCS(1)
	runtime.LockOSThread()
	var set unix.CPUSet
	set.Zero()
	set.Set(cpu)
	return unix.SchedSetaffinity(0, &set)
}
