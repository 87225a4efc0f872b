package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/vmbusd/vmbusd/afxdp"
	"github.com/vmbusd/vmbusd/internal/daemon"
)

// needVF skips unless this process may make veth pairs and attach XDP.
func needVF(t *testing.T) {
	t.Helper()
	needRoot(t)
	la := netlink.NewLinkAttrs()
	la.Name = fmt.Sprintf("cvt%d", os.Getpid())
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: la.Name + "p"}); err != nil {
		t.Skipf("the kernel refuses a veth pair: %v", err)
	}
	if l, err := netlink.LinkByName(la.Name); err == nil {
		netlink.LinkDel(l)
	}
	p, err := afxdp.NewProgram(1)
	if err != nil {
		t.Skipf("the kernel refuses XDP: %v", err)
	}
	p.Close()
}

// demoPath is what the live line says of the data path.
var demoPath = regexp.MustCompile(`\| path (\S+)\s+\(VF (\S+)\s*\) synthetic rx\s+(\d+) tx\s+(\d+), vf rx\s+(\d+) tx\s+(\d+) pkt/s$`)

type pathLine struct {
	path, state              string
	synRx, synTx, vfRx, vfTx int
}

func parsePathLine(l string) (pathLine, bool) {
	m := demoPath.FindStringSubmatch(l)
	if m == nil {
		return pathLine{}, false
	}
	n := func(s string) int { v, _ := strconv.Atoi(s); return v }
	return pathLine{m[1], m[2], n(m[3]), n(m[4]), n(m[5]), n(m[6])}, true
}

