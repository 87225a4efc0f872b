package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/vmbusd/vmbusd/internal/config"
	"github.com/vmbusd/vmbusd/internal/daemon"
	"github.com/vmbusd/vmbusd/netvsc"
)

const defaultConfigPath = "/etc/vmbusd/vmbusd.toml"

func runRun(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlagSet("run", "run [--config FILE] [flags]   |   run --sim [flags]")
	cfgPath := fs.String("config", "", "configuration file (TOML); default "+defaultConfigPath+" when it exists")
	simMode := fs.Bool("sim", false, "run against an embedded simulated host (a NIC and an hv_sock echo service) and show live figures; the same as `vmbusd demo`")
	root := fs.String("root", "", "system root directory, overriding the file's `root` (env VMBUSD_ROOT)")
	metrics := fs.String("metrics", "", "metrics listen address host:port, overriding the file (\"off\" disables)")
	ctl := fs.String("control", "", "control socket path, overriding the file")
	demo := demoFlags(fs)
	mkLog := logFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log, err := mkLog(os.Stderr)
	if err != nil {
		return err
	}
	if *simMode {
		return runSimDemo(ctx, out, log, demo)
	}
	cfg := config.Default()
	path := *cfgPath
	if path == "" {
		if _, err := os.Stat(defaultConfigPath); err == nil {
			path = defaultConfigPath
		}
	}
	if path != "" {
		if cfg, err = config.Load(path); err != nil {
			return err
		}
	}
	switch {
	case *root != "":
		cfg.Root = *root
	case os.Getenv("VMBUSD_ROOT") != "" && path == "":
		cfg.Root = os.Getenv("VMBUSD_ROOT")
	}
	if *metrics == "off" {
		cfg.Metrics.Listen = ""
	} else if *metrics != "" {
		cfg.Metrics.Listen = *metrics
	}
	if *ctl != "" {
		cfg.Control.Socket = *ctl
	}
	if len(cfg.NICs) == 0 && len(cfg.HvSock) == 0 {
		return fmt.Errorf("%w: nothing to run: no [[nic]] or [[hvsock]] configured (pass --config FILE, see contrib/vmbusd.toml; or try `vmbusd run --sim`)", errUsage)
	}
	// The file's own log settings apply unless flags changed them.
	if !flagSet(fs, "log-level") && !flagSet(fs, "log-format") {
		lv, _ := cfg.Log.Level.MarshalText()
		if log, err = newLogger(os.Stderr, string(lv), cfg.Log.Format.String()); err != nil {
			return err
		}
	}
	d, err := daemon.New(daemon.Options{Config: cfg, Logger: log})
	if err != nil {
		return err
	}
	return d.Run(ctx)
}

// demoSettings are the knobs of the simulated-host demo.
type demoSettings struct {
	profile  *string
	duration *time.Duration
	noTAP    *bool
	queues   *int
	mode     *string
	metrics  *string
}

func demoFlags(fs interface {
	String(string, string, string) *string
	Duration(string, time.Duration, string) *time.Duration
	Bool(string, bool, string) *bool
	Int(string, int, string) *int
}) demoSettings {
	return demoSettings{
		profile:  fs.String("profile", "6.18", "with --sim: simulated kernel profile (6.10 or newer: hv_sock needs it)"),
		duration: fs.Duration("duration", 0, "with --sim: stop after this long (0: until Ctrl-C or SIGTERM)"),
		noTAP:    fs.Bool("no-tap", false, "with --sim: do not use TAP devices even with CAP_NET_ADMIN (traffic generator instead)"),
		queues:   fs.Int("queues", 2, "with --sim: NIC queues"),
		mode:     fs.String("mode", "hybrid", "with --sim: NIC wait mode: hybrid, poll or interrupt"),
		metrics:  fs.String("metrics-addr", "127.0.0.1:9464", "with --sim: metrics address (a free port is used when this one is taken)"),
	}
}

func runDemo(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlagSet("demo", "demo [flags]")
	demo := demoFlags(fs)
	mkLog := logFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log, err := mkLog(os.Stderr)
	if err != nil {
		return err
	}
	return runSimDemo(ctx, out, log, demo)
}

func checkDemoSettings(s demoSettings) error {
	if *s.queues < 1 || *s.queues > 8 {
		return fmt.Errorf("%w: --queues %d: want 1 to 8", errUsage, *s.queues)
	}
	if _, err := netvsc.ParseMode(*s.mode); err != nil {
		return fmt.Errorf("%w: --mode: %v", errUsage, err)
	}
	if *s.duration < 0 {
		return errors.New("--duration must not be negative")
	}
	return nil
}
