package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vmbusd/vmbusd/clock"
	"github.com/vmbusd/vmbusd/frame"
	"github.com/vmbusd/vmbusd/internal/bind"
	"github.com/vmbusd/vmbusd/internal/config"
	"github.com/vmbusd/vmbusd/netvsc"
	"github.com/vmbusd/vmbusd/nictap"
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
	// stateNoVF: vf = "required" and the VF did not carry traffic in time;
	// bring-up is tried again with backoff.
	stateNoVF = "waiting for the VF"
	// stateFailed: a configuration or permanent error (a missing network
	// namespace, an MTU the driver refuses, the management interface):
	// retrying cannot help, so the NIC stays down, with the reason, until
	// a reload (SIGHUP) brings a fixed configuration.
	stateFailed  = "failed"
	stateStopped = "stopped"
)

// Reset backoff: after a host fault a NIC is reopened after backoffMin,
// doubling per failure in a row up to backoffMax; a NIC that stayed up for
// healthyAfter starts again from backoffMin.
const (
	backoffMin   = 500 * time.Millisecond
	backoffMax   = 30 * time.Second
	healthyAfter = time.Minute
)

// NICStatus is one NIC's state for the control socket.
type NICStatus struct {
	Name      string    `json:"name"`
	Device    string    `json:"device"`
	Instance  string    `json:"instance"`
	State     string    `json:"state"`
	Since     time.Time `json:"since"`
	Error     string    `json:"error"`
	MAC       string    `json:"mac"`
	MTU       int       `json:"mtu"`
	Queues    int       `json:"queues"`
	LinkUp    bool      `json:"link_up"`
	LinkSpeed uint64    `json:"link_speed_bps"`
	Attach    string    `json:"attach"`
	TAP       string    `json:"tap"`
	Mode      string    `json:"mode"`
	Resets    uint64    `json:"resets"`
	Rescinds  uint64    `json:"rescinds"`
	BoundByUs bool      `json:"bound_by_vmbusd"`
	// GPAPool is the backend of the incarnation's GPA-direct pool ("sim",
	// "hugepage"; "" without one).
	GPAPool string `json:"gpa_pool"`
	// VF is the accelerated-networking VF's pairing and the data path.
	VF VFStatus `json:"vf"`
}

// permanentError is a failure retrying cannot fix: the NIC goes to
// stateFailed instead of resetting.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

func permanent(err error) error { return &permanentError{err} }

func isPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// errNotPresent: the device is not offered (yet, or any more); the NIC
// waits for it.
var errNotPresent = errors.New("the device is not offered")

// errHostSilent: the host stopped answering the liveness probe.
var errHostSilent = errors.New("the host stopped answering control requests")

// transientError is a local failure that passes by itself (a TAP name the
// last incarnation still holds, a sysfs write that timed out, a data path
// torn down under the NIC): the NIC is reset with backoff.
type transientError struct{ err error }

func (e *transientError) Error() string { return e.err.Error() }
func (e *transientError) Unwrap() error { return e.err }

func transient(err error) error { return &transientError{err} }

// failureKind is what the supervisor does after an incarnation ends.
type failureKind int

const (
	// failConfig: a setup or configuration error, or one the daemon
	// cannot place: retrying cannot help, so the NIC stays failed, with
	// the reason, until a reload.
	failConfig failureKind = iota
	// failViolation: the host broke the protocol (netvsc.CheckOf names
	// the check; counted): reset with backoff.
	failViolation
	// failHost: the host refused a request or stopped answering
	// (ErrControlTimeout, *RNDISError, *NVSPError, a dead channel, the
	// liveness probe): reset with backoff.
	failHost
	// failTransient: a local condition that passes: reset with backoff.
	failTransient
	// failRescind: the host took the device away: wait for the re-offer.
	failRescind
	// failAbsent: the device is not offered: wait for it.
	failAbsent
	// failNoVF: a required VF did not carry traffic in time: try again
	// with backoff (the host may be servicing it).
	failNoVF
)

var failureNames = [...]string{failConfig: "configuration", failViolation: "protocol violation", failHost: "host failure",
	failTransient: "transient", failRescind: "rescind", failAbsent: "absent", failNoVF: "no VF"}

func (k failureKind) String() string { return failureNames[k] }

