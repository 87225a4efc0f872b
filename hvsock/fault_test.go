package hvsock_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/hvsock"
	"github.com/vmbusd/vmbusd/hvsock/wire"
	"github.com/vmbusd/vmbusd/internal/testutil"
	"github.com/vmbusd/vmbusd/sim"
	"github.com/vmbusd/vmbusd/vmbus"
	"github.com/vmbusd/vmbusd/vmbus/vmbustest"
)

// TestFinRacingTheLastData: the host publishes its last data and its FIN in
// one batch and rescinds right behind them (the 2025-26 Linux regression
// read -EIO there). The guest delivers every byte, then io.EOF; writes
// fail with EPIPE from the rescind on.
func TestFinRacingTheLastData(t *testing.T) {
	testutil.CheckGoroutineLeaks(t)
	for _, size := range []int{1, 4000, 18000} {
		t.Run(sizeName(size), func(t *testing.T) {
			g, h := pipePair(t, hvsock.Config{}, vmbustest.Options{})
			data := make([]byte, size)
			fillPattern(data, uint64(size), 0)
			if _, err := h.queue(data); err != nil {
				t.Fatal(err)
			}
			if err := h.finish(); err != nil { // FIN in the same batch, then the rescind
				t.Fatal(err)
			}
			got, err := io.ReadAll(g)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("guest read %d bytes, %v; want all %d of them, then EOF", len(got), err, size)
			}
			if _, err := g.Write([]byte("x")); !errors.Is(err, syscall.EPIPE) {
				t.Fatalf("Write after the rescind = %v, want EPIPE", err)
			}
			if err := g.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestRescindMidTransfer: the host takes the channel away while the guest
// is writing and reading. Reads end with the data that was in the ring and
// io.EOF, writes with EPIPE; nothing hangs, nothing panics.
func TestRescindMidTransfer(t *testing.T) {
	testutil.CheckGoroutineLeaks(t)
	cfg := hvsock.Config{Linger: time.Hour} // Close must not wait for a host that is gone
	g, h := pipePair(t, cfg, vmbustest.Options{})
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
	hw := make(chan error, 1)
	go func() {
		_, err := h.Write(make([]byte, 1<<20))
		hw <- err
	}()
	if _, err := io.CopyN(io.Discard, h, 256<<10); err != nil {
		t.Fatal(err)
	}
	h.p.Rescind()
	if err := <-werr; !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("Write across the rescind ended with %v, want EPIPE", err)
	}
	if err := <-rdone; err != nil {
		t.Fatalf("Read across the rescind ended with %v, want EOF (nil from io.Copy)", err)
	}
	if err := <-hw; err != nil && !errors.Is(err, vmbus.ErrChannelClosed) {
		t.Fatalf("the host's writer ended with %v", err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if g.Stats().Reset {
		t.Fatal("a rescinded connection's Close counted as a reset")
	}
}

// malformed returns a packet, as the host would put it on the ring, that is
// a valid VMBus packet but breaks the hv_sock framing rule kind names.
func malformed(t *testing.T, kind wire.FrameKind) []byte {
	t.Helper()
	desc := func(typ, off8, len8 uint16, body int) []byte {
		b := make([]byte, 16+body)
		binary.LittleEndian.PutUint16(b[0:], typ)
		binary.LittleEndian.PutUint16(b[2:], off8)
		binary.LittleEndian.PutUint16(b[4:], len8)
		return b
	}
	var pkt []byte
	switch kind {
	case wire.FrameShort: // a bare descriptor: no room for the pipe header
		pkt = desc(6, 2, 2, 0)
	case wire.FrameType: // a completion, not inband
		pkt = desc(0xb, 2, 3, 8)
		wire.PutPipeHeader(pkt[16:], 0)
	case wire.FrameOffset: // offset8 leaving no pipe header
		pkt = desc(6, 3, 3, 8)
	case wire.FramePipeType:
		pkt = desc(6, 2, 4, 16)
		binary.LittleEndian.PutUint32(pkt[16:], 3) // a GPA-direct setup packet
		binary.LittleEndian.PutUint32(pkt[20:], 4)
	case wire.FrameSize: // data_size beyond the packet
		pkt = desc(6, 2, 4, 16)
		wire.PutPipeHeader(pkt[16:], 64)
	case wire.FrameMTU:
		pkt = desc(6, 2, 4, 16)
		wire.PutPipeHeader(pkt[16:], wire.MTU+1)
	default:
		t.Fatalf("no malformed packet for %v", kind)
	}
	return pkt
}

// TestMalformedPacketsKillTheConnection injects, for each framing rule, a
// packet that breaks it: the guest's Read fails with that FrameError kind
// (Linux: -EIO), further operations fail the same way, and another
// connection carries on.
func TestMalformedPacketsKillTheConnection(t *testing.T) {
	testutil.CheckGoroutineLeaks(t)
	cfg := hvsock.Config{Linger: -1}
	good, goodH := pipePair(t, cfg, vmbustest.Options{})
	for _, kind := range wire.FrameKinds() {
		t.Run(kind.String(), func(t *testing.T) {
			g, h := pipePair(t, cfg, vmbustest.Options{})
			if _, err := h.Write([]byte("fine")); err != nil {
				t.Fatal(err)
			}
			if err := h.h.Out().WriteRaw(malformed(t, kind)); err != nil {
				t.Fatal(err)
			}
			if err := h.h.Flush(); err != nil {
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
			if _, err := good.Write([]byte("ok")); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(goodH, b[:2]); err != nil || string(b[:2]) != "ok" {
				t.Fatalf("healthy connection: %q, %v", b[:2], err)
			}
		})
	}
}

// TestRingCorruptionKillsTheConnection: a host that breaks the VMBus ring
// rules (bad descriptors, indices out of range) ends the connection with
// the ring's CorruptError of that kind, on the side that finds it.
func TestRingCorruptionKillsTheConnection(t *testing.T) {
	testutil.CheckGoroutineLeaks(t)
	kinds := []vmbus.CorruptKind{vmbus.CorruptOffset, vmbus.CorruptLength, vmbus.CorruptType, vmbus.CorruptFlags,
		vmbus.CorruptRanges, vmbus.CorruptShortPacket, vmbus.CorruptWriteIndex, vmbus.CorruptReadIndex}
	for _, kind := range kinds {
		t.Run(kind.String(), func(t *testing.T) {
			g, h := pipePair(t, hvsock.Config{Linger: -1}, vmbustest.Options{})
			if _, err := h.Write([]byte("data")); err != nil {
				t.Fatal(err)
			}
			if err := h.h.WriteCorrupt(kind); err != nil {
				t.Fatal(err)
			}
			var err error
			if kind == vmbus.CorruptReadIndex {
				// The guest finds it when it looks for room to write.
				_, err = g.Write(make([]byte, 1))
			} else {
				var got []byte
				got, err = io.ReadAll(g)
				// A bad write index takes back the publication of the
				// data too; every other fault comes after it.
				if kind != vmbus.CorruptWriteIndex && string(got) != "data" {
					t.Errorf("read %q before the corruption, want the data", got)
				}
			}
			if ce, ok := vmbus.IsCorrupt(err); !ok || ce.Kind != kind {
				t.Fatalf("got %v, want a vmbus CorruptError %v", err, kind)
			}
		})
	}
}

// TestHostThatStopsReading: the guest's Write blocks on pending_send_sz;
// a write deadline ends it with os.ErrDeadlineExceeded and the count
// written; when the host reads again, writing resumes and nothing is lost.
func TestHostThatStopsReading(t *testing.T) {
	testutil.CheckGoroutineLeaks(t)
	g, h := pipePair(t, hvsock.Config{}, vmbustest.Options{})
	h.p.SetFault(vmbustest.FaultStopReading, true)
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(h) // held until the fault is off
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
	testutil.WaitFor(t, hangAfter, func() bool { return g.Stats().Channel.TxFullWaits > 0 }, "the write to block on the full ring")
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
	h.p.SetFault(vmbustest.FaultStopReading, false)
	g.SetWriteDeadline(time.Time{})
	if _, err := g.Write(data[n:]); err != nil {
		t.Fatal(err)
	}
	g.CloseWrite()
	if b := <-got; !bytes.Equal(b, data) {
		t.Fatalf("host got %d bytes, want %d intact", len(b), len(data))
	}
	if err := h.finish(); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil || g.Stats().Reset {
		t.Fatalf("Close = %v, reset %v: the host finished its side", err, g.Stats().Reset)
	}
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

// guestRaw builds a guest data packet by hand: the pipe header at offset8
// off8 (2 is what every sender uses), pipe type ptype, payload data.
func guestRaw(off8 int, ptype uint32, data []byte) []byte {
	body := off8*8 + wire.PipeHeaderSize + len(data)
	pkt := make([]byte, (body+7)&^7)
	binary.LittleEndian.PutUint16(pkt[0:], 6) // inband
	binary.LittleEndian.PutUint16(pkt[2:], uint16(off8))
	binary.LittleEndian.PutUint16(pkt[4:], uint16(len(pkt)/8))
	binary.LittleEndian.PutUint32(pkt[off8*8:], ptype)
	binary.LittleEndian.PutUint32(pkt[off8*8+4:], uint32(len(data)))
	copy(pkt[off8*8+wire.PipeHeaderSize:], data)
	return pkt
}

// TestHostReadsGuestPacketsInPlace: the simulated host copies payloads
// straight out of the ring, in whatever pieces its reader asks for, also
// from a packet whose pipe header sits past offset8 2 (legal, though no
// sender does it), and still resets the connection on a pipe type that
// is neither DATA nor PARTIAL.
func TestHostReadsGuestPacketsInPlace(t *testing.T) {
	e := newTestEnv(t, sim.HvSockConfig{})
	g, h := e.pair(t, e.cfg, 850)
	defer closePair(g, h)
	ch := hvsock.GuestChannel(g)
	for _, pkt := range [][]byte{guestRaw(2, wire.PipeData, []byte("abc")), guestRaw(3, wire.PipeData, []byte("defghij"))} {
		if err := ch.Out().WriteRaw(pkt); err != nil {
			t.Fatal(err)
		}
	}
	if err := ch.Flush(); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 50000)
	for i := range big {
		big[i] = byte(i * 7)
	}
	wrote := make(chan error, 1)
	go func() {
		_, err := g.Write(big)
		wrote <- err
	}()
	want := append([]byte("abcdefghij"), big...)
	h.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, 0, len(want))
	var b [4]byte // partial reads throughout
	for len(got) < 20 {
		n, err := h.Read(b[:])
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, b[:n]...)
	}
	rest := make([]byte, len(want)-len(got))
	if _, err := io.ReadFull(h, rest); err != nil {
		t.Fatal(err)
	}
	if got = append(got, rest...); !bytes.Equal(got, want) {
		t.Fatal("the host read other bytes than the guest sent")
	}
	if v := e.hv.Stats().Violations; v != 0 {
		t.Fatalf("%d violations for legal packets", v)
	}
	if err := <-wrote; err != nil { // the channel is the test's again
		t.Fatal(err)
	}

	if err := ch.Out().WriteRaw(guestRaw(2, 3, []byte("gpa?"))); err != nil {
		t.Fatal(err)
	}
	ch.Flush()
	var fe *wire.FrameError
	if _, err := h.Read(b[:]); !errors.As(err, &fe) || fe.Kind != wire.FramePipeType {
		t.Fatalf("host Read of a pipe type 3 packet = %v, want a FramePipeType error", err)
	}
	if v := e.hv.Stats().Violations; v != 1 {
		t.Fatalf("%d violations, want 1", v)
	}
}
