package netvsp

// Guest to host: NVSP SEND_RNDIS_PKT in one of three forms (docs/protocol/netvsc.md §2.7)
//
//	inband + send section   the RNDIS bytes are [index*section, +size) of the send buffer
//	GPA-direct              the RNDIS bytes are the GPA ranges, in order
//	GPA-direct + section    the section's bytes, then the ranges (Linux cp_partial)
//
// The host copies the bytes out of guest memory, walks the RNDIS messages
// by MessageLength (a control message on the primary; up to 8 PACKET
// messages, each but the last padded to 8 bytes), checks each frame as the
// real host does (no in-frame 802.1Q tag, LSOv2 headers and MSS, the MTU),
// does the offloads (checksums, segmentation, the VLAN tag from its
// per-packet info) and forwards the frames to the port. Every send with a
// completion requested is completed on its channel: SUCCESS, or FAIL for a
// malformed one, which never tears the channel down (openvmm PR #1646).

import (
	"encoding/binary"
	"slices"
	"unsafe"

	"github.com/vmbusd/vmbusd/frame/csum"
	"github.com/vmbusd/vmbusd/netvsc/nvsp"
	"github.com/vmbusd/vmbusd/netvsc/protoerr"
	"github.com/vmbusd/vmbusd/netvsc/rndis"
	"github.com/vmbusd/vmbusd/sim/vswitch"
	"github.com/vmbusd/vmbusd/vmbus"
)

// maxPacketsPerMessage is the max_pkts_per_msg the host announces in
// INITIALIZE_CMPLT, and alignFactor its packet alignment (8 bytes), as
// openvmm (docs/protocol/netvsc.md §3.2).
// be is network byte order, for the frames the host edits.
var be = binary.BigEndian

const (
	maxPacketsPerMessage = 8
	alignFactor          = 3
	maxTransferSize      = 0xEFFFFFFF
)

// txBatch holds the frames one pass forwards, each with 4 bytes of
// headroom for a VLAN tag: copied into one slab, or, for a large send an
// OffloadPort takes whole, left in place in the buffer the host read the
// GPA-direct send into (gpaBuf), which the batch then holds until it is
// forwarded. Reused; owned by one channel's loop; make it with newTxBatch.
type txBatch struct {
	slab   []byte
	used   int
	frames [][]byte
	heads  [][]byte               // each frame with its headroom in front
	offs   []vswitch.FrameOffload // work each frame leaves to an OffloadPort
	work   bool                   // some frame has work in offs

	held  [][]byte // GPA read buffers frames of this batch point into
	spare [][]byte // GPA read buffers free for the next send
	cur   []byte   // the buffer the send being handled was read into
	kept  bool     // a frame of cur's was added in place
}

// maxHeldGPA bounds the GPA read buffers one batch holds (maxGPASend
// each): a send that would need another forwards the batch first.
const maxHeldGPA = 8

const txSlab = 512 << 10

func newTxBatch() txBatch {
	return txBatch{slab: make([]byte, txSlab), frames: make([][]byte, 0, 1024), heads: make([][]byte, 0, 1024),
		offs: make([]vswitch.FrameOffload, 0, 1024)}
}

// alloc returns room for an n-byte untagged frame, or nil when the batch
// is full.
func (b *txBatch) alloc(n int) []byte {
	if b.used+n+vswitch.VLANTagLen > len(b.slab) || len(b.frames) == cap(b.frames) {
		return nil
	}
	p := b.used
	b.used += n + vswitch.VLANTagLen
	b.used = (b.used + 7) &^ 7
	f := b.slab[p+vswitch.VLANTagLen : p+vswitch.VLANTagLen+n]
	b.frames = append(b.frames, f)
	b.heads = append(b.heads, b.slab[p:p+vswitch.VLANTagLen+n])
	b.offs = append(b.offs, vswitch.FrameOffload{})
	return f
}

// drop removes the last frame.
func (b *txBatch) drop() {
	b.frames = b.frames[:len(b.frames)-1]
	b.heads = b.heads[:len(b.heads)-1]
	b.offs = b.offs[:len(b.offs)-1]
}

