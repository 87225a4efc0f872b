package netvsc

import (
	"sync"
	"time"

	"github.com/vmbusd/vmbusd/frame"
	"github.com/vmbusd/vmbusd/netvsc/nvsp"
	"github.com/vmbusd/vmbusd/netvsc/protoerr"
	"github.com/vmbusd/vmbusd/vmbus"
)

// A Queue is one channel of the NIC: its receive side (transfer-page
// packets from the host) and transmit side (send-buffer sections or
// GPA-direct packets to the host).
//
// Concurrency contract. A queue's two rings are shared between its
// receive and transmit paths: the inbound ring carries received frames
// *and* the host's completions of our sends (and, on queue 0, control
// answers); the outbound ring carries our sends *and* our completions of
// received packets. So the Queue holds the rings and their locks, and
// each path owns its state under one of them:
//
//	rx    rxPath       frames on their way to RxBurst         inMu
//	tx    txPath       sections, GPA slots, the open section  txMu (completion side: inMu)
//	acks  completions  receive completions owed (fixed ring)  acks.mu
//	w     waiter       sleep contexts, the transmit wake-up   w.mu
//
// Whoever holds inMu drains: RxBurst, Wait, a TxBurst or WaitTx that ran
// out of sections, or the control plane. A drain handles every packet
// type: frames go to the caller's slice, then to a bounded staging queue,
// then, with no packet or slot left for them, stay in the receive buffer
// with their completion held until a later RxBurst copies them (rx.go,
// rxPath.held: the host's buffer fills and the host drops). The drain
// reads on regardless, so send completions behind them are never stuck
// (DPDK 36274f2871). Completions free sections through lock-free
// single-producer rings, and receive completions are owed and sent by
// whoever holds outMu. No lock is held while waiting
// for the host except inMu by a sleeper in Wait or WaitTx (or a hybrid
// WaitTx polling for the completions it waits on, txPollLocked) and outMu by
// WaitTx on a full outbound ring (for at most 5 ms; receive completions
// stay owed meanwhile).
//
// Lock order. A lock may be taken while holding only locks to its left:
//
//	w.rings -> txMu -> inMu -> outMu -> acks.mu
//	           txMu -> inMu  -> w.mu
//
// (quiesce takes the first four in that order; w.rings is held shared by
// Wait and WaitTx for their lock-free ring reads, wait.go.) acks.mu and w.mu are
// leaves, held for a few instructions. Because inMu can be held for a
// whole sleep, nobody else waits for it on the data path; the TryLocks:
//
//   - TxBurst (tx.go), holding txMu, out of sections: TryLock inMu to reap
//     send completions itself; when it is held, its holder drains them.
//   - WaitTx (tx.go): TryLock inMu to drain and then (hybrid: poll for
//     the completions it waits on while they come, txPollLocked) sleep
//     on the ring, holding it from the drain through the sleep; when it
//     is held, wait on w.txWake, which every drain that found work
//     signals (or 1 ms, in case the holder sleeps on an idle ring). It
//     sets w.txWaiting before its last look for room, so a drain either
//     freed the room before that look or sees the flag and signals; a
//     sleeper in Wait woken meanwhile drains at once, under the inMu it
//     holds, instead of leaving it to its caller's next RxBurst.
//   - control.wait (control.go) on queue 0: TryLock inMu to drain itself;
//     otherwise the holder's drain hands the answer over (c.ready).
//   - vfManager.waitActive (vf_pair.go): TryLock queue 0's inMu to drain
//     the association while nobody receives yet.
//   - sendAcksDrain (a drain, holding inMu): TryLock outMu; when a TxBurst,
//     WaitTx or control send holds it, the completions stay owed and the
//     holder (TxBurst, WaitTx) or the next drain or sleep sends them.
//
// Blocking takes are inMu by RxBurst and Wait (their own lock), outMu by
// every sender, and all three by the VF manager's barriers and teardown.
//
// So: RxBurst and Wait from one goroutine and TxBurst and WaitTx from
// another is the intended use and costs no contention beyond an
// uncontended lock per burst; any other mix is safe too. RxBurst,
// TxBurst, Wait and WaitTx return at once with nothing done once the NIC
// died, was closed or reconfigured (Err says which).
type Queue struct {
	// Immutable after newQueue.
	s    *session
	idx  int
	ch   *vmbus.Channel
	pool *frame.Pool
	vf   *vfQueue // the VF path (vf_path.go); nil with Config.VF off
	// yield is Poll mode's pause between rounds of empty polls:
	// ch.PollYield (tests count the calls).
	yield func()

	txMu  sync.Mutex // tx
	inMu  sync.Mutex // the inbound ring, the drain, rx, tx's completion side
	outMu sync.Mutex // the outbound ring: sends, receive completions, Flush

	rx   rxPath
	tx   txPath
	acks completions
	w    waiter

	c queueCounters // each counter says which lock it is written under
}

