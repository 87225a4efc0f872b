package netvsc

import (
	"encoding/binary"
	"sync/atomic"

	"github.com/vmbusd/vmbusd/frame"
	"github.com/vmbusd/vmbusd/netvsc/nvsp"
	"github.com/vmbusd/vmbusd/netvsc/protoerr"
	"github.com/vmbusd/vmbusd/netvsc/rndis"
	"github.com/vmbusd/vmbusd/vmbus"
)

// le reads the little-endian fields of NVSP and RNDIS messages.
var le = binary.LittleEndian

// Receive path (docs/protocol/netvsc.md §2.6, §3.3, §7 guest 4-5):
//
//	XFER packet (tid, set 0xCAFE, ranges[])      one per host batch
//	  NVSP SEND_RNDIS_PKT{channel type, -1, 0}
//	  range i -> receive buffer [off, off+count)  one RNDIS message each
//	    PACKET_MSG: header | PPIs | frame       -> copy header, check, copy frame
//	    *_CMPLT, INDICATE_STATUS                -> copy whole, control path
//	COMP(tid) NVSP SEND_RNDIS_PKT_COMPLETE       always, even for control
//
// Nothing is trusted: every range is checked against the receive buffer
// (overflow-safe), every RNDIS header is copied into private memory before
// it is read, and the frame is copied out with the checked offsets. Only
// DataOffset/DataLength place the frame; range lengths and MessageLength
// bound it.

// rxHeaderWindow bounds where a per-packet info area may end (from the
// message start) to be copied out and read; openvmm puts the frame at 256.
const rxHeaderWindow = 512

// maxControlMessage bounds a control message copied off the receive
// buffer (the largest answer is NDIS_OFFLOAD in a QUERY_CMPLT).
const maxControlMessage = 4096

// rxFrame is one received frame as parsed: where it is in the receive
// buffer, and its per-packet info.
type rxFrame struct {
	off, n int // frame bytes in the receive buffer
	info   rndis.PacketInfo
	infoOK bool // the per-packet info was readable
}

// rxHandler receives what parseXfer finds.
type rxHandler interface {
	// rxSlot returns where the parser puts each PACKET_MSG's rxFrame
	// before it calls rxData with it: memory the handler owns, so that
	// the frame goes by pointer without escaping to the heap, and is
	// filled and read in place (no copy of it is loaded right after the
	// narrow stores that filled it, which the CPU would wait for).
	rxSlot() *rxFrame
	// rxData is called for every PACKET_MSG with the rxSlot filled in;
	// the frame is still in the receive buffer at f.off. f is valid
	// during the call.
	rxData(f *rxFrame)
	// rxControl is called for every other RNDIS message with a private
	// copy of it (valid during the call).
	rxControl(msg []byte) error
}

// parseXfer walks a transfer-page packet whose header the ring reader
// validated (range table inside the packet). recv is the receive buffer;
// scratch holds at least maxControlMessage bytes. Host violations return a
// *protoerr.Error; the caller completes the packet whatever happens.
func parseXfer(p *vmbus.Packet, recv []byte, scratch []byte, h rxHandler) error {
	var m nvsp.RNDISPacket
	if err := m.Unmarshal(p.Payload()); err != nil {
		return err
	}
	if set := p.TransferPageSet(); set != nvsp.RecvBufID {
		return protoerr.New("XFER_PAGES", protoerr.KindType, "xfer_pageset_id", uint64(set))
	}
	err := parseRanges(p, recv, scratch, h)
	if e, ok := h.(xferEnder); ok {
		e.rxXferEnd()
	}
	return err
}

// xferEnder is an rxHandler that wants to know when a transfer-page
// packet's ranges are done (RSC: a frame's fragments never span packets).
type xferEnder interface{ rxXferEnd() }

func parseRanges(p *vmbus.Packet, recv []byte, scratch []byte, h rxHandler) error {
	n := p.RangeCount()
	for i := 0; i < n; i++ {
		count, off := p.TransferRange(i)
		if uint64(off) > uint64(len(recv)) || uint64(count) > uint64(len(recv))-uint64(off) {
			return protoerr.New("XFER_PAGES", protoerr.KindRange, "range", uint64(off)<<32|uint64(count))
		}
		if err := parseRange(recv, int(off), int(count), scratch, h); err != nil {
			return err
		}
	}
	return nil
}

