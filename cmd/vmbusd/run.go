package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/vmbusd/vmbusd/internal/config"
	"github.com/vmbusd/vmbusd/internal/daemon"
	"github.com/vmbusd/vmbusd/netvsc"
)

const defaultConfigPath = "/etc/vmbusd/vmbusd.toml"

// errInvalidConfig: `run --check-config` found errors (exit 2).
var errInvalidConfig = errors.New("invalid configuration")

func runRun(ctx context.Context, args []string, out io.Writer) error {
	// Signals first: a SIGHUP while the daemon starts must not kill it
	// (the default action), and every signal is logged.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var mu sync.Mutex
	var onHUP func() // set once the daemon runs
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	var reloads sync.WaitGroup
	defer reloads.Wait()
	handled := make(chan struct{})
	defer func() {
		stop()
		<-handled
	}()
	go func() {
		defer close(handled)
		for {
			select {
			case <-ctx.Done():
				return
			case s := <-sigs:
				mu.Lock()
				l, hup := log, onHUP
				mu.Unlock()
				l.Info("signal received", "signal", s.String())
				switch {
				case s != syscall.SIGHUP:
					stop()
				case hup == nil:
					l.Warn("SIGHUP: nothing to reload (no configuration file, or not running yet)")
				default:
					reloads.Go(hup)
				}
			}
		}
	}()
	setLog := func(l *slog.Logger) {
		mu.Lock()
		log = l
		mu.Unlock()
	}

	fs := newFlagSet(out, "run", "run [--config FILE] [--check-config] [flags]   |   run --sim [flags]")
	cfgPath := envString(fs, "config", "VMBUSD_CONFIG", "", "configuration file (TOML); default "+defaultConfigPath+" when it exists")
	check := fs.Bool("check-config", false, "validate the configuration and check it against the system (devices, namespaces, addresses) without touching anything; exit 0 when it is good, 2 when not")
	simMode := fs.Bool("sim", false, "run against an embedded simulated host (a NIC and an hv_sock echo service) and show live figures; the same as `vmbusd demo`")
	// The environment's root and control socket stand in for a missing
	// configuration file; the flags override the file.
	root := envString(fs, "root", "VMBUSD_ROOT", "", "system root directory, overriding the file's root (the environment only without a file)")
	metrics := fs.String("metrics", "", "metrics listen address host:port, overriding the file (\"off\" disables)")
	ctl := envString(fs, "control", "VMBUSD_CONTROL", "", "control socket path, overriding the file's (the environment only without a file)")
	demo := demoFlags(fs)
	mkLog := logFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *simMode {
		// The demo builds its own host and configuration: a flag meant
		// for a configured daemon would be silently ignored.
		for _, f := range []string{"config", "check-config", "root", "metrics", "control"} {
			if flagSet(fs, f) {
				return fmt.Errorf("%w: --%s cannot be used with --sim, which runs its own simulated host and configuration "+
					"(to run a configuration against a simulated host: `vmbusd sim --root DIR` in one shell, `vmbusd run --config FILE` with root = DIR in another)", errUsage, f)
			}
		}
	} else {
		for _, f := range []string{"profile", "duration", "no-tap", "queues", "mode", "metrics-addr", "vf", "vf-service-every"} {
			if flagSet(fs, f) {
				return fmt.Errorf("%w: --%s is a --sim flag (the configuration file sets the daemon's NICs)", errUsage, f)
			}
		}
	}
	level := new(slog.LevelVar)
	flagLog, err := mkLog(os.Stderr)
	if err != nil {
		return err
	}
	setLog(flagLog)
	if *simMode {
		return runSimDemo(ctx, out, flagLog, demo)
	}
	path := *cfgPath
	if path == "" {
		if _, err := os.Stat(defaultConfigPath); err == nil {
			path = defaultConfigPath
		}
	}
	// load reads the file and applies the flags and environment over it:
	// at start, and again at each SIGHUP.
	load := func() (config.Config, error) {
		cfg := config.Default()
		if path != "" {
			var err error
			if cfg, err = config.Load(path); err != nil {
				return cfg, err
			}
		}
		if *root != "" && (path == "" || fs.Changed("root")) {
			cfg.Root = *root
		}
		if *metrics == "off" {
			cfg.Metrics.Listen = ""
		} else if *metrics != "" {
			cfg.Metrics.Listen = *metrics
		}
		if *ctl != "" && (path == "" || fs.Changed("control")) {
			cfg.Control.Socket = *ctl
		}
		return cfg, nil
	}
	cfg, err := load()
	if err != nil {
		return err
	}
	if *check {
		return checkConfig(ctx, out, path, cfg)
	}
	if len(cfg.NICs) == 0 && len(cfg.HvSock) == 0 {
		return fmt.Errorf("%w: nothing to run: no [[nic]] or [[hvsock]] configured (pass --config FILE, see contrib/vmbusd.toml; or try `vmbusd run --sim`)", errUsage)
	}
	// The file's own log settings apply unless flags changed them; then a
	// reload changes the level too.
	opts := daemon.Options{Config: cfg, ConfigPath: path, Logger: flagLog}
	if !flagSet(fs, "log-level") && !flagSet(fs, "log-format") {
		level.Set(slog.Level(cfg.Log.Level))
		ho := &slog.HandlerOptions{Level: level}
		if cfg.Log.Format == config.FormatJSON {
			opts.Logger = slog.New(slog.NewJSONHandler(os.Stderr, ho))
		} else {
			opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, ho))
		}
		opts.LogLevel = level
	}
	setLog(opts.Logger)
	d, err := daemon.New(opts)
	if err != nil {
		return err
	}
	if path != "" {
		mu.Lock()
		onHUP = func() { reload(ctx, d, opts.Logger, load) }
		mu.Unlock()
	}
	err = d.Run(ctx)
	stop()
	return err
}

