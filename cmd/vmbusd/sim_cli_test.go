package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/hvsock"
	"github.com/vmbusd/vmbusd/internal/echo"
	"github.com/vmbusd/vmbusd/netvsc"
	"github.com/vmbusd/vmbusd/vmbus"
)

// simProc is a `vmbusd sim` process that printed its ready line.
type simProc struct {
	cmd   *exec.Cmd
	lines []string // up to and including "ready ..."
	errb  *bytes.Buffer
	done  chan struct{}
	rest  []string
}

// runSimProc starts `vmbusd sim --root root args...` and waits for it to be
// ready; it is stopped (SIGTERM) at cleanup.
func runSimProc(t *testing.T, root string, args ...string) *simProc {
	t.Helper()
	cmd := exec.Command(vmbusdBin, append([]string{"sim", "--root", root}, args...)...)
	stdout, _ := cmd.StdoutPipe()
	p := &simProc{cmd: cmd, errb: &bytes.Buffer{}, done: make(chan struct{})}
	cmd.Stderr = p.errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		p.lines = append(p.lines, sc.Text())
		if strings.HasPrefix(sc.Text(), "ready ") {
			break
		}
	}
	if len(p.lines) == 0 || !strings.HasPrefix(p.lines[len(p.lines)-1], "ready ") {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("vmbusd sim did not start:\n%s\n%s", strings.Join(p.lines, "\n"), p.errb)
	}
	go func() {
		for sc.Scan() {
			p.rest = append(p.rest, sc.Text())
		}
		close(p.done)
	}()
	t.Cleanup(func() { p.stop() })
	return p
}

func (p *simProc) stop() {
	if p.cmd.ProcessState != nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.done
	p.cmd.Wait()
}

// field returns the second word of the first line starting with prefix
// ("device", "nic").
func (p *simProc) field(t *testing.T, prefix string) string {
	t.Helper()
	for _, l := range p.lines {
		if f := strings.Fields(l); len(f) > 1 && f[0] == prefix {
			return f[1]
		}
	}
	t.Fatalf("no %q line in:\n%s", prefix, strings.Join(p.lines, "\n"))
	return ""
}

func openSimDevice(t *testing.T, root, instance string) vmbus.Device {
	t.Helper()
	g, err := vmbus.ParseGUID(instance)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := vmbus.LookupDevice(root, g)
	if err != nil {
		t.Fatal(err)
	}
	return dev
}

// TestSimRefusesALiveRoot: a second `vmbusd sim` on a root another one
// serves exits non-zero at once with a clear message, and the first one's
// devices stay and keep working.
func TestSimRefusesALiveRoot(t *testing.T) {
	root := shmDirT(t)
	first := runSimProc(t, root, "--test", "1")
	node := filepath.Join(root, "dev", "uio0")
	before, err := os.Stat(node)
	if err != nil {
		t.Fatal(err)
	}
	// Bounded, so that a second sim that starts after all fails the test
	// instead of hanging it.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Second)
	out, err := exec.CommandContext(ctx2, vmbusdBin, "sim", "--root", root, "--test", "1").CombinedOutput()
	timedOut := ctx2.Err() != nil
	cancel2()
	if err == nil || timedOut || !strings.Contains(string(out), "in use by another simulated host") {
		t.Fatalf("second sim: %v\n%s", err, out)
	}
	if after, err := os.Stat(node); err != nil || !os.SameFile(before, after) {
		t.Fatalf("the first sim's %s was replaced or removed: %v", node, err)
	}
	hd, err := vmbus.Open(openSimDevice(t, root, first.field(t, "device")), vmbus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer hd.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := (&echo.Pump{Size: 64, Window: 8}).Run(ctx, hd.Primary(), 200); err != nil {
		t.Fatalf("the first sim stopped serving: %v", err)
	}
	hd.Close()
	first.stop()
	// Once the first is gone the root is free again.
	runSimProc(t, root, "--test", "1")
}

// TestSimFaultReachesEveryDevice: `vmbusd sim --fault` switches the fault
// on for the test devices, the NICs and every hv_sock connection's
// channel, as its help says. bad-type makes each device's first batch
// carry a packet of an unused type, which the guest's ring reader rejects.
func TestSimFaultReachesEveryDevice(t *testing.T) {
	root := shmDirT(t)
	front := filepath.Join(root, "hvsock-front")
	p := runSimProc(t, root, "--test", "1", "--nic", "1", "--hvsock", front, "--fault", "bad-type")
	badType := func(what string, err error) {
		t.Helper()
		if ce, ok := vmbus.IsCorrupt(err); !ok || ce.Kind != vmbus.CorruptType {
			t.Errorf("%s: %v, want a ring corruption of kind %s", what, err, vmbus.CorruptType)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	hd, err := vmbus.Open(openSimDevice(t, root, p.field(t, "device")), vmbus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	badType("test device", (&echo.Pump{Size: 64, Window: 8}).Run(ctx, hd.Primary(), 100))
	hd.Close()

	_, err = netvsc.Open(ctx, openSimDevice(t, root, p.field(t, "nic")), netvsc.Config{PoolPackets: 64})
	badType("NIC", err)

	l, err := (&hvsock.Config{Transport: hvsock.TransportVMBus, Root: root}).Listen(3001)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			got <- err
			return
		}
		defer c.Close()
		_, err = io.ReadAll(c)
		got <- err
	}()
	uc, err := net.Dial("unix", front)
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	io.WriteString(uc, "CONNECT 3001\n")
	uc.SetReadDeadline(time.Now().Add(20 * time.Second))
	if line, err := bufio.NewReader(uc).ReadString('\n'); err != nil || !strings.HasPrefix(line, "OK ") {
		t.Fatalf("front end: %q, %v", line, err)
	}
	uc.Write([]byte("hello"))
	select {
	case err := <-got:
		badType("hv_sock connection", err)
	case <-ctx.Done():
		t.Fatal("the guest's hv_sock connection saw nothing")
	}
}

// TestSimLeavesNoDeviceFiles: when `vmbusd sim` exits, nothing it served
// stays behind: no uio sockets, no hv_sock sockets, no guest memory file
// (the sysfs tree stays, as the kernel's would).
func TestSimLeavesNoDeviceFiles(t *testing.T) {
	root := shmDirT(t)
	front := filepath.Join(root, "hvsock-front")
	p := runSimProc(t, root, "--test", "1", "--nic", "1", "--hvsock", front)
	for _, f := range []string{"dev/uio0", "dev/uio1", "dev/vmbus-tl", "dev/guestmem", "hvsock-front"} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Fatalf("while running: %v", err)
		}
	}
	p.stop()
	if ents, err := os.ReadDir(filepath.Join(root, "dev")); err != nil || len(ents) != 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("R/dev after exit: %v %v, want empty", names, err)
	}
	if _, err := os.Stat(front); !os.IsNotExist(err) {
		t.Errorf("%s after exit: %v", front, err)
	}
	if _, err := os.Stat(filepath.Join(root, "proc/sys/kernel/osrelease")); err != nil {
		t.Errorf("the tree went too: %v", err)
	}
}
