package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/internal/config"
	"github.com/vmbusd/vmbusd/internal/daemon"
	"github.com/vmbusd/vmbusd/sim"
)

// statusNote waits for a STATUS= notification containing want.
func (r *rig) statusNote(t *testing.T, want string) string {
	t.Helper()
	var got string
	waitFor(t, "STATUS= with "+want, func() bool {
		for _, s := range r.notes.list() {
			if strings.HasPrefix(s, "STATUS=") && strings.Contains(s, want) {
				got = s
				return true
			}
		}
		return false
	})
	return got
}

func isReady(d *daemon.Daemon) bool {
	select {
	case <-d.Ready():
		return true
	default:
		return false
	}
}

// TestConfigurationErrorsFailWithoutResetting: an error no retry can fix
// (an MTU the driver refuses, a network namespace that does not exist)
// leaves the NIC failed, with the reason, without binding it and without a
// reset loop; READY=1 waits for every device, and STATUS= says why.
func TestConfigurationErrorsFailWithoutResetting(t *testing.T) {
	tests := []struct {
		name string
		edit func(*config.NIC)
		want string
	}{
		{"MTU the driver refuses", func(n *config.NIC) { n.MTU = 9500 }, "MTU 9500 outside 68..9202"},
		{"missing network namespace", func(n *config.NIC) {
			n.Attach, n.Peer, n.TAP = config.AttachTAP, "", "vmbust0"
			n.NetNS = fmt.Sprintf("vmbusd-missing-%d", os.Getpid())
		}, "does not exist"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			r.noWaitReady = true
			cfg := r.config()
			tc.edit(&cfg.NICs[0])
			r.startWith(t, cfg)
			waitFor(t, "eth1 failed", func() bool { return r.nicState("eth1").State == "failed" })
			st := r.nicState("eth1")
			if !strings.Contains(st.Error, tc.want) || st.Resets != 0 {
				t.Fatalf("eth1: %+v, want failed with %q and no reset", st, tc.want)
			}
			if drv := r.a.Device().Driver(); drv != sim.DriverNetvsc {
				t.Fatalf("eth1 was bound (%s) although its configuration cannot work", drv)
			}
			if note := r.statusNote(t, "1 of 2 devices up; not up: eth1: failed ("); !strings.Contains(note, tc.want) {
				t.Fatalf("status %q does not say why", note)
			}
			if isReady(r.d) || slices.Contains(r.notes.list(), "READY=1") {
				t.Fatal("READY=1 with a NIC failed")
			}
			if st := r.nicState("eth1"); st.Resets != 0 || st.State != "failed" {
				t.Fatalf("eth1 later: %+v", st)
			}
			code, body := get(t, r.d.MetricsAddr(), "/metrics")
			if code != 200 || !strings.Contains(body, `vmbusd_netvsc_failed{device="eth1"} 1`) ||
				!strings.Contains(body, `vmbusd_netvsc_failed{device="eth2"} 0`) {
				t.Fatalf("/metrics %d lacks the failed gauge:\n%.3000s", code, body)
			}
			code, body = get(t, r.d.MetricsAddr(), "/readyz")
			if code != 503 || !strings.Contains(body, tc.want) {
				t.Fatalf("/readyz %d %q", code, body)
			}
		})
	}
}

// TestReadyAnyNamesTheDevicesNotUp: with ready = "any", READY=1 comes with
// the first device up, and STATUS= names the others.
func TestReadyAnyNamesTheDevicesNotUp(t *testing.T) {
	r := newRig(t)
	cfg := r.config()
	cfg.Ready = config.ReadyAny
	cfg.NICs[0].MTU = 9500
	r.startWith(t, cfg)
	r.statusNote(t, "not up: eth1: failed")
	if !isReady(r.d) {
		t.Fatal("not ready with eth2 up and ready = any")
	}
}

