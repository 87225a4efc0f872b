package netvsc

// The VF manager: one goroutine per NIC (with Config.VF on) that pairs the
// VF the host associates, attaches its data path, switches to it and back,
// and keeps looking for it while it is away (vf.go has the overview).
//
// Everything that can tell it something calls a hook that only records
// and pokes it, so no data path or drain goroutine ever waits for it:
//
//	association, hostSwitch   NVSP messages (queue 0's drain)
//	dataPathError             a VF socket failed (a burst call)
//	linkWatch                 rtnetlink: netdevs registered, changed, gone
//
// Hooks that say the VF is going also move transmit back to synthetic at
// once; the goroutine then does the rest in order: SWITCH_DATA_PATH{0}
// (completion requested) while the session lives, drain the VF's receive
// rings, unbind the queues, close the sockets and the program.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/vmbusd/vmbusd/afxdp"
	"github.com/vmbusd/vmbusd/clock"
	"github.com/vmbusd/vmbusd/netvsc/nvsp"
)

type vfManager struct {
	n    *NIC
	clk  clock.Clock // the retry backoff, the switch and drain timeouts, event times
	mode VFMode
	xdp  afxdp.Config
	log  *slog.Logger
	qs   [nvsp.MaxSubchannels]*vfQueue

	kick  chan struct{}
	req   chan vfRequest
	quit  chan struct{}
	done  chan struct{}
	watch *linkWatch // nil when rtnetlink is not available

	mu       sync.Mutex // everything below
	assoc    vfAssoc
	trig     vfTrigger
	state    VFState
	att      *vfAttachment
	retryAt  time.Time
	hold     time.Time // no attempt before: the host switched us off by itself
	backoff  time.Duration
	path     Path
	since    time.Time
	timeSyn  time.Duration
	timeVF   time.Duration
	events   []VFEvent
	reasons  map[string]uint64
	switches uint64
	attempts uint64
	failures uint64
	lastErr  string
	last     vfNetdev
	attach   string
	bind     string
	sockets  int
	changed  chan struct{}
}

// vfAssoc is what the host last said about the VF, in which session.
type vfAssoc struct {
	sess      *session
	allocated bool
	serial    uint32
	at        time.Time
}

// vfTrigger is a reason to leave the VF, and when it was seen.
type vfTrigger struct {
	reason   string
	at       time.Time // observed
	switched time.Time // transmit moved to synthetic
	err      string
}

// vfAttachment is the VF's data path as attached to one session.
type vfAttachment struct {
	sess   *session
	dev    vfNetdev
	port   *afxdp.Port
	socks  []*afxdp.Socket
	queues []*Queue
	wakers []*vfWaker
	at     time.Time // when its switch was asked for
}

// vfRequest asks the goroutine to leave the VF and waits for it.
type vfRequest struct {
	reason string
	done   chan struct{}
}

// Backoff of the retries while a VF is associated but not usable.
const (
	vfRetryMin = 100 * time.Millisecond
	vfRetryMax = 5 * time.Second
	// vfAfterHostSwitch is how long the NIC waits before trying the VF
	// again after the host switched it to synthetic by itself (a
	// withdrawal usually follows at once).
	vfAfterHostSwitch = time.Second
	// vfSwitchTimeout bounds SWITCH_DATA_PATH's completion.
	vfSwitchTimeout = 10 * time.Second
	// vfDrainMax bounds the drain of the VF's receive rings when leaving
	// it; vfDrainQuiet is how long they must stay empty.
	vfDrainMax   = time.Second
	vfDrainQuiet = 5 * time.Millisecond
	// vfMaxEvents is how many switches VFStatus keeps.
	vfMaxEvents = 64
)

func newVFManager(n *NIC, cfg Config) *vfManager {
	clk := clock.Or(cfg.Clock)
	m := &vfManager{n: n, clk: clk, mode: cfg.VF, xdp: cfg.VFXDP, log: n.log.With("vf", true),
		kick: make(chan struct{}, 1), req: make(chan vfRequest), quit: make(chan struct{}), done: make(chan struct{}),
		state: VFStateNone, backoff: vfRetryMin, since: clk.Now(), reasons: map[string]uint64{},
		changed: make(chan struct{})}
	for i := range m.qs {
		m.qs[i] = newVFQueue(m, i)
	}
	return m
}

