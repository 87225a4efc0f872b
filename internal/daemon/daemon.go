package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netns"

	"github.com/vmbusd/vmbusd/clock"
	"github.com/vmbusd/vmbusd/internal/bind"
	"github.com/vmbusd/vmbusd/internal/buildinfo"
	"github.com/vmbusd/vmbusd/internal/config"
	"github.com/vmbusd/vmbusd/internal/connlimit"
	"github.com/vmbusd/vmbusd/internal/control"
	"github.com/vmbusd/vmbusd/internal/owner"
	"github.com/vmbusd/vmbusd/internal/ratelog"
	"github.com/vmbusd/vmbusd/netvsc"
	"github.com/vmbusd/vmbusd/vmbus"
)

// Options configure a Daemon beyond its file.
type Options struct {
	Config config.Config
	// ConfigPath is the file Config came from ("" for none), for the log.
	ConfigPath string
	Logger     *slog.Logger
	// LogLevel, when set, is the level of Logger's handler; a reload sets
	// it to the file's [log] level.
	LogLevel *slog.LevelVar
	// GPAPool, when set, is used by every NIC for frames larger than a send
	// section, instead of the pools [gpa] would set up.
	GPAPool *netvsc.GPAPool
	// Notify sends a systemd notification; nil uses sd_notify (a no-op
	// without NOTIFY_SOCKET).
	Notify func(state string)
	// NoRestore skips giving back devices recorded by an earlier run.
	NoRestore bool
	// ProbeInterval and ProbeTimeout tune the liveness probe of each NIC
	// (a control request the host must answer); 0 means the defaults.
	ProbeInterval, ProbeTimeout time.Duration
	// RescanInterval is how often a NIC waiting for its device looks at
	// sysfs without an event telling it to (0: DefaultRescanInterval).
	RescanInterval time.Duration
	// Clock times the supervisors: reset backoff, liveness probes,
	// rescans, heartbeats and the watchdog (nil: the real clock). Tests
	// give a fake one and advance it instead of waiting.
	Clock clock.Clock
}

// DefaultRescanInterval: device waits are event-driven (inotify, uevents);
// this rescan only covers a system where neither reaches the daemon.
const DefaultRescanInterval = time.Second

// Daemon is one run of the service. Create it with New; Run it once.
type Daemon struct {
	opts   Options
	log    *slog.Logger
	limit  *ratelog.Handler
	reg    *prometheus.Registry
	start  time.Time
	notify func(string)
	clk    clock.Clock

	probeInterval, probeTimeout, rescan time.Duration

	lock  *owner.Lock
	watch *devWatch
	gpa   *gpaSource

	reloads chan reloadReq
	kick    chan struct{} // a device's state changed: re-evaluate readiness
	running chan struct{} // closed once the supervisors started
	stopped chan struct{} // closed when Run starts stopping

	metricsLn *connlimit.Listener
	ctl       *control.Server

	captures        atomic.Int64
	capturesRefused atomic.Uint64

	mu           sync.Mutex
	cfg          config.Config
	nics         []*nicRunner
	fwds         []*fwdRunner
	peersChanged chan struct{} // closed and replaced when the set of NICs changes
	metricsAt    string        // the metrics listener's address, once listening
	ready        chan struct{}
	readySent    bool
	runCtx       context.Context // parent of the supervisors
}

// lockWait is how long a starting daemon waits for a `vmbusd bind`,
// `unbind` or `restore` to finish with the state directory (a live daemon
// is not waited for).
const lockWait = 30 * time.Second

// ErrConfig marks a configuration the running system shows to be wrong
// (the same device named twice); `vmbusd run` exits 2 on it.
var ErrConfig = errors.New("configuration error")