// TestBringUpViolationIsCounted: a host that breaks the protocol while the
// NIC comes up gets it reset like any other violation, and counted.
func TestBringUpViolationIsCounted(t *testing.T) {
	r := newRig(t)
	clk := r.useFakeClock()
	r.noWaitReady = true // not ready until eth3's backoff ends
	// A third NIC whose host announces a malformed receive buffer once.
	bad := r.addNICWith(t, sim.NICConfig{IfName: "eth3", MaxQueues: 1, Faults: []sim.NICFault{sim.NICFaultRecvSections}})
	bad.Attach(sim.NewReflector())
	cfg := r.config()
	cfg.NICs = append(cfg.NICs, config.NIC{Device: "eth3", Attach: config.AttachForward, Peer: "eth1"})
	r.startWith(t, cfg)
	advanceTimer(t, clk, 500*time.Millisecond) // the first reset's backoff
	waitFor(t, "eth3 up after the reset", func() bool {
		st := r.nicState("eth3")
		return st.State == "up" && st.Resets > 0
	})
	if st := r.nicState("eth3"); st.Resets != 1 {
		t.Fatalf("eth3: %+v, want one reset", st)
	}
	var viol uint64
	for _, n := range r.d.Stats().NICs {
		if n.Name == "eth3" {
			for k, v := range n.Violations {
				if strings.HasPrefix(k, "netvsc_") {
					viol += v
				}
			}
		}
	}
	if viol == 0 || bad.FaultHits(sim.NICFaultRecvSections) == 0 {
		t.Fatalf("bring-up violation not counted: %+v (fault hits %d)", r.d.Stats().NICs, bad.FaultHits(sim.NICFaultRecvSections))
	}
	_, body := get(t, r.d.MetricsAddr(), "/metrics")
	if !strings.Contains(body, `vmbusd_netvsc_protocol_violations_total{check="netvsc_`) {
		t.Fatalf("metrics lack the violation")
	}
}

// TestRescindWaitIsEventDriven: with the fallback rescan never due (the
// supervisors' clock does not move), a rescinded NIC comes back as soon
// as the host offers it again (the devices directory changed).
func TestRescindWaitIsEventDriven(t *testing.T) {
	r := newRig(t)
	r.useFakeClock()
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
	gen := sim.NewGenerator(sim.GeneratorConfig{Flows: 8, Rate: 20000})
	defer gen.Close()
	n := r.addNIC(t, "eth1", inst)
	n.Attach(gen)
	waitFor(t, "eth1 up again", func() bool { return r.nicState("eth1").State == "up" })
	before := forwarded(r)
	waitFor(t, "traffic after the re-offer", func() bool { return forwarded(r) > before+500 })
}

// pair is two simulated NICs forwarded to each other by the daemon: a
// generator feeds the first, a sink counts what the second sends.
type pair struct {
	a, b      string
	gen, sink *sim.Generator
}

func (r *rig) addPair(t *testing.T, a, b string) pair {
	t.Helper()
	p := pair{a: a, b: b, gen: sim.NewGenerator(sim.GeneratorConfig{Flows: 8, Rate: 20000}),
		sink: sim.NewGenerator(sim.GeneratorConfig{Idle: true})}
	t.Cleanup(func() { p.gen.Close() })
	r.addNICWith(t, sim.NICConfig{IfName: a, MaxQueues: 2}).Attach(p.gen)
	r.addNICWith(t, sim.NICConfig{IfName: b, MaxQueues: 2}).Attach(p.sink)
	return p
}

func (p pair) nics(queues int) []config.NIC {
	return []config.NIC{
		{Device: p.a, Queues: queues, Attach: config.AttachForward, Peer: p.b},
		{Device: p.b, Queues: queues, Attach: config.AttachForward, Peer: p.a},
	}
}

