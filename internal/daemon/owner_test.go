package daemon_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/internal/daemon"
	"github.com/vmbusd/vmbusd/internal/owner"
)

// TestSecondDaemonIsRefusedAndTheFirstKeepsCarrying: a second daemon on
// the same state directory refuses before it restores or touches anything;
// the first one's NICs keep forwarding and the host sees no violation.
func TestSecondDaemonIsRefusedAndTheFirstKeepsCarrying(t *testing.T) {
	r := newRig(t)
	r.start(t)
	waitFor(t, "traffic", func() bool { return forwarded(r) > 500 })
	cfg := r.config()
	cfg.Metrics.Listen = "127.0.0.1:0"
	d2, err := daemon.New(daemon.Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d2.Run(context.Background()) }()
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the second daemon did not refuse")
	}
	if !errors.Is(err, owner.ErrBusy) || !strings.Contains(err.Error(), "`vmbusd run` (pid") {
		t.Fatalf("second daemon: %v, want busy naming the owner", err)
	}
	before := forwarded(r)
	waitFor(t, "traffic after the refusal", func() bool { return forwarded(r) > before+500 })
	for _, n := range []string{"eth1", "eth2"} {
		if st := r.nicState(n); st.State != "up" || st.Resets != 0 || st.Rescinds != 0 {
			t.Fatalf("%s after the second daemon: %+v", n, st)
		}
	}
	if v := r.h.Violations(); len(v) != 0 {
		t.Fatalf("the host counted violations: %v", v)
	}
}

// TestSameNICNamedTwiceIsRefused: eth1 and its instance GUID are one
// device; string comparison let two supervisors fight over it.
func TestSameNICNamedTwiceIsRefused(t *testing.T) {
	r := newRig(t)
	cfg := r.config()
	cfg.NICs[1].Device = r.a.Device().Instance().String()
	cfg.NICs[1].Peer = "eth1"
	cfg.NICs[0].Peer = cfg.NICs[1].Device
	d, err := daemon.New(daemon.Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	err = d.Run(context.Background())
	if !errors.Is(err, daemon.ErrConfig) || !strings.Contains(err.Error(), "same device") {
		t.Fatalf("Run: %v, want a configuration error naming the device", err)
	}
	if drv := r.a.Device().Driver(); drv != "hv_netvsc" {
		t.Fatalf("eth1 was touched: driver %q", drv)
	}
}
