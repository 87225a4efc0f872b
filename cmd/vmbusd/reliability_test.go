package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/internal/daemon"
)

// The operator's reliability suite, run against the vmbusd binary and a
// simulated host in its own process, as in production: ownership, signals,
// crash recovery. Two NICs forwarded to each other need no TAP, so these
// run without root.

// forwardConfig is a daemon configuration for eth1 <-> eth2 under root,
// with extra appended to each [[nic]] (e.g. "mtu = 9000").
func forwardConfig(root, metrics string, extra ...string) string {
	return pairsConfig(root, metrics, fwdPair{"eth1", "eth2", strings.Join(extra, "\n")})
}

// fwdPair is two NICs forwarded to each other, with extra settings.
type fwdPair struct{ a, b, extra string }

func pairsConfig(root, metrics string, pairs ...fwdPair) string {
	nic := func(dev, peer, extra string) string {
		if !strings.Contains(extra, "queues") {
			extra += "\nqueues = 2"
		}
		return fmt.Sprintf("\n[[nic]]\ndevice = %q\nattach = \"forward\"\npeer = %q\n%s\n", dev, peer, extra)
	}
	s := fmt.Sprintf(`root = %q

[metrics]
listen = %q

[control]
socket = %q
`, root, metrics, filepath.Join(root, "run/vmbusd/control.sock"))
	for _, p := range pairs {
		s += nic(p.a, p.b, p.extra) + nic(p.b, p.a, p.extra)
	}
	return s
}

// startRun starts `vmbusd run --config path` with extra flags.
func startRun(t *testing.T, root, path string, extra ...string) *daemonProc {
	t.Helper()
	d := &daemonProc{control: filepath.Join(root, "run/vmbusd/control.sock"), stderr: &bytes.Buffer{}}
	d.cmd = exec.Command(vmbusdBin, append([]string{"run", "--config", path}, extra...)...)
	d.cmd.Stderr = &syncWriter{b: d.stderr}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d.waitDone = make(chan error, 1)
	go func() { d.waitDone <- d.cmd.Wait() }()
	t.Cleanup(func() {
		d.cmd.Process.Kill()
		if t.Failed() {
			t.Logf("vmbusd run stderr:\n%s", d.log())
		}
	})
	return d
}

func (d *daemonProc) log() string {
	if w, ok := d.cmd.Stderr.(*syncWriter); ok {
		return w.String()
	}
	return d.stderr.String()
}

// stop sends sig and waits for the exit code.
func (d *daemonProc) stop(t *testing.T, sig syscall.Signal) int {
	t.Helper()
	d.cmd.Process.Signal(sig)
	select {
	case err := <-d.waitDone:
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(60 * time.Second):
		// SIGQUIT makes the Go runtime print every goroutine's stack to
		// stderr and exit: the log then shows what the daemon waits for.
		d.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-d.waitDone:
		case <-time.After(10 * time.Second):
		}
		// The cleanup logs stderr, the dump included.
		t.Fatalf("vmbusd run did not stop on %v; sent SIGQUIT for a goroutine dump", sig)
	}
	return -1
}

func (d *daemonProc) allUp(t *testing.T, n int) bool {
	st := d.status(t)
	if len(st.NICs) != n {
		return false
	}
	for _, s := range st.NICs {
		if s.State != "up" {
			return false
		}
	}
	return true
}

// rxTotal sums the frames every NIC received, from `vmbusd stats`.
func (d *daemonProc) rxTotal(t *testing.T) map[string]uint64 {
	var st daemon.Stats
	out, _, _ := vmbusd(t, "stats", "--control", d.control, "--json")
	if json.Unmarshal([]byte(out), &st) != nil {
		return nil
	}
	m := map[string]uint64{}
	for _, n := range st.NICs {
		for _, q := range n.Queues {
			m[n.Name] += q.RxPackets
		}
	}
	return m
}

// waitTraffic waits until every NIC (eth1 and eth2 unless named) received
// more frames than in before.
func (d *daemonProc) waitTraffic(t *testing.T, what string, before map[string]uint64, nics ...string) map[string]uint64 {
	t.Helper()
	if len(nics) == 0 {
		nics = []string{"eth1", "eth2"}
	}
	var now map[string]uint64
	waitUntil(t, what, 60*time.Second, func() bool {
		now = d.rxTotal(t)
		for _, n := range nics {
			if now[n] <= before[n]+100 {
				return false
			}
		}
		return true
	})
	return now
}

