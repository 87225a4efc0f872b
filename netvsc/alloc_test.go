package netvsc_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/vmbusd/vmbusd/frame"
	"github.com/vmbusd/vmbusd/internal/testutil"
	"github.com/vmbusd/vmbusd/netvsc"
	"github.com/vmbusd/vmbusd/sim"
)

// The bursts allocate nothing in the steady state: every run below moves
// 256 frames through RxBurst or TxBurst (with the waits a caller makes
// when a burst comes back short) and must not allocate. The simulated host
// runs in the same process and its own steady state allocates nothing
// either, so every allocation counted is a regression on one side or the
// other; `go test -run NAME -memprofile` tells which.

const allocFrames = 256

// allocHostQueue is the simulated host's per-channel frame queue: its
// slots keep their buffers once used, so a warm-up that has not cycled
// through every slot leaves the host allocating in the measured runs.
const allocHostQueue = 4096

func skipUnderRace(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's instrumentation allocates on the ring path; make unit runs the allocation tests without -race")
	}
}

func allocNIC(t *testing.T, gen *sim.Generator) *netvsc.NIC {
	_, _, n := newNIC(t, sim.NICConfig{RingSize: 1 << 20, RecvBuffer: 16 << 20, SendBuffer: 8 << 20, QueueLen: allocHostQueue},
		gen, netvsc.Config{Mode: netvsc.Hybrid, PoolPackets: 4096, RxStage: 1024})
	t.Cleanup(func() { n.Close() })
	return n
}

func TestRxBurstAllocatesNothing(t *testing.T) {
	skipUnderRace(t)
	for _, size := range []int{64, 1514} {
		t.Run(fmt.Sprintf("%dB", size), func(t *testing.T) {
			gen := sim.NewGenerator(sim.GeneratorConfig{Sizes: []int{size}, Batch: 64})
			defer gen.Close()
			n := allocNIC(t, gen)
			q := n.Queues()[0]
			pkts := make([]*frame.Packet, 64)
			ctx := context.Background()
			receive := func(total int) {
				for got := 0; got < total; {
					k := q.RxBurst(pkts)
					got += k
					frame.PutBurst(pkts[:k])
					if k == 0 {
						if err := q.Wait(ctx); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			// Warm up: pool, staging and rings in use, and every slot of
			// the host's frame queue filled once at this size.
			receive(allocHostQueue + 4*allocFrames)
			testutil.AllocBudget(t, 0, 50, func() { receive(allocFrames) })
			if want := uint64(allocHostQueue + 54*allocFrames); q.Stats().RxPackets < want {
				t.Fatalf("received %d frames, want at least %d", q.Stats().RxPackets, want)
			}
		})
	}
}

func TestTxBurstAllocatesNothing(t *testing.T) {
	skipUnderRace(t)
	for _, size := range []int{64, 1514} {
		t.Run(fmt.Sprintf("%dB", size), func(t *testing.T) {
			gen := sim.NewGenerator(sim.GeneratorConfig{Idle: true})
			defer gen.Close()
			n := allocNIC(t, gen)
			q := n.Queues()[0]
			tmpl := testFrame([]byte{0x02, 0, 0, 0, 0, 9}, n.MAC(), size, 1, 1000)
			pkts := make([]*frame.Packet, 32)
			ctx := context.Background()
			send := func(total int) { sendTemplate(t, ctx, q, tmpl, pkts, total) }
			send(4 * allocFrames)
			testutil.AllocBudget(t, 0, 50, func() { send(allocFrames) })
			waitCond(t, "the host to receive every frame", func() bool {
				q.RxBurst(pkts) // reap the completions
				return gen.Stats().Received >= 55*allocFrames
			})
		})
	}
}

// sendTemplate transmits total copies of tmpl on q in bursts of len(pkts),
// waiting for room whenever a burst comes back short, as a caller does.
func sendTemplate(tb testing.TB, ctx context.Context, q *netvsc.Queue, tmpl []byte, pkts []*frame.Packet, total int) {
	sendMetered(tb, ctx, q, tmpl, pkts, total, nil)
}

// sendMetered is sendTemplate with its waits timed by wm (nil: untimed).
func sendMetered(tb testing.TB, ctx context.Context, q *netvsc.Queue, tmpl []byte, pkts []*frame.Packet, total int, wm *waitMeter) {
	for sent := 0; sent < total; {
		k := q.AllocBurst(pkts[:min(len(pkts), total-sent)])
		for _, p := range pkts[:k] {
			copy(p.SetLen(len(tmpl)), tmpl)
		}
		m := q.TxBurst(pkts[:k])
		frame.PutBurst(pkts[m:k])
		sent += m
		if m < k || k == 0 {
			if err := wm.waitTx(ctx, q); err != nil {
				tb.Fatal(err)
			}
		}
	}
}
