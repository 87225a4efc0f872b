package hvsock_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/hvsock"
	"github.com/vmbusd/vmbusd/internal/testutil"
	"github.com/vmbusd/vmbusd/sim"
)

// hangAfter is how long a call the test expects to return may take before
// the test calls it hung. It is no performance bound: the calls under test
// return in microseconds, or never (before the fix, CloseRead waited for a
// Read that nothing would end).
const hangAfter = 20 * time.Second

// recv takes the next value from ch, failing the test if none comes.
func recv[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(hangAfter):
		t.Fatalf("%s never returned", what)
		var zero T
		return zero
	}
}

// connKinds are the two ways an hv_sock connection comes to be; every
// close semantic holds for both.
var connKinds = []struct {
	name    string
	connect func(t *testing.T, e *testEnv, cfg hvsock.Config, port uint32) (*hvsock.Conn, *sim.HvSockConn)
}{
	{"GuestInitiated", func(t *testing.T, e *testEnv, cfg hvsock.Config, port uint32) (*hvsock.Conn, *sim.HvSockConn) {
		return e.pair(t, cfg, port)
	}},
	{"HostInitiated", func(t *testing.T, e *testEnv, cfg hvsock.Config, port uint32) (*hvsock.Conn, *sim.HvSockConn) {
		l, err := cfg.Listen(port)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return e.acceptPair(t, l, port)
	}},
}

type ioResult struct {
	n   int
	err error
}

