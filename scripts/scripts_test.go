// Package scripts_test runs the bring-up scripts against a live simulated
// host's tree (VMBUSD_ROOT), checks what they did, and lints them with
// shellcheck when it is installed. vmbus-bind, vmbus-unbind and vmbus-check
// run both ways: handing over to a vmbusd built from cmd/vmbusd, and with
// their bash fallback (VMBUSD=none); both must leave the same state.
package scripts_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/internal/bind"
	"github.com/vmbusd/vmbusd/internal/owner"
	"github.com/vmbusd/vmbusd/sim"
	"github.com/vmbusd/vmbusd/vmbus"
)

var scripts = []string{"vmbus-bind", "vmbus-unbind", "vmbus-check", "vmbus-hugepages", "vmbus-persist"}

var (
	mgmtNIC = vmbus.MustParseGUID("11111111-2222-4333-8444-555555555555")
	dataNIC = vmbus.MustParseGUID("66666666-7777-4888-9999-aaaaaaaaaaaa")
	dataMAC = net.HardwareAddr{0x00, 0x15, 0x5d, 0xaa, 0xbb, 0xcc}
)

// vmbusdBuild is the vmbusd binary the scripts hand over to, built once
// per test binary into a directory TestMain removes.
var vmbusdBuild struct {
	once      sync.Once
	dir, path string
	out       []byte
	err       error
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "scripts-test-vmbusd-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	vmbusdBuild.dir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// vmbusdBinary builds cmd/vmbusd (once) and returns its path.
func vmbusdBinary(t *testing.T) string {
	t.Helper()
	b := &vmbusdBuild
	b.once.Do(func() {
		// go test puts its own go first on PATH.
		gobin, err := exec.LookPath("go")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(b.dir, "vmbusd")
		b.out, b.err = exec.Command(gobin, "build", "-o", b.path, "github.com/vmbusd/vmbusd/cmd/vmbusd").CombinedOutput()
	})
	if b.err != nil {
		t.Fatalf("building vmbusd: %v\n%s", b.err, b.out)
	}
	return b.path
}

// mode is how vmbus-bind, vmbus-unbind and vmbus-check do their work.
type mode int

const (
	withVmbusd mode = iota // exec the vmbusd binary
	bashOnly               // the bash fallback (VMBUSD=none)
)

var modes = []mode{withVmbusd, bashOnly}

func (m mode) String() string {
	if m == withVmbusd {
		return "vmbusd"
	}
	return "bash"
}

// env is the VMBUSD setting that selects m.
func (m mode) env(t *testing.T) string {
	if m == withVmbusd {
		return "VMBUSD=" + vmbusdBinary(t)
	}
	return "VMBUSD=none"
}

// recordedBy is the "by" of the records m writes.
func (m mode) recordedBy() string {
	if m == withVmbusd {
		return "vmbusd"
	}
	return "vmbus-bind"
}

// bothWays runs f as one subtest per mode, each on a system of its own.
func bothWays(t *testing.T, f func(t *testing.T, s *system)) {
	t.Helper()
	for _, m := range modes {
		t.Run(m.String(), func(t *testing.T) {
			t.Parallel()
			f(t, newSystem(t, m))
		})
	}
}

func requireBash(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash not installed")
	}
}

// result is one script run.
type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%sstderr:\n%s", r.code, r.stdout, r.stderr)
}

// run runs a script with env added to a clean environment (no VMBUSD,
// VMBUSD_*, or SSH_CONNECTION from the test's own session).
func run(t *testing.T, env []string, script string, args ...string) result {
	t.Helper()
	path, err := filepath.Abs(script)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "VMBUSD_") && !strings.HasPrefix(kv, "VMBUSD=") && !strings.HasPrefix(kv, "SSH_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("%s: %v", script, err)
	}
	return r
}

// system is a simulated guest with two kernel NICs: eth0 carries the
// default route, eth1 a data subnet (IPv4 and IPv6). Its env runs the
// scripts in mode m.
type system struct {
	h          *sim.Host
	root       string
	state      string
	mgmt, data *sim.Device
	m          mode
	env        []string
}

