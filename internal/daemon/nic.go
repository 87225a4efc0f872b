package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vmbusd/vmbusd/internal/bind"
	"github.com/vmbusd/vmbusd/internal/config"
	"github.com/vmbusd/vmbusd/netvsc"
	"github.com/vmbusd/vmbusd/tap"
	"github.com/vmbusd/vmbusd/uio"
	"github.com/vmbusd/vmbusd/vmbus"
)

// The liveness probe of a running NIC (incarnation): every interval a
// control request; probeLimit failures in a row reset the NIC.
const (
	DefaultProbeInterval = 10 * time.Second
	DefaultProbeTimeout  = 5 * time.Second
	probeLimit           = 3
)

// NIC states, as /readyz, `vmbusd status` and metrics show them.
const (
	stateStarting = "starting"
	stateUp       = "up"
	stateReset    = "resetting"
	stateWaiting  = "waiting for the device"
	stateStopped  = "stopped"
)

// NICStatus is one NIC's state for the control socket.
type NICStatus struct {
	Name      string    `json:"name"`
	Device    string    `json:"device"`
	Instance  string    `json:"instance,omitempty"`
	State     string    `json:"state"`
	Since     time.Time `json:"since"`
	Error     string    `json:"error,omitempty"`
	MAC       string    `json:"mac,omitempty"`
	MTU       int       `json:"mtu,omitempty"`
	Queues    int       `json:"queues,omitempty"`
	LinkUp    bool      `json:"link_up"`
	LinkSpeed uint64    `json:"link_speed_bps,omitempty"`
	Attach    string    `json:"attach"`
	TAP       string    `json:"tap,omitempty"`
	Mode      string    `json:"mode"`
	Resets    uint64    `json:"resets"`
	Rescinds  uint64    `json:"rescinds"`
	BoundByUs bool      `json:"bound_by_vmbusd"`
}

// nicRunner supervises one configured NIC through resets and rescinds.
type nicRunner struct {
	d    *Daemon
	idx  int
	cfg  config.NIC
	log  *slog.Logger
	peer *nicRunner
	cap  captureHub
	beat atomic.Int64
	// probed is when the host last answered the liveness probe.
	probed atomic.Int64

	mu        sync.Mutex
	st        NICStatus
	instance  vmbus.GUID
	nic       *netvsc.NIC
	nicChange chan struct{} // closed when nic changes
	boundByUs bool
	// Counters of earlier incarnations, so the exported counters never go
	// backwards across a reset.
	base     map[int]netvsc.QueueStats
	baseViol map[string]uint64
	baseIRQ  uint64
}

func newNICRunner(d *Daemon, idx int, cfg config.NIC) *nicRunner {
	r := &nicRunner{d: d, idx: idx, cfg: cfg, log: d.log.With("nic", cfg.Device),
		base: map[int]netvsc.QueueStats{}, baseViol: map[string]uint64{}, nicChange: make(chan struct{})}
	r.st = NICStatus{Name: cfg.Device, Device: cfg.Device, State: stateStarting, Since: time.Now(),
		Attach: cfg.Attach.String(), TAP: cfg.TAP, Mode: cfg.Mode.String()}
	r.beat.Store(time.Now().UnixNano())
	return r
}

func (r *nicRunner) name() string { return r.cfg.Device }

// identity returns the NIC's instance GUID, zero until it is known.
func (r *nicRunner) identity() vmbus.GUID {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.instance
}

func (r *nicRunner) setInstance(g vmbus.GUID) {
	r.mu.Lock()
	r.instance = g
	r.st.Instance = g.String()
	r.mu.Unlock()
}

func (r *nicRunner) lastBeat() time.Time { return time.Unix(0, r.beat.Load()) }
func (r *nicRunner) heartbeat()          { r.beat.Store(time.Now().UnixNano()) }

func (r *nicRunner) status() NICStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.st
	st.BoundByUs = r.boundByUs
	if n := r.nic; n != nil && st.State == stateUp {
		l := n.Link()
		st.LinkUp, st.LinkSpeed = l.Up, l.Speed
	}
	return st
}

func (r *nicRunner) setState(state string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.st.State != state {
		r.st.Since = time.Now()
	}
	r.st.State = state
	r.st.Error = ""
	if err != nil {
		r.st.Error = err.Error()
	}
}