// classify sorts an incarnation's failure by the netvsc error contract
// (netvsc/protoerr, netvsc/config.go): a violation may be a
// *vmbus.CorruptError inside a *netvsc.DeviceError, so it is told by
// CheckOf, not by its type.
func classify(err error) failureKind {
	var (
		perm  *permanentError
		trans *transientError
		rndis *netvsc.RNDISError
		nvsp  *netvsc.NVSPError
		dev   *netvsc.DeviceError
	)
	switch {
	case errors.As(err, &perm):
		return failConfig
	case errors.Is(err, vmbus.ErrRescinded) || errors.Is(err, uio.ErrRescinded):
		return failRescind
	case errors.Is(err, errNotPresent):
		return failAbsent
	case netvsc.CheckOf(err) != "":
		return failViolation
	case errors.Is(err, netvsc.ErrNoVF):
		return failNoVF
	case errors.Is(err, netvsc.ErrControlTimeout), errors.As(err, &rndis), errors.As(err, &nvsp),
		errors.Is(err, errHostSilent), errors.As(err, &dev):
		return failHost
	case errors.As(err, &trans), errors.Is(err, netvsc.ErrGPAPoolStale):
		return failTransient
	}
	return failConfig
}

// nicRunner supervises one configured NIC through resets and rescinds.
// One runner lives from the NIC's start to its stop (at shutdown, or when
// a reload removes or changes it).
type nicRunner struct {
	d   *Daemon
	cfg config.NIC
	log *slog.Logger
	// devLog is what the NIC's driver logs through: wrapped once, here,
	// so that netvsc and vmbus keep it across resets instead of putting a
	// fresh limiter of their own on each incarnation; the lines are
	// limited once, by the daemon's [log] limits (r.log's handler), which
	// hold for the daemon's lifetime and follow a reload.
	devLog *slog.Logger
	cap    captureHub
	beat   atomic.Int64
	// probed is when the host last answered the liveness probe.
	probed atomic.Int64
	cancel context.CancelFunc
	done   chan struct{}
	// inUse is held for reading by each peer forwarding into the NIC, and
	// for writing while the NIC closes: no frame goes to a closing NIC (the
	// host would see data after its RNDIS HALT).
	inUse sync.RWMutex

	mu        sync.Mutex
	st        NICStatus
	instance  vmbus.GUID
	devIno    uint64 // the sysfs directory of the device last opened
	nic       *netvsc.NIC
	nicChange chan struct{} // closed when nic changes
	// live is the incarnation whose counters are not folded into the
	// base yet: set with nic, cleared by closeNIC as it folds them, so
	// that a scrape while a NIC closes sees them once, never twice or
	// not at all.
	live      *netvsc.NIC
	boundByUs bool
	// Counters of earlier incarnations, so the exported counters never go
	// backwards across a reset.
	base     map[int]netvsc.QueueStats
	baseViol map[string]uint64
	baseIRQ  uint64
	baseCtl  uint64 // control requests the host failed
	baseVF   vfTotals
	// irqSeen is the highest interrupt count reported (netvsc's count of
	// a closed NIC is not exact, and a counter must not go backwards).
	irqSeen uint64
}

func newNICRunner(d *Daemon, cfg config.NIC) *nicRunner {
	r := &nicRunner{d: d, cfg: cfg, log: d.log.With("nic", cfg.Device),
		base: map[int]netvsc.QueueStats{}, baseViol: map[string]uint64{}, nicChange: make(chan struct{}),
		done: make(chan struct{})}
	r.devLog = vmbus.LimitLogger(r.log, math.MaxInt, time.Hour)
	r.st = NICStatus{Name: cfg.Device, Device: cfg.Device, State: stateStarting, Since: d.clk.Now(),
		Attach: cfg.Attach.String(), TAP: cfg.TAP, Mode: cfg.Mode.String()}
	r.beat.Store(d.clk.Now().UnixNano())
	return r
}

// inherit carries the counters and identity of the runner this one
// replaces (the same NIC with a changed configuration).
func (r *nicRunner) inherit(old *nicRunner) {
	old.mu.Lock()
	defer old.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.base, r.baseViol, r.baseIRQ = maps.Clone(old.base), maps.Clone(old.baseViol), old.baseIRQ
	r.baseCtl, r.baseVF, r.irqSeen = old.baseCtl, old.baseVF.clone(), old.irqSeen
	r.st.Resets, r.st.Rescinds = old.st.Resets, old.st.Rescinds
	r.instance, r.st.Instance = old.instance, old.st.Instance
}

