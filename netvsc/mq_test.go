package netvsc_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/frame"
	"github.com/vmbusd/vmbusd/internal/testutil"
	"github.com/vmbusd/vmbusd/netvsc"
	"github.com/vmbusd/vmbusd/sim"
	"github.com/vmbusd/vmbusd/vmbus"
)

// rxAll runs an RxBurst/Wait loop per queue until ctx ends, counting.
func rxAll(ctx context.Context, n *netvsc.NIC, per []atomic.Uint64) *sync.WaitGroup {
	var wg sync.WaitGroup
	for i, q := range n.Queues() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pkts := make([]*frame.Packet, 64)
			for ctx.Err() == nil {
				k := q.RxBurst(pkts)
				if k == 0 {
					if q.Wait(ctx) != nil {
						return
					}
					continue
				}
				per[i].Add(uint64(k))
				frame.PutBurst(pkts[:k])
			}
		}()
	}
	return &wg
}

// tcpFlows is a port that delivers TCP frames of many flows (RSS hashes
// TCP on addresses and ports, UDP on addresses only, as Linux asks).
type tcpFlows struct {
	up       sim.Uplink
	accepted atomic.Uint64
	done     chan struct{}
	count    int
}

func (p *tcpFlows) Connect(up sim.Uplink) error {
	p.up = up
	go func() {
		defer close(p.done)
		src := []byte{0x02, 0, 0, 0, 0, 1}
		for i := 0; i < p.count; i += 32 {
			var fs [][]byte
			for k := i; k < i+32 && k < p.count; k++ {
				f := testFrame(up.MAC(), src, 64+k%1400, uint32(k), uint16(1000+k%64))
				f[23] = 6 // TCP; the checksum is not checked here
				f[46] = 0x50
				fs = append(fs, f)
			}
			for len(fs) > 0 {
				n := up.Deliver(fs)
				p.accepted.Add(uint64(n))
				fs = fs[n:]
				if len(fs) > 0 {
					// Pacing, not a wait: Deliver never blocks and a full
					// queue has no event, so the producer backs off.
					time.Sleep(50 * time.Microsecond)
				}
			}
		}
	}()
	return nil
}
func (p *tcpFlows) Transmit([][]byte) {}
func (p *tcpFlows) Close() error      { return nil }

func TestMultiQueueRSSSpreadsFlows(t *testing.T) {
	gen := &tcpFlows{count: 20000, done: make(chan struct{})}
	_, sn, n := newNIC(t, sim.NICConfig{MaxQueues: 4}, gen, netvsc.Config{Queues: 4})
	if len(n.Queues()) != 4 {
		t.Fatalf("%d queues, want 4", len(n.Queues()))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	per := make([]atomic.Uint64, 4)
	wg := rxAll(ctx, n, per)
	select {
	case <-gen.done:
	case <-ctx.Done():
		t.Fatal("generator did not finish")
	}
	waitCond(t, "the queues to receive every frame the host accepted", func() bool {
		var sum uint64
		for i := range per {
			sum += per[i].Load()
		}
		return sum >= gen.accepted.Load()
	})
	cancel()
	wg.Wait()
	for i := range per {
		if per[i].Load() == 0 {
			t.Errorf("queue %d received nothing: %v", i, per)
		}
	}
	if _, ok := n.SendTable(); !ok {
		t.Errorf("no send indirection table")
	}
	hs := sn.Stats()
	if !hs.RSS || hs.Channels != 4 {
		t.Errorf("host: rss %v channels %d", hs.RSS, hs.Channels)
	}
	t.Logf("per queue %d %d %d %d, host accepted %d", per[0].Load(), per[1].Load(), per[2].Load(), per[3].Load(), gen.accepted.Load())
}

func TestPartialSubchannelGrant(t *testing.T) {
	for _, tc := range []struct {
		name      string
		nc        sim.NICConfig
		want      int
		wantQueue int
	}{
		{"host-max", sim.NICConfig{MaxQueues: 3}, 8, 3},
		{"never-opens", sim.NICConfig{MaxQueues: 4, NeverOpen: 1, SubchannelDelay: 5 * time.Millisecond}, 4, 3},
		{"refused", sim.NICConfig{FailSubchannels: true}, 4, 1},
		{"overgrant", sim.NICConfig{Faults: []sim.NICFault{sim.NICFaultSubchannelOvergrant}}, 3, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, n := newNIC(t, tc.nc, sim.NewReflector(), netvsc.Config{Queues: tc.want, SubchannelTimeout: 500 * time.Millisecond})
			if got := len(n.Queues()); got != tc.wantQueue {
				t.Fatalf("%d queues, want %d", got, tc.wantQueue)
			}
			// Every queue carries traffic.
			for _, q := range n.Queues() {
				roundTrip(t, n, q, 200, []int{64, 1000})
			}
		})
	}
}

