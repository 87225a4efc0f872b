// Package daemon is vmbusd's long-running service: it claims the configured
// devices, runs their data paths (a NIC attached to a TAP or forwarded to
// another NIC; hv_sock forwards), serves metrics and health, answers the
// control socket and tells systemd how it is doing.
//
//	start:  restore devices a crashed run left bound
//	        -> listen (metrics, control) -> start every NIC and forward
//	        -> READY=1 once each NIC made its first attempt
//	run:    each NIC is supervised: a host protocol violation resets it
//	        (close, reopen with backoff); a rescind releases it and it is
//	        picked up again when re-offered; WATCHDOG=1 while every
//	        supervisor is alive
//	stop:   STOPPING=1 -> stop forwards and data paths, close channels,
//	        give back the devices vmbusd bound -> exit 0
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/vmbusd/vmbusd/internal/bind"
	"github.com/vmbusd/vmbusd/internal/config"
	"github.com/vmbusd/vmbusd/internal/control"
	"github.com/vmbusd/vmbusd/internal/owner"
	"github.com/vmbusd/vmbusd/netvsc"
	"github.com/vmbusd/vmbusd/vmbus"
)

// Options configure a Daemon beyond its file.
type Options struct {
	Config config.Config
	Logger *slog.Logger
	// GPAPool, when set, is used by every NIC for frames larger than a send
	// section (the simulated guest memory in demos).
	GPAPool *netvsc.GPAPool
	// Notify sends a systemd notification; nil uses sd_notify (a no-op
	// without NOTIFY_SOCKET).
	Notify func(state string)
	// NoRestore skips giving back devices recorded by an earlier run.
	NoRestore bool
	// ProbeInterval and ProbeTimeout tune the liveness probe of each NIC
	// (a control request the host must answer); 0 means the defaults.
	ProbeInterval, ProbeTimeout time.Duration
}

// Daemon is one run of the service. Create it with New; Run it once.
type Daemon struct {
	cfg    config.Config
	log    *slog.Logger
	opts   Options
	reg    *prometheus.Registry
	nics   []*nicRunner
	fwds   []*fwdRunner
	start  time.Time
	notify func(string)

	probeInterval, probeTimeout time.Duration

	lock *owner.Lock

	mu        sync.Mutex
	metricsAt string // the metrics listener's address, once listening
	ready     chan struct{}
}

// lockWait is how long a starting daemon waits for a `vmbusd bind`,
// `unbind` or `restore` to finish with the state directory (a live daemon
// is not waited for).
const lockWait = 30 * time.Second

// ErrConfig marks a configuration the running system shows to be wrong
// (the same device named twice); `vmbusd run` exits 2 on it.
var ErrConfig = errors.New("configuration error")

// resolveIdentities finds the instance GUID of each NIC (sysfs under the
// root), refuses two entries naming one device, and records the devices in
// the owner lock. A NIC that is not there yet is left to its supervisor.
func (d *Daemon) resolveIdentities() error {
	seen := map[vmbus.GUID]int{}
	for i, r := range d.nics {
		g, err := bind.Identify(d.cfg.Root, d.cfg.State(), r.cfg.Device)
		if err != nil {
			continue
		}
		if j, dup := seen[g]; dup {
			return fmt.Errorf("%w: nic[%d] (%s) and nic[%d] (%s) are the same device %s", ErrConfig,
				j, d.nics[j].cfg.Device, i, r.cfg.Device, g)
		}
		seen[g] = i
		r.setInstance(g)
	}
	return d.recordOwned()
}

// recordOwned writes the devices the daemon drives into the owner lock,
// so that `vmbusd bind` and `unbind` of them are refused.
func (d *Daemon) recordOwned() error {
	if d.lock == nil {
		return nil
	}
	var devs []string
	for _, r := range d.nics {
		if g := r.identity(); !g.IsZero() {
			devs = append(devs, g.String())
		}
	}
	return d.lock.SetDevices(devs)
}

// New checks the configuration against the system and prepares the daemon.
func New(opts Options) (*Daemon, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &Daemon{cfg: opts.Config, log: log, opts: opts, start: time.Now(), ready: make(chan struct{})}
	d.notify = opts.Notify
	d.probeInterval, d.probeTimeout = opts.ProbeInterval, opts.ProbeTimeout
	if d.probeInterval <= 0 {
		d.probeInterval = DefaultProbeInterval
	}
	if d.probeTimeout <= 0 {
		d.probeTimeout = DefaultProbeTimeout
	}
	if d.notify == nil {
		d.notify = func(state string) { sddaemon.SdNotify(false, state) }
	}
	for i := range d.cfg.NICs {
		d.nics = append(d.nics, newNICRunner(d, i, d.cfg.NICs[i]))
	}
	for _, r := range d.nics {
		if p := r.cfg.Peer; p != "" {
			for _, o := range d.nics {
				if o.cfg.Device == p {
					r.peer = o
				}
			}
		}
	}
	for i, h := range d.cfg.HvSock {
		d.fwds = append(d.fwds, newFwdRunner(d, i, h))
	}
	d.reg = newRegistry(d)
	return d, nil
}