// TestCLIOwnership: a second `vmbusd run`, a `restore` (with or without
// --force) and an `unbind` of a driven device, while the daemon runs, all
// exit 3 at once and touch nothing: the daemon's NICs keep carrying
// traffic and the host counts no violation. After the daemon stopped, the
// records are gone and restore has nothing to do.
func TestCLIOwnership(t *testing.T) {
	root := shmDirT(t)
	stopSim := startSim(t, root, "--nic", "2", "--queues", "2")
	path := filepath.Join(root, "vmbusd.toml")
	os.WriteFile(path, []byte(forwardConfig(root, freePort(t))), 0o644)
	d := startRun(t, root, path)
	waitUntil(t, "both NICs up", 60*time.Second, func() bool { return d.allUp(t, 2) })
	rx := d.waitTraffic(t, "traffic", nil)

	tests := []struct {
		args []string
		want string
	}{
		{[]string{"run", "--config", path}, "busy: `vmbusd run` (pid"},
		{[]string{"restore", "--root", root}, "stop it first"},
		{[]string{"restore", "--root", root, "--force"}, "--force does not override a live owner"},
		{[]string{"unbind", "--root", root, "eth1"}, "refusing to unbind eth1, which it drives"},
		{[]string{"bind", "--root", root, "eth2"}, "busy"},
	}
	for _, tc := range tests {
		_, errs, code := vmbusd(t, tc.args...)
		if code != 3 || !strings.Contains(errs, tc.want) {
			t.Fatalf("vmbusd %s: exit %d, stderr %q; want exit 3 with %q", strings.Join(tc.args, " "), code, errs, tc.want)
		}
	}
	d.waitTraffic(t, "traffic after the refusals", rx)
	st := d.status(t)
	for _, n := range st.NICs {
		if n.State != "up" || n.Resets != 0 || n.Rescinds != 0 {
			t.Fatalf("%s after the refusals: %+v", n.Name, n)
		}
	}
	if code := d.stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM: exit %d", code)
	}
	if _, err := os.Lstat(d.control); !os.IsNotExist(err) {
		t.Fatalf("control socket left after SIGTERM: %v", err)
	}
	if out := mustVmbusd(t, "restore", "--root", root); !strings.Contains(out, "nothing to restore") {
		t.Fatalf("restore after a clean stop: %q", out)
	}
	if out := stopSim(); !strings.Contains(out, "guest violations total 0") {
		t.Fatalf("simulated host reported:\n%s", out)
	}
}

// nicStatus returns the named NIC's status.
func (d *daemonProc) nicStatus(t *testing.T, name string) daemon.NICStatus {
	for _, n := range d.status(t).NICs {
		if n.Name == name {
			return n
		}
	}
	return daemon.NICStatus{}
}

