package netvsp

// Host to guest: frames from the vSwitch wait in their channel's queue,
// then go out as transfer-page packets over receive-buffer sub-allocations
// (docs/protocol/netvsc.md §2.6):
//
//	transfer-page packet: type 7, completion requested, tid = first sub-allocation
//	  header  xfer_pageset_id = the guest's receive-buffer id, range count,
//	          one range per RNDIS message {byte count, byte offset}
//	  payload NVSP SEND_RNDIS_PKT {channel type data|control, 0xFFFFFFFF, 0}
//	each RNDIS PACKET_MSG: header @0, per-packet info @44 (checksum always, VLAN
//	  when the frame was tagged, hash value and hash info when RSS is on), the
//	  frame right after; MessageLength and the range cover its whole run of
//	  sub-allocations, as openvmm's (guests must use DataOffset/DataLength)
//
// At most nvsp.MaxPacketsPerReceive (375) ranges per packet.

import (
	"sync"
	"sync/atomic"

	"github.com/vmbusd/vmbusd/netvsc/nvsp"
	"github.com/vmbusd/vmbusd/netvsc/rndis"
	"github.com/vmbusd/vmbusd/sim/vswitch"
	"github.com/vmbusd/vmbusd/vmbus"
)

// frameQueue is a channel's bounded queue of frames waiting for the guest:
// any goroutine pushes, the channel's loop (one goroutine) consumes. Slots
// keep their buffers, so a warm queue does not allocate. Make it with
// newFrameQueue.
//
// Producers take mu; the consumer does not (but to give back a
// super-frame buffer): it reads up to the published tail and moves head
// on, each an atomic, and a producer fills only slots outside
// [head, tail). A producer may publish a run of frames at once
// (pushBatch), so a batch from a port costs one lock and one publication.
//
// The bound is in wire frames: a TCP super-frame queued whole for a guest
// with RSC counts as the segments it stands for, so that the queue holds
// as much data (and delay) as with MTU-sized frames; it goes into one of
// a few 64 KiB buffers kept for them (superBufs), not into a slot's own.
type frameQueue struct {
	slots []rxSlot

	// The consumer's, on a cache line of their own.
	_         [64]byte
	head      atomic.Uint64 // oldest frame queued
	weightOut atomic.Uint64 // wire frames ever released

	// The producers'.
	_        [64]byte
	tail     atomic.Uint64 // one past the newest frame published: written under mu
	mu       sync.Mutex
	next     uint64   // one past the newest frame filled (tail once published)
	weightIn uint64   // wire frames ever pushed
	bigFree  [][]byte // super-frame buffers not in use
	bigMade  int
	_        [64]byte
}

// rxSlot is 64 bytes: the consumer reads one cache line per frame.
type rxSlot struct {
	buf    []byte
	big    []byte // the super-frame's buffer when rsc
	hash   uint32
	typ    rndis.HashInfo // 0: no hash
	weight uint32         // wire frames (at most the queue's length)
	rsc    bool           // a TCP super-frame the guest takes coalesced (RSC fragments)
}

// frame returns the slot's frame.
func (s *rxSlot) frame() []byte {
	if s.rsc {
		return s.big
	}
	return s.buf
}

// superBufs bounds a queue's 64 KiB super-frame buffers.
const (
	superBufs    = 64
	superBufSize = 65536 + 128
)

func newFrameQueue(n int) frameQueue { return frameQueue{slots: make([]rxSlot, n)} }

// push copies f into the queue, counting weight wire frames; false when
// the queue is full (or, for a super-frame, out of super-frame buffers).
func (q *frameQueue) push(f []byte, hash uint32, typ rndis.HashInfo, rsc bool, weight int) bool {
	q.mu.Lock()
	ok := q.pushLocked(f, hash, typ, rsc, weight)
	q.publishLocked()
	q.mu.Unlock()
	return ok
}

