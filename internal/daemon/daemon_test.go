package daemon_test

import (
	"bytes"
	"cmp"
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/clock"
	"github.com/vmbusd/vmbusd/clock/clocktest"
	"github.com/vmbusd/vmbusd/internal/config"
	"github.com/vmbusd/vmbusd/internal/daemon"
	"github.com/vmbusd/vmbusd/internal/testutil"
	"github.com/vmbusd/vmbusd/netvsc"
	"github.com/vmbusd/vmbusd/sim"
	"github.com/vmbusd/vmbusd/vmbus"
)

// A pair of simulated NICs forwarded to each other needs no TAP, so these
// lifecycle tests run without root.

type rig struct {
	h      *sim.Host
	root   string
	gen    *sim.Generator
	sink   *sim.Generator
	a, b   *sim.NIC
	d      *daemon.Daemon
	cancel context.CancelFunc
	done   chan error
	notes  *notes
	// probeInterval is the daemon's liveness probe interval (0: default).
	probeInterval time.Duration
	// probeTimeout bounds each probe (0: half the interval).
	probeTimeout time.Duration
	// rescan is the daemon's RescanInterval (0: default).
	rescan time.Duration
	// noWaitReady makes startWith return without waiting for READY=1.
	noWaitReady bool
	// logs is the daemon's log.
	logs *logBuffer
	// gpaPool is given to the daemon as Options.GPAPool (nil: none).
	gpaPool *netvsc.GPAPool
	// clock, when set, times the daemon's supervisors instead of the real
	// clock (see useFakeClock).
	clock *clocktest.Fake
}

// logBuffer keeps the daemon's log for a failing test.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 4<<20 {
		return len(p), nil
	}
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type notes struct {
	mu  sync.Mutex
	got []string
}

func (n *notes) add(s string) {
	n.mu.Lock()
	n.got = append(n.got, s)
	n.mu.Unlock()
}

func (n *notes) list() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.got)
}

func newRig(t *testing.T) *rig {
	t.Helper()
	root, err := os.MkdirTemp("/dev/shm", "vmbusd-daemon-")
	if err != nil {
		root = t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	h, err := sim.New(sim.Config{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	r := &rig{h: h, root: root, notes: &notes{}}
	r.gen = sim.NewGenerator(sim.GeneratorConfig{Flows: 8, Rate: 20000})
	r.sink = sim.NewGenerator(sim.GeneratorConfig{Idle: true})
	r.a = r.addNIC(t, "eth1", vmbus.GUID{})
	r.b = r.addNIC(t, "eth2", vmbus.GUID{})
	r.a.Attach(r.gen)
	r.b.Attach(r.sink)
	return r
}

func (r *rig) addNIC(t *testing.T, ifname string, inst vmbus.GUID) *sim.NIC {
	t.Helper()
	return r.addNICWith(t, sim.NICConfig{IfName: ifname, MaxQueues: 2, Instance: inst})
}

// addNICWith offers a NIC bound to hv_netvsc, as on a fresh VM.
func (r *rig) addNICWith(t *testing.T, cfg sim.NICConfig) *sim.NIC {
	t.Helper()
	cfg.Driver = sim.DriverNetvsc
	n, err := r.h.AddNIC(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (r *rig) start(t *testing.T) {
	t.Helper()
	r.startWith(t, r.config())
}

// config is the rig's daemon configuration: eth1 and eth2 forwarded to
// each other.
func (r *rig) config() config.Config {
	tru := true
	cfg := config.Default()
	cfg.Root = r.root
	cfg.StateDir = filepath.Join(r.root, "run/vmbusd")
	cfg.Control.Socket = filepath.Join(r.root, "run/vmbusd/control.sock")
	cfg.Metrics.Listen = "127.0.0.1:0"
	cfg.NICs = []config.NIC{
		{Device: "eth1", Queues: 2, Attach: config.AttachForward, Peer: "eth2", Bind: &tru},
		{Device: "eth2", Queues: 2, Attach: config.AttachForward, Peer: "eth1", Bind: &tru},
	}
	return cfg
}

func (r *rig) startWith(t *testing.T, cfg config.Config) {
	t.Helper()
	logs := &logBuffer{}
	r.logs = logs
	// Every line is also written as JSON, and no line may repeat a key
	// (a logger's With and its call naming one attribute twice).
	jsonLogs := &logBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("daemon log:\n%s", logs.String())
		}
	})
	var clk clock.Clock // a nil *clocktest.Fake must stay a nil Clock
	if r.clock != nil {
		clk = r.clock
	}
	d, err := daemon.New(daemon.Options{Config: cfg, Notify: r.notes.add, RescanInterval: r.rescan, GPAPool: r.gpaPool, Clock: clk,
		Logger: slog.New(slog.NewMultiHandler(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}),
			slog.NewJSONHandler(jsonLogs, &slog.HandlerOptions{Level: slog.LevelDebug}))),
		ProbeInterval: r.probeInterval, ProbeTimeout: cmp.Or(r.probeTimeout, r.probeInterval/2)})
	if err != nil {
		t.Fatal(err)
	}
	r.d = d
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.done = make(chan error, 1)
	go func() { r.done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-r.done
		checkLogKeys(t, strings.NewReader(jsonLogs.String()))
	})
	if r.noWaitReady {
		return
	}
	select {
	case <-d.Ready():
	case err := <-r.done:
		t.Fatalf("daemon stopped: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("daemon not ready")
	}
}

func (r *rig) nicState(name string) daemon.NICStatus {
	for _, n := range r.d.Status().NICs {
		if n.Name == name {
			return n
		}
	}
	return daemon.NICStatus{}
}

// waitFor is testutil.WaitFor with its default deadline, for the tests of
// this package.
func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	testutil.WaitFor(t, 0, ok, what)
}

