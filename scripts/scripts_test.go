// Package scripts_test runs the bring-up scripts against a live simulated
// host's tree (VMBUSD_ROOT), checks what they did, and lints them with
// shellcheck when it is installed.
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
	"strings"
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

// run runs a script with env added to a clean environment (no VMBUSD_*,
// no SSH_CONNECTION from the test's own session).
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
		if !strings.HasPrefix(kv, "VMBUSD_") && !strings.HasPrefix(kv, "SSH_") {
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
// default route, eth1 a data subnet (IPv4 and IPv6).
type system struct {
	h          *sim.Host
	root       string
	state      string
	mgmt, data *sim.Device
	env        []string
}

func newSystem(t *testing.T) *system {
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
	s := &system{h: h, root: h.Root(), state: filepath.Join(t.TempDir(), "state")}
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
	s.env = []string{"VMBUSD_ROOT=" + s.root, "VMBUSD_STATE_DIR=" + s.state, "VMBUSD_TIMEOUT=5"}
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
	for _, s := range scripts {
		r := run(t, nil, s, "--help")
		if r.code != 0 || !strings.HasPrefix(r.stdout, "Usage: "+s) {
			t.Errorf("%s --help: %v", s, r)
		}
		if r := run(t, []string{"VMBUSD_ROOT=" + t.TempDir()}, s, "--no-such-option"); r.code != 2 {
			t.Errorf("%s --no-such-option: exit %d, want 2", s, r.code)
		}
	}
}

func TestBindAndUnbindRoundTrip(t *testing.T) {
	s := newSystem(t)
	r := run(t, s.env, "vmbus-bind", "eth1")
	wantCode(t, r, 0, "vmbus-bind eth1")
	if !strings.Contains(r.stdout, "bound "+dataNIC.String()+" (eth1) to uio_hv_generic as uio0") {
		t.Errorf("vmbus-bind said %q", r.stdout)
	}
	wantDriver(t, s.data, "uio_hv_generic", "")
	if s.data.UIONode() == "" {
		t.Fatal("no uio node after vmbus-bind")
	}
	// The record is the one internal/bind reads.
	rec, err := bind.ReadRecord(s.state, dataNIC)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Device != dataNIC || rec.Class != vmbus.ClassNetwork || rec.OriginalDriver != "hv_netvsc" || rec.Interface != "eth1" ||
		rec.MAC != dataMAC.String() || rec.MTU != 1500 || !rec.Up || rec.By != "vmbus-bind" || rec.Root != s.root || rec.Time.IsZero() {
		t.Errorf("record %+v", rec)
	}
	// Again: nothing to do.
	r = run(t, s.env, "vmbus-bind", dataNIC.String())
	wantCode(t, r, 0, "second vmbus-bind")
	if !strings.Contains(r.stdout, "already bound") {
		t.Errorf("second vmbus-bind said %q", r.stdout)
	}

	// By the interface name the record kept (the netdev is gone).
	r = run(t, s.env, "vmbus-unbind", "eth1")
	wantCode(t, r, 0, "vmbus-unbind eth1")
	if !strings.Contains(r.stdout, "gave "+dataNIC.String()+" back to hv_netvsc as eth1") {
		t.Errorf("vmbus-unbind said %q", r.stdout)
	}
	wantDriver(t, s.data, "hv_netvsc", "eth1")
	if _, err := bind.ReadRecord(s.state, dataNIC); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("record after vmbus-unbind: %v", err)
	}
	if ov, _ := os.ReadFile(filepath.Join(s.data.Path(), "driver_override")); string(ov) != "(null)\n" {
		t.Errorf("driver_override %q after vmbus-unbind", ov)
	}
}

func TestBindRefusesTheManagementInterface(t *testing.T) {
	s := newSystem(t)
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
}

