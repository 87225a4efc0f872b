package netvsp

// A minimal scripted netvsc guest for the NetVSP's tests: raw vmbus
// channels and the netvsc encoders, nothing of a driver beyond what each
// test scripts. It reads the host's packets copied out of the ring, so
// tests can inspect every field the host wrote.

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vmbusd/vmbusd/netvsc/nvsp"
	"github.com/vmbusd/vmbusd/netvsc/rndis"
	"github.com/vmbusd/vmbusd/sim/bus"
	"github.com/vmbusd/vmbusd/sim/vswitch"
	"github.com/vmbusd/vmbusd/vmbus"
)

// gpkt is a packet the guest read, copied.
type gpkt struct {
	ch    int
	typ   vmbus.PacketType
	flags uint16
	tid   uint64
	off8  uint16
	raw   []byte
}

func (p gpkt) payload() []byte { return p.raw[int(p.off8)*8:] }

func (p gpkt) nvspType() nvsp.Type {
	t, _ := nvsp.MessageType(p.payload())
	return t
}

// xferRange is one range of a transfer-page packet.
type xferRange struct{ count, offset uint32 }

func (p *gpkt) xfer() (set uint16, ranges []xferRange) {
	set = binary.LittleEndian.Uint16(p.raw[16:])
	n := int(binary.LittleEndian.Uint32(p.raw[20:]))
	for i := 0; i < n && 24+8*i+8 <= int(p.off8)*8; i++ {
		b := p.raw[24+8*i:]
		ranges = append(ranges, xferRange{binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint32(b[4:])})
	}
	return set, ranges
}

type tguestOpts struct {
	nic    NICConfig
	prof   bus.Profile
	noOpen bool
	maxPkt int
}

type tguest struct {
	t   testing.TB
	h   *bus.Host
	nic *NIC
	hd  *vmbus.Handle
	chs []*vmbus.Channel

	recv, send           []byte
	recvGPADL, sendGPADL uint32
	mem                  []byte // R/dev/guestmem (GPA-direct, file model)

	version           uint32
	subSize, subCount uint32
	secSize, secCount uint32
	nextSec           uint32
	tid               uint64
	rid               uint32

	backlog []gpkt
	port    *capturePort
}

// newTGuest starts a host with one NIC (attached to a capture port) and
// opens it.
func newTGuest(t testing.TB, o tguestOpts) *tguest {
	t.Helper()
	root := t.TempDir()
	h, err := bus.New(bus.Config{Root: root, Profile: o.prof})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	if o.nic.WakeTimeout == 0 {
		o.nic.WakeTimeout = 20 * time.Millisecond
	}
	if o.nic.RingSize == 0 {
		o.nic.RingSize = 256 << 10
		o.nic.SubchannelRingSize = 256 << 10
	}
	if o.nic.RecvBuffer == 0 {
		o.nic.RecvBuffer, o.nic.SendBuffer = 4<<20, 1<<20
	}
	if o.nic.GuestMemSize == 0 {
		o.nic.GuestMemSize = 4 << 20
	}
	n, err := AddNIC(h, o.nic)
	if err != nil {
		t.Fatal(err)
	}
	g := &tguest{t: t, h: h, nic: n, tid: 100, rid: 1, port: newCapturePort()}
	if err := n.Attach(g.port); err != nil {
		t.Fatal(err)
	}
	if !o.noOpen {
		g.open(o.maxPkt)
	}
	return g
}

func (g *tguest) open(maxPkt int) {
	g.t.Helper()
	dev, err := vmbus.LookupDevice(g.h.Root(), g.nic.Device().Instance())
	if err != nil {
		g.t.Fatal(err)
	}
	if maxPkt == 0 {
		maxPkt = 64 << 10
	}
	hd, err := vmbus.Open(dev, vmbus.Options{MaxPacket: maxPkt, WakeTimeout: 20 * time.Millisecond})
	if err != nil {
		g.t.Fatal(err)
	}
	g.t.Cleanup(func() { hd.Close() })
	g.hd = hd
	g.chs = []*vmbus.Channel{hd.Primary()}
	var ok bool
	if g.recvGPADL, g.recv, ok = hd.GPADL("recv"); !ok {
		g.t.Fatal("no recv map")
	}
	if g.sendGPADL, g.send, ok = hd.GPADL("send"); !ok {
		g.t.Fatal("no send map")
	}
	if g.nic.Config().Memory == bus.GuestMemFile {
		f, err := os.OpenFile(filepath.Join(g.h.Root(), bus.GuestMemPath), os.O_RDWR, 0)
		if err != nil {
			g.t.Fatal(err)
		}
		st, _ := f.Stat()
		g.mem, err = unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		f.Close()
		if err != nil {
			g.t.Fatal(err)
		}
		g.t.Cleanup(func() { unix.Munmap(g.mem) })
	}
}

