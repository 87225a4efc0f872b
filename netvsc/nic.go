package netvsc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vmbusd/vmbusd/frame"
	"github.com/vmbusd/vmbusd/netvsc/nvsp"
	"github.com/vmbusd/vmbusd/netvsc/rndis"
	"github.com/vmbusd/vmbusd/vmbus"
)

// NIC is a Hyper-V synthetic NIC driven from user space over a device
// bound to uio_hv_generic (or the simulated host). Open brings it up;
// Queues gives the data path; Close returns the device clean.
//
// Lifecycle:
//
//	Open -> [running] -- Reconfigure --> teardown, bring-up -> [running]
//	          |  host violation / rescind: channels die, Err() is a *DeviceError
//	          '-- Close: filter 0, HALT, revoke buffers, vmbus close
//
// A NIC is safe for concurrent use. Its Queues are replaced by
// Reconfigure; the old ones then report ErrReconfigured.
type NIC struct {
	dev vmbus.Device
	cfg Config
	log *slog.Logger

	mu     sync.Mutex // Reconfigure, Close
	sess   atomic.Pointer[session]
	closed bool

	viol         violations
	linkChanges  atomic.Uint64
	reconfigures atomic.Uint64
	ctlTimeouts  atomic.Uint64
	ctlFailures  atomic.Uint64
	// foldMu makes folding a closing session's counters into the two
	// below, and Stats' reading of them plus the current session's, one
	// step each: a NIC's counters neither count a closed session twice
	// nor go backwards while it closes.
	foldMu     sync.Mutex
	rxIgnored  atomic.Uint64 // of sessions torn down
	interrupts atomic.Uint64 // of sessions torn down

	linkMu sync.Mutex
	linkCh chan struct{}

	evMu   sync.Mutex
	events map[string]uint64

	vf     *vfManager // nil with Config.VF off
	opened time.Time
}

// Link is the NIC's link state as the host reports it.
type Link struct {
	Up    bool
	Speed uint64 // bits per second (OID_GEN_LINK_SPEED × 100)
}

func (l Link) String() string {
	if !l.Up {
		return "down"
	}
	return fmt.Sprintf("up %d Mbit/s", l.Speed/1e6)
}

// session is one bring-up of the device: Open, or Reconfigure.
type session struct {
	nic *NIC
	cfg Config
	log *slog.Logger
	h   *vmbus.Handle

	version uint32 // NVSP
	ndis    uint32
	mtu     int
	mac     [6]byte

	recv      []byte
	recvGPADL uint32
	subAlloc  uint32
	subAllocs uint32
	send      sendBuf
	sendGPADL uint32
	maxPkts   int
	maxXfer   int
	align     int
	aggMax    int
	off       offloads

	queues []*Queue
	ctl    *control

	running   atomic.Bool
	rxIgnored atomic.Uint64
	folded    bool // its counters are in the NIC's (guarded by nic.foldMu)
	sendTable [nvsp.VRSSSendTabSize]atomic.Uint32
	hasTable  atomic.Bool
	linkUp    atomic.Bool
	speed     atomic.Uint64
	vf        atomic.Uint64 // allocated<<32 | serial
	vfPath    atomic.Uint32 // nvsp.DataPathSynthetic or nvsp.DataPathVF as last switched

	errp     atomic.Pointer[error]
	dead     chan struct{}
	deadOnce sync.Once
	failOnce sync.Once
}

// offloads records what the host accepted.
type offloads struct {
	tcp4, udp4, tcp6, udp6 bool
	ip4                    bool
	lso4, lso6             int  // max LSO size, 0 = off
	rsc                    bool // RSC over VMBus on: RxBurst reassembles fragments (rx_rsc.go)
}

func (o *offloads) csum(f frame.MetaFlags) bool {
	v6 := f&frame.MetaTxIPv6 != 0
	switch {
	case f&frame.MetaTxTCPChecksum != 0:
		return (!v6 && o.tcp4) || (v6 && o.tcp6)
	case f&frame.MetaTxUDPChecksum != 0:
		return (!v6 && o.udp4) || (v6 && o.udp6)
	}
	return f&frame.MetaTxIPChecksum != 0 && o.ip4
}

func (o *offloads) lso(f frame.MetaFlags, n int) bool {
	if f&frame.MetaTxIPv6 != 0 {
		return o.lso6 > 0 && n <= o.lso6
	}
	return o.lso4 > 0 && n <= o.lso4
}

