package vmbustest_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/internal/testutil"
	"github.com/vmbusd/vmbusd/vmbus"
	"github.com/vmbusd/vmbusd/vmbus/vmbustest"
)

// A Pair stands where a driver expects the device it opened.
var _ interface {
	Primary() *vmbus.Channel
	Channels() []*vmbus.Channel
	Interrupts() uint64
	Err() error
	Close() error
} = (*vmbustest.Pair)(nil)

// The same method set on the real thing, so the two cannot drift apart.
var _ interface {
	Primary() *vmbus.Channel
	Channels() []*vmbus.Channel
	Interrupts() uint64
	Err() error
	Close() error
} = (*vmbus.Handle)(nil)

func kernel(t testing.TB, release string) *vmbus.Kernel {
	t.Helper()
	k, err := vmbus.KernelForRelease(release)
	if err != nil {
		t.Fatal(err)
	}
	return &k
}

// releases are one kernel of each uio_hv_generic behaviour.
var releases = []string{"5.15", "6.10", "6.16", "6.18"}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	t.Cleanup(cancel)
	return ctx
}

// echoHost answers every packet the guest sends with a completion
// carrying the same id and payload, until the host end dies or ctx ends.
func echoHost(ctx context.Context, h *vmbustest.Host) error {
	for {
		p, err := h.Recv()
		if err == vmbus.ErrRingEmpty {
			if err := h.CommitRecv(); err != nil {
				return err
			}
			if err := h.WaitReadable(ctx); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		for {
			err := h.SendCompletion(p.TransID, p.Payload())
			var full *vmbus.RingFullError
			if !errors.As(err, &full) {
				if err != nil {
					return err
				}
				break
			}
			if err := h.Flush(); err != nil {
				return err
			}
			if err := h.WaitWritable(ctx, full.Need); err != nil {
				return err
			}
		}
		if err := h.Flush(); err != nil {
			return err
		}
	}
}

// pump sends n requests, at most window at a time, and checks that each
// comes back with its cookie and payload.
func pump(ctx context.Context, ch *vmbus.Channel, n, window, size int) error {
	payload := make([]byte, size)
	sent, got := 0, 0
	for got < n {
		for sent < n && ch.InFlight() < window {
			binary.LittleEndian.PutUint64(payload, uint64(sent))
			_, err := ch.SendRequest(vmbus.PacketInband, uint64(sent), nil, payload)
			var full *vmbus.RingFullError
			if errors.As(err, &full) && ch.InFlight() > 0 {
				break // read the answers, which come as the host makes room
			}
			if errors.As(err, &full) {
				// All answered, but the host has not released what it
				// read yet: wait for the room (pending_send_sz).
				if err := ch.Flush(); err != nil {
					return err
				}
				if err := ch.WaitWritable(ctx, full.Need); err != nil {
					return fmt.Errorf("send %d: %w", sent, err)
				}
				continue
			}
			if err != nil {
				return fmt.Errorf("send %d: %w", sent, err)
			}
			sent++
		}
		if err := ch.Flush(); err != nil {
			return err
		}
		p, err := ch.Recv()
		if err == vmbus.ErrRingEmpty {
			if err := ch.CommitRecv(); err != nil {
				return err
			}
			if err := ch.WaitReadable(ctx); err != nil {
				return fmt.Errorf("after %d of %d: %w", got, n, err)
			}
			continue
		}
		if err != nil {
			return err
		}
		if p.Type != vmbus.PacketCompletion || binary.LittleEndian.Uint64(p.Payload()) != p.Cookie {
			return fmt.Errorf("packet %+v does not answer request %d", p, p.Cookie)
		}
		got++
	}
	return ch.CommitRecv()
}

func TestRoundTripsEveryKernelAndMode(t *testing.T) {
	for _, rel := range releases {
		for _, mode := range []vmbus.WaitMode{vmbus.WaitInterrupt, vmbus.WaitPoll} {
			for _, sub := range []uint16{0, 1} {
				t.Run(fmt.Sprintf("%s/%s/sub%d", rel, mode, sub), func(t *testing.T) {
					testutil.CheckGoroutineLeaks(t)
					k := kernel(t, rel)
					p := vmbustest.New(t, vmbustest.Options{GuestMode: mode, Kernel: k, SubchannelID: sub,
						Requests: 64, OutRingSize: 16 << 10, InRingSize: 16 << 10})
					ctx := testCtx(t)
					hostErr := make(chan error, 1)
					go func() { hostErr <- echoHost(ctx, p.Host) }()
					// A window that fills the rings now and then: the
					// writers block on pending_send_sz too.
					if err := pump(ctx, p.Guest, 3000, 64, 200); err != nil {
						t.Fatal(err)
					}
					p.Close()
					if err := <-hostErr; !errors.Is(err, vmbus.ErrChannelClosed) {
						t.Fatalf("host loop ended with %v, want ErrChannelClosed", err)
					}
					st, ps := p.Guest.Stats(), p.Stats()
					t.Logf("guest %+v pair %+v", st, ps)
					reach := sub == 0 || k.SubchannelInterrupts
					switch {
					case mode == vmbus.WaitInterrupt && reach && (st.Wakeups == 0 || ps.Interrupts == 0):
						t.Errorf("interrupt mode: %d wake-ups from %d interrupts, want some", st.Wakeups, ps.Interrupts)
					case !reach && ps.Interrupts != 0:
						t.Errorf("a sub-channel on %s got %d interrupts: its kernel cannot deliver them", rel, ps.Interrupts)
					case mode == vmbus.WaitInterrupt && !reach && st.IdleWaits != 0:
						t.Errorf("a sub-channel without interrupts slept %d times on them; it must poll", st.IdleWaits)
					}
					if ps.GuestSignals == 0 {
						t.Error("the guest never signalled the host")
					}
				})
			}
		}
	}
}

// sendFlush has the host write one packet and publish it.
func sendFlush(t *testing.T, h *vmbustest.Host, id uint64) {
	t.Helper()
	if err := h.SendInband(id, make([]byte, 64)); err != nil {
		t.Fatal(err)
	}
	if err := h.Flush(); err != nil {
		t.Fatal(err)
	}
}

// drain has the guest read everything waiting and release it.
func drain(t *testing.T, ch *vmbus.Channel) int {
	t.Helper()
	n := 0
	for {
		_, err := ch.Recv()
		if err == vmbus.ErrRingEmpty {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if err := ch.CommitRecv(); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestHostInterruptsOnlyOnEmptyToNonEmptyWithTheMaskClear steps through the
// writer's signalling rule from the host's side, on each kernel.
func TestHostInterruptsOnlyOnEmptyToNonEmptyWithTheMaskClear(t *testing.T) {
	for _, rel := range releases {
		t.Run(rel, func(t *testing.T) {
			k := kernel(t, rel)
			p := vmbustest.New(t, vmbustest.Options{Kernel: k})
			g, h := p.Guest, p.Host
			steps := []struct {
				name     string
				act      func()
				wantIRQs uint64
			}{
				{"masked guest, empty ring", func() { sendFlush(t, h, 1) }, 0},
				{"unmasked guest, ring not empty", func() { g.In().SetInterruptMask(false); sendFlush(t, h, 2) }, 0},
				{"unmasked guest, empty ring", func() { drain(t, g); g.In().SetInterruptMask(false); sendFlush(t, h, 3) }, 1},
				{"second batch before the guest read", func() { g.In().SetInterruptMask(false); sendFlush(t, h, 4) }, 1},
				{"masked again, empty ring", func() { drain(t, g); g.In().SetInterruptMask(true); sendFlush(t, h, 5) }, 1},
			}
			for _, s := range steps {
				s.act()
				if got := p.Stats().Interrupts; got != s.wantIRQs {
					t.Fatalf("%s: %d interrupts, want %d", s.name, got, s.wantIRQs)
				}
				if got := h.Stats().TxSignals; got != s.wantIRQs {
					t.Fatalf("%s: host counted %d signals, want %d", s.name, got, s.wantIRQs)
				}
			}
			// The interrupt of step 3 masked the ring on kernels before
			// 6.18; from 6.18 the kernel leaves the mask alone.
			g.In().SetInterruptMask(false)
			drain(t, g)
			sendFlush(t, h, 6)
			if got := g.In().InterruptMasked(); got != k.KernelMasks {
				t.Fatalf("after an interrupt the mask is %v, want %v on %s", got, k.KernelMasks, rel)
			}
		})
	}
}

// fill writes packets to the guest's outbound ring until it is full, and
// publishes them.
func fill(t *testing.T, ch *vmbus.Channel, size int) int {
	t.Helper()
	n := 0
	for {
		err := ch.SendInband(uint64(n), make([]byte, size))
		var full *vmbus.RingFullError
		if errors.As(err, &full) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if err := ch.Flush(); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestGuestBlockedOnFullRingWakesWhenItsPendingSizeIsFree: the host reader
// signals a blocked guest writer once, when enough room for its
// pending_send_sz is free, and not for less; without the feature bit it
// never signals and the guest polls.
func TestGuestBlockedOnFullRingWakesWhenItsPendingSizeIsFree(t *testing.T) {
	for _, noPending := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoPendingSend=%v", noPending), func(t *testing.T) {
			testutil.CheckGoroutineLeaks(t)
			p := vmbustest.New(t, vmbustest.Options{NoPendingSend: noPending, PollInterval: time.Millisecond})
			g, h := p.Guest, p.Host
			n := fill(t, g, 256)
			need := vmbus.PacketSize(0, 256)
			done := make(chan error, 1)
			go func() { done <- g.WaitWritable(testCtx(t), need) }()
			testutil.WaitFor(t, 0, func() bool { return g.Stats().TxFullWaits == 1 }, "the guest to wait for room")
			if !noPending {
				testutil.WaitFor(t, 0, func() bool { return h.In().WriterPending() != 0 }, "the guest to set pending_send_sz")
				// One packet frees less than the quarter ring the
				// writer asks for: no signal yet.
				if _, err := h.Recv(); err != nil {
					t.Fatal(err)
				}
				if err := h.CommitRecv(); err != nil {
					t.Fatal(err)
				}
				if s := h.Stats().RxSignals; s != 0 {
					t.Fatalf("host signalled %d times after freeing one packet, below the writer's pending size", s)
				}
				select {
				case err := <-done:
					t.Fatalf("WaitWritable returned %v before the room it asked for was free", err)
				default:
				}
			}
			for range n - 1 {
				if _, err := h.Recv(); err != nil {
					t.Fatal(err)
				}
			}
			if noPending {
				if _, err := h.Recv(); err != nil {
					t.Fatal(err)
				}
			}
			if err := h.CommitRecv(); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatalf("WaitWritable = %v", err)
			}
			want := uint64(1)
			if noPending {
				want = 0
			}
			if s := h.Stats().RxSignals; s != want {
				t.Fatalf("host signalled the writer %d times, want %d", s, want)
			}
			if st := g.Stats(); st.TxFullWaits != 1 || (!noPending && st.Wakeups != 1) {
				t.Fatalf("guest stats %+v: want one full wait, woken by the signal when it had one", st)
			}
		})
	}
}

func TestFaultNoInterruptsLeavesTheGuestToItsTimeout(t *testing.T) {
	p := vmbustest.New(t, vmbustest.Options{WakeTimeout: time.Millisecond})
	p.SetFault(vmbustest.FaultNoInterrupts, true)
	done := make(chan error, 1)
	go func() { done <- p.Guest.WaitReadable(testCtx(t)) }()
	testutil.WaitFor(t, 0, func() bool { return p.Guest.Stats().IdleWaits == 1 }, "the guest to sleep")
	sendFlush(t, p.Host, 1)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	st, ps := p.Guest.Stats(), p.Stats()
	if st.MissedWakeups != 1 || st.Wakeups != 0 || ps.Interrupts != 0 || ps.LostInterrupts != 1 {
		t.Fatalf("guest %+v pair %+v: want the one interrupt lost and found by the timeout", st, ps)
	}
	p.SetFault(vmbustest.FaultNoInterrupts, false)
	drain(t, p.Guest)
	p.Guest.In().SetInterruptMask(false)
	sendFlush(t, p.Host, 2)
	if ps := p.Stats(); ps.Interrupts != 1 {
		t.Fatalf("after the fault: %+v, want the interrupt delivered", ps)
	}
}

func TestFaultStopReadingHoldsTheHostReader(t *testing.T) {
	testutil.CheckGoroutineLeaks(t)
	p := vmbustest.New(t, vmbustest.Options{})
	p.SetFault(vmbustest.FaultStopReading, true)
	if err := p.Guest.SendInband(7, []byte("stalled!")); err != nil {
		t.Fatal(err)
	}
	if err := p.Guest.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Host.Recv(); err != vmbus.ErrRingEmpty {
		t.Fatalf("Recv while stopped = %v, want ErrRingEmpty", err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Host.WaitReadable(testCtx(t)) }()
	testutil.WaitBlocked(t, 0, "vmbustest.(*Host).WaitReadable")
	select {
	case err := <-done:
		t.Fatalf("WaitReadable returned %v while the host is stopped", err)
	default:
	}
	p.SetFault(vmbustest.FaultStopReading, false)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	pkt, err := p.Host.Recv()
	if err != nil || pkt.TransID != 7 || !bytes.HasPrefix(pkt.Payload(), []byte("stalled!")) {
		t.Fatalf("Recv after the fault = %+v, %v", pkt, err)
	}
}

// TestWriteCorruptKillsTheGuestChannelWithThatKind: for every kind of
// corruption the guest can detect, the host provokes it and the guest
// channel dies of exactly that kind; the host end is not blamed.
func TestWriteCorruptKillsTheGuestChannelWithThatKind(t *testing.T) {
	for _, kind := range vmbus.CorruptKinds() {
		t.Run(kind.String(), func(t *testing.T) {
			p := vmbustest.New(t, vmbustest.Options{Requests: 4})
			g, h := p.Guest, p.Host
			ctx := testCtx(t)
			if kind == vmbus.CorruptWriteRewind {
				// The guest has seen a packet that the rewind takes back.
				sendFlush(t, h, 1)
				if _, err := g.Recv(); err != nil {
					t.Fatal(err)
				}
			}
			if err := h.WriteCorrupt(kind); err != nil {
				t.Fatal(err)
			}
			var err error
			if kind == vmbus.CorruptReadIndex {
				err = g.WaitWritable(ctx, 0)
			} else if err = g.WaitReadable(ctx); err == nil {
				_, err = g.Recv()
			}
			if ce, ok := vmbus.IsCorrupt(err); !ok || ce.Kind != kind {
				t.Fatalf("guest saw %v, want corrupt %v", err, kind)
			}
			if ce, ok := vmbus.IsCorrupt(g.Err()); !ok || ce.Kind != kind {
				t.Fatalf("guest channel Err() = %v, want corrupt %v", g.Err(), kind)
			}
			if _, err := g.Recv(); err != g.Err() {
				t.Fatalf("Recv on the dead channel = %v, want its error", err)
			}
			if h.Err() != nil || p.Err() != nil {
				t.Fatalf("host end %v, pair %v: only the guest channel dies", h.Err(), p.Err())
			}
			if p.Stats().Interrupts == 0 {
				t.Fatal("the guest was not interrupted")
			}
		})
	}
}

func TestWriteCorruptRefusesWhatItCannotProvoke(t *testing.T) {
	tests := []struct {
		name string
		opts vmbustest.Options
		kind vmbus.CorruptKind
	}{
		{"no request table for a stray completion", vmbustest.Options{}, vmbus.CorruptCompletion},
		{"nothing to rewind", vmbustest.Options{}, vmbus.CorruptWriteRewind},
		{"not a kind", vmbustest.Options{}, vmbus.CorruptKind(99)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := vmbustest.New(t, tc.opts)
			if err := p.Host.WriteCorrupt(tc.kind); err == nil {
				t.Fatal("WriteCorrupt = nil, want an error")
			}
		})
	}
	p := vmbustest.New(t, vmbustest.Options{})
	if err := p.Host.WriteCorrupt(vmbus.CorruptWriteIndex); err != nil {
		t.Fatal(err)
	}
	if err := p.Host.WriteCorrupt(vmbus.CorruptOffset); err == nil {
		t.Fatal("a broken host end wrote again")
	}
}

// TestRescindLeavesWhatArrivedReadable: the guest channel dies with
// ErrRescinded, but the packets the host published before are still in
// its ring, as the mapping outlives the rescind.
func TestRescindLeavesWhatArrivedReadable(t *testing.T) {
	p := vmbustest.New(t, vmbustest.Options{})
	sendFlush(t, p.Host, 1)
	sendFlush(t, p.Host, 2)
	p.Rescind()
	if !errors.Is(p.Guest.Err(), vmbus.ErrRescinded) || !errors.Is(p.Err(), vmbus.ErrRescinded) {
		t.Fatalf("guest %v, pair %v: want ErrRescinded", p.Guest.Err(), p.Err())
	}
	if !errors.Is(p.Host.Err(), vmbus.ErrChannelClosed) {
		t.Fatalf("host end %v, want ErrChannelClosed", p.Host.Err())
	}
	buf := make([]byte, p.Guest.In().MaxPacket())
	for _, id := range []uint64{1, 2} {
		pkt, err := p.Guest.In().Read(buf)
		if err != nil || pkt.TransID != id {
			t.Fatalf("read after the rescind = %+v, %v; want packet %d", pkt, err, id)
		}
	}
	p.Close()
	if !errors.Is(p.Guest.Err(), vmbus.ErrRescinded) || !errors.Is(p.Err(), vmbus.ErrRescinded) {
		t.Fatalf("after Close: guest %v, pair %v; the rescind stays the reason", p.Guest.Err(), p.Err())
	}
}

// TestCloseWakesEveryWait: waits blocked on either end, including a host
// reader held by FaultStopReading, return ErrChannelClosed at Close, and
// nothing is left running.
func TestCloseWakesEveryWait(t *testing.T) {
	testutil.CheckGoroutineLeaks(t)
	p := vmbustest.New(t, vmbustest.Options{})
	ctx := testCtx(t)
	fill(t, p.Guest, 1024)
	p.SetFault(vmbustest.FaultStopReading, true)
	waits := map[string]func() error{
		"guest WaitReadable": func() error { return p.Guest.WaitReadable(ctx) },
		"guest WaitWritable": func() error { return p.Guest.WaitWritable(ctx, 2048) },
		"host WaitReadable":  func() error { return p.Host.WaitReadable(ctx) },
	}
	errs := make(chan error, len(waits))
	for _, w := range waits {
		go func() { errs <- w() }()
	}
	testutil.WaitFor(t, 0, func() bool {
		st := p.Guest.Stats()
		return st.IdleWaits == 2 && st.TxFullWaits == 1
	}, "both guest waits to sleep")
	testutil.WaitBlocked(t, 0, "vmbustest.(*Host).WaitReadable")
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for range waits {
		if err := <-errs; !errors.Is(err, vmbus.ErrChannelClosed) {
			t.Fatalf("a wait ended with %v, want ErrChannelClosed", err)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
}

// TestSpuriousInterruptIsASharedWakeup: an interrupt with nothing new for
// the channel wakes its waiter, which counts it and sleeps again.
func TestSpuriousInterruptIsASharedWakeup(t *testing.T) {
	p := vmbustest.New(t, vmbustest.Options{})
	done := make(chan error, 1)
	go func() { done <- p.Guest.WaitReadable(testCtx(t)) }()
	testutil.WaitFor(t, 0, func() bool { return p.Guest.Stats().IdleWaits == 1 }, "the guest to sleep")
	p.Interrupt()
	testutil.WaitFor(t, 0, func() bool { return p.Guest.Stats().SharedWakeups == 1 }, "the spurious wake-up to be counted")
	select {
	case err := <-done:
		t.Fatalf("WaitReadable returned %v on a spurious interrupt", err)
	default:
	}
	p.Guest.In().SetInterruptMask(false) // the kernel masked it (before 6.18); the wait cleared it once already
	sendFlush(t, p.Host, 1)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := p.Guest.Stats(); st.IdleWaits != 1 || st.Wakeups != 1 {
		t.Fatalf("stats %+v: want one sleep, ended by the one real wake-up", st)
	}
}