// Cookie kinds of the requests a queue sends (vmbus request-table cookies).
const (
	cookieSection = 1 << 32
	cookieGPA     = 2 << 32
	cookieCtl     = 3 << 32 // an NVSP control request; low bits: sequence
	cookieCtlSend = 4 << 32 // the send of an RNDIS control message
	cookieKind    = 0xffffffff << 32
)

// gpaSlots is the GPA-direct sends a queue keeps in flight.
const gpaSlots = 256

// burstMax bounds the ring packets one drain reads before committing, so
// the host gets its space back while a long backlog is worked through.
const burstMax = 512

// ringTrailer is the 8 bytes that follow every packet in a VMBus ring
// (the sender's write index), counted in rxPath.inPos.
const ringTrailer = 8

var epoch = time.Now()

func nanotime() int64 { return int64(time.Since(epoch)) }

// Index returns the queue's number (0 is the primary channel).
func (q *Queue) Index() int { return q.idx }

// Channel returns the queue's VMBus channel (for its ring counters).
func (q *Queue) Channel() *vmbus.Channel { return q.ch }

// Pool returns the queue's packet pool.
func (q *Queue) Pool() *frame.Pool { return q.pool }

// Alloc returns a free packet from the queue's pool, or nil when it is
// exhausted.
func (q *Queue) Alloc() *frame.Packet { return q.pool.Get() }

// AllocBurst fills pkts from the queue's pool and returns how many.
func (q *Queue) AllocBurst(pkts []*frame.Packet) int { return q.pool.GetBurst(pkts) }

// Err returns why the queue stopped (ErrClosed, ErrReconfigured, a
// *DeviceError), or nil.
func (q *Queue) Err() error { return q.s.err() }

// Stats returns a snapshot of the queue's counters.
func (q *Queue) Stats() QueueStats { return q.stats() }

// RxBurst fills pkts with received frames and returns how many. Each
// packet is the caller's until it frees it (or passes it to TxBurst). It
// never blocks; call Wait when it returns 0.
func (q *Queue) RxBurst(pkts []*frame.Packet) int {
	if len(pkts) == 0 || q.s.err() != nil {
		return 0
	}
	q.inMu.Lock()
	if q.s.err() != nil { // stopped while we waited for the lock
		q.inMu.Unlock()
		return 0
	}
	r := &q.rx
	n := r.unstage(pkts)
	if n < len(pkts) && r.hLen > 0 {
		k, err := q.unhold(pkts[n:])
		n += k
		if err != nil {
			q.s.fail(err)
		} else if k > 0 {
			q.sendAcksDrain(false) // the host waits for them to refill its buffer
		}
	}
	if n < len(pkts) {
		r.out, r.outN = pkts, n
		q.drainLocked()
		n = r.outN
		r.out, r.outN = nil, 0
	}
	if n < len(pkts) && q.vf != nil {
		n += q.vfRx(pkts[n:]) // the synthetic ring first, then the VF
	}
	if n == len(pkts) && n >= fullBurstMin {
		r.fullAt.Store(nanotime())
	}
	q.inMu.Unlock()
	return n
}

// fullBurstMin is the smallest slice whose filling marks the receiver as
// behind the host (rxPath.fullAt): a caller reading one frame at a time
// fills its slice on every frame, load or not.
const fullBurstMin = 8

