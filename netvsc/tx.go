package netvsc

import (
	"context"
	"encoding/binary"
	"time"

	"github.com/vmbusd/vmbusd/frame"
	"github.com/vmbusd/vmbusd/netvsc/nvsp"
	"github.com/vmbusd/vmbusd/netvsc/rndis"
	"github.com/vmbusd/vmbusd/vmbus"
)

// Transmit path (docs/protocol/netvsc.md §2.7, §3.7, §4; the 16 MB seed: copy small
// packets):
//
//	frame <= section  -> PACKET_MSG copied into the open send section,
//	                     several per section within the host's RNDIS limits
//	                     (max packets, max transfer size, alignment: the
//	                     previous message is padded, DPDK hn_try_txagg)
//	frame >  section  -> GPA-direct from its pinned buffer (GPA pool), the
//	                     RNDIS header written into the headroom in front of it
//	                  -> else a TSO super-frame (TCP, MetaTxLSO) is cut into
//	                     segments in software, each copied as above
//	                  -> else dropped (tx_queue_N_drop_oversize): a frame is
//	                     sent as it is or not at all, never changed
//	frame >  MTU      -> only a TSO super-frame: LSOv2 by the host when it is
//	                     GPA-direct, else segmented in software; any other is
//	                     dropped (tx_too_big)
//	no free section   -> GPA-direct if pinned (tx_send_full), else the burst
//	                     stops (tx_no_space) and the caller retries
//
// One NVSP SEND_RNDIS_PKT per section or GPA packet, completion requested;
// the section (or the GPA buffer) is freed, and the frames counted, when
// the host completes it. At most one section is open, and only within a
// burst: the end of a burst sends it, then publishes the ring once.

// nvspSendSize is the ring bytes of one section send.
var nvspSendSize = vmbus.PacketSize(0, nvsp.MessageSize)

// TxBurst queues frames for transmission and returns how many it took.
// Taken packets belong to the queue (freed once copied, or when the host
// completes a GPA-direct send); the rest stay the caller's. It never
// blocks: a short count means the send buffer or the ring is full (see
// WaitTx) or the NIC is down.
func (q *Queue) TxBurst(pkts []*frame.Packet) int {
	if len(pkts) == 0 || q.s.err() != nil {
		return 0
	}
	if q.vf != nil && q.vf.txOn.Load() {
		n, ok := q.vfTx(pkts)
		if ok || n == len(pkts) {
			return n
		}
		return n + q.TxBurst(pkts[n:]) // the VF is going: the rest synthetic
	}
	q.txMu.Lock()
	if q.s.err() != nil { // stopped while we waited for the lock
		q.txMu.Unlock()
		return 0
	}
	n := q.txBurstLocked(pkts)
	if n < len(pkts) && q.inMu.TryLock() {
		if q.s.err() == nil {
			q.drainLocked()
			q.inMu.Unlock()
			n += q.txBurstLocked(pkts[n:])
		} else {
			q.inMu.Unlock()
		}
	}
	if n < len(pkts) {
		q.c.stopQueue.inc()
	}
	q.txMu.Unlock()
	return n
}

func (q *Queue) txBurstLocked(pkts []*frame.Packet) int {
	s := q.s
	q.outMu.Lock()
	n := 0
	for n < len(pkts) && s.err() == nil {
		if !q.txOne(pkts[n]) {
			break
		}
		n++
	}
	q.flushSection()
	q.sendAcksLocked()
	if err := q.ch.Flush(); err != nil {
		s.fail(err)
	}
	q.outMu.Unlock()
	if len(q.txDone) > 0 {
		frame.PutBurst(q.txDone)
		clear(q.txDone)
		q.txDone = q.txDone[:0]
	}
	return n
}