// close closes the device (the guest's last close).
func (g *tguest) close() {
	g.hd.Close()
	s := g.nic.Device().Session()
	if s != nil {
		select {
		case <-s.Done():
		case <-time.After(10 * time.Second):
			g.t.Fatal("session did not end")
		}
	}
}

const tgWait = 10 * time.Second

// sendPkt writes one packet on channel ch and publishes it.
func (g *tguest) sendPkt(ch int, typ vmbus.PacketType, flags uint16, tid uint64, hdr []byte, payload ...[]byte) {
	g.t.Helper()
	c := g.chs[ch]
	ctx, cancel := context.WithTimeout(context.Background(), tgWait)
	defer cancel()
	for {
		err := c.Send(typ, flags, tid, hdr, payload...)
		var full *vmbus.RingFullError
		if errors.As(err, &full) {
			c.Flush()
			if err := c.WaitWritable(ctx, full.Need); err != nil {
				g.t.Fatalf("guest send: %v", err)
			}
			continue
		}
		if err != nil {
			g.t.Fatalf("guest send: %v", err)
		}
		break
	}
	if err := c.Flush(); err != nil {
		g.t.Fatal(err)
	}
}

func (g *tguest) newTID() uint64 { g.tid++; return g.tid }

// nvsp sends an NVSP message inband, with a completion requested when rc.
func (g *tguest) nvsp(msg []byte, rc bool) uint64 {
	tid := g.newTID()
	var fl uint16
	if rc {
		fl = vmbus.FlagCompletionRequested
	}
	g.sendPkt(0, vmbus.PacketInband, fl, tid, nil, msg)
	return tid
}

// read returns the next packet on channel ch, or false after d.
func (g *tguest) read(ch int, d time.Duration) (gpkt, bool) {
	c := g.chs[ch]
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for {
		p, err := c.Recv()
		if err == nil {
			c.CommitRecv()
			return gpkt{ch: ch, typ: p.Type, flags: p.Flags, tid: p.TransID, off8: p.Offset8, raw: slices.Clone(p.Raw)}, true
		}
		if err != vmbus.ErrRingEmpty {
			g.t.Fatalf("guest recv on channel %d: %v", ch, err)
		}
		if err := c.WaitReadable(ctx); err != nil {
			return gpkt{}, false
		}
	}
}

// next returns the next packet on channel ch that match accepts, keeping
// the others (on any channel) for later; fatal after tgWait.
func (g *tguest) next(ch int, match func(*gpkt) bool) gpkt {
	g.t.Helper()
	for i, p := range g.backlog {
		if p.ch == ch && match(&p) {
			g.backlog = slices.Delete(g.backlog, i, i+1)
			return p
		}
	}
	deadline := time.Now().Add(tgWait)
	for time.Now().Before(deadline) {
		p, ok := g.read(ch, time.Until(deadline))
		if !ok {
			break
		}
		if match(&p) {
			return p
		}
		g.backlog = append(g.backlog, p)
	}
	g.t.Fatalf("channel %d: no matching packet from the host", ch)
	return gpkt{}
}

// completion waits for the completion of tid on the primary.
func (g *tguest) completion(tid uint64) gpkt {
	g.t.Helper()
	return g.next(0, func(p *gpkt) bool { return p.typ == vmbus.PacketCompletion && p.tid == tid })
}

// request sends an NVSP request with a completion requested and returns
// the completion's payload.
func (g *tguest) request(msg []byte) []byte {
	g.t.Helper()
	return g.completion(g.nvsp(msg, true)).payload()
}

// handshake runs the DPDK order up to the RNDIS INITIALIZE completion.
func (g *tguest) handshake(version uint32) {
	g.t.Helper()
	g.handshakeCaps(version, 0)
}

