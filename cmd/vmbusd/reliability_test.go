package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
	nic := func(dev, peer string) string {
		return fmt.Sprintf("\n[[nic]]\ndevice = %q\nattach = \"forward\"\npeer = %q\nqueues = 2\n%s", dev, peer, strings.Join(extra, "\n"))
	}
	return fmt.Sprintf(`root = %q

[metrics]
listen = %q

[control]
socket = %q
`, root, metrics, filepath.Join(root, "run/vmbusd/control.sock")) + nic("eth1", "eth2") + nic("eth2", "eth1")
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
		t.Fatalf("vmbusd run did not stop on %v", sig)
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

// waitTraffic waits until every NIC received more frames than in before.
func (d *daemonProc) waitTraffic(t *testing.T, what string, before map[string]uint64) map[string]uint64 {
	t.Helper()
	var now map[string]uint64
	waitUntil(t, what, 60*time.Second, func() bool {
		now = d.rxTotal(t)
		for _, n := range []string{"eth1", "eth2"} {
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
