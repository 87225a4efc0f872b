package netvsc

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
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
// received packets. Three locks keep that safe without the paths waiting
// on each other:
//
//	inMu   the inbound ring, the receive staging queue, the parser
//	txMu   the transmit state: the open send section, section and GPA-slot consumers
//	outMu  the outbound ring (sends, receive completions, Flush)
//
// Whoever holds inMu drains: RxBurst, Wait, a TxBurst that ran out of
// sections (TryLock only), or the control plane. A drain handles every
// packet type: frames go to the caller's slice and then to a bounded
// staging queue (dropped and counted when it is full, so send completions
// behind them are never stuck: DPDK 36274f2871), completions free sections
// through lock-free single-producer rings, and receive completions are
// queued and sent by whoever holds outMu. No lock is held while waiting
// for the host except inMu by a sleeper in Wait (others only TryLock it
// and are poked when it frees something) and outMu by WaitTx on a full
// outbound ring (receive completions are queued meanwhile). The lock
// order is txMu, inMu, outMu.
//
// So: RxBurst and Wait from one goroutine and TxBurst and WaitTx from
// another is the intended use and costs no contention beyond an
// uncontended lock per burst; any other mix is safe too. RxBurst,
// TxBurst, Wait and WaitTx return at once with nothing done once the NIC
// died, was closed or reconfigured (Err says which).
type Queue struct {
	s    *session
	idx  int
	ch   *vmbus.Channel
	pool *frame.Pool

	inMu    sync.Mutex
	stage   []*frame.Packet // received, not yet handed to RxBurst
	stHead  int
	stLen   int
	stCount atomic.Int32
	out     []*frame.Packet // the caller's slice during a drain
	outN    int
	fresh   []*frame.Packet // packets taken from the pool, not yet filled
	freshN  int
	scratch []byte
	lastRx  atomic.Int64 // when a drain last found work (nanotime)

	ackMu  sync.Mutex
	acks   owed // receive completions owed (bounded: owed.go)
	ackMsg []byte

	txMu       sync.Mutex
	sec        *idxRing // free sections of this queue's run
	secLo      int
	secFrames  []uint32 // per section of the run: frames in flight
	secBytes   []uint32
	stash      []uint32 // sections taken but not used (returned by the consumer)
	stashN     atomic.Int32
	cur        openSection
	gpa        *idxRing
	gpaSt      []uint32 // GPA slots taken but not used
	gpaPkts    []*frame.Packet
	gpaBytes   []uint32
	nvspBuf    []byte
	hdrBuf     []byte
	pfns       []uint64
	txDone     []*frame.Packet // copied packets freed at the end of a burst
	segBuf     []byte
	txWaiting  atomic.Bool
	txWake     chan struct{}
	txSections int

	outMu sync.Mutex

	wmu         sync.Mutex
	wctx        [2]waitCtx
	interrupted error

	c  queueCounters
	vf *vfQueue // the VF path (vf_path.go); nil with Config.VF off
}

type waitCtx struct {
	parent context.Context
	ctx    context.Context
	cancel context.CancelFunc
}

type openSection struct {
	open   bool
	idx    int
	used   int
	frames int
	bytes  int
	last   int
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
	n := q.unstageLocked(pkts)
	if n < len(pkts) {
		q.out, q.outN = pkts, n
		q.drainLocked()
		n = q.outN
		q.out, q.outN = nil, 0
	}
	if n < len(pkts) && q.vf != nil {
		n += q.vfRx(pkts[n:]) // the synthetic ring first, then the VF
	}
	q.inMu.Unlock()
	return n
}

// unstageLocked moves staged packets to pkts.
func (q *Queue) unstageLocked(pkts []*frame.Packet) int {
	n := min(len(pkts), q.stLen)
	for i := 0; i < n; i++ {
		pkts[i] = q.stage[q.stHead]
		q.stage[q.stHead] = nil
		q.stHead++
		if q.stHead == len(q.stage) {
			q.stHead = 0
		}
	}
	q.stLen -= n
	if n > 0 {
		q.stCount.Store(int32(q.stLen))
	}
	return n
}

// stageLocked keeps a received packet for a later RxBurst; false when the
// staging queue is full.
func (q *Queue) stageLocked(p *frame.Packet) bool {
	if q.stLen == len(q.stage) {
		return false
	}
	i := q.stHead + q.stLen
	if i >= len(q.stage) {
		i -= len(q.stage)
	}
	q.stage[i] = p
	q.stLen++
	q.stCount.Store(int32(q.stLen))
	return true
}