// current returns the running NIC (nil when down) and a channel closed when
// that changes.
func (r *nicRunner) current() (*netvsc.NIC, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.st.State != stateUp {
		return nil, r.nicChange
	}
	return r.nic, r.nicChange
}

func (r *nicRunner) setNIC(n *netvsc.NIC) {
	r.mu.Lock()
	r.nic = n
	close(r.nicChange)
	r.nicChange = make(chan struct{})
	r.mu.Unlock()
}

// run keeps the NIC up until ctx ends: one incarnation after another,
// backing off after failures and waiting out rescinds. first gets one
// token after the first attempt, whatever its outcome.
func (r *nicRunner) run(ctx context.Context, first chan<- struct{}) {
	var once sync.Once
	firstDone := func() { once.Do(func() { first <- struct{}{} }) }
	defer firstDone()
	backoff := 500 * time.Millisecond
	for ctx.Err() == nil {
		start := time.Now()
		err := r.incarnation(ctx, firstDone)
		firstDone()
		if ctx.Err() != nil {
			break
		}
		if time.Since(start) > time.Minute {
			backoff = 500 * time.Millisecond
		}
		if errors.Is(err, vmbus.ErrRescinded) || errors.Is(err, uio.ErrRescinded) {
			r.mu.Lock()
			r.st.Rescinds++
			r.mu.Unlock()
			r.setState(stateWaiting, err)
			r.log.Warn("device rescinded by the host; waiting for it to be offered again", "err", err)
			r.waitGone(ctx)
			r.waitOffer(ctx)
			continue
		}
		if !r.instance.IsZero() {
			if _, lerr := vmbus.LookupDevice(r.d.cfg.Root, r.instance); lerr != nil {
				r.setState(stateWaiting, err)
				r.log.Warn("device not present; waiting for it to be offered", "err", err)
				r.waitOffer(ctx)
				continue
			}
		}
		r.mu.Lock()
		r.st.Resets++
		r.mu.Unlock()
		r.setState(stateReset, err)
		r.log.Error("NIC failed; resetting", "err", err, "check", netvsc.CheckOf(err), "retry_in", backoff)
		r.sleep(ctx, backoff)
		backoff = min(backoff*2, 30*time.Second)
	}
	r.shutdown()
}

// sleep waits d (or until ctx ends), beating.
func (r *nicRunner) sleep(ctx context.Context, d time.Duration) {
	end := time.Now().Add(d)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for time.Now().Before(end) {
		r.heartbeat()
		select {
		case <-ctx.Done():
			return
		case <-time.After(min(time.Until(end), time.Second)):
		}
	}
	r.heartbeat()
}

