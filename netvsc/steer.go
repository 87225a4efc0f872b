package netvsc

import (
	"context"

	"github.com/vmbusd/vmbusd/frame"
)

// SteeredSink transmits on a NIC, each frame on the queue the host's send
// indirection table picks for its flow (docs/protocol/netvsc.md §2.8). Not safe for
// concurrent use (one per forwarding goroutine).
type SteeredSink struct {
	NIC   *NIC
	short *Queue
}

// TxBurst implements frame.Sink.
func (s *SteeredSink) TxBurst(pkts []*frame.Packet) int {
	qs := s.NIC.Queues()
	if len(qs) == 1 {
		n := qs[0].TxBurst(pkts)
		if n < len(pkts) {
			s.short = qs[0]
		}
		return n
	}
	// Runs of frames for the same queue go in one burst; frames keep their
	// order; a queue that refuses stops the burst there (the rest are
	// retried after WaitTx).
	done := 0
	for done < len(pkts) {
		q := s.NIC.TxQueue(frame.FlowHash(pkts[done].Data()))
		end := done + 1
		for end < len(pkts) && s.NIC.TxQueue(frame.FlowHash(pkts[end].Data())) == q {
			end++
		}
		k := q.TxBurst(pkts[done:end])
		done += k
		if done < end {
			s.short = q
			return done
		}
	}
	return done
}

// WaitTx implements frame.Sink.
func (s *SteeredSink) WaitTx(ctx context.Context) error {
	if q := s.short; q != nil {
		s.short = nil
		return q.WaitTx(ctx)
	}
	return ctx.Err()
}

// Each queue is a frame port both ways, and the NIC's send table one more
// sink.
var (
	_ frame.Source = (*Queue)(nil)
	_ frame.Sink   = (*Queue)(nil)
	_ frame.Sink   = (*SteeredSink)(nil)
)