// handshakeCaps is handshake with extra NDIS_CONFIG capabilities.
func (g *tguest) handshakeCaps(version uint32, extra uint64) {
	g.t.Helper()
	var ic nvsp.InitComplete
	if err := ic.Unmarshal(g.request(nvsp.Init{MinVersion: version, MaxVersion: version}.Marshal(nil))); err != nil || ic.Status != nvsp.StatusSuccess {
		g.t.Fatalf("INIT %#x: %v %v", version, err, ic.Status)
	}
	g.version = version
	caps := nvsp.NDISConfigCapIEEE8021Q
	if version >= nvsp.Version5 {
		caps |= nvsp.NDISConfigCapSRIOV
	}
	caps |= extra
	if version >= nvsp.Version2 {
		g.nvsp(nvsp.NDISConfig{MTU: 1514, Capabilities: caps}.Marshal(nil), false)
	}
	g.nvsp(nvsp.NewNDISVersion(nvsp.NDISVersionFor(version)).Marshal(nil), false)
	g.connectBuffers()
	g.rndisInit()
}

func (g *tguest) connectBuffers() {
	g.t.Helper()
	var rc nvsp.RecvBufComplete
	if err := rc.Unmarshal(g.request(nvsp.RecvBuf{GPADLHandle: g.recvGPADL, ID: nvsp.RecvBufID}.Marshal(nil))); err != nil {
		g.t.Fatal(err)
	}
	if rc.Status != nvsp.StatusSuccess {
		g.t.Fatalf("RECV_BUF: %v", rc.Status)
	}
	if err := rc.Validate(len(g.recv)); err != nil {
		g.t.Fatalf("RECV_BUF_COMPLETE: %v", err)
	}
	g.subSize, g.subCount = rc.Section.SubAllocSize, rc.Section.NumSubAllocs
	var sc nvsp.SendBufComplete
	if err := sc.Unmarshal(g.request(nvsp.SendBuf{GPADLHandle: g.sendGPADL, ID: nvsp.SendBufIDDPDK}.Marshal(nil))); err != nil || sc.Status != nvsp.StatusSuccess {
		g.t.Fatalf("SEND_BUF: %v %v", err, sc.Status)
	}
	n, err := sc.SectionCount(len(g.send))
	if err != nil {
		g.t.Fatal(err)
	}
	g.secSize, g.secCount = sc.SectionSize, uint32(n)
}

func (g *tguest) newRID() uint32 { g.rid++; return g.rid }

// sendRNDIS puts RNDIS bytes in a send section and sends them on channel
// ch; it returns the send's transaction id.
func (g *tguest) sendRNDIS(ch int, chType uint32, b []byte) uint64 {
	g.t.Helper()
	tid := g.newTID()
	g.sendPkt(ch, vmbus.PacketInband, vmbus.FlagCompletionRequested, tid, nil, g.section(chType, b))
	return tid
}

// section puts RNDIS bytes in the next send section and returns the NVSP
// message that sends them.
func (g *tguest) section(chType uint32, b []byte) []byte {
	idx := g.nextSec % g.secCount
	g.nextSec++
	copy(g.send[idx*g.secSize:], b)
	return nvsp.RNDISPacket{ChannelType: chType, SectionIndex: idx, SectionSize: uint32(len(b))}.Marshal(nil)
}

// aggregate packs RNDIS messages into one send section's bytes as DPDK
// does: each but the last padded to 8 bytes, its MessageLength counting
// the padding.
func aggregate(msgs [][]byte) []byte {
	var sec []byte
	for i, m := range msgs {
		if i < len(msgs)-1 {
			pad := (len(m) + 7) &^ 7
			m = append(m, make([]byte, pad-len(m))...)
			binary.LittleEndian.PutUint32(m[4:], uint32(pad))
		}
		sec = append(sec, m...)
	}
	return sec
}

// gpaPage is where sendGPA puts its bytes in guest memory.
const gpaPage = 100

// sendGPA writes RNDIS bytes into guest memory at page pfn (and on) and
// sends them GPA-direct, one range per 4 KiB page as DPDK does.
func (g *tguest) sendGPA(ch int, chType uint32, pfn uint64, b []byte) uint64 {
	g.t.Helper()
	copy(g.mem[pfn*4096:], b)
	hdr := vmbus.GPAHeader(nil, 0)
	n := 0
	for off := 0; off < len(b); off += 4096 {
		l := min(4096, len(b)-off)
		hdr = vmbus.AppendGPARange(hdr, uint32(l), 0, []uint64{pfn + uint64(off/4096)})
		n++
	}
	binary.LittleEndian.PutUint32(hdr[4:], uint32(n))
	m := nvsp.RNDISPacket{ChannelType: chType, SectionIndex: nvsp.NoSection}
	tid := g.newTID()
	g.sendPkt(ch, vmbus.PacketGPADirect, vmbus.FlagCompletionRequested, tid, hdr, m.Marshal(nil))
	return tid
}