func TestLinkDownUpIsReported(t *testing.T) {
	_, sn, n := newNIC(t, sim.NICConfig{LinkSpacing: time.Millisecond}, sim.NewReflector(), netvsc.Config{})
	for _, up := range []bool{false, true, false, true} {
		ch := n.LinkChanged()
		sn.SetLink(up)
		deadline := time.Now().Add(10 * time.Second)
		for n.Link().Up != up {
			if time.Now().After(deadline) {
				t.Fatalf("link never went %v", up)
			}
			// Indications arrive on queue 0 and are handled by whoever
			// drains it: here, Wait and RxBurst.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
			n.Queues()[0].Wait(ctx)
			cancel()
			n.Queues()[0].RxBurst(make([]*frame.Packet, 8))
		}
		select {
		case <-ch:
		default:
			t.Errorf("LinkChanged not closed after the change to %v", up)
		}
	}
	if n.Stats().LinkChanges < 4 {
		t.Errorf("link changes %d", n.Stats().LinkChanges)
	}
	l, err := n.QueryLink(context.Background())
	if err != nil || !l.Up || l.Speed != 10e9 {
		t.Errorf("QueryLink %v %v", l, err)
	}
}

func TestReconfigureMTUAndQueues(t *testing.T) {
	_, sn, n := newNIC(t, sim.NICConfig{MTU: 9000, MaxQueues: 4}, sim.NewReflector(), netvsc.Config{Queues: 1})
	old := n.Queues()[0]
	roundTrip(t, n, old, 100, []int{1514})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.Reconfigure(ctx, 4000, 2); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(old.Err(), netvsc.ErrReconfigured) {
		t.Errorf("old queue: %v", old.Err())
	}
	if n.MTU() != 4000 || len(n.Queues()) != 2 {
		t.Fatalf("mtu %d queues %d", n.MTU(), len(n.Queues()))
	}
	roundTrip(t, n, n.Queues()[1], 300, []int{4014, 64})
	if st := sn.Stats(); st.Opens != 2 || st.MTU != 4014 {
		t.Errorf("host opens %d mtu %d", st.Opens, st.MTU)
	}
}

func TestSwitchDataPathAndVF(t *testing.T) {
	_, sn, n := newNIC(t, sim.NICConfig{VF: 7, VFDelay: time.Millisecond}, sim.NewReflector(), netvsc.Config{})
	waitCond(t, "the VF association", func() bool {
		n.Queues()[0].RxBurst(make([]*frame.Packet, 8))
		_, ok := n.VF()
		return ok
	})
	if serial, _ := n.VF(); serial != 7 {
		t.Fatalf("VF serial %d", serial)
	}
	ctx := context.Background()
	if err := n.SwitchDataPath(ctx, true); err != nil {
		t.Fatal(err)
	}
	if !sn.Stats().DataPathVF {
		t.Errorf("host did not switch to the VF")
	}
	if err := n.SwitchDataPath(ctx, false); err != nil {
		t.Fatal(err)
	}
	if sn.Stats().DataPathVF {
		t.Errorf("host did not switch back")
	}
}

