package e2e

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/vmbusd/vmbusd/afxdp"
	"github.com/vmbusd/vmbusd/frame"
	"github.com/vmbusd/vmbusd/netvsc"
	"github.com/vmbusd/vmbusd/sim"
	"github.com/vmbusd/vmbusd/vmbus"
)

// The VF failover tests' rig: a simulated host with a VF stand-in, a
// sequence-numbering vSwitch port, the guest's receive and transmit loops,
// and the accounting that checks what arrived on which path.

// Test frames: EtherType 0x88b5 (local experimental), "VFT1", a kind and
// a sequence number per direction.
const (
	vfEtherType = 0x88b5
	kindUnicast = 0
	kindBcast   = 1
	kindMarker  = 2 // the end of a run, on the path frames take then
	vfFrameLen  = 128
)

var vfPeerMAC = net.HardwareAddr{0x02, 0x00, 0x5e, 0x00, 0x53, 0x01}

func putVFFrame(b []byte, dst, src net.HardwareAddr, kind byte, seq uint64) []byte {
	b = b[:vfFrameLen]
	clear(b)
	copy(b[0:6], dst)
	copy(b[6:12], src)
	binary.BigEndian.PutUint16(b[12:], vfEtherType)
	copy(b[14:18], "VFT1")
	b[18] = kind
	binary.BigEndian.PutUint64(b[19:], seq)
	return b
}

func parseVFFrame(b []byte) (kind byte, seq uint64, ok bool) {
	if len(b) < 27 || binary.BigEndian.Uint16(b[12:]) != vfEtherType || string(b[14:18]) != "VFT1" {
		return 0, 0, false
	}
	return b[18], binary.BigEndian.Uint64(b[19:]), true
}

var vfSeq atomic.Uint32

// vfNames returns interface names unique to this process and call.
func vfNames() (host, guest string) {
	id := fmt.Sprintf("%d%d", os.Getpid()%100000, vfSeq.Add(1))
	return "vfh" + id, "vfg" + id
}

// needVF skips unless the test may create veth pairs and attach XDP.
func needVF(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (veth pairs, XDP, network namespaces)")
	}
	h, g := vfNames()
	la := netlink.NewLinkAttrs()
	la.Name = h
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: g, PeerTxQLen: -1}); err != nil {
		t.Skipf("the kernel refuses a veth pair: %v", err)
	}
	defer func() {
		if l, err := netlink.LinkByName(h); err == nil {
			netlink.LinkDel(l)
		}
	}()
	p, err := afxdp.NewProgram(1)
	if err != nil {
		t.Skipf("the kernel refuses XDP: %v", err)
	}
	p.Close()
}

// vfRig is a simulated host NIC with a VF stand-in whose port is a frame
// source and sink, and the guest NIC with the VF in auto mode.
type vfRig struct {
	t    *testing.T
	host *sim.Host
	sn   *sim.NIC
	vf   *sim.VF
	nic  *netvsc.NIC
	port *seqPort
	rx   *guestRx
	tx   *guestTx
}

type vfRigOpts struct {
	stand sim.VFConfig
	nic   netvsc.Config
	port  sim.Port // nil: a seqPort
}

func newVFRig(t *testing.T, o vfRigOpts) *vfRig {
	t.Helper()
	needVF(t)
	host, guest := vfNames()
	if o.stand.HostIf == "" {
		o.stand.HostIf, o.stand.GuestIf = host, guest
	}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(o.stand.HostIf); err == nil {
			netlink.LinkDel(l)
		}
	})
	r := &vfRig{t: t}
	var err error
	r.host, err = sim.New(sim.Config{Root: t.TempDir(), Profile: sim.DefaultProfile})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.host.Close() })
	r.sn, err = r.host.AddNIC(sim.NICConfig{VF: 3, VFDelay: 10 * time.Millisecond, VFStandIn: &o.stand,
		MaxQueues: max(1, o.nic.Queues), LinkSpacing: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r.vf = r.sn.VF()
	p := o.port
	if p == nil {
		r.port = newSeqPort()
		p = r.port
	}
	if err := r.sn.Attach(p); err != nil {
		t.Fatal(err)
	}
	dev, err := vmbus.LookupDevice(r.host.Root(), r.sn.Device().Instance())
	if err != nil {
		t.Fatal(err)
	}
	cfg := o.nic
	cfg.VF = netvsc.VFAuto
	if cfg.VFXDP.RingSize == 0 {
		cfg.VFXDP.RingSize = 256
	}
	cfg.ControlTimeout, cfg.SubchannelTimeout = 10*time.Second, time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r.nic, err = netvsc.Open(ctx, dev, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.nic.Close() })
	return r
}