// room reports whether n more bytes in k more frames fit.
func (b *txBatch) room(n, k int) bool {
	return b.used+n <= len(b.slab) && len(b.frames)+k <= cap(b.frames)
}

// tag inserts an 802.1Q tag into frame i using its headroom.
func (b *txBatch) tag(i int, tci uint16) {
	f := b.frames[i]
	t := b.heads[i][:len(f)+vswitch.VLANTagLen]
	copy(t[0:12], f[0:12])
	be.PutUint16(t[12:], vswitch.EthTypeVLAN)
	be.PutUint16(t[14:], tci)
	b.frames[i] = t
	if b.offs[i].CsumStart != 0 {
		b.offs[i].CsumStart += vswitch.VLANTagLen
	}
}

func (b *txBatch) reset() {
	b.used = 0
	b.frames = b.frames[:0]
	b.heads = b.heads[:0]
	b.offs = b.offs[:0]
	b.work = false
	// The frames that pointed into held buffers are forwarded. cur is
	// not among them: the send read into it may still be being handled.
	b.spare = append(b.spare, b.held...)
	clear(b.held)
	b.held = b.held[:0]
}

// gpaBuf returns an empty buffer, of capacity maxGPASend, for reading a
// GPA-direct send into; doneGPA gives it back after the send is handled.
// Between the two, frames may be added in place (adoptLSO).
func (b *txBatch) gpaBuf() []byte {
	if n := len(b.spare); n > 0 {
		b.cur = b.spare[n-1]
		b.spare[n-1] = nil
		b.spare = b.spare[:n-1]
	} else {
		b.cur = make([]byte, maxGPASend)
	}
	b.kept = false
	return b.cur[:0]
}

// doneGPA ends the handling of the send read into gpaBuf's buffer: the
// batch holds it while a frame points into it, else it is free again.
func (b *txBatch) doneGPA() {
	if b.cur == nil {
		return
	}
	if b.kept {
		b.held = append(b.held, b.cur)
	} else {
		b.spare = append(b.spare, b.cur)
	}
	b.cur, b.kept = nil, false
}

// inCur returns f's offset in the current GPA read buffer, or -1 when f
// does not lie there (a buffer that grew was reallocated). Packet parsers
// cap their slices (rndis.Packet.Frame), so the offset comes from the
// addresses.
func (b *txBatch) inCur(f []byte) int {
	if b.cur == nil || len(f) == 0 {
		return -1
	}
	d := uintptr(unsafe.Pointer(unsafe.SliceData(f))) - uintptr(unsafe.Pointer(unsafe.SliceData(b.cur)))
	if d > uintptr(len(b.cur)) || uintptr(len(f)) > uintptr(len(b.cur))-d {
		return -1
	}
	return int(d)
}

// flushTx forwards the batch to the port, then hands the guest what the
// port answered meanwhile (publishRx).
func (ch *nicChan) flushTx() {
	b := &ch.tx
	if len(b.frames) == 0 {
		return
	}
	var bytes, packets uint64
	for i, f := range b.frames {
		bytes += uint64(len(f))
		packets += uint64(b.offs[i].Segments(f))
	}
	st := &ch.ss.n.st
	st.txPackets.Add(packets)
	st.txBytes.Add(bytes)
	ch.txPackets.Add(packets)
	ch.ss.n.transmitBatch(b)
	b.reset()
	ch.publishRx()
}

// publishRx puts the frames queued for the guest into its receive ring
// and publishes the ring (with the completions written so far), which
// signals the guest as the ring's rules say (docs/protocol/vmbus-ring.md
// §2.4). A port that answers at once, as a TAP does (the kernel's TCP
// acknowledgements are there when the write returns), then has its
// answers on their way while the rest of the pass is handled: a pass can
// forward several batches, each a few 64 KiB writes, and its end can be
// a millisecond away. A Flush error is the channel's; the pass's own
// Flush returns it.
func (ch *nicChan) publishRx() {
	if ch.deliver() {
		ch.c.Flush()
	}
}

