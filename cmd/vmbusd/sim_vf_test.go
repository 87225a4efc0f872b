package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// TestSimVFServicingOnSIGUSR2 drives `vmbusd sim --vf` as dpdk-guest's
// run-vf.sh does: the stand-in appears with its PCI slot, SIGUSR2 takes
// it away and brings it back, SIGTERM removes everything.
func TestSimVFServicingOnSIGUSR2(t *testing.T) {
	needRoot(t)
	root := shmDirT(t)
	id := os.Getpid() % 100000
	host, guest := fmt.Sprintf("cvh%d", id), fmt.Sprintf("cvg%d", id)
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(host); err == nil {
			netlink.LinkDel(l)
		}
	})
	cmd := exec.Command(vmbusdBin, "sim", "--root", root, "--test", "0", "--nic", "1", "--port", "reflect",
		"--vf", host, "--vf-guest-if", guest, "--vf-serial", "4", "--vf-remove-delay", "1ms", "--vf-kind", "mana")
	cmd.Env = append(os.Environ(), "VF_IF=", "VF_NETNS=")
	stdout, _ := cmd.StdoutPipe()
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	expect := func(prefix string) string {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("vmbusd sim ended before %q:\n%s", prefix, errb.String())
				}
				if strings.HasPrefix(l, prefix) {
					return l
				}
			case <-deadline:
				t.Fatalf("no %q from vmbusd sim:\n%s", prefix, errb.String())
			}
		}
	}
	if l := expect("vf "); !strings.Contains(l, "host-if "+host) || !strings.Contains(l, "kind mana") {
		t.Errorf("vf line %q", l)
	}
	expect("ready ")
	slot := filepath.Join(root, "sys/bus/pci/slots/4/address")
	if _, err := os.Stat(slot); err != nil {
		t.Fatalf("slot: %v", err)
	}
	cmd.Process.Signal(syscall.SIGUSR2)
	expect(fmt.Sprintf("vf %s servicing: present false", host))
	if _, err := os.Stat(slot); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("slot after servicing: %v", err)
	}
	if _, err := netlink.LinkByName(guest); err == nil {
		t.Errorf("%s still there after servicing", guest)
	}
	cmd.Process.Signal(syscall.SIGUSR2)
	expect(fmt.Sprintf("vf %s servicing: present true", host))
	if _, err := netlink.LinkByName(guest); err != nil {
		t.Errorf("%s after the return: %v", guest, err)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	expect("guest violations total 0")
	if err := cmd.Wait(); err != nil {
		t.Errorf("vmbusd sim: %v\n%s", err, errb.String())
	}
	if _, err := netlink.LinkByName(host); err == nil {
		t.Errorf("%s left behind", host)
	}
}

func TestSimVFFlagErrors(t *testing.T) {
	root := shmDirT(t)
	for _, args := range [][]string{
		{"--vf", "vfx0", "--vf-kind", "bogus"},
		{"--vf", "vfx0", "--vf-order", "sideways"},
		{"--vf", "vfx0", "--vf-scenario", "meteor"},
	} {
		_, stderr, code := vmbusd(t, append([]string{"sim", "--root", root, "--test", "0", "--nic", "1"}, args...)...)
		if code != 2 {
			t.Errorf("%v: exit %d, want 2 (usage); %s", args, code, stderr)
		}
	}
}
