package vmbus_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/internal/echo"
	"github.com/vmbusd/vmbusd/sim"
	"github.com/vmbusd/vmbusd/vmbus"
)

// TestMain lets the test binary double as a simulated host in its own
// process: with VMBUSD_TEST_HOST_ROOT set it serves test devices there
// until its stdin closes, so guest and host share memory across processes
// exactly as a guest and uio_hv_generic do.
func TestMain(m *testing.M) {
	if root := os.Getenv("VMBUSD_TEST_HOST_ROOT"); root != "" {
		os.Exit(serveHost(root, os.Getenv("VMBUSD_TEST_HOST_PROFILE")))
	}
	os.Exit(m.Run())
}

func serveHost(root, profile string) int {
	prof, err := sim.ParseProfile(profile)
	if err != nil {
		fmt.Println("error", err)
		return 2
	}
	h, err := sim.New(sim.Config{Root: root, Profile: prof})
	if err != nil {
		fmt.Println("error", err)
		return 2
	}
	d, err := h.AddDevice(sim.DeviceConfig{Class: vmbus.ClassTest, RingSize: 256 << 10})
	if err != nil {
		fmt.Println("error", err)
		return 2
	}
	fmt.Println("device", d.Instance())
	io.Copy(io.Discard, os.Stdin)
	h.Close()
	fmt.Println("violations", len(h.Violations()))
	return 0
}

// startHostProcess runs the simulated host in a child process and returns
// the instance of its test device.
func startHostProcess(t *testing.T, root string, prof sim.Profile) (vmbus.GUID, func() string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "VMBUSD_TEST_HOST_ROOT="+root, "VMBUSD_TEST_HOST_PROFILE="+prof.String())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() {
		cmd.Process.Kill()
		t.Fatal("host process said nothing")
	}
	f := strings.Fields(sc.Text())
	if len(f) != 2 || f[0] != "device" {
		cmd.Process.Kill()
		t.Fatalf("host process: %q", sc.Text())
	}
	g, err := vmbus.ParseGUID(f[1])
	if err != nil {
		t.Fatal(err)
	}
	stop := func() string {
		stdin.Close()
		var rest []string
		for sc.Scan() {
			rest = append(rest, sc.Text())
		}
		cmd.Wait()
		return strings.Join(rest, "\\n")
	}
	return g, stop
}

// TestCrossProcessMillionPackets exchanges a million verified packets each
// way with a host in another process, under every kernel profile.
func TestCrossProcessMillionPackets(t *testing.T) {
	n := 1_000_000
	if testing.Short() {
		n = 100_000
	}
	for _, prof := range sim.Profiles() {
		t.Run(prof.String(), func(t *testing.T) {
			root := shmRoot(t)
			inst, stop := startHostProcess(t, root, prof)
			dev, err := vmbus.LookupDevice(root, inst)
			if err != nil {
				stop()
				t.Fatal(err)
			}
			hd, err := vmbus.Open(dev, vmbus.Options{})
			if err != nil {
				stop()
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			start := time.Now()
			p := &echo.Pump{Size: 64, Window: 1024}
			err = p.Run(ctx, hd.Primary(), n)
			el := time.Since(start)
			hd.Close()
			out := stop()
			if err != nil {
				t.Fatal(err)
			}
			if p.Echoed.Load() != uint64(n) {
				t.Fatalf("echoed %d of %d", p.Echoed.Load(), n)
			}
			if !strings.Contains(out, "violations 0") {
				t.Errorf("host reported: %s", out)
			}
			st := hd.Primary().Stats()
			t.Logf("%d packets each way in %v (%.0f pkt/s); signals/pkt %.4f, interrupts %d, missed wake-ups %d",
				n, el, float64(n)/el.Seconds(), float64(st.TxSignals+st.RxSignals)/float64(n), hd.Interrupts(), st.MissedWakeups)
		})
	}
}

func shmRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/dev/shm", "vmbusd-test-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