// parseRange handles one RNDIS message at recv[off:off+count]. Only the
// bytes it reads are copied out: the 44-byte header, then the per-packet
// info area it places (the frame of a receive layout such as openvmm's
// sits far behind them, and a range is a whole run of sub-allocations).
func parseRange(recv []byte, off, count int, scratch []byte, h rxHandler) error {
	if count < rndis.HeaderSize {
		return protoerr.New("RNDIS", protoerr.KindShort, "range", uint64(count))
	}
	hdr := scratch[:min(count, rndis.PacketHeaderSize)]
	copy(hdr, recv[off:])
	t := rndis.Type(le.Uint32(hdr))
	if t != rndis.TypePacket {
		ml := le.Uint32(hdr[4:])
		if ml < rndis.HeaderSize || uint64(ml) > uint64(count) {
			return protoerr.New(t.String(), protoerr.KindLength, "message_length", uint64(ml))
		}
		if ml > maxControlMessage || int(ml) > len(scratch) {
			return protoerr.New(t.String(), protoerr.KindLength, "message_length", uint64(ml))
		}
		msg := scratch[:ml]
		copy(msg, recv[off:])
		return h.rxControl(msg)
	}
	dataOff, n, ps, pe, err := checkRxPacket(hdr, count)
	if err != nil {
		return err
	}
	f := h.rxSlot()
	f.off, f.n = off+dataOff, n
	f.infoOK = true
	if pe > 0 {
		// checkRxPacket put [ps, pe) inside the message, behind the header.
		ppi := scratch[ps:pe:pe]
		copy(ppi, recv[off+ps:off+pe])
		if err := f.info.Parse(ppi); err != nil {
			return err
		}
	} else {
		f.info = rndis.PacketInfo{}
	}
	h.rxData(f)
	return nil
}

// checkRxPacket checks a PACKET_MSG header (hdr: the first bytes, copied)
// of a message in a range of count bytes, with rndis.ParsePacket's rules
// (the frame and rndis.PPI area inside MessageLength, which is inside the range;
// DataOffset and PerPacketInfoOffset at least 36, the rndis.PPI offset 4-aligned,
// DataLength non-zero). It returns the frame's offset from the message
// start and length, and where the rndis.PPI area is, [ps, pe) from the
// message start, when it ends within the first rxHeaderWindow bytes (pe 0
// when absent; an area past the window is treated as absent).
func checkRxPacket(hdr []byte, count int) (dataOff, n, ps, pe int, err error) {
	const msg = "PACKET_MSG"
	if len(hdr) < rndis.PacketHeaderSize {
		return 0, 0, 0, 0, protoerr.New(msg, protoerr.KindShort, "length", uint64(len(hdr)))
	}
	ml := le.Uint32(hdr[4:])
	if ml < rndis.PacketHeaderSize || uint64(ml) > uint64(count) {
		return 0, 0, 0, 0, protoerr.New(msg, protoerr.KindLength, "message_length", uint64(ml))
	}
	do, dl := le.Uint32(hdr[8:]), le.Uint32(hdr[12:])
	po, pl := le.Uint32(hdr[28:]), le.Uint32(hdr[32:])
	avail := uint64(ml - rndis.HeaderSize)
	if do < rndis.PacketOffsetMin {
		return 0, 0, 0, 0, protoerr.New(msg, protoerr.KindOffset, "data_offset", uint64(do))
	}
	if dl == 0 {
		return 0, 0, 0, 0, protoerr.New(msg, protoerr.KindDataLength, "data_length", 0)
	}
	if uint64(dl) > avail || uint64(do) > avail-uint64(dl) {
		return 0, 0, 0, 0, protoerr.New(msg, protoerr.KindRange, "data_length", uint64(dl))
	}
	if pl != 0 {
		if po < rndis.PacketOffsetMin || po%4 != 0 {
			return 0, 0, 0, 0, protoerr.New(msg, protoerr.KindOffset, "per_packet_info_offset", uint64(po))
		}
		if uint64(pl) > avail || uint64(po) > avail-uint64(pl) {
			return 0, 0, 0, 0, protoerr.New(msg, protoerr.KindRange, "per_packet_info_length", uint64(pl))
		}
		s, e := rndis.HeaderSize+uint64(po), rndis.HeaderSize+uint64(po)+uint64(pl)
		if e <= rxHeaderWindow {
			ps, pe = int(s), int(e)
		}
	}
	return rndis.HeaderSize + int(do), int(dl), ps, pe, nil
}