func newSystem(t *testing.T, m mode) *system {
	t.Helper()
	requireBash(t)
	root := t.TempDir()
	if d, err := os.MkdirTemp("/dev/shm", "scripts-test-"); err == nil {
		root = d
		t.Cleanup(func() { os.RemoveAll(d) })
	}
	h, err := sim.New(sim.Config{Root: root, Profile: sim.DefaultProfile})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	s := &system{h: h, root: h.Root(), state: filepath.Join(t.TempDir(), "state"), m: m}
	if s.mgmt, err = h.AddDevice(sim.DeviceConfig{Class: vmbus.ClassNetwork, Instance: mgmtNIC, Driver: sim.DriverNetvsc, IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	if s.data, err = h.AddDevice(sim.DeviceConfig{Class: vmbus.ClassNetwork, Instance: dataNIC, Driver: sim.DriverNetvsc, IfName: "eth1", MAC: dataMAC}); err != nil {
		t.Fatal(err)
	}
	err = h.SetRoutes([]sim.Route{
		{Iface: "eth0", Dst: netip.MustParsePrefix("0.0.0.0/0"), Gateway: netip.MustParseAddr("10.0.0.1"), Metric: 100},
		{Iface: "eth0", Dst: netip.MustParsePrefix("10.0.0.0/24"), Metric: 100},
		{Iface: "eth1", Dst: netip.MustParsePrefix("10.1.0.0/24"), Metric: 100},
		{Iface: "eth0", Dst: netip.MustParsePrefix("::/0"), Gateway: netip.MustParseAddr("fe80::1"), Metric: 1024},
		{Iface: "eth1", Dst: netip.MustParsePrefix("fd00:1::/64"), Metric: 256},
	})
	if err != nil {
		t.Fatal(err)
	}
	s.env = []string{"VMBUSD_ROOT=" + s.root, "VMBUSD_STATE_DIR=" + s.state, "VMBUSD_TIMEOUT=5", m.env(t)}
	return s
}

func (s *system) with(env ...string) []string { return append(append([]string(nil), s.env...), env...) }

func wantDriver(t *testing.T, d *sim.Device, drv, ifname string) {
	t.Helper()
	if d.Driver() != drv || d.IfName() != ifname {
		t.Errorf("device %s on %q as %q, want %q as %q", d.Instance(), d.Driver(), d.IfName(), drv, ifname)
	}
}

func wantCode(t *testing.T, r result, code int, what string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("%s: exit %d, want %d\nstdout:\n%sstderr:\n%s", what, r.code, code, r.stdout, r.stderr)
	}
}

func TestShellcheck(t *testing.T) {
	sc, err := exec.LookPath("shellcheck")
	if err != nil {
		t.Skip("shellcheck not installed (CI installs it: apt-get install -y shellcheck)")
	}
	out, err := exec.Command(sc, append([]string{"-x", "vmbus-lib.sh"}, scripts...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("shellcheck: %v\n%s", err, out)
	}
}

func TestEveryScriptHasHelpAndRejectsBadUsage(t *testing.T) {
	requireBash(t)
	for _, m := range modes {
		for _, s := range scripts {
			env := []string{m.env(t), "VMBUSD_ROOT=" + t.TempDir()}
			r := run(t, env, s, "--help")
			if r.code != 0 || !strings.HasPrefix(r.stdout, "Usage: "+s) {
				t.Errorf("%s --help (%s): %v", s, m, r)
			}
			if r := run(t, env, s, "--no-such-option"); r.code != 2 {
				t.Errorf("%s --no-such-option (%s): exit %d, want 2", s, m, r.code)
			}
		}
	}
	// The three that hand over say so, and how to avoid it.
	for _, s := range []string{"vmbus-bind", "vmbus-unbind", "vmbus-check"} {
		r := run(t, nil, s, "--help")
		if !strings.Contains(r.stdout, "vmbusd "+strings.TrimPrefix(s, "vmbus-")+" --root") || !strings.Contains(r.stdout, "VMBUSD=none") {
			t.Errorf("%s --help does not explain the hand-over to vmbusd:\n%s", s, r.stdout)
		}
	}
}

func TestBindAndUnbindRoundTrip(t *testing.T) {
	bothWays(t, func(t *testing.T, s *system) {
		r := run(t, s.env, "vmbus-bind", "eth1")
		wantCode(t, r, 0, "vmbus-bind eth1")
		if !strings.Contains(r.stdout, dataNIC.String()) || !strings.Contains(r.stdout, "uio_hv_generic") {
			t.Errorf("vmbus-bind said %q", r.stdout)
		}
		if s.m == bashOnly && !strings.Contains(r.stdout, "bound "+dataNIC.String()+" (eth1) to uio_hv_generic as uio0") {
			t.Errorf("vmbus-bind (bash) said %q", r.stdout)
		}
		wantDriver(t, s.data, "uio_hv_generic", "")
		node := s.data.UIONode()
		if node == "" {
			t.Fatal("no uio node after vmbus-bind")
		}
		if _, err := os.Stat(node); err != nil || filepath.Dir(node) != filepath.Join(s.root, "dev") {
			t.Errorf("device node %s: %v", node, err)
		}
		// The record is the one internal/bind reads, written by whichever
		// implementation ran.
		rec, err := bind.ReadRecord(s.state, dataNIC)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Device != dataNIC || rec.Class != vmbus.ClassNetwork || rec.OriginalDriver != "hv_netvsc" || rec.Interface != "eth1" ||
			rec.MAC != dataMAC.String() || rec.MTU != 1500 || !rec.Up || rec.By != s.m.recordedBy() || rec.Root != s.root || rec.Time.IsZero() {
			t.Errorf("record %+v", rec)
		}
		// Again: nothing to do, the record stays as it was.
		r = run(t, s.env, "vmbus-bind", dataNIC.String())
		wantCode(t, r, 0, "second vmbus-bind")
		if s.m == bashOnly && !strings.Contains(r.stdout, "already bound") {
			t.Errorf("second vmbus-bind said %q", r.stdout)
		}
		if again, err := bind.ReadRecord(s.state, dataNIC); err != nil || !again.Time.Equal(rec.Time) || again.By != rec.By {
			t.Errorf("record after the second bind: %+v, %v; want it unchanged", again, err)
		}
		wantDriver(t, s.data, "uio_hv_generic", "")
		if s.data.UIONode() != node {
			t.Errorf("uio node %q after the second bind, want %q", s.data.UIONode(), node)
		}

		// By the interface name the record kept (the netdev is gone).
		r = run(t, s.env, "vmbus-unbind", "eth1")
		wantCode(t, r, 0, "vmbus-unbind eth1")
		if !strings.Contains(r.stdout, dataNIC.String()) || !strings.Contains(r.stdout, "hv_netvsc") || !strings.Contains(r.stdout, "eth1") {
			t.Errorf("vmbus-unbind said %q", r.stdout)
		}
		wantDriver(t, s.data, "hv_netvsc", "eth1")
		if _, err := bind.ReadRecord(s.state, dataNIC); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("record after vmbus-unbind: %v", err)
		}
		if ov, _ := os.ReadFile(filepath.Join(s.data.Path(), "driver_override")); string(ov) != "(null)\n" {
			t.Errorf("driver_override %q after vmbus-unbind", ov)
		}
	})
}

func TestBindRefusesTheManagementInterface(t *testing.T) {
	bothWays(t, func(t *testing.T, s *system) {
		r := run(t, s.env, "vmbus-bind", "eth0")
		wantCode(t, r, 1, "vmbus-bind eth0")
		if !strings.Contains(r.stderr, "default route") || !strings.Contains(r.stderr, mgmtNIC.String()) {
			t.Errorf("refusal does not name the device and the reason: %q", r.stderr)
		}
		wantDriver(t, s.mgmt, "hv_netvsc", "eth0")
		if recs, _ := bind.Records(s.state); len(recs) != 0 {
			t.Errorf("records after a refusal: %+v", recs)
		}

		for _, ssh := range []string{"10.1.0.9 50000 10.1.0.4 22", "fd00:1::9 50000 fd00:1::4 22"} {
			r = run(t, s.with("SSH_CONNECTION="+ssh), "vmbus-bind", "eth1")
			wantCode(t, r, 1, "vmbus-bind eth1 during SSH "+ssh)
			if !strings.Contains(r.stderr, "SSH session") {
				t.Errorf("SSH refusal: %q", r.stderr)
			}
		}
		wantDriver(t, s.data, "hv_netvsc", "eth1")

		// Forced; then vmbusd restore (Go) gives back what the script took.
		r = run(t, s.env, "vmbus-bind", "--force", "eth0")
		wantCode(t, r, 0, "vmbus-bind --force eth0")
		wantDriver(t, s.mgmt, "uio_hv_generic", "")
		done, err := bind.Restore(context.Background(), s.root, bind.Options{StateDir: s.state, Timeout: 5 * time.Second})
		if err != nil || len(done) != 1 {
			t.Fatalf("Restore: %+v, %v", done, err)
		}
		wantDriver(t, s.mgmt, "hv_netvsc", "eth0")
	})
}

// TestRecordsWorkAcrossImplementations: what one implementation bound, the
// other gives back (the record and the lock are the contract), including
// a bind made in process by internal/bind.
func TestRecordsWorkAcrossImplementations(t *testing.T) {
	for _, tc := range []struct {
		name     string
		binder   func(t *testing.T, s *system)
		by       string
		unbinder mode
	}{
		{"bash-then-vmbusd", func(t *testing.T, s *system) {
			wantCode(t, run(t, s.with(bashOnly.env(t)), "vmbus-bind", "eth1"), 0, "vmbus-bind eth1 (bash)")
		}, "vmbus-bind", withVmbusd},
		{"vmbusd-then-bash", func(t *testing.T, s *system) {
			wantCode(t, run(t, s.with(withVmbusd.env(t)), "vmbus-bind", "eth1"), 0, "vmbus-bind eth1 (vmbusd)")
		}, "vmbusd", bashOnly},
		{"in-process-then-bash", func(t *testing.T, s *system) {
			if _, err := bind.Bind(context.Background(), s.root, "eth1", bind.Options{StateDir: s.state, Timeout: 5 * time.Second,
				Getenv: func(string) string { return "" }}); err != nil {
				t.Fatal(err)
			}
		}, "vmbusd", bashOnly},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newSystem(t, tc.unbinder)
			tc.binder(t, s)
			wantDriver(t, s.data, "uio_hv_generic", "")
			if rec, err := bind.ReadRecord(s.state, dataNIC); err != nil || rec.By != tc.by {
				t.Fatalf("record %+v, %v; want one by %s", rec, err, tc.by)
			}
			r := run(t, s.env, "vmbus-unbind", "eth1")
			wantCode(t, r, 0, "vmbus-unbind eth1 ("+tc.unbinder.String()+")")
			wantDriver(t, s.data, "hv_netvsc", "eth1")
			if recs, _ := bind.Records(s.state); len(recs) != 0 {
				t.Errorf("records left: %+v", recs)
			}
		})
	}
}

