package vmbus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/internal/echo"
	"github.com/vmbusd/vmbusd/internal/testutil"
	"github.com/vmbusd/vmbusd/sim"
	"github.com/vmbusd/vmbusd/vmbus"
)

// newSimDevice starts a simulated host under a fresh root with one test
// (echo) device and opens it from the guest side.
func newSimDevice(t *testing.T, prof sim.Profile, cfg sim.DeviceConfig, opts vmbus.Options) (*sim.Host, *sim.Device, *vmbus.Handle) {
	t.Helper()
	h, err := sim.New(sim.Config{Root: t.TempDir(), Profile: prof})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	if cfg.Class.IsZero() {
		cfg.Class = vmbus.ClassTest
	}
	d, err := h.AddDevice(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := vmbus.LookupDevice(h.Root(), d.Instance())
	if err != nil {
		t.Fatal(err)
	}
	hd, err := vmbus.Open(dev, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hd.Close() })
	return h, d, hd
}

func TestEchoEveryProfile(t *testing.T) {
	for _, prof := range sim.Profiles() {
		for _, mode := range []vmbus.WaitMode{vmbus.WaitInterrupt, vmbus.WaitPoll} {
			t.Run(prof.String()+"/"+mode.String(), func(t *testing.T) {
				_, _, hd := newSimDevice(t, prof, sim.DeviceConfig{RingSize: 64 << 10}, vmbus.Options{Mode: mode})
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				p := &echo.Pump{Size: 200, Window: 64}
				if err := p.Run(ctx, hd.Primary(), 20000); err != nil {
					t.Fatal(err)
				}
				st := hd.Primary().Stats()
				t.Logf("stats %+v interrupts %d", st, hd.Interrupts())
				if mode == vmbus.WaitInterrupt && st.Wakeups == 0 {
					t.Errorf("interrupt mode never woke on an interrupt")
				}
			})
		}
	}
}

