// Command vmbusd is a user-space driver for Hyper-V VMBus devices handed to
// user space by Linux's uio_hv_generic, with a simulated Hyper-V host for
// machines that have none.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/vmbusd/vmbusd/internal/config"
	"github.com/vmbusd/vmbusd/internal/daemon"
	"github.com/vmbusd/vmbusd/internal/owner"
)

type command struct {
	name, summary string
	run           func(ctx context.Context, args []string, out io.Writer) error
}

func commands() []command {
	return []command{
		{"run", "run the daemon: claim the configured devices, run their data paths, serve metrics and control", runRun},
		{"demo", "run the daemon against an embedded simulated host, with live figures (= run --sim)", runDemo},
		{"devices", "list VMBus devices: class, instance, driver, uio node, channels, interface and MAC", runDevices},
		{"bind", "hand a synthetic NIC to uio_hv_generic (driver_override; refuses the management NIC)", runBind},
		{"unbind", "give a device back to its kernel driver, restoring its interface", runUnbind},
		{"restore", "give back every device a crashed vmbusd left bound (the unit's ExecStopPost)", runRestore},
		{"check", "check the system: vmbus, uio_hv_generic, kernel, devices, management NIC, hugepages", runCheck},
		{"status", "show the running daemon's devices and forwards (over its control socket)", runStatus},
		{"stats", "show the running daemon's counters per device and queue", runStats},
		{"capture", "capture a NIC's frames as pcapng, like tcpdump: filter expression, -Q direction, -c, -s, -w", runCapture},
		{"sim", "run a simulated Hyper-V host (sysfs tree + uio devices) for other processes", runSim},
		{"ringdemo", "a guest and the simulated host echoing packets on one VMBus channel, with live figures", runRingDemo},
	}
}

func usage(w io.Writer) {
	fmt.Fprint(w, `vmbusd drives Hyper-V VMBus devices from user space: it binds devices that
Linux's uio_hv_generic exposes, runs the VMBus rings and signalling itself,
and carries traffic over them. Where no Hyper-V exists it runs against its
own simulated host, which serves the same sysfs and /dev/uioN contract.

Usage:
  vmbusd <command> [flags]

Commands:
`)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
Every command that touches devices takes --root DIR (environment
VMBUSD_ROOT, default "/"): the directory standing for "/", so the same
binary runs on a real system or against a simulated host's tree.

Exit codes: 0 success, 1 failure, 2 bad flags or configuration, 3 busy: the
devices are owned by a live daemon (a second run, or restore, bind or unbind
of a device it drives).

Run 'vmbusd <command> --help' for a command's flags. Try:
  vmbusd demo
`)
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// errUsage marks an error caused by bad command-line input (exit 2).
var errUsage = errors.New("usage")

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1 // a runtime failure
	exitUsage   = 2 // bad flags, or a configuration that does not validate
	exitBusy    = 3 // the state directory (and its devices) are owned by a live daemon
)

// exitCode maps a command's error to the process's exit code.
func exitCode(err error) int {
	var ce *config.Error
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.Is(err, owner.ErrBusy):
		return exitBusy
	case errors.Is(err, errUsage), errors.As(err, &ce), errors.Is(err, daemon.ErrConfig), errors.Is(err, errInvalidConfig):
		return exitUsage
	}
	return exitFailure
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	name := args[0]
	if name == "-h" || name == "--help" || name == "help" {
		usage(stdout)
		return 0
	}
	for _, c := range commands() {
		if c.name != name {
			continue
		}
		ctx := context.Background()
		if c.name != "run" { // run handles (and logs) its signals itself
			var stop context.CancelFunc
			ctx, stop = signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
			defer stop()
		}
		err := c.run(ctx, args[1:], stdout)
		code := exitCode(err)
		if code != 0 {
			fmt.Fprintf(stderr, "vmbusd %s: %v\n", name, err)
		}
		return code

	}
	fmt.Fprintf(stderr, "vmbusd: unknown command %q\n\n", name)
	usage(stderr)
	return 2
}

// newFlagSet returns a flag set whose errors and help go to stderr and
// which reports parse errors as errUsage.
func newFlagSet(name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet("vmbusd "+name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: vmbusd %s\n\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	return nil
}

// logFlags adds --log-level and --log-format and returns a constructor.
func logFlags(fs *flag.FlagSet) func(w io.Writer) (*slog.Logger, error) {
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	format := fs.String("log-format", "text", "log format: text or json")
	return func(w io.Writer) (*slog.Logger, error) { return newLogger(w, *level, *format) }
}

func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("%w: log level %q: want debug, info, warn or error", errUsage, level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("%w: log format %q: want text or json", errUsage, format)
}

// flagSet reports whether the named flag was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			found = true
		}
	})
	return found
}

func defaultRoot() string {
	if r := os.Getenv("VMBUSD_ROOT"); r != "" {
		return r
	}
	return "/"
}