// start begins watching netdevs and runs the goroutine.
func (m *vfManager) start() {
	w, err := newLinkWatch(m.poke, m.clk)
	if err != nil {
		m.log.Warn("no rtnetlink: VF removal is seen only from the data path and the host", "err", err)
	} else {
		m.watch = w
	}
	go m.run()
}

func (m *vfManager) poke() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// close leaves the VF (switching to synthetic while the session still
// runs) and stops the goroutine.
func (m *vfManager) close() {
	select {
	case <-m.quit:
	default:
		close(m.quit)
	}
	<-m.done
	if m.watch != nil {
		m.watch.close()
		m.watch = nil
	}
}

// leave detaches the VF now, for reason (a reconfiguration), and returns
// when it is done.
func (m *vfManager) leave(reason string) {
	r := vfRequest{reason: reason, done: make(chan struct{})}
	select {
	case m.req <- r:
		<-r.done
	case <-m.done:
	}
}

// queue returns queue index idx's VF state.
func (m *vfManager) queue(idx int) *vfQueue {
	if idx < 0 || idx >= len(m.qs) {
		return nil
	}
	return m.qs[idx]
}

// association records a VF_ASSOCIATION (hook; queue 0's drain).
func (m *vfManager) association(s *session, allocated bool, serial uint32) {
	now := m.clk.Now()
	m.mu.Lock()
	m.assoc = vfAssoc{sess: s, allocated: allocated, serial: serial, at: now}
	m.retryAt, m.hold, m.backoff = time.Time{}, time.Time{}, vfRetryMin
	if !allocated {
		m.triggerLocked(ReasonWithdrawn, now, "")
	}
	m.mu.Unlock()
	m.poke()
}

// hostSwitch records a host-initiated SWITCH_DATA_PATH (hook).
func (m *vfManager) hostSwitch(s *session, path uint32) {
	if path != nvsp.DataPathSynthetic {
		return
	}
	now := m.clk.Now()
	m.mu.Lock()
	if m.att != nil && m.att.sess == s {
		m.triggerLocked(ReasonHostSwitch, now, "")
	}
	// Also while an attachment is being prepared: the host has just said
	// "synthetic", so attachVF must not answer with a switch to the VF.
	m.hold = now.Add(vfAfterHostSwitch)
	m.mu.Unlock()
	m.poke()
}

// dataPathError records a VF socket's failure (hook; a burst call).
func (m *vfManager) dataPathError(err error) {
	now := m.clk.Now()
	reason := ReasonDataPathError
	if errors.Is(err, afxdp.ErrDeviceDown) {
		reason = ReasonNetdevDown
	}
	m.mu.Lock()
	m.triggerLocked(reason, now, err.Error())
	m.mu.Unlock()
	m.poke()
}

// triggerLocked notes the first reason to leave the VF and moves transmit
// to synthetic at once.
func (m *vfManager) triggerLocked(reason string, at time.Time, err string) {
	if m.att == nil {
		return
	}
	now := m.clk.Now()
	if m.trig.reason == "" {
		m.trig = vfTrigger{reason: reason, at: at, switched: now, err: err}
	}
	for _, q := range m.att.queues {
		q.vf.txOn.Store(false)
	}
	m.setPathLocked(PathSynthetic, now, m.trig.reason)
}

// setPathLocked accounts the time on the path being left, and counts the
// change with its reason at the same moment, so that a status taken while
// the VF is being detached (which takes a drain) shows the switch and its
// reason together.
func (m *vfManager) setPathLocked(p Path, at time.Time, reason string) {
	if m.path == p {
		return
	}
	d := max(at.Sub(m.since), 0)
	if m.path == PathVF {
		m.timeVF += d
	} else {
		m.timeSyn += d
	}
	m.path, m.since = p, at
	m.switches++
	m.reasons[reason]++
	m.notifyLocked()
}

func (m *vfManager) notifyLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
}

