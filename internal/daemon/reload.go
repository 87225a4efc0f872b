package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"
	"golang.org/x/sys/unix"

	"github.com/vmbusd/vmbusd/internal/config"
	"github.com/vmbusd/vmbusd/vmbus"
)

// Reload (SIGHUP) applies an edited configuration to the running daemon:
//
//	NIC (matched by identity: its instance GUID, or its name when it has
//	none yet) and forward (matched by its settings):
//	  in both, the same settings         -> untouched (its traffic flows on)
//	  in both, the same settings, failed -> restarted (the fix was elsewhere,
//	                                        e.g. a namespace created since)
//	  in both, other settings            -> stopped and started again
//	  only in the old file               -> stopped, its device given back
//	  only in the new file               -> started
//
// Settings that shape the process (root, state_dir, the control socket and
// the servers' limits, the metrics listener, the GPA pool) take effect only
// at a restart: a file that changes them is refused and nothing is applied.
// The log level, the log rate limits and the ready policy apply at once.
// Reloads run one at a time, off the supervisor loop, so that the watchdog
// is fed while NICs are stopped and started.

// Changes says what a reload did, by NIC device and forward name.
type Changes struct {
	Added     []string `json:"added,omitempty"`
	Removed   []string `json:"removed,omitempty"`
	Changed   []string `json:"changed,omitempty"`
	Restarted []string `json:"restarted,omitempty"` // failed, unchanged, started again
	Unchanged []string `json:"unchanged,omitempty"`
}

func (c Changes) String() string {
	var parts []string
	for _, p := range []struct {
		what  string
		names []string
	}{{"added", c.Added}, {"removed", c.Removed}, {"changed", c.Changed}, {"restarted", c.Restarted}, {"unchanged", c.Unchanged}} {
		if len(p.names) > 0 {
			parts = append(parts, p.what+" "+strings.Join(p.names, ", "))
		}
	}
	if len(parts) == 0 {
		return "nothing configured"
	}
	return strings.Join(parts, "; ")
}

type reloadReq struct {
	cfg   config.Config
	reply chan reloadResult
}

type reloadResult struct {
	changes Changes
	err     error
}

// ErrNotRunning: Reload was called before Run started or after it stopped.
var ErrNotRunning = errors.New("vmbusd: not running")

// Reload applies cfg (already validated by config.Parse) and returns what
// changed. It waits for the reload to finish or ctx to end.
func (d *Daemon) Reload(ctx context.Context, cfg config.Config) (Changes, error) {
	select {
	case <-d.running:
	default:
		return Changes{}, ErrNotRunning
	}
	req := reloadReq{cfg: cfg, reply: make(chan reloadResult, 1)}
	select {
	case d.reloads <- req:
	case <-d.stopped:
		return Changes{}, ErrNotRunning
	case <-ctx.Done():
		return Changes{}, ctx.Err()
	}
	select {
	case res := <-req.reply:
		return res.changes, res.err
	case <-ctx.Done():
		return Changes{}, ctx.Err()
	}
}

// runReloads applies reload requests one at a time until ctx ends.
func (d *Daemon) runReloads(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.stopped:
			return
		case req := <-d.reloads:
			d.notify(fmt.Sprintf("RELOADING=1\nMONOTONIC_USEC=%d", monotonicUsec()))
			ch, err := d.apply(req.cfg)
			if err != nil {
				d.log.Error("reload refused; the running configuration is unchanged", "err", err)
			} else {
				d.log.Info("configuration reloaded", "changes", ch.String())
			}
			// The reload is over either way; readiness is in STATUS=.
			d.notify(sddaemon.SdNotifyReady)
			d.kickNow()
			req.reply <- reloadResult{ch, err}
		}
	}
}

func monotonicUsec() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano() / 1000
}

// restartOnly lists the settings that differ between a and b and take
// effect only at a restart.
func restartOnly(a, b config.Config) []string {
	var keys []string
	check := func(key string, same bool) {
		if !same {
			keys = append(keys, key)
		}
	}
	check("root", a.Root == b.Root)
	check("state_dir", a.State() == b.State())
	check("control", a.Control == b.Control)
	check("metrics", a.Metrics == b.Metrics)
	check("gpa", a.GPA == b.GPA)
	return keys
}