func TestBindAndUnbindRejectBadNames(t *testing.T) {
	bothWays(t, func(t *testing.T, s *system) {
		test, err := s.h.AddDevice(sim.DeviceConfig{Class: vmbus.ClassTest})
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct{ name, want string }{
			{"eth9", "no interface or device"},
			{"lo", "not a VMBus device"},
			{"a/b", "neither a device"},
			{"01234567-89ab-4cde-8f01-23456789abcd", "no VMBus device"},
			{test.Instance().String(), "not a synthetic NIC"},
		} {
			r := run(t, s.env, "vmbus-bind", tc.name)
			if r.code != 1 || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("vmbus-bind %q: exit %d, %q; want 1, %q", tc.name, r.code, r.stderr, tc.want)
			}
		}
		if r := run(t, s.env, "vmbus-bind"); r.code != 2 {
			t.Errorf("vmbus-bind without a device: exit %d, want 2", r.code)
		}
		if r := run(t, s.env, "vmbus-unbind", "eth9"); r.code != 1 {
			t.Errorf("vmbus-unbind eth9: exit %d, want 1", r.code)
		}
		wantDriver(t, s.data, "hv_netvsc", "eth1")
		if recs, _ := bind.Records(s.state); len(recs) != 0 {
			t.Errorf("records after refusals: %+v", recs)
		}
		// A test device bound to uio, no record: given back to no driver.
		r := run(t, s.env, "vmbus-unbind", test.Instance().String())
		wantCode(t, r, 0, "vmbus-unbind of a recordless test device")
		wantDriver(t, test, "", "")
	})
}