func (m *vfManager) changedCh() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

func (m *vfManager) setState(s VFState) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state != s {
		m.state = s
		m.notifyLocked()
	}
}

func (m *vfManager) addEventLocked(e VFEvent) {
	if len(m.events) == vfMaxEvents {
		copy(m.events, m.events[1:])
		m.events = m.events[:vfMaxEvents-1]
	}
	m.events = append(m.events, e)
	if e.Reason == ReasonSwitchRejected {
		// Not a path change: the host refused the switch, so
		// setPathLocked never counted it.
		m.reasons[e.Reason]++
	}
	m.notifyLocked()
}

func (m *vfManager) run() {
	defer close(m.done)
	t := m.clk.NewTimer(time.Hour)
	defer t.Stop()
	for {
		wait := m.step()
		var dead <-chan struct{}
		m.mu.Lock()
		if m.att != nil {
			dead = m.att.sess.dead
		}
		m.mu.Unlock()
		if wait <= 0 {
			wait = time.Hour
		}
		t.Reset(wait)
		select {
		case <-m.quit:
			m.detach(ReasonClosing, m.clk.Now(), "")
			m.setState(VFStateNone)
			return
		case r := <-m.req:
			m.detach(r.reason, m.clk.Now(), "")
			close(r.done)
		case <-m.kick:
		case <-t.C():
		case <-dead:
		}
		t.Stop()
	}
}

// step looks at everything once and does what it calls for; it returns
// when to look again without a poke (0: only on a poke).
func (m *vfManager) step() time.Duration {
	s := m.n.session()
	m.linkEvents()
	m.mu.Lock()
	att, assoc, trig := m.att, m.assoc, m.trig
	m.mu.Unlock()
	now := m.clk.Now()
	if att != nil {
		switch {
		case att.sess != s || s.err() != nil:
			m.detach(ReasonSessionEnded, now, "")
		case assoc.sess != s || !assoc.allocated:
			m.detach(ReasonWithdrawn, assoc.at, "")
		case trig.reason != "":
			m.detach(trig.reason, trig.at, trig.err)
		default:
			for _, k := range att.socks {
				if err := k.Err(); err != nil {
					m.detach(ReasonDataPathError, now, err.Error())
					break
				}
			}
		}
		m.mu.Lock()
		att = m.att
		m.mu.Unlock()
		if att != nil {
			return 0
		}
	}
	if s.err() != nil || !s.running.Load() || assoc.sess != s || !assoc.allocated {
		m.setState(VFStateNone)
		return 0
	}
	m.mu.Lock()
	retryAt := m.retryAt
	if m.hold.After(retryAt) {
		retryAt = m.hold
	}
	m.mu.Unlock()
	if now.Before(retryAt) {
		m.setState(VFStateSearching)
		return retryAt.Sub(now)
	}
	err := m.attachVF(s, assoc.serial)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err == nil {
		m.backoff = vfRetryMin
		return 0
	}
	if errors.Is(err, errVFGoing) {
		m.lastErr = err.Error()
		return time.Millisecond // look again: the withdrawal or the hold decides
	}
	if !errors.Is(err, errVFNotFound) && !errors.Is(err, errNoCarrier) {
		m.failures++
		m.log.Warn("VF not attached; retrying", "err", err, "in", m.backoff)
	}
	m.lastErr = err.Error()
	m.retryAt = now.Add(m.backoff)
	wait := m.backoff
	m.backoff = min(2*m.backoff, vfRetryMax)
	if m.state != VFStateSearching {
		m.state = VFStateSearching
		m.notifyLocked()
	}
	return wait
}

