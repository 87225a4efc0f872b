package e2e

// Accelerated networking end to end: the simulated host's VF stand-in (a
// veth pair with its PCI picture under R) paired by the guest NIC, traffic
// moved to it and back through servicing, surprise removal, flaps and link
// recovery. Frames carry sequence numbers; the guest tells which path each
// one took (netvsc.MetaRxVF), so every check is per path.
//
// The VF's guest end lives in the test process's network namespace (the
// NIC finds its netdev in the current namespace, as on a real VM); every
// interface and namespace name carries the process id and is removed at
// cleanup.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"

	"github.com/vmbusd/vmbusd/afxdp"
	"github.com/vmbusd/vmbusd/frame"
	"github.com/vmbusd/vmbusd/internal/testutil"
	"github.com/vmbusd/vmbusd/netvsc"
	"github.com/vmbusd/vmbusd/nictap"
	"github.com/vmbusd/vmbusd/sim"
	"github.com/vmbusd/vmbusd/tap"
	"github.com/vmbusd/vmbusd/vmbus"
)

// TestVFFailoverGracefulServicing: traffic both ways starts synthetic, moves
// to the VF when it is hot-added, back to synthetic when the host services
// it, and to the VF again when it returns; nothing is lost or duplicated,
// unicast rides the VF while switched, broadcasts never do, and each path
// keeps its order.
func TestVFFailoverGracefulServicing(t *testing.T) {
	r := newVFRig(t, vfRigOpts{stand: sim.VFConfig{Offline: true}})
	if st := r.nic.VFStatus(); st.State != netvsc.VFStateNone || st.Path != netvsc.PathSynthetic {
		t.Fatalf("before the VF: %+v", st)
	}
	r.traffic()
	r.rx.waitPath(t, false, 200)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// Hot-add: the guest pairs it, switches, and unicast moves.
	t0 := time.Now()
	if err := r.vf.Add(ctx, sim.VFNetdevFirst); err != nil {
		t.Fatal(err)
	}
	r.waitSwitch(netvsc.PathVF, t0)
	st := r.waitVF(netvsc.VFStateActive)
	if st.MatchedBy != "serial" || st.IfName != r.vf.Config().GuestIf || st.PCI != r.vf.BDF() {
		t.Errorf("paired %q by %q (pci %s), want %s by serial (pci %s)", st.IfName, st.MatchedBy, st.PCI, r.vf.Config().GuestIf, r.vf.BDF())
	}
	r.rx.waitPath(t, true, 1000)

	// Graceful servicing and the return.
	t1 := time.Now()
	if err := r.vf.Remove(ctx, false); err != nil {
		t.Fatal(err)
	}
	off := r.waitSwitch(netvsc.PathSynthetic, t1)
	if off.Reason != netvsc.ReasonHostSwitch && off.Reason != netvsc.ReasonWithdrawn {
		t.Errorf("left the VF for %q, want the host's switch or the withdrawal", off.Reason)
	}
	r.rx.waitPath(t, false, 200)
	t2 := time.Now()
	if err := r.vf.Add(ctx, sim.VFNetdevFirst); err != nil {
		t.Fatal(err)
	}
	r.waitSwitch(netvsc.PathVF, t2)
	r.rx.waitPath(t, true, 500)
	acc := r.settle()

	// Nothing lost, nothing twice, either way.
	lost, dup := r.hostToGuest(acc)
	if len(lost) > 0 || len(dup) > 0 {
		t.Errorf("host->guest: %d of %d lost (%v), %d duplicated", len(lost), len(acc), head(lost), len(dup))
	}
	glost, gdup, greorder := r.guestToHost()
	if len(glost) > 0 || len(gdup) > 0 {
		t.Errorf("guest->host: %d of %d lost (%v), %d duplicated", len(glost), r.tx.sent.Load(), head(glost), len(gdup))
	}
	recs := r.rx.snapshot()
	cross := pathOrder(t, recs)
	// At most what one path holds in flight, per switch (3 here).
	if cross > 3*256 {
		t.Errorf("%d unicast frames reordered over 3 switches", cross)
	}

	// Per path, by when the host was handed each frame: nothing on the
	// VF before the host first steered there; unicast on the VF while it
	// steered (from processing the guest's switch to its own switch back);
	// broadcasts always synthetic.
	windows := r.steeringWindows(t0)
	if len(windows) != 2 {
		t.Fatalf("%d steering windows, want 2: %+v", len(windows), r.vf.Events())
	}
	r.port.mu.Lock()
	sentAt := r.port.sentAt
	r.port.mu.Unlock()
	var uniIn, uniVF, bcast, bcastVF int
	for _, rec := range recs {
		at, ok := sentAt[rec.seq]
		if !ok {
			continue // a marker
		}
		if rec.vf && at.Before(windows[0][0]) {
			t.Errorf("frame %d on the VF, sent before the host steered there", rec.seq)
		}
		if rec.kind == kindBcast {
			bcast++
			if rec.vf {
				bcastVF++
			}
			continue
		}
		for _, w := range windows {
			if at.After(w[0]) && at.Before(w[1]) {
				uniIn++
				if rec.vf {
					uniVF++
				}
			}
		}
	}
	if bcast == 0 || bcastVF != 0 {
		t.Errorf("%d of %d broadcasts arrived on the VF", bcastVF, bcast)
	}
	if uniIn == 0 || float64(uniVF) < 0.99*float64(uniIn) {
		t.Errorf("%d of %d unicast frames sent while the host steered to the VF came over it (want >= 99%%)", uniVF, uniIn)
	}
	// The counters agree with what the frames said.
	gst := r.nic.VFStatus()
	hst := r.sn.Stats().VF
	if gst.VF.RxPackets < uint64(uniVF) || hst.RxPackets != gst.VF.RxPackets || hst.TxPackets != gst.VF.TxPackets || gst.VF.TxPackets == 0 {
		t.Errorf("guest VF counters %+v, host VF counters %+v, frames seen on the VF %d", gst.VF, hst, uniVF)
	}
	if gst.Reasons[netvsc.ReasonVFReady] != 2 || gst.TimeVF <= 0 || gst.TimeSynthetic <= 0 {
		t.Errorf("switch reasons %v, time on VF %v, synthetic %v", gst.Reasons, gst.TimeVF, gst.TimeSynthetic)
	}
	t.Logf("host->guest %d frames (%d unicast while switched, %d on the VF; %d broadcasts), guest->host %d; "+
		"unicast reordered at the switches: %d host->guest, %d guest->host; time on VF %v, synthetic %v; attach %s/%s",
		len(acc), uniIn, uniVF, bcast, r.tx.sent.Load(), cross, greorder, gst.TimeVF.Round(time.Millisecond),
		gst.TimeSynthetic.Round(time.Millisecond), gst.Attach, gst.Bind)
	for _, e := range gst.Events {
		t.Logf("switch to %v (%s): seen %v, transmit moved +%v, done +%v", e.To, e.Reason, e.Observed.Format("15:04:05.000"),
			e.Switched.Sub(e.Observed).Round(time.Microsecond), e.Done.Sub(e.Observed).Round(time.Microsecond))
	}
}