// applyRxInfo turns the host's per-packet info into packet metadata.
func applyRxInfo(m *frame.Meta, pi *rndis.PacketInfo) {
	if pi.Has&rndis.InfoVLAN != 0 {
		m.Flags |= frame.MetaVLAN
		m.VLAN = pi.VLAN.TCI()
	}
	// DPDK trusts a hash only with both the value and the hash info.
	if pi.Has&(rndis.InfoHashValue|rndis.InfoHashInfo) == rndis.InfoHashValue|rndis.InfoHashInfo {
		m.Flags |= frame.MetaHash
		m.Hash = pi.HashValue
	}
	if pi.Has&rndis.InfoChecksum != 0 {
		c := rndis.RxChecksum(pi.Checksum)
		if c&(rndis.RxChecksumTCPFailed|rndis.RxChecksumUDPFailed|rndis.RxChecksumIPFailed) != 0 {
			m.Flags |= frame.MetaRxChecksumBad
		} else {
			if c&rndis.RxChecksumIPOK != 0 && c&rndis.RxChecksumIPValueInvalid == 0 {
				m.Flags |= frame.MetaRxIPChecksumOK
			}
			if c&(rndis.RxChecksumTCPOK|rndis.RxChecksumUDPOK) != 0 {
				m.Flags |= frame.MetaRxL4ChecksumOK
			}
		}
	}
}

// rxPath is a queue's receive state: frames copied off the receive
// buffer, or held there, on their way to RxBurst. The queue's inMu guards
// every field but lastRx, stCount and heldN (atomic, for lock-free
// readers).
type rxPath struct {
	// stage is a ring of frames received and not yet handed to RxBurst
	// (Config.RxStage, fixed): a drain that finds more frames than the
	// caller's slice takes parks them here.
	stage   []*frame.Packet
	stHead  int
	stLen   int
	stCount atomic.Int32 // stLen, for Wait's rxReady (published once per transfer page: countXfer)
	// out is the caller's slice during RxBurst's drain, filled to outN.
	out  []*frame.Packet
	outN int
	// fresh holds packets taken from the pool in a burst, not yet filled.
	fresh   []*frame.Packet
	freshN  int
	scratch []byte       // RNDIS headers and control messages, copied off the receive buffer
	slot    rxFrame      // the frame being parsed (rxSlot)
	lastRx  atomic.Int64 // when a drain last found work (nanotime): Wait's poll budget
	// fullAt is when an RxBurst last filled the caller's slice of at
	// least fullBurstMin (nanotime): the host was ahead of the receiver,
	// and a hybrid Wait polls through the host's next round (wait.go
	// loadPollSpan) instead of sleeping between rounds.
	fullAt atomic.Int64
	// inPos is the inbound-ring bytes the drain has read (packets and
	// trailers), at where the packet being handled starts: the positions
	// completions.reused compares.
	inPos, at uint64

	// held is a ring of frames parsed but left in the receive buffer:
	// when one arrived there was no pool packet or staging slot for it
	// (or older frames were held, which go first). The completion of a
	// transfer page is owed only once its last held frame was copied
	// (tidHeld), so while the guest is short of packets the host's
	// receive buffer fills and the host drops, as with a real NIC,
	// instead of the guest taking frames off the host only to drop them.
	// One slot per sub-allocation, sized with the completions (a valid
	// host puts one frame in at least one sub-allocation); a frame that
	// finds it full is dropped (rx_no_memory).
	held    []heldFrame
	hHead   int
	hLen    int
	heldN   atomic.Int32 // hLen, for Wait's rxReady
	tidHeld []uint32     // per transfer page id: its frames still held
	xfer    uint32       // the transfer page being parsed
	xferN   uint32       // its frames held so far

	// rsc reassembles coalesced frames (rx_rsc.go).
	rsc rscState

	// Frames and bytes delivered by the transfer page being parsed, added
	// to the counters once it is done (countXfer): a counter store is an
	// atomic exchange, a full barrier, too dear for every frame.
	xferPkts, xferBytes uint64
}

