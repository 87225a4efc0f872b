package netvsc

import (
	"context"
	"encoding/binary"
	"sync/atomic"
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

// txPath is a queue's transmit state. txMu guards it, except where a
// field says otherwise: the free rings are single-producer (the drain,
// under inMu, puts what the host completed) single-consumer (the sender,
// under txMu), and the per-slot bookkeeping of a send in flight
// (secFrames, secBytes, gpaPkts, gpaBytes) has one owner at a time: the
// sender writes a slot before its request enters the ring, the drain
// reads it when the host completes that request and only then puts the
// index back in the free ring.
type txPath struct {
	// Send sections of this queue's run [secLo, secLo+len(secFrames)),
	// fixed by assignSections before the data path runs.
	sec       *idxRing // free sections (SPSC, above)
	secLo     int
	secFrames []uint32 // per section of the run: frames in flight (handed over, above)
	secBytes  []uint32
	stash     []uint32     // sections taken but not used; taken again first
	gpaSt     []uint32     // GPA slots taken but not used
	stashN    atomic.Int32 // len(stash), for the lock-free txReady
	gpaStN    atomic.Int32 // len(gpaSt), likewise
	// want is what the last burst stopped for (wantAny, wantSection,
	// wantGPA), read by the lock-free txReady: a free GPA slot is no room
	// for a frame that can only be copied, and WaitTx would spin on it.
	want atomic.Int32
	// need is the sections a burst that stopped for sections waits for:
	// a large send copied in pieces takes several at once (reserve), and
	// a WaitTx woken by each one the host completes would retry it, fail
	// and sleep again, once per completion.
	need atomic.Int32
	// stalled is when a burst last came back short, left the host
	// holding at least half the queue's sections or GPA slots (behind),
	// or was a full one (fullBurstMin frames or more) that started while
	// the host still held earlier sends (streaming), in nanotime: the
	// transmitter outran the host, whose completions it waits for or
	// soon will (a hybrid Wait polls for them meanwhile, wait.go
	// loadPollSpan). A queue whose Wait polls the completions in as they
	// come stalls less often than the span: marked only on short bursts,
	// its Wait would sleep between stalls, and the next stall would find
	// the sleeper holding inMu. A burst that marks it also ends a sleep
	// of Wait in progress (waiter.rxAsleep), for the same reason.
	stalled atomic.Int64
	cur     openSection // the section being filled in this burst

	gpa      *idxRing        // free GPA-direct slots (SPSC, above)
	gpaPkts  []*frame.Packet // per slot: the packet in flight (handed over, above)
	gpaBytes []uint32

	// Scratch for building one send.
	nvspBuf []byte
	hdrBuf  []byte
	pfns    []uint64
	segBuf  []byte
	done    []*frame.Packet // copied packets, freed at the end of the burst
	hdr     hdrTemplate
	// stop is what this burst stopped for (want) and stopNeed the
	// sections it needs (need), stored when it ends.
	stop, stopNeed int32
	left           int // frames left in the burst, this one included
	// copied counts the frames the burst copied into sections, added to
	// tx_copied when it ends: a counter store is an atomic exchange, a
	// full barrier that would wait on every copy into shared memory.
	copied uint64
	sent   uint64 // sections sent in the burst, added to tx_sections likewise
}

// hdrTemplate is the RNDIS header and per-packet info last built, kept
// for the frames that follow with the same info (a burst's frames mostly
// share it): each then costs one copy and two length stores rather than
// a field-by-field build, and fewer stores to the section's cold lines.
type hdrTemplate struct {
	info rndis.PacketInfo
	n    int // header and per-packet info bytes; 0 when none is built
	b    [hdrTemplateMax]byte
}

// hdrTemplateMax holds the header and every per-packet info element the
// transmit path writes (checksum, LSO, 802.1Q, hash value).
const hdrTemplateMax = rndis.PacketHeaderSize + 4*rndis.PPIUint32Size

// The PACKET_MSG fields that change with the frame.
const (
	offMessageLength = 4
	offDataLength    = 12
)

// put writes the header and per-packet info of an n-byte frame's
// PACKET_MSG at the start of dst, which has room for them.
func (h *hdrTemplate) put(dst []byte, info *rndis.PacketInfo, n int) {
	if h.n == 0 || h.info != *info {
		k, err := rndis.PutPacketHeader(h.b[:], info, 0)
		if err != nil { // more info than the template holds: build it in place
			h.n = 0
			rndis.PutPacketHeader(dst, info, n)
			return
		}
		h.info, h.n = *info, k
	}
	d := dst[:h.n]
	copy(d, h.b[:h.n])
	binary.LittleEndian.PutUint32(d[offMessageLength:], uint32(h.n+n))
	binary.LittleEndian.PutUint32(d[offDataLength:], uint32(n))
}

type openSection struct {
	open   bool
	idx    int
	used   int
	frames int
	bytes  int
	last   int
}

// init sets the path up for frames of mtu, every GPA slot free and no
// section yet (assign).
func (t *txPath) init(mtu int) {
	t.sec = newIdxRing(1)
	t.gpa = newIdxRing(gpaSlots)
	for i := range gpaSlots {
		t.gpa.put(uint32(i))
	}
	t.gpaPkts, t.gpaBytes = make([]*frame.Packet, gpaSlots), make([]uint32, gpaSlots)
	t.nvspBuf = make([]byte, 0, nvsp.MessageSize)
	t.hdrBuf = make([]byte, 0, 1024)
	t.pfns = make([]uint64, 0, 128)
	t.done = make([]*frame.Packet, 0, 256)
	t.segBuf = make([]byte, mtu+EthernetHeaderSize)
}

// assign gives the path sections [lo, hi) of the send buffer.
func (t *txPath) assign(lo, hi int) {
	t.secLo = lo
	t.sec = newIdxRing(hi - lo)
	t.secFrames = make([]uint32, hi-lo)
	t.secBytes = make([]uint32, hi-lo)
	t.stash = make([]uint32, 0, hi-lo) // room for every section: gatherFreed never allocates
	for i := lo; i < hi; i++ {
		t.sec.put(uint32(i))
	}
}

// takeSection returns the section freed last (sendbuf.go, lifoSections).
func (t *txPath) takeSection() (uint32, bool) {
	t.gatherFreed()
	if n := len(t.stash); n > 0 {
		v := t.stash[n-1]
		t.stash = t.stash[:n-1]
		t.stashN.Store(int32(len(t.stash)))
		return v, true
	}
	return t.sec.take()
}

// untakeSection parks a section taken but not sent: the free ring has a
// single producer (the completion path), so the consumer keeps its own
// short list.
func (t *txPath) untakeSection(idx uint32) {
	t.stash = append(t.stash, idx)
	t.stashN.Store(int32(len(t.stash)))
}

// sections returns how many sections a burst may take now.
func (t *txPath) sections() int { return t.sec.len() + len(t.stash) }

func (t *txPath) takeGPA() (uint32, bool) {
	if n := len(t.gpaSt); n > 0 {
		v := t.gpaSt[n-1]
		t.gpaSt = t.gpaSt[:n-1]
		t.gpaStN.Store(int32(len(t.gpaSt)))
		return v, true
	}
	return t.gpa.take()
}

// untakeGPA parks a GPA slot taken but not used, as untakeSection.
func (t *txPath) untakeGPA(slot uint32) {
	t.gpaSt = append(t.gpaSt, slot)
	t.gpaStN.Store(int32(len(t.gpaSt)))
}

// What a burst stopped for, in txPath.want.
const (
	wantAny     = iota // a section or a GPA slot (or the ring, or nothing)
	wantSection        // a section: the frame can only be copied
	wantGPA            // a GPA slot: the frame is larger than a section
)

// ready reports, without locks, whether what the last burst stopped for
// (a section, a GPA slot, or either) is free.
func (t *txPath) ready() bool {
	free := t.sec.len() + int(t.stashN.Load())
	sec := free > 0
	gpa := t.gpa.len() > 0 || t.gpaStN.Load() > 0
	switch t.want.Load() {
	case wantSection:
		return free >= int(max(t.need.Load(), 1))
	case wantGPA:
		return gpa
	}
	return sec || gpa
}

// owed reports, without locks, whether the transmitter waits on the
// host's completions: a burst came back short, or left the host behind,
// within the last span nanoseconds (stalled), and the host holds sends it has not completed (sections
// or GPA slots neither free nor parked).
func (t *txPath) owed(now, span int64) bool {
	return now-t.stalled.Load() < span && t.held()
}

// held reports, without locks, whether the host holds sends it has not
// completed: sections or GPA slots neither free nor parked.
func (t *txPath) held() bool {
	return t.sec.len()+int(t.stashN.Load()) < len(t.secFrames) ||
		t.gpa.len()+int(t.gpaStN.Load()) < gpaSlots
}

// heldLocked is held for the holder of txMu, which owns the parked lists.
func (t *txPath) heldLocked() bool {
	return t.sec.len()+len(t.stash) < len(t.secFrames) ||
		t.gpa.len()+len(t.gpaSt) < gpaSlots
}

// behind reports whether the host holds at least half the queue's
// sections or GPA slots: it is behind the transmitter, which will run out
// unless completions keep coming. txMu is held.
func (t *txPath) behind() bool {
	n := len(t.secFrames)
	return (n > 0 && 2*t.sections() <= n) ||
		2*(t.gpa.len()+len(t.gpaSt)) <= gpaSlots
}

// stopped records what the burst stopped for (and, for sections, how
// many), storing only a change.
func (t *txPath) stopped(w, need int32) {
	if t.need.Load() != need {
		t.need.Store(need)
	}
	if t.want.Load() != w {
		t.want.Store(w)
	}
}

// sectionDone frees section idx, which the host completed, and returns
// what it carried; ok is false when idx is not one of the path's. Drain
// side (inMu).
func (t *txPath) sectionDone(idx uint32) (frames, bytes uint32, ok bool) {
	i := int(idx) - t.secLo
	if i < 0 || i >= len(t.secFrames) {
		return 0, 0, false
	}
	frames, bytes = t.secFrames[i], t.secBytes[i]
	t.sec.put(idx)
	return frames, bytes, true
}

// gpaDone frees GPA slot idx, which the host completed, and returns its
// packet for the caller to free. Drain side (inMu).
func (t *txPath) gpaDone(idx uint32) (*frame.Packet, uint32, bool) {
	if int(idx) >= len(t.gpaPkts) {
		return nil, 0, false
	}
	pk, bytes := t.gpaPkts[idx], t.gpaBytes[idx]
	t.gpaPkts[idx] = nil
	t.gpa.put(idx)
	return pk, bytes, true
}

// consumed queues a packet the burst is done with (copied or dropped) to
// be freed when the burst ends.
func (t *txPath) consumed(p *frame.Packet) { t.done = append(t.done, p) }

// freeConsumed frees the packets the burst consumed.
func (t *txPath) freeConsumed() {
	if len(t.done) > 0 {
		frame.PutBurst(t.done)
		clear(t.done)
		t.done = t.done[:0]
	}
}

// freeAll frees the packets of GPA sends in flight; the queue is
// quiesced.
func (t *txPath) freeAll() {
	for i, p := range t.gpaPkts {
		if p != nil {
			p.Free()
			t.gpaPkts[i] = nil
		}
	}
}

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
	// A full burst while the host holds earlier sends: the transmitter
	// streams (txPath.stalled). Single sends (a request at a time)
	// leave the host's completions to an interrupt.
	streaming := len(pkts) >= fullBurstMin && q.tx.heldLocked()
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
	mark := n < len(pkts)
	if mark {
		q.c.stopQueue.inc()
	}
	if mark || streaming || q.tx.behind() {
		now := nanotime()
		q.tx.stalled.Store(now)
		// A hybrid Wait asleep holds inMu: the completions this
		// burst's sends will bring would wait for the host's interrupt
		// and then that Wait's wake-up, and a WaitTx behind it with
		// them. Wake it now to poll them in (its wake-up overlaps the
		// sends still to come), unless the host's last work is too
		// old for it to poll (wait.go loadPollSpan): it would only
		// sleep again. rxAsleep is loaded before the swap: a failed
		// compare-and-swap still takes its line for writing, once per
		// streaming burst, from the receive loop that reads that line.
		if q.s.cfg.Mode == Hybrid && q.w.rxAsleep.Load() &&
			now-q.rx.lastRx.Load() < loadPollSpan &&
			q.w.rxAsleep.CompareAndSwap(true, false) {
			q.c.rxKicked.incShared()
			q.w.kickRx()
		}
	}
	q.txMu.Unlock()
	return n
}