func head(s []uint64) []uint64 { return s[:min(len(s), 10)] }

// strictTiming turns the latency figures the tests measure into checks
// (VMBUSD_STRICT_TIMING=1): on a loaded shared machine they are reported
// only.
var strictTiming = os.Getenv("VMBUSD_STRICT_TIMING") == "1"

// TestVFFailoverSurpriseRemoval: the VF's netdev vanishes under traffic.
// The guest sees it from rtnetlink or its sockets, long before the host's
// notice, loses at most what was in flight, and is back on the VF soon
// after it returns.
func TestVFFailoverSurpriseRemoval(t *testing.T) {
	r := newVFRig(t, vfRigOpts{stand: sim.VFConfig{NoticeDelay: 2 * time.Second}})
	r.traffic()
	r.waitVF(netvsc.VFStateActive)
	r.rx.waitPath(t, true, 500)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	t0 := time.Now()
	if err := r.vf.Remove(ctx, true); err != nil {
		t.Fatal(err)
	}
	off := r.waitSwitch(netvsc.PathSynthetic, t0)
	gone, _ := r.simEvent(sim.VFNetdevRemoved, t0)
	notice, _ := r.simEvent(sim.VFWithdrawalSent, t0)
	detect := off.Observed.Sub(gone.Time)
	switch off.Reason {
	case netvsc.ReasonNetdevRemoved, netvsc.ReasonDataPathError, netvsc.ReasonNetdevDown:
	default:
		t.Errorf("left the VF for %q, want the netdev's removal seen by the guest itself", off.Reason)
	}
	if !off.Observed.Before(notice.Time) {
		t.Errorf("the guest saw the removal only with the host's notice (%v after it)", off.Observed.Sub(notice.Time))
	}
	r.rx.waitPath(t, false, 200)
	t1 := time.Now()
	if err := r.vf.Add(ctx, sim.VFNetdevFirst); err != nil {
		t.Fatal(err)
	}
	back, _ := r.simEvent(sim.VFAssociationSent, t1)
	on := r.waitSwitch(netvsc.PathVF, t1)
	ret := on.Done.Sub(back.Time)
	r.rx.waitPath(t, true, 200)
	acc := r.settle()
	lost, dup := r.hostToGuest(acc)
	glost, gdup, _ := r.guestToHost()
	// In flight: what the VF's rings and the wire hold (RX and TX rings of
	// 256 here).
	const inFlight = 2 * 256
	if len(lost) > inFlight || len(glost) > inFlight || len(dup) > 0 || len(gdup) > 0 {
		t.Errorf("lost host->guest %d (%v), guest->host %d (%v); duplicated %d, %d", len(lost), head(lost), len(glost), head(glost), len(dup), len(gdup))
	}
	t.Logf("surprise removal: seen after %v (%s), the host's notice %v later; lost %d host->guest, %d guest->host of %d/%d; "+
		"back on the VF %v after the re-offer", detect.Round(time.Microsecond), off.Reason, notice.Time.Sub(gone.Time).Round(time.Millisecond),
		len(lost), len(glost), len(acc), r.tx.sent.Load(), ret.Round(time.Millisecond))
	if strictTiming && (detect > 200*time.Millisecond || ret > 2*time.Second) {
		t.Errorf("detection %v (want <= 200 ms), return %v (want <= 2 s)", detect, ret)
	}
}

