package netvsc_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/clock/clocktest"
	"github.com/vmbusd/vmbusd/netvsc"
	"github.com/vmbusd/vmbusd/sim"
	"github.com/vmbusd/vmbusd/vmbus"
)

// TestRequiredVFTimesOutOnTheClock: the host associates a VF whose netdev
// never appears. The NIC retries after 100 ms on its clock, and Open gives
// up exactly when VFTimeout has passed on that clock, naming the last
// failure; a loaded machine cannot make either happen early or late.
func TestRequiredVFTimesOutOnTheClock(t *testing.T) {
	h, err := sim.New(sim.Config{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	sn, err := h.AddNIC(sim.NICConfig{VF: 0x5a, VFDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	dev, err := vmbus.LookupDevice(h.Root(), sn.Device().Instance())
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	const vfTimeout = 7 * time.Second
	cfg := netvsc.Config{PoolPackets: 64, VF: netvsc.VFRequired, VFTimeout: vfTimeout, Clock: clk}
	type result struct {
		n   *netvsc.NIC
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := netvsc.Open(context.Background(), dev, cfg)
		done <- result{n, err}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Parked on both: VFTimeout, and the first retry's backoff after the
	// association came and no netdev was found for it.
	for _, d := range []time.Duration{vfTimeout, 100 * time.Millisecond} {
		if err := clk.WaitTimer(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(vfTimeout - time.Nanosecond)
	select {
	case r := <-done:
		t.Fatalf("Open returned (%v) before VFTimeout", r.err)
	default:
	}
	clk.Advance(time.Nanosecond)
	select {
	case r := <-done:
		if r.n != nil {
			r.n.Close()
		}
		if !errors.Is(r.err, netvsc.ErrNoVF) {
			t.Fatalf("Open: %v, want ErrNoVF", r.err)
		}
		if !strings.Contains(r.err.Error(), "within 7s") || !strings.Contains(r.err.Error(), "not found") {
			t.Fatalf("Open: %q, want the timeout and the last failure named", r.err)
		}
	case <-ctx.Done():
		t.Fatal("Open still waiting after VFTimeout")
	}
}