// TestEveryKernelProfile runs two queues on every uio_hv_generic
// behaviour: before 6.16 sub-channel interrupts never reach user space,
// so those queues poll; before 6.18 the kernel masks on every interrupt.
func TestEveryKernelProfile(t *testing.T) {
	for _, prof := range sim.Profiles() {
		t.Run(prof.String(), func(t *testing.T) {
			h, err := sim.New(sim.Config{Root: t.TempDir(), Profile: prof})
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			for _, mode := range []netvsc.Mode{netvsc.Hybrid, netvsc.Interrupt, netvsc.Poll} {
				n := openOn(t, h, sim.NICConfig{MaxQueues: 2}, sim.NewReflector(), netvsc.Config{Queues: 2, Mode: mode})
				for _, q := range n.Queues() {
					roundTrip(t, n, q, 300, []int{64, 1514})
				}
				if h.Violations() != nil && len(h.Violations()) > 0 {
					t.Errorf("%s: host saw violations %v", mode, h.Violations())
				}
				n.Close()
			}
		})
	}
}

// TestSharedInterruptFdPerQueueAccounting: on 6.16 and later every queue's
// interrupts arrive on the primary's uio fd and wake every sleeping queue.
// A queue that sleeps while another carries the traffic has slept once and
// counted none of the other's interrupts as its own wake-ups.
func TestSharedInterruptFdPerQueueAccounting(t *testing.T) {
	for _, prof := range []sim.Profile{sim.Profile6_16, sim.Profile6_18} {
		t.Run(prof.String(), func(t *testing.T) {
			h, err := sim.New(sim.Config{Root: t.TempDir(), Profile: prof})
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			nc := sim.NICConfig{MaxQueues: 2}
			nc.RingSize, nc.RecvBuffer, nc.SendBuffer = 256<<10, 4<<20, 2<<20
			sn, err := h.AddNIC(nc)
			if err != nil {
				t.Fatal(err)
			}
			sn.Attach(sim.NewReflector())
			n := openNIC(t, h, sn, netvsc.Config{Queues: 2, Mode: netvsc.Interrupt})
			// The host takes a sub-channel on before its ring appears
			// (docs/uio-contract.md §2.2), so an open NIC's queues are all
			// in the host's use: otherwise RSS would put frames for the
			// new queue on the primary, and the busy queue found below
			// would be the wrong one.
			if got := sn.Stats().Channels; got != 2 {
				t.Fatalf("the host uses %d channels once the guest has opened 2 queues", got)
			}
			defer n.Close()
			qs := n.Queues()
			if len(qs) != 2 {
				t.Fatalf("%d queues", len(qs))
			}
			// Every test frame has the same addresses, so RSS puts all of
			// them on one queue: find which.
			peer := []byte{0x02, 0, 0, 0, 0, 9}
			sendOne(t, qs[0], testFrame(peer, n.MAC(), 100, 0, 1000), frame.Meta{})
			busy := -1
			rx := make([]*frame.Packet, 64)
			waitCond(t, "the first frame to come back", func() bool {
				for i, q := range qs {
					if k := q.RxBurst(rx); k > 0 {
						frame.PutBurst(rx[:k])
						busy = i
					}
				}
				return busy >= 0
			})
			// Reap the first send's completion too (it comes back on queue
			// 0), so that the idle queue has nothing left to do.
			waitCond(t, "the first send's completion", func() bool {
				for _, q := range qs {
					if k := q.RxBurst(rx); k > 0 {
						t.Fatalf("an unexpected frame on queue %d", q.Index())
					}
				}
				return qs[0].Stats().TxPackets == 1
			})
			bq, iq := qs[busy], qs[1-busy]
			i0 := iq.Stats()
			ctx, cancel := context.WithCancel(context.Background())
			slept := make(chan error, 1)
			go func() { slept <- iq.Wait(ctx) }()
			waitCond(t, "the idle queue to sleep", func() bool {
				select {
				case err := <-slept:
					t.Fatalf("the idle queue's Wait returned at once: %v; %+v", err, iq.Stats())
				default:
				}
				return iq.Stats().Channel.IdleWaits > i0.Channel.IdleWaits
			})
			// The busy queue's Waits share one deadline, so that a lost
			// wake-up fails the test instead of hanging it.
			bctx, bcancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
			defer bcancel()
			for i := range 200 {
				sendOne(t, bq, testFrame(peer, n.MAC(), 64+i, uint32(i+1), 1000), frame.Meta{})
				for bq.RxBurst(rx[:1]) == 0 {
					if err := bq.Wait(bctx); err != nil {
						t.Fatalf("frame %d did not come back: %v; busy queue %+v", i+1, err, bq.Stats())
					}
				}
				rx[0].Free()
			}
			select {
			case err := <-slept:
				cancel()
				t.Fatalf("the idle queue's Wait returned with nothing for it: %v", err)
			default:
			}
			cancel()
			if err := <-slept; !errors.Is(err, context.Canceled) {
				t.Fatalf("idle queue's Wait: %v", err)
			}
			i1, b1 := iq.Stats(), bq.Stats()
			t.Logf("idle queue %d: %+v\nbusy queue %d: %+v", iq.Index(), i1.Channel, bq.Index(), b1.Channel)
			if i1.Channel.SharedWakeups == i0.Channel.SharedWakeups {
				t.Fatal("the busy queue's interrupts never reached the idle queue: the test shows nothing")
			}
			if i1.Channel.Wakeups != i0.Channel.Wakeups {
				t.Errorf("the idle queue counted %d wake-ups of its own", i1.Channel.Wakeups-i0.Channel.Wakeups)
			}
			if d := i1.Channel.IdleWaits - i0.Channel.IdleWaits; d != 1 {
				t.Errorf("the idle queue counted %d sleeps, want 1", d)
			}
			if b1.Channel.Wakeups == 0 {
				t.Errorf("the busy queue counted no wake-ups")
			}
			if i1.SleepSeconds <= i0.SleepSeconds {
				t.Errorf("the idle queue's sleep time did not grow")
			}
		})
	}
}

