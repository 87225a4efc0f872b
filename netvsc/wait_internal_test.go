package netvsc

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/frame"
	"github.com/vmbusd/vmbusd/sim"
	"github.com/vmbusd/vmbusd/vmbus"
)

// TestSpinBudgetAdapts: the hybrid poll budget halves for every sleep a
// full budget would not have avoided, down to none, and comes back whole
// after one it would have; a poll that finds work doubles it.
func TestSpinBudgetAdapts(t *testing.T) {
	const full = 64 * time.Microsecond
	long, short := int64(full)+1, int64(full)
	type step struct {
		op   string // "slept" (with gap) or "polled"
		gap  int64
		want int64 // budget afterwards
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"starts whole", nil},
		{"long sleeps halve it down to none", []step{
			{"slept", long, int64(full) / 2},
			{"slept", long, int64(full) / 4},
			{"slept", 10 * long, int64(full) / 8},
			{"slept", long, int64(full) / 16},
			{"slept", long, int64(full) / 32},
			{"slept", long, 0},
			{"slept", long, 0},
		}},
		{"a sleep within the full budget restores it", []step{
			{"slept", long, int64(full) / 2},
			{"slept", long, int64(full) / 4},
			{"slept", short, int64(full)},
		}},
		{"a sleep within the full budget restores it from none", []step{
			{"slept", long, int64(full) / 2},
			{"slept", long, int64(full) / 4},
			{"slept", long, int64(full) / 8},
			{"slept", long, int64(full) / 16},
			{"slept", long, int64(full) / 32},
			{"slept", long, 0},
			{"slept", 0, int64(full)},
		}},
		{"a poll that found work doubles it", []step{
			{"slept", long, int64(full) / 2},
			{"slept", long, int64(full) / 4},
			{"polled", 0, int64(full) / 2},
			{"polled", 0, int64(full)},
			{"polled", 0, int64(full)},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b spinBudget
			if got := b.budget(full); got != int64(full) {
				t.Fatalf("new budget %d, want %d", got, int64(full))
			}
			for i, s := range tc.steps {
				switch s.op {
				case "slept":
					b.slept(s.gap, full)
				case "polled":
					b.polled()
				}
				if got := b.budget(full); got != s.want {
					t.Fatalf("step %d (%s, gap %d): budget %d, want %d", i, s.op, s.gap, got, s.want)
				}
			}
		})
	}
}

// TestHybridStopsPollingWhenItDoesNotPay: a hybrid queue whose frames each
// come only after it went to sleep (request/response traffic) polls less
// after every such sleep and then not at all. PollBudget is 1 ns, so no
// frame can come within it: no wall-clock threshold is involved.
func TestHybridStopsPollingWhenItDoesNotPay(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sn, n := openWaitNIC(t, ctx, Config{Mode: Hybrid, PollBudget: time.Nanosecond})
	q := n.Queues()[0]

	got := make(chan int, 1)
	rctx, rcancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		pkts := make([]*frame.Packet, 8)
		for rctx.Err() == nil {
			k := q.RxBurst(pkts)
			if k == 0 {
				if q.Wait(rctx) != nil {
					return
				}
				continue
			}
			frame.PutBurst(pkts[:k])
			got <- k
		}
	}()
	defer func() { rcancel(); <-done }()

	f := frameTo(n.MAC())
	var sleeps uint64 // the receiver's sleeps when the last frame went
	for i := range maxSpinShift + 2 {
		// Send only once the receiver is on its way to sleep again.
		for q.c.idleSleeps.load() == sleeps {
			if ctx.Err() != nil {
				t.Fatalf("frame %d: the receiver never went to sleep", i)
			}
			runtime.Gosched()
		}
		sleeps = q.c.idleSleeps.load()
		if k := sn.Deliver([][]byte{f}); k != 1 {
			t.Fatalf("frame %d: host took %d frames", i, k)
		}
		select {
		case <-got:
		case <-ctx.Done():
			t.Fatalf("frame %d never arrived", i)
		}
	}
	if b := q.w.spin.budget(q.s.cfg.PollBudget); b != 0 {
		t.Errorf("after %d frames that each came after a sleep, the poll budget is %d ns, want 0 (shift %d)",
			maxSpinShift+2, b, q.w.spin.shift.Load())
	}
}