// pushLocked is push with mu held, without publishing the frame.
func (q *frameQueue) pushLocked(f []byte, hash uint32, typ rndis.HashInfo, rsc bool, weight int) bool {
	if q.next-q.head.Load() == uint64(len(q.slots)) || q.weightLocked()+weight > len(q.slots) {
		return false
	}
	s := &q.slots[q.next%uint64(len(q.slots))]
	if rsc {
		var b []byte
		switch {
		case len(f) > superBufSize:
			return false
		case len(q.bigFree) > 0:
			b = q.bigFree[len(q.bigFree)-1]
			q.bigFree = q.bigFree[:len(q.bigFree)-1]
		case q.bigMade < superBufs:
			b = make([]byte, 0, superBufSize)
			q.bigMade++
		default:
			return false
		}
		s.big = append(b[:0], f...)
	} else {
		s.buf = append(s.buf[:0], f...)
	}
	s.hash, s.typ, s.rsc, s.weight = hash, typ, rsc, uint32(weight)
	q.weightIn += uint64(weight)
	q.next++
	return true
}

// publishLocked hands the frames filled so far to the consumer.
func (q *frameQueue) publishLocked() {
	if q.tail.Load() != q.next {
		q.tail.Store(q.next)
	}
}

// weightLocked returns the wire frames queued (mu held).
func (q *frameQueue) weightLocked() int { return int(q.weightIn - q.weightOut.Load()) }

// A pushBatch pushes a run of frames holding each queue's lock while
// consecutive frames go to it, and publishes them when it moves to
// another queue or is done. Not safe for concurrent use; call done when
// the run ends. A nil batch pushes each frame alone (frameQueue.push).
type pushBatch struct{ q *frameQueue }

func (b *pushBatch) push(q *frameQueue, f []byte, hash uint32, typ rndis.HashInfo, rsc bool, weight int) bool {
	if b == nil {
		return q.push(f, hash, typ, rsc, weight)
	}
	if b.q != q {
		b.done()
		q.mu.Lock()
		b.q = q
	}
	return q.pushLocked(f, hash, typ, rsc, weight)
}

// done publishes what the batch pushed and lets go of its queue.
func (b *pushBatch) done() {
	if b.q != nil {
		b.q.publishLocked()
		b.q.mu.Unlock()
		b.q = nil
	}
}

func (q *frameQueue) pending() bool { return q.tail.Load() != q.head.Load() }

// span returns the queued range [head, tail); the consumer reads slots in
// it without the lock (the producer only writes outside it).
func (q *frameQueue) span() (head, tail uint64) { return q.head.Load(), q.tail.Load() }

func (q *frameQueue) at(i uint64) *rxSlot { return &q.slots[i%uint64(len(q.slots))] }

// release drops the n oldest frames (the consumer).
func (q *frameQueue) release(n uint64) {
	head := q.head.Load()
	var w uint64
	for i := range n {
		s := q.at(head + i)
		if s.rsc {
			q.mu.Lock()
			q.bigFree = append(q.bigFree, s.big)
			q.mu.Unlock()
			s.big, s.rsc = nil, false
		}
		w += uint64(s.weight)
	}
	q.weightOut.Add(w)
	q.head.Store(head + n) // the slots are the producers' again
}

// drain drops everything queued and returns how many frames that was.
func (q *frameQueue) drain() uint64 {
	n := q.tail.Load() - q.head.Load()
	q.release(n)
	return n
}

// sectionRing hands out runs of consecutive receive sub-allocations
// [lo, hi) in ring order and takes them back in any order; a run is reused
// only after every run before it came back (a run the guest is slow to
// complete holds the ones after it, as a real host's receive ring does).
// A run's id is its first sub-allocation. Not safe for concurrent use: its
// channel's loop owns it.
type sectionRing struct {
	lo, hi     uint32
	head, tail uint32 // next to hand out; oldest not yet reclaimed
	used       uint32 // sub-allocations in [tail, head), skipped ones included
	end        []uint32
	state      []uint8
}

const (
	runFree uint8 = iota
	runOut        // handed to the guest
	runDone       // completed (or skipped), waiting for the tail
)

func (r *sectionRing) init(lo, hi uint32) {
	*r = sectionRing{lo: lo, hi: hi, head: lo, tail: lo, end: make([]uint32, hi-lo), state: make([]uint8, hi-lo)}
}