// TestReloadTouchesOnlyWhatChanged: a reload restarts the NICs whose
// settings changed, starts the new ones and stops the removed ones (giving
// their devices back), while the unchanged pair keeps forwarding on the
// same incarnation throughout.
func TestReloadTouchesOnlyWhatChanged(t *testing.T) {
	r := newRig(t) // eth1 -> eth2: unchanged throughout
	b := r.addPair(t, "eth3", "eth4")
	cfg := r.config()
	cfg.NICs = append(cfg.NICs, b.nics(2)...)
	r.startWith(t, cfg)
	waitFor(t, "traffic on both pairs", func() bool { return forwarded(r) > 500 && b.sink.Stats().Received > 500 })
	since := r.nicState("eth1").Since

	// Change: eth3/eth4 to one queue; add a forward.
	cfg2 := cfg
	cfg2.NICs = append(r.config().NICs, b.nics(1)...)
	cfg2.HvSock = []config.HvSock{{Listen: config.Addr{Network: "tcp", Address: "127.0.0.1:0"}, ToPort: 5000, MaxConnections: 4}}
	before := forwarded(r)
	ch, err := r.d.Reload(context.Background(), cfg2)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ch.Changed, []string{"eth3", "eth4"}) || !slices.Equal(ch.Unchanged, []string{"eth1", "eth2"}) ||
		len(ch.Added) != 1 || len(ch.Removed) != 0 {
		t.Fatalf("changes %+v", ch)
	}
	waitFor(t, "eth3 and eth4 up with one queue", func() bool {
		s3, s4 := r.nicState("eth3"), r.nicState("eth4")
		return s3.State == "up" && s3.Queues == 1 && s4.State == "up" && s4.Queues == 1
	})
	waitFor(t, "the forward listening", func() bool {
		st := r.d.Status()
		return len(st.HvSock) == 1 && st.HvSock[0].Listening
	})
	waitFor(t, "traffic on the unchanged pair after the reload", func() bool { return forwarded(r) > before+500 })
	for _, n := range []string{"eth1", "eth2"} {
		if st := r.nicState(n); st.State != "up" || st.Resets != 0 {
			t.Fatalf("%s touched by the reload: %+v", n, st)
		}
	}
	if r.nicState("eth1").Since != since {
		t.Fatal("eth1 was restarted by the reload")
	}

	// Remove eth3/eth4 and the forward: their devices go back.
	before = forwarded(r)
	ch, err = r.d.Reload(context.Background(), r.config())
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ch.Removed)
	if len(ch.Removed) != 3 || !slices.Contains(ch.Removed, "eth3") || !slices.Contains(ch.Removed, "eth4") {
		t.Fatalf("changes %+v", ch)
	}
	var given []string
	for _, dev := range r.h.Devices() {
		if dev.Driver() == sim.DriverNetvsc {
			given = append(given, dev.IfName())
		}
	}
	slices.Sort(given)
	if !slices.Equal(given, []string{"eth3", "eth4"}) {
		t.Fatalf("NICs back with hv_netvsc after the reload: %v, want eth3 and eth4", given)
	}
	if st := r.d.Status(); len(st.NICs) != 2 || len(st.HvSock) != 0 {
		t.Fatalf("status after removing: %+v", st)
	}
	waitFor(t, "traffic on the unchanged pair after the second reload", func() bool { return forwarded(r) > before+500 })
	if r.nicState("eth1").Since != since {
		t.Fatal("eth1 was restarted by the second reload")
	}
	if v := r.h.Violations(); len(v) != 0 {
		t.Fatalf("the host counted violations: %v", v)
	}
}

// TestReloadRefusals: settings that shape the process, and a file naming
// one device twice, are refused, and nothing is applied.
func TestReloadRefusals(t *testing.T) {
	r := newRig(t)
	r.start(t)
	cases := []struct {
		name string
		edit func(*config.Config)
		want string
	}{
		{"root", func(c *config.Config) { c.Root = "/elsewhere" }, "root"},
		{"metrics", func(c *config.Config) { c.Metrics.MaxConnections = 7 }, "metrics"},
		{"same device twice", func(c *config.Config) {
			c.NICs = append(c.NICs, config.NIC{Device: r.a.Device().Instance().String(), Attach: config.AttachForward, Peer: "eth2"})
		}, "same device"},
	}
	for _, tc := range cases {
		cfg := r.config()
		tc.edit(&cfg)
		if _, err := r.d.Reload(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
	if st := r.d.Status(); len(st.NICs) != 2 || st.NICs[0].State != "up" || st.NICs[0].Resets != 0 {
		t.Fatalf("after refused reloads: %+v", st.NICs)
	}
}

// TestReloadRetriesAFailedNIC: an unchanged failed NIC is started again by
// a reload (its namespace may exist now); a fixed one comes up.
func TestReloadRetriesAFailedNIC(t *testing.T) {
	r := newRig(t)
	r.noWaitReady = true
	cfg := r.config()
	cfg.NICs[0].MTU = 9500
	r.startWith(t, cfg)
	waitFor(t, "eth1 failed", func() bool { return r.nicState("eth1").State == "failed" })
	// eth1 can fail before Run has finished starting; Reload refuses until
	// then (ErrNotRunning, nothing applied), so try again.
	var ch daemon.Changes
	var err error
	waitFor(t, "the daemon to take a reload", func() bool {
		ch, err = r.d.Reload(context.Background(), cfg)
		return !errors.Is(err, daemon.ErrNotRunning)
	})
	if err != nil || !slices.Equal(ch.Restarted, []string{"eth1"}) {
		t.Fatalf("reload: %+v %v", ch, err)
	}
	cfg.NICs[0].MTU = 1500
	ch, err = r.d.Reload(context.Background(), cfg)
	if err != nil || !slices.Equal(ch.Changed, []string{"eth1"}) {
		t.Fatalf("reload: %+v %v", ch, err)
	}
	waitFor(t, "eth1 up", func() bool { return r.nicState("eth1").State == "up" })
	select {
	case <-r.d.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("no READY=1 once every device is up")
	}
}

// framePort is a vSwitch port that delivers the frames a test gives it and
// keeps the ones the guest sends.
type framePort struct {
	mu  sync.Mutex
	up  sim.Uplink
	got [][]byte
}

func (p *framePort) Connect(up sim.Uplink) error {
	p.mu.Lock()
	p.up = up
	p.mu.Unlock()
	return nil
}

func (p *framePort) Transmit(frames [][]byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range frames {
		p.got = append(p.got, append([]byte(nil), f...))
	}
}

func (p *framePort) Close() error { return nil }

func (p *framePort) deliver(f []byte) int {
	p.mu.Lock()
	up := p.up
	p.mu.Unlock()
	return up.Deliver([][]byte{f})
}

func (p *framePort) frames() [][]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.got)
}