// TestPollModeYieldsTheCPU: a Poll-mode Wait on an empty ring yields
// (PollYield: the goroutines of its P, then its thread's core) between
// rounds of polls, so that a host or peer sharing its core can answer.
// The stand-in yield has the host deliver a frame on its third call: the
// Wait returns only if it yields, and the context ends it otherwise.
func TestPollModeYieldsTheCPU(t *testing.T) {
	// A generous bound, not a measurement: without yields the Wait spins
	// until it.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sn, n := openWaitNIC(t, ctx, Config{Mode: Poll})
	q := n.Queues()[0]
	pkts := make([]*frame.Packet, 8)

	f := frameTo(n.MAC())
	yields := 0
	q.yield = func() {
		yields++
		if yields == 3 {
			if k := sn.Deliver([][]byte{f}); k != 1 {
				t.Errorf("host took %d frames", k)
			}
		}
	}
	// Other inbound messages (an indication) may end a Wait early; only
	// the frame ends the loop.
	k := 0
	for k == 0 {
		if err := q.Wait(ctx); err != nil {
			t.Fatalf("poll-mode wait: %v after %d yields", err, yields)
		}
		k = q.RxBurst(pkts)
	}
	if k != 1 || yields < 3 {
		t.Fatalf("received %d frames after %d yields, want the one the third yield delivered", k, yields)
	}
	frame.PutBurst(pkts[:k])
}

// TestWaitTxWokenBySleepersDrain: a transmitter out of sections waits
// for the drain of a receiver asleep in Wait (it holds inMu, so WaitTx
// cannot drain itself). When the host's completions wake that sleeper,
// the sections are free by the time its Wait returns: the sleeper drains
// for the waiting transmitter at once rather than leaving it to the
// caller's next RxBurst (which this receiver never calls) or to WaitTx's
// fallback timer.
func TestWaitTxWokenBySleepersDrain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sn, n := openWaitNIC(t, ctx, Config{Mode: Hybrid})
	q := n.Queues()[0]

	// The host takes the sends but completes none until the fault ends.
	sn.Device().SetFault(sim.FaultStopDraining, true)
	f := frameTo([]byte{0x02, 0, 0, 0, 0, 9})
	pkts := make([]*frame.Packet, 16)
	for full := false; !full; {
		k := q.AllocBurst(pkts)
		if k == 0 {
			t.Fatal("pool exhausted before the send buffer")
		}
		for _, p := range pkts[:k] {
			copy(p.SetLen(len(f)), f)
		}
		m := q.TxBurst(pkts[:k])
		frame.PutBurst(pkts[m:k])
		full = m < k
	}
	if q.txReady() {
		t.Fatal("the transmitter has room with every send held by the host")
	}

	// The receiver: Wait only; each return reports whether the sections
	// were free by then, once the host's completions are in the ring.
	sleeps := q.c.idleSleeps.load()
	freed := make(chan bool, 1)
	rctx, rcancel := context.WithCancel(ctx)
	rdone := make(chan struct{})
	go func() {
		defer close(rdone)
		for rctx.Err() == nil {
			if q.Wait(rctx) != nil {
				return
			}
			if _, in := q.ch.RingUsage(); q.tx.ready() || in != 0 {
				freed <- q.tx.ready()
				return
			}
		}
	}()
	defer func() { rcancel(); <-rdone }()
	for q.c.idleSleeps.load() == sleeps {
		if ctx.Err() != nil {
			t.Fatal("the receiver never went to sleep")
		}
		runtime.Gosched()
	}

	txErr := make(chan error, 1)
	go func() { txErr <- q.WaitTx(ctx) }()
	for !q.w.txWaiting.Load() {
		if ctx.Err() != nil {
			t.Fatal("WaitTx never waited")
		}
		runtime.Gosched()
	}

	sn.Device().SetFault(sim.FaultStopDraining, false)
	select {
	case ok := <-freed:
		if !ok {
			t.Error("the sleeper's Wait returned with the completions that woke it still in the ring")
		}
	case <-ctx.Done():
		t.Fatal("the receiver's Wait never returned")
	}
	select {
	case err := <-txErr:
		if err != nil {
			t.Fatalf("WaitTx: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("WaitTx never returned")
	}
}

// TestTxOwed: a hybrid Wait polls past its budget for the host's
// completions only while the transmitter stalled recently and the host
// holds some of its sends (txPath.owed).
func TestTxOwed(t *testing.T) {
	const span = int64(5 * time.Millisecond)
	const now = int64(time.Hour) // well past the zero of stalled
	for _, tc := range []struct {
		name     string
		stalled  int64 // nanotime of the last short burst; 0: never
		sections int   // sections in flight (of 4)
		gpa      int   // GPA slots in flight
		stashed  int   // of those sections, taken but parked, not sent
		want     bool
	}{
		{"never stalled", 0, 4, 0, 0, false},
		{"stalled, sections in flight", now - span/2, 4, 0, 0, true},
		{"stalled, one section in flight", now - span/2, 1, 0, 0, true},
		{"stalled, GPA in flight", now - span/2, 0, 3, 0, true},
		{"stalled, nothing in flight", now - span/2, 0, 0, 0, false},
		{"stalled, the taken sections parked", now - span/2, 2, 0, 2, false},
		{"stalled too long ago", now - span, 4, 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p txPath
			p.init(1500)
			p.assign(1, 5)
			for range tc.sections {
				idx, _ := p.sec.take()
				if tc.stashed > len(p.stash) {
					p.untakeSection(idx)
				}
			}
			for range tc.gpa {
				p.gpa.take()
			}
			p.stalled.Store(tc.stalled)
			if got := p.owed(now, span); got != tc.want {
				t.Errorf("owed = %v, want %v", got, tc.want)
			}
		})
	}
}

