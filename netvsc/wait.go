package netvsc

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vmbusd/vmbusd/vmbus"
)

// waiter is what ends a queue's sleeps: one context per sleeping role
// (Wait, WaitTx) that Close, Reconfigure or the VF cancel, and the
// channel a transmit waiter blocks on while someone else drains.
//
// mu guards ctx and the setting of interrupted; it is a leaf lock (taken
// under inMu by a sleeper, under txMu by TxBurst's kickRx, alone by
// interrupt and kick). interrupted is read without it: the polling loops
// of Wait and WaitTx check it every few dozen polls, and a mutex there
// would be a store to a line the queue's other goroutine locks too.
// txWaiting and rxAsleep are atomic and txWake immutable after newQueue.
type waiter struct {
	mu          sync.Mutex
	ctx         [2]waitCtx            // by role: 0 Wait, 1 WaitTx
	interrupted atomic.Pointer[error] // why the queue stopped for good; nil while it runs

	txWaiting atomic.Bool // a WaitTx waits on txWake
	// rxAsleep: a Wait sleeps on the ring (its context taken); a TxBurst
	// that marks the queue loaded clears it and kicks that sleep
	// (kickRx, tx.go TxBurst).
	rxAsleep atomic.Bool
	txWake   chan struct{} // 1-buffered: a drain found work

	spin spinBudget // Hybrid's adaptive share of Config.PollBudget

	// rings guards the lock-free ring reads of Wait and WaitTx (their
	// polling and readiness checks) against the unmap in Close: they hold
	// it shared and return once interrupted; halt takes it exclusively
	// after interrupting them and keeps it until the device is closed.
	// Lock order: rings before every other lock of the queue.
	rings sync.RWMutex
}

// enter is the start of a Wait or WaitTx: it holds rings shared, or
// returns why the queue stopped (then the rings may be gone).
func (w *waiter) enter() error {
	w.rings.RLock()
	if err := w.err(); err != nil {
		w.rings.RUnlock()
		return err
	}
	return nil
}

func (w *waiter) leave() { w.rings.RUnlock() }

type waitCtx struct {
	parent context.Context
	ctx    context.Context
	cancel context.CancelFunc
}

// context returns a context that ends with parent or when the queue is
// interrupted (Close, Reconfigure), reusing one per role while the caller
// keeps passing the same parent, so a sleeping loop allocates nothing.
func (w *waiter) context(parent context.Context, role int) (context.Context, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.err(); err != nil {
		return nil, err
	}
	c := &w.ctx[role]
	if c.parent == parent && c.ctx != nil && c.ctx.Err() == nil {
		return c.ctx, nil
	}
	if c.cancel != nil {
		c.cancel()
	}
	c.ctx, c.cancel = context.WithCancel(parent)
	c.parent = parent
	return c.ctx, nil
}

// err returns why the queue was interrupted, or nil. Lock-free.
func (w *waiter) err() error {
	if p := w.interrupted.Load(); p != nil {
		return *p
	}
	return nil
}

// kick ends the sleeps in progress; the next sleep makes a new context.
func (w *waiter) kick() {
	w.mu.Lock()
	for i := range w.ctx {
		if c := w.ctx[i].cancel; c != nil {
			c()
		}
	}
	w.mu.Unlock()
}

// kickRx ends a sleep of Wait in progress (WaitTx's goes on).
func (w *waiter) kickRx() {
	w.mu.Lock()
	if c := w.ctx[0].cancel; c != nil {
		c()
	}
	w.mu.Unlock()
}

// interrupt wakes sleepers for good: their next sleep returns err.
func (w *waiter) interrupt(err error) {
	w.mu.Lock()
	if err != nil { // the first reason stays; a nil one records nothing
		w.interrupted.CompareAndSwap(nil, &err)
	}
	for i := range w.ctx {
		if w.ctx[i].cancel != nil {
			w.ctx[i].cancel()
		}
	}
	w.mu.Unlock()
	w.pokeTx()
}

// wakeTx wakes a WaitTx waiting for someone else's drain.
func (w *waiter) wakeTx() {
	if w.txWaiting.Load() {
		w.pokeTx()
	}
}

func (w *waiter) pokeTx() {
	select {
	case w.txWake <- struct{}{}:
	default:
	}
}

// rxReady reports, without locks, whether RxBurst would find something:
// staged packets or unread bytes in the inbound ring.
func (q *Queue) rxReady() bool {
	if q.rx.stCount.Load() > 0 || q.vfPending() || q.rxHeldReady() {
		return true
	}
	return q.ch.InboundUsage() != 0
}

// spinBudget is how much of Config.PollBudget a hybrid Wait polls before
// it sleeps, adapted as a halt-polling governor does: a sleep that a full
// budget would not have avoided (the next frame came more than PollBudget
// after the last) halves it, down to no polling at all; one that a full
// budget would have avoided, or a poll that found work, brings it back.
//
// Polling only pays when the next frame comes within the budget. When it
// comes later (request/response traffic, a host that sends in rounds
// further apart than the budget) the spin only burns the CPU that the
// work it waits for needs: on a small machine the socket reader the
// frame was just handed to, or the host itself, waits for the spinning
// thread, and the queue sleeps all the same.
type spinBudget struct {
	shift atomic.Int32 // the budget is PollBudget >> shift; maxSpinShift: none
}