// sendStatus waits for the completion of a send and returns its status.
func (g *tguest) sendStatus(ch int, tid uint64) nvsp.Status {
	g.t.Helper()
	p := g.next(ch, func(p *gpkt) bool { return p.typ == vmbus.PacketCompletion && p.tid == tid })
	var m nvsp.RNDISComplete
	if err := m.Unmarshal(p.payload()); err != nil {
		g.t.Fatalf("send completion: %v", err)
	}
	return m.Status
}

// ack completes a transfer-page packet.
func (g *tguest) ack(p *gpkt) {
	g.sendPkt(p.ch, vmbus.PacketCompletion, 0, p.tid, nil, nvsp.RNDISComplete{Status: nvsp.StatusSuccess}.Marshal(nil))
}

// control waits for the next RNDIS control message (completion or
// indication) on the primary, acks it and returns a copy.
func (g *tguest) control() []byte {
	g.t.Helper()
	p := g.next(0, func(p *gpkt) bool {
		if p.typ != vmbus.PacketTransferPage {
			return false
		}
		var m nvsp.RNDISPacket
		return m.Unmarshal(p.payload()) == nil && m.ChannelType == nvsp.RMCControl
	})
	_, rs := p.xfer()
	if len(rs) != 1 {
		g.t.Fatalf("control transfer with %d ranges", len(rs))
	}
	b := slices.Clone(g.recv[rs[0].offset : rs[0].offset+rs[0].count])
	g.ack(&p)
	return b
}

// rndis sends an RNDIS control request and returns the host's answer.
func (g *tguest) rndis(req []byte) []byte {
	g.t.Helper()
	tid := g.sendRNDIS(0, nvsp.RMCControl, req)
	if st := g.sendStatus(0, tid); st != nvsp.StatusSuccess {
		g.t.Fatalf("RNDIS request send status %v", st)
	}
	for {
		b := g.control()
		if t, _ := rndis.MessageType(b); t != rndis.TypeIndicateStatus {
			return b
		}
	}
}

func (g *tguest) rndisInit() {
	g.t.Helper()
	var c rndis.InitializeComplete
	b := g.rndis(rndis.Initialize{RequestID: g.newRID(), MajorVersion: 1, MaxTransferSize: 0x4000}.Marshal(nil))
	if err := c.Unmarshal(b); err != nil || c.Status != rndis.StatusSuccess {
		g.t.Fatalf("RNDIS INITIALIZE: %v %v", err, c.Status)
	}
}

func (g *tguest) query(oid rndis.OID, in []byte) rndis.QueryComplete {
	g.t.Helper()
	id := g.newRID()
	var c rndis.QueryComplete
	if err := c.Unmarshal(g.rndis(rndis.Query{RequestID: id, OID: oid, Info: in}.Marshal(nil))); err != nil {
		g.t.Fatalf("QUERY %v: %v", oid, err)
	}
	if c.RequestID != id {
		g.t.Fatalf("QUERY %v: request id %d, want %d", oid, c.RequestID, id)
	}
	return c
}

func (g *tguest) set(oid rndis.OID, in []byte) rndis.Status {
	g.t.Helper()
	id := g.newRID()
	var c rndis.SetComplete
	if err := c.Unmarshal(g.rndis(rndis.Set{RequestID: id, OID: oid, Info: in}.Marshal(nil))); err != nil {
		g.t.Fatalf("SET %v: %v", oid, err)
	}
	return c.Status
}

func (g *tguest) setFilter(f uint32) {
	g.t.Helper()
	if st := g.set(rndis.OIDGenCurrentPacketFilter, rndis.AppendInfoUint32(nil, f)); st != rndis.StatusSuccess {
		g.t.Fatalf("packet filter: %v", st)
	}
}

// rxFrame is a frame the guest received.
type rxFrame struct {
	ch    int
	tid   uint64
	frame []byte
	info  rndis.PacketInfo
}

// data waits for the next data transfer-page packet on channel ch.
func (g *tguest) data(ch int) gpkt {
	g.t.Helper()
	return g.next(ch, func(p *gpkt) bool {
		if p.typ != vmbus.PacketTransferPage {
			return false
		}
		var m nvsp.RNDISPacket
		return m.Unmarshal(p.payload()) == nil && m.ChannelType == nvsp.RMCData
	})
}

