package vmbus

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestSpinningWaitsYieldTheCPU: a waiter that spins on an empty ring (poll
// mode, or a busy-poll budget) gives its CPU away between rounds of
// polls, so that the thread that would fill the ring can run when both
// share a core. The stand-in yield fills the ring on its third call: the
// wait returns only if it yields, and the context ends it otherwise.
func TestSpinningWaitsYieldTheCPU(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  ChannelConfig
	}{
		{"poll mode", ChannelConfig{Mode: WaitPoll, Interrupts: true}},
		{"busy poll", ChannelConfig{BusyPoll: time.Hour, Interrupts: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := append(newTestRing(t, 4096), newTestRing(t, 4096)...)
			cfg := tc.cfg
			cfg.Ring, cfg.Signaler = mem, ControlFunc(func(bool) error { return nil })
			guest, err := NewChannel(cfg)
			if err != nil {
				t.Fatal(err)
			}
			host, err := NewChannel(ChannelConfig{Ring: mem, HostSide: true, Signaler: ControlFunc(func(bool) error { return nil })})
			if err != nil {
				t.Fatal(err)
			}
			yields := 0
			guest.yield = func() {
				yields++
				if yields == 3 {
					if err := host.SendInband(1, []byte("answer")); err != nil {
						t.Error(err)
					}
					if err := host.Flush(); err != nil {
						t.Error(err)
					}
				}
			}
			// A generous bound, not a measurement: without yields the
			// wait spins until it.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := guest.WaitReadable(ctx); err != nil {
				t.Fatalf("wait: %v after %d yields", err, yields)
			}
			if yields != 3 {
				t.Errorf("%d yields, want the 3 that filled the ring", yields)
			}
			p, err := guest.Recv()
			if err != nil || !strings.HasPrefix(string(p.Payload()), "answer") {
				t.Fatalf("recv %q, %v", p.Payload(), err)
			}
		})
	}
}

// TestPollYieldRationsGosched: every PollYield gives the CPU away
// (sched_yield), but runtime.Gosched, which wakes a second thread when a P
// is idle, runs at most once per pollGoschedEvery of the channel's clock.
func TestPollYieldRationsGosched(t *testing.T) {
	for _, tc := range []struct {
		name         string
		step         time.Duration // clock advance per PollYield
		calls        int
		wantGosched  int
		wantOSYields int
	}{
		{"yields microseconds apart", time.Microsecond, 200, 4, 200},
		{"yields a period apart", pollGoschedEvery, 10, 10, 10},
		{"clock stopped", 0, 100, 1, 100},
		{"yields just under a period apart", pollGoschedEvery - time.Nanosecond, 4, 2, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := append(newTestRing(t, 4096), newTestRing(t, 4096)...)
			c, err := NewChannel(ChannelConfig{Ring: mem, Mode: WaitPoll, Signaler: ControlFunc(func(bool) error { return nil })})
			if err != nil {
				t.Fatal(err)
			}
			// The first call comes a full period after the channel's
			// epoch, as any real one does.
			now := int64(pollGoschedEvery)
			gosched, yields := 0, 0
			c.clock = func() int64 { return now }
			c.gosched = func() { gosched++ }
			c.yield = func() { yields++ }
			for range tc.calls {
				c.PollYield()
				now += int64(tc.step)
			}
			if gosched != tc.wantGosched || yields != tc.wantOSYields {
				t.Errorf("%d calls: %d Gosched, %d sched_yield; want %d, %d", tc.calls, gosched, yields, tc.wantGosched, tc.wantOSYields)
			}
		})
	}
}
