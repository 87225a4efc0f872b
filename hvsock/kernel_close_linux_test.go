package hvsock_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vmbusd/vmbusd/hvsock"
	"github.com/vmbusd/vmbusd/internal/testutil"
)

// kernelPair returns a kernel-transport Conn over one end of a Unix stream
// socket pair (no Hyper-V host here to give it an AF_VSOCK peer) and the
// other end. The code under test — the wake-ups of CloseRead, CloseWrite
// and Close, the error mapping — is the transport's, not the socket's.
func kernelPair(t *testing.T) (*hvsock.Conn, net.Conn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Small buffers, so a Write blocks after little data.
	unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_SNDBUF, 4096)
	unix.SetsockoptInt(fds[1], unix.SOL_SOCKET, unix.SO_RCVBUF, 4096)
	g, err := hvsock.KernelConnFromFD(fds[0])
	if err != nil {
		t.Fatal(err)
	}
	f := newFile(fds[1])
	h, err := net.FileConn(f)
	f.Close()
	if err != nil {
		g.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close(); h.Close() })
	return g, h
}

// waitInPoller waits until a goroutine whose stack holds fn is parked in
// the netpoller: a Read or Write that is really blocked, not about to be.
func waitInPoller(t *testing.T, fn string) {
	t.Helper()
	testutil.WaitBlocked(t, hangAfter, fn, "IO wait")
}

// TestKernelShutdownWakesBlocked is TestShutdownWakesBlocked for the kernel
// transport. A vsock socket shut for writing never polls writable, and a
// Unix one need not either, so the blocked Write returns only because
// CloseWrite wakes it.
func TestKernelShutdownWakesBlocked(t *testing.T) {
	cases := []struct {
		name        string
		read, write bool
		shut        func(*hvsock.Conn) error
		readErr     error
		writeErr    error
		after       func(t *testing.T, g *hvsock.Conn, h net.Conn, wrote []byte)
	}{
		{
			name: "CloseRead", read: true, shut: (*hvsock.Conn).CloseRead, readErr: io.EOF,
			after: func(t *testing.T, g *hvsock.Conn, h net.Conn, _ []byte) {
				if n, err := g.Read(make([]byte, 16)); n != 0 || err != io.EOF {
					t.Fatalf("Read after CloseRead = %d, %v; want 0, EOF", n, err)
				}
				if _, err := g.Write([]byte("still writing")); err != nil {
					t.Fatal(err)
				}
				g.CloseWrite()
				if got := readAll(t, h); string(got) != "still writing" {
					t.Fatalf("peer read %q", got)
				}
			},
		},
		{
			name: "CloseWrite", write: true, shut: (*hvsock.Conn).CloseWrite, writeErr: net.ErrClosed,
			after: func(t *testing.T, g *hvsock.Conn, h net.Conn, wrote []byte) {
				if got := readAll(t, h); !bytes.Equal(got, wrote) {
					t.Fatalf("peer read %d bytes before EOF, the Write reported %d", len(got), len(wrote))
				}
				if _, err := g.Write([]byte("late")); !errors.Is(err, syscall.EPIPE) {
					t.Fatalf("Write after CloseWrite = %v, want EPIPE", err)
				}
				h.Write([]byte("answer"))
				h.(*net.UnixConn).CloseWrite()
				if got := readAll(t, g); string(got) != "answer" {
					t.Fatalf("read %q", got)
				}
			},
		},
		{
			name: "Close", read: true, write: true, shut: (*hvsock.Conn).Close,
			readErr: net.ErrClosed, writeErr: net.ErrClosed,
			after: func(t *testing.T, g *hvsock.Conn, _ net.Conn, _ []byte) {
				if err := g.Close(); !errors.Is(err, net.ErrClosed) {
					t.Errorf("Close after Close = %v, want net.ErrClosed", err)
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			testutil.CheckGoroutineLeaks(t)
			g, h := kernelPair(t)
			reads, writes := make(chan ioResult, 1), make(chan ioResult, 1)
			if tc.read {
				go func() {
					n, err := g.Read(make([]byte, 64))
					reads <- ioResult{n, err}
				}()
				waitInPoller(t, "(*kernelStream).Read")
			}
			data := make([]byte, 4<<20) // more than the socket buffers hold
			fillPattern(data, 5, 0)
			if tc.write {
				go func() {
					n, err := g.Write(data)
					writes <- ioResult{n, err}
				}()
				waitInPoller(t, "(*kernelStream).Write")
			}
			start := time.Now()
			if err := tc.shut(g); err != nil {
				t.Fatalf("%s = %v", tc.name, err)
			}
			t.Logf("%s returned in %v", tc.name, time.Since(start))
			var wrote []byte
			if tc.read {
				r := recv(t, "the blocked Read", reads)
				if r.n != 0 || !errors.Is(r.err, tc.readErr) {
					t.Errorf("blocked Read = %d, %v; want 0, %v", r.n, r.err, tc.readErr)
				}
			}
			if tc.write {
				r := recv(t, "the blocked Write", writes)
				var op *net.OpError
				if !errors.Is(r.err, tc.writeErr) || !errors.As(r.err, &op) || op.Op != "write" {
					t.Errorf("blocked Write = %v, want *net.OpError write wrapping %v", r.err, tc.writeErr)
				}
				if r.n == 0 || r.n >= len(data) {
					t.Errorf("blocked Write reported %d of %d bytes written", r.n, len(data))
				}
				wrote = data[:r.n]
			}
			t.Logf("the blocked calls returned %v after %s", time.Since(start), tc.name)
			tc.after(t, g, h, wrote)
		})
	}
}

// TestKernelConcurrentClose: close(2) does not linger, so the first
// Close's result is decided at once; concurrent Closes return it while it
// is being decided, or net.ErrClosed once it has returned. None waits.
func TestKernelConcurrentClose(t *testing.T) {
	testutil.CheckGoroutineLeaks(t)
	g, _ := kernelPair(t)
	const n = 8
	results := make(chan error, n)
	for range n {
		go func() { results <- g.Close() }()
	}
	nils := 0
	for range n {
		err := recv(t, "a concurrent Close", results)
		switch {
		case err == nil:
			nils++
		case !errors.Is(err, net.ErrClosed):
			t.Errorf("concurrent Close = %v, want nil or net.ErrClosed", err)
		}
	}
	if nils == 0 {
		t.Fatal("no Close returned nil")
	}
	if err := g.Close(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Close after Close = %v, want net.ErrClosed", err)
	}
}