// drainLocked reads the inbound ring until it is empty (or burstMax
// packets, then again after committing), handling every packet. inMu is
// held.
//
// A dead channel fails the session. The device's interrupt loop kills
// every channel when the host goes (a rescind) and tells the session
// nothing: left running, its Wait would report the bytes still unread
// in the dead ring as work at once, every time, and a receive loop
// would spin on RxBurst returning nothing, never seeing an error or its
// context.
func (q *Queue) drainLocked() {
	s := q.s
	work := false
	for {
		if err := q.ch.Err(); err != nil {
			s.fail(err)
			break
		}
		n := 0
		for ; n < burstMax; n++ {
			p, err := q.recv()
			if err == vmbus.ErrRingEmpty {
				break
			}
			if err != nil {
				s.fail(err)
				return
			}
			if err := q.handle(&p); err != nil {
				s.fail(err)
				return
			}
		}
		if n > 0 {
			work = true
			if err := q.ch.CommitRecv(); err != nil {
				s.fail(err)
				return
			}
		}
		q.sendAcksDrain(false)
		if n < burstMax {
			break
		}
	}
	if work {
		q.rx.lastRx.Store(nanotime())
		q.w.wakeTx()
	}
}

// recv reads the next inbound packet and notes where in the ring it
// starts (rxPath.at, for completions.reused). inMu is held.
func (q *Queue) recv() (vmbus.Packet, error) {
	p, err := q.ch.Recv()
	if err == nil {
		q.rx.at = q.rx.inPos
		q.rx.inPos += uint64(p.Len8)*8 + ringTrailer
	}
	return p, err
}

// handle dispatches one inbound packet.
func (q *Queue) handle(p *vmbus.Packet) error {
	switch p.Type {
	case vmbus.PacketTransferPage:
		q.c.rxXfers.inc()
		// DPDK indexes its receive bookkeeping with the tid: openvmm's
		// convention (the first sub-allocation) keeps it below the count.
		if p.TransID >= uint64(q.s.subAllocs) {
			return protoerr.New("XFER_PAGES", protoerr.KindSectionIndex, "transaction_id", p.TransID)
		}
		// The tid is owed only once every range was read: from then on
		// whoever holds outMu (a TxBurst on another goroutine) may send
		// its completion, and the host may write new frames over the
		// sub-allocations as soon as it reads that. Only inMu's holder
		// adds, so the check still holds when the tid is added.
		// A tid whose frames are held is owed as well, only later.
		tid := uint32(p.TransID)
		r := &q.rx
		if r.holds(tid) || q.acks.reused(tid, r.at) {
			return protoerr.New("XFER_PAGES", protoerr.KindDuplicateTID, "transaction_id", p.TransID)
		}
		r.xfer, r.xferN = tid, 0
		err := parseXfer(p, q.s.recv, r.scratch, q)
		r.countXfer(&q.c)
		if r.xferN > 0 {
			r.tidHeld[tid] = r.xferN // owed once the last is copied (unhold)
			return err
		}
		if !q.acks.add(tid) && err == nil {
			err = protoerr.New("XFER_PAGES", protoerr.KindDuplicateTID, "transaction_id", p.TransID)
		}
		return err
	case vmbus.PacketCompletion:
		return q.complete(p)
	case vmbus.PacketInband:
		return q.s.inband(q, p)
	}
	return protoerr.New("VMBUS", protoerr.KindType, "packet type", uint64(p.Type))
}

// complete handles the host's completion of one of our requests.
func (q *Queue) complete(p *vmbus.Packet) error {
	idx := uint32(p.Cookie)
	switch p.Cookie & cookieKind {
	case cookieSection:
		st, err := sendStatus(p.Payload())
		if err != nil {
			return err
		}
		frames, bytes, ok := q.tx.sectionDone(idx)
		if !ok {
			return protoerr.New("SEND_RNDIS_PKT_COMPLETE", protoerr.KindSectionIndex, "cookie", uint64(idx))
		}
		q.countTxDone(st, frames, bytes)
	case cookieGPA:
		st, err := sendStatus(p.Payload())
		if err != nil {
			return err
		}
		pk, bytes, ok := q.tx.gpaDone(idx)
		if !ok {
			return protoerr.New("SEND_RNDIS_PKT_COMPLETE", protoerr.KindSectionIndex, "cookie", uint64(idx))
		}
		q.countTxDone(st, 1, bytes)
		if pk != nil {
			pk.Free()
		}
	case cookieCtl:
		q.s.ctl.onNVSP(p.Cookie, p.Payload())
	case cookieCtlSend:
		return q.s.ctl.onSendDone(p.Payload())
	default:
		return protoerr.New("COMPLETION", protoerr.KindType, "cookie", p.Cookie)
	}
	return nil
}