// New prepares the daemon.
func New(opts Options) (*Daemon, error) {
	base := opts.Logger
	if base == nil {
		base = slog.New(slog.DiscardHandler)
	}
	cfg := opts.Config
	limit := ratelog.New(base.Handler(), ratelog.Config{Lines: cfg.Log.RateLimit, Interval: cfg.Log.RateInterval})
	clk := clock.Or(opts.Clock)
	d := &Daemon{opts: opts, cfg: cfg, log: slog.New(limit), limit: limit, start: clk.Now(), clk: clk,
		ready: make(chan struct{}), reloads: make(chan reloadReq), kick: make(chan struct{}, 1),
		running: make(chan struct{}), stopped: make(chan struct{}), peersChanged: make(chan struct{})}
	d.notify = opts.Notify
	d.probeInterval, d.probeTimeout, d.rescan = opts.ProbeInterval, opts.ProbeTimeout, opts.RescanInterval
	if d.probeInterval <= 0 {
		d.probeInterval = DefaultProbeInterval
	}
	if d.probeTimeout <= 0 {
		d.probeTimeout = DefaultProbeTimeout
	}
	if d.rescan <= 0 {
		d.rescan = DefaultRescanInterval
	}
	if d.notify == nil {
		d.notify = func(state string) { sddaemon.SdNotify(false, state) }
	}
	for _, n := range cfg.NICs {
		d.nics = append(d.nics, newNICRunner(d, n))
	}
	for _, h := range cfg.HvSock {
		d.fwds = append(d.fwds, newFwdRunner(d, h))
	}
	d.reg = newRegistry(d)
	return d, nil
}

// Registry returns the daemon's Prometheus registry.
func (d *Daemon) Registry() *prometheus.Registry { return d.reg }

// Ready is closed when READY=1 is sent: every device is up (or, with ready
// = "any", one is).
func (d *Daemon) Ready() <-chan struct{} { return d.ready }

// MetricsAddr returns where metrics are served ("" when disabled or not yet
// listening).
func (d *Daemon) MetricsAddr() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.metricsAt
}

func (d *Daemon) config() config.Config {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cfg
}

func (d *Daemon) root() string     { return d.config().Root }
func (d *Daemon) stateDir() string { return d.config().State() }

// runners returns the current NIC and forward supervisors.
func (d *Daemon) runners() ([]*nicRunner, []*fwdRunner) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*nicRunner(nil), d.nics...), append([]*fwdRunner(nil), d.fwds...)
}

// peer returns the NIC configured as device (nil when there is none now)
// and a channel closed when the set of NICs changes.
func (d *Daemon) peer(device string) (*nicRunner, <-chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, r := range d.nics {
		if r.cfg.Device == device {
			return r, d.peersChanged
		}
	}
	return nil, d.peersChanged
}