// reload reads the configuration again and applies it; a file that does
// not validate changes nothing.
func reload(ctx context.Context, d *daemon.Daemon, log *slog.Logger, load func() (config.Config, error)) {
	cfg, err := load()
	if err != nil {
		log.Error("reload: the configuration file is refused; the running configuration is unchanged", "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if _, err := d.Reload(ctx, cfg); err != nil && !errors.Is(err, daemon.ErrNotRunning) {
		log.Debug("reload", "err", err)
	}
}

// checkConfig prints what Check finds; an error makes it exit 2.
func checkConfig(ctx context.Context, out io.Writer, path string, cfg config.Config) error {
	name := path
	if name == "" {
		name = "the default configuration"
	}
	findings := daemon.Check(ctx, cfg)
	errs := 0
	for _, f := range findings {
		fmt.Fprintln(out, f)
		if f.Error {
			errs++
		}
	}
	if errs > 0 {
		return fmt.Errorf("%w: %s: %d error(s)", errInvalidConfig, name, errs)
	}
	fmt.Fprintf(out, "%s: OK (%d NICs, %d hv_sock forwards, state in %s)\n", name, len(cfg.NICs), len(cfg.HvSock), cfg.State())
	return nil
}

// demoSettings are the knobs of the simulated-host demo.
type demoSettings struct {
	profile  *string
	duration *time.Duration
	noTAP    *bool
	queues   *int
	mode     *string
	metrics  *string
	vf       *bool
	vfEvery  *time.Duration
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
		vf: fs.Bool("vf", false, "with --sim: give the NIC an accelerated-networking VF (a veth pair stands in; needs root): "+
			"vmbusd moves the traffic to it, and the host services it (away, then back) every --vf-service-every and on SIGUSR2"),
		vfEvery: fs.Duration("vf-service-every", 15*time.Second, "with --sim --vf: host servicing of the VF this often (0: only on SIGUSR2)"),
	}
}

func runDemo(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlagSet(out, "demo", "demo [flags]")
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
	if *s.vfEvery < 0 {
		return fmt.Errorf("%w: --vf-service-every must not be negative", errUsage)
	}
	return nil
}