// TestShutdownWakesBlocked: CloseRead, CloseWrite and Close end a Read
// waiting for data and a Write waiting for ring space (the host neither
// writes nor reads), instead of waiting for them as a lock would. The host
// never acts until the shutdown has returned, so a shutdown that waited
// would hang the test. Close's own linger is an hour here: the blocked
// calls must return while it lingers, and it ends only when the host
// closes too.
func TestShutdownWakesBlocked(t *testing.T) {
	cases := []struct {
		name        string
		read, write bool // block a Read, a Write
		shut        func(*hvsock.Conn) error
		lingers     bool  // shut returns only once the host has closed
		readErr     error // what the blocked Read returns
		writeErr    error // what the blocked Write returns
		after       func(t *testing.T, g *hvsock.Conn, h *sim.HvSockConn, wrote []byte)
	}{
		{
			name: "CloseRead", read: true, shut: (*hvsock.Conn).CloseRead, readErr: io.EOF,
			after: func(t *testing.T, g *hvsock.Conn, h *sim.HvSockConn, _ []byte) {
				// Reading stays shut and drops what the host sends;
				// writing is unaffected.
				if _, err := h.Write([]byte("dropped")); err != nil {
					t.Fatal(err)
				}
				if n, err := g.Read(make([]byte, 16)); n != 0 || err != io.EOF {
					t.Fatalf("Read after CloseRead = %d, %v; want 0, EOF", n, err)
				}
				if _, err := g.Write([]byte("still writing")); err != nil {
					t.Fatal(err)
				}
				if err := g.CloseWrite(); err != nil {
					t.Fatal(err)
				}
				if got := readAll(t, h); string(got) != "still writing" {
					t.Fatalf("host read %q", got)
				}
			},
		},
		{
			name: "CloseWrite", write: true, shut: (*hvsock.Conn).CloseWrite, writeErr: net.ErrClosed,
			after: func(t *testing.T, g *hvsock.Conn, h *sim.HvSockConn, wrote []byte) {
				// The FIN follows exactly the bytes the Write reported.
				if got := readAll(t, h); !bytes.Equal(got, wrote) {
					t.Fatalf("host read %d bytes before EOF, the Write reported %d", len(got), len(wrote))
				}
				_, err := g.Write([]byte("late"))
				var op *net.OpError
				if !errors.Is(err, syscall.EPIPE) || !errors.As(err, &op) {
					t.Fatalf("Write after CloseWrite = %v, want *net.OpError wrapping EPIPE", err)
				}
				// Reading is unaffected.
				if _, err := h.Write([]byte("answer")); err != nil {
					t.Fatal(err)
				}
				if err := h.CloseWrite(); err != nil {
					t.Fatal(err)
				}
				if got := readAll(t, g); string(got) != "answer" {
					t.Fatalf("guest read %q", got)
				}
			},
		},
		{
			name: "Close", read: true, write: true, shut: (*hvsock.Conn).Close, lingers: true,
			readErr: net.ErrClosed, writeErr: net.ErrClosed,
			after: func(t *testing.T, g *hvsock.Conn, _ *sim.HvSockConn, _ []byte) {
				if _, err := g.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
					t.Errorf("Read after Close = %v, want net.ErrClosed", err)
				}
				if _, err := g.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
					t.Errorf("Write after Close = %v, want net.ErrClosed", err)
				}
				if err := g.Close(); !errors.Is(err, net.ErrClosed) {
					t.Errorf("Close after Close = %v, want net.ErrClosed", err)
				}
			},
		},
	}
	for i, k := range connKinds {
		for j, tc := range cases {
			t.Run(k.name+"/"+tc.name, func(t *testing.T) {
				testutil.CheckGoroutineLeaks(t)
				e := newTestEnv(t, sim.HvSockConfig{})
				cfg := e.cfg
				cfg.Linger = time.Hour
				g, h := k.connect(t, e, cfg, 200+uint32(10*i+j))
				defer closePair(g, h)

				reads, writes := make(chan ioResult, 1), make(chan ioResult, 1)
				if tc.read {
					idle := g.Stats().Channel.IdleWaits
					go func() {
						n, err := g.Read(make([]byte, 64))
						reads <- ioResult{n, err}
					}()
					testutil.WaitFor(t, hangAfter, func() bool { return g.Stats().Channel.IdleWaits > idle }, "the Read to sleep")
				}
				data := make([]byte, 1<<20) // more than any ring holds
				fillPattern(data, uint64(j), 0)
				if tc.write {
					go func() {
						n, err := g.Write(data)
						writes <- ioResult{n, err}
					}()
					testutil.WaitFor(t, hangAfter, func() bool { return g.Stats().Channel.TxFullWaits > 0 }, "the Write to wait for ring space")
				}

				start := time.Now()
				shut := make(chan error, 1)
				go func() { shut <- tc.shut(g) }()
				var shutTook time.Duration
				if !tc.lingers {
					if err := recv(t, tc.name, shut); err != nil {
						t.Fatalf("%s = %v", tc.name, err)
					}
					shutTook = time.Since(start)
				}
				var wrote []byte
				if tc.read {
					r := recv(t, "the blocked Read", reads)
					if r.n != 0 || !errors.Is(r.err, tc.readErr) {
						t.Errorf("blocked Read = %d, %v; want 0, %v", r.n, r.err, tc.readErr)
					}
					t.Logf("the blocked Read returned %v after %s", time.Since(start), tc.name)
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
					t.Logf("the blocked Write returned %v after %s, %d bytes queued", time.Since(start), tc.name, r.n)
				}
				if tc.lingers {
					select {
					case err := <-shut:
						t.Fatalf("%s returned (%v) before the host finished: it did not linger", tc.name, err)
					default:
					}
					h.Close() // the host finishes: the linger ends
					if err := recv(t, tc.name, shut); err != nil {
						t.Fatalf("%s = %v", tc.name, err)
					}
				} else {
					t.Logf("%s returned in %v", tc.name, shutTook)
				}
				tc.after(t, g, h, wrote)
			})
		}
	}
}