// kickNow asks the supervisor loop to re-evaluate readiness.
func (d *Daemon) kickNow() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// Run serves until ctx ends, then shuts down cleanly and returns nil, or
// returns an error when it cannot start: the state directory is owned by
// another live daemon (errors.Is owner.ErrBusy), the configuration names a
// device twice (ErrConfig), a socket cannot be had.
func (d *Daemon) Run(ctx context.Context) error {
	log := d.log
	cfg := d.config()
	bi := buildinfo.Get()
	log.Info("vmbusd starting", "version", bi.Version, "revision", bi.Revision, "go", bi.GoVersion,
		"pid", os.Getpid(), "config", cmp.Or(d.opts.ConfigPath, "(none)"), "root", cfg.Root, "state_dir", cfg.State())
	// Ownership first: a second daemon restores and touches nothing.
	lock, err := owner.Acquire(cfg.State(), owner.Info{Command: owner.CommandRun, Control: cfg.Control.Socket}, lockWait)
	if err != nil {
		return fmt.Errorf("vmbusd: %w", err)
	}
	defer lock.Release()
	d.lock = lock
	if prev := lock.Previous(); prev.Control != "" && prev.Control != cfg.Control.Socket {
		if removed, _ := control.RemoveStale(prev.Control); removed {
			log.Info("removed the control socket of a daemon that died", "path", prev.Control, "pid", prev.PID)
		}
	}
	for _, w := range cfg.Warnings() {
		log.Warn("configuration: " + w)
	}
	if !d.opts.NoRestore {
		recs, err := bind.Restore(ctx, cfg.Root, bind.Options{StateDir: cfg.State(), Logger: log})
		for _, r := range recs {
			log.Warn("gave back a device left bound by an earlier run", "device", r.Device.String(), "driver", r.OriginalDriver)
		}
		if err != nil {
			log.Error("restoring devices from an earlier run", "err", err)
		}
	}
	if err := d.resolveIdentities(); err != nil {
		return err
	}
	d.gpa = newGPASource(cfg, d.opts.GPAPool, log)
	d.watch = newDevWatch(cfg.Root, log)
	defer d.watch.close()

	if cfg.Metrics.Listen != "" {
		ln, err := net.Listen("tcp", cfg.Metrics.Listen)
		if err != nil {
			return fmt.Errorf("metrics: listen %s: %w", cfg.Metrics.Listen, err)
		}
		d.metricsLn = connlimit.New(ln, connlimit.Config{Max: cfg.Metrics.MaxConnections,
			OnRefuse: func(c net.Conn, _, reason string) {
				log.Warn("metrics connection refused: too many connections", "limit", cfg.Metrics.MaxConnections, "from", c.RemoteAddr().String())
			}})
		defer d.metricsLn.Close()
		d.mu.Lock()
		d.metricsAt = ln.Addr().String()
		d.mu.Unlock()
	}
	ctl, err := control.ListenLimited(cfg.Control.Socket, d.controlHandler(), log, control.Limits{
		MaxConnections: cfg.Control.MaxConnections, MaxPerUser: cfg.Control.MaxConnectionsPerUser,
		IdleTimeout: cfg.Control.IdleTimeout, RequestTimeout: cfg.Control.RequestTimeout})
	if err != nil {
		return err
	}
	d.ctl = ctl
	defer ctl.Close()

	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	var wg sync.WaitGroup
	serve := func(name string, fn func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(); err != nil && !errors.Is(err, http.ErrServerClosed) && runCtx.Err() == nil {
				log.Error(name+" stopped", "err", err)
			}
		}()
	}
	var msrv *http.Server
	if d.metricsLn != nil {
		msrv = d.metricsServer(cfg.Metrics)
		serve("metrics", func() error { return msrv.Serve(d.metricsLn) })
		log.Info("serving metrics", "addr", "http://"+d.MetricsAddr()+"/metrics")
	}
	serve("control socket", func() error { return ctl.Serve(runCtx) })
	log.Info("control socket ready", "path", ctl.Path())

	d.mu.Lock()
	d.runCtx = runCtx
	for _, r := range d.nics {
		r.start(runCtx)
	}
	for _, f := range d.fwds {
		f.start(runCtx)
	}
	d.mu.Unlock()
	close(d.running)
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.runReloads(runCtx)
	}()

	d.supervise(ctx)

	close(d.stopped)
	d.notify(sddaemon.SdNotifyStopping)
	log.Info("vmbusd stopping")
	nics, fwds := d.runners()
	var stops sync.WaitGroup
	for _, f := range fwds {
		stops.Go(f.stop)
	}
	for _, r := range nics {
		stops.Go(r.stop)
	}
	stops.Wait()
	cancel()
	if msrv != nil {
		sctx, c := context.WithTimeout(context.Background(), 2*time.Second)
		if msrv.Shutdown(sctx) != nil {
			msrv.Close()
		}
		c()
	}
	wg.Wait()
	d.limit.Flush(context.Background())
	log.Info("vmbusd stopped")
	return nil
}

// supervise is the daemon's own loop, until ctx ends: readiness and
// STATUS= as devices come and go, the rate-limited log's summaries, and
// the watchdog, which is fed from here only, and only while every NIC's
// supervisor reports in (a hung loop or a hung supervisor stops the pings,
// and systemd restarts the daemon).
func (d *Daemon) supervise(ctx context.Context) {
	var wd <-chan time.Time
	interval, err := sddaemon.SdWatchdogEnabled(false)
	if err == nil && interval > 0 {
		t := d.clk.NewTicker(interval / 3)
		defer t.Stop()
		wd = t.C()
	}
	tick := d.clk.NewTicker(time.Second)
	defer tick.Stop()
	last := ""
	d.evaluate(&last)
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.kick:
			d.evaluate(&last)
		case <-tick.C():
			d.evaluate(&last)
			d.limit.Flush(ctx)
		case <-wd:
			if stuck := d.stuck(interval); stuck != "" {
				d.log.Error("data path not responding; withholding the watchdog ping", "nic", stuck)
				continue
			}
			d.notify(sddaemon.SdNotifyWatchdog)
		}
	}
}