// apply makes the running daemon follow cfg.
func (d *Daemon) apply(cfg config.Config) (Changes, error) {
	old := d.config()
	if keys := restartOnly(old, cfg); len(keys) > 0 {
		return Changes{}, fmt.Errorf("%s changed: that takes effect only at a restart (systemctl restart vmbusd)", strings.Join(keys, ", "))
	}
	nics, fwds := d.runners()
	byName := map[string]*nicRunner{}
	for _, r := range nics {
		byName[r.cfg.Device] = r
	}
	// A running NIC's interface is gone (uio_hv_generic has it): its
	// identity is the one it resolved.
	ids, err := identities(cfg, cfg.NICs, func(device string) vmbus.GUID {
		if r := byName[device]; r != nil {
			return r.identity()
		}
		return vmbus.GUID{}
	})
	if err != nil {
		return Changes{}, err
	}
	key := func(device string, id vmbus.GUID) string {
		if !id.IsZero() {
			return id.String()
		}
		return "name:" + device
	}
	oldByKey := map[string]*nicRunner{}
	for _, r := range nics {
		oldByKey[key(r.cfg.Device, r.identity())] = r
	}
	var ch Changes
	var stop []*nicRunner
	var start []*nicRunner
	newNICs := make([]*nicRunner, len(cfg.NICs))
	for i, n := range cfg.NICs {
		k := key(n.Device, ids[i])
		o := oldByKey[k]
		if o == nil && ids[i].IsZero() {
			o = byName[n.Device]
		}
		switch {
		case o == nil:
			ch.Added = append(ch.Added, n.Device)
		case o.cfg.Equal(n) && o.state().State != stateFailed:
			ch.Unchanged = append(ch.Unchanged, n.Device)
			newNICs[i] = o
		case o.cfg.Equal(n):
			ch.Restarted = append(ch.Restarted, n.Device)
		default:
			ch.Changed = append(ch.Changed, n.Device)
		}
		if o != nil {
			delete(oldByKey, key(o.cfg.Device, o.identity()))
		}
		if newNICs[i] == nil {
			r := newNICRunner(d, n)
			if !ids[i].IsZero() {
				r.setInstance(ids[i])
			}
			if o != nil {
				r.inherit(o)
				stop = append(stop, o)
			}
			newNICs[i] = r
			start = append(start, r)
		}
	}
	for _, o := range oldByKey {
		ch.Removed = append(ch.Removed, o.cfg.Device)
		stop = append(stop, o)
	}

	oldFwds := map[config.HvSock]*fwdRunner{}
	for _, f := range fwds {
		oldFwds[f.cfg] = f
	}
	var stopF, startF []*fwdRunner
	newFwds := make([]*fwdRunner, len(cfg.HvSock))
	for i, h := range cfg.HvSock {
		if f := oldFwds[h]; f != nil {
			newFwds[i] = f
			delete(oldFwds, h)
			ch.Unchanged = append(ch.Unchanged, f.name)
			continue
		}
		f := newFwdRunner(d, h)
		newFwds[i] = f
		startF = append(startF, f)
		ch.Added = append(ch.Added, f.name)
	}
	for _, f := range oldFwds {
		stopF = append(stopF, f)
		ch.Removed = append(ch.Removed, f.name)
	}

	for _, n := range ch.Removed {
		d.log.Info("reload: stopping", "device", n)
	}
	for _, n := range append(append([]string(nil), ch.Changed...), ch.Restarted...) {
		d.log.Info("reload: restarting with the new settings", "nic", n)
	}
	// Stop first: a changed NIC's device is given back before its new
	// supervisor binds it again.
	var wg sync.WaitGroup
	for _, r := range stop {
		wg.Go(r.stop)
	}
	for _, f := range stopF {
		wg.Go(f.stop)
	}
	wg.Wait()

	d.mu.Lock()
	d.cfg = cfg
	d.nics, d.fwds = newNICs, newFwds
	close(d.peersChanged)
	d.peersChanged = make(chan struct{})
	ctx := d.runCtx
	d.mu.Unlock()
	d.limit.SetLimits(cfg.Log.RateLimit, cfg.Log.RateInterval)
	if lv := d.opts.LogLevel; lv != nil {
		lv.Set(slog.Level(cfg.Log.Level))
	}
	for _, r := range start {
		d.log.Info("reload: starting", "nic", r.cfg.Device)
		r.start(ctx)
	}
	for _, f := range startF {
		d.log.Info("reload: starting", "forward", f.name)
		f.start(ctx)
	}
	if err := d.recordOwned(); err != nil {
		d.log.Warn("cannot record the devices as owned", "err", err)
	}
	return ch, nil
}
