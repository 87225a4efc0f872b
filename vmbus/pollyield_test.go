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
