package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/vishvananda/netlink"

	"github.com/vmbusd/vmbusd/afxdp"
	"github.com/vmbusd/vmbusd/internal/config"
	"github.com/vmbusd/vmbusd/internal/control"
	"github.com/vmbusd/vmbusd/internal/daemon"
	"github.com/vmbusd/vmbusd/sim"
	"github.com/vmbusd/vmbusd/vmbus"
)

var vfSeq atomic.Uint32

// needVF skips unless this process may make veth pairs and attach XDP
// programs (root, and a kernel that allows both).
func needVF(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (veth pairs, XDP)")
	}
	h, g := vfNames()
	la := netlink.NewLinkAttrs()
	la.Name = h
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: g}); err != nil {
		t.Skipf("the kernel refuses a veth pair: %v", err)
	}
	if l, err := netlink.LinkByName(h); err == nil {
		netlink.LinkDel(l)
	}
	p, err := afxdp.NewProgram(1)
	if err != nil {
		t.Skipf("the kernel refuses XDP: %v", err)
	}
	p.Close()
}

// vfNames returns veth names unique to this process and call.
func vfNames() (host, guest string) {
	id := fmt.Sprintf("%d%d", os.Getpid()%100000, vfSeq.Add(1))
	return "dvh" + id, "dvg" + id
}

// addVFNIC offers a NIC with a VF stand-in whose guest end is in this
// process's network namespace, where the daemon looks for it.
func (r *rig) addVFNIC(t *testing.T, ifname string, serial uint32, inst vmbus.GUID) *sim.NIC {
	t.Helper()
	host, guest := vfNames()
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(host); err == nil {
			netlink.LinkDel(l)
		}
	})
	return r.addNICWith(t, sim.NICConfig{IfName: ifname, MaxQueues: 2, Instance: inst, VF: serial, VFDelay: 10 * time.Millisecond,
		VFStandIn: &sim.VFConfig{HostIf: host, GuestIf: guest, RemoveDelay: 10 * time.Millisecond}})
}

// newVFRig is the forwarding rig with a VF on each NIC: the generator's
// frames reach eth1 through its VF, eth2 sends them on through its own.
func newVFRig(t *testing.T) *rig {
	t.Helper()
	needVF(t)
	r := newRig(t)
	r.a.Remove()
	r.b.Remove()
	// A generator serves one NIC: new ones for the new NICs.
	r.gen = sim.NewGenerator(sim.GeneratorConfig{Flows: 8, Rate: 20000})
	r.sink = sim.NewGenerator(sim.GeneratorConfig{Idle: true})
	t.Cleanup(func() { r.gen.Close() })
	r.a = r.addVFNIC(t, "eth1", 3, vmbus.GUID{})
	r.b = r.addVFNIC(t, "eth2", 4, vmbus.GUID{})
	r.a.Attach(r.gen)
	r.b.Attach(r.sink)
	return r
}

func (r *rig) vf(name string) daemon.VFStatus { return r.nicState(name).VF }

// vfCounters are the per-path totals a test follows.
type vfCounters struct{ synRx, synTx, vfRx, vfTx uint64 }

func (r *rig) paths(t *testing.T) map[string]vfCounters {
	t.Helper()
	out := map[string]vfCounters{}
	for _, n := range r.d.Stats().NICs {
		p := n.VF.Paths
		out[n.Name] = vfCounters{p.Synthetic.RxPackets, p.Synthetic.TxPackets, p.VF.RxPackets, p.VF.TxPackets}
	}
	return out
}

// monotonic fails when a per-path counter went backwards since last.
func monotonic(t *testing.T, last, now map[string]vfCounters) {
	t.Helper()
	for n, a := range last {
		b := now[n]
		if b.synRx < a.synRx || b.synTx < a.synTx || b.vfRx < a.vfRx || b.vfTx < a.vfTx {
			t.Fatalf("%s: per-path counters went backwards: %+v -> %+v", n, a, b)
		}
	}
}