// txOne sends (or drops) one frame; false means no resources now and the
// packet stays the caller's.
func (q *Queue) txOne(p *frame.Packet) bool {
	s := q.s
	if p.Len() == 0 {
		q.c.txTooBig.inc()
		q.txDone = append(q.txDone, p)
		return true
	}
	data := p.Data()
	// Hyper-V drops frames with an in-band tag: move it to the rndis.PPI
	// (DPDK 06c968f9ba).
	if len(data) >= 18 && data[12] == 0x81 && data[13] == 0x00 && p.Meta.Flags&frame.MetaVLAN == 0 {
		p.Meta.Flags |= frame.MetaVLAN
		p.Meta.VLAN = binary.BigEndian.Uint16(data[14:])
		copy(data[4:16], data[:12])
		p.TrimFront(4)
		data = p.Data()
		q.c.txVLANMoved.inc()
	}
	var info rndis.PacketInfo
	q.txInfo(p, &info)
	msgLen := rndis.PacketHeaderSize + info.PPILen() + len(data)
	tso := p.Meta.Flags&frame.MetaTxLSO != 0
	// hostLSO: a super-frame the host segments (LSOv2 granted, within its
	// size limit; txInfo).
	hostLSO := info.Has&rndis.InfoLSO != 0
	if len(data) > s.mtu+EthernetHeaderSize && !hostLSO {
		switch {
		case !tso:
			return q.drop(p, &q.c.txTooBig)
		case s.off.lso(p.Meta.Flags, 0):
			return q.sendLSOPieces(p, &info) // beyond the host's limit: in pieces
		}
		return q.segment(p, &info)
	}
	if msgLen <= s.aggMax {
		switch q.copyFrame(data, &info) {
		case copyOK:
			q.c.txCopied.inc()
			if info.Has&rndis.InfoLSO != 0 {
				q.c.txLSO.inc()
			}
			q.txDone = append(q.txDone, p)
			return true
		case copyRingFull:
			return false
		}
		// No section: GPA-direct if the buffer is pinned (Linux tx_send_full).
		if !gpaBacked(p) {
			q.c.txNoSpace.inc()
			return false
		}
		q.c.txSendFull.inc()
		return q.sendGPA(p, &info)
	}
	if gpaBacked(p) {
		return q.sendGPA(p, &info)
	}
	if tso && s.off.lso(p.Meta.Flags, 0) {
		return q.sendLSOPieces(p, &info)
	}
	if tso {
		return q.segment(p, &info)
	}
	// Larger than a section and nothing pinned to send it from: refuse it
	// rather than change it (splitting it into IP fragments would alter
	// what the sender asked for, and break DF and non-IP frames).
	return q.drop(p, &q.c.txDropOversize)
}

// drop frees a frame the queue cannot send, counting it under c.
func (q *Queue) drop(p *frame.Packet, c *ctr) bool {
	c.inc()
	q.txDone = append(q.txDone, p)
	return true
}

// txInfo builds the per-packet info of a frame: the queue hash (DPDK: the
// queue id steers the completion), VLAN, and the offloads the host took.
func (q *Queue) txInfo(p *frame.Packet, info *rndis.PacketInfo) {
	s := q.s
	if len(s.queues) > 1 {
		info.SetHashValue(uint32(q.idx))
	}
	m := &p.Meta
	if m.Flags&frame.MetaVLAN != 0 {
		info.SetVLAN(rndis.VLANInfoFromTCI(m.VLAN))
	}
	if m.Flags&(frame.MetaTxTCPChecksum|frame.MetaTxUDPChecksum|frame.MetaTxIPChecksum) != 0 && s.off.csum(m.Flags) {
		var c rndis.TxChecksum
		if m.Flags&frame.MetaTxIPv4 != 0 {
			c |= rndis.TxChecksumIPv4
		}
		if m.Flags&frame.MetaTxIPv6 != 0 {
			c |= rndis.TxChecksumIPv6
		}
		if m.Flags&frame.MetaTxTCPChecksum != 0 {
			c |= rndis.TxChecksumTCP
		}
		if m.Flags&frame.MetaTxUDPChecksum != 0 {
			c |= rndis.TxChecksumUDP
		}
		if m.Flags&frame.MetaTxIPChecksum != 0 {
			c |= rndis.TxChecksumIPHeader
		}
		info.SetChecksum(uint32(rndis.NewTxChecksum(c, int(m.L4Off))))
	}
	if m.Flags&frame.MetaTxLSO != 0 && p.Len() > s.mtu+EthernetHeaderSize && s.off.lso(m.Flags, p.Len()) {
		// Whole: in a section when it fits (Linux copies any send smaller
		// than a section), else GPA-direct; txOne cuts it otherwise.
		info.SetLSO(rndis.NewLSOv2(int(m.MSS), int(m.L4Off), m.Flags&frame.MetaTxIPv6 != 0))
	}
}

type copyResult int

const (
	copyOK copyResult = iota
	copyNoSection
	copyRingFull
)