// waitCond is testutil.WaitFor with its default deadline, for the tests of
// this package.
func waitCond(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testutil.WaitFor(t, 0, cond, what)
}

// TestSubchannelsWithSplitIDsAllOpen: a host that writes each
// sub-channel's subchannel_id in two steps still gets every queue used.
func TestSubchannelsWithSplitIDsAllOpen(t *testing.T) {
	h, err := sim.New(sim.Config{Root: t.TempDir(), Profile: sim.DefaultProfile})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	sn, err := h.AddNIC(sim.NICConfig{MaxQueues: 4, RingSize: 256 << 10, SubchannelRingSize: 256 << 10, RecvBuffer: 4 << 20, SendBuffer: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	sn.Attach(sim.NewReflector())
	sn.Device().SetFault(sim.FaultSplitSubchannelID, true)
	n := openNIC(t, h, sn, netvsc.Config{Queues: 4})
	defer n.Close()
	if got := len(n.Queues()); got != 4 {
		t.Fatalf("%d queues, want 4", got)
	}
	if hits := sn.Device().Faults().Hits(sim.FaultSplitSubchannelID); hits != 3 {
		t.Fatalf("%d ids split, want 3", hits)
	}
	for _, q := range n.Queues() {
		roundTrip(t, n, q, 50, []int{64, 1000})
	}
}

// TestRescindDuringSubchannelWait: the host takes the NIC away while Open
// waits for sub-channels that never open; Open returns at once with the
// rescind, not when SubchannelTimeout ends.
func TestRescindDuringSubchannelWait(t *testing.T) {
	h, err := sim.New(sim.Config{Root: t.TempDir(), Profile: sim.DefaultProfile})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	sn, err := h.AddNIC(sim.NICConfig{MaxQueues: 4, NeverOpen: 3, RingSize: 256 << 10, RecvBuffer: 4 << 20, SendBuffer: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	sn.Attach(sim.NewReflector())
	dev, err := vmbus.LookupDevice(h.Root(), sn.Device().Instance())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		n, err := netvsc.Open(context.Background(), dev, netvsc.Config{Queues: 4, SubchannelTimeout: time.Hour, PoolPackets: 256})
		if err == nil {
			n.Close()
		}
		done <- err
	}()
	waitCond(t, "the sub-channels to be offered", func() bool {
		chans, err := dev.ReadChannels()
		return err == nil && len(chans) == 4
	})
	if err := sn.Device().Rescind(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, vmbus.ErrRescinded) {
			t.Fatalf("Open: %v, want ErrRescinded", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Open did not return on the rescind")
	}
}

// TestCloseWaitsForEveryQueuesSends: Close halts the NIC only after the
// host has completed the sends in flight on every queue, not only on the
// primary's (docs/protocol/netvsc.md §2.10: Linux waits for every send and
// receive completion around HALT). Frames sent on a sub-channel and never
// reaped by a later burst are counted as transmitted once Close returns.
func TestCloseWaitsForEveryQueuesSends(t *testing.T) {
	h, err := sim.New(sim.Config{Root: t.TempDir(), Profile: sim.DefaultProfile})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	gen := sim.NewGenerator(sim.GeneratorConfig{Idle: true})
	defer gen.Close()
	n := openOn(t, h, sim.NICConfig{MaxQueues: 2}, gen, netvsc.Config{Queues: 2, Mode: netvsc.Interrupt})
	qs := n.Queues()
	if len(qs) != 2 {
		t.Fatalf("%d queues", len(qs))
	}
	const frames = 300
	peer := []byte{0x02, 0, 0, 0, 0, 9}
	tmpl := testFrame(peer, n.MAC(), 200, 0, 1000)
	pkts := make([]*frame.Packet, 32)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sendTemplate(t, ctx, qs[1], tmpl, pkts, frames)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if got := qs[1].Stats().TxPackets; got != frames {
		t.Fatalf("queue 1 counted %d frames transmitted when Close returned, want %d (completions left behind); q1 %+v host %+v", got, frames, qs[1].Stats(), gen.Stats())
	}
	if got := gen.Stats().Received; got != frames {
		t.Fatalf("host received %d frames, want %d", got, frames)
	}
}

// TestCloseWhileWaitsPoll: Close while every queue's Wait busy-polls (Poll
// and Hybrid read the rings without a lock) must end the Waits with an
// error before the rings are unmapped; a Wait still reading would fault.
func TestCloseWhileWaitsPoll(t *testing.T) {
	h, err := sim.New(sim.Config{Root: t.TempDir(), Profile: sim.DefaultProfile})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for i := range 12 {
		mode := []netvsc.Mode{netvsc.Poll, netvsc.Hybrid}[i%2]
		gen := sim.NewGenerator(sim.GeneratorConfig{Idle: true})
		n := openOn(t, h, sim.NICConfig{MaxQueues: 2}, gen, netvsc.Config{Queues: 2, Mode: mode, PollBudget: time.Hour})
		var wg sync.WaitGroup
		for _, q := range n.Queues() {
			wg.Add(2)
			go func() {
				defer wg.Done()
				for q.Wait(context.Background()) == nil {
				}
			}()
			go func() {
				defer wg.Done()
				for q.WaitTx(context.Background()) == nil {
				}
			}()
		}
		if err := n.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		gen.Close()
	}
}