// vfResources are what an attached VF holds in this process.
type vfResources struct{ goroutines, fds int }

func countResources(t *testing.T) vfResources {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return vfResources{runtime.NumGoroutine(), len(ents)}
}

// xdpProg returns the id of the XDP program attached to ifname, or 0.
func xdpProg(t *testing.T, ifname string) uint32 {
	l, err := netlink.LinkByName(ifname)
	if err != nil {
		return 0
	}
	if x := l.Attrs().Xdp; x != nil && x.Attached {
		return x.ProgId
	}
	return 0
}

// TestVFFlapsLeaveNothingBehind: ten remove/add cycles under traffic; the
// guest follows each, and when the NIC closes no goroutine, descriptor,
// XDP program or link of the VF path is left, and nothing is attached to
// the netdev.
func TestVFFlapsLeaveNothingBehind(t *testing.T) {
	needVF(t)
	base := countResources(t)
	r := newVFRig(t, vfRigOpts{stand: sim.VFConfig{RemoveDelay: 10 * time.Millisecond}})
	guestIf := r.vf.Config().GuestIf
	r.traffic()
	r.waitVF(netvsc.VFStateActive)
	progs := map[uint32]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	for i := 0; i < sim.FlapCycles; i++ {
		t0 := time.Now()
		if id := xdpProg(t, guestIf); id != 0 {
			progs[id] = true
		}
		if err := r.vf.Service(ctx, 20*time.Millisecond, sim.VFNetdevFirst); err != nil {
			t.Fatal(err)
		}
		r.waitSwitch(netvsc.PathVF, t0)
	}
	r.rx.waitPath(t, true, 100)
	st := r.nic.VFStatus()
	if st.Reasons[netvsc.ReasonVFReady] < sim.FlapCycles+1 {
		t.Errorf("switched to the VF %d times over %d flaps", st.Reasons[netvsc.ReasonVFReady], sim.FlapCycles)
	}
	if id := xdpProg(t, guestIf); id != 0 {
		progs[id] = true
	}
	acc := r.settle()
	lost, dup := r.hostToGuest(acc)
	glost, gdup, _ := r.guestToHost()
	if len(lost)+len(glost)+len(dup)+len(gdup) > 0 {
		t.Errorf("flaps lost %d/%d and duplicated %d/%d frames (host->guest/guest->host)", len(lost), len(glost), len(dup), len(gdup))
	}
	r.rx.stop()
	if err := r.nic.Close(); err != nil {
		t.Fatal(err)
	}
	if id := xdpProg(t, guestIf); id != 0 {
		t.Errorf("XDP program %d still attached to %s after Close", id, guestIf)
	}
	for id := range progs {
		if p, err := ebpf.NewProgramFromID(ebpf.ProgramID(id)); err == nil {
			p.Close()
			t.Errorf("XDP program %d still loaded after Close", id)
		} else if !errors.Is(err, os.ErrNotExist) {
			t.Logf("program %d: %v", id, err)
		}
	}
	if len(progs) < 2 {
		t.Errorf("saw %d XDP programs over the flaps: the VF was not re-attached", len(progs))
	}
	r.host.Close()
	if _, err := netlink.LinkByName(r.vf.Config().HostIf); err == nil {
		t.Errorf("veth %s left behind", r.vf.Config().HostIf)
	}
	// Resources the kernel frees from its work queues have no event to
	// wait on. Should the wait fail, its last count and every stack are
	// logged.
	var now vfResources
	defer func() {
		if now.goroutines > base.goroutines || now.fds > base.fds {
			buf := make([]byte, 1<<20)
			t.Logf("goroutines %d -> %d, fds %d -> %d\n%s", base.goroutines, now.goroutines, base.fds, now.fds, buf[:runtime.Stack(buf, true)])
		}
	}()
	testutil.WaitFor(t, 10*time.Second, func() bool {
		now = countResources(t)
		return now.goroutines <= base.goroutines && now.fds <= base.fds
	}, "the goroutines and fds to be back to their count before the rig")
	t.Logf("%d flaps: %d switches (%v), %d XDP programs, all gone", sim.FlapCycles, st.Switches, st.Reasons, len(progs))
}

