package daemon

import (
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/internal/config"
	"github.com/vmbusd/vmbusd/netvsc"
)

// TestVFReportAddsIncarnationsUp: closed incarnations and the running one
// add up per path, in time and in switches; the pairing last seen stays
// on show while the NIC is down; the synthetic path comes from the queues.
func TestVFReportAddsIncarnationsUp(t *testing.T) {
	first := netvsc.VFStatus{Mode: netvsc.VFAuto, State: netvsc.VFStateNone, Associated: true, Serial: 3,
		IfName: "enP1s1", Ifindex: 7, PCI: "7873:00:00.0", Driver: "mlx5_core", MatchedBy: "serial",
		VF:            netvsc.PathStats{RxPackets: 100, RxBytes: 6400, TxPackets: 50, TxBytes: 3200, TxDropped: 1},
		TimeSynthetic: 2 * time.Second, TimeVF: 8 * time.Second, Switches: 2,
		Reasons:  map[string]uint64{netvsc.ReasonVFReady: 1, netvsc.ReasonClosing: 1},
		Attempts: 2, Failures: 1, LastError: "no carrier",
		Events: []netvsc.VFEvent{{To: netvsc.PathVF, Reason: netvsc.ReasonVFReady}, {To: netvsc.PathSynthetic, Reason: netvsc.ReasonClosing}}}
	var base vfTotals
	base.add(first)
	queues := []netvsc.QueueStats{{Queue: 0, RxPackets: 10, RxBytes: 640, TxPackets: 5, TxBytes: 320, TxTooBig: 1},
		{Queue: 1, RxPackets: 20, TxDropOversize: 2}}

	down := vfReport(config.VFAuto, base, nil, queues)
	if down.State != "none" || down.Path != "" || down.IfName != "enP1s1" || down.PCI != "7873:00:00.0" || down.Serial != 3 ||
		down.Paths.VF.RxPackets != 100 || down.Paths.Synthetic.RxPackets != 30 || down.Paths.Synthetic.TxDropped != 3 ||
		down.SecondsVF != 8 || down.Switches != 2 || down.SwitchReasons["vf_ready"] != 1 || len(down.Events) != 2 {
		t.Fatalf("while down: %+v", down)
	}

	cur := netvsc.VFStatus{Mode: netvsc.VFAuto, State: netvsc.VFStateActive, Path: netvsc.PathVF, Associated: true, Serial: 3,
		IfName: "enP1s2", PCI: "7873:00:00.0", Driver: "mlx5_core", MatchedBy: "mac", Attach: "native", Bind: "zero-copy", Sockets: 4,
		VF: netvsc.PathStats{RxPackets: 1, TxPackets: 2}, TimeSynthetic: time.Second, TimeVF: time.Second, Switches: 1,
		Reasons: map[string]uint64{netvsc.ReasonVFReady: 1}, Attempts: 1,
		Events: []netvsc.VFEvent{{To: netvsc.PathVF, Reason: netvsc.ReasonVFReady}}}
	up := vfReport(config.VFAuto, base, &cur, queues)
	if up.State != "active" || up.Path != "vf" || up.IfName != "enP1s2" || up.MatchedBy != "mac" || up.XDPBind != "zero-copy" ||
		up.Sockets != 4 || up.Paths.VF.RxPackets != 101 || up.Paths.VF.TxPackets != 52 || up.SecondsSynthetic != 3 ||
		up.SecondsVF != 9 || up.Switches != 3 || up.SwitchReasons["vf_ready"] != 2 || up.SwitchReasons["closing"] != 1 ||
		up.AttachAttempts != 3 || up.AttachFailures != 1 || up.LastError != "no carrier" || len(up.Events) != 3 {
		t.Fatalf("while up: %+v", up)
	}

	if off := vfReport(config.VFOff, vfTotals{}, nil, nil); off.Mode != "off" || off.State != "off" {
		t.Fatalf("vf = off: %+v", off)
	}
	// The events kept are the latest maxVFEvents.
	var many vfTotals
	for range 3 {
		many.add(netvsc.VFStatus{Events: make([]netvsc.VFEvent, 40)})
	}
	if n := len(many.events); n != maxVFEvents {
		t.Fatalf("%d events kept, want %d", n, maxVFEvents)
	}
}