// TestCLIReloadOnSIGHUP: kill -HUP with an edited file restarts the
// changed pair only; the unchanged pair keeps forwarding on the same
// incarnation. Every signal is logged, and the daemon survives SIGHUP.
func TestCLIReloadOnSIGHUP(t *testing.T) {
	root := shmDirT(t)
	stopSim := startSim(t, root, "--nic", "4", "--queues", "2")
	path := filepath.Join(root, "vmbusd.toml")
	metrics := freePort(t)
	os.WriteFile(path, []byte(pairsConfig(root, metrics, fwdPair{"eth1", "eth2", ""}, fwdPair{"eth3", "eth4", ""})), 0o644)
	d := startRun(t, root, path)
	waitUntil(t, "four NICs up", 60*time.Second, func() bool { return d.allUp(t, 4) })
	rx := d.waitTraffic(t, "traffic", nil, "eth1", "eth2", "eth3", "eth4")
	since := d.nicStatus(t, "eth1").Since

	// Edit: the second pair to one queue each.
	os.WriteFile(path, []byte(pairsConfig(root, metrics, fwdPair{"eth1", "eth2", ""}, fwdPair{"eth3", "eth4", "queues = 1"})), 0o644)
	d.cmd.Process.Signal(syscall.SIGHUP)
	waitUntil(t, "the reload logged", 60*time.Second, func() bool {
		return strings.Contains(d.log(), "configuration reloaded")
	})
	logText := d.log()
	for _, want := range []string{"signal received", "signal=hangup", "changed eth3, eth4", "unchanged eth1, eth2"} {
		if !strings.Contains(logText, want) {
			t.Fatalf("log lacks %q:\n%s", want, logText)
		}
	}
	waitUntil(t, "eth3 and eth4 up with one queue", 60*time.Second, func() bool {
		return d.nicStatus(t, "eth3").Queues == 1 && d.nicStatus(t, "eth4").Queues == 1 && d.allUp(t, 4)
	})
	d.waitTraffic(t, "traffic after the reload", rx, "eth1", "eth2", "eth3", "eth4")
	if st := d.nicStatus(t, "eth1"); !st.Since.Equal(since) || st.Resets != 0 {
		t.Fatalf("eth1 was restarted by the reload: %+v (up since %v before)", st, since)
	}

	// A file that does not validate changes nothing.
	os.WriteFile(path, []byte("[[nic]]\ndevice = \"eth1\"\nmtu = 9500\n"), 0o644)
	d.cmd.Process.Signal(syscall.SIGHUP)
	waitUntil(t, "the refusal logged", 60*time.Second, func() bool {
		return strings.Contains(d.log(), "the configuration file is refused")
	})
	if !d.allUp(t, 4) {
		t.Fatalf("a refused reload changed the NICs: %+v", d.status(t).NICs)
	}
	if code := d.stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM: exit %d", code)
	}
	if !strings.Contains(d.log(), "signal=terminated") {
		t.Fatalf("SIGTERM not logged:\n%s", d.log())
	}
	if out := stopSim(); !strings.Contains(out, "guest violations total 0") {
		t.Fatalf("simulated host reported:\n%s", out)
	}
}

// TestCLIKillThenRestartRestoresExactlyTheLeftovers: after kill -9 the
// next daemon gives back exactly the devices the dead one bound (and
// nothing else), then brings them up again; after another kill -9,
// `vmbusd restore` gives them back and removes the stale control socket.
func TestCLIKillThenRestartRestoresExactlyTheLeftovers(t *testing.T) {
	root := shmDirT(t)
	startSim(t, root, "--nic", "3", "--queues", "2")
	path := filepath.Join(root, "vmbusd.toml")
	os.WriteFile(path, []byte(forwardConfig(root, freePort(t))), 0o644)
	d := startRun(t, root, path)
	waitUntil(t, "both NICs up", 60*time.Second, func() bool { return d.allUp(t, 2) })
	var want []string
	for _, n := range d.status(t).NICs {
		want = append(want, n.Instance)
	}
	slices.Sort(want)
	d.cmd.Process.Kill()
	<-d.waitDone
	recs, _ := filepath.Glob(filepath.Join(root, "run/vmbusd/bind-*.json"))
	if len(recs) != 2 {
		t.Fatalf("records after kill -9: %v", recs)
	}

	d = startRun(t, root, path)
	waitUntil(t, "both NICs up after the restart", 60*time.Second, func() bool { return d.allUp(t, 2) })
	var restored []string
	for _, l := range strings.Split(d.log(), "\n") {
		if strings.Contains(l, "gave back a device left bound by an earlier run") {
			for _, f := range strings.Fields(l) {
				if v, ok := strings.CutPrefix(f, "device="); ok {
					restored = append(restored, v)
				}
			}
		}
	}
	slices.Sort(restored)
	if !slices.Equal(restored, want) {
		t.Fatalf("restored %v, want exactly %v", restored, want)
	}
	for _, dev := range listDevices(t, root) {
		if dev.Interface == "eth3" && dev.Driver != "hv_netvsc" {
			t.Fatalf("eth3, never configured, was touched: %+v", dev)
		}
	}
	d.waitTraffic(t, "traffic after the restart", nil)

	d.cmd.Process.Kill()
	<-d.waitDone
	if _, err := os.Lstat(d.control); err != nil {
		t.Fatalf("kill -9 should leave the socket: %v", err)
	}
	out := mustVmbusd(t, "restore", "--root", root)
	if !strings.Contains(out, "removed the stale control socket") || strings.Count(out, "given back to hv_netvsc") != 2 {
		t.Fatalf("restore said:\n%s", out)
	}
	if _, err := os.Lstat(d.control); !os.IsNotExist(err) {
		t.Fatalf("stale control socket left after restore: %v", err)
	}
}