// TestVFCarriesTrafficAndFollowsServicing: with vf = "auto" the daemon
// pairs each NIC's VF, the traffic moves to it (received by eth1 on its
// VF, sent by eth2 on its own), a graceful servicing of eth1's VF moves
// eth1 back to synthetic and its return to the VF again, and a reset while
// on the VF keeps every per-path counter going up. Status, stats and the
// metrics show the pairing, the state, the path and the counters.
func TestVFCarriesTrafficAndFollowsServicing(t *testing.T) {
	r := newVFRig(t)
	r.start(t)
	waitFor(t, "both VFs active", func() bool { return r.vf("eth1").State == "active" && r.vf("eth2").State == "active" })
	last := r.paths(t)
	waitFor(t, "traffic on both VFs", func() bool {
		p := r.paths(t)
		monotonic(t, last, p)
		last = p
		return p["eth1"].vfRx > 500 && p["eth2"].vfTx > 500
	})
	vf := r.vf("eth1")
	if vf.Mode != "auto" || vf.Path != "vf" || vf.MatchedBy != "serial" || vf.PCI != r.a.VF().BDF() ||
		vf.IfName != r.a.VF().Config().GuestIf || vf.Driver != "mlx5_core" || !vf.Associated || vf.Serial != 3 {
		t.Fatalf("eth1's VF: %+v", vf)
	}

	// Graceful servicing: back to synthetic, then to the VF again.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.a.VF().Remove(ctx, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "eth1 back on synthetic", func() bool { return r.vf("eth1").Path == "synthetic" })
	before := r.paths(t)["eth1"]
	waitFor(t, "eth1 receiving synthetic", func() bool { return r.paths(t)["eth1"].synRx > before.synRx+500 })
	if err := r.a.VF().Add(ctx, sim.VFNetdevFirst); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "eth1 on the VF again", func() bool { return r.vf("eth1").State == "active" })
	before = r.paths(t)["eth1"]
	waitFor(t, "eth1 receiving on the VF again", func() bool { return r.paths(t)["eth1"].vfRx > before.vfRx+500 })
	vf = r.vf("eth1")
	if vf.SwitchReasons["vf_ready"] < 2 || vf.Switches < 3 || vf.SecondsVF <= 0 || vf.SecondsSynthetic <= 0 {
		t.Fatalf("eth1's switches after servicing: %+v", vf)
	}

	// A reset while on the VF: the totals carry on from where they were.
	last = r.paths(t)
	r.a.SetFault(sim.NICFaultUnknownCompletion, true) // eth1's rings are quiet: a fault that needs no traffic
	waitFor(t, "eth1 reset and on the VF again", func() bool {
		p := r.paths(t)
		monotonic(t, last, p)
		last = p
		return r.nicState("eth1").Resets > 0 && r.vf("eth1").State == "active"
	})
	if got := r.vf("eth1"); got.Switches < vf.Switches+2 || got.SwitchReasons["session_ended"]+got.SwitchReasons["closing"] == 0 {
		t.Fatalf("eth1's switches after the reset: %+v (before: %d)", got, vf.Switches)
	}

	// The control API, in snake_case.
	body, err := control.NewClient(r.config().Control.Socket).Get(context.Background(), "/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(body)
	body.Close()
	for _, key := range []string{`"vf": {`, `"matched_by": "serial"`, `"paths": {`, `"rx_packets":`, `"seconds_vf":`, `"switch_reasons":`} {
		if !strings.Contains(string(raw), key) {
			t.Fatalf("/v1/status lacks %s:\n%.3000s", key, raw)
		}
	}
	var st daemon.Stats
	body, err = control.NewClient(r.config().Control.Socket).Get(context.Background(), "/v1/stats")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.NewDecoder(body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	body.Close()
	for _, n := range st.NICs {
		if n.VF.Paths.VF.RxPackets+n.VF.Paths.VF.TxPackets == 0 || !slices.ContainsFunc(n.Ethtool, func(c daemon.Counter) bool {
			return c.Name == "vf_rx_packets" && c.Value == n.VF.Paths.VF.RxPackets
		}) {
			t.Fatalf("/v1/stats for %s: %+v", n.Name, n.VF)
		}
	}

	// The metrics: promlint clean, the split adding up.
	lintMetrics(t, r.d)
	_, m := get(t, r.d.MetricsAddr(), "/metrics")
	for _, want := range []string{
		`vmbusd_netvsc_vf_state{device="eth1",state="active"} 1`,
		`vmbusd_netvsc_vf_state{device="eth1",state="none"} 0`,
		fmt.Sprintf(`vmbusd_netvsc_vf_info{device="eth1",driver="mlx5_core",ifname=%q,matched_by="serial",mode="auto",pci=%q`,
			r.a.VF().Config().GuestIf, r.a.VF().BDF()),
	} {
		if !strings.Contains(m, want) {
			t.Fatalf("/metrics lacks %s:\n%s", want, grepLines(m, "vmbusd_netvsc_vf_"))
		}
	}
	if v := metricValue(t, m, `vmbusd_netvsc_datapath_receive_packets_total{device="eth1",path="vf"}`); v == 0 {
		t.Fatal("no VF receive in the metrics")
	}
	if v := metricValue(t, m, `vmbusd_netvsc_datapath_switches_total{device="eth1",reason="vf_ready"}`); v < 2 {
		t.Fatalf("vf_ready switches %v, want at least 2", v)
	}
	if v := metricValue(t, m, `vmbusd_netvsc_datapath_seconds_total{device="eth2",path="vf"}`); v <= 0 {
		t.Fatalf("eth2 spent %v s on its VF", v)
	}
	if v := r.h.Violations(); len(v) != 0 {
		t.Fatalf("the host counted violations: %v", v)
	}
}

// metricValue reads one series' value from a scrape.
func metricValue(t *testing.T, scrape, series string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(scrape)
	if m == nil {
		t.Fatalf("no %s in the scrape:\n%s", series, grepLines(scrape, series[:strings.IndexByte(series, '{')]))
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestReloadOfTheVFModeRestartsOnlyThatNIC: changing one NIC's vf restarts
// that NIC and no other, and its status shows the new mode.
func TestReloadOfTheVFModeRestartsOnlyThatNIC(t *testing.T) {
	r := newRig(t)
	r.start(t)
	waitFor(t, "traffic", func() bool { return forwarded(r) > 500 })
	since := r.nicState("eth2").Since
	if st := r.vf("eth1"); st.Mode != "auto" || st.State != "none" {
		t.Fatalf("eth1's VF by default: %+v, want auto with none associated", st)
	}
	lintMetrics(t, r.d)
	cfg := r.config()
	cfg.NICs[0].VF = config.VFOff
	ch, err := r.d.Reload(context.Background(), cfg)
	if err != nil || !slices.Equal(ch.Changed, []string{"eth1"}) || !slices.Equal(ch.Unchanged, []string{"eth2"}) {
		t.Fatalf("reload: %+v %v", ch, err)
	}
	waitFor(t, "eth1 up with the VF off", func() bool {
		st := r.nicState("eth1")
		return st.State == "up" && st.VF.Mode == "off" && st.VF.State == "off"
	})
	if st := r.nicState("eth2"); st.Since != since || st.Resets != 0 {
		t.Fatalf("eth2 touched by the reload: %+v", st)
	}
	before := forwarded(r)
	waitFor(t, "traffic after the reload", func() bool { return forwarded(r) > before+500 })
}

// lintMetrics fails on anything promlint finds in the daemon's series.
func lintMetrics(t *testing.T, d *daemon.Daemon) {
	t.Helper()
	mfs, err := d.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil || len(problems) > 0 {
		t.Fatalf("promlint: %v %+v", err, problems)
	}
}
