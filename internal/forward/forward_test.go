package forward_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/hvsock"
	"github.com/vmbusd/vmbusd/internal/forward"
	"github.com/vmbusd/vmbusd/internal/testutil"
	"github.com/vmbusd/vmbusd/sim"
)

// env is a simulated host with its hv_sock side, and a guest Config for it.
type env struct {
	host *sim.Host
	hv   *sim.HvSock
	cfg  hvsock.Config
}

func newEnv(t *testing.T) *env {
	t.Helper()
	root := t.TempDir()
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "forward-test-"); err == nil {
			root = d
			t.Cleanup(func() { os.RemoveAll(d) })
		}
	}
	h, err := sim.New(sim.Config{Root: root, Profile: sim.DefaultProfile})
	if err != nil {
		t.Fatal(err)
	}
	hv, err := h.StartHvSock(sim.HvSockConfig{})
	if err != nil {
		h.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		hv.Close()
		h.Close()
	})
	return &env{host: h, hv: hv, cfg: hvsock.Config{Transport: hvsock.TransportVMBus, Root: root}}
}

// serveSummary answers each connection, once its client has half-closed,
// with "got N bytes" followed by everything it read, then closes: the
// answer only arrives if the client's half-close was passed on and the
// way back stayed open.
func serveSummary(t *testing.T, ln net.Listener) {
	t.Helper()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b, err := io.ReadAll(c)
				if err != nil {
					return
				}
				fmt.Fprintf(c, "got %d bytes\n", len(b))
				c.Write(b)
			}()
		}
	}()
}

// request writes data to c, half-closes, and reads the answer to its end.
func request(c net.Conn, data []byte) ([]byte, error) {
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(data)
		if err == nil {
			err = c.(interface{ CloseWrite() error }).CloseWrite()
		}
		errc <- err
	}()
	b, rerr := io.ReadAll(c)
	if err := <-errc; err != nil {
		return b, err
	}
	return b, rerr
}

func wantAnswer(t *testing.T, got, data []byte) {
	t.Helper()
	want := append([]byte(fmt.Sprintf("got %d bytes\n", len(data))), data...)
	if !bytes.Equal(got, want) {
		t.Fatalf("answer of %d bytes, want %d", len(got), len(want))
	}
}

func testData(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>8)
	}
	return b
}

func serve(t *testing.T, f *forward.Forwarder) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Serve(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}
}

// waitClosed waits until n connections have been recorded as closed.
func waitClosed(t *testing.T, f *forward.Forwarder, n int) []forward.Stats {
	t.Helper()
	var c []forward.Stats
	testutil.WaitFor(t, 0, func() bool { c = f.Closed(); return len(c) >= n }, fmt.Sprintf("%d connections to close", n))
	return c
}

// TestHvsockPortToUnixSocket forwards a guest hv_sock port to a local Unix
// socket server; the host connects to the port (host-initiated), as a
// Windows program would.
func TestHvsockPortToUnixSocket(t *testing.T) {
	e := newEnv(t)
	sock := filepath.Join(t.TempDir(), "svc.sock")
	ul, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ul.Close()
	serveSummary(t, ul)
	hl, err := e.cfg.Listen(2800)
	if err != nil {
		t.Fatal(err)
	}
	f := &forward.Forwarder{Name: "hvsock:2800->unix", Listener: hl,
		Dial: func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}
	stop := serve(t, f)
	defer stop()

	const conns = 3
	var wg sync.WaitGroup
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := e.hv.Connect(context.Background(), 2800)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			data := testData(100<<10 + i)
			got, err := request(c, data)
			if err != nil {
				t.Error(err)
				return
			}
			want := append([]byte(fmt.Sprintf("got %d bytes\n", len(data))), data...)
			if !bytes.Equal(got, want) {
				t.Errorf("connection %d: answer of %d bytes, want %d", i, len(got), len(want))
			}
		}()
	}
	// The counters are readable while the copies run (the race detector
	// checks it): read them until the clients are done.
	copied := make(chan struct{})
	go func() { wg.Wait(); close(copied) }()
	pace := time.NewTicker(time.Millisecond) // paces the reader; it waits for nothing
	defer pace.Stop()
	for reading := true; reading; {
		for _, s := range f.Active() {
			_ = s.BytesIn + s.BytesOut
		}
		f.Totals()
		select {
		case <-copied:
			reading = false
		case <-pace.C:
		}
	}
	closed := waitClosed(t, f, conns)
	for _, s := range closed {
		if s.Reason != forward.ReasonDone || !s.InDone || !s.OutDone || s.Closed.Before(s.Opened) {
			t.Errorf("connection %+v: want done both ways", s)
		}
		n := s.BytesIn
		if want := uint64(len(fmt.Sprintf("got %d bytes\n", n))) + n; s.BytesOut != want {
			t.Errorf("connection %d: %d bytes out for %d in, want %d", s.ID, s.BytesOut, n, want)
		}
	}
	if tot := f.Totals(); tot.Accepted != conns || tot.Active != 0 || tot.DialFailed != 0 {
		t.Errorf("totals %+v", tot)
	}
}