func (r *sectionRing) size() uint32 { return r.hi - r.lo }

// canAlloc reports whether at least one sub-allocation is free.
func (r *sectionRing) canAlloc() bool { return r.used < r.size() }

// contiguous returns how many sub-allocations are free from head without
// wrapping.
func (r *sectionRing) contiguous() uint32 {
	if r.used == r.size() {
		return 0
	}
	if r.head >= r.tail {
		return r.hi - r.head
	}
	return r.tail - r.head
}

// alloc hands out a run of k sub-allocations, wrapping to lo (and skipping
// the tail end) when they do not fit before hi.
func (r *sectionRing) alloc(k uint32) (uint32, bool) {
	if k == 0 || k > r.size() || r.used+k > r.size() {
		return 0, false
	}
	if r.used == 0 {
		r.head, r.tail = r.lo, r.lo
	}
	if k <= r.contiguous() {
		return r.take(r.head, k), true
	}
	if r.head >= r.tail && r.lo+k <= r.tail {
		skip := r.hi - r.head
		r.end[r.head-r.lo] = r.hi
		r.state[r.head-r.lo] = runDone
		r.used += skip
		r.head = r.lo
		return r.take(r.lo, k), true
	}
	return 0, false
}

func (r *sectionRing) take(start, k uint32) uint32 {
	r.end[start-r.lo] = start + k
	r.state[start-r.lo] = runOut
	r.used += k
	r.head = start + k
	if r.head == r.hi {
		r.head = r.lo
	}
	return start
}

// grow extends the run at start, the last one handed out, by k
// sub-allocations if they follow it without wrapping.
func (r *sectionRing) grow(start, k uint32) bool {
	if start < r.lo || start >= r.hi || r.state[start-r.lo] != runOut {
		return false
	}
	e := r.end[start-r.lo]
	if e == r.hi || r.head != e || k > r.contiguous() {
		return false
	}
	r.end[start-r.lo] = e + k
	r.used += k
	r.head = e + k
	if r.head == r.hi {
		r.head = r.lo
	}
	return true
}

// release takes back the run starting at start (the guest's completion);
// false when no such run is out.
func (r *sectionRing) release(start uint32) bool {
	if start < r.lo || start >= r.hi || r.state[start-r.lo] != runOut {
		return false
	}
	r.state[start-r.lo] = runDone
	for r.used > 0 && r.state[r.tail-r.lo] == runDone {
		e := r.end[r.tail-r.lo]
		r.state[r.tail-r.lo] = runFree
		r.used -= e - r.tail
		r.tail = e
		if r.tail == r.hi {
			r.tail = r.lo
		}
	}
	return true
}

// isOut reports whether a run starting at start is with the guest.
func (r *sectionRing) isOut(start uint32) bool {
	return start >= r.lo && start < r.hi && r.state[start-r.lo] == runOut
}

// deliver sends queued frames to the guest and reports progress.
func (ch *nicChan) deliver() bool {
	q := &ch.rxq
	if !q.pending() {
		return false
	}
	ss := ch.ss
	st := &ss.n.st
	cfg := ss.cfg.Load()
	if cfg.stopped {
		st.rxDropped.Add(q.drain())
		return true
	}
	ch.initRings(cfg)
	if !ch.dataInit || !cfg.rndisReady {
		return false
	}
	msgSize := ss.msgSize()
	progress := false
	head, tail := q.span()
	limit := nvsp.MaxPacketsPerReceive
	if cfg.rscOn(false) || cfg.rscOn(true) {
		limit = nvsp.RSCMax
	}
	for head < tail {
		free := ch.c.Out().Free() - respReserve
		fixed := vmbus.PacketSize(8, msgSize)
		if free <= fixed+8 {
			ch.blockedOut, ch.needOut = true, fixed+8+respReserve
			break
		}
		ranges := min(limit, (free-fixed)/8-1)
		n := ch.sendFrames(cfg, head, int(tail-head), ranges, msgSize)
		if n == 0 {
			break // out of sub-allocations: wait for completions
		}
		head += uint64(n)
		q.release(uint64(n))
		progress = true
	}
	return progress
}

