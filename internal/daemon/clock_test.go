package daemon_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/clock/clocktest"
	"github.com/vmbusd/vmbusd/internal/config"
	"github.com/vmbusd/vmbusd/internal/daemon"
)

// useFakeClock makes the daemon's supervisors run on a fake clock, which
// moves only when the test advances it.
func (r *rig) useFakeClock() *clocktest.Fake {
	r.clock = clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	return r.clock
}

// parked waits until the daemon is parked on a one-shot wait of d (a
// backoff, a probe's timeout).
func parked(t *testing.T, clk *clocktest.Fake, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := clk.WaitTimer(ctx, d); err != nil {
		t.Fatal(err)
	}
}

// advanceTimer waits until the daemon is parked on a one-shot wait of d,
// then lets that wait end.
func advanceTimer(t *testing.T, clk *clocktest.Fake, d time.Duration) {
	t.Helper()
	parked(t, clk, d)
	clk.Advance(d)
}

// timers counts the one-shot timers of duration d pending on clk.
func timers(clk *clocktest.Fake, d time.Duration) int {
	n := 0
	for _, p := range clk.Pending() {
		if !p.Ticker && p.Duration == d {
			n++
		}
	}
	return n
}

// TestRetryBackoffDoublesUpToTheCap: a NIC whose bring-up keeps failing
// (a required VF that never comes) is tried again after 0.5 s, then 1, 2,
// 4, 8, 16 s, then every 30 s; no attempt starts before its wait ends.
func TestRetryBackoffDoublesUpToTheCap(t *testing.T) {
	r := newRig(t)
	clk := r.useFakeClock()
	r.noWaitReady = true
	cfg := r.config()
	cfg.NICs[0].VF, cfg.NICs[0].VFTimeout = config.VFRequired, 100*time.Millisecond
	r.startWith(t, cfg)
	const line = "the required VF does not carry traffic"
	waits := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second,
		8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}
	for i, d := range waits {
		// Parked on the i-th wait: exactly i+1 attempts made, and the
		// log names the wait.
		parked(t, clk, d)
		logs := r.logs.String()
		if n := strings.Count(logs, line); n != i+1 {
			t.Fatalf("parked on %v: %d attempts logged, want %d", d, n, i+1)
		}
		if !strings.Contains(logs, fmt.Sprintf("retry_in=%v", d)) {
			t.Fatalf("no attempt logged retry_in=%v", d)
		}
		clk.Advance(d)
	}
	// The attempt after the last wait is made, and waits 30 s again.
	parked(t, clk, 30*time.Second)
	if st := r.nicState("eth1"); st.State != "waiting for the VF" || st.Resets != 0 {
		t.Fatalf("eth1: %+v, want waiting for the VF, no reset", st)
	}
}

// TestHostThatStopsAnsweringIsReset: the liveness probe (every 10 s, each
// bounded by 5 s) resets a NIC whose host stops answering after three
// failures in a row, and only that NIC. The probes run on the fake clock;
// the host's silence is real (its answers are an hour late).
func TestHostThatStopsAnsweringIsReset(t *testing.T) {
	r := newRig(t)
	clk := r.useFakeClock()
	r.start(t)
	waitFor(t, "both up", func() bool { return r.nicState("eth1").State == "up" && r.nicState("eth2").State == "up" })
	r.a.SetControlDelay(time.Hour)
	for i := range 3 {
		ctlA, ctlB := r.a.Stats().Control, r.b.Stats().Control
		clk.Advance(daemon.DefaultProbeInterval)
		// Both NICs probe; eth2's host answers and its probe ends, eth1's
		// hangs on its timeout.
		waitFor(t, "both probes at the host", func() bool {
			return r.a.Stats().Control > ctlA && r.b.Stats().Control > ctlB
		})
		waitFor(t, "eth2's probe answered", func() bool { return timers(clk, daemon.DefaultProbeTimeout) == 1 })
		if st := r.nicState("eth1"); st.Resets != 0 {
			t.Fatalf("eth1 reset after %d failed probes: %+v", i, st)
		}
		clk.Advance(daemon.DefaultProbeTimeout)
	}
	waitFor(t, "eth1 reset by the liveness probe", func() bool { return r.nicState("eth1").Resets > 0 })
	if st := r.nicState("eth1"); !strings.Contains(st.Error, "stopped answering") {
		t.Fatalf("eth1 after the probes: %+v, want the host named silent", st)
	}
	r.a.SetControlDelay(0)
	advanceTimer(t, clk, 500*time.Millisecond) // the first reset's backoff
	waitFor(t, "eth1 up again", func() bool { return r.nicState("eth1").State == "up" })
	if st := r.nicState("eth1"); st.Resets != 1 {
		t.Fatalf("eth1: %+v, want one reset", st)
	}
	if r.nicState("eth2").Resets != 0 {
		t.Fatalf("eth2 reset too: %+v", r.nicState("eth2"))
	}
}