func forwarded(r *rig) uint64 { return r.sink.Stats().Received }

func TestForwardingAndCleanStop(t *testing.T) {
	r := newRig(t)
	r.start(t)
	waitFor(t, "frames forwarded eth1 -> eth2", func() bool { return forwarded(r) > 1000 })
	// READY=1 comes once both NICs are up, before any watchdog ping, and
	// the status that follows says so.
	got := r.notes.list()
	ready := slices.Index(got, "READY=1")
	if ready < 0 || slices.ContainsFunc(got[:ready], func(s string) bool { return !strings.HasPrefix(s, "STATUS=") }) {
		t.Fatalf("notifications %v, want only STATUS= before READY=1", got)
	}
	if i := slices.IndexFunc(got[ready:], func(s string) bool { return strings.HasPrefix(s, "STATUS=") }); i < 0 ||
		got[ready+i] != "STATUS=2 of 2 devices up" {
		t.Fatalf("notifications %v, want STATUS=2 of 2 devices up after READY=1", got)
	}
	// The daemon bound both NICs; stopping gives them back.
	for _, dev := range r.h.Devices() {
		if dev.Driver() != sim.DriverUIO {
			t.Fatalf("%s has %q while running", dev.IfName(), dev.Driver())
		}
	}
	r.cancel()
	if err := <-r.done; err != nil {
		t.Fatal(err)
	}
	r.done <- nil // for the cleanup
	for _, dev := range r.h.Devices() {
		if dev.Driver() != sim.DriverNetvsc || dev.IfName() == "" {
			t.Fatalf("after stop: %s has %q", dev.Instance(), dev.Driver())
		}
	}
	if got := r.notes.list(); got[len(got)-1] != "STOPPING=1" {
		t.Fatalf("notifications %v, want STOPPING=1 last", got)
	}
	// Each NIC was closed only once its peer had stopped sending into it.
	if v := r.h.Violations(); len(v) != 0 {
		t.Fatalf("the host counted violations: %v", v)
	}
}

func TestHostFaultResetsOnlyThatNIC(t *testing.T) {
	r := newRig(t)
	r.start(t)
	waitFor(t, "traffic", func() bool { return forwarded(r) > 500 })
	r.a.SetFault(sim.NICFaultXferPageSet, true)
	waitFor(t, "eth1 to reset after the fault", func() bool { return r.nicState("eth1").Resets > 0 })
	waitFor(t, "eth1 up again", func() bool { return r.nicState("eth1").State == "up" })
	before := forwarded(r)
	waitFor(t, "traffic after the reset", func() bool { return forwarded(r) > before+500 })
	if r.nicState("eth2").Resets != 0 {
		t.Fatalf("eth2 reset too: %+v", r.nicState("eth2"))
	}
	var viol uint64
	for _, n := range r.d.Stats().NICs {
		if n.Name == "eth1" {
			for k, v := range n.Violations {
				if strings.Contains(k, "netvsc") {
					viol += v
				}
			}
		}
	}
	if viol == 0 {
		t.Fatalf("no protocol violation counted: %+v", r.d.Stats().NICs)
	}
}

func TestRescindedNICIsPickedUpWhenReoffered(t *testing.T) {
	r := newRig(t)
	r.start(t)
	waitFor(t, "traffic", func() bool { return forwarded(r) > 500 })
	inst := r.a.Device().Instance()
	if err := r.a.Remove(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "eth1 to wait for the device", func() bool {
		s := r.nicState("eth1")
		return s.Rescinds == 1 && s.State == "waiting for the device"
	})
	// The host offers it again: a new device, bound to hv_netvsc again.
	gen := sim.NewGenerator(sim.GeneratorConfig{Flows: 8, Rate: 20000})
	defer gen.Close()
	n := r.addNIC(t, "eth1", inst)
	n.Attach(gen)
	waitFor(t, "eth1 up again", func() bool { return r.nicState("eth1").State == "up" })
	before := forwarded(r)
	waitFor(t, "traffic after the re-offer", func() bool { return forwarded(r) > before+500 })
}

func TestWatchdogPingsWhileAlive(t *testing.T) {
	t.Setenv("WATCHDOG_USEC", "300000")
	t.Setenv("WATCHDOG_PID", itoa(os.Getpid()))
	r := newRig(t)
	r.start(t)
	waitFor(t, "watchdog pings", func() bool {
		n := 0
		for _, s := range r.notes.list() {
			if s == "WATCHDOG=1" {
				n++
			}
		}
		return n >= 3
	})
}

func TestReadyzListsNICsThatAreDown(t *testing.T) {
	r := newRig(t)
	r.start(t)
	waitFor(t, "both up", func() bool { return r.nicState("eth1").State == "up" && r.nicState("eth2").State == "up" })
	addr := r.d.MetricsAddr()
	if code, _ := get(t, addr, "/readyz"); code != 200 {
		t.Fatalf("/readyz %d with both NICs up", code)
	}
	r.a.Remove()
	waitFor(t, "eth1 down", func() bool { return r.nicState("eth1").State != "up" })
	code, body := get(t, addr, "/readyz")
	if code != 503 || !strings.Contains(body, "eth1") {
		t.Fatalf("/readyz %d %q, want 503 naming eth1", code, body)
	}
}

func get(t *testing.T, addr, path string) (int, string) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("GET " + path + " HTTP/1.0\r\n\r\n"))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b []byte
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		b = append(b, buf[:n]...)
		if err != nil {
			break
		}
	}
	s := string(b)
	code := 0
	if len(s) > 12 {
		code = atoi(s[9:12])
	}
	_, body, _ := strings.Cut(s, "\r\n\r\n")
	return code, body
}