// handleRNDIS serves one SEND_RNDIS_PKT from the guest.
func (ch *nicChan) handleRNDIS(p *vmbus.Packet) error {
	ss := ch.ss
	st := &ss.n.st
	cfg := ss.cfg.Load()
	st.txSends.Add(1)
	status := ch.rndisStatus(p, cfg)
	if status != nvsp.StatusSuccess {
		st.txErrors.Add(1)
	}
	if !p.CompletionRequested() {
		ss.violation("SEND_RNDIS_PKT without a completion requested")
		return nil
	}
	if ss.n.faults.take(NICFaultTxFail) {
		status = nvsp.StatusFail
	}
	msg := padTo(nvsp.RNDISComplete{Status: status}.Marshal(ch.xmsg[:0]), ss.msgSize())
	return ch.c.SendCompletion(p.TransID, msg)
}

// rndisStatus gathers a send's RNDIS bytes and handles them.
func (ch *nicChan) rndisStatus(p *vmbus.Packet, cfg *sessCfg) nvsp.Status {
	ss := ch.ss
	st := &ss.n.st
	var m nvsp.RNDISPacket
	if err := m.Unmarshal(p.Payload()); err != nil {
		ss.violation("malformed SEND_RNDIS_PKT")
		return nvsp.StatusFail
	}
	if !cfg.recvReady {
		ss.violation("RNDIS message before the receive buffer")
		return nvsp.StatusFail
	}
	b := ch.rndis[:0]
	gpa := p.Type == vmbus.PacketGPADirect && ss.mem != nil
	if gpa {
		// Read into a buffer of the batch's, so that a large send can be
		// forwarded from there (txBatch.addLSOWhole).
		if len(ch.tx.held) >= maxHeldGPA {
			ch.flushTx()
		}
		b = ch.tx.gpaBuf()
		defer ch.tx.doneGPA()
	}
	if m.SectionIndex != nvsp.NoSection {
		if !cfg.sendReady {
			ss.violation("send section used without a send buffer")
			return nvsp.StatusFail
		}
		off, n, _, err := m.Section(cfg.sendSecSize, cfg.sendSecCount)
		if err != nil {
			ss.violation("bad send section: " + kindOf(err))
			return nvsp.StatusFail
		}
		b = append(b, ss.send[off:off+n]...)
		st.txSectionSends.Add(1)
	}
	switch p.Type {
	case vmbus.PacketGPADirect:
		var ok bool
		if b, ok = ch.readGPA(p, b); !ok {
			return nvsp.StatusFail
		}
		st.txGPA.Add(1)
	case vmbus.PacketInband:
		if m.SectionIndex == nvsp.NoSection {
			ss.violation("SEND_RNDIS_PKT without a send section or GPA ranges")
			return nvsp.StatusFail
		}
	}
	if !gpa {
		ch.rndis = b[:0]
	}
	t, err := rndis.MessageType(b)
	if err != nil {
		ss.violation("SEND_RNDIS_PKT with no RNDIS message")
		return nvsp.StatusFail
	}
	if t != rndis.TypePacket {
		if ch.idx != 0 {
			ss.violation("RNDIS control message on a sub-channel")
			return nvsp.StatusFail
		}
		return ss.handleRNDISControl(ch, b)
	}
	return ch.handleData(b, cfg)
}

// readGPA appends the bytes of a GPA-direct packet's ranges to b.
func (ch *nicChan) readGPA(p *vmbus.Packet, b []byte) ([]byte, bool) {
	ss := ch.ss
	if ss.mem == nil {
		ss.violation("GPA-direct send with no guest memory to read")
		return b, false
	}
	it := p.GPARanges()
	for {
		r, ok := it.Next()
		if !ok {
			return b, true
		}
		left := int(r.Count)
		off := r.Offset
		for i := 0; i < r.Pages() && left > 0; i++ {
			n := min(left, vmbus.HyperVPageSize-int(off))
			if len(b)+n > maxGPASend {
				ss.violation("GPA-direct send larger than the host accepts")
				return b, false
			}
			b = slices.Grow(b, n)[:len(b)+n]
			if err := ss.mem.ReadPage(b[len(b)-n:], r.PFN(i), off); err != nil {
				ss.violation("GPA-direct range outside guest memory")
				return b, false
			}
			left -= n
			off = 0
		}
	}
}