// waitVF waits until the guest's VF state is want (the deadline only
// stops a hung test).
func (r *vfRig) waitVF(want netvsc.VFState) netvsc.VFStatus {
	r.t.Helper()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for {
		ch := r.nic.VFChanged()
		st := r.nic.VFStatus()
		if st.State == want {
			return st
		}
		select {
		case <-ch:
		case <-deadline.C:
			r.t.Fatalf("VF state %v, want %v (last error %q)", st.State, want, st.LastError)
		}
	}
}

// waitEvent waits for the guest's n-th switch event to path to.
func (r *vfRig) waitSwitch(to netvsc.Path, after time.Time) netvsc.VFEvent {
	r.t.Helper()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for {
		ch := r.nic.VFChanged()
		for _, e := range r.nic.VFStatus().Events {
			if e.To == to && (to == netvsc.PathSynthetic || e.Reason == netvsc.ReasonVFReady) && !e.Done.Before(after) {
				return e
			}
		}
		select {
		case <-ch:
		case <-deadline.C:
			r.t.Fatalf("no switch to %v after %v: events %+v", to, after, r.nic.VFStatus().Events)
		}
	}
}

// steeringWindows returns the host's steering to the VF since t: from each
// guest switch it processed to the first of its own switch back, the
// guest's switch back, or the VF's removal (or now).
func (r *vfRig) steeringWindows(since time.Time) [][2]time.Time {
	var out [][2]time.Time
	var open *time.Time
	for _, e := range r.vf.Events() {
		if e.Time.Before(since) {
			continue
		}
		switch e.Kind {
		case sim.VFGuestSwitchVF:
			if open == nil {
				t := e.Time
				open = &t
			}
		case sim.VFHostSwitchSent, sim.VFGuestSwitchSynth, sim.VFNetdevRemoved, sim.VFLinkDown:
			if open != nil {
				out = append(out, [2]time.Time{*open, e.Time})
				open = nil
			}
		}
	}
	if open != nil {
		out = append(out, [2]time.Time{*open, time.Now()})
	}
	return out
}

// simEvent returns the first stand-in event of kind at or after since.
func (r *vfRig) simEvent(kind sim.VFEventKind, since time.Time) (sim.VFEvent, bool) {
	for _, e := range r.vf.Events() {
		if e.Kind == kind && !e.Time.Before(since) {
			return e, true
		}
	}
	return sim.VFEvent{}, false
}

// seqPort is the host side's traffic: it sends sequence-numbered unicast
// frames to the guest at a fixed rate, a broadcast every bcastEvery, and
// records the guest's frames.
type seqPort struct {
	up sim.Uplink

	mu       sync.Mutex
	got      map[uint64]int // guest->host seq -> copies
	order    []uint64
	accepted map[uint64]byte      // host->guest frames the host took, by seq -> kind
	sentAt   map[uint64]time.Time // and when each was handed to the host
	more     chan struct{}
	stop     chan struct{}
	wg       sync.WaitGroup
	sent     atomic.Uint64
	next     uint64 // the generator's next seq (read after it stopped)
}

func newSeqPort() *seqPort {
	return &seqPort{got: map[uint64]int{}, accepted: map[uint64]byte{}, sentAt: map[uint64]time.Time{}, more: make(chan struct{}, 1)}
}

func (p *seqPort) Connect(up sim.Uplink) error { p.up = up; return nil }
func (p *seqPort) Close() error                { return nil }

func (p *seqPort) Transmit(frames [][]byte) {
	p.mu.Lock()
	for _, f := range frames {
		if _, seq, ok := parseVFFrame(f); ok {
			p.got[seq]++
			p.order = append(p.order, seq)
		}
	}
	p.mu.Unlock()
	select {
	case p.more <- struct{}{}:
	default:
	}
}

// start sends perTick frames every tick until stopTraffic.
func (p *seqPort) start(perTick int, tick time.Duration, bcastEvery uint64) {
	p.stop = make(chan struct{})
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(tick)
		defer t.Stop()
		buf := make([]byte, vfFrameLen)
		one := make([][]byte, 1)
		mac := p.up.MAC()
		seq := uint64(1)
		defer func() { p.next = seq }()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
			}
			for i := 0; i < perTick; i++ {
				kind, dst := byte(kindUnicast), mac
				if seq%bcastEvery == 0 {
					kind, dst = kindBcast, net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
				}
				one[0] = putVFFrame(buf, dst, vfPeerMAC, kind, seq)
				at := time.Now()
				if p.up.Deliver(one) == 1 {
					p.mu.Lock()
					p.accepted[seq] = kind
					p.sentAt[seq] = at
					p.mu.Unlock()
				}
				p.sent.Add(1)
				seq++
			}
		}
	}()
}