// Open brings the NIC up on a device bound to uio_hv_generic: NVSP
// version negotiation (6.1 down to 2), NDIS configuration, receive and
// send buffers from the uio maps, RNDIS initialisation and queries,
// offloads, sub-channels and RSS, then the packet filter. ctx bounds the
// whole bring-up; each control request is bounded by cfg.ControlTimeout.
func Open(ctx context.Context, dev vmbus.Device, cfg Config) (*NIC, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	// Much of what a NIC logs a host can make it log again and again
	// (vmbus/lograte.go); pass a vmbus.LimitLogger to keep the limits
	// across resets.
	cfg.Logger = vmbus.LimitLogger(cfg.Logger, 0, 0)
	if cfg.GPAPool != nil {
		if err := cfg.GPAPool.Valid(); err != nil {
			return nil, err
		}
	}
	if cfg.VF < VFOff || cfg.VF > VFRequired {
		return nil, fmt.Errorf("netvsc: VF mode %d", int(cfg.VF))
	}
	n := &NIC{dev: dev, cfg: cfg, log: cfg.Logger.With("instance", dev.Instance.String()), linkCh: make(chan struct{}), events: map[string]uint64{},
		opened: time.Now()}
	if cfg.VF != VFOff {
		n.vf = newVFManager(n, cfg)
	}
	s, err := n.bringUp(ctx, cfg)
	if err != nil {
		return nil, err
	}
	n.sess.Store(s)
	if n.vf != nil {
		if err := n.startVF(ctx); err != nil {
			n.Close()
			return nil, err
		}
	}
	return n, nil
}

func (n *NIC) session() *session { return n.sess.Load() }

// MAC returns the permanent MAC address the host reported.
func (n *NIC) MAC() net.HardwareAddr {
	m := n.session().mac
	return net.HardwareAddr(m[:])
}

// MTU returns the MTU in use (the host may have lowered the one asked for).
func (n *NIC) MTU() int { return n.session().mtu }

// Queues returns the queues of the current configuration: one per
// channel the host granted and opened.
func (n *NIC) Queues() []*Queue { return n.session().queues }

// Device returns the VMBus device.
func (n *NIC) Device() vmbus.Device { return n.dev }

// Config returns the configuration in use.
func (n *NIC) Config() Config { return n.session().cfg }

// Protocol returns the negotiated NVSP and NDIS versions.
func (n *NIC) Protocol() (nvsp, ndis uint32) {
	s := n.session()
	return s.version, s.ndis
}

// SendSections returns the send-buffer section size and the number in use.
func (n *NIC) SendSections() (size, count int) {
	s := n.session()
	return s.send.sectionSize, s.send.sections
}

// Link returns the current link state.
func (n *NIC) Link() Link {
	s := n.session()
	return Link{Up: s.linkUp.Load(), Speed: s.speed.Load()}
}

// LinkChanged returns a channel that is closed at the next change of the
// link state (or of the configuration); call again for the one after.
func (n *NIC) LinkChanged() <-chan struct{} {
	n.linkMu.Lock()
	defer n.linkMu.Unlock()
	return n.linkCh
}

func (n *NIC) notifyLink() {
	n.linkChanges.Add(1)
	n.linkMu.Lock()
	close(n.linkCh)
	n.linkCh = make(chan struct{})
	n.linkMu.Unlock()
}

// VF returns the accelerated-networking VF the host associated (its
// serial, the PCI slot name in the guest) and whether one is present.
func (n *NIC) VF() (serial uint32, present bool) {
	v := n.session().vf.Load()
	return uint32(v), v>>32 != 0
}

// Err returns why the NIC stopped: nil while it runs, a *DeviceError
// after a host violation or rescind, ErrClosed after Close.
func (n *NIC) Err() error { return n.session().err() }

// Done is closed when the current configuration stops (failure, Close or
// Reconfigure).
func (n *NIC) Done() <-chan struct{} { return n.session().dead }

// TxQueue returns the queue that transmits a flow with hash: the host's
// send indirection table entry for it (docs/protocol/netvsc.md §2.8), or hash modulo the
// queue count before the table arrives or when it names a channel that
// never opened.
func (n *NIC) TxQueue(hash uint32) *Queue {
	s := n.session()
	nq := uint32(len(s.queues))
	if s.hasTable.Load() {
		if e := s.sendTable[hash%nvsp.VRSSSendTabSize].Load(); e < nq {
			return s.queues[e]
		}
	}
	return s.queues[hash%nq]
}