// copyFrame appends a PACKET_MSG to the open section, or opens one.
func (q *Queue) copyFrame(data []byte, info *rndis.PacketInfo) copyResult {
	dst, r := q.allocFrame(len(data), info)
	if r == copyOK {
		copy(dst, data)
	}
	return r
}

// allocFrame writes the header and per-packet info of an n-byte frame's
// PACKET_MSG into the open section (or a new one) and returns where the
// frame goes, for the caller to fill before the section is flushed.
func (q *Queue) allocFrame(n int, info *rndis.PacketInfo) ([]byte, copyResult) {
	s := q.s
	hdr := rndis.PacketHeaderSize + info.PPILen()
	need := hdr + n
	if need > s.aggMax {
		return nil, copyNoSection // the callers check; a section could never hold it
	}
	c := &q.cur
	if c.open {
		pos := (c.used + s.align - 1) &^ (s.align - 1)
		if c.frames < s.maxPkts && pos+need <= s.aggMax {
			sec := s.send.section(c.idx)
			if _, err := rndis.PadMessage(sec[c.last:pos], s.align); err != nil {
				pos = -1 // cannot happen: pos is the padded end
			}
			if pos >= 0 {
				rndis.PutPacketHeader(sec[pos:], info, n)
				c.used, c.last = pos+need, pos
				c.frames++
				c.bytes += n
				return sec[pos+hdr : pos+need], copyOK
			}
		}
		q.flushSection()
	}
	if q.ch.Out().Free() <= 2*nvspSendSize {
		q.c.txBusy.inc()
		return nil, copyRingFull
	}
	idx, ok := q.takeSection()
	if !ok {
		return nil, copyNoSection
	}
	sec := s.send.section(int(idx))
	rndis.PutPacketHeader(sec, info, n)
	*c = openSection{open: true, idx: int(idx), used: need, frames: 1, bytes: n}
	return sec[hdr:need], copyOK
}

func (q *Queue) takeSection() (uint32, bool) {
	if n := len(q.stash); n > 0 {
		v := q.stash[n-1]
		q.stash = q.stash[:n-1]
		q.stashN.Store(int32(len(q.stash) + len(q.gpaSt)))
		return v, true
	}
	return q.sec.take()
}

// flushSection sends the open section. Ring space for it was checked
// when it was opened, and outMu has been held since.
func (q *Queue) flushSection() {
	c := &q.cur
	if !c.open {
		return
	}
	c.open = false
	i := c.idx - q.secLo
	q.secFrames[i], q.secBytes[i] = uint32(c.frames), uint32(c.bytes)
	q.nvspBuf = nvsp.RNDISPacket{ChannelType: nvsp.RMCData, SectionIndex: uint32(c.idx), SectionSize: uint32(c.used)}.Marshal(q.nvspBuf[:0])
	if _, err := q.ch.SendRequest(vmbus.PacketInband, cookieSection|uint64(c.idx), nil, q.nvspBuf); err != nil {
		q.stash = append(q.stash, uint32(c.idx))
		q.stashN.Store(int32(len(q.stash) + len(q.gpaSt)))
		q.c.txBusy.inc()
		if _, full := err.(*vmbus.RingFullError); !full && err != vmbus.ErrTooManyRequests {
			q.s.fail(err)
		}
		return
	}
	q.c.txSections.inc()
}