func (q *Queue) txBurstLocked(pkts []*frame.Packet) int {
	s := q.s
	q.outMu.Lock()
	n := 0
	q.tx.stop, q.tx.stopNeed = wantAny, 1
	for n < len(pkts) && s.err() == nil {
		q.tx.left = len(pkts) - n
		if !q.txOne(pkts[n]) {
			break
		}
		n++
	}
	q.tx.stopped(q.tx.stop, q.tx.stopNeed)
	q.flushSection()
	if q.tx.copied > 0 {
		q.c.txCopied.add(q.tx.copied)
		q.tx.copied = 0
	}
	if q.tx.sent > 0 {
		q.c.txSections.add(q.tx.sent)
		q.tx.sent = 0
	}
	q.sendAcksLocked()
	if err := q.ch.Flush(); err != nil {
		s.fail(err)
	}
	q.outMu.Unlock()
	q.tx.freeConsumed()
	return n
}

// txOne sends (or drops) one frame; false means no resources now and the
// packet stays the caller's.
func (q *Queue) txOne(p *frame.Packet) bool {
	s := q.s
	if p.Len() == 0 {
		q.c.txTooBig.inc()
		q.tx.consumed(p)
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
			q.tx.copied++
			if info.Has&rndis.InfoLSO != 0 {
				q.c.txLSO.inc()
			}
			q.tx.consumed(p)
			return true
		case copyRingFull:
			return false
		}
		// No section: GPA-direct if the buffer is pinned (Linux tx_send_full).
		if !gpaBacked(p) {
			q.c.txNoSpace.inc()
			q.tx.stop = wantSection
			return false
		}
		q.c.txSendFull.inc()
		return q.sendGPA(p, &info)
	}
	if gpaBacked(p) {
		if !q.sendGPA(p, &info) {
			q.tx.stop = wantGPA // a section would not do (or the ring is full)
			return false
		}
		return true
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
	q.tx.consumed(p)
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
	c := &q.tx.cur
	if c.open {
		pos := (c.used + s.align - 1) &^ (s.align - 1)
		if c.frames < s.maxPkts && pos+need <= s.aggMax {
			// Pad the previous message to the alignment (rndis.PadMessage,
			// its length known here): zero the gap, extend its length.
			sec := s.send.section(c.idx)[:pos+need]
			clear(sec[c.used:pos])
			binary.LittleEndian.PutUint32(sec[c.last+offMessageLength:], uint32(pos-c.last))
			q.tx.hdr.put(sec[pos:], info, n)
			c.used, c.last = pos+need, pos
			c.frames++
			c.bytes += n
			return sec[pos+hdr : pos+need], copyOK
		}
		q.flushSection()
	}
	if !q.ch.Out().Room(2 * nvspSendSize) {
		q.c.txBusy.inc()
		return nil, copyRingFull
	}
	idx, ok := q.tx.takeSection()
	if !ok {
		return nil, copyNoSection
	}
	sec := s.send.section(int(idx))
	// Own the lines the burst's next frames will fill before filling
	// them: the host's core read them last, and one store per line
	// issued back to back lets their fetches overlap instead of each
	// waiting behind the stores of the frame before.
	end := min(len(sec), ((need+s.align-1)&^(s.align-1))*min(s.maxPkts, q.tx.left))
	for off := 0; off < end; off += 64 {
		sec[off] = 0
	}
	q.tx.hdr.put(sec, info, n)
	*c = openSection{open: true, idx: int(idx), used: need, frames: 1, bytes: n}
	return sec[hdr:need], copyOK
}

