package main

import (
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// xcoreRTT measures what one cache line costs to bounce between the
// first two CPUs netbench may run on: two threads, one pinned to each,
// hand a counter back and forth, and the fastest of a few batches is
// returned as nanoseconds per round trip (0 with fewer than two CPUs).
// The fastest, not the median: a thread of another process (or of this
// one's runtime, or the exiting host's teardown) that takes either CPU
// for part of the probe lengthens some batches, not the machine's
// state, which is what this reads.
//
// The rate test records it before and after each measurement. On this
// project's two-CPU virtual machine it sits near one of two levels for
// minutes at a time (about 120 ns and about 450 ns here, by where the
// hypervisor runs the two virtual CPUs) and every rate moves with it, by
// up to 1.7×: a hybrid figure and a busy-poll figure measured on either
// side of a change compare two machines, not two wait modes.
//
// Each thread is locked to its goroutine and left locked when that
// goroutine ends, so the runtime discards it with its affinity.
func xcoreRTT() float64 {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return 0
	}
	var cpus []int
	for c := 0; c < 1024 && len(cpus) < 2; c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	if len(cpus) < 2 {
		return 0
	}
	const batches, rounds = 9, 2000
	var x atomic.Int64
	var stop atomic.Bool // the measuring side could not pin itself
	pin := func(cpu int) bool {
		runtime.LockOSThread() // not unlocked: the thread goes with the goroutine
		var s unix.CPUSet
		s.Set(cpu)
		return unix.SchedSetaffinity(0, &s) == nil
	}
	ok := make(chan bool, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if !pin(cpus[1]) {
			ok <- false
			return
		}
		ok <- true
		for i := int64(1); i < 2*batches*rounds; i += 2 {
			for x.Load() != i {
				if stop.Load() {
					return
				}
			}
			x.Store(i + 1)
		}
	}()
	res := make(chan float64, 1)
	go func() {
		if !<-ok || !pin(cpus[0]) {
			stop.Store(true)
			res <- 0
			return
		}
		var per []float64
		for b := range batches {
			t := time.Now()
			for i := int64(2 * b * rounds); i < int64(2*(b+1)*rounds); i += 2 {
				for x.Load() != i {
				}
				x.Store(i + 1)
			}
			per = append(per, float64(time.Since(t).Nanoseconds())/rounds)
		}
		res <- slices.Min(per)
	}()
	v := <-res
	<-done
	return v
}