// TestCLICheckConfig: --check-config validates and checks against the
// system without touching it: 0 when good (warnings allowed), 2 when not.
func TestCLICheckConfig(t *testing.T) {
	root := shmDirT(t)
	startSim(t, root, "--nic", "2")
	write := func(name, text string) string {
		p := filepath.Join(root, name)
		os.WriteFile(p, []byte(text), 0o644)
		return p
	}
	good := write("good.toml", forwardConfig(root, "0.0.0.0:0"))
	guid := listDevices(t, root)[0].Instance
	tests := []struct {
		path string
		code int
		want string
	}{
		{good, 0, "OK (2 NICs"},
		{good, 0, "warning: metrics.listen \"0.0.0.0:0\" is not a loopback address"},
		{write("netns.toml", fmt.Sprintf("root = %q\n[[nic]]\ndevice = \"eth1\"\nnetns = \"vmbusd-none-%d\"\n", root, os.Getpid())),
			2, "error: nic[0].netns: network namespace"},
		{write("missing.toml", fmt.Sprintf("root = %q\n[[nic]]\ndevice = \"eth9\"\n", root)), 2, "error: nic[0].device"},
		{write("twice.toml", fmt.Sprintf("root = %q\n[[nic]]\ndevice = %q\n[[nic]]\ndevice = %q\ntap = \"t1\"\n", root,
			listDevices(t, root)[0].Interface, guid)), 2, "is the same device"},
		{write("invalid.toml", "[[nic]]\ndevice = \"eth1\"\nmtu = 9500\n"), 2, "invalid.toml:3: nic[0].mtu"},
	}
	for _, tc := range tests {
		out, errs, code := vmbusd(t, "run", "--check-config", "--config", tc.path)
		if code != tc.code || !strings.Contains(out+errs, tc.want) {
			t.Fatalf("check %s: exit %d\n%s%s\nwant exit %d with %q", tc.path, code, out, errs, tc.code, tc.want)
		}
	}
	for _, dev := range listDevices(t, root) {
		if dev.Driver != "hv_netvsc" {
			t.Fatalf("--check-config touched %+v", dev)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "run/vmbusd")); !os.IsNotExist(err) {
		t.Fatalf("--check-config created the state directory: %v", err)
	}
}

// TestCLISimRefusesConfigurationFlags: --sim runs its own configuration;
// --config with it is an error, not silently ignored.
func TestCLISimRefusesConfigurationFlags(t *testing.T) {
	for _, args := range [][]string{{"run", "--sim", "--config", "/etc/vmbusd/vmbusd.toml"}, {"run", "--sim", "--root", "/"},
		{"run", "--queues", "4"}} {
		_, errs, code := vmbusd(t, args...)
		if code != 2 || !strings.Contains(errs, "--sim") {
			t.Fatalf("vmbusd %v: exit %d %q, want 2 naming --sim", args, code, errs)
		}
	}
}

// syncWriter is a buffer a child process's output is copied into while the
// test reads it.
type syncWriter struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestCLISIGTERMWhileTheHostIsDown: the simulated host goes away under a
// running daemon; SIGTERM still ends it cleanly and leaves no control
// socket (it was left in 3 of 8 such stops).
func TestCLISIGTERMWhileTheHostIsDown(t *testing.T) {
	for i := range 3 {
		root := shmDirT(t)
		stopSim := startSim(t, root, "--nic", "2", "--queues", "2")
		path := filepath.Join(root, "vmbusd.toml")
		os.WriteFile(path, []byte(forwardConfig(root, freePort(t))), 0o644)
		d := startRun(t, root, path)
		waitUntil(t, "both NICs up", 60*time.Second, func() bool { return d.allUp(t, 2) })
		stopSim()
		waitUntil(t, "the NICs to notice", 60*time.Second, func() bool {
			st := d.status(t)
			return len(st.NICs) == 2 && st.NICs[0].State != "up" && st.NICs[1].State != "up"
		})
		code := d.stop(t, syscall.SIGTERM)
		if _, err := os.Lstat(d.control); !os.IsNotExist(err) {
			t.Fatalf("stop %d (exit %d): control socket left: %v", i, code, err)
		}
		if code != 0 {
			t.Fatalf("stop %d: exit %d", i, code)
		}
	}
}
