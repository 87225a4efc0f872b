package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/vmbusd/vmbusd/internal/buildinfo"
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

// rootLong is vmbusd's description in its --help.
const rootLong = `vmbusd drives Hyper-V VMBus devices from user space: it binds devices that
Linux's uio_hv_generic exposes, runs the VMBus rings and signalling itself,
and carries traffic over them. Where no Hyper-V exists it runs against its
own simulated host, which serves the same sysfs and /dev/uioN contract.

Every command that touches devices takes --root DIR (environment
VMBUSD_ROOT, default "/"): the directory standing for "/", so the same
binary runs on a real system or against a simulated host's tree. Commands
that talk to the daemon take --control PATH (environment VMBUSD_CONTROL);
bind, unbind and restore take --state-dir DIR (VMBUSD_STATE_DIR); run and
restore take --config FILE (VMBUSD_CONFIG). A flag on the command line
wins over its environment variable, and a configuration file's root,
state_dir and control socket win over the environment. Flags may come
before or after the other arguments.

` + exitCodesHelp

// exitCodesHelp ends every --help.
const exitCodesHelp = `Exit codes:
  0  success (and --help)
  1  a runtime failure
  2  bad flags or arguments, or a configuration that does not validate
  3  busy: the devices are owned by a live daemon (a second run, or restore,
     bind or unbind of a device it drives)
`

const rootExamples = `  vmbusd demo                                     the daemon against an embedded simulated host
  vmbusd devices                                  what is on the VMBus
  vmbusd bind eth2                                hand a NIC to uio_hv_generic
  vmbusd run --config /etc/vmbusd/vmbusd.toml     the daemon
  vmbusd stats --json | jq '.nics[].totals'       its counters
  vmbusd capture -i eth1 -Q in udp and port 53 | tshark -r -
  source <(vmbusd completion bash)                shell completion`

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
	case err == nil, errors.Is(err, pflag.ErrHelp):
		return exitOK
	case errors.Is(err, owner.ErrBusy):
		return exitBusy
	case errors.Is(err, errUsage), errors.As(err, &ce), errors.Is(err, daemon.ErrConfig), errors.Is(err, errInvalidConfig):
		return exitUsage
	}
	return exitFailure
}

func run(args []string, stdout, stderr io.Writer) int {
	var ran string // the command whose own code ran (its errors are its own)
	root := newRootCommand(stdout, stderr, &ran)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	if err == nil {
		return exitOK
	}
	if ran == "" {
		// cobra's own: an unknown command, or no command at all.
		fmt.Fprintf(stderr, "vmbusd: %v\nRun 'vmbusd --help' for the commands.\n", err)
		return exitUsage
	}
	code := exitCode(err)
	if code != exitOK {
		// An error that already names the command ("bind: device eth9:
		// ...", from internal/bind) is printed once, not as "bind: bind:".
		msg := strings.TrimPrefix(err.Error(), ran+": ")
		fmt.Fprintf(stderr, "vmbusd %s: %s\n", ran, msg)
		if code == exitUsage && errors.Is(err, errUsage) {
			fmt.Fprintf(stderr, "Run 'vmbusd %s --help' for its flags.\n", ran)
		}
	}
	return code
}

