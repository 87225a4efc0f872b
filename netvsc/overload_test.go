package netvsc_test

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/frame"
	"github.com/vmbusd/vmbusd/netvsc"
	"github.com/vmbusd/vmbusd/sim"
)

// genSeq returns the sequence number a sim.Generator frame carries.
func genSeq(p *frame.Packet) uint64 { return binary.BigEndian.Uint64(p.Data()[42:]) }

// TestOverloadHoldsCompletions floods a queue far beyond its packet pool
// while the application keeps every packet it got: the frames that find
// no packet stay in the receive buffer, their completions held, so the
// host's buffer fills and the host drops (the generator's frames not
// accepted). Once the application frees its packets, every frame the host
// accepted is delivered, in order, and the guest dropped none.
func TestOverloadHoldsCompletions(t *testing.T) {
	const pool = 256
	gen := sim.NewGenerator(sim.GeneratorConfig{Sizes: []int{64}, Batch: 64})
	_, _, n := newNIC(t, sim.NICConfig{RecvBuffer: 1 << 20, QueueLen: 512}, gen,
		netvsc.Config{Queues: 1, PoolPackets: pool, RxStage: 32})
	q := n.Queues()[0]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	var kept []*frame.Packet
	var next uint64 // the next sequence number expected, at least
	check := func(pkts []*frame.Packet) {
		t.Helper()
		for _, p := range pkts {
			s := genSeq(p)
			if s < next {
				t.Fatalf("frame %d after %d: out of order or repeated", s, next-1)
			}
			next = s + 1
		}
	}
	// Take every packet of the pool and keep them, draining on: the rest
	// has to wait in the receive buffer, and the host to drop.
	pkts := make([]*frame.Packet, 64)
	for {
		st, gs := q.Stats(), gen.Stats()
		if len(kept) == pool && st.RxHeld > 0 && gs.Sent > gs.Accepted+10000 {
			break
		}
		k := q.RxBurst(pkts)
		check(pkts[:k])
		kept = append(kept, pkts[:k]...)
		if k == 0 {
			if err := q.Wait(ctx); err != nil {
				t.Fatalf("waiting for the host to drop: %v (held %d, kept %d, host sent %d accepted %d)",
					err, st.RxHeld, len(kept), gs.Sent, gs.Accepted)
			}
		}
	}
	gen.Close()
	frame.PutBurst(kept)
	got := uint64(len(kept))
	for got < gen.Stats().Accepted {
		k := q.RxBurst(pkts)
		check(pkts[:k])
		got += uint64(k)
		frame.PutBurst(pkts[:k])
		if k == 0 {
			if err := q.Wait(ctx); err != nil {
				t.Fatalf("delivered %d of the %d frames the host accepted: %v", got, gen.Stats().Accepted, err)
			}
		}
	}
	st, gs := q.Stats(), gen.Stats()
	t.Logf("host sent %d, accepted %d; guest delivered %d, held %d", gs.Sent, gs.Accepted, got, st.RxHeld)
	if got != gs.Accepted {
		t.Errorf("delivered %d frames, the host accepted %d", got, gs.Accepted)
	}
	if st.RxNoMemory != 0 {
		t.Errorf("rx_no_memory %d: the guest dropped frames it had taken", st.RxNoMemory)
	}
	if st.RxPackets != got {
		t.Errorf("rx packets %d, delivered %d", st.RxPackets, got)
	}
}