// start runs the supervisor until stop.
func (r *nicRunner) start(parent context.Context) {
	ctx, cancel := context.WithCancel(parent)
	r.cancel = cancel
	go func() {
		defer close(r.done)
		r.run(ctx)
	}()
}

// stop ends the supervisor and waits until the device is given back.
func (r *nicRunner) stop() {
	r.cancel()
	<-r.done
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
func (r *nicRunner) heartbeat()          { r.beat.Store(r.d.clk.Now().UnixNano()) }

// status returns the NIC's state with its VF's.
func (r *nicRunner) status() NICStatus {
	st := r.state()
	st.VF = r.totals().vf
	return st
}

// state returns the NIC's state without the VF's (which needs the
// counters).
func (r *nicRunner) state() NICStatus {
	r.mu.Lock()
	st := r.st
	st.BoundByUs = r.boundByUs
	n := r.nic
	r.mu.Unlock()
	if n != nil && st.State == stateUp {
		l := n.Link()
		st.LinkUp, st.LinkSpeed = l.Up, l.Speed
	}
	return st
}

func (r *nicRunner) setState(state string, err error) {
	r.mu.Lock()
	if r.st.State != state {
		r.st.Since = r.d.clk.Now()
	}
	r.st.State = state
	r.st.Error = ""
	if err != nil {
		r.st.Error = err.Error()
	}
	r.mu.Unlock()
	r.d.kickNow()
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

// use makes n, returned by current, safe to send into until release; it
// reports false when n is no longer the running NIC.
func (r *nicRunner) use(n *netvsc.NIC) bool {
	r.inUse.RLock()
	if cur, _ := r.current(); cur != n {
		r.inUse.RUnlock()
		return false
	}
	return true
}

func (r *nicRunner) release() { r.inUse.RUnlock() }

func (r *nicRunner) setNIC(n *netvsc.NIC) {
	r.mu.Lock()
	r.nic = n
	if n != nil {
		r.live = n
	}
	close(r.nicChange)
	r.nicChange = make(chan struct{})
	r.mu.Unlock()
}

// run keeps the NIC up until ctx ends: one incarnation after another.
// What happens after a failure depends on its kind:
//
//	permanent (configuration)  -> failed, with the reason; no retry
//	rescind, device gone       -> wait for the (re-)offer, event-driven
//	host fault, anything else  -> reset after a capped exponential backoff
func (r *nicRunner) run(ctx context.Context) {
	r.log.Debug("NIC supervisor started")
	defer r.log.Debug("NIC supervisor stopped")
	backoff := backoffMin
	for ctx.Err() == nil {
		start := r.d.clk.Now()
		err := r.incarnation(ctx)
		if ctx.Err() != nil {
			break
		}
		if r.d.clk.Since(start) > healthyAfter {
			backoff = backoffMin
		}
		kind := classify(err)
		// A device that went away in the middle of bring-up fails in
		// whatever way it happened to: waiting for it is the answer.
		if kind != failRescind && !isPermanent(err) && !r.present() {
			kind = failAbsent
		}
		switch kind {
		case failConfig:
			r.setState(stateFailed, err)
			r.log.Error("NIC failed; not retrying: fix the configuration and reload (SIGHUP)", "err", err)
			r.idle(ctx)
		case failRescind:
			r.mu.Lock()
			r.st.Rescinds++
			ino := r.devIno
			r.mu.Unlock()
			r.setState(stateWaiting, err)
			r.log.Warn("device rescinded by the host; waiting for it to be offered again", "err", err)
			r.waitOffer(ctx, ino)
			backoff = backoffMin // a new device
		case failAbsent:
			r.setState(stateWaiting, err)
			r.log.Warn("device not present; waiting for it to be offered", "err", err)
			r.waitOffer(ctx, 0)
			backoff = backoffMin
		case failNoVF:
			r.setState(stateNoVF, err)
			r.log.Warn("the required VF does not carry traffic; trying again", "err", err, "retry_in", backoff)
			r.sleep(ctx, backoff)
			backoff = min(backoff*2, backoffMax)
		default: // failViolation, failHost, failTransient
			r.mu.Lock()
			r.st.Resets++
			r.mu.Unlock()
			r.setState(stateReset, err)
			r.log.Error("NIC failed; resetting", "err", err, "kind", kind.String(), "check", netvsc.CheckOf(err), "retry_in", backoff)
			r.sleep(ctx, backoff)
			backoff = min(backoff*2, backoffMax)
		}
	}
	r.shutdown()
}

// present reports whether the NIC's device is offered (true while its
// identity is unknown: there is nothing to wait for).
func (r *nicRunner) present() bool {
	inst := r.identity()
	if inst.IsZero() {
		return true
	}
	_, err := vmbus.LookupDevice(r.d.root(), inst)
	return err == nil
}

// idle waits for ctx, beating (a failed NIC's supervisor is alive).
func (r *nicRunner) idle(ctx context.Context) {
	t := r.d.clk.NewTicker(time.Second)
	defer t.Stop()
	for {
		r.heartbeat()
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

// sleep waits d (or until ctx ends), beating.
func (r *nicRunner) sleep(ctx context.Context, d time.Duration) {
	end := r.d.clk.NewTimer(d)
	defer end.Stop()
	t := r.d.clk.NewTicker(time.Second)
	defer t.Stop()
	for {
		r.heartbeat()
		select {
		case <-ctx.Done():
			return
		case <-end.C():
			r.heartbeat()
			return
		case <-t.C():
		}
	}
}

// waitOffer waits until the device is offered: its sysfs directory is
// there and is not the one of inode oldIno (a rescinded device's
// directory lingers for a moment after its channel closed). It wakes on
// the daemon's device events, and rescans every RescanInterval in case
// there are none. The next incarnation binds the device again: a re-offer
// is a new device to the kernel, and an override written on the old one
// is gone.
func (r *nicRunner) waitOffer(ctx context.Context, oldIno uint64) {
	inst := r.identity()
	if inst.IsZero() {
		return
	}
	beat := r.d.clk.NewTicker(time.Second)
	defer beat.Stop()
	rescan := r.d.clk.NewTicker(r.d.rescan)
	defer rescan.Stop()
	for ctx.Err() == nil {
		r.heartbeat()
		ev := r.d.watch.changed()
		if dev, err := vmbus.LookupDevice(r.d.root(), inst); err == nil {
			if ino := inodeOf(dev.Path); ino != 0 && ino != oldIno {
				r.log.Info("device offered")
				return
			}
		}
		select {
		case <-ctx.Done():
		case <-ev:
		case <-rescan.C():
		case <-beat.C():
		}
	}
}

// inodeOf returns the inode of path (following links), 0 when it is gone.
func inodeOf(path string) uint64 {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return 0
	}
	return st.Ino
}

func (r *nicRunner) bindOptions() bind.Options {
	return bind.Options{StateDir: r.d.stateDir(), Force: r.cfg.Force, Logger: r.log}
}

// countViolation counts a host protocol violation seen while no NIC was
// running (during bring-up), as closeNIC counts a running one's.
func (r *nicRunner) countViolation(check string) {
	r.mu.Lock()
	r.baseViol[check]++
	r.mu.Unlock()
}

// checkConfig finds what makes the NIC unusable whatever the host does,
// before the device is bound.
func (r *nicRunner) checkConfig() error {
	if err := r.cfg.Netvsc().Validate(); err != nil {
		return permanent(err)
	}
	if r.cfg.Attach == config.AttachTAP && r.cfg.NetNS != "" {
		if err := checkNetns(r.cfg.NetNS); err != nil {
			return permanent(err)
		}
	}
	return nil
}

// bindFailure sorts a failed bind: a refusal the checks made is
// permanent; a device that went away is waited for.
func bindFailure(err error) error {
	for _, perm := range []error{bind.ErrNotNIC, bind.ErrNotVMBus, bind.ErrManagement, bind.ErrNoModule,
		bind.ErrNoOverride, bind.ErrOtherDriver, bind.ErrInUse} {
		if errors.Is(err, perm) {
			return permanent(err)
		}
	}
	if errors.Is(err, bind.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %w", errNotPresent, err)
	}
	// A timeout or a sysfs write the kernel refused once (bind.ErrTimeout,
	// EBUSY, EIO): tried again.
	return transient(err)
}

// tapFailure sorts a failed TAP creation: no privilege or a value the
// kernel refuses is permanent; the rest (a name still held by the last
// incarnation's TAP) is retried.
func tapFailure(err error) error {
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.EINVAL) || errors.Is(err, fs.ErrNotExist) {
		return permanent(err)
	}
	return transient(err)
}

// incarnation brings the NIC up once and supervises it until it fails or
// ctx ends.
func (r *nicRunner) incarnation(ctx context.Context) error {
	root := r.d.root()
	r.setState(stateStarting, nil)
	if err := r.checkConfig(); err != nil {
		return err
	}
	if r.identity().IsZero() {
		dev, err := bind.Resolve(root, r.cfg.Device)
		if err != nil {
			if _, gerr := vmbus.ParseGUID(r.cfg.Device); gerr == nil && errors.Is(err, bind.ErrNotFound) {
				return fmt.Errorf("%w: %w", errNotPresent, err)
			}
			return permanent(fmt.Errorf("resolve %s: %w", r.cfg.Device, err))
		}
		r.setInstance(dev.Instance)
		if err := r.d.recordOwned(); err != nil {
			r.log.Warn("cannot record the device as owned", "err", err)
		}
	}
	inst := r.identity()
	if r.cfg.Binds() {
		rec, err := bind.Bind(ctx, root, inst.String(), r.bindOptions())
		if err != nil {
			return bindFailure(err)
		}
		if rec.OriginalDriver != bind.DriverUIO {
			r.mu.Lock()
			r.boundByUs = true
			r.mu.Unlock()
		}
	}
	dev, err := vmbus.LookupDevice(root, inst)
	if err != nil {
		return fmt.Errorf("%w: %w", errNotPresent, err)
	}
	r.mu.Lock()
	r.devIno = inodeOf(dev.Path)
	r.mu.Unlock()
	pool, releasePool, err := r.d.gpa.open(r.cfg)
	if err != nil {
		return permanent(err)
	}
	defer func() { releasePool() }()
	ncfg := r.cfg.Netvsc()
	ncfg.GPAPool, ncfg.Logger = pool, r.devLog
	// A TAP with a virtio-net header takes the host's coalesced TCP
	// frames whole (one GSO write each): ask for RSC.
	ncfg.RSC = r.cfg.Attach == config.AttachTAP
	nic, err := netvsc.Open(ctx, dev, ncfg)
	if errors.Is(err, netvsc.ErrGPAPoolStale) {
		// The host that reads the pool's memory is not the one that
		// served it (a simulated host restarted on the same root): a
		// pool of the current host's memory is opened, and the stale one
		// is never handed out again.
		r.log.Warn("GPA-direct pool stale; opening a new one", "err", err)
		releasePool()
		releasePool = func() {}
		r.d.gpa.stale(pool)
		if pool, releasePool, err = r.d.gpa.open(r.cfg); err != nil {
			return permanent(err)
		}
		ncfg.GPAPool = pool
		nic, err = netvsc.Open(ctx, dev, ncfg)
	}
	if err != nil {
		// A violation during bring-up counts like any other.
		if check := netvsc.CheckOf(err); check != "" {
			r.countViolation(check)
		}
		return fmt.Errorf("open: %w", err)
	}
	r.mu.Lock()
	r.st.MAC, r.st.MTU, r.st.Queues = nic.MAC().String(), nic.MTU(), len(nic.Queues())
	r.st.GPAPool = ""
	if pool != nil {
		r.st.GPAPool = pool.Kind()
	}
	r.mu.Unlock()

	dataDone := make(chan error, 1)
	var stopData func()
	switch r.cfg.Attach {
	case config.AttachTAP:
		td, err := tap.Create(tap.Config{Name: r.cfg.TAP, Queues: len(nic.Queues()), MAC: nic.MAC(),
			MTU: nic.MTU(), Netns: r.cfg.NetNS, Addr: r.cfg.Address})
		if err != nil {
			r.closeNIC(nic)
			return tapFailure(err)
		}
		att, err := nictap.Attach(nic, td, nictap.Options{Logger: r.log, Observe: r.observer(nic)})
		if err != nil {
			td.Close()
			if nerr := nic.Err(); nerr != nil {
				err = nerr // the NIC died under the attachment
			}
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
			"mac", nic.MAC().String(), "mtu", nic.MTU(), "gpa_pool", r.state().GPAPool)
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
		r.log.Info("NIC forwarding", "to", r.cfg.Peer, "queues", len(nic.Queues()), "mtu", nic.MTU(),
			"gpa_pool", r.state().GPAPool)
	}
	r.setNIC(nic)
	r.probed.Store(r.d.clk.Now().UnixNano()) // bring-up answered the host's questions
	r.setState(stateUp, nil)

	t := r.d.clk.NewTicker(min(time.Second, r.d.probeInterval))
	defer t.Stop()
	var failure error
	lastProbe, probeFails := r.d.clk.Now(), 0
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
			// The NIC's own failure says more than the attachment's;
			// otherwise the TAP side went (deleted under us): the next
			// incarnation makes a new one.
			switch e := nic.Err(); {
			case e != nil:
				failure = e
			case err != nil:
				failure = transient(fmt.Errorf("data path: %w", err))
			default:
				failure = transient(errors.New("data path stopped"))
			}
			break loop
		case <-t.C():
		}
		// Liveness of the device itself: a control request through the
		// primary channel, answered by the host, now and then. A NIC
		// whose host stops answering is reset rather than left hanging.
		if r.d.clk.Since(lastProbe) >= r.d.probeInterval {
			lastProbe = r.d.clk.Now()
			pctx, cancel := clock.WithTimeout(ctx, r.d.clk, r.d.probeTimeout)
			_, err := nic.QueryLink(pctx)
			cancel()
			switch {
			case err == nil:
				probeFails = 0
				r.probed.Store(r.d.clk.Now().UnixNano())
			case ctx.Err() == nil && nic.Err() == nil:
				probeFails++
				r.log.Warn("liveness probe failed", "err", err, "consecutive", probeFails)
				if probeFails >= probeLimit {
					failure = fmt.Errorf("%w: %w", errHostSilent, err)
					break loop
				}
			}
		}
	}
	r.setState(stateStopped, failure)
	r.setNIC(nil) // peers stop sending into it...
	stopData()
	r.inUse.Lock() // ...and are waited for
	quiesce(nic, r.d.clk)
	r.closeNIC(nic)
	r.inUse.Unlock()
	return failure
}