// TestVFSlowProbeAndLinkRecovery: the association arrives long before the
// netdev (a slow driver probe): the guest waits without failing and
// switches once the netdev appears. Then the VF's link goes down without a
// removal: the guest goes synthetic, and back when the link returns.
func TestVFSlowProbeAndLinkRecovery(t *testing.T) {
	r := newVFRig(t, vfRigOpts{stand: sim.VFConfig{Offline: true, ProbeDelay: 1500 * time.Millisecond}})
	r.traffic()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	t0 := time.Now()
	if err := r.vf.Add(ctx, sim.VFAssociationFirst); err != nil {
		t.Fatal(err)
	}
	on := r.waitSwitch(netvsc.PathVF, t0)
	assoc, _ := r.simEvent(sim.VFAssociationSent, t0)
	netdev, _ := r.simEvent(sim.VFNetdevAdded, t0)
	if !assoc.Time.Before(netdev.Time) || on.Done.Before(netdev.Time) {
		t.Errorf("association %v, netdev %v, switch %v: want association < netdev < switch", assoc.Time, netdev.Time, on.Done)
	}
	st := r.nic.VFStatus()
	if st.Failures != 0 {
		t.Errorf("%d failed attempts while the netdev was missing (%s)", st.Failures, st.LastError)
	}
	r.rx.waitPath(t, true, 200)

	t1 := time.Now()
	if err := r.vf.SetLink(ctx, false); err != nil {
		t.Fatal(err)
	}
	off := r.waitSwitch(netvsc.PathSynthetic, t1)
	if off.Reason != netvsc.ReasonNetdevDown && off.Reason != netvsc.ReasonDataPathError {
		t.Errorf("left the VF for %q, want its link down", off.Reason)
	}
	r.rx.waitPath(t, false, 200)
	t2 := time.Now()
	if err := r.vf.SetLink(ctx, true); err != nil {
		t.Fatal(err)
	}
	back := r.waitSwitch(netvsc.PathVF, t2)
	r.rx.waitPath(t, true, 200)
	acc := r.settle()
	lost, dup := r.hostToGuest(acc)
	if len(dup) > 0 || len(lost) > 2*256 {
		t.Errorf("lost %d, duplicated %d", len(lost), len(dup))
	}
	t.Logf("slow probe: association %v before the netdev, switched %v after it (%d attempts); link down seen after %v, back %v after link up",
		netdev.Time.Sub(assoc.Time).Round(time.Millisecond), on.Done.Sub(netdev.Time).Round(time.Millisecond), st.Attempts,
		off.Observed.Sub(t1).Round(time.Microsecond), back.Done.Sub(t2).Round(time.Millisecond))
}