// flushSection sends the open section. Ring space for it was checked
// when it was opened, and outMu has been held since.
func (q *Queue) flushSection() {
	c := &q.tx.cur
	if !c.open {
		return
	}
	c.open = false
	t := &q.tx
	i := c.idx - t.secLo
	t.secFrames[i], t.secBytes[i] = uint32(c.frames), uint32(c.bytes)
	t.nvspBuf = nvsp.RNDISPacket{ChannelType: nvsp.RMCData, SectionIndex: uint32(c.idx), SectionSize: uint32(c.used)}.Marshal(t.nvspBuf[:0])
	if _, err := q.ch.SendRequest(vmbus.PacketInband, cookieSection|uint64(c.idx), nil, t.nvspBuf); err != nil {
		t.untakeSection(uint32(c.idx))
		q.c.txBusy.inc()
		if _, full := err.(*vmbus.RingFullError); !full && err != vmbus.ErrTooManyRequests {
			q.s.fail(err)
		}
		return
	}
	t.sent++
}

// sendGPA sends one frame GPA-direct from its pinned buffer, the RNDIS
// header written into the headroom in front of it so that the message is
// one range (docs/protocol/vmbus-ring.md §2.2: one gpa_range listing every page).
func (q *Queue) sendGPA(p *frame.Packet, info *rndis.PacketInfo) bool {
	q.flushSection()
	hdrLen := rndis.PacketHeaderSize + info.PPILen()
	if p.Headroom() < hdrLen {
		q.c.txTooBig.inc()
		q.tx.consumed(p)
		return true
	}
	t := &q.tx
	slot, ok := t.takeGPA()
	if !ok {
		q.c.txNoSpace.inc()
		return false
	}
	// The header goes into the headroom just for the lookup; the frame
	// stays where it was, for a retry or the completion.
	flen := p.Len()
	rndis.PutPacketHeader(p.Prepend(hdrLen), info, flen)
	pageOff, pfns, ok := gpaOf(p, t.pfns[:0])
	p.TrimFront(hdrLen)
	t.pfns = pfns[:0]
	if !ok {
		t.untakeGPA(slot) // cannot happen: the pool is GPA-backed
		return false
	}
	t.hdrBuf = vmbus.GPAHeader(t.hdrBuf[:0], 1)
	t.hdrBuf = vmbus.AppendGPARange(t.hdrBuf, uint32(hdrLen+flen), pageOff, pfns)
	if !q.ch.Out().Room(vmbus.PacketSize(len(t.hdrBuf), nvsp.MessageSize) + nvspSendSize) {
		t.untakeGPA(slot)
		q.c.txBusy.inc()
		return false
	}
	t.gpaPkts[slot], t.gpaBytes[slot] = p, uint32(flen)
	t.nvspBuf = nvsp.RNDISPacket{ChannelType: nvsp.RMCData, SectionIndex: nvsp.NoSection}.Marshal(t.nvspBuf[:0])
	if _, err := q.ch.SendRequest(vmbus.PacketGPADirect, cookieGPA|uint64(slot), t.hdrBuf, t.nvspBuf); err != nil {
		t.gpaPkts[slot] = nil
		t.untakeGPA(slot)
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

// WaitTx blocks until TxBurst may find room again (a free section, GPA
// slot or ring space), the NIC fails, or ctx ends. It reaps completions
// itself when nobody else is draining.
func (q *Queue) WaitTx(ctx context.Context) error {
	s := q.s
	if q.vf != nil && q.vf.txOn.Load() {
		return q.vfWaitTx(ctx)
	}
	if err := q.w.enter(); err != nil {
		return err
	}
	defer q.w.leave()
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
		q.w.txWaiting.Store(true)
		if q.inMu.TryLock() {
			// inMu stays held from the drain to the sleep: released in
			// between, a Wait could take it and sleep, leaving this
			// WaitTx blocked behind it, then asleep on the ring with
			// the room that sleeper's drain freed.
			if s.err() == nil {
				q.drainLocked()
			}
			var err error
			switch {
			case q.txReady():
			case q.s.cfg.Mode == Hybrid && q.txPollLocked(ctx):
				q.c.txPolls.incShared()
			default:
				err = q.sleepLocked(ctx, 1)
			}
			q.inMu.Unlock()
			q.w.txWaiting.Store(false)
			if err != nil {
				return err
			}
			continue
		}
		// The holder's drain may have freed what we wait for after the
		// check above but before it saw txWaiting: look again now that
		// any later drain will poke txWake.
		if q.txReady() {
			q.w.txWaiting.Store(false)
			return nil
		}
		q.c.txBlocked.incShared()
		t := time.NewTimer(time.Millisecond)
		select {
		case <-q.w.txWake:
		case <-t.C:
			q.c.txBlockedTimeouts.incShared()
		case <-ctx.Done():
		case <-s.dead:
		}
		t.Stop()
		q.w.txWaiting.Store(false)
	}
}

// txPollLocked is a hybrid WaitTx's spin before it sleeps on the ring,
// holding inMu: while the host owes completions to a transmitter that
// outran it (txPath.owed) and its last work came within loadPollSpan, it
// drains what comes until there is room, as Poll mode's WaitTx does, and
// reports whether there is. A sleep here would add a wake-up to each of
// the host's rounds of completions, the host's ring running dry
// meanwhile.
func (q *Queue) txPollLocked(ctx context.Context) bool {
	for i := 1; ; i++ {
		if i%clockEvery == 1 { // wait.go, clockEvery
			now := nanotime()
			if now-q.rx.lastRx.Load() >= loadPollSpan || !q.tx.owed(now, loadPollSpan) {
				return false
			}
		}
		if q.ch.InboundUsage() != 0 {
			q.drainLocked()
			if q.txReady() {
				return true
			}
		}
		if i%64 == 0 {
			if q.s.err() != nil || q.w.err() != nil || ctx.Err() != nil {
				return true // the caller's loop returns the error
			}
			q.yield()
		}
	}
}

// txReady reports whether a send could proceed: a free section (or GPA
// slot) and ring room. Lock-free.
func (q *Queue) txReady() bool {
	return q.tx.ready() && !q.txRingFull()
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