// checkRow is one verdict of vmbus-check: "  [ok]   name   detail", the
// columns as wide as either implementation makes them.
var checkRow = regexp.MustCompile(`^  \[(ok|warn|FAIL)\]\s+(\S+(?: \S+)*)\s{2,}(.*)$`)

// checkTable parses the verdicts and the device rows of vmbus-check.
func checkTable(out string) (items []bind.Item, devices [][]string) {
	inDevices := false
	for _, l := range strings.Split(out, "\n") {
		if m := checkRow.FindStringSubmatch(l); m != nil && !inDevices {
			st := map[string]bind.Status{"ok": bind.StatusOK, "warn": bind.StatusWarn, "FAIL": bind.StatusFail}[m[1]]
			items = append(items, bind.Item{Name: m[2], Status: st, Detail: strings.TrimSpace(m[3])})
			continue
		}
		f := strings.Fields(l)
		switch {
		case l == "Devices:":
			inDevices = true
		case inDevices && len(f) >= 7 && f[0] != "INSTANCE":
			devices = append(devices, append(f[:6:6], strings.Join(f[6:], " ")))
		}
	}
	return items, devices
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func TestCheckReportsTheSimulatedSystem(t *testing.T) {
	bothWays(t, func(t *testing.T, s *system) {
		r := run(t, s.env, "vmbus-check")
		wantCode(t, r, 0, "vmbus-check")
		if !strings.HasPrefix(r.stdout, "VMBus bring-up checks (root "+s.root+")\n") {
			t.Errorf("vmbus-check heading:\n%s", r.stdout)
		}
		items, devices := checkTable(r.stdout)
		for _, want := range []bind.Item{
			{Name: "vmbus", Detail: "2 devices"},
			{Name: "uio_hv_generic", Detail: "loaded"},
			{Name: "nics", Detail: "2 synthetic NIC(s)"},
			{Name: "default route", Detail: "via eth0: do not bind it (or use --force)"},
			{Name: "hugepages", Detail: "none reserved (needed only for a GPA-direct pool)"},
		} {
			if !slices.Contains(items, want) {
				t.Errorf("vmbus-check lacks %+v:\n%s", want, r.stdout)
			}
		}
		// Row for row what internal/bind's Check finds.
		rep := bind.Check(s.root)
		if !slices.Equal(items, rep.Items) {
			t.Errorf("vmbus-check verdicts\n%+v\nwant (bind.Check)\n%+v", items, rep.Items)
		}
		var want [][]string
		for _, d := range rep.Devices {
			want = append(want, []string{d.Instance.String(), d.ClassName, dash(d.Driver), dash(d.Override), dash(d.Interface), dash(d.UIO), dash(d.Management)})
		}
		if !slices.EqualFunc(devices, want, slices.Equal) {
			t.Errorf("vmbus-check devices\n%q\nwant\n%q", devices, want)
		}
		if len(devices) != 2 || devices[0][0] != mgmtNIC.String() || devices[0][6] != "default route" || devices[1][4] != "eth1" {
			t.Errorf("vmbus-check devices %q", devices)
		}

		// Bound, the device shows its driver and node.
		wantCode(t, run(t, s.env, "vmbus-bind", "eth1"), 0, "vmbus-bind eth1")
		r = run(t, s.env, "vmbus-check")
		wantCode(t, r, 0, "vmbus-check after a bind")
		_, devices = checkTable(r.stdout)
		if len(devices) != 2 || !slices.Equal(devices[1], []string{dataNIC.String(), "netvsc", "uio_hv_generic", "uio_hv_generic", "-", filepath.Base(s.data.UIONode()), "-"}) {
			t.Errorf("vmbus-check devices after a bind %q", devices)
		}

		r = run(t, s.with("VMBUSD_ROOT="+t.TempDir()), "vmbus-check")
		wantCode(t, r, 1, "vmbus-check of an empty tree")
		items, _ = checkTable(r.stdout)
		if len(items) == 0 || items[0].Name != "vmbus" || items[0].Status != bind.StatusFail {
			t.Errorf("vmbus-check of an empty tree: %+v\n%v", items, r)
		}
	})
}

// TestScriptsFindTheBinary: $VMBUSD, then vmbusd on PATH, then vmbusd
// beside the script; none of them, the bash fallback. Which one ran shows
// in the record's "by".
func TestScriptsFindTheBinary(t *testing.T) {
	s := newSystem(t, bashOnly)
	bin := vmbusdBinary(t)
	base := []string{"VMBUSD_ROOT=" + s.root, "VMBUSD_STATE_DIR=" + s.state, "VMBUSD_TIMEOUT=5"}
	const plainPath = "/usr/bin:/bin"
	var installed string // a vmbusd on plainPath, which would be found
	for _, d := range filepath.SplitList(plainPath) {
		if _, err := os.Stat(filepath.Join(d, "vmbusd")); err == nil {
			installed = filepath.Join(d, "vmbusd")
		}
	}

	// A copy of the scripts, with and without a vmbusd beside them.
	lonely, beside := t.TempDir(), t.TempDir()
	for _, dir := range []string{lonely, beside} {
		for _, f := range []string{"vmbus-bind", "vmbus-unbind", "vmbus-lib.sh"} {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, f), b, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.Symlink(bin, filepath.Join(beside, "vmbusd")); err != nil {
		t.Fatal(err)
	}
	onPath := t.TempDir()
	if err := os.Symlink(bin, filepath.Join(onPath, "vmbusd")); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name, dir string
		env       []string
		by        string
	}{
		{"VMBUSD names it", lonely, []string{"VMBUSD=" + bin, "PATH=" + plainPath}, "vmbusd"},
		{"VMBUSD as a command name", lonely, []string{"VMBUSD=vmbusd", "PATH=" + onPath + ":" + plainPath}, "vmbusd"},
		{"on PATH", lonely, []string{"PATH=" + onPath + ":" + plainPath}, "vmbusd"},
		{"beside the script", beside, []string{"PATH=" + plainPath}, "vmbusd"},
		{"VMBUSD=none wins", beside, []string{"VMBUSD=none", "PATH=" + onPath + ":" + plainPath}, "vmbus-bind"},
		{"nowhere", lonely, []string{"PATH=" + plainPath}, "vmbus-bind"},
	} {
		if tc.name == "nowhere" && installed != "" {
			t.Logf("%s: skipped, %s is installed", tc.name, installed)
			continue
		}
		env := append(append([]string(nil), base...), tc.env...)
		r := run(t, env, filepath.Join(tc.dir, "vmbus-bind"), "eth1")
		wantCode(t, r, 0, tc.name+": vmbus-bind eth1")
		rec, err := bind.ReadRecord(s.state, dataNIC)
		if err != nil || rec.By != tc.by {
			t.Errorf("%s: record %+v, %v; want one by %s", tc.name, rec, err, tc.by)
		}
		wantCode(t, run(t, env, filepath.Join(tc.dir, "vmbus-unbind"), "eth1"), 0, tc.name+": vmbus-unbind eth1")
		wantDriver(t, s.data, "hv_netvsc", "eth1")
	}

	notExec := filepath.Join(t.TempDir(), "vmbusd")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{filepath.Join(t.TempDir(), "vmbusd"), "no-such-vmbusd", notExec, t.TempDir()} {
		r := run(t, append(base, "VMBUSD="+bad), "vmbus-bind", "eth1")
		if r.code != 2 || !strings.Contains(r.stderr, "VMBUSD="+bad) {
			t.Errorf("VMBUSD=%s: %v; want exit 2 naming it", bad, r)
		}
	}
	wantDriver(t, s.data, "hv_netvsc", "eth1")
}

// TestScriptsPassTheirArgumentsToVmbusd: what the scripts hand over, seen
// through a VMBUSD that logs its argv and runs the real vmbusd.
func TestScriptsPassTheirArgumentsToVmbusd(t *testing.T) {
	s := newSystem(t, withVmbusd)
	dir := t.TempDir()
	argv, tap := filepath.Join(dir, "argv"), filepath.Join(dir, "vmbusd-tap")
	body := "#!/bin/sh\nprintf '%s\\n' \"$*\" >>" + argv + "\nexec " + vmbusdBinary(t) + " \"$@\"\n"
	if err := os.WriteFile(tap, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	env := s.with("VMBUSD=" + tap)
	wantCode(t, run(t, env, "vmbus-bind", "--force", "eth0"), 0, "vmbus-bind --force eth0")
	wantDriver(t, s.mgmt, "uio_hv_generic", "")
	wantCode(t, run(t, env, "vmbus-unbind", "--force", "eth0"), 0, "vmbus-unbind --force eth0")
	wantDriver(t, s.mgmt, "hv_netvsc", "eth0")
	wantCode(t, run(t, env, "vmbus-bind", "eth1"), 0, "vmbus-bind eth1")
	wantCode(t, run(t, env, "vmbus-check"), 0, "vmbus-check")
	// A root given with a trailing slash; check takes no --state-dir.
	wantCode(t, run(t, []string{"VMBUSD=" + tap, "VMBUSD_ROOT=" + s.root + "/"}, "vmbus-check"), 0, "vmbus-check, root with a slash")
	got := strings.Split(strings.TrimSpace(readTrim(t, argv)), "\n")
	want := []string{
		"bind --root " + s.root + " --state-dir " + s.state + " --force -- eth0",
		"unbind --root " + s.root + " --state-dir " + s.state + " --force -- eth0",
		"bind --root " + s.root + " --state-dir " + s.state + " -- eth1",
		"check --root " + s.root,
		"check --root " + s.root,
	}
	if !slices.Equal(got, want) {
		t.Errorf("vmbusd ran as\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	wantDriver(t, s.data, "uio_hv_generic", "")
}

// fakeHugeTree is a root with a 2 MiB and a 1 GiB pool, a NUMA node, and
// mounts.
func fakeHugeTree(t *testing.T, mounts string) string {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{
		"proc/meminfo": "MemTotal:       16384000 kB\nHugepagesize:       2048 kB\n",
		"proc/mounts":  mounts,
		"sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages":                 "0\n",
		"sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages":               "0\n",
		"sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages":              "0\n",
		"sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages": "0\n",
	}
	for rel, v := range files {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func readTrim(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestHugepagesAgainstAFakeTree(t *testing.T) {
	requireBash(t)
	mounted := "sysfs /sys sysfs rw 0 0\nhugetlbfs /dev/hugepages hugetlbfs rw,relatime,pagesize=2M 0 0\n"
	root := fakeHugeTree(t, mounted)
	env := []string{"VMBUSD_ROOT=" + root}

	r := run(t, env, "vmbus-hugepages", "64")
	wantCode(t, r, 0, "vmbus-hugepages 64")
	if got := readTrim(t, filepath.Join(root, "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages")); got != "64" {
		t.Errorf("nr_hugepages = %s, want 64", got)
	}
	if !strings.Contains(r.stdout, "reserved 64 pages of 2M") || !strings.Contains(r.stdout, "already mounted on /dev/hugepages") {
		t.Errorf("vmbus-hugepages 64 said %q", r.stdout)
	}

	r = run(t, env, "vmbus-hugepages", "--node", "0", "--no-mount", "16", "2048kB")
	wantCode(t, r, 0, "vmbus-hugepages --node 0 16 2048kB")
	if got := readTrim(t, filepath.Join(root, "sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages")); got != "16" {
		t.Errorf("node0 nr_hugepages = %s, want 16", got)
	}

	// 1G: reserved, but /dev/hugepages is a 2M hugetlbfs.
	r = run(t, env, "vmbus-hugepages", "2", "1G")
	wantCode(t, r, 1, "vmbus-hugepages 2 1G")
	if !strings.Contains(r.stderr, "not as hugetlbfs with pagesize=1G") {
		t.Errorf("1G onto a 2M mount: %q", r.stderr)
	}
	r = run(t, env, "vmbus-hugepages", "--no-mount", "2", "1G")
	wantCode(t, r, 0, "vmbus-hugepages --no-mount 2 1G")

	r = run(t, env, "vmbus-hugepages", "8", "16M")
	if r.code != 1 || !strings.Contains(r.stderr, "not supported") {
		t.Errorf("unsupported size: %v", r)
	}
	r = run(t, env, "vmbus-hugepages", "many")
	if r.code != 1 {
		t.Errorf("bad count: %v", r)
	}

	// The kernel gives fewer pages than asked (here: none stick).
	p := filepath.Join(root, "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages")
	os.Remove(p)
	if err := os.Symlink("/dev/null", p); err != nil {
		t.Fatal(err)
	}
	r = run(t, env, "vmbus-hugepages", "128")
	if r.code != 1 || !strings.Contains(r.stderr, "failed to reserve 128 pages of 2M: got nothing") {
		t.Errorf("short reservation: %v", r)
	}

	// What the Go check sees of it.
	rep := bind.Check(root)
	if len(rep.Hugetlbfs) != 1 || rep.Hugetlbfs[0] != "/dev/hugepages" {
		t.Errorf("Check hugetlbfs %v", rep.Hugetlbfs)
	}
}

func TestPersistWritesADriverctlOverrideAndAppliesIt(t *testing.T) {
	bothWays(t, testPersist)
}

// testPersist: vmbus-persist is a script both ways; the vmbus-unbind at
// the end is not.
func testPersist(t *testing.T, s *system) {
	etc := t.TempDir()
	env := s.with("VMBUSD_ETC_ROOT="+etc, "PATH=/usr/bin:/bin") // no driverctl on this PATH
	if _, err := exec.LookPath("driverctl"); err == nil {
		t.Log("driverctl is installed; the test uses a fake /etc, so the script installs its own hooks")
	}
	conf := filepath.Join(etc, "etc/driverctl.d/vmbus-"+dataNIC.String())
	rule := filepath.Join(etc, "etc/udev/rules.d/89-vmbusd-bind.rules")
	unit := filepath.Join(etc, "etc/systemd/system/vmbusd-bind@.service")

	r := run(t, env, "vmbus-persist", "eth0")
	wantCode(t, r, 1, "vmbus-persist eth0")
	if !strings.Contains(r.stderr, "default route") {
		t.Errorf("persist refusal: %q", r.stderr)
	}

	r = run(t, env, "vmbus-persist", "eth1")
	wantCode(t, r, 0, "vmbus-persist eth1")
	if got := readTrim(t, conf); got != "uio_hv_generic" {
		t.Errorf("%s = %q", conf, got)
	}
	if got := readTrim(t, rule); !strings.Contains(got, `SUBSYSTEM=="vmbus"`) || !strings.Contains(got, "vmbusd-bind@$kernel.service") {
		t.Errorf("udev rule:\n%s", got)
	}
	u := readTrim(t, unit)
	self, _ := filepath.Abs("vmbus-persist")
	for _, want := range []string{"Type=oneshot", "DefaultDependencies=no", "ConditionPathExists=/etc/driverctl.d/vmbus-%i", "ExecStart=" + self + " --apply %i"} {
		if !strings.Contains(u, want) {
			t.Errorf("unit lacks %q:\n%s", want, u)
		}
	}
	wantDriver(t, s.data, "hv_netvsc", "eth1") // persisting does not bind now
	r = run(t, env, "vmbus-persist", "--list")
	if !strings.Contains(r.stdout, dataNIC.String()+" uio_hv_generic") {
		t.Errorf("--list: %q", r.stdout)
	}

	// What the unit runs at boot.
	r = run(t, env, "vmbus-persist", "--apply", dataNIC.String())
	wantCode(t, r, 0, "vmbus-persist --apply")
	wantDriver(t, s.data, "uio_hv_generic", "")

	r = run(t, env, "vmbus-persist", "--remove", "eth1") // its netdev is gone: a uuid is needed
	if r.code != 1 {
		t.Errorf("--remove by a vanished interface name: %v", r)
	}
	r = run(t, env, "vmbus-persist", "--remove", dataNIC.String())
	wantCode(t, r, 0, "vmbus-persist --remove")
	for _, p := range []string{conf, rule, unit} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after --remove: %v", p, err)
		}
	}
	// Not recorded: vmbus-unbind gives it back to its default driver.
	r = run(t, env, "vmbus-unbind", dataNIC.String())
	wantCode(t, r, 0, "vmbus-unbind after --remove")
	wantDriver(t, s.data, "hv_netvsc", "eth1")
}

// lib runs a snippet with vmbus-lib.sh sourced.
func lib(t *testing.T, env []string, snippet string) string {
	t.Helper()
	cmd := exec.Command("bash", "-c", `set -euo pipefail; . ./vmbus-lib.sh; `+snippet)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", snippet, err, out)
	}
	return string(out)
}

func TestLibReadsRecordsWrittenByGo(t *testing.T) {
	requireBash(t)
	dir := t.TempDir()
	rec := bind.Record{Version: 1, Device: dataNIC, Class: vmbus.ClassNetwork, Root: "/", By: "vmbusd",
		Time: time.Now().UTC().Truncate(time.Second), OriginalDriver: "hv_netvsc", OriginalOverride: `odd "one"\`,
		Interface: "eth1", MAC: dataMAC.String(), MTU: 9000, Up: true, Addresses: []string{"10.1.0.4/24", "fd00:1::4/64"}}
	b, err := json.MarshalIndent(rec, "", "  ") // as internal/bind writes it
	if err != nil {
		t.Fatal(err)
	}
	f := bind.RecordPath(dir, dataNIC)
	if err := os.WriteFile(f, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"VMBUSD_STATE_DIR=" + dir}
	for key, want := range map[string]string{
		"device": dataNIC.String(), "original_driver": "hv_netvsc", "original_override": `odd "one"\`,
		"interface": "eth1", "mtu": "9000", "up": "true", "mac": dataMAC.String(),
	} {
		got := lib(t, append(env, "F="+f, "K="+key), `record_get "$F" "$K"`)
		if got != want {
			t.Errorf("record_get %s = %q, want %q", key, got, want)
		}
	}
	if got := lib(t, append(env, "F="+f), `record_addresses "$F"`); got != "10.1.0.4/24\nfd00:1::4/64\n" {
		t.Errorf("record_addresses = %q", got)
	}
	if got := lib(t, env, `record_by_interface eth1`); got != dataNIC.String() {
		t.Errorf("record_by_interface eth1 = %q", got)
	}
}

func TestLibRouteHelpers(t *testing.T) {
	s := newSystem(t, bashOnly)
	for snippet, want := range map[string]string{
		`ipv6_hex ::1`:                     "00000000000000000000000000000001",
		`ipv6_hex fe80::1%eth0`:            "fe800000000000000000000000000001",
		`ipv6_hex fd00:1::9`:               "fd000001000000000000000000000009",
		`ipv6_hex 2001:db8:1:2:3:4:5:6`:    "20010db8000100020003000400050006",
		`ipv6_hex ::`:                      "00000000000000000000000000000000",
		`default_route_ifaces`:             "eth0\n",
		`route_iface_for 10.1.0.77`:        "eth1",
		`route_iface_for 10.0.0.5`:         "eth0",
		`route_iface_for 192.0.2.1`:        "eth0",
		`route_iface_for ::ffff:10.1.0.77`: "eth1",
		`route_iface_for fd00:1::77`:       "eth1",
		`route_iface_for 2001:db8::1`:      "eth0",
		`management_reason eth1`:           "",
		`management_reason eth0`:           "it carries the default route",
		`popcount 255`:                     "8",
	} {
		if got := lib(t, s.env, snippet); got != want {
			t.Errorf("%s = %q, want %q", snippet, got, want)
		}
	}
}

// TestScriptsRefuseADeviceALiveDaemonDrives: while a daemon holds the
// state directory's owner lock and drives eth1, vmbus-bind and
// vmbus-unbind of it exit 3, name the daemon's pid and change nothing; a
// device it does not drive is still free.
func TestScriptsRefuseADeviceALiveDaemonDrives(t *testing.T) {
	bothWays(t, func(t *testing.T, s *system) {
		r := run(t, s.env, "vmbus-bind", "eth1")
		wantCode(t, r, 0, "vmbus-bind eth1")
		lock, err := owner.Acquire(s.state, owner.Info{Command: owner.CommandRun, Devices: []string{dataNIC.String()}}, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer lock.Release()
		pid := fmt.Sprintf("(pid %d", os.Getpid())
		for _, script := range []string{"vmbus-unbind", "vmbus-bind"} {
			r = run(t, s.env, script, dataNIC.String())
			if r.code != 3 || !strings.Contains(r.stderr, "busy") || !strings.Contains(r.stderr, pid) {
				t.Fatalf("%s of a driven device: %v", script, r)
			}
		}
		wantDriver(t, s.data, "uio_hv_generic", "")
		if rec, err := bind.ReadRecord(s.state, dataNIC); err != nil || rec.By != s.m.recordedBy() {
			t.Errorf("record while busy: %+v, %v", rec, err)
		}
		// The daemon drives only eth1: the management NIC is refused for
		// its own reason, not as busy.
		r = run(t, s.env, "vmbus-bind", "eth0")
		if r.code != 1 || strings.Contains(r.stderr, "busy") || !strings.Contains(r.stderr, "default route") {
			t.Fatalf("vmbus-bind of a device the daemon does not drive: %v", r)
		}
		lock.Release()
		r = run(t, s.env, "vmbus-unbind", "eth1")
		wantCode(t, r, 0, "vmbus-unbind eth1 once the daemon is gone")
		wantDriver(t, s.data, "hv_netvsc", "eth1")
	})
}
