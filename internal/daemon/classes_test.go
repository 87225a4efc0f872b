package daemon_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/internal/config"
	"github.com/vmbusd/vmbusd/netvsc"
	"github.com/vmbusd/vmbusd/sim"
)

// violations sums what the daemon counted for one NIC.
func (r *rig) violations(nic string) uint64 {
	var n uint64
	for _, s := range r.d.Stats().NICs {
		if s.Name == nic {
			for _, v := range s.Violations {
				n += v
			}
		}
	}
	return n
}

// TestHostRefusalsResetWithoutViolations: a host that answers a control
// request with a failure status (RNDIS, NVSP) at bring-up gets the NIC
// reset with backoff, not failed, and no violation is counted: refusing
// is allowed, breaking the protocol is not.
func TestHostRefusalsResetWithoutViolations(t *testing.T) {
	for _, fault := range []sim.NICFault{sim.NICFaultRNDISStatus, sim.NICFaultSubchannelFail} {
		t.Run(fault.String(), func(t *testing.T) {
			r := newRig(t)
			bad := r.addNICWith(t, sim.NICConfig{IfName: "eth3", MaxQueues: 2, Faults: []sim.NICFault{fault}})
			bad.Attach(sim.NewReflector())
			cfg := r.config()
			cfg.NICs = append(cfg.NICs, config.NIC{Device: "eth3", Queues: 2, Attach: config.AttachForward, Peer: "eth1"})
			r.startWith(t, cfg)
			if bad.FaultHits(fault) == 0 {
				t.Fatalf("the fault never took effect")
			}
			st := r.nicState("eth3")
			if st.State != "up" || r.violations("eth3") != 0 {
				t.Fatalf("eth3 after the refusal: %+v, %d violations; want up and none counted", st, r.violations("eth3"))
			}
			if fault == sim.NICFaultRNDISStatus && st.Resets == 0 {
				t.Fatalf("eth3 came up without a reset after a refused RNDIS request: %+v", st)
			}
			if !strings.Contains(r.logs.String(), "kind=\"host failure\"") && st.Resets > 0 {
				t.Fatalf("the reset is not logged as a host failure")
			}
		})
	}
}

// TestRequiredVFThatNeverComesIsWaitedFor: with vf = "required" and a host
// that associates no VF, bring-up fails with netvsc.ErrNoVF and the NIC
// waits for the VF, trying again with backoff: neither failed (the host
// may be servicing the VF) nor counted as a reset.
func TestRequiredVFThatNeverComesIsWaitedFor(t *testing.T) {
	r := newRig(t)
	clk := r.useFakeClock()
	r.noWaitReady = true
	cfg := r.config()
	cfg.NICs[0].VF, cfg.NICs[0].VFTimeout = config.VFRequired, 200*time.Millisecond
	r.startWith(t, cfg)
	waitFor(t, "eth1 waiting for the VF", func() bool { return r.nicState("eth1").State == "waiting for the VF" })
	// One more attempt after the backoff, and it ends the same way.
	advanceTimer(t, clk, 500*time.Millisecond)
	parked(t, clk, time.Second) // the second attempt ended
	if n := strings.Count(r.logs.String(), "the required VF does not carry traffic"); n != 2 {
		t.Fatalf("%d attempts logged, want 2", n)
	}
	st := r.nicState("eth1")
	if st.Resets != 0 || !strings.Contains(st.Error, "no usable VF") {
		t.Fatalf("eth1: %+v, want waiting for the VF, no reset, the reason", st)
	}
	code, body := get(t, r.d.MetricsAddr(), "/metrics")
	if code != 200 || !strings.Contains(body, `vmbusd_netvsc_failed{device="eth1"} 0`) {
		t.Fatalf("/metrics %d: eth1 should not be failed:\n%.2000s", code, body)
	}
}

// TestStaleGPAPoolIsReplaced: a pool netvsc.Open finds stale (its memory
// is no longer what the host reads: here a guest memory file that is gone)
// is retired, and the NIC comes up at once with a pool of the current
// host's memory, without a reset.
func TestStaleGPAPoolIsReplaced(t *testing.T) {
	old := t.TempDir()
	if err := os.MkdirAll(filepath.Join(old, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	mem := filepath.Join(old, "dev", "guestmem")
	if err := os.WriteFile(mem, make([]byte, 64<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	pool, err := netvsc.OpenSimGPAPool(old, 0, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := os.Remove(mem); err != nil { // the host that served it went away
		t.Fatal(err)
	}
	r := newRig(t)
	r.gpaPool = pool
	r.start(t)
	for _, n := range r.d.Status().NICs {
		if n.State != "up" || n.GPAPool != "sim" || n.Resets != 0 {
			t.Fatalf("%s: %+v, want up on a pool of the simulated host's memory, without a reset", n.Name, n)
		}
	}
	if n := strings.Count(r.logs.String(), "is stale; NICs get pools of their own"); n != 1 {
		t.Fatalf("the stale pool was retired %d times, want once", n)
	}
	waitFor(t, "traffic", func() bool { return forwarded(r) > 500 })
}

// TestDriverLinesFollowTheDaemonsLogLimits: what netvsc logs is limited by
// the daemon's [log] settings alone, across resets, not by a limiter of the
// driver's own (10 a minute, fresh at each incarnation): with rate_limit 14,
// fifteen sends the host fails give fourteen lines, and two more after a
// reset none.
func TestDriverLinesFollowTheDaemonsLogLimits(t *testing.T) {
	r := newRig(t)
	cfg := r.config()
	cfg.Log.RateLimit, cfg.Log.RateInterval = 14, time.Hour
	r.startWith(t, cfg)
	waitFor(t, "traffic", func() bool { return forwarded(r) > 500 })
	fail := func(n int) {
		for range n {
			hits := r.b.FaultHits(sim.NICFaultTxFail)
			r.b.SetFault(sim.NICFaultTxFail, true)
			waitFor(t, "a failed send", func() bool { return r.b.FaultHits(sim.NICFaultTxFail) > hits })
		}
	}
	const line = `msg="host failed a send"`
	fail(15)
	waitFor(t, "the lines logged", func() bool { return strings.Count(r.logs.String(), line) >= 14 })
	r.b.SetFault(sim.NICFaultUnknownCompletion, true) // a violation: eth2 is reset
	waitFor(t, "eth2 reset", func() bool { return r.nicState("eth2").Resets > 0 })
	waitFor(t, "eth2 up again", func() bool { return r.nicState("eth2").State == "up" })
	fail(2)
	r.cancel()
	<-r.done
	r.done <- nil
	logs := r.logs.String()
	if n := strings.Count(logs, line); n != 14 {
		t.Fatalf("%d lines for 17 failed sends, want 14 (rate_limit)", n)
	}
	if strings.Contains(logs, `line="host failed a send"`) {
		t.Fatal("the driver's own limiter summarised the line: it limited it too")
	}
}
