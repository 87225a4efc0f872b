package vmbus

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vmbusd/vmbusd/hoptrace"
)

// A Channel is one VMBus channel as the guest sees it: an outbound ring the
// guest writes, an inbound ring it reads, and a way to signal the host.
//
// Sending and receiving are separate paths that may run on two goroutines:
// Send, SendRequest, SendCompletion, Flush and WaitWritable belong to the
// sending goroutine; Recv, CommitRecv and WaitReadable to the receiving one.
// Stats and Err are safe from anywhere.
//
//	send:  Send ... Send, Flush (one commit, at most one signal)
//	       full? WaitWritable (pending_send_sz, re-check, block)
//	recv:  Recv ... Recv (ErrRingEmpty), CommitRecv (signal a blocked host)
//	       WaitReadable (unmask, re-check, block; mask again on wake-up)

// WaitMode chooses how a channel's owner waits for the host.
type WaitMode int

const (
	// WaitInterrupt unmasks, re-checks the ring and sleeps on the device's
	// interrupt fd: no CPU while idle.
	WaitInterrupt WaitMode = iota
	// WaitPoll spins on the ring: the lowest latency, one core at 100%.
	WaitPoll
)

func (m WaitMode) String() string {
	if m == WaitPoll {
		return "poll"
	}
	return "interrupt"
}

// ErrTooManyRequests is returned by SendRequest when every request slot is
// waiting for its completion.
var ErrTooManyRequests = errors.New("vmbus: too many outstanding requests")

// ChannelConfig describes a channel to NewChannel.
type ChannelConfig struct {
	RelID        uint32
	SubchannelID uint16
	// Ring is the channel's ring mapping: the outbound (guest to host) ring
	// first, the inbound ring after it (uio map 0, or a sub-channel's ring
	// file).
	Ring     []byte
	Signaler Signaler
	// MaxPacket bounds inbound packets (len8*8); 0 means DefaultMaxPacket.
	MaxPacket int
	// Requests is the size of the request-id table; 0 when the host is
	// never expected to send a completion.
	Requests int
	// Interrupts says whether host interrupts for this channel reach the
	// device's interrupt fd. When false, waits poll every PollInterval.
	Interrupts   bool
	PollInterval time.Duration
	// WakeTimeout bounds a blocked wait: when it expires the ring is
	// checked again, and finding work then counts a missed wake-up.
	WakeTimeout time.Duration
	Mode        WaitMode
	// Split is where the outbound ring ends and the inbound one starts in
	// Ring; 0 means half. hv_sock openers choose two sizes.
	Split int
	// BusyPoll, when non-zero, makes WaitReadable spin on the inbound ring
	// for up to this long before it unmasks and sleeps, and makes a
	// Flush that publishes data wake a sleeping WaitReadable to spin
	// again: the answer to a request is caught by polling instead of an
	// interrupt and a wake-up (SO_BUSY_POLL for a request/response
	// workload). It costs up to BusyPoll of CPU per wait.
	BusyPoll time.Duration
	// HostSide attaches from the host's end: the first half of Ring is
	// then the inbound ring and the second the outbound one. The ring
	// rules are symmetric, so the simulated host runs this same code.
	HostSide bool
}

// Defaults for ChannelConfig.
const (
	DefaultMaxPacket    = 64*1024 + 4096
	DefaultPollInterval = 200 * time.Microsecond
	DefaultWakeTimeout  = 250 * time.Millisecond
)

// ChannelStats are a channel's counters. Each is written by one goroutine
// (the sending or the receiving side) and read at any time.
type ChannelStats struct {
	TxPackets     uint64 // packets written to the outbound ring
	TxBytes       uint64 // their ring bytes, trailers included
	TxCommits     uint64 // Flushes that published packets
	TxSignals     uint64 // signals raised to the host
	TxFullWaits   uint64 // times a sender waited for space
	RxPackets     uint64 // packets read from the inbound ring
	RxBytes       uint64
	RxCommits     uint64 // read-index publications
	RxSignals     uint64 // signals to a host blocked on a full ring
	Wakeups       uint64 // blocked waits ended by an interrupt that found work for this channel
	MissedWakeups uint64 // blocked waits that found work only on their timeout
	IdleWaits     uint64 // blocked waits (one per sleep, however often it was woken)
	// SharedWakeups counts interrupts that woke a blocked wait with nothing
	// for this channel: a device's channels share one interrupt fd (the
	// primary's, which from 6.16 also carries every sub-channel's
	// interrupts), so another channel's interrupt wakes every waiter; a
	// spurious interrupt does the same. The wait goes back to sleep.
	SharedWakeups uint64
	// BusyPollHits counts waits that found data while busy polling
	// (ChannelConfig.BusyPoll), without sleeping.
	BusyPollHits uint64
}

