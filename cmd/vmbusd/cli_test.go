package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/internal/daemon"
	"github.com/vmbusd/vmbusd/internal/jsonshape"
	"github.com/vmbusd/vmbusd/internal/testutil"
)

// These tests drive the vmbusd binary end to end against a simulated host
// running in its own process, as an operator would.

var vmbusdBin string

// vmbusdRevision is the revision stamped into vmbusdBin ("" if git could
// not say).
var vmbusdRevision string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "vmbusd-cli-")
	if err != nil {
		panic(err)
	}
	vmbusdBin = filepath.Join(dir, "vmbusd")
	// The revision is stamped as a packager would (the toolchain's own
	// VCS stamping may be off, as with GOFLAGS=-buildvcs=false).
	build := []string{"build", "-o", vmbusdBin}
	if rev, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil {
		vmbusdRevision = strings.TrimSpace(string(rev))
		build = append(build, "-ldflags", "-X github.com/vmbusd/vmbusd/internal/buildinfo.revision="+vmbusdRevision)
	}
	if out, err := exec.Command("go", append(build, ".")...).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build vmbusd: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (TAP devices and network namespaces)")
	}
}

// vmbusd runs the binary and returns stdout, stderr and the exit code.
func vmbusd(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(vmbusdBin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("vmbusd %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

func mustVmbusd(t *testing.T, args ...string) string {
	t.Helper()
	out, errs, code := vmbusd(t, args...)
	if code != 0 {
		t.Fatalf("vmbusd %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errs)
	}
	return out
}

// startSim runs `vmbusd sim` with one NIC bound to hv_netvsc (eth1) and a
// traffic generator on its host side, and returns a function that stops
// it and returns what it printed.
func startSim(t *testing.T, root string, extra ...string) func() string {
	t.Helper()
	args := append([]string{"sim", "--root", root, "--test", "0", "--nic", "1", "--nic-driver", "hv_netvsc",
		"--port", "gen", "--gen-rate", "20000", "--gen-flows", "64"}, extra...)
	cmd := exec.Command(vmbusdBin, args...)
	stdout, _ := cmd.StdoutPipe()
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	var lines []string
	ready := false
	for !ready && sc.Scan() {
		lines = append(lines, sc.Text())
		ready = strings.HasPrefix(sc.Text(), "ready ")
	}
	if !ready {
		cmd.Process.Kill()
		t.Fatalf("vmbusd sim did not start:\n%s\n%s", strings.Join(lines, "\n"), errb.String())
	}
	done := make(chan struct{})
	go func() {
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
		close(done)
	}()
	stopped := false
	stop := func() string {
		if !stopped {
			stopped = true
			cmd.Process.Signal(syscall.SIGTERM)
			<-done
			cmd.Wait()
		}
		return strings.Join(lines, "\n")
	}
	t.Cleanup(func() { stop() })
	return stop
}

func shmDirT(t *testing.T) string {
	dir, err := os.MkdirTemp("/dev/shm", "vmbusd-cli-")
	if err != nil {
		dir = t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func freePort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func netnsAdd(t *testing.T, name string) {
	t.Helper()
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Skipf("cannot create a network namespace: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "delete", name).Run() })
}

type daemonProc struct {
	cmd      *exec.Cmd
	stderr   *bytes.Buffer
	control  string
	metrics  string
	waitDone chan error
}

// startDaemon writes a config for the simulated NIC and starts `vmbusd run`.
func startDaemon(t *testing.T, root, ns string) *daemonProc {
	t.Helper()
	d := &daemonProc{control: filepath.Join(root, "run/vmbusd/control.sock"), metrics: freePort(t), stderr: &bytes.Buffer{}}
	cfg := fmt.Sprintf(`# written by the CLI test
root = %q
state_dir = %q

[metrics]
listen = %q

[control]
socket = %q

[[nic]]
device = "eth1"
queues = 2
tap = "vmbust0"
netns = %q
address = "10.98.0.2/24"
`, root, filepath.Join(root, "run/vmbusd"), d.metrics, d.control, ns)
	path := filepath.Join(root, "vmbusd.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	d.cmd = exec.Command(vmbusdBin, "run", "--config", path)
	d.cmd.Stderr = d.stderr
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d.waitDone = make(chan error, 1)
	go func() { d.waitDone <- d.cmd.Wait() }()
	t.Cleanup(func() {
		d.cmd.Process.Kill()
		if t.Failed() {
			t.Logf("vmbusd run stderr:\n%s", d.stderr.String())
		}
	})
	return d
}

func (d *daemonProc) status(t *testing.T) daemon.Status {
	var st daemon.Status
	out, _, code := vmbusd(t, "status", "--control", d.control, "--json")
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil {
		return daemon.Status{}
	}
	return st
}

func listDevices(t *testing.T, root string) []daemon.Device {
	t.Helper()
	var doc daemon.Devices
	if err := json.Unmarshal([]byte(mustVmbusd(t, "devices", "--root", root, "--json")), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.SchemaVersion != daemon.SchemaVersion {
		t.Fatalf("devices --json: schema_version %d", doc.SchemaVersion)
	}
	return doc.Devices
}

// waitUntil is testutil.WaitFor, its arguments in the order of this
// package's tests.
func waitUntil(t *testing.T, what string, timeout time.Duration, ok func() bool) {
	t.Helper()
	testutil.WaitFor(t, timeout, ok, what)
}

func TestCLIEndToEnd(t *testing.T) {
	needRoot(t)
	root := shmDirT(t)
	stopSim := startSim(t, root)

	// devices: the NIC as the kernel has it.
	devs := listDevices(t, root)
	if len(devs) != 1 || devs[0].Driver != "hv_netvsc" || devs[0].Interface != "eth1" || devs[0].ClassName != "netvsc" {
		t.Fatalf("devices: %+v", devs)
	}
	// bind / unbind round trip.
	mustVmbusd(t, "bind", "--root", root, "eth1")
	devs = listDevices(t, root)
	if devs[0].Driver != "uio_hv_generic" || devs[0].UIO == "" || devs[0].Interface != "" {
		t.Fatalf("after bind: %+v", devs[0])
	}
	mustVmbusd(t, "unbind", "--root", root, devs[0].Instance)
	devs = listDevices(t, root)
	if devs[0].Driver != "hv_netvsc" || devs[0].Interface != "eth1" || devs[0].UIO != "" {
		t.Fatalf("after unbind: %+v", devs[0])
	}

	// run: the daemon claims the NIC and attaches it to a TAP.
	ns := fmt.Sprintf("vmbusd-cli-%d", os.Getpid())
	netnsAdd(t, ns)
	d := startDaemon(t, root, ns)
	waitUntil(t, "the NIC to come up", 30*time.Second, func() bool {
		st := d.status(t)
		return len(st.NICs) == 1 && st.NICs[0].State == "up"
	})
	if fi, err := os.Stat(d.control); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("control socket mode: %v %v", fi, err)
	}
	// stats: the generator's frames arrive.
	waitUntil(t, "received frames in stats", 20*time.Second, func() bool {
		var st daemon.Stats
		out, _, _ := vmbusd(t, "stats", "--control", d.control, "--json")
		if json.Unmarshal([]byte(out), &st) != nil || len(st.NICs) != 1 {
			return false
		}
		var rx uint64
		for _, q := range st.NICs[0].Queues {
			rx += q.RxPackets
		}
		return rx > 100
	})
	if out := mustVmbusd(t, "stats", "--control", d.control); !strings.Contains(out, "RX PKTS") || !strings.Contains(out, "total") {
		t.Fatalf("stats table:\n%s", out)
	}
	for view, names := range map[string][]string{
		"--xstats":  {"rx_good_packets:", "tx_good_bytes:", "rx_missed_errors:", "rx_q0_packets:", "tx_q0_bytes:"},
		"--ethtool": {"rx_no_memory:", "vf_rx_packets:"},
	} {
		out := mustVmbusd(t, "stats", view, "--control", d.control)
		for _, n := range names {
			if !strings.Contains(out, n) {
				t.Errorf("stats %s lacks %s:\n%s", view, n, out)
			}
		}
	}
	// --watch: two reports of rates, then exit 0 (-c 2); the generator's
	// frames keep arriving, so the NIC's receive rate is not zero.
	if out := mustVmbusd(t, "stats", "--watch", "50ms", "-c", "2", "--control", d.control); strings.Count(out, "RX PKT/s") != 2 ||
		!regexp.MustCompile(`(?m)^\s*eth1\s+total\s+[1-9]`).MatchString(out) {
		t.Fatalf("stats --watch:\n%s", out)
	}
	// --json: the documents of docs/control-api.md, every key present.
	for _, doc := range []struct {
		args []string
		t    reflect.Type
	}{
		{[]string{"status", "--control", d.control, "--json"}, reflect.TypeFor[daemon.Status]()},
		{[]string{"stats", "--control", d.control, "--json"}, reflect.TypeFor[daemon.Stats]()},
		{[]string{"devices", "--root", root, "--control", d.control, "--json"}, reflect.TypeFor[daemon.Devices]()},
		{[]string{"check", "--root", root, "--json"}, reflect.TypeFor[daemon.Checks]()},
	} {
		if err := jsonshape.Check([]byte(mustVmbusd(t, doc.args...)), doc.t); err != nil {
			t.Errorf("vmbusd %s: %v", strings.Join(doc.args, " "), err)
		}
	}
	// capture, read back by tshark: filters, directions, the summary.
	checkCapture(t, d, root, ns)
	// metrics: a live scrape passes promtool's lint.
	resp, err := http.Get("http://" + d.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Contains(body, []byte(`vmbusd_netvsc_receive_packets_total{device="eth1",queue="0"}`)) {
		t.Fatalf("metrics lack the netvsc series:\n%.2000s", body)
	}
	if promtool, err := exec.LookPath("promtool"); err == nil {
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = bytes.NewReader(body)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("promtool check metrics: %v\n%s", err, out)
		}
	} else {
		t.Log("promtool not installed: metrics not linted")
	}
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200} {
		r, err := http.Get("http://" + d.metrics + path)
		if err != nil || r.StatusCode != want {
			t.Fatalf("%s: %v %v", path, r, err)
		}
		r.Body.Close()
	}

	// SIGTERM: exit 0, the NIC goes back to hv_netvsc as eth1.
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-d.waitDone:
		if err != nil {
			t.Fatalf("vmbusd run exited with %v\n%s", err, d.stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("vmbusd run did not stop on SIGTERM")
	}
	devs = listDevices(t, root)
	if devs[0].Driver != "hv_netvsc" || devs[0].Interface != "eth1" {
		t.Fatalf("after SIGTERM: %+v", devs[0])
	}
	if ents, _ := filepath.Glob(filepath.Join(root, "run/vmbusd/bind-*.json")); len(ents) != 0 {
		t.Fatalf("records left: %v", ents)
	}
	if out := stopSim(); !strings.Contains(out, "guest violations total 0") {
		t.Fatalf("simulated host reported:\n%s", out)
	}
}

// TestCLIRestoresAfterACrash kills the daemon hard and checks that
// `vmbusd restore` (the unit's ExecStopPost) gives the NIC back.
func TestCLIRestoresAfterACrash(t *testing.T) {
	needRoot(t)
	root := shmDirT(t)
	startSim(t, root)
	ns := fmt.Sprintf("vmbusd-crash-%d", os.Getpid())
	netnsAdd(t, ns)
	d := startDaemon(t, root, ns)
	waitUntil(t, "the NIC to come up", 30*time.Second, func() bool {
		st := d.status(t)
		return len(st.NICs) == 1 && st.NICs[0].State == "up"
	})
	d.cmd.Process.Kill()
	<-d.waitDone
	devs := listDevices(t, root)
	if devs[0].Driver != "uio_hv_generic" {
		t.Fatalf("after the crash: %+v (want still bound)", devs[0])
	}
	out := mustVmbusd(t, "restore", "--root", root)
	if !strings.Contains(out, "given back to hv_netvsc") {
		t.Fatalf("restore said: %s", out)
	}
	devs = listDevices(t, root)
	if devs[0].Driver != "hv_netvsc" || devs[0].Interface != "eth1" {
		t.Fatalf("after restore: %+v", devs[0])
	}
}

// TestCLIRestoreReadsTheConfiguration: the unit's ExecStopPost is
// `restore --config FILE`, so a root and state_dir set only in the file
// must reach it.
func TestCLIRestoreReadsTheConfiguration(t *testing.T) {
	needRoot(t)
	root := shmDirT(t)
	startSim(t, root)
	state := filepath.Join(root, "var/lib/vmbusd")
	mustVmbusd(t, "bind", "eth1", "--root", root, "--state-dir", state)
	if devs := listDevices(t, root); devs[0].Driver != "uio_hv_generic" {
		t.Fatalf("after bind: %+v", devs[0])
	}
	cfg := filepath.Join(t.TempDir(), "vmbusd.toml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("root = %q\nstate_dir = %q\n", root, state)), 0o644); err != nil {
		t.Fatal(err)
	}
	out := mustVmbusd(t, "restore", "--config", cfg)
	if !strings.Contains(out, "given back to hv_netvsc") {
		t.Fatalf("restore --config said: %s", out)
	}
	if devs := listDevices(t, root); devs[0].Driver != "hv_netvsc" || devs[0].Interface != "eth1" {
		t.Fatalf("after restore: %+v", devs[0])
	}
}

func TestCLIRejectsBadInput(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.toml")
	os.WriteFile(bad, []byte("[[nic]]\ndevice = \"eth1\"\nmode = \"turbo\"\n"), 0o644)
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"run", "--config", bad}, 2, "bad.toml:3: nic[0].mode: \"turbo\""},
		{[]string{"run", "--config", filepath.Join(dir, "missing.toml")}, 1, "no such file"},
		{[]string{"nosuch"}, 2, `unknown command "nosuch"`},
		{[]string{"devices", "--bogus"}, 2, "unknown flag: --bogus"},
		{[]string{"bind", "eth9", "--root", dir}, 1, `"eth9"`}, // GNU order: the flag after the device
		{[]string{}, 2, "a command is required"},
		{[]string{"capture", "--control", filepath.Join(dir, "x.sock"), "udp", "and", "prot", "53"}, 2, `filter "udp and prot 53"`},
		{[]string{"capture", "--control", filepath.Join(dir, "x.sock"), "-q", "1"}, 2, "a queue is --queue N"},
		{[]string{"capture", "--control", filepath.Join(dir, "x.sock"), "-Q", "sideways"}, 2, `-Q: direction "sideways"`},
		{[]string{"capture", "--control", filepath.Join(dir, "x.sock"), "--queue", "-2"}, 2, "--queue -2"},
		{[]string{"capture", "--control", filepath.Join(dir, "x.sock"), "-i", "eth1"}, 1, "no vmbusd running"},
		{[]string{"status", "--control", filepath.Join(dir, "x.sock")}, 1, "no vmbusd running"},
		{[]string{"bind", "--root", dir, "eth9"}, 1, "vmbusd bind: device eth9"}, // said once, not "bind: bind:"
		{[]string{"devices", "--root", dir}, 1, "no VMBus under"},                // not a Hyper-V tree: an error, not an empty list
		{[]string{"bind", "--root", dir}, 2, "want exactly one device"},
		{[]string{"sim", "--root", dir, "--profile", "5.4"}, 2, "unknown kernel profile"},
		{[]string{"demo", "--queues", "0"}, 2, "--queues 0"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, errs, code := vmbusd(t, tc.args...)
			if code != tc.code || !strings.Contains(errs, tc.want) {
				t.Fatalf("exit %d, stderr %q (stdout %q); want exit %d with %q", code, errs, out, tc.code, tc.want)
			}
		})
	}
	// --help teaches, on stdout, and exits 0; so do version and completion.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--help"}, "Exit codes:"},
		{[]string{"help", "bind"}, "Usage: vmbusd bind"},
		{[]string{"bind", "--help"}, "--state-dir"},
		{[]string{"unbind", "-h"}, "Usage: vmbusd unbind"},
		{[]string{"run", "--help"}, "--check-config"},
		{[]string{"capture", "--help"}, "-Q, --direction"},
		{[]string{"status", "--help"}, "3  busy"},
		{[]string{"--version"}, "vmbusd "},
		{[]string{"completion", "bash"}, "__start_vmbusd"},
		{[]string{"completion", "zsh"}, "#compdef vmbusd"},
		{[]string{"completion", "fish"}, "complete -c vmbusd"},
		{[]string{"__complete", "capture", "--qu"}, "--queue"},
		{[]string{"__complete", "bind", "--ro"}, "--root"},
		{[]string{"__complete", "st"}, "stats"},
	} {
		out, errs, code := vmbusd(t, tc.args...)
		// (__complete, the shells' hook, notes its directive on stderr.)
		if code != 0 || !strings.Contains(out, tc.want) || (errs != "" && tc.args[0] != "__complete") {
			t.Errorf("vmbusd %s: exit %d, stdout %.300q, stderr %q; want exit 0 and %q on stdout", strings.Join(tc.args, " "), code, out, errs, tc.want)
		}
	}
	// --version names the source revision the binary was built from.
	if out, _, _ := vmbusd(t, "--version"); vmbusdRevision != "" && !strings.Contains(out, "revision "+vmbusdRevision+"\n") {
		t.Errorf("--version does not give revision %s:\n%s", vmbusdRevision, out)
	}
}

// TestPrometheusScrapesTheDaemon runs a real Prometheus server against
// the daemon and asks it for the netvsc packet rate.
func TestPrometheusScrapesTheDaemon(t *testing.T) {
	needRoot(t)
	prom, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus not installed (apt-get install prometheus)")
	}
	root := shmDirT(t)
	startSim(t, root)
	ns := fmt.Sprintf("vmbusd-prom-%d", os.Getpid())
	netnsAdd(t, ns)
	d := startDaemon(t, root, ns)
	waitUntil(t, "the NIC to come up", 30*time.Second, func() bool {
		st := d.status(t)
		return len(st.NICs) == 1 && st.NICs[0].State == "up"
	})
	promAddr := freePort(t)
	cfg := filepath.Join(root, "prometheus.yml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`global:
  scrape_interval: 1s
scrape_configs:
  - job_name: vmbusd
    static_configs:
      - targets: [%q]
`, d.metrics)), 0o644)
	cmd := exec.Command(prom, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(root, "tsdb"),
		"--web.listen-address="+promAddr)
	var perr bytes.Buffer
	cmd.Stderr = &perr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	query := `sum(rate(vmbusd_netvsc_receive_packets_total{device="eth1"}[5s]))`
	var rate float64
	waitUntil(t, "Prometheus to report a packet rate", 60*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+promAddr+"/api/v1/query?query="+url.QueryEscape(query), nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var r struct {
			Data struct {
				Result []struct {
					Value []any `json:"value"`
				} `json:"result"`
			} `json:"data"`
		}
		if json.NewDecoder(resp.Body).Decode(&r) != nil || len(r.Data.Result) == 0 || len(r.Data.Result[0].Value) != 2 {
			return false
		}
		s, _ := r.Data.Result[0].Value[1].(string)
		rate, _ = strconv.ParseFloat(s, 64)
		return rate > 0
	})
	t.Logf("Prometheus: %s = %.0f packets/s", query, rate)
}