// TestVFRequiredWaitsForTheVF: a required VF that never comes fails Open;
// one that comes lets it return with the data path on the VF.
func TestVFRequiredWaitsForTheVF(t *testing.T) {
	needVF(t)
	for _, offline := range []bool{true, false} {
		t.Run(fmt.Sprintf("offline=%v", offline), func(t *testing.T) {
			host, guest := vfNames()
			h, err := sim.New(sim.Config{Root: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { h.Close() })
			sn, err := h.AddNIC(sim.NICConfig{VF: 5, VFDelay: 10 * time.Millisecond,
				VFStandIn: &sim.VFConfig{HostIf: host, GuestIf: guest, Offline: offline}})
			if err != nil {
				t.Fatal(err)
			}
			sn.Attach(sim.NewReflector())
			dev, err := vmbus.LookupDevice(h.Root(), sn.Device().Instance())
			if err != nil {
				t.Fatal(err)
			}
			nic, err := netvsc.Open(context.Background(), dev, netvsc.Config{VF: netvsc.VFRequired, VFTimeout: 3 * time.Second,
				VFXDP: afxdp.Config{RingSize: 256}})
			if offline {
				if !errors.Is(err, netvsc.ErrNoVF) {
					t.Fatalf("Open without a VF: %v, want ErrNoVF", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer nic.Close()
			if st := nic.VFStatus(); st.State != netvsc.VFStateActive || st.Path != netvsc.PathVF {
				t.Fatalf("after Open: %v on %v", st.State, st.Path)
			}
		})
	}
}

// TestVFTCPThroughTAPSurvivesServicing: TCP through the TAP (guest
// namespace) to the host's namespace keeps its connections, byte for byte,
// while the VF is serviced under it; the TAP hands over 64 KiB super-frames,
// which the NIC segments for the VF.
func TestVFTCPThroughTAPSurvivesServicing(t *testing.T) {
	needRoot(t)
	needVF(t)
	id := fmt.Sprintf("%d%d", os.Getpid()%10000, time.Now().UnixNano()%1000)
	rg := &rig{hostNS: "vfth" + id, guestNS: "vftg" + id}
	netnsAdd(t, rg.hostNS)
	netnsAdd(t, rg.guestNS)
	port, err := sim.NewTAP(sim.TAPConfig{Netns: rg.hostNS, Name: "hv0", Addr: hostAddr})
	if err != nil {
		t.Fatal(err)
	}
	r := newVFRig(t, vfRigOpts{port: port})
	rg.host, rg.sn, rg.port, rg.nic = r.host, r.sn, port, r.nic
	rg.dev, err = tap.Create(tap.Config{Name: "vmbusd0", Queues: len(r.nic.Queues()), MAC: r.nic.MAC(), MTU: r.nic.MTU(),
		Netns: rg.guestNS, Addr: guestAddr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rg.dev.Close() })
	rg.att, err = nictap.Attach(r.nic, rg.dev, nictap.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rg.att.Close() })
	r.waitVF(netvsc.VFStateActive)
	if ping(t, rg.guestNS, hostAddr.Addr(), 1) != 1 {
		t.Fatal("no connectivity")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	served := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		<-started
		before := r.nic.VFStatus().VF
		// Let the transfer ride the VF first, then service it under the
		// connection.
		r.waitVFBytes(ctx, before.RxBytes+1<<20)
		served <- r.vf.Service(ctx, 300*time.Millisecond, sim.VFNetdevFirst)
	}()
	close(started)
	start := time.Now()
	transfer(t, rg, 2, 24<<20)
	el := time.Since(start)
	var serr error
	select {
	case serr = <-served:
	case <-ctx.Done():
		serr = ctx.Err()
	}
	if serr != nil {
		t.Fatalf("servicing: %v", serr)
	}
	st := r.nic.VFStatus()
	if st.Reasons[netvsc.ReasonVFReady] < 1 || st.VF.TxPackets == 0 || st.VF.RxPackets == 0 {
		t.Errorf("the transfer did not ride the VF: %+v", st)
	}
	t.Logf("2 x 24 MiB each way in %v with a servicing event; VF %+v, synthetic %+v; switches %v", el, st.VF, st.Synthetic, st.Reasons)
}

// waitVFBytes waits until the VF received at least n bytes.
func (r *vfRig) waitVFBytes(ctx context.Context, n uint64) {
	for r.nic.VFStatus().VF.RxBytes < n {
		t := time.NewTimer(10 * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// nullPort swallows what the guest sends and lets the test deliver.
type nullPort struct{ up sim.Uplink }

func (p *nullPort) Connect(up sim.Uplink) error { p.up = up; return nil }
func (p *nullPort) Transmit([][]byte)           {}
func (p *nullPort) Close() error                { return nil }

// TestVFBurstsDoNotAllocate: on the VF, a transmit burst and a receive
// burst (with the host's side of each) allocate nothing in steady state.
func TestVFBurstsDoNotAllocate(t *testing.T) {
	port := &nullPort{}
	r := newVFRig(t, vfRigOpts{port: port})
	q := r.nic.Queues()[0]
	// Nobody receives yet: the manager needs queue 0 drained to see the
	// association.
	rx := startGuestRx(r.nic)
	r.waitVF(netvsc.VFStateActive)
	rx.stop()
	const burst = 32
	pkts := make([]*frame.Packet, burst)
	mac := r.nic.MAC()
	tx := func() {
		k := q.AllocBurst(pkts)
		for i := range k {
			putVFFrame(pkts[i].Buffer(), vfPeerMAC, mac, kindUnicast, uint64(i))
			pkts[i].SetLen(vfFrameLen)
		}
		for sent := 0; sent < k; {
			sent += q.TxBurst(pkts[sent:k])
		}
	}
	frames := make([][]byte, burst)
	for i := range frames {
		frames[i] = putVFFrame(make([]byte, vfFrameLen), mac, vfPeerMAC, kindUnicast, uint64(i))
	}
	in := make([]*frame.Packet, burst)
	rxb := func() {
		port.up.Deliver(frames)
		for got := 0; got < burst; {
			n := q.RxBurst(in)
			for _, p := range in[:n] {
				if p.Meta.Flags&netvsc.MetaRxVF == 0 {
					t.Fatal("a frame came synthetic")
				}
			}
			frame.PutBurst(in[:n])
			got += n
		}
	}
	for range 50 { // warm up: pools, rings, the runtime's caches
		tx()
		rxb()
	}
	if a := testing.AllocsPerRun(200, tx); a != 0 {
		t.Errorf("VF transmit burst: %.1f allocs", a)
	}
	if a := testing.AllocsPerRun(200, rxb); a != 0 {
		t.Errorf("VF receive burst: %.1f allocs", a)
	}
}

// BenchmarkVFPath moves 64-byte frames in bursts of 32 through the guest
// NIC's queue on the synthetic path and on the VF (copy-mode AF_XDP on a
// veth), the simulated host's side included, one direction at a time.
func BenchmarkVFPath(b *testing.B) {
	for _, path := range []string{"synthetic", "vf"} {
		for _, dir := range []string{"tx", "rx"} {
			b.Run(path+"/"+dir, func(b *testing.B) { benchVFPath(b, path == "vf", dir == "tx") })
		}
	}
}

func benchVFPath(b *testing.B, vf, tx bool) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	port := &nullPort{}
	host, guest := vfNames()
	h, err := sim.New(sim.Config{Root: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	sn, err := h.AddNIC(sim.NICConfig{VF: 3, VFDelay: time.Millisecond, MaxQueues: 1,
		VFStandIn: &sim.VFConfig{HostIf: host, GuestIf: guest, Offline: !vf}})
	if err != nil {
		b.Skipf("VF stand-in: %v", err)
	}
	sn.Attach(port)
	dev, err := vmbus.LookupDevice(h.Root(), sn.Device().Instance())
	if err != nil {
		b.Fatal(err)
	}
	nic, err := netvsc.Open(context.Background(), dev, netvsc.Config{VF: netvsc.VFAuto, VFXDP: afxdp.Config{RingSize: 1024}})
	if err != nil {
		b.Fatal(err)
	}
	defer nic.Close()
	q := nic.Queues()[0]
	in := make([]*frame.Packet, 64)
	if vf {
		testutil.WaitFor(b, 0, func() bool {
			frame.PutBurst(in[:q.RxBurst(in)]) // drains the association in
			return nic.VFStatus().State == netvsc.VFStateActive
		}, "the VF data path")
	}
	const burst = 32
	mac := nic.MAC()
	pkts := make([]*frame.Packet, burst)
	frames := make([][]byte, burst)
	for i := range frames {
		frames[i] = putVFFrame(make([]byte, vfFrameLen), mac, vfPeerMAC, kindUnicast, uint64(i))
		frames[i] = frames[i][:64]
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.SetBytes(burst * 64)
	b.ResetTimer()
	for range b.N {
		if tx {
			k := q.AllocBurst(pkts)
			for i := range k {
				copy(pkts[i].Buffer(), frames[i])
				pkts[i].SetLen(64)
			}
			for sent := 0; sent < k; {
				if n := q.TxBurst(pkts[sent:k]); n > 0 {
					sent += n
				} else if err := q.WaitTx(ctx); err != nil {
					b.Fatal(err)
				}
			}
			continue
		}
		port.up.Deliver(frames)
		for got := 0; got < burst; {
			n := q.RxBurst(in)
			frame.PutBurst(in[:n])
			got += n
			if n == 0 {
				if err := q.Wait(ctx); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*burst)/b.Elapsed().Seconds(), "frames/s")
}