// linkEvents applies rtnetlink's news: the attached netdev gone or down
// is a reason to leave it (confirmed by looking, since an event may be
// older than the attachment); any netdev appearing or changing while the
// VF is searched for is a reason to look again at once.
func (m *vfManager) linkEvents() {
	if m.watch == nil {
		return
	}
	evs, over := m.watch.take()
	if len(evs) == 0 && !over {
		return
	}
	m.mu.Lock()
	att := m.att
	m.mu.Unlock()
	if att == nil {
		m.mu.Lock()
		m.retryAt, m.backoff = time.Time{}, vfRetryMin
		m.mu.Unlock()
		return
	}
	idx := att.dev.index
	var bad *linkEvent
	for i := range evs {
		if evs[i].index == idx && !evs[i].usable() {
			bad = &evs[i]
			break
		}
	}
	if bad == nil && !over {
		return
	}
	now := linkNow(idx, m.clk)
	if now.usable() {
		return
	}
	at := now.at
	if bad != nil {
		at = bad.at
	}
	reason := ReasonNetdevDown
	if now.deleted {
		reason = ReasonNetdevRemoved
	}
	m.mu.Lock()
	m.triggerLocked(reason, at, "")
	m.mu.Unlock()
}

// errNoCarrier: the VF's netdev is up but has no link yet.
var errNoCarrier = errors.New("netvsc: VF netdev has no carrier")

// errVFGoing: while the VF was being prepared the host withdrew it or
// switched the NIC to synthetic, so it was not switched to.
var errVFGoing = errors.New("netvsc: VF withdrawn while it was being attached")

// attachVF finds, prepares and attaches the VF and switches to it.
func (m *vfManager) attachVF(s *session, serial uint32) error {
	m.mu.Lock()
	m.attempts++
	m.mu.Unlock()
	dev, err := findVF(m.n.dev.Root, serial, net.HardwareAddr(s.mac[:]))
	if err != nil {
		return err
	}
	m.setState(VFStateAttaching)
	carrier, err := prepareVF(dev.name, s.mtu)
	if err != nil {
		return err
	}
	if !carrier {
		return fmt.Errorf("%w: %s", errNoCarrier, dev.name)
	}
	xcfg := m.xdp
	if xcfg.FrameSize == 0 && s.mtu+EthernetHeaderSize > 2048-256-xcfg.Headroom {
		xcfg.FrameSize = 4096
	}
	if fs := max(xcfg.FrameSize, 2048); s.mtu+EthernetHeaderSize > fs-256-xcfg.Headroom {
		return fmt.Errorf("netvsc: VF %s: MTU %d does not fit an AF_XDP frame of %d bytes", dev.name, s.mtu, fs)
	}
	port, err := afxdp.Open(dev.name, xcfg)
	if err != nil {
		return err
	}
	att := &vfAttachment{sess: s, dev: dev, port: port, socks: port.Sockets(), queues: s.queues, at: m.clk.Now()}
	if err := m.bindQueues(att); err != nil {
		m.unbind(att)
		return err
	}
	m.mu.Lock()
	m.att, m.trig, m.last = att, vfTrigger{}, dev
	m.attach, m.bind, m.sockets = port.AttachMode().String(), port.BindMode().String(), len(att.socks)
	m.mu.Unlock()
	// Preparing the VF (the XDP program, the sockets) takes milliseconds,
	// more under load, and the host may withdraw the association or switch
	// to synthetic meanwhile (host servicing). Asking for the VF after that
	// would have the host steer to a VF it is taking away, so look again
	// right before asking.
	m.mu.Lock()
	going := m.trig.reason != "" || m.assoc.sess != s || !m.assoc.allocated || m.clk.Now().Before(m.hold)
	if going {
		m.att = nil
	}
	m.mu.Unlock()
	if going {
		m.unbind(att)
		return errVFGoing
	}
	ctx, cancel := clock.WithTimeout(context.Background(), m.clk, min(s.cfg.ControlTimeout, vfSwitchTimeout))
	err = m.n.SwitchDataPath(ctx, true)
	cancel()
	now := m.clk.Now()
	if err != nil {
		m.mu.Lock()
		m.att = nil
		m.addEventLocked(VFEvent{To: PathVF, Reason: ReasonSwitchRejected, Observed: att.at, Switched: now, Done: now,
			IfName: dev.name, Err: err.Error()})
		m.mu.Unlock()
		m.unbind(att)
		return fmt.Errorf("netvsc: switch to the VF: %w", err)
	}
	// Steer only after the completion, and only if nothing said the VF
	// is going meanwhile (then the next step leaves it again).
	m.mu.Lock()
	if m.trig.reason == "" && m.assoc.sess == s && m.assoc.allocated {
		for _, q := range att.queues {
			q.vf.txOn.Store(true)
		}
		m.setPathLocked(PathVF, now, ReasonVFReady)
		m.state = VFStateActive
		m.lastErr = ""
		m.addEventLocked(VFEvent{To: PathVF, Reason: ReasonVFReady, Observed: att.at, Switched: now, Done: now, IfName: dev.name})
	}
	m.mu.Unlock()
	m.log.Info("data path on the VF", "ifname", dev.name, "pci", dev.bdf, "driver", dev.driver, "matched", dev.matched,
		"attach", port.AttachMode().String(), "bind", port.BindMode().String(), "sockets", len(att.socks))
	return nil
}