// SendTable returns the host's send indirection table and whether it has
// arrived.
func (n *NIC) SendTable() (t [nvsp.VRSSSendTabSize]uint32, ok bool) {
	s := n.session()
	for i := range t {
		t[i] = s.sendTable[i].Load()
	}
	return t, s.hasTable.Load()
}

// Stats returns a snapshot of the NIC's counters.
func (n *NIC) Stats() Stats {
	s := n.session()
	st := Stats{
		Violations:   n.viol.snapshot(),
		LinkChanges:  n.linkChanges.Load(),
		Reconfigures: n.reconfigures.Load(), ControlTimeouts: n.ctlTimeouts.Load(),
		ControlFailures: n.ctlFailures.Load(),
	}
	n.foldMu.Lock()
	st.RxIgnored, st.Interrupts = n.rxIgnored.Load(), n.interrupts.Load()
	if !s.folded {
		st.RxIgnored += s.rxIgnored.Load()
		st.Interrupts += s.h.Interrupts()
	}
	n.foldMu.Unlock()
	if st.Violations == nil {
		st.Violations = map[string]uint64{}
	}
	for _, q := range s.queues {
		st.Queues = append(st.Queues, q.stats())
	}
	n.evMu.Lock()
	st.HostEvents = make(map[string]uint64, len(n.events))
	for k, v := range n.events {
		st.HostEvents[k] = v
	}
	n.evMu.Unlock()
	return st
}

func (n *NIC) hostEvent(name string) {
	n.evMu.Lock()
	n.events[name]++
	n.evMu.Unlock()
}

// SetPacketFilter sets OID_GEN_CURRENT_PACKET_FILTER (NDISPacketType*
// bits) at run time.
func (n *NIC) SetPacketFilter(ctx context.Context, filter uint32) error {
	s := n.session()
	return s.ctl.setUint32(ctx, rndis.OIDGenCurrentPacketFilter, filter)
}

// QueryLink asks the host for the link state and speed now.
func (n *NIC) QueryLink(ctx context.Context) (Link, error) {
	s := n.session()
	if err := s.queryLink(ctx); err != nil {
		return Link{}, err
	}
	return n.Link(), nil
}

// SwitchDataPath asks the host to steer traffic to the VF (toVF) or back
// to the synthetic path, and waits for its (empty) completion: current
// Linux semantics (docs/protocol/netvsc.md §2.9). NVSP 4 or later.
func (n *NIC) SwitchDataPath(ctx context.Context, toVF bool) error {
	s := n.session()
	if s.version < nvsp.Version4 {
		return ErrNotSupported
	}
	path := nvsp.DataPathSynthetic
	if toVF {
		path = nvsp.DataPathVF
	}
	if _, err := s.ctl.nvsp(ctx, nvsp.SwitchDataPath{ActiveDataPath: path}.Marshal(nil), false); err != nil {
		return err
	}
	s.vfPath.Store(path)
	n.log.Info("data path switched", "vf", toVF)
	return nil
}

// Reconfigure changes the MTU and the queue count (0 keeps each) with a
// full teardown and bring-up: NVSP cannot renegotiate in place
// (docs/protocol/netvsc.md §2.8, §2.10; DPDK 7306b83a80). Every Queue is replaced: stop
// using the old ones first (their calls return ErrReconfigured).
func (n *NIC) Reconfigure(ctx context.Context, mtu, queues int) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return ErrClosed
	}
	cfg := n.session().cfg
	if mtu > 0 {
		cfg.MTU = mtu
	}
	if queues > 0 {
		cfg.Queues = queues
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	old := n.session()
	if n.vf != nil {
		n.vf.leave(ReasonReconfigure)
	}
	old.stop(ErrReconfigured)
	n.reconfigures.Add(1)
	s, err := n.bringUp(ctx, cfg)
	if err != nil {
		// Keep a dead session so accessors stay usable.
		d := &session{nic: n, cfg: cfg, h: old.h, queues: old.queues, dead: make(chan struct{}), mtu: old.mtu, mac: old.mac, ctl: old.ctl}
		e := error(&DeviceError{Err: fmt.Errorf("reconfigure: %w", err)})
		d.errp.Store(&e)
		close(d.dead)
		n.sess.Store(d)
		n.notifyLink()
		return err
	}
	n.sess.Store(s)
	n.notifyLink()
	n.log.Info("reconfigured", "mtu", s.mtu, "queues", len(s.queues))
	return nil
}