// maxGPASend bounds one GPA-direct send's bytes: an LSO frame of the
// host's maximum plus its headers and RNDIS header.
const maxGPASend = 128 << 10

// handleData walks the PACKET messages of a send.
func (ch *nicChan) handleData(b []byte, cfg *sessCfg) nvsp.Status {
	ss := ch.ss
	if !cfg.rndisReady {
		if cfg.stopped {
			ss.violation("data sent after RNDIS HALT")
		} else {
			ss.violation("data sent before RNDIS INITIALIZE completed")
		}
		return nvsp.StatusFail
	}
	status := nvsp.StatusSuccess
	for count := 0; len(b) > 0; count++ {
		t, ml, err := rndis.ParseHeader(b)
		if err != nil {
			ss.violation("bad RNDIS message length in a send")
			return nvsp.StatusFail
		}
		if t != rndis.TypePacket {
			ss.violation("RNDIS " + t.String() + " after a PACKET_MSG in one send")
			return nvsp.StatusFail
		}
		if count == maxPacketsPerMessage {
			ss.violation("more PACKET_MSGs in one send than max_pkts_per_msg")
		}
		if ml < len(b) && ml%(1<<alignFactor) != 0 {
			ss.violation("aggregated PACKET_MSG not padded to the packet alignment")
		}
		pkt, err := rndis.ParsePacket(b[:ml])
		if err == nil {
			err = pkt.Unsupported()
		}
		if err != nil {
			ss.violation("malformed PACKET_MSG: " + kindOf(err))
			status = nvsp.StatusFail
		} else if !ch.txFrame(&pkt, cfg) {
			status = nvsp.StatusFail
		}
		b = b[ml:]
	}
	return status
}

// txFrame checks one frame of the guest's, does its offloads and adds it
// (or its segments) to the batch. A frame the host refuses is dropped
// silently, as Hyper-V drops it (the send still completes with SUCCESS);
// only malformed per-packet info fails the send (false).
func (ch *nicChan) txFrame(pkt *rndis.Packet, cfg *sessCfg) bool {
	ss := ch.ss
	st := &ss.n.st
	drop := func(what string) bool {
		ss.violation(what)
		st.txDropped.Add(1)
		return true
	}
	info, err := pkt.Info()
	if err != nil {
		drop("bad per-packet info in a send: " + kindOf(err))
		return false
	}
	f := pkt.Frame
	if len(f) < vswitch.EthHeaderLen {
		return drop("frame shorter than an Ethernet header")
	}
	if _, tagged := vswitch.FrameTagged(f); tagged {
		// "If it sees a VLAN in the frame the packet is dropped" (docs/protocol/netvsc.md §2.7).
		return drop("frame with an in-frame 802.1Q tag (the host drops it)")
	}
	first := len(ch.tx.frames)
	op := ss.n.offloadPort()
	if info.Has&rndis.InfoLSO != 0 {
		vswitch.FillLSOLength(f)
		fl, err := vswitch.CheckLSO(f, info.LSO, rndis.HostLSOv2MaxSize)
		if err != nil {
			return drop("bad LSO request: " + err.Error())
		}
		if (fl.V6 && !cfg.lso6) || (!fl.V6 && !cfg.lso4) {
			ss.violation("LSO send without LSOv2 enabled in the offload parameters")
		}
		if fl.L4Off+int(f[fl.L4Off+12]>>4)*4+info.LSO.MSS() > cfg.mtu {
			return drop("LSO MSS larger than the MTU allows")
		}
		hdr := fl.L4Off + int(f[fl.L4Off+12]>>4)*4
		if op != nil {
			// The port's wire cuts it (sim/vswitch/vswitch_offload.go).
			if !ch.tx.addLSOWhole(f, fl, info.LSO.MSS()) {
				ch.flushTx()
				first = 0
				ch.tx.addLSOWhole(f, fl, info.LSO.MSS())
			}
		} else {
			segs := (fl.L4End - hdr + info.LSO.MSS() - 1) / info.LSO.MSS()
			if !ch.tx.room(fl.L4End-hdr+segs*(hdr+vswitch.VLANTagLen+8), segs) {
				ch.flushTx()
				first = 0
			}
			vswitch.SegmentLSO(f, fl, info.LSO.MSS(), ch.tx.alloc)
		}
	} else {
		if len(f) > cfg.mtu {
			return drop("frame larger than the MTU")
		}
		o := ch.tx.alloc(len(f))
		if o == nil {
			ch.flushTx()
			first = 0
			o = ch.tx.alloc(len(f))
		}
		copy(o, f)
		if info.Has&rndis.InfoChecksum != 0 {
			var err error
			if op != nil {
				var off vswitch.FrameOffload
				off, err = vswitch.PartialTxChecksum(o, rndis.TxChecksum(info.Checksum))
				ch.tx.offs[len(ch.tx.offs)-1] = off
				ch.tx.work = ch.tx.work || off.CsumStart != 0
			} else {
				err = vswitch.ApplyTxChecksum(o, rndis.TxChecksum(info.Checksum))
			}
			if err != nil {
				ch.tx.drop()
				return drop("bad checksum offload request: " + err.Error())
			}
		}
	}
	if info.Has&rndis.InfoVLAN != 0 {
		for i := first; i < len(ch.tx.frames); i++ {
			ch.tx.tag(i, info.VLAN.TCI())
		}
	}
	return true
}