// bindQueues gives each queue of the session its share of the sockets:
// socket j is received by queue j mod Q; queue i sends on socket i mod V.
func (m *vfManager) bindQueues(att *vfAttachment) error {
	nq, ns := len(att.queues), len(att.socks)
	if ns == 0 {
		return fmt.Errorf("netvsc: VF %s: no sockets", att.dev.name)
	}
	for i, q := range att.queues {
		var rx []*afxdp.Socket
		for j := i; j < ns; j += nq {
			rx = append(rx, att.socks[j])
		}
		w, err := newVFWaker(q, rx)
		if err != nil {
			return err
		}
		att.wakers = append(att.wakers, w)
		q.vf.bind.Store(&vfBinding{rx: rx, tx: att.socks[i%ns], w: w})
	}
	return nil
}

// unbind takes the attachment out of the queues (after which no burst
// uses its sockets), stops the wakers and closes the sockets and the
// program: the netdev's traffic goes back to the kernel.
func (m *vfManager) unbind(att *vfAttachment) {
	for _, q := range att.queues {
		q.vf.txOn.Store(false)
		q.vf.bind.Store(nil)
		q.vfKick()
	}
	for _, q := range att.queues {
		// A barrier: once each lock has been taken, no receive or
		// transmit burst is inside the VF path any more.
		q.inMu.Lock()
		//lint:ignore SA2001 an empty critical section is the point
		q.inMu.Unlock()
		q.txMu.Lock()
		//lint:ignore SA2001 an empty critical section is the point
		q.txMu.Unlock()
	}
	for _, w := range att.wakers {
		w.stop()
	}
	if err := att.port.Close(); err != nil {
		m.log.Debug("VF port close", "err", err)
	}
}

// detach leaves the VF in order: transmit to synthetic (the trigger may
// have done it), SWITCH_DATA_PATH{0} with completion while the session
// lives, drain, unbind.
func (m *vfManager) detach(reason string, observed time.Time, errText string) {
	m.mu.Lock()
	att := m.att
	if att == nil {
		m.mu.Unlock()
		return
	}
	m.triggerLocked(reason, observed, errText)
	reason, observed, errText = m.trig.reason, m.trig.at, m.trig.err
	switched := m.trig.switched
	m.state = VFStateDetaching
	m.notifyLocked()
	m.mu.Unlock()
	s := att.sess
	if s == m.n.session() && s.err() == nil && reason != ReasonSessionEnded {
		ctx, cancel := clock.WithTimeout(context.Background(), m.clk, min(s.cfg.ControlTimeout, vfSwitchTimeout))
		if err := m.n.SwitchDataPath(ctx, false); err != nil {
			m.log.Warn("switch to synthetic", "err", err)
		}
		cancel()
	}
	if reason != ReasonNetdevRemoved && reason != ReasonSessionEnded && reason != ReasonDataPathError {
		m.drain(att)
	}
	m.unbind(att)
	done := m.clk.Now()
	m.mu.Lock()
	m.att, m.trig = nil, vfTrigger{}
	m.state = VFStateNone
	m.addEventLocked(VFEvent{To: PathSynthetic, Reason: reason, Observed: observed, Switched: switched, Done: done,
		IfName: att.dev.name, Err: errText})
	m.mu.Unlock()
	m.log.Info("data path back on synthetic", "reason", reason, "ifname", att.dev.name,
		"detected_after", switched.Sub(observed), "took", done.Sub(observed))
}

