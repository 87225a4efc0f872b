package hvsock_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/hvsock/wire"
	"github.com/vmbusd/vmbusd/sim"
	"github.com/vmbusd/vmbusd/vmbus"
)

// TestFinRacingTheLastData: the host publishes its last data and its FIN in
// one batch and rescinds right behind them (the 2025-26 Linux regression
// read -EIO there). The guest delivers every byte, then io.EOF.
func TestFinRacingTheLastData(t *testing.T) {
	checkGoroutines(t)
	e := newTestEnv(t, sim.HvSockConfig{})
	for _, size := range []int{1, 4000, 18000} {
		g, h := e.pair(t, e.cfg, 800)
		h.SetFinRace(true)
		data := make([]byte, size)
		fillPattern(data, uint64(size), 0)
		sess := h.Device().Session()
		if _, err := h.Write(data); err != nil {
			t.Fatal(err)
		}
		if err := h.CloseWrite(); err != nil {
			t.Fatal(err)
		}
		// Let the rescind land before the guest reads anything.
		<-sess.Done()
		got, err := io.ReadAll(g)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%d bytes: guest read %d bytes, %v; want all of them, then EOF", size, len(got), err)
		}
		// The rescind reaches the guest on its own (the uio node's end of
		// file); a write racing it may still succeed, as in Linux. Once
		// it has arrived, writes fail with EPIPE.
		var werr error
		waitFor(t, "a write to fail after the rescind", func() bool {
			_, werr = g.Write([]byte("x"))
			return werr != nil
		})
		if !errors.Is(werr, syscall.EPIPE) {
			t.Fatalf("Write after the rescind = %v, want EPIPE", werr)
		}
		g.Close()
		h.Close()
	}
}