// TestDemoVFMovesTrafficBothWays runs `vmbusd demo --vf` with servicing on
// SIGUSR2 only: the live line shows the traffic on the VF, a servicing
// event moves it to synthetic and the VF's return moves it back; status,
// devices and stats show the pairing meanwhile; the summary counts both
// paths and the switches, and the host saw no violation.
func TestDemoVFMovesTrafficBothWays(t *testing.T) {
	needVF(t)
	cmd := exec.Command(vmbusdBin, "demo", "--vf", "--vf-service-every", "0", "--queues", "1", "--metrics-addr", "127.0.0.1:0")
	stdout, _ := cmd.StdoutPipe()
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("vmbusd demo stderr (tail):\n%s", tail(errb.String(), 60))
		}
	})
	lines := make(chan string, 256)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var seen []string
	// next returns the next line that ok accepts (the deadline only ends a
	// hung test).
	next := func(what string, ok func(string) bool) string {
		t.Helper()
		deadline := time.After(90 * time.Second)
		for {
			select {
			case l, open := <-lines:
				if !open {
					t.Fatalf("vmbusd demo ended before %s:\n%s", what, strings.Join(seen, "\n"))
				}
				seen = append(seen, l)
				if ok(l) {
					return l
				}
			case <-deadline:
				t.Fatalf("no %s from vmbusd demo:\n%s", what, strings.Join(seen, "\n"))
			}
		}
	}
	onPath := func(path string) func(string) bool {
		return func(l string) bool {
			p, ok := parsePathLine(l)
			if !ok || p.path != path {
				return false
			}
			// A second whose frames went mostly that way, both ways.
			if path == "vf" {
				return p.vfRx > p.synRx && p.vfTx > p.synTx
			}
			return p.synRx > p.vfRx && p.synTx > p.vfTx
		}
	}
	root := strings.TrimSpace(next("the root", func(l string) bool { return strings.Contains(l, "simulated Hyper-V host") }))
	root = root[strings.LastIndex(root, " ")+1:]
	sockLine := next("the control socket", func(l string) bool { return strings.Contains(l, "vmbusd status --control ") })
	sock := strings.Fields(sockLine[strings.Index(sockLine, "--control ")+len("--control "):])[0]

	next("traffic on the VF", onPath("vf"))

	// While on the VF: status, devices and stats show the pairing.
	var st daemon.Status
	if err := json.Unmarshal([]byte(mustVmbusd(t, "status", "--control", sock, "--json")), &st); err != nil || len(st.NICs) != 1 {
		t.Fatalf("status: %v %+v", err, st)
	}
	vf := st.NICs[0].VF
	if vf.State != "active" || vf.Path != "vf" || vf.IfName != fmt.Sprintf("vdvf%d", cmd.Process.Pid) || vf.MatchedBy != "serial" ||
		vf.Driver != "mlx5_core" || vf.PCI == "" {
		t.Fatalf("status of the VF: %+v", vf)
	}
	if out := mustVmbusd(t, "status", "--control", sock); !strings.Contains(out, "VF STATE") || !strings.Contains(out, vf.PCI) {
		t.Fatalf("status table without the VF:\n%s", out)
	}
	var doc daemon.Devices
	if err := json.Unmarshal([]byte(mustVmbusd(t, "devices", "--root", root, "--control", sock, "--json")), &doc); err != nil {
		t.Fatal(err)
	}
	if devs := doc.Devices; !doc.Daemon || len(devs) == 0 || !hasPairedNIC(devs, vf.IfName) {
		t.Fatalf("devices --json without eth1's VF: %+v", devs)
	}
	if out := mustVmbusd(t, "devices", "--root", root, "--control", sock); !strings.Contains(out, vf.IfName) || !strings.Contains(out, "MATCHED BY") {
		t.Fatalf("devices table without the VF:\n%s", out)
	}
	if out := mustVmbusd(t, "stats", "--control", sock); !strings.Contains(out, "data path: vf (vf auto, active)") {
		t.Fatalf("stats without the data path:\n%s", out)
	}

	// Servicing: away, the traffic goes synthetic; back, it goes to the VF.
	cmd.Process.Signal(syscall.SIGUSR2)
	next("the VF taken away", func(l string) bool { return strings.Contains(l, "VF servicing (SIGUSR2): the host takes the VF away") })
	next("traffic on synthetic", onPath("synthetic"))
	cmd.Process.Signal(syscall.SIGUSR2)
	next("the VF back", func(l string) bool { return strings.Contains(l, "VF servicing (SIGUSR2): the VF is back") })
	next("traffic on the VF again", onPath("vf"))

	cmd.Process.Signal(syscall.SIGTERM)
	sum := next("the data path summary", func(l string) bool { return strings.HasPrefix(l, "  data path: ") })
	var synRx, synTx, vfRx, vfTx, switches int
	if _, err := fmt.Sscanf(sum, "  data path: synthetic rx %d tx %d frames, vf rx %d tx %d frames; %d switches",
		&synRx, &synTx, &vfRx, &vfTx, &switches); err != nil {
		t.Fatalf("summary %q: %v", sum, err)
	}
	if synRx == 0 || synTx == 0 || vfRx == 0 || vfTx == 0 || switches < 3 || !strings.Contains(sum, "vf_ready 2") {
		t.Fatalf("summary %q: want traffic on both paths, two switches to the VF and one back", sum)
	}
	next("the violations line", func(l string) bool {
		return strings.HasPrefix(l, "  guest protocol violations seen by the simulated host: ")
	})
	if !strings.HasSuffix(seen[len(seen)-1], ": 0") {
		t.Fatalf("violations: %s", seen[len(seen)-1])
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("vmbusd demo: %v", err)
	}
	if _, err := netlink.LinkByName(vf.IfName); err == nil {
		t.Fatalf("%s left behind", vf.IfName)
	}
}

func hasPairedNIC(devs []daemon.Device, ifname string) bool {
	for _, d := range devs {
		if d.NIC == "eth1" && d.VF != nil && d.VF.IfName == ifname && d.VF.Path == "vf" && d.VF.Paths.VF.RxPackets > 0 {
			return true
		}
	}
	return false
}

func tail(s string, n int) string {
	l := strings.Split(s, "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}

func TestDemoVFFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"demo", "--vf", "--no-tap"}, "--vf needs root"},
		{[]string{"demo", "--vf", "--vf-service-every", "-1s"}, "must not be negative"},
		{[]string{"run", "--vf"}, "--vf is a --sim flag"},
	} {
		_, stderr, code := vmbusd(t, tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d %q, want 2 with %q", tc.args, code, stderr, tc.want)
		}
	}
}
