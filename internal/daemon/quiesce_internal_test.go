package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/clock/clocktest"
	"github.com/vmbusd/vmbusd/frame"
	"github.com/vmbusd/vmbusd/netvsc"
	"github.com/vmbusd/vmbusd/sim"
	"github.com/vmbusd/vmbusd/vmbus"
)

// TestQuiesceEndsWhenItsWaitDoes: a host that stops reading the guest's
// rings never completes the sends in flight; quiesce waits for them on
// the daemon's clock, for quiesceWait and no longer.
func TestQuiesceEndsWhenItsWaitDoes(t *testing.T) {
	h, err := sim.New(sim.Config{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	sn, err := h.AddNIC(sim.NICConfig{IfName: "quiesce0"})
	if err != nil {
		t.Fatal(err)
	}
	dev, err := vmbus.LookupDevice(h.Root(), sn.Device().Instance())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nic, err := netvsc.Open(ctx, dev, netvsc.Config{PoolPackets: 64})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sn.Device().SetFault(sim.FaultStopDraining, false) // let Close's HALT through
		nic.Close()
	})

	sn.Device().SetFault(sim.FaultStopDraining, true)
	q := nic.Queues()[0]
	p := q.Alloc()
	f := udpFrame(1000)
	copy(f[0:6], []byte{0x02, 0, 0, 0, 0, 9})
	copy(f[6:12], nic.MAC())
	copy(p.SetLen(len(f)), f)
	if q.TxBurst([]*frame.Packet{p}) != 1 {
		p.Free()
		t.Fatal("the send was not taken")
	}
	if n := q.Channel().InFlight(); n == 0 {
		t.Fatal("nothing in flight after a send")
	}

	clk := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	done := make(chan struct{})
	go func() {
		defer close(done)
		quiesce(nic, clk)
	}()
	if err := clk.WaitTimer(ctx, quiesceWait); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
		t.Fatal("quiesce returned with a send in flight and its wait not over")
	default:
	}
	clk.Advance(quiesceWait - time.Nanosecond)
	select {
	case <-done:
		t.Fatal("quiesce returned before its wait was over")
	default:
	}
	clk.Advance(time.Nanosecond)
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("quiesce still waiting after quiesceWait")
	}
	if q.Channel().InFlight() == 0 {
		t.Fatal("the send completed: the host was to hold it")
	}
}