// TestRescindMidTransfer: the host takes the channel away while the guest
// is writing and reading. Reads end with the data that was in the ring and
// io.EOF, writes with EPIPE; nothing hangs, nothing panics.
func TestRescindMidTransfer(t *testing.T) {
	checkGoroutines(t)
	e := newTestEnv(t, sim.HvSockConfig{})
	cfg := e.cfg
	cfg.Linger = time.Hour // Close must not wait for a host that is gone
	g, h := e.pair(t, cfg, 801)
	werr := make(chan error, 1)
	go func() {
		var err error
		for err == nil {
			_, err = g.Write(make([]byte, 32<<10))
		}
		werr <- err
	}()
	rdone := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, g)
		rdone <- err
	}()
	// Traffic both ways for a while.
	go io.Copy(h, bytes.NewReader(make([]byte, 1<<20)))
	if _, err := io.CopyN(io.Discard, h, 256<<10); err != nil {
		t.Fatal(err)
	}
	if err := h.Device().Rescind(); err != nil {
		t.Fatal(err)
	}
	if err := <-werr; !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("Write across the rescind ended with %v, want EPIPE", err)
	}
	if err := <-rdone; err != nil {
		t.Fatalf("Read across the rescind ended with %v, want EOF (nil from io.Copy)", err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if g.Stats().Reset {
		t.Fatal("a rescinded connection's Close counted as a reset")
	}
	h.Close()
}

// TestMalformedPacketsKillTheConnection injects, for each framing rule, a
// packet that breaks it: the guest's Read fails with that FrameError kind
// (Linux: -EIO), further operations fail the same way, the host is not
// blamed, and other connections carry on.
func TestMalformedPacketsKillTheConnection(t *testing.T) {
	checkGoroutines(t)
	e := newTestEnv(t, sim.HvSockConfig{})
	good, goodH := e.pair(t, e.cfg, 802)
	defer closePair(good, goodH)
	for i, kind := range sim.HvSockMalformed {
		t.Run(kind.String(), func(t *testing.T) {
			cfg := e.cfg
			cfg.Linger = -1
			g, h := e.pair(t, cfg, uint32(810+i))
			defer h.Close()
			h.Write([]byte("fine"))
			if err := h.InjectMalformed(kind); err != nil {
				t.Fatal(err)
			}
			b := make([]byte, 4)
			if _, err := io.ReadFull(g, b); err != nil || string(b) != "fine" {
				t.Fatalf("data before the bad packet: %q, %v", b, err)
			}
			_, err := g.Read(b)
			var fe *wire.FrameError
			var op *net.OpError
			if !errors.As(err, &fe) || fe.Kind != kind || !errors.As(err, &op) {
				t.Fatalf("Read = %v, want *net.OpError wrapping FrameError %v", err, kind)
			}
			if _, err := g.Read(b); !errors.As(err, &fe) {
				t.Fatalf("second Read = %v, want the same FrameError", err)
			}
			if _, err := g.Write(b); !errors.As(err, &fe) {
				t.Fatalf("Write on the dead connection = %v, want the FrameError", err)
			}
			g.Close()
			// The healthy connection is unaffected.
			good.Write([]byte("ok"))
			if _, err := io.ReadFull(goodH, b[:2]); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestRingCorruptionKillsTheConnection: the simulator's VMBus-level faults
// (bad descriptors, a write index out of range) end the connection with the
// ring's CorruptError.
func TestRingCorruptionKillsTheConnection(t *testing.T) {
	checkGoroutines(t)
	e := newTestEnv(t, sim.HvSockConfig{})
	for i, f := range []sim.Fault{sim.FaultBadLen8, sim.FaultBadOffset8, sim.FaultBadType, sim.FaultBadFlags, sim.FaultCorruptWriteIndex} {
		cfg := e.cfg
		cfg.Linger = -1
		g, h := e.pair(t, cfg, uint32(820+i))
		h.Device().SetFault(f, true)
		h.Write([]byte("data"))
		_, err := io.ReadAll(g)
		if _, ok := vmbus.IsCorrupt(err); !ok {
			t.Errorf("%v: Read = %v, want a vmbus CorruptError", f, err)
		}
		g.Close()
		h.Close()
	}
}

// TestHostThatStopsReading: the guest's Write blocks on pending_send_sz;
// a write deadline ends it with os.ErrDeadlineExceeded and the count
// written; when the host reads again, writing resumes and nothing is lost.
func TestHostThatStopsReading(t *testing.T) {
	checkGoroutines(t)
	e := newTestEnv(t, sim.HvSockConfig{})
	g, h := e.pair(t, e.cfg, 830)
	h.Device().SetFault(sim.FaultStopDraining, true)
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(h) // Throttled until the fault is off.
		got <- b
	}()
	data := make([]byte, 256<<10)
	fillPattern(data, 3, 0)
	type res struct {
		n   int
		err error
	}
	wres := make(chan res, 1)
	go func() {
		n, err := g.Write(data)
		wres <- res{n, err}
	}()
	waitFor(t, "the write to block on the full ring", func() bool { return g.Stats().Channel.TxFullWaits > 0 })
	g.SetWriteDeadline(time.Now()) // a deadline passing under a blocked Write
	r := <-wres
	n, err := r.n, r.err
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Write to a stalled host = %d, %v; want a timeout", n, err)
	}
	if n == 0 || n >= len(data) {
		t.Fatalf("wrote %d bytes before the timeout, want part of %d", n, len(data))
	}
	h.Device().SetFault(sim.FaultStopDraining, false)
	g.SetWriteDeadline(time.Time{})
	if _, err := g.Write(data[n:]); err != nil {
		t.Fatal(err)
	}
	g.CloseWrite()
	if b := <-got; !bytes.Equal(b, data) {
		t.Fatalf("host got %d bytes, want %d intact", len(b), len(data))
	}
	closePair(g, h)
}

// TestGuestViolationsAreNone: a busy connection breaks none of the host's
// rules (the simulator counts violations per kind).
func TestGuestViolationsAreNone(t *testing.T) {
	e := newTestEnv(t, sim.HvSockConfig{})
	g, h := e.pair(t, e.cfg, 840)
	go func() {
		io.Copy(g, bytes.NewReader(make([]byte, 4<<20)))
		g.CloseWrite()
	}()
	io.Copy(io.Discard, h)
	closePair(g, h)
	if v := e.host.Violations(); len(v) != 0 {
		t.Fatalf("violations %v", v)
	}
	if e.hv.Stats().Violations != 0 {
		t.Fatalf("hv_sock violations %d", e.hv.Stats().Violations)
	}
}