func (p *seqPort) stopTraffic() {
	if p.stop != nil {
		close(p.stop)
		p.wg.Wait()
		p.stop = nil
	}
}

// waitFor waits until the port got seq (the deadline only stops a hung
// test) and reports whether it did.
func (p *seqPort) waitFor(d time.Duration, seq uint64) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		got := p.got[seq] > 0
		p.mu.Unlock()
		if got {
			return true
		}
		select {
		case <-p.more:
		case <-deadline.C:
			return false
		}
	}
}

// rxRecord is one frame the guest received.
type rxRecord struct {
	seq  uint64
	kind byte
	vf   bool
	at   time.Time
}

// guestRx drains the guest NIC's queues and records every test frame.
type guestRx struct {
	mu      sync.Mutex
	recs    []rxRecord
	byPath  [2]int
	changed chan struct{}
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

func startGuestRx(nic *netvsc.NIC) *guestRx {
	g := &guestRx{changed: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel = cancel
	for _, q := range nic.Queues() {
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			pkts := make([]*frame.Packet, 64)
			for ctx.Err() == nil {
				n := q.RxBurst(pkts)
				if n == 0 {
					if err := q.Wait(ctx); err != nil {
						return
					}
					continue
				}
				now := time.Now()
				g.mu.Lock()
				for _, pk := range pkts[:n] {
					if kind, seq, ok := parseVFFrame(pk.Data()); ok {
						vf := pk.Meta.Flags&netvsc.MetaRxVF != 0
						g.recs = append(g.recs, rxRecord{seq: seq, kind: kind, vf: vf, at: now})
						if vf {
							g.byPath[1]++
						} else {
							g.byPath[0]++
						}
					}
					pk.Free()
				}
				close(g.changed)
				g.changed = make(chan struct{})
				g.mu.Unlock()
			}
		}()
	}
	return g
}

func (g *guestRx) stop() {
	g.cancel()
	g.wg.Wait()
}

// waitFor waits until cond (called under the lock) holds; false after d.
func (g *guestRx) waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		g.mu.Lock()
		ok, ch := cond(), g.changed
		g.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-deadline.C:
			return false
		}
	}
}

func (g *guestRx) snapshot() []rxRecord {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.recs)
}

// waitPath waits until n more frames arrived on the VF (vf) or synthetic
// path than now.
func (g *guestRx) waitPath(t *testing.T, vf bool, n int) {
	t.Helper()
	i := 0
	if vf {
		i = 1
	}
	g.mu.Lock()
	target := g.byPath[i] + n
	g.mu.Unlock()
	if !g.waitFor(30*time.Second, func() bool { return g.byPath[i] >= target }) {
		t.Fatalf("fewer than %d frames on the %s path", n, map[bool]string{false: "synthetic", true: "VF"}[vf])
	}
}

// guestTx sends sequence-numbered frames to the peer from queue 0 at a
// fixed rate, never dropping one: a full queue is waited for.
type guestTx struct {
	sent   atomic.Uint64
	cancel context.CancelFunc
	done   chan struct{}
}