// loadPollSpan bounds how long a hybrid Wait keeps polling past its
// budget while the queue is under full load (Queue.loaded): a
// transmitter stalled on the completions the host owes it (txPath.owed),
// or a receiver whose bursts came back full (rxPath.fullAt), within the
// span, and the host's last work came within it too. Under full load the
// host works in rounds further apart than PollBudget: completions for a
// pass over the send sections, or a refill of the receive buffer after
// the guest returned it. A sleep between rounds costs a wake-up per
// round, while the host's ring runs dry; a sleeper also holds inMu, so a
// WaitTx waits for its wake-up and drain (two hand-overs per round).
// For the same reason a TxBurst that marks the queue loaded ends a sleep
// of Wait already under way (kickRx). Traffic that never outruns the
// host (a short burst, a request at a time) leaves the budget as it is.
const loadPollSpan = int64(5 * time.Millisecond)

// loaded reports, without locks, whether the queue was under full load
// within loadPollSpan of now.
func (q *Queue) loaded(now int64) bool {
	return now-q.rx.fullAt.Load() < loadPollSpan || q.tx.owed(now, loadPollSpan)
}

// txCaughtUp reports, without locks, whether the transmitter streamed
// within loadPollSpan of now (txPath.stalled). A hybrid Wait asks when
// the queue is not loaded, the host owing the transmitter nothing: under
// full load that is the moment between the host's last completion and
// the transmitter's next burst, microseconds away. A Wait that slept on
// it would hold inMu while that burst runs the sections out, and the
// transmitter's WaitTx would wait for the sleeper's wake-up to drain (at
// netbench rate tx/1514, about 100 of the 110 sleeps a second were
// these, the transmitter blocked 0.6-2 % of its time behind them). The
// Wait polls one more loadRecheck instead; if the host still owes
// nothing then, the load ended.
func (q *Queue) txCaughtUp(now int64) bool {
	return now-q.tx.stalled.Load() < loadPollSpan
}

// loadRecheck is how long a hybrid Wait polling under load goes before
// it reads the load marks (Queue.loaded) and lastRx again. They sit on
// lines the transmitter's core writes on every burst or frame: stalled
// and stashN beside the open section (tx.cur, written per frame), the
// free-section ring's indices (taken per section), lastRx (per drain).
// Each read shares a line that core must then take back before its next
// store, a cross-core round trip (~0.1-0.5 µs on the 2-core machine,
// netbench's xcore probe) that the transmitter then waits out. Read
// every clockEvery polls, they cost hybrid ~9 % of the transmit rate
// at netbench rate tx/1514 against Poll mode, which reads none of them.
// A load that ended is noticed up to loadRecheck later, a fiftieth of
// loadPollSpan.
const loadRecheck = loadPollSpan / 50

// clockEvery is how many polls a hybrid Wait or WaitTx makes per reading
// of the clock: a poll costs a few nanoseconds, so the budget and the
// load span are still kept to well under a microsecond.
const clockEvery = 8

// maxSpinShift halvings take the 50 µs default below a microsecond, less
// than one sleep and wake-up costs: the queue then sleeps at once.
const maxSpinShift = 6

// budget returns the poll budget for a Wait, in nanoseconds.
func (b *spinBudget) budget(full time.Duration) int64 {
	k := b.shift.Load()
	if k >= maxSpinShift {
		return 0
	}
	return int64(full) >> k
}

// polled records a poll that found work: the budget doubles, so a queue
// whose frames arrive within its shrunken budget returns to the full one.
func (b *spinBudget) polled() {
	if k := b.shift.Load(); k > 0 {
		b.shift.Store(k - 1)
	}
}

// slept records a sleep that ended with work gap nanoseconds after the
// queue last found work: within the full budget, polling would have
// caught it (full budget again); later, polling was wasted (halve).
func (b *spinBudget) slept(gap int64, full time.Duration) {
	switch k := b.shift.Load(); {
	case gap <= int64(full):
		b.shift.Store(0)
	case k < maxSpinShift:
		b.shift.Store(k + 1)
	}
}

