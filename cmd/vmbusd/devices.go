package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/vmbusd/vmbusd/internal/bind"
	"github.com/vmbusd/vmbusd/vmbus"
)

// DeviceRow is one line of `vmbusd devices`.
type DeviceRow struct {
	Instance  string `json:"instance"`
	Class     string `json:"class"`
	ClassName string `json:"class_name"`
	Driver    string `json:"driver"`
	UIO       string `json:"uio,omitempty"`
	Channels  int    `json:"channels"`
	Monitored bool   `json:"monitored"`
	Interface string `json:"interface,omitempty"`
	MAC       string `json:"mac,omitempty"`
}

func runDevices(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlagSet("devices", "devices [--root DIR] [--json]")
	root := fs.String("root", defaultRoot(), "system root directory (env VMBUSD_ROOT)")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	devs, err := vmbus.ScanDevices(*root)
	if err != nil && len(devs) == 0 {
		return err
	}
	rows := []DeviceRow{}
	for _, d := range devs {
		r := DeviceRow{Instance: d.Instance.String(), Class: d.Class.String(), ClassName: d.ClassName(),
			Driver: d.Driver, UIO: d.UIO, Channels: len(d.Channels), Monitored: d.MonitorID >= 0}
		if ents, err := os.ReadDir(filepath.Join(d.Path, "net")); err == nil && len(ents) > 0 {
			r.Interface = ents[0].Name()
			if b, err := os.ReadFile(filepath.Join(d.Path, "net", r.Interface, "address")); err == nil {
				r.MAC = strings.TrimSpace(string(b))
			}
		}
		rows = append(rows, r)
	}
	if *asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	if len(rows) == 0 {
		fmt.Fprintf(out, "no VMBus devices under %s (not a Hyper-V guest? try --root with a simulated host)\n", filepath.Join(*root, "sys/bus/vmbus/devices"))
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "INSTANCE\tCLASS\tDRIVER\tUIO\tCHANNELS\tINTERFACE\tMAC")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", r.Instance, r.ClassName, dash(r.Driver), dash(r.UIO),
			r.Channels, dash(r.Interface), dash(r.MAC))
	}
	if err := tw.Flush(); err != nil {
		return err
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
	fs := newFlagSet(name, name+" [--force] [--root DIR] DEVICE|IFACE")
	root := fs.String("root", defaultRoot(), "system root directory (env VMBUSD_ROOT)")
	force := fs.Bool("force", false, "bind even the interface carrying the default route or this SSH session (you may lose the connection); unbind even a device a process holds open")
	state := fs.String("state-dir", "", "where records of bound devices are kept (default ROOT/run/vmbusd)")
	mkLog := logFlags(fs)
	if err := fs.Parse(args); err != nil {
		return usageErr(err)
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("%w: want exactly one device (instance GUID or interface name)", errUsage)
	}
	log, err := mkLog(os.Stderr)
	if err != nil {
		return err
	}
	opts := bind.Options{Force: *force, StateDir: *state, Logger: log}
	dev := fs.Arg(0)
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

func runRestore(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlagSet("restore", "restore [--root DIR] [--state-dir DIR]")
	root := fs.String("root", defaultRoot(), "system root directory (env VMBUSD_ROOT)")
	state := fs.String("state-dir", "", "where records of bound devices are kept (default ROOT/run/vmbusd)")
	mkLog := logFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log, err := mkLog(os.Stderr)
	if err != nil {
		return err
	}
	recs, err := bind.Restore(ctx, *root, bind.Options{StateDir: *state, Logger: log})
	for _, r := range recs {
		fmt.Fprintf(out, "%s given back to %s\n", r.Device, orNone(r.OriginalDriver))
	}
	if err == nil && len(recs) == 0 {
		fmt.Fprintln(out, "nothing to restore")
	}
	return err
}

func runCheck(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlagSet("check", "check [--root DIR]")
	root := fs.String("root", defaultRoot(), "system root directory (env VMBUSD_ROOT)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	rep := bind.Check(*root)
	if err := rep.Format(out); err != nil {
		return err
	}
	if !rep.OK() {
		return fmt.Errorf("the system is not ready for vmbusd (see the FAIL lines)")
	}
	return nil
}

func usageErr(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	return fmt.Errorf("%w: %v", errUsage, err)
}
