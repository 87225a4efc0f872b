package netvsp

import (
	"context"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/clock/clocktest"
	"github.com/vmbusd/vmbusd/netvsc/nvsp"
)

// TestVFScenarioWaitsOnTheClock: the service scenario's waits are the
// stand-in's clock's. The host withdraws the VF at once, removes it only
// when RemoveDelay has passed on that clock, and brings it back only when
// Away has; a loaded machine makes neither early nor late.
func TestVFScenarioWaitsOnTheClock(t *testing.T) {
	cfg := vfTestConfig(t)
	clk := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg.Clock = clk
	cfg.RemoveDelay, cfg.Away = 5*time.Second, time.Hour
	g := newTGuest(t, tguestOpts{nic: NICConfig{VF: 11, VFDelay: time.Millisecond, VFStandIn: &cfg}})
	v := g.nic.VF()
	g.handshake(nvsp.Version61)
	g.vfAssociation(1)
	waitFor(t, "the VF's netdev", v.Present)

	ctx, cancel := context.WithTimeout(context.Background(), tgWait)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- v.Run(ctx, VFService) }()
	step := func(d time.Duration, present bool, what string) {
		t.Helper()
		if err := clk.WaitTimer(ctx, d); err != nil {
			t.Fatal(err)
		}
		clk.Advance(d - time.Nanosecond)
		if v.Present() != present {
			t.Fatalf("%s: present %v a nanosecond early", what, !present)
		}
		select {
		case err := <-done:
			t.Fatalf("%s: the scenario ended (%v) a nanosecond early", what, err)
		default:
		}
		clk.Advance(time.Nanosecond)
	}
	step(cfg.RemoveDelay, true, "RemoveDelay")
	g.vfAssociation(0) // withdrawn before the wait
	waitFor(t, "the VF removed", func() bool { return !v.Present() })
	step(cfg.Away, false, "Away")
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("the scenario did not end after Away")
	}
	if !v.Present() {
		t.Fatal("the VF did not return")
	}
	g.vfAssociation(1)
	var kinds []VFEventKind
	for _, e := range v.Events() {
		kinds = append(kinds, e.Kind)
	}
	want := []VFEventKind{VFServiceStarted, VFWithdrawalSent, VFNetdevRemoved, VFPCIRemoved,
		VFPCIAdded, VFNetdevAdded, VFAssociationSent, VFScenarioCompleted}
	if !containsInOrder(kinds, want) {
		t.Fatalf("events %v, want %v in order", kinds, want)
	}
	g.noViolations()
}