// kindOf names a netvsc protocol error's check, for violation kinds.
func kindOf(err error) string {
	if pe, ok := protoerr.As(err); ok {
		return pe.Kind.String()
	}
	return err.Error()
}

// offloadPort returns the NIC's port when it takes offloads.
func (n *NIC) offloadPort() vswitch.OffloadPort {
	p := n.port.Load()
	if p == nil {
		return nil
	}
	if op, ok := (*p).(vswitch.OffloadPort); ok && op.Offloads() {
		return op
	}
	return nil
}

// addLSOWhole adds a validated large send to the batch whole, for an
// OffloadPort: IP length and IPv4 header checksum set, the TCP checksum
// left as the pseudo-header sum. False when the batch has no room.
func (b *txBatch) addLSOWhole(f []byte, fl vswitch.Flow, mss int) bool {
	n := fl.L4End
	var o []byte
	if off := b.inCur(f); off >= vswitch.VLANTagLen && len(b.frames) < cap(b.frames) {
		// Left where the host read it from guest memory: that buffer is
		// the host's own copy already, edited below as a slab copy
		// would be, and held until the batch is forwarded. A copy per
		// large send less.
		o = f[:n]
		b.frames = append(b.frames, o)
		b.heads = append(b.heads, b.cur[off-vswitch.VLANTagLen:off+n])
		b.offs = append(b.offs, vswitch.FrameOffload{})
		b.kept = true
	} else if o = b.alloc(n); o == nil {
		return false
	} else {
		copy(o, f[:n])
	}
	s := vswitch.ParseFlowAt(o, fl)
	if !fl.V6 {
		h := o[fl.L3:fl.L4Off]
		be.PutUint16(h[2:], uint16(n-fl.L3))
		h[10], h[11] = 0, 0
		be.PutUint16(h[10:], ^csum.Fold(csum.Add(0, h)))
	} else {
		be.PutUint16(o[fl.L3+4:], uint16(n-fl.L4Off))
	}
	t := o[fl.L4Off:]
	be.PutUint16(t[16:], csum.Fold(vswitch.PseudoSum(&s, vswitch.IPProtoTCP, len(t))))
	b.offs[len(b.offs)-1] = vswitch.FrameOffload{CsumStart: uint16(fl.L4Off), CsumOffset: 16, MSS: uint16(mss), IPv6: fl.V6}
	b.work = true
	return true
}