// openWaitNIC opens a one-queue NIC with cfg (64 pool packets, a 10 s
// control timeout) on a fresh simulated host; both close at cleanup.
func openWaitNIC(t *testing.T, ctx context.Context, cfg Config) (*sim.NIC, *NIC) {
	t.Helper()
	h, err := sim.New(sim.Config{Root: t.TempDir(), Profile: sim.DefaultProfile})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	sn, err := h.AddNIC(sim.NICConfig{RingSize: 256 << 10, RecvBuffer: 4 << 20, SendBuffer: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	dev, err := vmbus.LookupDevice(h.Root(), sn.Device().Instance())
	if err != nil {
		t.Fatal(err)
	}
	cfg.PoolPackets, cfg.ControlTimeout = 64, 10*time.Second
	n, err := Open(ctx, dev, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return sn, n
}

// frameTo is a 64-byte IPv4 frame for mac from a local address.
func frameTo(mac []byte) []byte {
	f := make([]byte, 64)
	copy(f, mac)
	copy(f[6:], []byte{0x02, 0, 0, 0, 0, 1})
	f[12], f[13] = 0x08, 0x00
	return f
}

// TestFullReceiveBurstsKeepHybridPolling: once an RxBurst has filled a
// slice of at least fullBurstMin (the host was ahead of the receiver), a
// hybrid Wait with no poll budget left keeps polling, yielding as Poll
// does, through the gap to the host's next round instead of sleeping;
// bursts that never fill such a slice leave it sleeping.
//
// The load mark lasts loadPollSpan (5 ms) of real time, and on a loaded
// machine the test's goroutine can be off its CPU longer than that between
// two statements. An attempt that saw the mark lapse is therefore tried
// again (up to fullBurstAttempts); one in which a Wait slept at once while
// the mark was fresh fails the test at once.
func TestFullReceiveBurstsKeepHybridPolling(t *testing.T) {
	const fullBurstAttempts = 8
	for _, tc := range []struct {
		name  string
		slice int // the receiver's RxBurst slice
		poll  bool
	}{
		{"full bursts", fullBurstMin, true},
		{"a frame at a time", 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			sn, n := openWaitNIC(t, ctx, Config{Mode: Hybrid, PollBudget: time.Nanosecond})
			q := n.Queues()[0]
			f := frameTo(n.MAC())
			burst := make([][]byte, fullBurstMin)
			for i := range burst {
				burst[i] = f
			}
			pkts := make([]*frame.Packet, tc.slice)
			yields, yield := 0, q.yield
			q.yield = func() {
				yields++
				if yields == 3 {
					if k := sn.Deliver([][]byte{f}); k != 1 {
						t.Errorf("host took %d frames", k)
					}
				}
				yield()
			}
			for attempt := 1; ; attempt++ {
				if attempt > fullBurstAttempts {
					t.Fatalf("the load mark lapsed before the check in all %d attempts", fullBurstAttempts)
				}
				if k := sn.Deliver(burst); k != len(burst) {
					t.Fatalf("host took %d of %d frames", k, len(burst))
				}
				for got := 0; got < len(burst); {
					if ctx.Err() != nil {
						t.Fatalf("received %d of %d frames", got, len(burst))
					}
					k := q.RxBurst(pkts)
					frame.PutBurst(pkts[:k])
					got += k
				}
				mark := max(q.rx.fullAt.Load(), q.rx.lastRx.Load())
				now := nanotime()
				got := q.loaded(now)
				if !tc.poll {
					if got {
						t.Fatalf("loaded after bursts of %d, want not", tc.slice)
					}
					return
				}
				if !got {
					if now-mark < loadPollSpan {
						t.Fatalf("not loaded %v after bursts of %d", time.Duration(now-mark), tc.slice)
					}
					continue // the mark lapsed before the check
				}
				// A Wait that sleeps at once never yields, and nothing else
				// sends the frame: only a polling Wait returns with it. (Once
				// it is sent, the Wait may still sleep before the host
				// writes it; the frame's signal wakes it.)
				yields = 0
				actx, acancel := context.WithTimeout(ctx, 2*time.Second)
				start, polled := nanotime(), q.c.pollNanos.v.Load()
				var err error
				for k := 0; k == 0 && err == nil; k = q.RxBurst(pkts) {
					err = q.Wait(actx)
				}
				acancel()
				if err == nil {
					if yields < 3 {
						t.Errorf("the frame came after %d yields, want the one the third yield sent", yields)
					}
					return
				}
				if ctx.Err() != nil {
					t.Fatalf("hybrid wait after full bursts: %v after %d yields", err, yields)
				}
				// The Wait stopped polling (start plus the time it polled):
				// a lapse has it at least loadPollSpan after the mark.
				if stop := start + int64(q.c.pollNanos.v.Load()-polled); yields == 0 && stop-mark < loadPollSpan/2 {
					t.Fatalf("hybrid wait stopped polling %v after full bursts and slept (%v)", time.Duration(stop-mark), err)
				}
				// The mark lapsed while the Wait polled: try again.
			}
		})
	}
}

// TestTransmitterBehindHostMarksLoad: a transmitter whose bursts all fit
// but leave the host holding at least half the queue's sections marks the
// queue as under load (txPath.behind), so a hybrid Wait polls for the
// completions rather than sleep until the burst that comes back short:
// polling them in as they come is what keeps bursts from coming back
// short, and a mark made only then would lapse while it works. Fewer
// sections in flight leave the queue unloaded.
func TestTransmitterBehindHostMarksLoad(t *testing.T) {
	for _, tc := range []struct {
		name   string
		behind int // bursts short of half the sections in flight (0: exactly half)
		want   bool
	}{
		{"half the sections with the host", 0, true},
		{"one section short of half", 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			sn, n := openWaitNIC(t, ctx, Config{Mode: Hybrid})
			q := n.Queues()[0]
			// The host takes no sends: each single-frame burst keeps
			// one section in flight.
			sn.Device().SetFault(sim.FaultStopDraining, true)
			defer sn.Device().SetFault(sim.FaultStopDraining, false)
			total := len(q.tx.secFrames)
			if total < 4 {
				t.Fatalf("%d sections", total)
			}
			bursts := total - total/2 - tc.behind
			f := frameTo([]byte{0x02, 0, 0, 0, 0, 9})
			pkts := make([]*frame.Packet, 1)
			for i := range bursts {
				if q.AllocBurst(pkts) != 1 {
					t.Fatal("pool exhausted")
				}
				copy(pkts[0].SetLen(len(f)), f)
				if q.TxBurst(pkts) != 1 {
					pkts[0].Free()
					t.Fatalf("burst %d of %d came back short: %d sections free", i+1, bursts, q.tx.sections())
				}
			}
			// Judged at the mark, not now: a descheduled test could
			// let loadPollSpan pass.
			at := q.tx.stalled.Load()
			if got := at != 0 && q.tx.owed(at, loadPollSpan); got != tc.want {
				t.Errorf("loaded = %v with %d of %d sections with the host and no short burst, want %v",
					got, bursts, total, tc.want)
			}
		})
	}
}

// sendBurst hands k copies of f to q.TxBurst and fails unless it takes
// them all.
func sendBurst(t *testing.T, q *Queue, f []byte, k int) {
	t.Helper()
	pkts := make([]*frame.Packet, k)
	if q.AllocBurst(pkts) != k {
		t.Fatal("pool exhausted")
	}
	for _, p := range pkts {
		copy(p.SetLen(len(f)), f)
	}
	if m := q.TxBurst(pkts); m != k {
		frame.PutBurst(pkts[m:])
		t.Fatalf("burst of %d came back short: %d", k, m)
	}
}

// TestStreamingTransmitterMarksLoad: a full burst (fullBurstMin frames
// or more) that starts while the host still holds earlier sends marks
// the queue as under load, however few sections those are: the
// transmitter streams faster than the host's completions come back, and
// a hybrid Wait that slept between its stalls would leave the
// completions to an interrupt while holding inMu. Single frames, or a
// first full burst, leave it unloaded (TestTransmitterBehindHostMarksLoad
// covers the host holding half the sections).
func TestStreamingTransmitterMarksLoad(t *testing.T) {
	for _, tc := range []struct {
		name   string
		bursts []int // frames per burst, in order
		want   bool
	}{
		{"one full burst", []int{fullBurstMin}, false},
		{"single frames", []int{1, 1, 1, 1}, false},
		{"a short burst behind a send", []int{1, fullBurstMin - 1}, false},
		{"a full burst behind a send", []int{1, fullBurstMin}, true},
		{"full bursts", []int{fullBurstMin, fullBurstMin}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			sn, n := openWaitNIC(t, ctx, Config{Mode: Hybrid})
			q := n.Queues()[0]
			// The host completes nothing: every send stays held.
			sn.Device().SetFault(sim.FaultStopDraining, true)
			defer sn.Device().SetFault(sim.FaultStopDraining, false)
			f := frameTo([]byte{0x02, 0, 0, 0, 0, 9})
			for _, k := range tc.bursts {
				sendBurst(t, q, f, k)
			}
			if q.tx.behind() {
				t.Fatalf("the host holds half of %d sections: the test measures nothing", len(q.tx.secFrames))
			}
			at := q.tx.stalled.Load()
			if got := at != 0 && q.tx.owed(at, loadPollSpan); got != tc.want {
				t.Errorf("loaded = %v after bursts %v, want %v", got, tc.bursts, tc.want)
			}
		})
	}
}