// countXfer adds the frames the transfer page delivered to c, and
// publishes the frames it staged to stCount: deliver stages without the
// atomic store, a full barrier that would wait for the frame just copied
// to leave the store buffer, once per frame (under load most frames of a
// transfer page are staged: it holds more than one RxBurst takes).
func (r *rxPath) countXfer(c *queueCounters) {
	if n := int32(r.stLen); r.stCount.Load() != n {
		r.stCount.Store(n)
	}
	if r.xferPkts > 0 {
		c.rxPackets.add(r.xferPkts)
		c.rxBytes.add(r.xferBytes)
		r.xferPkts, r.xferBytes = 0, 0
	}
}

// heldFrame is a frame left in the receive buffer, with the metadata its
// per-packet info gave.
type heldFrame struct {
	off, n uint32
	tid    uint32
	infoOK bool
	meta   frame.Meta
}

// init sizes the staging queue for stage packets.
func (r *rxPath) init(stage int) {
	r.stage = make([]*frame.Packet, stage)
	r.fresh = make([]*frame.Packet, 32)
	r.scratch = make([]byte, maxControlMessage)
}

// unstage moves staged packets to pkts.
func (r *rxPath) unstage(pkts []*frame.Packet) int {
	n := min(len(pkts), r.stLen)
	for i := 0; i < n; i++ {
		pkts[i] = r.stage[r.stHead]
		r.stage[r.stHead] = nil
		r.stHead++
		if r.stHead == len(r.stage) {
			r.stHead = 0
		}
	}
	r.stLen -= n
	if n > 0 {
		r.stCount.Store(int32(r.stLen))
	}
	return n
}

// push keeps a received packet for a later RxBurst; false when the
// staging queue is full.
func (r *rxPath) push(p *frame.Packet) bool {
	if !r.stageOne(p) {
		return false
	}
	r.stCount.Store(int32(r.stLen))
	return true
}

// stageOne is push without publishing stLen to stCount (countXfer does,
// once per transfer page).
func (r *rxPath) stageOne(p *frame.Packet) bool {
	if r.stLen == len(r.stage) {
		return false
	}
	i := r.stHead + r.stLen
	if i >= len(r.stage) {
		i -= len(r.stage)
	}
	r.stage[i] = p
	r.stLen++
	return true
}

// room returns how many more packets the staging queue takes.
func (r *rxPath) room() int { return len(r.stage) - r.stLen }

// full reports that a received frame has nowhere to go: the caller's
// slice and the staging queue are both full.
func (r *rxPath) full() bool { return r.outN == len(r.out) && r.stLen == len(r.stage) }

// deliver hands a filled packet to the caller's slice, or stages it;
// full was checked. It runs while a transfer page is parsed, whose
// countXfer publishes what it staged.
func (r *rxPath) deliver(p *frame.Packet) {
	if r.outN < len(r.out) {
		r.out[r.outN] = p
		r.outN++
		return
	}
	r.stageOne(p)
}

// refill takes a burst of packets from pool into fresh, the empty
// packets frames are copied into; false when the pool is empty.
func (r *rxPath) refill(pool *frame.Pool) bool {
	r.freshN = pool.GetBurst(r.fresh)
	return r.freshN > 0
}

// takeFresh removes the last fresh packet, which a frame now fills.
func (r *rxPath) takeFresh() {
	r.freshN--
	r.fresh[r.freshN] = nil
}

// initHeld sizes the held ring and its per-tid counts for count
// sub-allocations, forgetting what was held.
func (r *rxPath) initHeld(count uint32) {
	r.held = make([]heldFrame, count)
	r.tidHeld = make([]uint32, count)
	r.hHead, r.hLen = 0, 0
	r.heldN.Store(0)
}

// hold keeps frame f of the transfer page being parsed in the receive
// buffer; false when the held ring is full (or was never sized).
func (r *rxPath) hold(f *rxFrame) bool {
	if r.hLen == len(r.held) || int(r.xfer) >= len(r.tidHeld) {
		return false
	}
	i := r.hHead + r.hLen
	if i >= len(r.held) {
		i -= len(r.held)
	}
	h := &r.held[i]
	*h = heldFrame{off: uint32(f.off), n: uint32(f.n), tid: r.xfer, infoOK: f.infoOK}
	if f.infoOK {
		applyRxInfo(&h.meta, &f.info)
	}
	r.hLen++
	r.heldN.Store(int32(r.hLen))
	r.xferN++
	return true
}