// TestConcurrentCloseDoesNotWaitForLinger: of N+1 concurrent Closes, one
// lingers — the host keeps its side open, so it lingers until the host
// closes — and the other N return at once with the same result, nil. A
// Close after the lingering one has returned fails with net.ErrClosed, as
// on a *net.TCPConn.
func TestConcurrentCloseDoesNotWaitForLinger(t *testing.T) {
	const n = 8
	for i, k := range connKinds {
		t.Run(k.name, func(t *testing.T) {
			testutil.CheckGoroutineLeaks(t)
			e := newTestEnv(t, sim.HvSockConfig{})
			cfg := e.cfg
			cfg.Linger = time.Hour // a Close waiting for the linger would hang the test
			g, h := k.connect(t, e, cfg, 300+uint32(i))
			defer h.Close()
			results := make(chan error, n+1)
			start := time.Now()
			for range n + 1 {
				go func() { results <- g.Close() }()
			}
			for range n {
				if err := recv(t, "a concurrent Close", results); err != nil {
					t.Errorf("concurrent Close = %v, want nil (the first one's result)", err)
				}
			}
			t.Logf("%d of %d concurrent Closes returned within %v", n, n+1, time.Since(start))
			select {
			case err := <-results:
				t.Fatalf("every Close returned (last: %v) though the host has not finished: none lingered", err)
			default:
			}
			// The others return as soon as a Close is under way, which
			// can be before the lingering one has written the FIN.
			testutil.WaitFor(t, 10*time.Second, func() bool { return g.Stats().FINSent }, "the lingering Close to send the FIN")
			h.Close()
			if err := recv(t, "the lingering Close", results); err != nil {
				t.Fatalf("lingering Close = %v", err)
			}
			if g.Stats().Reset {
				t.Error("the host finished, yet the close was a reset")
			}
			if err := g.Close(); !errors.Is(err, net.ErrClosed) {
				t.Fatalf("Close after Close = %v, want net.ErrClosed", err)
			}
		})
	}
}

// TestWriteAfterHostFIN: the host's FIN ends only its direction. After a
// half-close every Write succeeds and the host reads them; after a full
// close the first Write still succeeds (as on TCP), the host answers the
// data with a rescind, and Writes fail with EPIPE from then on.
func TestWriteAfterHostFIN(t *testing.T) {
	cases := []struct {
		name  string
		close func(*sim.HvSockConn) error
		full  bool
	}{
		{"HostCloseWrite", (*sim.HvSockConn).CloseWrite, false},
		{"HostClose", (*sim.HvSockConn).Close, true},
	}
	for i, k := range connKinds {
		for j, tc := range cases {
			t.Run(k.name+"/"+tc.name, func(t *testing.T) {
				testutil.CheckGoroutineLeaks(t)
				e := newTestEnv(t, sim.HvSockConfig{})
				g, h := k.connect(t, e, e.cfg, 400+uint32(10*i+j))
				defer closePair(g, h)
				if err := tc.close(h); err != nil {
					t.Fatal(err)
				}
				if n, err := g.Read(make([]byte, 8)); n != 0 || err != io.EOF {
					t.Fatalf("Read after the host's FIN = %d, %v; want 0, EOF", n, err)
				}
				if _, err := g.Write([]byte("first")); err != nil {
					t.Fatalf("first Write after the host's FIN = %v, want success", err)
				}
				if !tc.full {
					if _, err := g.Write([]byte(" second")); err != nil {
						t.Fatal(err)
					}
					g.CloseWrite()
					if got := readAll(t, h); string(got) != "first second" {
						t.Fatalf("host read %q", got)
					}
					return
				}
				// Nobody reads: Writes succeed until the rescind, and a
				// Write blocked on the full ring ends with it.
				g.SetWriteDeadline(time.Now().Add(hangAfter))
				var err error
				for err == nil {
					_, err = g.Write(make([]byte, 4096))
				}
				var op *net.OpError
				if !errors.Is(err, syscall.EPIPE) || !errors.As(err, &op) {
					t.Fatalf("Write after the host closed = %v, want *net.OpError wrapping EPIPE", err)
				}
				if _, err := g.Write([]byte("x")); !errors.Is(err, syscall.EPIPE) {
					t.Fatalf("Write after the rescind = %v, want EPIPE", err)
				}
			})
		}
	}
}