// TestStreamingTransmitterEndsWaitSleep: a TxBurst that marks the queue
// loaded ends a hybrid Wait's sleep on the ring, so the Wait polls the
// completions in rather than leaving them to the host's interrupt (and
// holding inMu against the transmitter meanwhile). The host completes
// nothing here, so no interrupt can end the sleep instead; it did work
// just before (lastRx), so the woken Wait polls. An Interrupt-mode Wait
// is left asleep.
func TestStreamingTransmitterEndsWaitSleep(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sn, n := openWaitNIC(t, ctx, Config{Mode: Hybrid, PollBudget: time.Nanosecond})
	q := n.Queues()[0]
	sn.Device().SetFault(sim.FaultStopDraining, true)
	defer sn.Device().SetFault(sim.FaultStopDraining, false)

	sleeps := q.Stats().Waits.RxSleeps
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	woke := make(chan error, 1)
	go func() { woke <- q.Wait(wctx) }()
	for !q.w.rxAsleep.Load() {
		if ctx.Err() != nil {
			t.Fatal("the receiver never went to sleep")
		}
		runtime.Gosched()
	}
	if got := q.Stats().Waits.RxSleeps; got != sleeps+1 {
		t.Errorf("RxSleeps %d, want %d", got, sleeps+1)
	}
	f := frameTo([]byte{0x02, 0, 0, 0, 0, 9})
	sendBurst(t, q, f, 1)
	// The kick needs the host's last work within loadPollSpan (else the
	// Wait would sleep again at once): the test's goroutine can be off
	// its CPU longer than that, so an attempt that took too long is
	// tried again.
	for attempt := 1; q.Stats().Waits.RxKicked == 0; attempt++ {
		if attempt > 20 {
			t.Fatal("every attempt outlasted loadPollSpan")
		}
		start := nanotime()
		q.rx.lastRx.Store(start) // as a drain that found work
		sendBurst(t, q, f, fullBurstMin)
		if q.Stats().Waits.RxKicked == 0 && nanotime()-start < loadPollSpan {
			t.Fatal("a full burst behind a held send left the sleeping Wait alone")
		}
	}
	select {
	case err := <-woke:
		if err != nil {
			t.Fatalf("Wait: %v (its sleep was not ended by the burst)", err)
		}
	case <-ctx.Done():
		t.Fatal("Wait never returned")
	}
	if w := q.Stats().Waits; w.RxKicked != 1 || w.RxWakeups != 0 {
		t.Errorf("RxKicked %d, RxWakeups %d: want the burst, not the ring, to end the sleep", w.RxKicked, w.RxWakeups)
	}
}