// expectEcho reads one packet and checks its transaction id.
func expectEcho(t *testing.T, ctx context.Context, ch *vmbus.Channel, id uint64) {
	t.Helper()
	for {
		p, err := ch.Recv()
		if err == vmbus.ErrRingEmpty {
			if err := ch.WaitReadable(ctx); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if p.TransID != id {
			t.Fatalf("got id %d, want %d", p.TransID, id)
		}
		ch.CommitRecv()
		return
	}
}

func TestSubchannelsPartialGrantEveryProfile(t *testing.T) {
	for _, prof := range sim.Profiles() {
		t.Run(prof.String(), func(t *testing.T) {
			_, _, hd := newSimDevice(t, prof, sim.DeviceConfig{RingSize: 64 << 10, SubchannelRingSize: 64 << 10}, vmbus.Options{})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			// Three offered, the last never opens: a partial grant of two.
			if err := echo.RequestSubchannels(hd.Primary(), 3, 30, 1); err != nil {
				t.Fatal(err)
			}
			expectEcho(t, ctx, hd.Primary(), 1<<63)
			wctx, wcancel := context.WithTimeout(ctx, 500*time.Millisecond)
			subs, err := hd.OpenSubchannels(wctx, 3)
			wcancel()
			if err != nil {
				t.Fatal(err)
			}
			if len(subs) != 2 {
				t.Fatalf("got %d sub-channels, want the 2 that opened", len(subs))
			}
			errc := make(chan error, 3)
			for _, ch := range hd.Channels() {
				go func() {
					p := &echo.Pump{Size: 512, Window: 32}
					errc <- p.Run(ctx, ch, 5000)
				}()
			}
			for range hd.Channels() {
				if err := <-errc; err != nil {
					t.Fatal(err)
				}
			}
			for _, ch := range subs {
				if ch.SubchannelID() == 0 {
					t.Errorf("sub-channel %d has subchannel_id 0", ch.RelID())
				}
			}
		})
	}
}

func TestCorruptionFaultsKillOnlyThatChannel(t *testing.T) {
	tests := []struct {
		fault sim.Fault
		want  vmbus.CorruptKind
	}{
		{sim.FaultCorruptWriteIndex, vmbus.CorruptWriteIndex},
		{sim.FaultBadLen8, vmbus.CorruptLength},
		{sim.FaultBadOffset8, vmbus.CorruptOffset},
		{sim.FaultBadType, vmbus.CorruptType},
		{sim.FaultBadFlags, vmbus.CorruptFlags},
		{sim.FaultBadRanges, vmbus.CorruptRanges},
	}
	for _, tc := range tests {
		t.Run(tc.fault.String(), func(t *testing.T) {
			h, bad, hdBad := newSimDevice(t, sim.DefaultProfile, sim.DeviceConfig{RingSize: 64 << 10}, vmbus.Options{})
			good, err := h.AddDevice(sim.DeviceConfig{Class: vmbus.ClassTest, RingSize: 64 << 10})
			if err != nil {
				t.Fatal(err)
			}
			dev, _ := vmbus.LookupDevice(h.Root(), good.Instance())
			hdGood, err := vmbus.Open(dev, vmbus.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer hdGood.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()

			bad.SetFault(tc.fault, true)
			p := &echo.Pump{Size: 64, Window: 16}
			err = p.Run(ctx, hdBad.Primary(), 1000)
			ce, ok := vmbus.IsCorrupt(err)
			if !ok || ce.Kind != tc.want {
				t.Fatalf("faulted channel: %v, want corrupt %s", err, tc.want)
			}
			if ce2, ok := vmbus.IsCorrupt(hdBad.Primary().Err()); !ok || ce2.Kind != tc.want {
				t.Fatalf("channel Err() = %v", hdBad.Primary().Err())
			}
			if bad.Faults().Hits(tc.fault) != 1 {
				t.Fatalf("fault hit %d times", bad.Faults().Hits(tc.fault))
			}
			// The other device carries on.
			q := &echo.Pump{Size: 64, Window: 16}
			if err := q.Run(ctx, hdGood.Primary(), 1000); err != nil {
				t.Fatalf("healthy channel: %v", err)
			}
		})
	}
}

func TestInterruptFaultsAreSurvived(t *testing.T) {
	t.Run("missing interrupts", func(t *testing.T) {
		_, d, hd := newSimDevice(t, sim.DefaultProfile, sim.DeviceConfig{RingSize: 64 << 10},
			vmbus.Options{WakeTimeout: 5 * time.Millisecond})
		d.SetFault(sim.FaultMissingInterrupts, true)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		p := &echo.Pump{Size: 64, Window: 4}
		if err := p.Run(ctx, hd.Primary(), 200); err != nil {
			t.Fatal(err)
		}
		if st := hd.Primary().Stats(); st.MissedWakeups == 0 || hd.Interrupts() != 0 {
			t.Fatalf("missed wake-ups %d, interrupts %d: want >0 and 0", st.MissedWakeups, hd.Interrupts())
		}
	})
	t.Run("spurious interrupts", func(t *testing.T) {
		_, d, hd := newSimDevice(t, sim.DefaultProfile, sim.DeviceConfig{RingSize: 64 << 10}, vmbus.Options{})
		d.SetFault(sim.FaultSpuriousInterrupts, true)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		// The echo runs while interrupts with nothing behind them come.
		testutil.WaitFor(t, 0, func() bool { return d.Faults().Hits(sim.FaultSpuriousInterrupts) > 0 }, "a spurious interrupt")
		p := &echo.Pump{Size: 64, Window: 4}
		if err := p.Run(ctx, hd.Primary(), 2000); err != nil {
			t.Fatal(err)
		}
		d.SetFault(sim.FaultSpuriousInterrupts, false)
		if d.Faults().Hits(sim.FaultSpuriousInterrupts) == 0 {
			t.Fatal("no spurious interrupt was raised")
		}
	})
	t.Run("host stops draining", func(t *testing.T) {
		_, d, hd := newSimDevice(t, sim.DefaultProfile, sim.DeviceConfig{RingSize: 16 << 10}, vmbus.Options{})
		d.SetFault(sim.FaultStopDraining, true)
		ch := hd.Primary()
		payload := make([]byte, 1024)
		for ch.SendInband(0, payload) == nil {
		}
		ch.Flush()
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		err := ch.WaitWritable(ctx, 1100)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("WaitWritable against a stalled host: %v", err)
		}
		d.SetFault(sim.FaultStopDraining, false)
		ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := ch.WaitWritable(ctx, 1100); err != nil {
			t.Fatalf("after the host resumed: %v", err)
		}
		if ch.Stats().TxFullWaits == 0 {
			t.Fatal("no full wait counted")
		}
	})
	t.Run("slow host", func(t *testing.T) {
		_, d, hd := newSimDevice(t, sim.DefaultProfile, sim.DeviceConfig{RingSize: 64 << 10}, vmbus.Options{})
		d.SetSlowDelay(2 * time.Millisecond)
		d.SetFault(sim.FaultSlowHost, true)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		p := &echo.Pump{Size: 64, Window: 8}
		if err := p.Run(ctx, hd.Primary(), 500); err != nil {
			t.Fatal(err)
		}
		if d.Faults().Hits(sim.FaultSlowHost) == 0 {
			t.Fatal("slow host never delayed")
		}
	})
}

func TestRescindKillsOnlyThatDevice(t *testing.T) {
	h, d, hd := newSimDevice(t, sim.DefaultProfile, sim.DeviceConfig{RingSize: 64 << 10}, vmbus.Options{})
	other, _ := h.AddDevice(sim.DeviceConfig{Class: vmbus.ClassTest, RingSize: 64 << 10})
	dev, _ := vmbus.LookupDevice(h.Root(), other.Instance())
	hdOther, err := vmbus.Open(dev, vmbus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer hdOther.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.Rescind(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-hd.Primary().Dead():
	case <-ctx.Done():
		t.Fatal("channel did not die on rescind")
	}
	if !errors.Is(hd.Primary().Err(), vmbus.ErrRescinded) {
		t.Fatalf("Err() = %v, want ErrRescinded", hd.Primary().Err())
	}
	if _, err := vmbus.LookupDevice(h.Root(), d.Instance()); err == nil {
		t.Fatal("rescinded device still in sysfs")
	}
	p := &echo.Pump{Size: 64, Window: 16}
	if err := p.Run(ctx, hdOther.Primary(), 1000); err != nil {
		t.Fatal(err)
	}
}

// TestSharedInterruptFdCountsWakeupsPerChannel: from 6.16 a sub-channel's
// interrupts arrive on the primary's uio fd, so every interrupt wakes
// every channel's waiter. A primary that sleeps through a burst of
// sub-channel traffic has slept once and been woken for its own work once;
// the sub-channel's interrupts count as shared wake-ups on it, not as its
// own.
func TestSharedInterruptFdCountsWakeupsPerChannel(t *testing.T) {
	for _, prof := range sim.Profiles() {
		if !prof.SubchannelInterrupts() {
			continue
		}
		t.Run(prof.String(), func(t *testing.T) {
			_, _, hd := newSimDevice(t, prof, sim.DeviceConfig{RingSize: 64 << 10, SubchannelRingSize: 64 << 10}, vmbus.Options{})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := echo.RequestSubchannels(hd.Primary(), 1, 0, 0); err != nil {
				t.Fatal(err)
			}
			expectEcho(t, ctx, hd.Primary(), 1<<63)
			subs, err := hd.OpenSubchannels(ctx, 1)
			if err != nil || len(subs) != 1 {
				t.Fatalf("sub-channels %d: %v", len(subs), err)
			}
			prim, sub := hd.Primary(), subs[0]
			p0, s0 := prim.Stats(), sub.Stats()
			woke := make(chan error, 1)
			go func() { woke <- prim.WaitReadable(ctx) }()
			testutil.WaitFor(t, 0, func() bool { return prim.Stats().IdleWaits == p0.IdleWaits+1 }, "the primary's waiter to sleep")
			const n = 100
			payload := make([]byte, 64)
			for i := range uint64(n) {
				if err := sub.SendInband(i, payload); err != nil {
					t.Fatal(err)
				}
				if err := sub.Flush(); err != nil {
					t.Fatal(err)
				}
				expectEcho(t, ctx, sub, i)
			}
			select {
			case err := <-woke:
				t.Fatalf("the primary's wait returned (%v) with nothing for it", err)
			default:
			}
			if err := prim.SendInband(7, payload); err != nil {
				t.Fatal(err)
			}
			if err := prim.Flush(); err != nil {
				t.Fatal(err)
			}
			if err := <-woke; err != nil {
				t.Fatal(err)
			}
			expectEcho(t, ctx, prim, 7)
			p1, s1 := prim.Stats(), sub.Stats()
			t.Logf("primary %+v\nsub %+v\ninterrupts %d", p1, s1, hd.Interrupts())
			if d := p1.SharedWakeups - p0.SharedWakeups; d == 0 {
				t.Fatalf("the sub-channel's interrupts never woke the primary's waiter: the test shows nothing")
			}
			if d := p1.Wakeups - p0.Wakeups; d > 1 {
				t.Errorf("primary counted %d wake-ups for one packet of its own", d)
			}
			if p1.Wakeups-p0.Wakeups+p1.MissedWakeups-p0.MissedWakeups != 1 {
				t.Errorf("primary: %d wake-ups and %d missed, want one in all", p1.Wakeups-p0.Wakeups, p1.MissedWakeups-p0.MissedWakeups)
			}
			if p1.IdleWaits-p0.IdleWaits > 2 { // the wait above, and expectEcho's if the echo was not back yet
				t.Errorf("primary counted %d sleeps", p1.IdleWaits-p0.IdleWaits)
			}
			if s1.Wakeups == s0.Wakeups {
				t.Errorf("the sub-channel counted none of its own wake-ups")
			}
			if s1.IdleWaits-s0.IdleWaits > n {
				t.Errorf("sub-channel counted %d sleeps for %d echoes", s1.IdleWaits-s0.IdleWaits, n)
			}
		})
	}
}

// TestSubchannelIDWrittenInTwoSteps: a host that writes subchannel_id in
// two steps (empty first) must not cost the guest those sub-channels: each
// is tried again until its id reads whole.
func TestSubchannelIDWrittenInTwoSteps(t *testing.T) {
	_, d, hd := newSimDevice(t, sim.DefaultProfile, sim.DeviceConfig{RingSize: 64 << 10, SubchannelRingSize: 64 << 10}, vmbus.Options{})
	d.SetFault(sim.FaultSplitSubchannelID, true)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := echo.RequestSubchannels(hd.Primary(), 3, 0, 0); err != nil {
		t.Fatal(err)
	}
	expectEcho(t, ctx, hd.Primary(), 1<<63)
	subs, err := hd.OpenSubchannels(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(subs) != 3 {
		t.Fatalf("%d sub-channels opened, want all 3", len(subs))
	}
	if hits := d.Faults().Hits(sim.FaultSplitSubchannelID); hits != 3 {
		t.Fatalf("the fault split %d ids, want 3", hits)
	}
	seen := map[uint16]bool{}
	for _, ch := range subs {
		if id := ch.SubchannelID(); id == 0 || seen[id] {
			t.Errorf("sub-channel %d has subchannel_id %d", ch.RelID(), id)
		}
		seen[ch.SubchannelID()] = true
		p := &echo.Pump{Size: 128, Window: 8}
		if err := p.Run(ctx, ch, 100); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRescindEndsTheSubchannelWait: a rescind while the guest waits for
// sub-channels that never open ends the wait at once with ErrRescinded,
// not when the wait's context does.
func TestRescindEndsTheSubchannelWait(t *testing.T) {
	for _, prof := range sim.Profiles() {
		t.Run(prof.String(), func(t *testing.T) { testRescindEndsTheSubchannelWait(t, prof) })
	}
}

func testRescindEndsTheSubchannelWait(t *testing.T, prof sim.Profile) {
	_, d, hd := newSimDevice(t, prof, sim.DeviceConfig{RingSize: 64 << 10, SubchannelRingSize: 64 << 10}, vmbus.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := echo.RequestSubchannels(hd.Primary(), 2, 0, 2); err != nil {
		t.Fatal(err)
	}
	expectEcho(t, ctx, hd.Primary(), 1<<63)
	type result struct {
		subs []*vmbus.Channel
		err  error
	}
	done := make(chan result, 1)
	go func() {
		wctx, wcancel := context.WithTimeout(context.Background(), time.Hour)
		defer wcancel()
		subs, err := hd.OpenSubchannels(wctx, 2)
		done <- result{subs, err}
	}()
	testutil.WaitFor(t, 0, func() bool {
		chans, err := hd.Device().ReadChannels()
		return err == nil && len(chans) == 3
	}, "both sub-channels offered")
	if err := d.Rescind(); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if !errors.Is(r.err, vmbus.ErrRescinded) || len(r.subs) != 0 {
			t.Fatalf("OpenSubchannels: %d sub-channels, %v; want none and ErrRescinded", len(r.subs), r.err)
		}
	case <-ctx.Done():
		t.Fatal("the sub-channel wait did not end on the rescind")
	}
}