// newRootCommand builds the command tree. Each command parses its own
// flags (GNU style, with pflag): cobra dispatches, and serves --help,
// --version and shell completion from the commands' flag sets.
func newRootCommand(stdout, stderr io.Writer, ran *string) *cobra.Command {
	bi := buildinfo.Get()
	root := &cobra.Command{
		Use:     "vmbusd",
		Short:   "a user-space driver for Hyper-V VMBus devices",
		Long:    rootLong,
		Example: rootExamples,
		Version: bi.Version,
		// The errors are printed once, by run, with the command's name.
		SilenceErrors: true,
		SilenceUsage:  true,
		RunE: func(cmd *cobra.Command, args []string) error {
			cmd.SetOut(stderr)
			cmd.Help()
			return errors.New("a command is required")
		},
	}
	root.SetVersionTemplate(fmt.Sprintf("vmbusd %s\nrevision %s\n%s %s\n", bi.Version, bi.Revision, bi.GoVersion, bi.Platform))
	root.SetOut(stdout)
	root.SetErr(stderr)
	for _, c := range commands() {
		cmd := &cobra.Command{
			Use:   c.name,
			Short: c.summary,
			// The command parses its flags itself; cobra passes them on.
			DisableFlagParsing: true,
			RunE: func(cmd *cobra.Command, args []string) error {
				*ran = c.name
				ctx := cmd.Context()
				if c.name != "run" { // run handles (and logs) its signals itself
					var stop context.CancelFunc
					ctx, stop = signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
					defer stop()
				}
				return c.run(ctx, args, stdout)
			},
			ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
				if !strings.HasPrefix(toComplete, "-") {
					return nil, cobra.ShellCompDirectiveDefault
				}
				return flagNames(c, toComplete), cobra.ShellCompDirectiveNoFileComp
			},
		}
		cmd.SetHelpFunc(func(*cobra.Command, []string) { c.run(context.Background(), []string{"--help"}, stdout) })
		root.AddCommand(cmd)
	}
	root.AddCommand(newManCommand(ran))
	return root
}

var flagLine = regexp.MustCompile(`(?m)^\s+(?:-(\w), )?(--[\w-]+)`)

// flagNames lists c's flags that start with prefix, read from its --help.
func flagNames(c command, prefix string) []cobra.Completion {
	var help bytes.Buffer
	c.run(context.Background(), []string{"--help"}, &help)
	var out []cobra.Completion
	for _, m := range flagLine.FindAllStringSubmatch(help.String(), -1) {
		for _, name := range []string{m[2], "-" + m[1]} {
			if name != "-" && strings.HasPrefix(name, prefix) {
				out = append(out, name)
			}
		}
	}
	return out
}

// newFlagSet returns a command's flag set: flags anywhere among the
// arguments (GNU style), parse errors returned (not printed: run prints
// them once), and --help printed on out.
func newFlagSet(out io.Writer, name, synopsis string) *pflag.FlagSet {
	fs := pflag.NewFlagSet("vmbusd "+name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.SortFlags = false
	fs.Usage = func() {
		if sink, ok := out.(*flagSink); ok {
			sink.fs, sink.synopsis = fs, synopsis
			return
		}
		// A backquoted word in a usage would become the value's
		// placeholder: quote it plainly instead.
		fs.VisitAll(func(f *pflag.Flag) { f.Usage = strings.ReplaceAll(f.Usage, "`", "'") })
		fmt.Fprintf(out, "Usage: vmbusd %s\n\nFlags:\n%s\n%s", synopsis, fs.FlagUsages(), exitCodesHelp)
	}
	return fs
}

// parseArgs parses args into fs, which newFlagSet made. --help (listed
// last among the flags) prints the usage and returns pflag.ErrHelp.
func parseArgs(fs *pflag.FlagSet, args []string) error {
	help := fs.BoolP("help", "h", false, "show this help")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *help {
		fs.Usage()
		return pflag.ErrHelp
	}
	return nil
}

func parseFlags(fs *pflag.FlagSet, args []string) error {
	if err := parseArgs(fs, args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
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
func logFlags(fs *pflag.FlagSet) func(w io.Writer) (*slog.Logger, error) {
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
func flagSet(fs *pflag.FlagSet, name string) bool {
	found := false
	fs.Visit(func(f *pflag.Flag) {
		if f.Name == name {
			found = true
		}
	})
	return found
}

// envString adds a string flag whose default is the environment variable
// env when that is set and not empty, def otherwise, so that a flag given
// on the command line wins over the environment; the help names env.
func envString(fs *pflag.FlagSet, name, env, def, usage string) *string {
	if v := os.Getenv(env); v != "" {
		def = v
	}
	return fs.String(name, def, usage+" (env "+env+")")
}

// rootFlag adds --root, the directory standing for "/".
func rootFlag(fs *pflag.FlagSet) *string {
	return envString(fs, "root", "VMBUSD_ROOT", "/", "system root directory")
}

// stateDirFlag adds --state-dir, where bind records are kept.
func stateDirFlag(fs *pflag.FlagSet) *string {
	return envString(fs, "state-dir", "VMBUSD_STATE_DIR", "", "where records of bound devices are kept (empty: ROOT/run/vmbusd)")
}