type counter struct{ v atomic.Uint64 }

// add is for a counter with a single writer: a plain load and store, no
// locked instruction on the hot path.
func (c *counter) add(n uint64) { c.v.Store(c.v.Load() + n) }
func (c *counter) load() uint64 { return c.v.Load() }

// Channel is safe for use by one sending and one receiving goroutine.
type Channel struct {
	relID uint32
	subID uint16
	out   *OutRing
	in    *InRing
	sig   Signaler
	cfg   ChannelConfig
	buf   []byte // private copy of the packet being parsed

	reqMu sync.Mutex
	reqs  *Requests

	wakeRx, wakeTx chan struct{} // one token per device interrupt
	rxTimer        *time.Timer
	txTimer        *time.Timer
	rxReadyFn      func() bool
	txReadyFn      func() bool
	txNeed         int       // the sending side's wait target
	txData         bool      // a data packet (not a completion) was sent since the last Flush
	epoch          time.Time // BusyPoll's clock origin

	dead     chan struct{}
	deadOnce sync.Once
	err      atomic.Pointer[error]

	trace atomic.Pointer[hoptrace.Stamps] // nil unless a latency trace runs

	yield func() // between empty polls: osYield (tests count the calls)
	// PollYield's runtime.Gosched, at most once per pollGoschedEvery of
	// the clock (nanoseconds since epoch); tests replace both. Atomic:
	// the sending and the receiving goroutine may both spin.
	gosched     func()
	clock       func() int64
	lastGosched atomic.Int64

	txPackets, txBytes, txCommits, txSignals, txFullWaits counter
	rxPackets, rxBytes, rxCommits, rxSignals              counter
	wakeups, missed, idleWaits, shared, busyHits          counter // both sides: atomic adds
}