// evaluate sends READY=1 once the ready policy is met, and STATUS= when
// the summary of the devices changed since last.
func (d *Daemon) evaluate(last *string) {
	nics, fwds := d.runners()
	policy := d.config().Ready
	total, up := len(nics)+len(fwds), 0
	var down []string
	for _, r := range nics {
		st := r.state()
		if st.State == stateUp {
			up++
			continue
		}
		s := st.Name + ": " + st.State
		if st.State == stateFailed && st.Error != "" {
			s += " (" + st.Error + ")"
		}
		down = append(down, s)
	}
	for _, f := range fwds {
		if f.listening.Load() {
			up++
		} else {
			down = append(down, f.name+": not listening")
		}
	}
	status := fmt.Sprintf("%d of %d devices up", up, total)
	if len(down) > 0 {
		status += "; not up: " + strings.Join(down, "; ")
	}
	met := up == total || (policy == config.ReadyAny && up > 0)
	d.mu.Lock()
	sendReady := met && !d.readySent
	if sendReady {
		d.readySent = true
		close(d.ready)
	}
	d.mu.Unlock()
	if sendReady {
		d.notify(sddaemon.SdNotifyReady)
		attrs := []any{"up", up, "devices", total, "policy", policy.String()}
		if len(down) > 0 {
			attrs = append(attrs, "not_up", strings.Join(down, "; "))
		}
		d.log.Info("vmbusd ready", attrs...)
	}
	if status != *last {
		d.notify("STATUS=" + status)
		*last = status
	}
}

// stuck names a NIC whose supervisor has not reported for longer than
// limit, or that is up while its host has not answered a liveness probe for
// several probe intervals (its supervisor should have reset it by then), or
// returns "".
func (d *Daemon) stuck(limit time.Duration) string {
	now := d.clk.Now()
	probeLimit := d.probeInterval*(probeLimit+2) + d.probeTimeout
	nics, _ := d.runners()
	for _, r := range nics {
		if now.Sub(r.lastBeat()) > limit {
			return r.name()
		}
		if r.state().State == stateUp {
			if p := r.probed.Load(); p != 0 && now.Sub(time.Unix(0, p)) > probeLimit {
				return r.name()
			}
		}
	}
	return ""
}

// notReady lists the devices that are not carrying traffic.
func (d *Daemon) notReady() []string {
	var out []string
	nics, fwds := d.runners()
	for _, r := range nics {
		if st := r.state(); st.State != stateUp {
			s := fmt.Sprintf("%s: %s", r.name(), st.State)
			if st.State == stateFailed {
				s += ": " + st.Error
			}
			out = append(out, s)
		}
	}
	for _, f := range fwds {
		if !f.listening.Load() {
			out = append(out, f.name+": not listening")
		}
	}
	return out
}

// resolveIdentities finds the instance GUID of each NIC (sysfs under the
// root), refuses two entries naming one device, and records the devices in
// the owner lock. A NIC that is not there yet is left to its supervisor.
func (d *Daemon) resolveIdentities() error {
	cfg := d.config()
	nics, _ := d.runners()
	ids, err := identities(cfg, cfg.NICs, func(device string) vmbus.GUID { return vmbus.GUID{} })
	if err != nil {
		return err
	}
	for i, r := range nics {
		if !ids[i].IsZero() {
			r.setInstance(ids[i])
		}
	}
	return d.recordOwned()
}

// identities resolves the instance GUID of each NIC entry: known(device)
// when it is not zero (a running NIC, whose interface is gone while
// uio_hv_generic has it), else sysfs or the binding records. Two entries
// with one identity are an ErrConfig.
func identities(cfg config.Config, nics []config.NIC, known func(device string) vmbus.GUID) ([]vmbus.GUID, error) {
	out := make([]vmbus.GUID, len(nics))
	seen := map[vmbus.GUID]int{}
	for i, n := range nics {
		g := known(n.Device)
		if g.IsZero() {
			g, _ = bind.Identify(cfg.Root, cfg.State(), n.Device)
		}
		if g.IsZero() {
			continue
		}
		if j, dup := seen[g]; dup {
			return nil, fmt.Errorf("%w: nic[%d] (%s) and nic[%d] (%s) are the same device %s", ErrConfig,
				j, nics[j].Device, i, n.Device, g)
		}
		seen[g] = i
		out[i] = g
	}
	return out, nil
}

// recordOwned writes the devices the daemon drives into the owner lock,
// so that `vmbusd bind` and `unbind` of them are refused.
func (d *Daemon) recordOwned() error {
	if d.lock == nil {
		return nil
	}
	nics, _ := d.runners()
	var devs []string
	for _, r := range nics {
		if g := r.identity(); !g.IsZero() {
			devs = append(devs, g.String())
		}
	}
	return d.lock.SetDevices(devs)
}

// checkNetns fails when the named network namespace does not exist.
func checkNetns(name string) error {
	h, err := netns.GetFromName(name)
	if err != nil {
		return fmt.Errorf("network namespace %q does not exist (create it with `ip netns add %s`): %w", name, name, err)
	}
	h.Close()
	return nil
}