// prefetchAhead is how many sub-allocations ahead of the one it writes
// sendFrames asks the CPU to fetch.
const prefetchAhead = 4

// sendFrames writes up to m frames from the queue, starting at head, into
// one run of sub-allocations, one RNDIS message (range) each, or one per
// fragment of a coalesced frame, at most maxRanges in all, and sends its
// transfer-page packet. It returns how many frames went.
func (ch *nicChan) sendFrames(cfg *sessCfg, head uint64, m, maxRanges, msgSize int) int {
	ss := ch.ss
	f := &ss.n.faults
	// The per-frame faults are looked at only when some fault is on: one
	// switched on while the packet is written applies from the next one.
	faulty := f.on.Load() != 0
	sub := cfg.subSize
	pfEnd := min(len(ss.recv), int(ch.data.hi)*int(sub)) // prefetch inside the channel's part
	ranges := ch.xfer[:8]
	var start, cur uint32
	var bytes uint64
	n, nr := 0, 0
	for ; n < m && nr < maxRanges; n++ {
		s := ch.rxq.at(head + uint64(n))
		fr := s.frame()
		if s.rsc {
			k := rscFragments(len(fr), int(sub), s.typ != 0)
			if nr+k > maxRanges {
				break
			}
			if n == 0 {
				var ok bool
				if start, ok = ch.data.alloc(uint32(k)); !ok {
					return 0
				}
				cur = start
			} else if !ch.data.grow(start, uint32(k)) {
				break
			}
			ranges = ch.putFragments(ranges, s, int(cur), int(sub))
			cur += uint32(k)
			nr += k
			bytes += uint64(len(fr))
			continue
		}
		var info rndis.PacketInfo
		if tci, tagged := vswitch.FrameTagged(fr); tagged {
			ch.vlanBuf = vswitch.StripVLAN(ch.vlanBuf, fr)
			fr = ch.vlanBuf
			info.SetVLAN(rndis.VLANInfoFromTCI(tci))
		}
		info.SetChecksum(uint32(vswitch.RxChecksum(fr)))
		if s.typ != 0 {
			info.SetHashValue(s.hash)
			info.SetHashInfo(s.typ)
		}
		hdr := rndis.PacketHeaderSize + info.PPILen()
		k := (uint32(hdr+len(fr)) + sub - 1) / sub
		if n == 0 {
			var ok bool
			if start, ok = ch.data.alloc(k); !ok {
				return 0
			}
			cur = start
		} else if !ch.data.grow(start, k) {
			break
		}
		off := int(cur) * int(sub)
		runLen := int(k * sub)
		// The sub-allocations after this one take the next frames: ask
		// for their first lines now, so that their writes find them
		// (the guest read them last, on its own CPU).
		from := prefetchAhead
		if n == 0 {
			from = 1
		}
		for j := from; j <= prefetchAhead; j++ {
			if pf := off + j*runLen; pf+128 <= pfEnd {
				prefetchw128(&ss.recv[pf])
			}
		}
		dst := ss.recv[off : off+runLen]
		rndis.PutPacketAt(dst, &info, fr, hdr, runLen)
		roff := uint32(off)
		if faulty {
			ch.corruptRx(dst, &info)
			if f.take(NICFaultRangeOutsideBuffer) {
				roff = uint32(len(ss.recv)) - 8
			}
		}
		ranges = vmbus.AppendTransferRange(ranges, uint32(runLen), roff)
		cur += k
		nr++
		bytes += uint64(len(fr))
	}
	if n == 0 {
		return 0
	}
	id := cfg.recvID
	if f.take(NICFaultXferPageSet) {
		id ^= 0x0101
	}
	vmbus.TransferPageHeader(ranges[:0], id, nr)
	t := nvsp.TypeSendRNDISPkt
	payload := nvsp.RNDISPacket{ChannelType: nvsp.RMCData, SectionIndex: nvsp.NoSection}.Marshal(ch.xmsg[:0])
	if f.take(NICFaultNVSPType) {
		t = nvsp.TypeSendRNDISPktComplete
		le32put(payload, uint32(t))
	}
	payload = padTo(payload, msgSize)
	tid := uint64(start)
	if f.take(NICFaultSectionIndex) {
		tid = uint64(cfg.subCount)
		ch.alias(tid, start)
	}
	if err := ch.c.Send(vmbus.PacketTransferPage, vmbus.FlagCompletionRequested, tid, ranges, payload); err != nil {
		ch.data.release(start) // reclaimed once the runs before it are
		return 0
	}
	if f.take(NICFaultDuplicateTID) {
		if ch.c.Send(vmbus.PacketTransferPage, vmbus.FlagCompletionRequested, tid, ranges, payload) == nil {
			ch.alias(tid, start)
		}
	}
	ch.outstanding.Add(1)
	ch.rxTransfers.Add(1)
	ch.rxPackets.Add(uint64(n))
	st := &ss.n.st
	st.rxTransfers.Add(1)
	st.rxPackets.Add(uint64(n))
	st.rxBytes.Add(bytes)
	return n
}

