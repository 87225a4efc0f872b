package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/vmbusd/vmbusd/internal/bind"
	"github.com/vmbusd/vmbusd/internal/config"
	"github.com/vmbusd/vmbusd/internal/control"
	"github.com/vmbusd/vmbusd/internal/daemon"
	"github.com/vmbusd/vmbusd/internal/owner"
	"github.com/vmbusd/vmbusd/vmbus"
)

func runDevices(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlagSet(out, "devices", "devices [--root DIR] [--json] [--control PATH]")
	root := rootFlag(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	sock := controlFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	bus := filepath.Join(*root, "sys/bus/vmbus/devices")
	if _, err := os.Stat(bus); err != nil {
		// Not a Hyper-V guest (or a root that is not a simulated host's
		// tree): an error, not an empty list.
		return fmt.Errorf("no VMBus under %s (not a Hyper-V guest? try --root with a simulated host's directory): %w", bus, err)
	}
	devs, err := vmbus.ScanDevices(*root)
	if err != nil && len(devs) == 0 {
		return err
	}
	// What the running daemon knows of its NICs (the VF pairing, the data
	// path); a system without a daemon lists the devices all the same.
	byInstance := map[string]daemon.NICStatus{}
	var st daemon.Status
	doc := daemon.Devices{SchemaVersion: daemon.SchemaVersion, Root: *root, Devices: []daemon.Device{}}
	if _, serr := os.Stat(*sock); serr == nil {
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if getJSON(qctx, *sock, "/v1/status", &st) == nil {
			doc.Daemon = true
			for _, n := range st.NICs {
				if n.Instance != "" {
					byInstance[n.Instance] = n
				}
			}
		}
		cancel()
	}
	for _, d := range devs {
		r := daemon.Device{Instance: d.Instance.String(), Class: d.Class.String(), ClassName: d.ClassName(),
			Driver: d.Driver, UIO: d.UIO, Channels: len(d.Channels), Monitored: d.MonitorID >= 0}
		if ents, err := os.ReadDir(filepath.Join(d.Path, "net")); err == nil && len(ents) > 0 {
			r.Interface = ents[0].Name()
			if b, err := os.ReadFile(filepath.Join(d.Path, "net", r.Interface, "address")); err == nil {
				r.MAC = strings.TrimSpace(string(b))
			}
		}
		if n, ok := byInstance[r.Instance]; ok {
			r.NIC = n.Name
			if r.MAC == "" {
				r.MAC = n.MAC
			}
			vf := n.VF
			r.VF = &vf
		}
		doc.Devices = append(doc.Devices, r)
	}
	rows := doc.Devices
	if *asJSON {
		return printJSON(out, doc)
	}
	if len(rows) == 0 {
		fmt.Fprintf(os.Stderr, "vmbusd devices: the bus under %s offers no devices\n", bus)
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "INSTANCE\tCLASS\tDRIVER\tUIO\tCHANNELS\tINTERFACE\tMAC\tVF\tPATH")
	for _, r := range rows {
		vf, path := "-", "-"
		if r.VF != nil {
			vf, path = dash(r.VF.IfName), dash(r.VF.Path)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", r.Instance, r.ClassName, dash(r.Driver), dash(r.UIO),
			r.Channels, dash(r.Interface), dash(r.MAC), vf, path)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(byInstance) > 0 {
		fmt.Fprintln(out)
		printVFTable(out, st.NICs)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "vmbusd devices: %v\n", err)
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func runBind(ctx context.Context, args []string, out io.Writer) error {
	return bindCommand(ctx, "bind", args, out)
}

func runUnbind(ctx context.Context, args []string, out io.Writer) error {
	return bindCommand(ctx, "unbind", args, out)
}

func bindCommand(ctx context.Context, name string, args []string, out io.Writer) error {
	fs := newFlagSet(out, name, name+" [--force] [--root DIR] DEVICE|IFACE")
	root := rootFlag(fs)
	force := fs.Bool("force", false, "bind even the interface carrying the default route or this SSH session (you may lose the connection); unbind even a device a process holds open. Never a device a live daemon drives")
	state := stateDirFlag(fs)
	mkLog := logFlags(fs)
	if err := parseArgs(fs, args); err != nil {
		return usageErr(err)
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("%w: want exactly one device (instance GUID or interface name)", errUsage)
	}
	log, err := mkLog(os.Stderr)
	if err != nil {
		return err
	}
	dev := fs.Arg(0)
	release, err := claimDevice(*root, stateDir(*root, *state), name, dev)
	if err != nil {
		return err
	}
	defer release()
	opts := bind.Options{Force: *force, StateDir: *state, Logger: log}
	if name == "bind" {
		rec, err := bind.Bind(ctx, *root, dev, opts)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%s bound to uio_hv_generic (was %s", rec.Device, orNone(rec.OriginalDriver))
		if rec.Interface != "" {
			fmt.Fprintf(out, ", interface %s", rec.Interface)
		}
		fmt.Fprintln(out, "); `vmbusd unbind` gives it back")
		return nil
	}
	rec, err := bind.Unbind(ctx, *root, dev, opts)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%s given back to %s", rec.Device, orNone(rec.OriginalDriver))
	if rec.Interface != "" {
		fmt.Fprintf(out, " as %s", rec.Interface)
	}
	fmt.Fprintln(out)
	return nil
}

// stateDir is --state-dir, or ROOT/run/vmbusd.
func stateDir(root, flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	return config.Config{Root: root}.State()
}

// claimDevice makes sure no live daemon drives dev before bind or unbind
// touches it. With the state directory free it holds the owner lock until
// release (a daemon starting meanwhile waits); while a daemon owns the
// directory, devices it does not drive may still be bound and unbound.
func claimDevice(root, state, command, dev string) (release func(), err error) {
	lock, err := owner.Acquire(state, owner.Info{Command: command}, ownerWait)
	if err == nil {
		return func() { lock.Release() }, nil
	}
	var be *owner.BusyError
	if !errors.As(err, &be) {
		return nil, err
	}
	g, ierr := bind.Identify(root, state, dev)
	if ierr != nil && be.Owner.Command == owner.CommandRun {
		return nil, fmt.Errorf("%w; and %s does not resolve (%v), so it may be one of the daemon's devices", err, dev, ierr)
	}
	if be.Owner.Command != owner.CommandRun {
		return nil, err
	}
	if be.Owner.Owns(g.String()) {
		return nil, fmt.Errorf("%w: refusing to %s %s, which it drives (stop it first, or remove the device from its configuration and reload)", err, command, dev)
	}
	return func() {}, nil
}

// ownerWait is how long a command waits for another command (not a
// daemon) to finish with the state directory.
const ownerWait = 30 * time.Second

func runRestore(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlagSet(out, "restore", "restore [--force] [--config FILE] [--root DIR] [--state-dir DIR]")
	cfgPath := envString(fs, "config", "VMBUSD_CONFIG", "", "take root and state_dir from the daemon's configuration file (the flags, when given, win)")
	root := rootFlag(fs)
	state := stateDirFlag(fs)
	force := fs.Bool("force", false, "give back even devices whose uio node a process holds open; never while the daemon that owns them lives")
	mkLog := logFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log, err := mkLog(os.Stderr)
	if err != nil {
		return err
	}
	if *cfgPath != "" {
		// The unit's ExecStopPost runs this after any stop, also after a
		// start that failed on a bad file: then the flags' defaults are
		// the best guess, and giving devices back still matters.
		cfg, err := config.Load(*cfgPath)
		if err != nil {
			log.Warn("configuration not readable; restoring with the flags' root and state directory", "config", *cfgPath, "err", err)
		} else {
			if !fs.Changed("root") && cfg.Root != "" {
				*root = cfg.Root
			}
			if !fs.Changed("state-dir") && cfg.StateDir != "" {
				*state = cfg.StateDir
			}
		}
	}
	dir := stateDir(*root, *state)
	// The owner lock: a restore while the daemon runs would tear its
	// devices out from under it.
	lock, err := owner.Acquire(dir, owner.Info{Command: owner.CommandRestore}, ownerWait)
	if err != nil {
		if errors.Is(err, owner.ErrBusy) {
			return fmt.Errorf("%w: stop it first (systemctl stop vmbusd); --force does not override a live owner", err)
		}
		return err
	}
	defer lock.Release()
	if prev := lock.Previous(); prev.Control != "" {
		if removed, err := control.RemoveStale(prev.Control); removed {
			fmt.Fprintf(out, "removed the stale control socket %s (pid %d)\n", prev.Control, prev.PID)
		} else if err != nil {
			log.Warn("stale control socket", "err", err)
		}
	}
	recs, err := bind.Restore(ctx, *root, bind.Options{StateDir: *state, Force: *force, Logger: log})
	for _, r := range recs {
		fmt.Fprintf(out, "%s given back to %s\n", r.Device, orNone(r.OriginalDriver))
	}
	if err == nil && len(recs) == 0 {
		fmt.Fprintln(out, "nothing to restore")
	}
	return err
}

func runCheck(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlagSet(out, "check", "check [--root DIR] [--json]")
	root := rootFlag(fs)
	asJSON := fs.Bool("json", false, "print the Checks document (docs/control-api.md); the exit code is the same")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	rep := bind.Check(*root)
	if *asJSON {
		if err := printJSON(out, daemon.ChecksOf(rep)); err != nil {
			return err
		}
	} else if err := rep.Format(out); err != nil {
		return err
	}
	if !rep.OK() {
		if *asJSON {
			return fmt.Errorf("the system is not ready for vmbusd (see the checks with status fail)")
		}
		return fmt.Errorf("the system is not ready for vmbusd (see the FAIL lines)")
	}
	return nil
}

func usageErr(err error) error {
	if errors.Is(err, pflag.ErrHelp) {
		return err
	}
	return fmt.Errorf("%w: %v", errUsage, err)
}
