package hvsock_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/clock/clocktest"
	"github.com/vmbusd/vmbusd/hvsock"
	"github.com/vmbusd/vmbusd/internal/testutil"
	"github.com/vmbusd/vmbusd/sim"
)

func readAll(t *testing.T, r io.Reader) []byte {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return b
}

func TestGuestCloseWriteKeepsReading(t *testing.T) {
	testutil.CheckGoroutineLeaks(t)
	e := newTestEnv(t, sim.HvSockConfig{})
	g, h := e.pair(t, e.cfg, 100)
	if _, err := g.Write([]byte("request")); err != nil {
		t.Fatal(err)
	}
	if err := g.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, h); string(got) != "request" {
		t.Fatalf("host read %q", got)
	}
	_, err := g.Write([]byte("more"))
	var op *net.OpError
	if !errors.Is(err, syscall.EPIPE) || !errors.As(err, &op) {
		t.Fatalf("Write after CloseWrite = %v, want *net.OpError wrapping EPIPE", err)
	}
	// The host answers after the guest's FIN: half-close, not close.
	if _, err := h.Write([]byte("response")); err != nil {
		t.Fatal(err)
	}
	if err := h.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, g); string(got) != "response" {
		t.Fatalf("guest read %q", got)
	}
	// Both directions are done: the host rescinds, and Close has nothing
	// to wait for.
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	h.Close()
	st := g.Stats()
	if !st.FINSent || !st.FINReceived || st.Reset {
		t.Fatalf("stats %+v: want FIN sent and received, no reset", st)
	}
}

func TestHostCloseWriteIsGuestEOF(t *testing.T) {
	testutil.CheckGoroutineLeaks(t)
	e := newTestEnv(t, sim.HvSockConfig{})
	g, h := e.pair(t, e.cfg, 101)
	h.Write([]byte("bye"))
	h.CloseWrite()
	if got := readAll(t, g); string(got) != "bye" {
		t.Fatalf("guest read %q", got)
	}
	// EOF again, and writing still works.
	if n, err := g.Read(make([]byte, 8)); n != 0 || err != io.EOF {
		t.Fatalf("second Read after EOF = %d, %v", n, err)
	}
	if _, err := g.Write([]byte("still here")); err != nil {
		t.Fatal(err)
	}
	g.CloseWrite()
	if got := readAll(t, h); string(got) != "still here" {
		t.Fatalf("host read %q", got)
	}
	g.Close()
	h.Close()
}

func TestCloseReadIsLocal(t *testing.T) {
	testutil.CheckGoroutineLeaks(t)
	e := newTestEnv(t, sim.HvSockConfig{})
	g, h := e.pair(t, e.cfg, 102)
	if err := g.CloseRead(); err != nil {
		t.Fatal(err)
	}
	// The host does not know: its write succeeds, and is dropped.
	if _, err := h.Write([]byte("ignored")); err != nil {
		t.Fatal(err)
	}
	if n, err := g.Read(make([]byte, 16)); n != 0 || err != io.EOF {
		t.Fatalf("Read after CloseRead = %d, %v; want 0, EOF", n, err)
	}
	// Writing is unaffected.
	g.Write([]byte("hello"))
	g.CloseWrite()
	if got := readAll(t, h); string(got) != "hello" {
		t.Fatalf("host read %q", got)
	}
	h.Close()
	g.Close()
	if st := g.Stats(); st.Discarded != uint64(len("ignored")) {
		t.Errorf("discarded %d bytes, want %d", st.Discarded, len("ignored"))
	}
}

// TestCloseDeliversEverythingWritten writes more than the ring holds and
// closes at once; the host reads late and slowly. Close waits for the host
// to finish, and every byte arrives, then EOF.
func TestCloseDeliversEverythingWritten(t *testing.T) {
	testutil.CheckGoroutineLeaks(t)
	e := newTestEnv(t, sim.HvSockConfig{})
	g, h := e.pair(t, e.cfg, 103)
	data := make([]byte, 512<<10) // twice the largest ring
	fillPattern(data, 7, 0)
	closed := make(chan error, 1)
	go func() {
		if _, err := g.Write(data); err != nil {
			closed <- err
			return
		}
		closed <- g.Close()
	}()
	var got bytes.Buffer
	buf := make([]byte, 3000)
	for {
		n, err := h.Read(buf)
		got.Write(buf[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	h.Close()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("host got %d bytes, want the %d written", got.Len(), len(data))
	}
	if g.Stats().Reset {
		t.Fatal("Close reset a connection the host finished")
	}
}

// TestCloseLingerResets: the host keeps its side open; Close waits the
// whole linger (DefaultLinger, on a fake clock), then gives up and resets,
// and the host sees the reset.
func TestCloseLingerResets(t *testing.T) {
	testutil.CheckGoroutineLeaks(t)
	e := newTestEnv(t, sim.HvSockConfig{})
	cfg := e.cfg
	clk := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg.Linger, cfg.Clock = 0, clk
	g, h := e.pair(t, cfg, 104)
	defer h.Close()
	// The host reads the guest's FIN but never closes its side, and
	// keeps writing: Close drains that while it waits.
	go io.Copy(io.Discard, h)
	go func() {
		for {
			if _, err := h.Write(make([]byte, 4096)); err != nil {
				return
			}
		}
	}()
	closed := make(chan error, 1)
	go func() { closed <- g.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := clk.WaitTimer(ctx, hvsock.DefaultLinger); err != nil {
		t.Fatal(err)
	}
	// Close drains the host's data while it lingers.
	poll := time.NewTicker(time.Millisecond)
	defer poll.Stop()
	for g.Stats().Discarded == 0 {
		select {
		case <-poll.C:
		case <-ctx.Done():
			t.Fatal("Close discarded nothing the host sent while lingering")
		}
	}
	clk.Advance(hvsock.DefaultLinger - 1)
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) before the linger ended", err)
	default:
	}
	clk.Advance(1)
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("Close did not return after the linger")
	}
	st := g.Stats()
	if !st.Reset || st.Discarded == 0 {
		t.Fatalf("stats %+v: want a reset and discarded host data", st)
	}
	if _, err := g.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write after Close = %v, want net.ErrClosed", err)
	}
	if err := g.Close(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("second Close = %v, want net.ErrClosed", err)
	}
}

// TestCloseAfterHostRescind: the host finished and rescinded first; the
// guest still reads what was left, and Close does not wait.
func TestCloseAfterHostRescind(t *testing.T) {
	testutil.CheckGoroutineLeaks(t)
	e := newTestEnv(t, sim.HvSockConfig{})
	cfg := e.cfg
	cfg.Linger = time.Hour // a wait would hang the test
	g, h := e.pair(t, cfg, 105)
	h.Write([]byte("last words"))
	h.Close()
	g.CloseWrite() // the host's drain reads our FIN: both done, rescind
	if got := readAll(t, g); string(got) != "last words" {
		t.Fatalf("guest read %q", got)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if g.Stats().Reset {
		t.Fatal("reset after the host's rescind")
	}
}

func TestLingerNegativeClosesAtOnce(t *testing.T) {
	testutil.CheckGoroutineLeaks(t)
	e := newTestEnv(t, sim.HvSockConfig{})
	cfg := e.cfg
	cfg.Linger = -1
	g, h := e.pair(t, cfg, 106)
	defer h.Close()
	g.Write([]byte("x"))
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if !g.Stats().Reset {
		t.Fatal("no linger: the close should be a reset")
	}
}