// drainLocked reads the inbound ring until it is empty (or burstMax
// packets, then again after committing), handling every packet. inMu is
// held.
func (q *Queue) drainLocked() {
	s := q.s
	work := false
	for q.ch.Err() == nil {
		n := 0
		for ; n < burstMax; n++ {
			p, err := q.ch.Recv()
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
		q.sendAcks(false)
		if n < burstMax {
			break
		}
	}
	if work {
		q.lastRx.Store(nanotime())
		if q.txWaiting.Load() {
			select {
			case q.txWake <- struct{}{}:
			default:
			}
		}
	}
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
		tid := uint32(p.TransID)
		q.ackMu.Lock()
		dup := q.acks.owes(tid)
		q.ackMu.Unlock()
		if dup {
			return protoerr.New("XFER_PAGES", protoerr.KindDuplicateTID, "transaction_id", p.TransID)
		}
		err := parseXfer(p, q.s.recv, q.scratch, q)
		q.ackMu.Lock()
		added := q.acks.add(tid)
		q.ackMu.Unlock()
		if !added && err == nil {
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
		i := int(idx) - q.secLo
		if i < 0 || i >= len(q.secFrames) {
			return protoerr.New("SEND_RNDIS_PKT_COMPLETE", protoerr.KindSectionIndex, "cookie", uint64(idx))
		}
		q.countTxDone(st, q.secFrames[i], q.secBytes[i])
		q.sec.put(idx)
	case cookieGPA:
		st, err := sendStatus(p.Payload())
		if err != nil {
			return err
		}
		pk := q.gpaPkts[idx]
		q.gpaPkts[idx] = nil
		q.countTxDone(st, 1, q.gpaBytes[idx])
		q.gpa.put(idx)
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

// rxData copies one received frame out of the receive buffer (rxHandler).
func (q *Queue) rxData(f rxFrame) {
	s := q.s
	if !s.running.Load() {
		s.rxIgnored.Add(1)
		return
	}
	if q.freshN == 0 {
		q.freshN = q.pool.GetBurst(q.fresh)
		if q.freshN == 0 {
			q.c.rxNoMemory.inc()
			return
		}
	}
	p := q.fresh[q.freshN-1]
	if f.n > p.Cap() {
		q.c.rxTooBig.inc()
		return
	}
	if q.outN == len(q.out) && q.stLen == len(q.stage) {
		q.c.rxNoMemory.inc()
		return
	}
	q.freshN--
	q.fresh[q.freshN] = nil
	copy(p.SetLen(f.n), s.recv[f.off:f.off+f.n])
	if f.infoOK {
		applyRxInfo(&p.Meta, &f.info)
	} else {
		q.c.rxPPIErrors.inc()
	}
	q.c.rxPackets.inc()
	q.c.rxBytes.add(uint64(f.n))
	if q.outN < len(q.out) {
		q.out[q.outN] = p
		q.outN++
		return
	}
	q.stageLocked(p)
}

// rxControl handles an RNDIS control message (rxHandler).
func (q *Queue) rxControl(msg []byte) error { return q.s.rndisControl(q, msg) }

// sendAcks sends the receive completions owed, if outMu is free (or
// always, when wait is set). A full ring leaves them for later
// (rx_comp_busy): the next drain, burst or Wait retries.
func (q *Queue) sendAcks(wait bool) {
	if !q.acksPending() {
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
	q.sendAcksLocked()
	if err := q.ch.Flush(); err != nil {
		q.s.fail(err)
	}
	q.outMu.Unlock()
}

// sendAcksLocked writes the owed completions, oldest first; outMu is
// held. A tid stops being owed once its completion is in the ring: the
// host may hand it out again only after reading it.
func (q *Queue) sendAcksLocked() {
	q.ackMu.Lock()
	defer q.ackMu.Unlock()
	sent := 0
	for q.acks.len() > 0 {
		err := q.ch.SendCompletion(uint64(q.acks.oldest()), q.ackMsg)
		if err != nil {
			if _, full := err.(*vmbus.RingFullError); full {
				q.c.rxCompBusy.inc()
				break
			}
			q.s.fail(err)
			return
		}
		q.acks.done()
		sent++
	}
	if sent > 0 {
		q.c.rxCompSent.add(uint64(sent))
	}
}

// acksPending reports receive completions still owed.
func (q *Queue) acksPending() bool {
	q.ackMu.Lock()
	defer q.ackMu.Unlock()
	return q.acks.len() > 0
}

// rxReady reports, without locks, whether RxBurst would find something:
// staged packets or unread bytes in the inbound ring.
func (q *Queue) rxReady() bool {
	if q.stCount.Load() > 0 || q.vfPending() {
		return true
	}
	_, in := q.ch.RingUsage()
	return in != 0
}

// Wait blocks until RxBurst may find work, the NIC fails, or ctx ends. In
// Hybrid mode it first polls for Config.PollBudget since the queue last
// found work, then unmasks the channel's interrupt, checks again and
// sleeps on the device's interrupt fd; Poll never sleeps; Interrupt sleeps
// at once. A nil return can be spurious.
func (q *Queue) Wait(ctx context.Context) error {
	if err := q.s.err(); err != nil {
		return err
	}
	if q.rxReady() {
		return nil
	}
	start := nanotime()
	switch q.s.cfg.Mode {
	case Poll:
		defer func() { q.c.pollNanos.v.Add(uint64(nanotime() - start)) }()
		for i := 1; ; i++ {
			if q.rxReady() {
				return nil
			}
			if i%64 == 0 {
				if err := q.s.err(); err != nil {
					return err
				}
				if err := ctx.Err(); err != nil {
					return err
				}
				if q.acksPending() {
					q.sendAcks(false)
				}
				// Busy polling wants a P of its own: with GOMAXPROCS no
				// larger than the polling queues, fd-driven goroutines
				// (TAP readers, the interrupt loop) wait for sysmon's
				// netpoll (~10 ms). Yield so that GOMAXPROCS=1 works.
				runtime.Gosched()
			}
		}
	case Hybrid:
		budget := int64(q.s.cfg.PollBudget)
		for i := 1; nanotime()-q.lastRx.Load() < budget; i++ {
			if q.rxReady() {
				q.c.rxPolls.inc()
				q.c.pollNanos.v.Add(uint64(nanotime() - start))
				return nil
			}
			if i%64 == 0 {
				if err := q.s.err(); err != nil {
					return err
				}
			}
		}
	}
	slept := nanotime()
	q.c.pollNanos.v.Add(uint64(slept - start))
	err := q.sleep(ctx, 0)
	q.c.sleepNanos.v.Add(uint64(nanotime() - slept))
	return err
}

// sleep is the blocking half of Wait (role 0) and WaitTx (role 1): under
// inMu, drain what is there, then unmask, re-check and block on the
// channel (vmbus WaitReadable). Owed receive completions are retried
// first; while they cannot be sent it sleeps briefly instead.
func (q *Queue) sleep(ctx context.Context, role int) error {
	q.inMu.Lock()
	defer q.inMu.Unlock()
	if err := q.s.err(); err != nil {
		return err
	}
	if q.stLen > 0 {
		return nil
	}
	if q.acksPending() {
		q.sendAcks(true)
		if q.acksPending() {
			t := time.NewTimer(200 * time.Microsecond)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
				return ctx.Err()
			}
			return nil
		}
	}
	wctx, err := q.waitContext(ctx, role)
	if err != nil {
		return err
	}
	if role == 0 && q.vfArm() {
		return nil // the VF has frames: no sleep
	}
	q.c.idleSleeps.inc()
	err = q.ch.WaitReadable(wctx)
	if err != nil {
		if e := q.s.err(); e != nil {
			return e
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		q.wmu.Lock()
		ie := q.interrupted
		q.wmu.Unlock()
		if ie != nil {
			return ie
		}
		if _, dead := vmbus.IsCorrupt(err); dead || q.ch.Err() != nil {
			q.s.fail(err)
			return q.s.err()
		}
		return nil
	}
	if role == 0 {
		q.c.rxWakeups.inc()
	} else {
		q.c.txWakeups.inc()
	}
	return nil
}

// waitContext returns a context that ends with parent or when the queue
// is interrupted (Close, Reconfigure), reusing one per role while the
// caller keeps passing the same parent, so a sleeping loop allocates
// nothing.
func (q *Queue) waitContext(parent context.Context, role int) (context.Context, error) {
	q.wmu.Lock()
	defer q.wmu.Unlock()
	if q.interrupted != nil {
		return nil, q.interrupted
	}
	w := &q.wctx[role]
	if w.parent == parent && w.ctx != nil && w.ctx.Err() == nil {
		return w.ctx, nil
	}
	if w.cancel != nil {
		w.cancel()
	}
	w.ctx, w.cancel = context.WithCancel(parent)
	w.parent = parent
	return w.ctx, nil
}

// interrupt wakes sleepers for good: Wait and WaitTx return err.
func (q *Queue) interrupt(err error) {
	q.wmu.Lock()
	if q.interrupted == nil {
		q.interrupted = err
	}
	for i := range q.wctx {
		if q.wctx[i].cancel != nil {
			q.wctx[i].cancel()
		}
	}
	q.wmu.Unlock()
	select {
	case q.txWake <- struct{}{}:
	default:
	}
}

// quiesce takes every lock of the queue (after interrupt), so no burst is
// running and none will touch the rings until release.
func (q *Queue) quiesce() {
	q.txMu.Lock()
	q.inMu.Lock()
	q.outMu.Lock()
}

func (q *Queue) release() {
	q.outMu.Unlock()
	q.inMu.Unlock()
	q.txMu.Unlock()
}

// freeAll returns every packet the queue holds (staged, fresh, in GPA
// flight) to the pool; the queue is quiesced.
func (q *Queue) freeAll() {
	for q.stLen > 0 {
		var one [1]*frame.Packet
		q.unstageLocked(one[:])
		one[0].Free()
	}
	for i := 0; i < q.freshN; i++ {
		q.fresh[i].Free()
		q.fresh[i] = nil
	}
	q.freshN = 0
	for i, p := range q.gpaPkts {
		if p != nil {
			p.Free()
			q.gpaPkts[i] = nil
		}
	}
}