// drain moves what the VF's receive rings hold into the queues' staging
// (RxBurst hands it out before anything newer), until the rings have
// stayed empty for a moment: the host has steered synthetic since its
// completion, but frames already on the wire still arrive. It does not
// depend on anyone calling RxBurst meanwhile; frames beyond the staging's
// room are dropped and counted (rx_no_memory).
func (m *vfManager) drain(att *vfAttachment) {
	end := m.clk.NewTimer(vfDrainMax)
	defer end.Stop()
	// The quiet period is measured on real time, as the 1 ms pause
	// between looks: it is how long frames already on the wire take to
	// land, a property of the data path; only the bound is a timeout.
	quietSince := time.Now()
	for {
		got := 0
		for _, q := range att.queues {
			if !q.vfPending() {
				continue
			}
			q.vfKick() // a sleeper holds inMu
			q.inMu.Lock()
			if q.s.err() == nil {
				got += q.vfDrainLocked()
			}
			q.inMu.Unlock()
		}
		if got > 0 {
			quietSince = time.Now()
		} else if time.Since(quietSince) >= vfDrainQuiet {
			return
		}
		select {
		case <-end.C():
			return
		case <-time.After(time.Millisecond):
		}
	}
}

// status fills the pairing's part of a VFStatus.
func (m *vfManager) status(st *VFStatus) {
	m.mu.Lock()
	st.State = m.state
	st.Associated, st.Serial = m.assoc.allocated && m.assoc.sess == m.n.session(), m.assoc.serial
	st.IfName, st.Ifindex, st.PCI, st.Driver, st.MatchedBy = m.last.name, m.last.index, m.last.bdf, m.last.driver, m.last.matched
	st.Path = m.path
	st.Attach, st.Bind, st.Sockets = m.attach, m.bind, m.sockets
	st.TimeSynthetic, st.TimeVF = m.timeSyn, m.timeVF
	if d := m.clk.Since(m.since); m.path == PathVF {
		st.TimeVF += d
	} else {
		st.TimeSynthetic += d
	}
	st.Switches = m.switches
	for k, v := range m.reasons {
		st.Reasons[k] = v
	}
	st.Events = append([]VFEvent(nil), m.events...)
	st.Attempts, st.Failures, st.LastError = m.attempts, m.failures, m.lastErr
	m.mu.Unlock()
	for _, v := range m.qs {
		st.VF.RxPackets += v.rxPackets.load()
		st.VF.RxBytes += v.rxBytes.load()
		st.VF.TxPackets += v.txPackets.load()
		st.VF.TxBytes += v.txBytes.load()
		st.VF.TxDropped += v.txDropped.load()
	}
}

// waitActive waits until the VF carries traffic, for a required VF. Nobody
// receives yet, so it drains queue 0 itself meanwhile: the association
// arrives there (frames are staged for the first RxBurst).
func (m *vfManager) waitActive(ctx context.Context, timeout time.Duration) error {
	t := m.clk.NewTimer(timeout)
	defer t.Stop()
	// The tick paces the drain of queue 0 below, a poll of the data path
	// while nobody receives, not a timeout: it stays on real time so that
	// a fake clock does not stop the association from being seen.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		m.mu.Lock()
		ok, ch, last := m.state == VFStateActive, m.changed, m.lastErr
		m.mu.Unlock()
		if ok {
			return nil
		}
		s := m.n.session()
		if err := s.err(); err != nil {
			return err
		}
		if q0 := s.queues[0]; q0.inMu.TryLock() {
			if s.err() == nil {
				q0.drainLocked()
			}
			q0.inMu.Unlock()
		}
		select {
		case <-ch:
		case <-tick.C:
		case <-t.C():
			if last != "" {
				return fmt.Errorf("%w within %v (last: %s)", ErrNoVF, timeout, last)
			}
			return fmt.Errorf("%w within %v", ErrNoVF, timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// ErrNoVF: a required VF did not carry traffic in time.
var ErrNoVF = errors.New("netvsc: no usable VF")