// quiesce lets the host complete the sends in flight on every queue,
// draining completions (and dropping what arrives meanwhile), for up to
// quiesceWait on clk. Close halts RNDIS on the primary channel; a send still in
// flight on a sub-channel would reach the host after the HALT, which the
// host counts as a violation (Linux's rndis_filter_halt_device waits for
// its sends the same way). Nothing may be sending into the NIC.
func quiesce(nic *netvsc.NIC, clk clock.Clock) {
	if nic.Err() != nil {
		return // dead: nothing will complete
	}
	end := clk.NewTimer(quiesceWait)
	defer end.Stop()
	pkts := make([]*frame.Packet, 64)
	for _, q := range nic.Queues() {
		for q.Channel().InFlight() > 0 && nic.Err() == nil {
			select {
			case <-end.C():
				return
			default:
			}
			n := q.RxBurst(pkts)
			for _, p := range pkts[:n] {
				p.Free()
			}
			if n == 0 {
				// The pause between two looks at the ring, not a
				// timeout: it stays on real time so that a fake clock
				// bounds the wait without slowing the polling.
				time.Sleep(100 * time.Microsecond)
			}
		}
	}
}

const quiesceWait = time.Second

// peerRecheck is how often a forwarder whose peer is down looks for it
// again unprompted: a safety net, since the peer's and the NIC set's
// change notices are what normally end its wait.
const peerRecheck = time.Second