// Registry returns the daemon's Prometheus registry.
func (d *Daemon) Registry() *prometheus.Registry { return d.reg }

// Ready is closed when every NIC has made its first bring-up attempt.
func (d *Daemon) Ready() <-chan struct{} { return d.ready }

// MetricsAddr returns where metrics are served ("" when disabled or not yet
// listening).
func (d *Daemon) MetricsAddr() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.metricsAt
}

// Run serves until ctx ends, then shuts down cleanly and returns nil, or
// returns an error when it cannot start (sockets, state).
func (d *Daemon) Run(ctx context.Context) error {
	log := d.log
	// Ownership first: nothing is restored or touched by a second daemon.
	lock, err := owner.Acquire(d.cfg.State(), owner.Info{Command: owner.CommandRun, Control: d.cfg.Control.Socket}, lockWait)
	if err != nil {
		return fmt.Errorf("vmbusd: %w", err)
	}
	defer lock.Release()
	d.lock = lock
	if prev := lock.Previous(); prev.Control != "" && prev.Control != d.cfg.Control.Socket {
		if removed, _ := control.RemoveStale(prev.Control); removed {
			log.Info("removed the control socket of a daemon that died", "path", prev.Control, "pid", prev.PID)
		}
	}
	if !d.opts.NoRestore {
		recs, err := bind.Restore(ctx, d.cfg.Root, bind.Options{StateDir: d.cfg.State(), Logger: log})
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
	var metricsLn net.Listener
	if d.cfg.Metrics.Listen != "" {
		if metricsLn, err = net.Listen("tcp", d.cfg.Metrics.Listen); err != nil {
			return fmt.Errorf("metrics: listen %s: %w", d.cfg.Metrics.Listen, err)
		}
		d.mu.Lock()
		d.metricsAt = metricsLn.Addr().String()
		d.mu.Unlock()
	}
	ctl, err := control.Listen(d.cfg.Control.Socket, d.controlHandler(), log)
	if err != nil {
		if metricsLn != nil {
			metricsLn.Close()
		}
		return err
	}
	defer ctl.Close()
	runCtx, cancel := context.WithCancel(ctx)
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
	if metricsLn != nil {
		msrv = &http.Server{Handler: d.metricsHandler(), ReadHeaderTimeout: 5 * time.Second,
			ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
		serve("metrics", func() error { return msrv.Serve(metricsLn) })
		log.Info("serving metrics", "addr", "http://"+d.MetricsAddr()+"/metrics")
	}
	serve("control socket", func() error { return ctl.Serve(runCtx) })
	log.Info("control socket ready", "path", ctl.Path())

	first := make(chan struct{}, len(d.nics))
	for _, r := range d.nics {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.run(runCtx, first)
		}()
	}
	for _, f := range d.fwds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.run(runCtx)
		}()
	}
	for range d.nics {
		select {
		case <-first:
		case <-ctx.Done():
		}
	}
	close(d.ready)
	d.notify(sddaemon.SdNotifyReady)
	log.Info("vmbusd ready", "nics", len(d.nics), "hvsock_forwards", len(d.fwds))

	d.watchdog(runCtx)

	d.notify(sddaemon.SdNotifyStopping)
	log.Info("vmbusd stopping")
	cancel()
	if msrv != nil {
		sctx, c := context.WithTimeout(context.Background(), 2*time.Second)
		msrv.Shutdown(sctx)
		c()
	}
	wg.Wait()
	log.Info("vmbusd stopped")
	return nil
}

// watchdog pings systemd while every NIC supervisor is alive, until ctx
// ends. Without WATCHDOG_USEC it only waits.
func (d *Daemon) watchdog(ctx context.Context) {
	interval, err := sddaemon.SdWatchdogEnabled(false)
	if err != nil || interval == 0 {
		<-ctx.Done()
		return
	}
	t := time.NewTicker(interval / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if stuck := d.stuck(interval); stuck != "" {
				d.log.Error("data path not responding; withholding the watchdog ping", "nic", stuck)
				continue
			}
			d.notify(sddaemon.SdNotifyWatchdog)
		}
	}
}

// stuck names a NIC whose supervisor has not reported for longer than
// limit, or that is up while its host has not answered a liveness probe for
// several probe intervals (its supervisor should have reset it by then), or
// returns "".
func (d *Daemon) stuck(limit time.Duration) string {
	now := time.Now()
	probeLimit := d.probeInterval*(probeLimit+2) + d.probeTimeout
	for _, r := range d.nics {
		if now.Sub(r.lastBeat()) > limit {
			return r.name()
		}
		if r.status().State == stateUp {
			if p := r.probed.Load(); p != 0 && now.Sub(time.Unix(0, p)) > probeLimit {
				return r.name()
			}
		}
	}
	return ""
}

// notReady lists the NICs that are not carrying traffic.
func (d *Daemon) notReady() []string {
	var out []string
	for _, r := range d.nics {
		if st := r.status(); st.State != stateUp {
			out = append(out, fmt.Sprintf("%s: %s", r.name(), st.State))
		}
	}
	return out
}