// holds reports whether frames of transfer page tid are held.
func (r *rxPath) holds(tid uint32) bool {
	return int(tid) < len(r.tidHeld) && r.tidHeld[tid] > 0
}

// popHeld forgets the oldest held frame and reports whether it was the
// last one of its transfer page (whose completion is then owed).
func (r *rxPath) popHeld() (tid uint32, last bool) {
	tid = r.held[r.hHead].tid
	r.held[r.hHead] = heldFrame{}
	r.hHead++
	if r.hHead == len(r.held) {
		r.hHead = 0
	}
	r.hLen--
	r.heldN.Store(int32(r.hLen))
	r.tidHeld[tid]--
	return tid, r.tidHeld[tid] == 0
}

// freeAll returns the staged and fresh packets to their pool, and
// forgets the held frames.
func (r *rxPath) freeAll() {
	if r.rsc.pkt != nil {
		r.rsc.pkt.Free()
		r.rsc.pkt, r.rsc.n = nil, 0
	}
	r.rsc.skip = false
	for r.hLen > 0 {
		r.popHeld()
	}
	for r.stLen > 0 {
		var one [1]*frame.Packet
		r.unstage(one[:])
		one[0].Free()
	}
	for i := 0; i < r.freshN; i++ {
		r.fresh[i].Free()
		r.fresh[i] = nil
	}
	r.freshN = 0
}

// rxSlot returns the queue's rxFrame for the parser (rxHandler).
func (q *Queue) rxSlot() *rxFrame { return &q.rx.slot }

// rxData copies one received frame out of the receive buffer, or holds
// it there when it has nowhere to go (rxHandler). inMu is held.
func (q *Queue) rxData(f *rxFrame) {
	s, r := q.s, &q.rx
	if !s.running.Load() {
		s.rxIgnored.Add(1)
		return
	}
	if q.isFragment(f) {
		q.rxFragment(f)
		return
	}
	if r.rsc.pkt != nil || r.rsc.skip {
		q.rscInterrupted()
	}
	if r.hLen > 0 || r.full() || (r.freshN == 0 && !r.refill(q.pool)) {
		if r.hold(f) {
			q.c.rxHeld.inc()
		} else {
			q.c.rxNoMemory.inc()
		}
		return
	}
	p := r.fresh[r.freshN-1]
	if f.n > p.Cap() {
		q.c.rxTooBig.inc()
		return
	}
	r.takeFresh()
	copy(p.SetLen(f.n), s.recv[f.off:f.off+f.n])
	if f.infoOK {
		applyRxInfo(&p.Meta, &f.info)
	} else {
		q.c.rxPPIErrors.inc()
	}
	r.xferPkts++
	r.xferBytes += uint64(f.n)
	r.deliver(p)
}

// unhold copies held frames into pkts, oldest first, while the pool has
// packets, and owes each transfer page's completion once its last frame
// is out of the receive buffer. inMu is held.
func (q *Queue) unhold(pkts []*frame.Packet) (int, error) {
	s, r := q.s, &q.rx
	defer r.countXfer(&q.c)
	n := 0
	for r.hLen > 0 && n < len(pkts) {
		if r.freshN == 0 && !r.refill(q.pool) {
			break
		}
		h := &r.held[r.hHead]
		p := r.fresh[r.freshN-1]
		if int(h.n) <= p.Cap() {
			r.takeFresh()
			copy(p.SetLen(int(h.n)), s.recv[h.off:h.off+h.n])
			if h.infoOK {
				p.Meta = h.meta
			} else {
				q.c.rxPPIErrors.inc()
			}
			r.xferPkts++
			r.xferBytes += uint64(h.n)
			pkts[n] = p
			n++
		} else {
			q.c.rxTooBig.inc()
		}
		if tid, last := r.popHeld(); last && !q.acks.add(tid) {
			return n, protoerr.New("XFER_PAGES", protoerr.KindDuplicateTID, "transaction_id", uint64(tid))
		}
	}
	return n, nil
}

// rxHeldReady reports, without inMu, whether held frames could be copied
// now: some are held and the pool has a packet.
func (q *Queue) rxHeldReady() bool {
	return q.rx.heldN.Load() > 0 && q.pool.Available() > 0
}

// rxControl handles an RNDIS control message (rxHandler).
func (q *Queue) rxControl(msg []byte) error { return q.s.rndisControl(q, msg) }