// TestTCPToHvsockPort forwards a local TCP listener to a host hv_sock
// service; the guest dials it for each TCP client.
func TestTCPToHvsockPort(t *testing.T) {
	e := newEnv(t)
	hl, err := e.hv.Listen(2801)
	if err != nil {
		t.Fatal(err)
	}
	defer hl.Close()
	serveSummary(t, hl)
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &forward.Forwarder{Name: "tcp->hvsock:2801", Listener: tl,
		Dial: func(ctx context.Context) (net.Conn, error) { return e.cfg.Dial(ctx, 2801) }}
	stop := serve(t, f)
	defer stop()
	c, err := net.Dial("tcp", tl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	data := testData(1 << 20)
	got, err := request(c, data)
	if err != nil {
		t.Fatal(err)
	}
	wantAnswer(t, got, data)
	s := waitClosed(t, f, 1)[0]
	if s.Reason != forward.ReasonDone || s.BytesIn != uint64(len(data)) || s.Upstream != "host(2):2801" {
		t.Fatalf("stats %+v", s)
	}
}

// TestDialFailureIsRecorded: the host has no such service; the client's
// connection is closed and the record says why.
func TestDialFailureIsRecorded(t *testing.T) {
	e := newEnv(t)
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &forward.Forwarder{Name: "tcp->hvsock:2802", Listener: tl,
		Dial: func(ctx context.Context) (net.Conn, error) { return e.cfg.Dial(ctx, 2802) }}
	stop := serve(t, f)
	defer stop()
	c, err := net.Dial("tcp", tl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if b, _ := io.ReadAll(c); len(b) != 0 {
		t.Fatalf("read %q from a connection whose upstream was refused", b)
	}
	s := waitClosed(t, f, 1)[0]
	if s.Reason != forward.ReasonDialFailed || s.Err == "" {
		t.Fatalf("stats %+v", s)
	}
	if tot := f.Totals(); tot.DialFailed != 1 {
		t.Fatalf("totals %+v", tot)
	}
}

// TestCancelClosesEverything: ending the context stops accepting and
// closes the connections in flight; Serve returns once they are gone.
func TestCancelClosesEverything(t *testing.T) {
	e := newEnv(t)
	hl, err := e.hv.Listen(2803)
	if err != nil {
		t.Fatal(err)
	}
	defer hl.Close()
	go func() { // a host service that never answers
		for {
			c, err := hl.Accept()
			if err != nil {
				return
			}
			go io.Copy(io.Discard, c)
		}
	}()
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := e.cfg
	cfg.Linger = 100 * time.Millisecond
	f := &forward.Forwarder{Name: "tcp->hvsock:2803", Listener: tl,
		Dial: func(ctx context.Context) (net.Conn, error) { return cfg.Dial(ctx, 2803) }}
	stop := serve(t, f)
	c, err := net.Dial("tcp", tl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("hello"))
	testutil.WaitFor(t, 0, func() bool {
		a := f.Active()
		return len(a) > 0 && a[0].BytesIn >= 5
	}, "the forwarder to pass on the client's 5 bytes")
	stop()
	s := waitClosed(t, f, 1)[0]
	if s.Reason != forward.ReasonCanceled {
		t.Fatalf("stats %+v", s)
	}
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("client connection still open")
	}
	if _, err := net.Dial("tcp", tl.Addr().String()); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial after cancel: %v, want the listener closed", err)
	}
}

// TestMaxConnectionsClosesTheExcess: a client opening connection after
// connection gets at most MaxConnections forwarded; the others are closed
// at once and counted, and those within the limit still work.
func TestMaxConnectionsClosesTheExcess(t *testing.T) {
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	serveSummary(t, up)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &forward.Forwarder{Name: "limited", Listener: ln, MaxConnections: 2,
		Dial: func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", up.Addr().String())
		}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Serve(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	testutil.WaitFor(t, 0, func() bool { return f.Totals().Active == 2 }, "both held connections to be forwarded")
	extra, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	extra.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := extra.Read(make([]byte, 1)); err == nil {
		t.Fatal("the third connection was served")
	}
	if got := f.Totals().Refused; got != 1 {
		t.Fatalf("refused %d, want 1", got)
	}
	b, err := request(held[0], []byte("hello"))
	if err != nil || string(b) != "got 5 bytes\nhello" {
		t.Fatalf("a connection within the limit: %q %v", b, err)
	}
}