// Wait blocks until RxBurst may find work, the NIC fails, or ctx ends. In
// Hybrid mode it first polls for up to Config.PollBudget since the queue
// last found work (less while polling has not been paying, spinBudget;
// longer, up to loadPollSpan, while the queue is under full load), then unmasks the channel's
// interrupt, checks again and sleeps on the device's interrupt fd; Poll
// never sleeps; Interrupt sleeps at once. A nil return can be spurious.
func (q *Queue) Wait(ctx context.Context) error {
	if err := q.s.err(); err != nil {
		return err
	}
	if err := q.w.enter(); err != nil {
		return err
	}
	defer q.w.leave()
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
				if q.acks.pending() {
					q.sendAcks(false)
				}
				// Busy polling wants a P and a core of its own: with
				// GOMAXPROCS no larger than the polling queues, fd-driven
				// goroutines (TAP readers, the interrupt loop) wait for
				// sysmon's netpoll (~10 ms), and a thread sharing the
				// core (the host, the peer that answers) waits out the
				// poller's scheduler slice. Yield both (PollYield).
				q.yield()
			}
		}
	case Hybrid:
		budget := q.w.spin.budget(q.s.cfg.PollBudget)
		loaded := false
		// until: polling goes on at least until then, as last judged
		// from lastRx and the load marks; they are read again only
		// once it passed (loadRecheck).
		var until int64
		// caughtUp: the last recheck found the transmitter streaming
		// within the span but nothing owed (txCaughtUp).
		caughtUp := false
	poll:
		for i := 1; ; i++ {
			// The clock every clockEvery polls: read on each, it cost
			// more than the poll itself (a tenth of the guest's CPU at
			// full load), taken from the host sharing the cores.
			if i%clockEvery == 1 {
				if now := nanotime(); now >= until {
					last := q.rx.lastRx.Load()
					loaded, until = false, last+budget
					if now >= until {
						switch {
						case now-last >= loadPollSpan:
							break poll
						case q.loaded(now):
							caughtUp = false
						case !caughtUp && q.txCaughtUp(now):
							caughtUp = true
						default:
							break poll
						}
						loaded, until = true, now+loadRecheck
					}
				}
			}
			if q.rxReady() {
				if !loaded {
					q.w.spin.polled()
				} else {
					q.c.rxLoadPolls.incShared()
				}
				q.c.rxPolls.incShared()
				q.c.pollNanos.v.Add(uint64(nanotime() - start))
				return nil
			}
			if i%64 == 0 {
				if err := q.s.err(); err != nil {
					return err
				}
				if loaded {
					if err := q.w.err(); err != nil {
						return err
					}
					if err := ctx.Err(); err != nil {
						return err
					}
					q.yield() // as Poll mode: the host shares the cores
				}
			}
		}
	}
	last := q.rx.lastRx.Load()
	slept := nanotime()
	q.c.pollNanos.v.Add(uint64(slept - start))
	err := q.sleep(ctx, 0)
	woke := nanotime()
	q.c.sleepNanos.v.Add(uint64(woke - slept))
	if q.s.cfg.Mode == Hybrid && err == nil && q.rxReady() {
		q.w.spin.slept(woke-last, q.s.cfg.PollBudget)
	}
	return err
}

// sleep is the blocking half of Wait (role 0) and WaitTx (role 1): under
// inMu, drain what is there, then unmask, re-check and block on the
// channel (vmbus WaitReadable). Owed receive completions are retried
// first; while they cannot be sent it sleeps briefly instead.
func (q *Queue) sleep(ctx context.Context, role int) error {
	q.inMu.Lock()
	defer q.inMu.Unlock()
	return q.sleepLocked(ctx, role)
}

// sleepLocked is sleep with inMu already held (WaitTx keeps it from its
// drain on, so no other drain can free its room unseen in between).
func (q *Queue) sleepLocked(ctx context.Context, role int) error {
	if err := q.s.err(); err != nil {
		return err
	}
	// Frames for RxBurst end Wait's sleep, not WaitTx's: WaitTx would
	// only loop back here, spinning while nobody receives them.
	if role == 0 && (q.rx.stLen > 0 || q.rxHeldReady()) {
		return nil
	}
	if q.acks.pending() {
		q.sendAcks(true)
	}
	// Owed completions the ring cannot take, or frames held for want of
	// packets (the host sends nothing more meanwhile, and nothing wakes
	// us when the caller frees packets): nap instead of sleeping on the
	// ring.
	if q.acks.pending() || (role == 0 && q.rx.hLen > 0) {
		t := time.NewTimer(200 * time.Microsecond)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	}
	wctx, err := q.w.context(ctx, role)
	if err != nil {
		return err
	}
	if role == 0 && q.vfArm() {
		return nil // the VF has frames: no sleep
	}
	q.c.idleSleeps.inc()
	if role == 0 {
		q.c.rxSleeps.inc()
		if q.tx.held() {
			q.c.rxSleepsOwed.inc()
		}
	} else {
		q.c.txSleeps.inc()
	}
	if role == 0 {
		// Set once wctx is taken: a kick from now on ends this sleep.
		q.w.rxAsleep.Store(true)
	}
	err = q.ch.WaitReadable(wctx)
	if role == 0 {
		q.w.rxAsleep.Store(false)
	}
	if err != nil {
		if e := q.s.err(); e != nil {
			return e
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if ie := q.w.err(); ie != nil {
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
		// A WaitTx that found inMu held waits for this drain: do it
		// now rather than after Wait returned and the caller came back
		// for RxBurst (frames go to staging meanwhile).
		if q.w.txWaiting.Load() {
			q.drainLocked()
		}
	} else {
		q.c.txWakeups.inc()
	}
	return nil
}