// NewChannel attaches to a channel's ring pair.
func NewChannel(cfg ChannelConfig) (*Channel, error) {
	if cfg.Split == 0 {
		cfg.Split = len(cfg.Ring) / 2
	}
	if cfg.Split <= 0 || cfg.Split >= len(cfg.Ring) {
		return nil, fmt.Errorf("vmbus: channel %d: ring mapping of %d bytes split at %d", cfg.RelID, len(cfg.Ring), cfg.Split)
	}
	if cfg.Signaler == nil {
		return nil, fmt.Errorf("vmbus: channel %d: no signaler", cfg.RelID)
	}
	if cfg.MaxPacket == 0 {
		cfg.MaxPacket = DefaultMaxPacket
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.WakeTimeout == 0 {
		cfg.WakeTimeout = DefaultWakeTimeout
	}
	half := cfg.Split
	outMem, inMem := cfg.Ring[:half:half], cfg.Ring[half:]
	if cfg.HostSide {
		outMem, inMem = inMem, outMem
	}
	out, err := NewOutRing(outMem)
	if err != nil {
		return nil, fmt.Errorf("vmbus: channel %d outbound ring: %w", cfg.RelID, err)
	}
	in, err := NewInRing(inMem, cfg.MaxPacket)
	if err != nil {
		return nil, fmt.Errorf("vmbus: channel %d inbound ring: %w", cfg.RelID, err)
	}
	c := &Channel{
		relID: cfg.RelID, subID: cfg.SubchannelID, out: out, in: in, sig: cfg.Signaler, cfg: cfg,
		buf:    make([]byte, in.MaxPacket()),
		wakeRx: make(chan struct{}, 1), wakeTx: make(chan struct{}, 1),
		rxTimer: newStoppedTimer(), txTimer: newStoppedTimer(),
		dead: make(chan struct{}), epoch: time.Now(), yield: osYield, gosched: runtime.Gosched,
	}
	c.clock = func() int64 { return int64(time.Since(c.epoch)) }
	if cfg.Requests > 0 {
		c.reqs = NewRequests(cfg.Requests)
	}
	c.rxReadyFn, c.txReadyFn = c.rxReady, c.txReady
	// Masked except while blocked in WaitReadable: the host need not
	// interrupt a guest that is draining or polling (the kernel masks at
	// open too before 6.18). A channel without interrupt delivery stays
	// masked for good.
	c.in.SetInterruptMask(true)
	return c, nil
}

func newStoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

// RelID returns the channel's relative id; SubchannelID its index (0 for
// the primary).
func (c *Channel) RelID() uint32        { return c.relID }
func (c *Channel) SubchannelID() uint16 { return c.subID }

// Out and In expose the rings for callers that batch by hand.
func (c *Channel) Out() *OutRing { return c.out }
func (c *Channel) In() *InRing   { return c.in }

// Mode returns the wait mode the channel was configured with.
func (c *Channel) Mode() WaitMode { return c.cfg.Mode }

// Err returns why the channel died (a *CorruptError, the device's rescind
// or close), or nil while it is alive.
func (c *Channel) Err() error {
	if p := c.err.Load(); p != nil {
		return *p
	}
	return nil
}

// Dead is closed when the channel dies.
func (c *Channel) Dead() <-chan struct{} { return c.dead }

// Kill marks the channel dead with err; the first error wins. Waiters wake.
func (c *Channel) Kill(err error) {
	c.deadOnce.Do(func() {
		c.err.Store(&err)
		close(c.dead)
	})
}

// check turns a ring error into the channel's death when it is corruption.
func (c *Channel) check(err error) error {
	if err == nil || err == ErrRingEmpty {
		return err
	}
	if _, ok := IsCorrupt(err); ok {
		c.Kill(err)
		return err
	}
	if e := c.Err(); e != nil {
		return e
	}
	return err
}

// SetTrace makes a guest's channel stamp its hops of a round trip
// (package hoptrace): its signals to the host and its interrupts. nil
// stops it.
func (c *Channel) SetTrace(s *hoptrace.Stamps) { c.trace.Store(s) }

// Notify wakes the channel's waiters to re-check their rings: the device
// calls it for every interrupt; the simulated host for every guest signal.
func (c *Channel) Notify() {
	if s := c.trace.Load(); s != nil {
		s.Stamp(hoptrace.GuestWake)
	}
	select {
	case c.wakeRx <- struct{}{}:
	default:
	}
	select {
	case c.wakeTx <- struct{}{}:
	default:
	}
}

// Send writes one packet to the outbound ring without publishing it; see
// OutRing.Write. A *RingFullError means: Flush, WaitWritable, retry.
func (c *Channel) Send(typ PacketType, flags uint16, id uint64, hdr []byte, payload ...[]byte) error {
	if e := c.Err(); e != nil {
		return e
	}
	before := c.out.next
	if err := c.out.Write(typ, flags, id, hdr, payload...); err != nil {
		return c.check(err)
	}
	c.txPackets.add(1)
	c.txBytes.add(uint64(c.out.r.used(c.out.next, before)))
	c.txData = c.txData || typ != PacketCompletion
	return nil
}

// SendInband writes an inband packet (no completion requested).
func (c *Channel) SendInband(id uint64, payload ...[]byte) error {
	return c.Send(PacketInband, 0, id, nil, payload...)
}

// SendRequest writes a packet that asks for a completion, under a fresh
// request id that carries cookie; the completion returns it in
// Packet.Cookie. It returns ErrTooManyRequests when the table is full.
func (c *Channel) SendRequest(typ PacketType, cookie uint64, hdr []byte, payload ...[]byte) (uint64, error) {
	if c.reqs == nil {
		return 0, fmt.Errorf("vmbus: channel %d has no request table", c.relID)
	}
	c.reqMu.Lock()
	id, ok := c.reqs.Alloc(cookie)
	c.reqMu.Unlock()
	if !ok {
		return 0, ErrTooManyRequests
	}
	if err := c.Send(typ, FlagCompletionRequested, id, hdr, payload...); err != nil {
		c.reqMu.Lock()
		c.reqs.Complete(id)
		c.reqMu.Unlock()
		return 0, err
	}
	return id, nil
}

// InFlight returns the requests waiting for a completion.
func (c *Channel) InFlight() int {
	if c.reqs == nil {
		return 0
	}
	c.reqMu.Lock()
	defer c.reqMu.Unlock()
	return c.reqs.InFlight()
}

// CancelRequests forgets every outstanding request (teardown), calling fn
// with each cookie.
func (c *Channel) CancelRequests(fn func(cookie uint64)) {
	if c.reqs == nil {
		return
	}
	c.reqMu.Lock()
	defer c.reqMu.Unlock()
	c.reqs.Cancel(fn)
}

// SendCompletion answers a packet that requested one: type completion,
// the same transaction id, no flags.
func (c *Channel) SendCompletion(id uint64, payload ...[]byte) error {
	return c.Send(PacketCompletion, 0, id, nil, payload...)
}

// Flush publishes everything sent since the last Flush and signals the host
// if the ring rules say so (empty to non-empty, host not masked).
func (c *Channel) Flush() error {
	if c.out.Pending() == 0 {
		return c.Err()
	}
	c.txCommits.add(1)
	if c.txData && c.cfg.BusyPoll > 0 {
		// A request went out: its answer is worth spinning for.
		select {
		case c.wakeRx <- struct{}{}:
		default:
		}
	}
	c.txData = false
	if c.out.Commit() {
		c.txSignals.add(1)
		if s := c.trace.Load(); s != nil {
			s.Stamp(hoptrace.GuestSignal)
		}
		if err := c.sig.Signal(); err != nil {
			return fmt.Errorf("vmbus: channel %d: signal host: %w", c.relID, err)
		}
	}
	return c.Err()
}

// Recv returns the next inbound packet, copied out of the ring into a
// buffer the channel owns; it stays valid until the next Recv. Completions
// are matched against the request table and carry the request's cookie.
// ErrRingEmpty means nothing is waiting; a *CorruptError kills the channel.
func (c *Channel) Recv() (Packet, error) {
	if e := c.Err(); e != nil {
		return Packet{}, e
	}
	before := c.in.next
	p, err := c.in.Read(c.buf)
	if err != nil {
		return Packet{}, c.check(err)
	}
	c.rxPackets.add(1)
	c.rxBytes.add(uint64(c.in.r.used(c.in.next, before)))
	if p.Type == PacketCompletion && c.reqs != nil {
		c.reqMu.Lock()
		cookie, err := c.reqs.Complete(p.TransID)
		c.reqMu.Unlock()
		if err != nil {
			return Packet{}, c.check(err)
		}
		p.Cookie = cookie
	}
	return p, nil
}

// Peek is Recv for a reader that copies payloads straight out of the ring
// (InRing.Peek): it validates the next packet and copies only the first
// len(head) bytes of it into head; In().CopyBody reads the rest and Skip
// moves past it. Completions are not matched to requests: the reader
// that peeks is a pipe's, which has none.
func (c *Channel) Peek(head []byte) (Packet, error) {
	if e := c.Err(); e != nil {
		return Packet{}, e
	}
	p, err := c.in.Peek(head)
	if err != nil {
		return Packet{}, c.check(err)
	}
	return p, nil
}

// Skip moves past the packet Peek holds and counts it as received.
func (c *Channel) Skip() {
	before := c.in.next
	c.in.Skip()
	if c.in.next != before {
		c.rxPackets.add(1)
		c.rxBytes.add(uint64(c.in.r.used(c.in.next, before)))
	}
}

// CommitRecv releases the packets read so far to the host and signals it
// when it was blocked waiting for that space.
func (c *Channel) CommitRecv() error {
	if c.in.next == c.in.committed {
		return nil
	}
	c.rxCommits.add(1)
	if c.in.Commit() {
		c.rxSignals.add(1)
		if err := c.sig.Signal(); err != nil {
			return fmt.Errorf("vmbus: channel %d: signal host: %w", c.relID, err)
		}
	}
	return nil
}

// WaitReadable returns when the inbound ring has data, the channel dies or
// ctx ends. In interrupt mode it clears the mask, checks the ring once more
// (a packet that arrived before the unmask raised no interrupt), then
// blocks; it masks again before returning so the host does not interrupt
// the draining that follows.
func (c *Channel) WaitReadable(ctx context.Context) error {
	if c.in.Available() > 0 {
		return nil
	}
	if err := c.in.Err(); err != nil {
		return c.check(err)
	}
	if c.cfg.Mode == WaitPoll {
		return c.spin(ctx, c.rxReadyFn)
	}
	if c.cfg.BusyPoll > 0 && c.cfg.Interrupts {
		return c.waitBusy(ctx)
	}
	if !c.cfg.Interrupts {
		return c.sleepPoll(ctx, c.rxTimer, c.rxReadyFn)
	}
	// A token left by an interrupt that came while nobody slept (another
	// channel's, on a shared fd) says nothing about this ring: drop it
	// before unmasking. Anything that arrived before the unmask is seen by
	// the re-check, anything after raises a fresh token.
	drainToken(c.wakeRx)
	c.in.SetInterruptMask(false)
	defer c.in.SetInterruptMask(true)
	return c.block(ctx, c.wakeRx, c.rxTimer, c.rxReadyFn)
}

// waitBusy is WaitReadable with a busy-poll budget: spin, then unmask,
// re-check and sleep until an interrupt finds data or a Flush of a request
// wakes it to spin again.
func (c *Channel) waitBusy(ctx context.Context) error {
	for {
		if c.busyPoll(ctx) {
			c.busyHits.v.Add(1)
			return c.check(c.ringErr())
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := c.Err(); err != nil {
			return err
		}
		drainToken(c.wakeRx)
		c.in.SetInterruptMask(false)
		if c.rxReady() {
			c.in.SetInterruptMask(true)
			return c.check(c.ringErr())
		}
		c.idleWaits.v.Add(1)
		c.rxTimer.Reset(c.cfg.WakeTimeout)
		var err error
		select {
		case <-c.wakeRx:
			if c.rxReady() {
				c.wakeups.v.Add(1)
			}
		case <-c.rxTimer.C:
			if c.rxReady() {
				c.missed.v.Add(1)
			}
		case <-ctx.Done():
			err = ctx.Err()
		case <-c.dead:
			err = c.Err()
		}
		c.rxTimer.Stop()
		c.in.SetInterruptMask(true)
		if err != nil {
			return err
		}
		if c.rxReady() {
			return c.check(c.ringErr())
		}
	}
}

// busyPoll spins on the inbound ring for up to BusyPoll, yielding now and
// then (PollYield) so that goroutines sharing the P (the one sending the
// request, say) and threads sharing the CPU still run; it reports whether
// data came.
func (c *Channel) busyPoll(ctx context.Context) bool {
	end := time.Since(c.epoch) + c.cfg.BusyPoll
	for n := 1; ; n++ {
		if c.rxReady() {
			return true
		}
		if n%64 == 0 {
			if time.Since(c.epoch) >= end || ctx.Err() != nil {
				return false
			}
			c.PollYield()
		}
	}
}

// PollYield is what a spinning waiter does between rounds of empty polls
// (the channel's own busy polling, and a driver's poll loop over it):
// it gives the threads that wait for its CPU a turn (sched_yield), every
// call, and lets the goroutines queued on its P run (runtime.Gosched),
// at most once per pollGoschedEvery. Without the first, a poller that
// shares a core with the host or with the peer it waits for keeps that
// core for a whole scheduler slice (milliseconds) while the answer waits
// for it; the kernel's own busy polling likewise stops when another task
// needs the CPU. With nothing else runnable the yield returns at once.
//
// runtime.Gosched is rationed because it is not free when it has nothing
// to hand over: it queues the poller on the global run queue and, with a
// P idle, wakes a second thread (futex) that looks for work, finds none
// (or takes the poller, which moves threads) and sleeps again. Called on
// every yield, that made a poll-mode round trip of netbench latency cost
// two to three times the context switches and futex calls on 2 CPUs,
// taken from the host and the peers the poller waits for
// (docs/operations.md, "Waiting and latency").
func (c *Channel) PollYield() {
	if now := c.clock(); now-c.lastGosched.Load() >= int64(pollGoschedEvery) {
		c.lastGosched.Store(now)
		c.gosched()
	}
	c.yield()
}

// pollGoschedEvery bounds how long a goroutine queued behind a poller on
// its P waits (about a monitor scan at netvsc's default latency), while
// the poller pays Gosched's thread wake-up once per period rather than
// once per yield (microseconds apart).
const pollGoschedEvery = 50 * time.Microsecond

// osYield gives the thread's CPU to any other runnable thread.
func osYield() { unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }

// rxReady and txReady are the conditions the waits test; they are bound to
// rxReadyFn and txReadyFn once, so that a wait allocates nothing.
func (c *Channel) rxReady() bool { return c.in.Available() > 0 || c.in.Err() != nil }
func (c *Channel) txReady() bool { return c.out.Free() > c.txNeed || c.out.Err() != nil }

// WaitWritable returns when the outbound ring has more than need bytes
// free. Blocked, it asks the host for a signal through pending_send_sz
// (when the host supports it), then re-checks before sleeping.
func (c *Channel) WaitWritable(ctx context.Context, need int) error {
	if c.out.Free() > need {
		return nil
	}
	if err := c.out.Err(); err != nil {
		return c.check(err)
	}
	c.txFullWaits.add(1)
	c.txNeed = need
	if c.cfg.Mode == WaitPoll {
		return c.spin(ctx, c.txReadyFn)
	}
	if !c.cfg.Interrupts || !c.out.PendingSendSupported() {
		return c.sleepPoll(ctx, c.txTimer, c.txReadyFn)
	}
	drainToken(c.wakeTx) // as in WaitReadable
	c.out.SetPendingSend(need + trailerSize)
	defer c.out.ClearPendingSend()
	return c.block(ctx, c.wakeTx, c.txTimer, c.txReadyFn)
}

func (c *Channel) spin(ctx context.Context, ready func() bool) error {
	for n := 0; !ready(); n++ {
		if n%256 == 255 {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := c.Err(); err != nil {
				return err
			}
			c.PollYield()
		}
	}
	return c.check(c.ringErr())
}

func (c *Channel) sleepPoll(ctx context.Context, t *time.Timer, ready func() bool) error {
	for !ready() {
		t.Reset(c.cfg.PollInterval)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-c.dead:
			t.Stop()
			return c.Err()
		}
	}
	return c.check(c.ringErr())
}

// block re-checks after the caller's unmask or pending-size store, then
// sleeps until the ring is ready, death or ctx. One call is one idle wait
// however many times it is woken: an interrupt that finds the ring ready
// counts as this channel's wake-up, one that does not (another channel's
// on the shared fd, or a spurious one) as a shared wake-up, and work found
// only when the fallback timeout expires as a missed wake-up.
func (c *Channel) block(ctx context.Context, wake chan struct{}, t *time.Timer, ready func() bool) error {
	if !ready() {
		c.idleWaits.v.Add(1)
	}
	for !ready() {
		t.Reset(c.cfg.WakeTimeout)
		select {
		case <-wake:
			t.Stop()
			if ready() {
				c.wakeups.v.Add(1)
			} else {
				c.shared.v.Add(1)
			}
		case <-t.C:
			if ready() {
				c.missed.v.Add(1)
			}
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-c.dead:
			t.Stop()
			return c.Err()
		}
	}
	return c.check(c.ringErr())
}

// drainToken drops a pending wake-up token, if any.
func drainToken(wake chan struct{}) {
	select {
	case <-wake:
	default:
	}
}

func (c *Channel) ringErr() error {
	if err := c.in.Err(); err != nil {
		return err
	}
	return c.out.Err()
}

// Stats returns a snapshot of the channel's counters.
func (c *Channel) Stats() ChannelStats {
	return ChannelStats{
		TxPackets: c.txPackets.load(), TxBytes: c.txBytes.load(), TxCommits: c.txCommits.load(),
		TxSignals: c.txSignals.load(), TxFullWaits: c.txFullWaits.load(),
		RxPackets: c.rxPackets.load(), RxBytes: c.rxBytes.load(), RxCommits: c.rxCommits.load(),
		RxSignals: c.rxSignals.load(),
		Wakeups:   c.wakeups.load(), MissedWakeups: c.missed.load(), IdleWaits: c.idleWaits.load(),
		SharedWakeups: c.shared.load(), BusyPollHits: c.busyHits.load(),
	}
}

// RingUsage reports the bytes waiting in each ring, read from the shared
// indices as they are now (for metrics; any goroutine).
func (c *Channel) RingUsage() (outbound, inbound int) {
	return c.out.r.sharedUsed(), c.in.r.sharedUsed()
}

// InboundUsage is RingUsage's inbound figure alone (any goroutine), for a
// poller that waits for the host's packets: the outbound ring's indices
// share a cache line with the read index the host moves as it consumes
// our sends, and a poller that read that line too would make each of
// the host's moves fetch it back from the poller's core.
func (c *Channel) InboundUsage() int { return c.in.r.sharedUsed() }