func startGuestTx(nic *netvsc.NIC, perTick int, tick time.Duration) *guestTx {
	g := &guestTx{done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel = cancel
	q := nic.Queues()[0]
	mac := nic.MAC()
	go func() {
		defer close(g.done)
		t := time.NewTicker(tick)
		defer t.Stop()
		pkts := make([]*frame.Packet, perTick)
		for seq := uint64(1); ; {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			k := 0
			for k < perTick {
				p := q.Alloc()
				if p == nil {
					break
				}
				putVFFrame(p.Buffer(), vfPeerMAC, mac, kindUnicast, seq)
				p.SetLen(vfFrameLen)
				pkts[k] = p
				k++
				seq++
			}
			for sent := 0; sent < k; {
				sent += q.TxBurst(pkts[sent:k])
				if sent < k {
					if err := q.WaitTx(ctx); err != nil {
						frame.PutBurst(pkts[sent:k])
						return
					}
				}
			}
			g.sent.Add(uint64(k))
		}
	}()
	return g
}

func (g *guestTx) stop() {
	g.cancel()
	<-g.done
}

// traffic starts both directions: 2 frames every millisecond each way, a
// broadcast every 16th host frame.
func (r *vfRig) traffic() {
	r.port.start(2, time.Millisecond, 16)
	r.rx = startGuestRx(r.nic)
	r.tx = startGuestTx(r.nic, 2, time.Millisecond)
	r.t.Cleanup(func() {
		r.port.stopTraffic()
		r.tx.stop()
		r.rx.stop()
	})
}

// settle stops the traffic and waits until everything sent arrived or
// nothing more comes; it returns the host->guest frames the host accepted.
//
// Each path delivers in order, so a marker sent after the traffic on every
// path a frame could take (a unicast frame and a broadcast to the guest, a
// frame from the guest) arrives after everything before it that was not
// lost: once the markers are in, what is missing is lost.
func (r *vfRig) settle() map[uint64]byte {
	r.t.Helper()
	r.port.stopTraffic()
	r.tx.stop()
	r.port.mu.Lock()
	acc := make(map[uint64]byte, len(r.port.accepted))
	for k, v := range r.port.accepted {
		acc[k] = v
	}
	r.port.mu.Unlock()
	m1, m2 := r.port.next, r.port.next+1
	mac := r.port.up.MAC()
	for _, m := range []struct {
		seq uint64
		dst net.HardwareAddr
	}{{m1, mac}, {m2, net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}} {
		if r.port.up.Deliver([][]byte{putVFFrame(make([]byte, vfFrameLen), m.dst, vfPeerMAC, kindMarker, m.seq)}) != 1 {
			r.t.Fatal("the host refused a marker frame")
		}
	}
	if !r.rx.waitFor(30*time.Second, func() bool {
		got := 0
		for _, rec := range r.rx.recs {
			if rec.seq == m1 || rec.seq == m2 {
				got++
			}
		}
		return got == 2
	}) {
		r.t.Fatal("the markers never reached the guest")
	}
	gm := r.tx.sent.Load() + 1
	q := r.nic.Queues()[0]
	p := q.Alloc()
	putVFFrame(p.Buffer(), vfPeerMAC, r.nic.MAC(), kindMarker, gm)
	p.SetLen(vfFrameLen)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for q.TxBurst([]*frame.Packet{p}) == 0 {
		if err := q.WaitTx(ctx); err != nil {
			r.t.Fatal(err)
		}
	}
	if !r.port.waitFor(30*time.Second, gm) {
		r.t.Fatal("the guest's marker never reached the host")
	}
	if v := r.host.Violations(); len(v) != 0 {
		r.t.Errorf("host violations: %v", v)
	}
	return acc
}

// loss returns what the guest lost and duplicated of the accepted frames.
func (r *vfRig) hostToGuest(acc map[uint64]byte) (lost, dup []uint64) {
	seen := map[uint64]int{}
	for _, rec := range r.rx.snapshot() {
		seen[rec.seq]++
	}
	for s := range acc {
		if seen[s] == 0 {
			lost = append(lost, s)
		}
	}
	for s, n := range seen {
		if n > 1 {
			dup = append(dup, s)
		}
	}
	slices.Sort(lost)
	return lost, dup
}

func (r *vfRig) guestToHost() (lost, dup []uint64, reorders int) {
	r.port.mu.Lock()
	defer r.port.mu.Unlock()
	n := r.tx.sent.Load()
	for s := uint64(1); s <= n; s++ {
		switch c := r.port.got[s]; {
		case c == 0:
			lost = append(lost, s)
		case c > 1:
			dup = append(dup, s)
		}
	}
	var hi uint64
	for _, s := range r.port.order {
		if s < hi {
			reorders++
		}
		hi = max(hi, s)
	}
	return lost, dup, reorders
}

// pathOrder checks that each path delivered its frames in order (then
// every reordering is one path overtaking the other) and counts the
// unicast frames that arrived behind a later unicast frame: the switches'
// reordering, as unicast uses both paths only around a switch (a
// broadcast, always synthetic, can overtake unicast on the VF at any time).
func pathOrder(t *testing.T, recs []rxRecord) (unicastReorders int) {
	t.Helper()
	var hi [2]uint64
	var uni uint64
	for _, r := range recs {
		p := 0
		if r.vf {
			p = 1
		}
		if r.seq <= hi[p] {
			t.Errorf("frame %d arrived after %d on the same path (vf=%v)", r.seq, hi[p], r.vf)
		}
		hi[p] = r.seq
		if r.kind != kindUnicast {
			continue
		}
		if r.seq < uni {
			unicastReorders++
		}
		uni = max(uni, r.seq)
	}
	return unicastReorders
}