// TestJumboFramesGoGPADirectAndArriveIntact: with MTU 9000 the daemon
// gives each NIC a pool in the simulated guest memory, and a 9014-byte
// frame forwarded from one NIC to the other reaches the host byte for
// byte, sent GPA-direct, not cut into fragments.
func TestJumboFramesGoGPADirectAndArriveIntact(t *testing.T) {
	r := &rig{notes: &notes{}}
	root, err := os.MkdirTemp("/dev/shm", "vmbusd-daemon-")
	if err != nil {
		root = t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if r.h, err = sim.New(sim.Config{Root: root}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.h.Close() })
	r.root = root
	in, out := &framePort{}, &framePort{}
	r.a = r.addNICWith(t, sim.NICConfig{IfName: "eth1", MaxQueues: 1, MTU: 9000, RecvSectionSize: sim.RecvSectionFromMTU})
	r.b = r.addNICWith(t, sim.NICConfig{IfName: "eth2", MaxQueues: 1, MTU: 9000, RecvSectionSize: sim.RecvSectionFromMTU})
	r.a.Attach(in)
	r.b.Attach(out)
	cfg := r.config()
	for i := range cfg.NICs {
		cfg.NICs[i].MTU, cfg.NICs[i].Queues = 9000, 1
	}
	r.startWith(t, cfg)
	for _, n := range r.d.Status().NICs {
		if n.GPAPool != "sim" || n.MTU != 9000 {
			t.Fatalf("%s: %+v, want MTU 9000 with a pool in the simulated guest memory", n.Name, n)
		}
	}
	frame := make([]byte, 9014)
	copy(frame, r.a.MAC()) // to eth1, which forwards it as it is
	copy(frame[6:], []byte{0x02, 0, 0, 0, 0, 9})
	frame[12], frame[13] = 0x88, 0xb5 // local experimental EtherType: no offload touches it
	for i := 14; i < len(frame); i++ {
		frame[i] = byte(i * 7)
	}
	const n = 64
	sent := 0
	waitFor(t, "the frames delivered", func() bool {
		if sent < n {
			sent += in.deliver(frame)
		}
		return sent == n
	})
	waitFor(t, "the frames at the host", func() bool { return len(out.frames()) >= n })
	for i, f := range out.frames() {
		if !slices.Equal(f, frame) {
			t.Fatalf("frame %d: %d bytes, not the %d sent", i, len(f), len(frame))
		}
	}
	var st daemon.QueueStats
	for _, nic := range r.d.Stats().NICs {
		if nic.Name == "eth2" {
			st = nic.Queues[0]
		}
	}
	if st.TxGPA < n || st.TxSegmented != 0 {
		t.Fatalf("eth2 sent %d GPA-direct, %d segmented; want %d GPA-direct and none cut", st.TxGPA, st.TxSegmented, n)
	}
}