// sendGPA sends one frame GPA-direct from its pinned buffer, the RNDIS
// header written into the headroom in front of it so that the message is
// one range (docs/protocol/vmbus-ring.md §2.2: one gpa_range listing every page).
func (q *Queue) sendGPA(p *frame.Packet, info *rndis.PacketInfo) bool {
	q.flushSection()
	hdrLen := rndis.PacketHeaderSize + info.PPILen()
	if p.Headroom() < hdrLen {
		q.c.txTooBig.inc()
		q.txDone = append(q.txDone, p)
		return true
	}
	slot, ok := q.takeGPA()
	if !ok {
		q.c.txNoSpace.inc()
		return false
	}
	// The header goes into the headroom just for the lookup; the frame
	// stays where it was, for a retry or the completion.
	flen := p.Len()
	rndis.PutPacketHeader(p.Prepend(hdrLen), info, flen)
	pageOff, pfns, ok := gpaOf(p, q.pfns[:0])
	p.TrimFront(hdrLen)
	q.pfns = pfns[:0]
	if !ok {
		q.gpaUntake(slot) // cannot happen: the pool is GPA-backed
		return false
	}
	q.hdrBuf = vmbus.GPAHeader(q.hdrBuf[:0], 1)
	q.hdrBuf = vmbus.AppendGPARange(q.hdrBuf, uint32(hdrLen+flen), pageOff, pfns)
	if q.ch.Out().Free() <= vmbus.PacketSize(len(q.hdrBuf), nvsp.MessageSize)+nvspSendSize {
		q.gpaUntake(slot)
		q.c.txBusy.inc()
		return false
	}
	q.gpaPkts[slot], q.gpaBytes[slot] = p, uint32(flen)
	q.nvspBuf = nvsp.RNDISPacket{ChannelType: nvsp.RMCData, SectionIndex: nvsp.NoSection}.Marshal(q.nvspBuf[:0])
	if _, err := q.ch.SendRequest(vmbus.PacketGPADirect, cookieGPA|uint64(slot), q.hdrBuf, q.nvspBuf); err != nil {
		q.gpaPkts[slot] = nil
		q.gpaUntake(slot)
		q.c.txBusy.inc()
		if _, full := err.(*vmbus.RingFullError); !full && err != vmbus.ErrTooManyRequests {
			q.s.fail(err)
		}
		return false
	}
	q.c.txGPA.inc()
	if info.Has&rndis.InfoLSO != 0 {
		q.c.txLSO.inc()
	}
	return true
}

// gpaUntake parks a slot the consumer took but did not use: the free ring
// has a single producer (the completion path), so the consumer keeps its
// own short list, as for sections.
func (q *Queue) gpaUntake(slot uint32) {
	q.gpaSt = append(q.gpaSt, slot)
	q.stashN.Store(int32(len(q.stash) + len(q.gpaSt)))
}

func (q *Queue) takeGPA() (uint32, bool) {
	if n := len(q.gpaSt); n > 0 {
		v := q.gpaSt[n-1]
		q.gpaSt = q.gpaSt[:n-1]
		q.stashN.Store(int32(len(q.stash) + len(q.gpaSt)))
		return v, true
	}
	return q.gpa.take()
}

// WaitTx blocks until TxBurst may find room again (a free section, GPA
// slot or ring space), the NIC fails, or ctx ends. It reaps completions
// itself when nobody else is draining.
func (q *Queue) WaitTx(ctx context.Context) error {
	s := q.s
	if q.vf != nil && q.vf.txOn.Load() {
		return q.vfWaitTx(ctx)
	}
	for {
		if err := s.err(); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if q.txReady() {
			return nil
		}
		if q.txRingFull() {
			q.txWaitWritable(ctx)
			continue
		}
		q.txWaiting.Store(true)
		if q.inMu.TryLock() {
			if s.err() == nil {
				q.drainLocked()
			}
			q.inMu.Unlock()
			if q.txReady() {
				q.txWaiting.Store(false)
				return nil
			}
			err := q.sleep(ctx, 1)
			q.txWaiting.Store(false)
			if err != nil {
				return err
			}
			continue
		}
		t := time.NewTimer(time.Millisecond)
		select {
		case <-q.txWake:
		case <-t.C:
		case <-ctx.Done():
		case <-s.dead:
		}
		t.Stop()
		q.txWaiting.Store(false)
	}
}

// txReady reports whether a send could proceed: a free section (or GPA
// slot) and ring room. Lock-free.
func (q *Queue) txReady() bool {
	return (q.sec.len() > 0 || q.gpa.len() > 0 || q.stashN.Load() > 0) && !q.txRingFull()
}

func (q *Queue) txRingFull() bool {
	out, _ := q.ch.RingUsage()
	return out < 0 || q.ch.Out().DataSize()-out <= 4*nvspSendSize+512
}

// txWaitWritable waits for outbound ring space with pending_send_sz, for
// a bounded time: receive completions queue up meanwhile.
func (q *Queue) txWaitWritable(ctx context.Context) {
	wctx, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
	q.outMu.Lock()
	if q.s.err() != nil {
		q.outMu.Unlock()
		cancel()
		return
	}
	err := q.ch.WaitWritable(wctx, 4*nvspSendSize+512)
	q.sendAcksLocked()
	q.ch.Flush()
	q.outMu.Unlock()
	cancel()
	if err != nil && ctx.Err() == nil && wctx.Err() == nil {
		q.s.fail(err)
	}
}