// Close tears the NIC down and returns the device clean: packet filter 0,
// RNDIS HALT, receive and send buffers revoked, then the VMBus device
// closed. Burst calls in progress finish; later ones return nothing.
func (n *NIC) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	if n.vf != nil {
		n.vf.close() // synthetic first, then the sockets go
	}
	return n.session().stop(ErrClosed)
}

// bringUp opens the device and runs the handshake.
func (n *NIC) bringUp(ctx context.Context, cfg Config) (*session, error) {
	mode := vmbus.WaitInterrupt
	if cfg.Mode == Poll {
		mode = vmbus.WaitPoll
	}
	h, err := vmbus.Open(n.dev, vmbus.Options{Mode: mode, Requests: cfg.MaxInFlight + 16,
		MonitorLatency: cfg.MonitorLatency, BusyPoll: cfg.BusyPoll, Kernel: cfg.Kernel, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	s := &session{nic: n, cfg: cfg, log: n.log, h: h, mtu: cfg.MTU, dead: make(chan struct{})}
	var ok bool
	if s.recvGPADL, s.recv, ok = h.GPADL("recv"); !ok {
		h.Close()
		return nil, fmt.Errorf("netvsc: %s has no recv:<gpadl> map (not a NIC, or kernel too old)", n.dev.Instance)
	}
	if s.sendGPADL, s.send.mem, ok = h.GPADL("send"); !ok {
		h.Close()
		return nil, fmt.Errorf("netvsc: %s has no send:<gpadl> map", n.dev.Instance)
	}
	s.ctl = newControl(s)
	q0, err := newQueue(s, 0, h.Primary())
	if err != nil {
		h.Close()
		return nil, err
	}
	s.queues = []*Queue{q0}
	if err := s.handshake(ctx); err != nil {
		s.log.Warn("bring-up failed", "err", err)
		failed := s.err()
		s.stop(ErrClosed)
		if failed != nil && !errors.Is(failed, ErrClosed) {
			return nil, failed
		}
		return nil, err
	}
	return s, nil
}

func (s *session) err() error {
	if p := s.errp.Load(); p != nil {
		return *p
	}
	return nil
}

// fail kills the session for a host violation, a rescind or a dead
// channel: counted by check, logged once, every channel killed so that
// every waiter wakes. It never panics or exits.
func (s *session) fail(err error) {
	if err == nil {
		return
	}
	s.failOnce.Do(func() {
		check := CheckOf(err)
		de := error(&DeviceError{Check: check, Err: err})
		if s.errp.CompareAndSwap(nil, &de) {
			if check != "" {
				s.nic.viol.add(check)
			}
			s.log.Error("device failed: reset it (close and reopen)", "err", err, "check", check)
		}
		s.running.Store(false)
		e := s.err()
		for _, c := range s.h.Channels() {
			c.Kill(e)
		}
		for _, q := range s.queues {
			q.interrupt(e)
		}
		s.deadOnce.Do(func() { close(s.dead) })
		s.nic.notifyLink()
	})
}

// stop ends the session for reason (ErrClosed, ErrReconfigured): waiters
// are woken, bursts drained out, the protocol torn down where the device
// still works, and the VMBus device closed.
func (s *session) stop(reason error) error {
	failed := s.err() != nil
	s.errp.CompareAndSwap(nil, &reason)
	return s.halt(reason, failed)
}

func (s *session) halt(reason error, failed bool) error {
	s.running.Store(false)
	for _, q := range s.queues {
		q.interrupt(reason)
	}
	for _, q := range s.queues {
		q.quiesce()
	}
	if !failed && s.h.Err() == nil && s.version != 0 {
		s.teardown()
	}
	for _, q := range s.queues {
		q.freeAll()
	}
	s.nic.foldMu.Lock()
	s.nic.interrupts.Add(s.h.Interrupts())
	s.nic.rxIgnored.Add(s.rxIgnored.Load())
	s.folded = true
	s.nic.foldMu.Unlock()
	err := s.h.Close()
	for _, q := range s.queues {
		q.release()
	}
	s.deadOnce.Do(func() { close(s.dead) })
	return err
}

// teardown sends the protocol's goodbyes on the primary channel, whose
// locks the caller holds: packet filter 0 (answered), HALT, and the buffer
// revocations (unanswered), lingering briefly for completions
// (docs/protocol/netvsc.md §2.10).
func (s *session) teardown() {
	c := s.ctl
	c.held = true
	defer func() { c.held = false }()
	t := min(s.cfg.ControlTimeout, time.Second)
	// Frames the application handed over are still the host's to deliver:
	// wait (bounded) for every queue's sends to complete before the
	// goodbyes, after which the host fails what it has not read yet
	// (Linux waits until every channel is empty before it closes).
	drainBy := time.Now().Add(min(t, 500*time.Millisecond))
	for time.Now().Before(drainBy) && !s.sendsDone() {
		time.Sleep(100 * time.Microsecond) // paces a bounded poll
	}
	ctx, cancel := context.WithTimeout(context.Background(), t)
	defer cancel()
	if err := c.setUint32(ctx, rndis.OIDGenCurrentPacketFilter, rndis.NDISPacketTypeNone); err != nil {
		s.log.Debug("teardown: packet filter", "err", err)
	}
	if err := c.rndisNoReply(ctx, rndis.Halt{RequestID: c.nextRID()}.Marshal(nil)); err != nil {
		s.log.Debug("teardown: halt", "err", err)
	}
	c.inband(nvsp.RevokeRecvBuf{ID: nvsp.RecvBufID}.Marshal(nil))
	c.inband(nvsp.RevokeSendBuf{ID: nvsp.SendBufIDDPDK}.Marshal(nil))
	// Linger until the host has read the goodbyes and completed what was
	// in flight on every queue, as Linux waits for every completion around
	// HALT (DPDK drains up to 1 s, lingering 200 ms per revoke). Every
	// queue is quiesced, so its receive side may be drained here. The
	// pause paces a poll bounded by the deadline; it waits for nothing.
	deadline := time.Now().Add(min(t, 200*time.Millisecond))
	for time.Now().Before(deadline) && !s.sendsDone() {
		time.Sleep(100 * time.Microsecond)
	}
}

// sendsDone drains every quiesced queue once and reports whether all of
// them have nothing in flight and nothing unread by the host (a queue whose
// channel died has nothing more to wait for).
func (s *session) sendsDone() bool {
	done := true
	for _, q := range s.queues {
		if q.ch.Err() != nil {
			continue
		}
		q.drainLocked()
		out, _ := q.ch.RingUsage()
		if q.ch.InFlight() != 0 || out != 0 {
			done = false
		}
	}
	return done
}

// newQueue sets up a queue on a channel; its send sections are assigned
// once the send buffer is known (assignSections).
func newQueue(s *session, idx int, ch *vmbus.Channel) (*Queue, error) {
	cfg := &s.cfg
	frameLen := s.mtu + EthernetHeaderSize + 4
	pool, err := NewPool(cfg.PoolPackets, frameLen, cfg.GPAPool)
	if err != nil {
		return nil, err
	}
	q := &Queue{
		s: s, idx: idx, ch: ch, pool: pool, vf: s.nic.vfQueue(idx), yield: ch.PollYield,
	}
	q.rx.init(cfg.RxStage)
	q.tx.init(s.mtu)
	q.w.txWake = make(chan struct{}, 1)
	q.acks.msg = nvsp.RNDISComplete{Status: nvsp.StatusSuccess}.Marshal(nil)
	q.initAcks()
	q.rx.lastRx.Store(nanotime())
	return q, nil
}

// initAcks sizes the queue's owed receive completions, and the frames it
// may hold, once the receive buffer's sub-allocation count is known
// (sub-channels are set up after; the primary is set up before and again
// once the count arrives).
func (q *Queue) initAcks() {
	q.inMu.Lock()
	q.rx.initHeld(q.s.subAllocs)
	q.inMu.Unlock()
	q.acks.init(q.s.subAllocs)
}

// assignSections gives queue q of nq its run of send sections, bounded by
// the request table (every section in flight holds a request slot).
func (q *Queue) assignSections(nq int) {
	s := q.s
	lo, hi := s.send.partition(q.idx, nq)
	hi = min(hi, lo+s.cfg.MaxInFlight-gpaSlots-8)
	if hi < lo {
		hi = lo
	}
	q.tx.assign(lo, hi)
}