// closeNIC closes an incarnation and folds its counters into the base.
// They are read after Close, which moves the data path to synthetic and
// completes what was in flight, so nothing counted later is lost; the
// interrupt count before it (after Close, netvsc counts the last session's
// interrupts twice).
func (r *nicRunner) closeNIC(nic *netvsc.NIC) {
	irq := nic.Stats().Interrupts
	if err := nic.Close(); err != nil && !errors.Is(err, netvsc.ErrClosed) {
		r.log.Debug("close", "err", err)
	}
	st, vf := nic.Stats(), nic.VFStatus()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, q := range st.Queues {
		r.base[q.Queue] = addQueueStats(r.base[q.Queue], q)
	}
	for k, v := range st.Violations {
		r.baseViol[k] += v
	}
	r.baseIRQ += irq
	r.baseCtl += st.ControlFailures
	r.baseVF.add(vf)
	if r.live == nic {
		r.live = nil
	}
}

// forward moves frames from this NIC's queues to the peer NIC until ctx
// ends or this NIC fails; a peer that is down, resetting or being replaced
// by a reload is waited for.
func (r *nicRunner) forward(ctx context.Context, nic *netvsc.NIC) {
	obs := r.observer(nic)
	for ctx.Err() == nil && nic.Err() == nil {
		pr, peersChanged := r.d.peer(r.cfg.Peer)
		var peer *netvsc.NIC
		changed := make(<-chan struct{})
		if pr != nil {
			peer, changed = pr.current()
		}
		if peer != nil && !pr.use(peer) {
			continue
		}
		if peer == nil {
			// A ticker: one-shot waits on the daemon's clock are the
			// supervisor's (backoff, probes), which tests find by duration.
			t := r.d.clk.NewTicker(peerRecheck)
			select {
			case <-changed:
			case <-peersChanged:
			case <-ctx.Done():
			case <-nic.Done():
			case <-t.C():
			}
			t.Stop()
			continue
		}
		pctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for i, q := range nic.Queues() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sink := &netvsc.SteeredSink{NIC: peer}
				var o func([]*frame.Packet)
				if obs != nil {
					o = func(p []*frame.Packet) { obs(true, i, p) }
				}
				if err := frame.PumpObserved(pctx, q, sink, 64, nil, o); pctx.Err() == nil {
					r.log.Debug("forward pump stopped", "queue", i, "err", err)
				}
				cancel()
			}()
		}
		select {
		case <-pctx.Done():
		case <-changed:
		case <-peersChanged:
		case <-peer.Done():
		}
		cancel()
		wg.Wait()
		pr.release()
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
		if _, err := bind.Unbind(ctx, r.d.root(), inst.String(), r.bindOptions()); err != nil {
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

// nicTotals are a NIC's counters over every incarnation.
type nicTotals struct {
	queues          []netvsc.QueueStats
	viol            map[string]uint64
	irq             uint64
	controlFailures uint64
	vf              VFStatus
}

// totals returns the NIC's counters including earlier incarnations.
func (r *nicRunner) totals() nicTotals {
	r.mu.Lock()
	nic := r.live
	base := maps.Clone(r.base)
	t := nicTotals{viol: maps.Clone(r.baseViol), irq: r.baseIRQ, controlFailures: r.baseCtl}
	baseVF := r.baseVF.clone()
	r.mu.Unlock()
	cur := map[int]netvsc.QueueStats{}
	var curVF *netvsc.VFStatus
	if nic != nil {
		st := nic.Stats()
		for _, q := range st.Queues {
			cur[q.Queue] = q
		}
		for k, v := range st.Violations {
			t.viol[k] += v
		}
		t.irq += st.Interrupts
		t.controlFailures += st.ControlFailures
		vs := nic.VFStatus()
		curVF = &vs
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
		t.queues = append(t.queues, q)
	}
	r.mu.Lock()
	r.irqSeen = max(r.irqSeen, t.irq)
	t.irq = r.irqSeen
	r.mu.Unlock()
	t.vf = vfReport(r.cfg.VF, baseVF, curVF, t.queues)
	return t
}

func addQueueStats(a, b netvsc.QueueStats) netvsc.QueueStats {
	a.RxPackets += b.RxPackets
	a.RxBytes += b.RxBytes
	a.TxPackets += b.TxPackets
	a.TxBytes += b.TxBytes
	a.RxNoMemory += b.RxNoMemory
	a.RxHeld += b.RxHeld
	a.RxRSCFrames += b.RxRSCFrames
	a.RxRSCDropped += b.RxRSCDropped
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
	a.TxDropOversize += b.TxDropOversize
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
	c.SharedWakeups += d.SharedWakeups
	return a
}