// frames decodes a data transfer-page packet (checking it as a careful
// guest does) without acking it.
func (g *tguest) frames(p *gpkt) []rxFrame {
	g.t.Helper()
	set, rs := p.xfer()
	if set != nvsp.RecvBufID {
		g.t.Fatalf("xfer_pageset_id %#x", set)
	}
	if p.tid >= uint64(g.subCount) {
		g.t.Fatalf("tid %d not below %d", p.tid, g.subCount)
	}
	if rs[0].offset != uint32(p.tid)*g.subSize {
		g.t.Fatalf("tid %d but first range at %d (sub-allocation %d)", p.tid, rs[0].offset, rs[0].offset/g.subSize)
	}
	var out []rxFrame
	for _, r := range rs {
		if uint64(r.offset)+uint64(r.count) > uint64(len(g.recv)) {
			g.t.Fatalf("range %+v outside the receive buffer", r)
		}
		msg := slices.Clone(g.recv[r.offset : r.offset+r.count])
		pkt, err := rndis.ParsePacket(msg)
		if err != nil {
			g.t.Fatalf("received PACKET_MSG: %v", err)
		}
		info, err := pkt.Info()
		if err != nil {
			g.t.Fatalf("received PPI: %v", err)
		}
		out = append(out, rxFrame{ch: p.ch, tid: p.tid, frame: slices.Clone(pkt.Frame), info: info})
	}
	return out
}

// recvFrames collects n frames from channel ch, acking each packet.
func (g *tguest) recvFrames(ch, n int) []rxFrame {
	g.t.Helper()
	var out []rxFrame
	for len(out) < n {
		p := g.data(ch)
		out = append(out, g.frames(&p)...)
		g.ack(&p)
	}
	return out
}

// rndisPacket builds a PACKET_MSG for frame with info.
func rndisPacket(frame []byte, info *rndis.PacketInfo) []byte {
	b := make([]byte, rndis.PacketLen(info, len(frame)))
	if _, err := rndis.PutPacket(b, info, frame); err != nil {
		panic(err)
	}
	return b
}

// capturePort records what the guest sends.
type capturePort struct {
	mu     sync.Mutex
	frames [][]byte
	up     vswitch.Uplink
	more   chan struct{}
}

func newCapturePort() *capturePort { return &capturePort{more: make(chan struct{}, 1)} }

func (c *capturePort) Connect(up vswitch.Uplink) error { c.up = up; return nil }

func (c *capturePort) Transmit(frames [][]byte) {
	c.mu.Lock()
	for _, f := range frames {
		c.frames = append(c.frames, slices.Clone(f))
	}
	c.mu.Unlock()
	select {
	case c.more <- struct{}{}:
	default:
	}
}

func (c *capturePort) Close() error { return nil }

// wait returns the first n frames, fatal after tgWait.
func (c *capturePort) wait(t testing.TB, n int) [][]byte {
	t.Helper()
	deadline := time.After(tgWait)
	for {
		c.mu.Lock()
		if len(c.frames) >= n {
			f := slices.Clone(c.frames[:n])
			c.mu.Unlock()
			return f
		}
		c.mu.Unlock()
		select {
		case <-c.more:
		case <-deadline:
			t.Fatalf("port got %d frames, want %d", c.count(), n)
		}
	}
}

func (c *capturePort) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.frames)
}

// udpFrame builds a UDP/IPv4 frame from src to dst of size bytes.
func udpFrame(dst, src [6]byte, sport uint16, size int) []byte {
	g := vswitch.NewGenerator(vswitch.GeneratorConfig{SrcMAC: src[:]})
	b := make([]byte, size)
	g.Frame(b, dst[:], int(sport)-1024, 7)
	return b
}

// violations returns the host's violation counts whose kind contains s.
func (g *tguest) violations(s string) uint64 {
	var n uint64
	for k, v := range g.h.Violations() {
		if containsFold(k, s) {
			n += v
		}
	}
	return n
}

func containsFold(a, b string) bool { return strings.Contains(a, b) }

func contextTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// noViolations fails when the host counted any.
func (g *tguest) noViolations() {
	g.t.Helper()
	if v := g.h.Violations(); len(v) != 0 {
		g.t.Fatalf("guest violations: %v", v)
	}
}