// corruptRx applies the one-shot faults that corrupt a received RNDIS
// message in the receive buffer.
func (ch *nicChan) corruptRx(msg []byte, info *rndis.PacketInfo) {
	f := &ch.ss.n.faults
	switch {
	case f.take(NICFaultRNDISLength):
		le32put(msg[4:], uint32(len(msg)+8))
	case f.take(NICFaultRNDISOffset):
		le32put(msg[8:], uint32(len(msg)))
	case f.take(NICFaultRNDISDataLength):
		le32put(msg[12:], 0)
	case f.take(NICFaultBadPPI):
		if info.PPILen() > 0 {
			le32put(msg[rndis.PacketHeaderSize:], rndis.PPIUint32Size-1)
		}
	case f.take(NICFaultRNDISType):
		le32put(msg[0:], 0x7777)
	}
}

// alias records a transaction id a fault put on a packet in place of (or
// besides) its run's: its completion gives back the run.
func (ch *nicChan) alias(tid uint64, start uint32) {
	if ch.aliases == nil {
		ch.aliases = map[uint64][]uint32{}
	}
	ch.aliases[tid] = append(ch.aliases[tid], start)
}

// sendControl sends one RNDIS control message (a completion or an
// indication) from the control pool; false when the pool or the ring has
// no room yet.
func (ch *nicChan) sendControl(b []byte) bool {
	ss := ch.ss
	cfg := ss.cfg.Load()
	ch.initRings(cfg)
	if !ch.ctlInit || cfg.stopped {
		return true // nowhere to put it: dropped, as the host's would be
	}
	msgSize := ss.msgSize()
	need := vmbus.PacketSize(16, msgSize)
	if ch.c.Out().Free()-respReserve <= need {
		ch.blockedOut, ch.needOut = true, need+respReserve
		return false
	}
	sub := cfg.subSize
	k := (uint32(len(b)) + sub - 1) / sub
	start, ok := ch.ctl.alloc(k)
	if !ok {
		return false
	}
	off := int(start) * int(sub)
	copy(ss.recv[off:off+int(k*sub)], b)
	hdr := vmbus.TransferPageHeader(ch.xfer[:0], cfg.recvID, 1)
	hdr = vmbus.AppendTransferRange(hdr, uint32(len(b)), uint32(off))
	payload := padTo(nvsp.RNDISPacket{ChannelType: nvsp.RMCControl, SectionIndex: nvsp.NoSection}.Marshal(ch.xmsg[:0]), msgSize)
	if err := ch.c.Send(vmbus.PacketTransferPage, vmbus.FlagCompletionRequested, uint64(start), hdr, payload); err != nil {
		ch.ctl.release(start)
		return false
	}
	return true
}

// padTo zero-pads (or cuts) b to n bytes.
func padTo(b []byte, n int) []byte {
	for len(b) < n {
		b = append(b, 0)
	}
	return b[:n]
}