// TestWaitStatsCount: the wait counters say how each wait ended.
func TestWaitStatsCount(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	t.Run("poll", func(t *testing.T) {
		// A budget no test outlasts: the frame is found polling.
		sn, n := openWaitNIC(t, ctx, Config{Mode: Hybrid, PollBudget: time.Hour})
		q := n.Queues()[0]
		pkts := make([]*frame.Packet, 8)
		// A frame that is there before Wait looks returns at once,
		// uncounted: try again, the frame later each time (nothing
		// says when Wait started polling), until one came while it
		// polled.
		for attempt := 1; q.Stats().Waits.RxPolls == 0; attempt++ {
			if attempt > 20 {
				t.Fatal("every frame came before Wait polled")
			}
			sent := make(chan int, 1)
			go func() {
				for range 100 * attempt {
					runtime.Gosched()
				}
				sent <- sn.Deliver([][]byte{frameTo(n.MAC())})
			}()
			if err := q.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			if k := <-sent; k != 1 {
				t.Fatalf("host took %d frames", k)
			}
			for k := 0; k == 0; k = q.RxBurst(pkts) {
				if ctx.Err() != nil {
					t.Fatal("the frame never arrived")
				}
			}
			frame.PutBurst(pkts[:1])
		}
		if w := q.Stats().Waits; w.RxPolls != 1 || w.RxSleeps != 0 || w.RxLoadPolls != 0 {
			t.Errorf("RxPolls %d RxLoadPolls %d RxSleeps %d, want 1 0 0", w.RxPolls, w.RxLoadPolls, w.RxSleeps)
		}
	})
	t.Run("sleep and wake-up", func(t *testing.T) {
		sn, n := openWaitNIC(t, ctx, Config{Mode: Hybrid, PollBudget: time.Nanosecond})
		q := n.Queues()[0]
		done := make(chan error, 1)
		go func() { done <- q.Wait(ctx) }()
		for !q.w.rxAsleep.Load() {
			if ctx.Err() != nil {
				t.Fatal("Wait never slept")
			}
			runtime.Gosched()
		}
		if k := sn.Deliver([][]byte{frameTo(n.MAC())}); k != 1 {
			t.Fatalf("host took %d frames", k)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if w := q.Stats().Waits; w.RxSleeps != 1 || w.RxWakeups != 1 || w.RxSleepsOwed != 0 {
			t.Errorf("RxSleeps %d RxWakeups %d RxSleepsOwed %d, want 1 1 0", w.RxSleeps, w.RxWakeups, w.RxSleepsOwed)
		}
	})
	t.Run("sleep with sends owed, WaitTx behind it", func(t *testing.T) {
		sn, n := openWaitNIC(t, ctx, Config{Mode: Hybrid, PollBudget: time.Nanosecond})
		q := n.Queues()[0]
		sn.Device().SetFault(sim.FaultStopDraining, true)
		// One send the host holds, then every section: each burst
		// below fullBurstMin, so none marks the queue loaded.
		f := frameTo([]byte{0x02, 0, 0, 0, 0, 9})
		pkts := make([]*frame.Packet, 1)
		for {
			if q.AllocBurst(pkts) != 1 {
				t.Fatal("pool exhausted before the send buffer")
			}
			copy(pkts[0].SetLen(len(f)), f)
			if q.TxBurst(pkts) == 0 {
				pkts[0].Free()
				break
			}
		}
		q.tx.stalled.Store(0) // the short burst's mark: let Wait sleep
		done := make(chan error, 1)
		wctx, wcancel := context.WithCancel(ctx)
		go func() { done <- q.Wait(wctx) }()
		for !q.w.rxAsleep.Load() {
			if ctx.Err() != nil {
				t.Fatal("Wait never slept")
			}
			runtime.Gosched()
		}
		txDone := make(chan error, 1)
		go func() { txDone <- q.WaitTx(ctx) }()
		for q.Stats().Waits.TxBlocked == 0 {
			if ctx.Err() != nil {
				t.Fatal("WaitTx never waited behind the sleeper")
			}
			runtime.Gosched()
		}
		sn.Device().SetFault(sim.FaultStopDraining, false)
		if err := <-txDone; err != nil {
			t.Fatalf("WaitTx: %v", err)
		}
		wcancel()
		<-done
		if w := q.Stats().Waits; w.RxSleepsOwed != 1 {
			t.Errorf("RxSleepsOwed %d, want 1", w.RxSleepsOwed)
		}
	})
}

// TestHostCaughtUpKeepsHybridPolling: a transmitter that streamed within
// loadPollSpan while the host has just completed every send (it owes
// nothing, txPath.held) is a moment of full load, not its end: a hybrid
// Wait with no poll budget left polls on, yielding as under load, for
// one more loadRecheck (txCaughtUp) before it sleeps, rather than
// sleeping at once on inMu while the transmitter's next burst runs its
// sections out. Nothing comes meanwhile here, so it then sleeps; a frame
// ends that sleep.
func TestHostCaughtUpKeepsHybridPolling(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sn, n := openWaitNIC(t, ctx, Config{Mode: Hybrid, PollBudget: time.Nanosecond})
	q := n.Queues()[0]
	f := frameTo(n.MAC())
	pkts := make([]*frame.Packet, 8)
	for attempt := 1; ; attempt++ {
		if attempt > 20 {
			t.Fatal("every Wait ended before it slept")
		}
		if q.tx.held() {
			t.Fatal("the host holds sends; none were made")
		}
		before, polled := q.Stats().Waits, q.c.pollNanos.v.Load()
		yields := 0
		q.yield = func() { yields++ }
		woken, stop := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(woken)
			for !q.w.rxAsleep.Load() {
				select {
				case <-stop:
					return
				default:
					runtime.Gosched()
				}
			}
			if k := sn.Deliver([][]byte{f}); k != 1 {
				t.Errorf("host took %d frames", k)
			}
		}()
		now := nanotime()
		q.tx.stalled.Store(now) // as a streaming TxBurst
		q.rx.lastRx.Store(now)  // as a drain that found work
		err := q.Wait(ctx)
		if err != nil {
			t.Fatalf("Wait: %v", err)
		}
		if q.Stats().Waits.RxSleeps == before.RxSleeps {
			// Something else (an indication) ended it while it
			// polled: try again.
			close(stop)
			<-woken
			frame.PutBurst(pkts[:q.RxBurst(pkts)])
			continue
		}
		<-woken
		for k := 0; k == 0; {
			if ctx.Err() != nil {
				t.Fatal("the frame never came")
			}
			if k = q.RxBurst(pkts); k == 0 {
				runtime.Gosched()
			}
			frame.PutBurst(pkts[:k])
		}
		// Polling stops at a recheck that finds loadRecheck passed:
		// whatever the scheduler does, the Wait polled that long
		// (yields are not counted on: a Wait off its CPU past the
		// recheck sleeps before its first).
		if d := time.Duration(q.c.pollNanos.v.Load() - polled); d < time.Duration(loadRecheck) {
			t.Fatalf("the Wait polled %v (%d yields) before it slept; want at least %v under load",
				d, yields, time.Duration(loadRecheck))
		}
		return
	}
}