func (q *Queue) countTxDone(st nvsp.Status, frames, bytes uint32) {
	q.c.txCompletions.inc()
	if st != nvsp.StatusSuccess {
		// Linux logs it and frees the send all the same; the host
		// dropped the frames, the device carries on.
		q.c.txFailed.add(uint64(frames))
		q.s.log.Warn("host failed a send", "queue", q.idx, "status", st.String(), "frames", frames)
		return
	}
	q.c.txPackets.add(uint64(frames))
	q.c.txBytes.add(uint64(bytes))
}

// sendStatus decodes the host's SEND_RNDIS_PKT_COMPLETE.
func sendStatus(b []byte) (nvsp.Status, error) {
	var m nvsp.RNDISComplete
	if err := m.Unmarshal(b); err != nil {
		return 0, err
	}
	return m.Status, nil
}

// sendAcks sends the receive completions owed, if outMu is free (or
// always, when wait is set). A full ring leaves them for later
// (rx_comp_busy): the next drain, burst or Wait retries.
func (q *Queue) sendAcks(wait bool) { q.sendAcksMarked(wait, false) }

// sendAcksDrain is sendAcks for the holder of inMu, which knows where the
// host's writes to the inbound ring stood before the completions went
// out: a transfer page written before that and reusing one of their tids
// stays a violation (completions.reused).
func (q *Queue) sendAcksDrain(wait bool) { q.sendAcksMarked(wait, true) }

func (q *Queue) sendAcksMarked(wait, mark bool) {
	if !q.acks.pending() {
		return
	}
	if wait {
		q.outMu.Lock()
	} else if !q.outMu.TryLock() {
		return
	}
	if q.ch.Err() != nil {
		q.outMu.Unlock()
		return
	}
	var at uint64
	if mark {
		// Loaded before Flush publishes the completions: whatever the
		// host had published by now it wrote before it could read them.
		at = q.rx.inPos + uint64(q.ch.In().Available())
	}
	q.sendAcksAt(at)
	if err := q.ch.Flush(); err != nil {
		q.s.fail(err)
	}
	q.outMu.Unlock()
}

// sendAcksLocked writes the owed completions, oldest first; outMu is
// held.
func (q *Queue) sendAcksLocked() { q.sendAcksAt(0) }

// sendAcksAt writes the owed completions, marked with the inbound-ring
// position at (0: unknown); outMu is held.
func (q *Queue) sendAcksAt(at uint64) {
	sent, err := q.acks.send(q.ch, at)
	if sent > 0 {
		q.c.rxCompSent.add(uint64(sent))
	}
	if err != nil {
		if _, full := err.(*vmbus.RingFullError); full {
			q.c.rxCompBusy.inc()
			return
		}
		q.s.fail(err)
	}
}

// interrupt wakes sleepers for good: Wait and WaitTx return err.
func (q *Queue) interrupt(err error) { q.w.interrupt(err) }

// quiesce takes every lock of the queue (after interrupt), so no burst is
// running and none will touch the rings until release.
func (q *Queue) quiesce() {
	q.w.rings.Lock()
	q.txMu.Lock()
	q.inMu.Lock()
	q.outMu.Lock()
}

func (q *Queue) release() {
	q.outMu.Unlock()
	q.inMu.Unlock()
	q.txMu.Unlock()
	q.w.rings.Unlock()
}

// freeAll returns every packet the queue holds (staged, fresh, in GPA
// flight) to the pool; the queue is quiesced.
func (q *Queue) freeAll() {
	q.rx.freeAll()
	q.tx.freeAll()
}