func TestScriptUnbindsWhatVmbusdBound(t *testing.T) {
	s := newSystem(t)
	if _, err := bind.Bind(context.Background(), s.root, "eth1", bind.Options{StateDir: s.state, Timeout: 5 * time.Second,
		Getenv: func(string) string { return "" }}); err != nil {
		t.Fatal(err)
	}
	wantDriver(t, s.data, "uio_hv_generic", "")
	r := run(t, s.env, "vmbus-unbind", "eth1")
	wantCode(t, r, 0, "vmbus-unbind eth1")
	wantDriver(t, s.data, "hv_netvsc", "eth1")
	if recs, _ := bind.Records(s.state); len(recs) != 0 {
		t.Errorf("records left: %+v", recs)
	}
}

func TestBindAndUnbindRejectBadNames(t *testing.T) {
	s := newSystem(t)
	test, err := s.h.AddDevice(sim.DeviceConfig{Class: vmbus.ClassTest})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, want string }{
		{"eth9", "no interface or device"},
		{"lo", "not a VMBus device"},
		{"a/b", "neither a device uuid nor an interface name"},
		{"01234567-89ab-4cde-8f01-23456789abcd", "no VMBus device"},
		{test.Instance().String(), "is not a synthetic NIC"},
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
	// A test device bound to uio, no record: given back to no driver.
	r := run(t, s.env, "vmbus-unbind", test.Instance().String())
	wantCode(t, r, 0, "vmbus-unbind of a recordless test device")
	wantDriver(t, test, "", "")
}

func TestCheckReportsTheSimulatedSystem(t *testing.T) {
	s := newSystem(t)
	r := run(t, s.env, "vmbus-check")
	wantCode(t, r, 0, "vmbus-check")
	for _, want := range []string{
		"[ok]   vmbus            2 devices",
		"[ok]   uio_hv_generic   loaded",
		"[ok]   kernel           6.",
		"[ok]   driver_override",
		"[ok]   default route    via eth0: do not bind it",
		"[ok]   hugepages        none reserved",
		mgmtNIC.String() + "  netvsc       hv_netvsc       -               eth0      -       default route",
		dataNIC.String() + "  netvsc       hv_netvsc       -               eth1      -       -",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("vmbus-check output lacks %q:\n%s", want, r.stdout)
		}
	}
	// The Go checks agree on every row.
	rep := bind.Check(s.root)
	for _, it := range rep.Items {
		if !strings.Contains(r.stdout, "["+it.Status.String()+"]") || !strings.Contains(r.stdout, it.Name) {
			t.Errorf("vmbus-check lacks the %s row (%s)", it.Name, it.Status)
		}
	}

	r = run(t, []string{"VMBUSD_ROOT=" + t.TempDir()}, "vmbus-check")
	if r.code != 1 || !strings.Contains(r.stdout, "[FAIL] vmbus") {
		t.Errorf("vmbus-check of an empty tree: %v", r)
	}
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
	s := newSystem(t)
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
	s := newSystem(t)
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
// vmbus-unbind of it exit 3 and change nothing; a device it does not drive
// is still free.
func TestScriptsRefuseADeviceALiveDaemonDrives(t *testing.T) {
	s := newSystem(t)
	r := run(t, s.env, "vmbus-bind", "eth1")
	wantCode(t, r, 0, "vmbus-bind eth1")
	lock, err := owner.Acquire(s.state, owner.Info{Command: owner.CommandRun, Devices: []string{dataNIC.String()}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, script := range []string{"vmbus-unbind", "vmbus-bind"} {
		r = run(t, s.env, script, dataNIC.String())
		if r.code != 3 || !strings.Contains(r.stderr, "busy: the vmbusd daemon (pid ") {
			t.Fatalf("%s of a driven device: %v", script, r)
		}
	}
	wantDriver(t, s.data, "uio_hv_generic", "")
	// The daemon drives only eth1: the management NIC is refused for its
	// own reason, not as busy.
	r = run(t, s.env, "vmbus-bind", "eth0")
	if r.code == 3 || strings.Contains(r.stderr, "busy") {
		t.Fatalf("vmbus-bind of a device the daemon does not drive: %v", r)
	}
	lock.Release()
	r = run(t, s.env, "vmbus-unbind", "eth1")
	wantCode(t, r, 0, "vmbus-unbind eth1 once the daemon is gone")
}