// waitGone waits (a few seconds at most) for a rescinded device's old
// binding to go away: the host closes the channel before the kernel removes
// the device, so for a moment the old directory is still there.
func (r *nicRunner) waitGone(ctx context.Context) {
	end := time.Now().Add(5 * time.Second)
	for ctx.Err() == nil && time.Now().Before(end) {
		r.heartbeat()
		dev, err := vmbus.LookupDevice(r.d.cfg.Root, r.instance)
		if err != nil || dev.UIO == "" {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitOffer waits until the device is offered again (its sysfs directory
// back). The next incarnation binds it again: a re-offer is a new device to
// the kernel, and an override written on the old one is gone.
func (r *nicRunner) waitOffer(ctx context.Context) {
	for ctx.Err() == nil {
		r.heartbeat()
		if _, err := vmbus.LookupDevice(r.d.cfg.Root, r.instance); err == nil {
			r.log.Info("device offered again")
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (r *nicRunner) bindOptions() bind.Options {
	return bind.Options{StateDir: r.d.cfg.State(), Force: r.cfg.Force, Logger: r.log}
}

// incarnation brings the NIC up once and supervises it until it fails or
// ctx ends. up is called once it carries traffic.
func (r *nicRunner) incarnation(ctx context.Context, up func()) error {
	root := r.d.cfg.Root
	r.setState(stateStarting, nil)
	if r.identity().IsZero() {
		dev, err := bind.Resolve(root, r.cfg.Device)
		if err != nil {
			return fmt.Errorf("resolve %s: %w", r.cfg.Device, err)
		}
		r.setInstance(dev.Instance)
		if err := r.d.recordOwned(); err != nil {
			r.log.Warn("cannot record the device as owned", "err", err)
		}
	}
	if r.cfg.Binds() {
		rec, err := bind.Bind(ctx, root, r.instance.String(), r.bindOptions())
		if err != nil {
			return err
		}
		if rec.OriginalDriver != bind.DriverUIO {
			r.mu.Lock()
			r.boundByUs = true
			r.mu.Unlock()
		}
	}
	dev, err := vmbus.LookupDevice(root, r.instance)
	if err != nil {
		return err
	}
	ncfg := r.cfg.Netvsc()
	ncfg.GPAPool, ncfg.Logger = r.d.opts.GPAPool, r.log
	nic, err := netvsc.Open(ctx, dev, ncfg)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	r.mu.Lock()
	r.st.MAC, r.st.MTU, r.st.Queues = nic.MAC().String(), nic.MTU(), len(nic.Queues())
	r.mu.Unlock()

	dataDone := make(chan error, 1)
	var stopData func()
	switch r.cfg.Attach {
	case config.AttachTAP:
		td, err := tap.Create(tap.Config{Name: r.cfg.TAP, Queues: len(nic.Queues()), MAC: nic.MAC(),
			MTU: nic.MTU(), Netns: r.cfg.NetNS, Addr: r.cfg.Address, GSO: r.cfg.GSO})
		if err != nil {
			r.closeNIC(nic)
			return err
		}
		att, err := tap.Attach(nic, td, tap.AttachOptions{Logger: r.log, Observe: r.observer(nic)})
		if err != nil {
			td.Close()
			r.closeNIC(nic)
			return err
		}
		go func() {
			<-att.Done()
			dataDone <- att.Err()
		}()
		stopData = func() {
			att.Close()
			td.Close()
		}
		r.log.Info("NIC attached to TAP", "tap", td.Name(), "netns", r.cfg.NetNS, "queues", len(nic.Queues()),
			"mac", nic.MAC().String(), "mtu", nic.MTU())
	case config.AttachForward:
		fctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.forward(fctx, nic)
		}()
		stopData = func() {
			cancel()
			wg.Wait()
		}
		r.log.Info("NIC forwarding", "to", r.cfg.Peer, "queues", len(nic.Queues()))
	}
	r.setNIC(nic)
	r.probed.Store(time.Now().UnixNano()) // bring-up answered the host's questions
	r.setState(stateUp, nil)
	up()

	t := time.NewTicker(min(time.Second, r.d.probeInterval))
	defer t.Stop()
	var failure error
	lastProbe, probeFails := time.Now(), 0
loop:
	for {
		r.heartbeat()
		select {
		case <-ctx.Done():
			break loop
		case <-nic.Done():
			failure = nic.Err()
			break loop
		case err := <-dataDone:
			failure = err
			if e := nic.Err(); e != nil {
				failure = e
			}
			if failure == nil {
				failure = errors.New("data path stopped")
			}
			break loop
		case <-t.C:
		}
		// Liveness of the device itself: a control request through the
		// primary channel, answered by the host, now and then. A NIC
		// whose host stops answering is reset rather than left hanging.
		if time.Since(lastProbe) >= r.d.probeInterval {
			lastProbe = time.Now()
			pctx, cancel := context.WithTimeout(ctx, r.d.probeTimeout)
			_, err := nic.QueryLink(pctx)
			cancel()
			switch {
			case err == nil:
				probeFails = 0
				r.probed.Store(time.Now().UnixNano())
			case ctx.Err() == nil && nic.Err() == nil:
				probeFails++
				r.log.Warn("liveness probe failed", "err", err, "consecutive", probeFails)
				if probeFails >= probeLimit {
					failure = fmt.Errorf("the host stopped answering control requests: %w", err)
					break loop
				}
			}
		}
	}
	r.setState(stateStopped, failure)
	r.setNIC(nil)
	stopData()
	r.closeNIC(nic)
	return failure
}

// closeNIC closes an incarnation and folds its counters into the base.
func (r *nicRunner) closeNIC(nic *netvsc.NIC) {
	st := nic.Stats()
	if err := nic.Close(); err != nil && !errors.Is(err, netvsc.ErrClosed) {
		r.log.Debug("close", "err", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, q := range st.Queues {
		r.base[q.Queue] = addQueueStats(r.base[q.Queue], q)
	}
	for k, v := range st.Violations {
		r.baseViol[k] += v
	}
	r.baseIRQ += st.Interrupts
}

// forward moves frames from this NIC's queues to the peer NIC until ctx
// ends or this NIC fails; a peer that is down or resetting is waited for.
func (r *nicRunner) forward(ctx context.Context, nic *netvsc.NIC) {
	obs := r.observer(nic)
	for ctx.Err() == nil && nic.Err() == nil {
		peer, changed := r.peer.current()
		if peer == nil {
			select {
			case <-changed:
			case <-ctx.Done():
			case <-nic.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		pctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for i, q := range nic.Queues() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sink := &tap.SteeredSink{NIC: peer}
				var o func([]*netvsc.Packet)
				if obs != nil {
					o = func(p []*netvsc.Packet) { obs(true, i, p) }
				}
				if err := tap.PumpObserved(pctx, q, sink, 64, nil, o); pctx.Err() == nil {
					r.log.Debug("forward pump stopped", "queue", i, "err", err)
				}
				cancel()
			}()
		}
		select {
		case <-pctx.Done():
		case <-changed:
		case <-peer.Done():
		}
		cancel()
		wg.Wait()
	}
}

// shutdown gives back a device vmbusd bound.
func (r *nicRunner) shutdown() {
	r.mu.Lock()
	bound, inst := r.boundByUs, r.instance
	r.mu.Unlock()
	if bound && !inst.IsZero() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := bind.Unbind(ctx, r.d.cfg.Root, inst.String(), r.bindOptions()); err != nil {
			r.log.Error("giving the device back failed; `vmbusd restore` will retry", "err", err)
		} else {
			r.log.Info("device given back to its kernel driver")
			r.mu.Lock()
			r.boundByUs = false
			r.mu.Unlock()
		}
	}
	r.setState(stateStopped, nil)
}

// stats returns the NIC's counters including earlier incarnations.
func (r *nicRunner) stats() (queues []netvsc.QueueStats, viol map[string]uint64, irq uint64) {
	r.mu.Lock()
	nic := r.nic
	base := maps.Clone(r.base)
	viol = maps.Clone(r.baseViol)
	irq = r.baseIRQ
	r.mu.Unlock()
	cur := map[int]netvsc.QueueStats{}
	if nic != nil {
		st := nic.Stats()
		for _, q := range st.Queues {
			cur[q.Queue] = q
		}
		for k, v := range st.Violations {
			viol[k] += v
		}
		irq += st.Interrupts
	}
	n := max(len(base), len(cur))
	for k := range base {
		n = max(n, k+1)
	}
	for k := range cur {
		n = max(n, k+1)
	}
	for i := 0; i < n; i++ {
		q := addQueueStats(base[i], cur[i])
		q.Queue = i
		queues = append(queues, q)
	}
	return queues, viol, irq
}

func addQueueStats(a, b netvsc.QueueStats) netvsc.QueueStats {
	a.RxPackets += b.RxPackets
	a.RxBytes += b.RxBytes
	a.TxPackets += b.TxPackets
	a.TxBytes += b.TxBytes
	a.RxNoMemory += b.RxNoMemory
	a.RxTooBig += b.RxTooBig
	a.RxCompBusy += b.RxCompBusy
	a.TxSendFull += b.TxSendFull
	a.TxBusy += b.TxBusy
	a.TxNoSpace += b.TxNoSpace
	a.TxTooBig += b.TxTooBig
	a.TxCopied += b.TxCopied
	a.TxGPA += b.TxGPA
	a.TxSegmented += b.TxSegmented
	a.TxSegments += b.TxSegments
	a.TxSections += b.TxSections
	a.TxCompletions += b.TxCompletions
	a.TxFailed += b.TxFailed
	a.RxXfers += b.RxXfers
	a.RxCompSent += b.RxCompSent
	a.RxPPIErrors += b.RxPPIErrors
	a.TxVLANMoved += b.TxVLANMoved
	a.StopQueue += b.StopQueue
	a.PollSeconds += b.PollSeconds
	a.SleepSeconds += b.SleepSeconds
	c, d := &a.Channel, b.Channel
	c.TxPackets += d.TxPackets
	c.TxBytes += d.TxBytes
	c.TxCommits += d.TxCommits
	c.TxSignals += d.TxSignals
	c.TxFullWaits += d.TxFullWaits
	c.RxPackets += d.RxPackets
	c.RxBytes += d.RxBytes
	c.RxCommits += d.RxCommits
	c.RxSignals += d.RxSignals
	c.Wakeups += d.Wakeups
	c.MissedWakeups += d.MissedWakeups
	c.IdleWaits += d.IdleWaits
	return a
}