// TestCapturesAreBounded: at most max_captures run at once (the next is
// refused with a reason), and a capture whose client stops reading ends
// when its write deadline passes, freeing its slot.
func TestCapturesAreBounded(t *testing.T) {
	r := newRig(t)
	cfg := r.config()
	cfg.Control.MaxCaptures = 2
	cfg.Control.RequestTimeout = time.Second
	r.startWith(t, cfg)
	waitFor(t, "traffic", func() bool { return forwarded(r) > 500 })
	var held []net.Conn
	for range 2 {
		c := dialControl(t, cfg.Control.Socket)
		held = append(held, c)
		fmt.Fprintf(c, "GET /v1/capture?device=eth1 HTTP/1.1\r\nHost: x\r\n\r\n")
		// Read the headers only; never read again.
		buf := make([]byte, 512)
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if n, err := c.Read(buf); err != nil || !strings.Contains(string(buf[:n]), "200 OK") {
			t.Fatalf("capture: %q %v", buf[:n], err)
		}
	}
	c := dialControl(t, cfg.Control.Socket)
	fmt.Fprintf(c, "GET /v1/capture?device=eth1 HTTP/1.1\r\nHost: x\r\n\r\n")
	buf := make([]byte, 512)
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	n, _ := c.Read(buf)
	if !strings.Contains(string(buf[:n]), "503") || !strings.Contains(string(buf[:n]), "max_captures") {
		t.Fatalf("third capture: %q", buf[:n])
	}
	// The silent captures end once their writes block past the deadline.
	waitFor(t, "the unread captures to end", func() bool {
		_, body := get(t, r.d.MetricsAddr(), "/metrics")
		return strings.Contains(body, "vmbusd_daemon_captures_active 0") &&
			strings.Contains(body, "vmbusd_daemon_captures_refused_total 1")
	})
	for _, c := range held {
		c.Close()
	}
}

func dialControl(t *testing.T, path string) net.Conn {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestEveryEndpointChecksItsMethod: PUT, POST and DELETE get 405.
func TestEveryEndpointChecksItsMethod(t *testing.T) {
	r := newRig(t)
	r.start(t)
	for _, path := range []string{"/metrics", "/healthz", "/readyz", "/"} {
		for _, m := range []string{"PUT", "POST", "DELETE"} {
			if code := request(t, "tcp", r.d.MetricsAddr(), m, path); code != 405 {
				t.Errorf("%s %s: %d, want 405", m, path, code)
			}
		}
	}
	sock := r.config().Control.Socket
	for _, path := range []string{"/v1/status", "/v1/stats", "/v1/capture"} {
		if code := request(t, "unix", sock, "PUT", path); code != 405 {
			t.Errorf("PUT %s: %d, want 405", path, code)
		}
	}
	if code := request(t, "tcp", r.d.MetricsAddr(), "GET", "/metrics"); code != 200 {
		t.Fatalf("GET /metrics: %d", code)
	}
}

// request sends one bodiless request and returns the status code.
func request(t *testing.T, network, addr, method, path string) int {
	t.Helper()
	c, err := net.Dial(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "%s %s HTTP/1.0\r\nContent-Length: 0\r\n\r\n", method, path)
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	buf := make([]byte, 64)
	n, _ := c.Read(buf)
	if n < 12 {
		return 0
	}
	return atoi(string(buf[9:12]))
}

// TestStateDirDefaultsUnderTheRoot: without state_dir, records go to
// ROOT/run/vmbusd, not the host's /run/vmbusd.
func TestStateDirDefaultsUnderTheRoot(t *testing.T) {
	r := newRig(t)
	cfg := r.config()
	cfg.StateDir = ""
	r.startWith(t, cfg)
	recs, _ := filepath.Glob(filepath.Join(r.root, "run/vmbusd/bind-*.json"))
	if len(recs) != 2 {
		t.Fatalf("records under the root: %v", recs)
	}
	if _, err := os.Stat(filepath.Join(r.root, "run/vmbusd/vmbusd.lock")); err != nil {
		t.Fatalf("owner lock under the root: %v", err)
	}
}

// TestRepeatedEventsAreRateLimitedInTheLog: a client the daemon refuses
// again and again gets at most rate_limit log lines per interval.
func TestRepeatedEventsAreRateLimitedInTheLog(t *testing.T) {
	r := newRig(t)
	cfg := r.config()
	cfg.Log.RateLimit, cfg.Log.RateInterval = 2, time.Hour
	cfg.Metrics.MaxConnections = 1
	r.startWith(t, cfg)
	held, err := net.Dial("tcp", r.d.MetricsAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	for range 50 {
		c, err := net.Dial("tcp", r.d.MetricsAddr())
		if err != nil {
			continue
		}
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		c.Read(make([]byte, 1)) // closed by the daemon
		c.Close()
	}
	waitFor(t, "the refusals counted", func() bool {
		return strings.Count(r.logs.String(), "metrics connection refused") >= 2
	})
	if n := strings.Count(r.logs.String(), "metrics connection refused"); n != 2 {
		t.Fatalf("%d log lines for 50 refusals, want 2", n)
	}
}
