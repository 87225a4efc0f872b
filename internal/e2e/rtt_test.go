package e2e

import (
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/netvsc"
	"github.com/vmbusd/vmbusd/sim"
)

// TestPingRoundTrip reports the ICMP echo round trip through the TAP
// attachment and the simulated host (informational: no threshold).
func TestPingRoundTrip(t *testing.T) {
	for _, m := range []netvsc.Mode{netvsc.Hybrid, netvsc.Interrupt, netvsc.Poll} {
		t.Run(m.String(), func(t *testing.T) {
			rigMode = m
			defer func() { rigMode = netvsc.Hybrid }()
			pingRTT(t)
		})
	}
}

func pingRTT(t *testing.T) {
	r := newRig(t, sim.NICConfig{}, 1, false)
	if ping(t, r.guestNS, hostAddr.Addr(), 1) != 1 {
		t.Fatal("no connectivity")
	}
	const n = 200
	start := time.Now()
	if got := ping(t, r.guestNS, hostAddr.Addr(), n); got != n {
		t.Fatalf("%d of %d", got, n)
	}
	t.Logf("mean ICMP round trip guest->host->guest: %v", time.Since(start)/n)
}

var rigMode = netvsc.Hybrid
