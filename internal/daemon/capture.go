package daemon

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/vmbusd/vmbusd/netvsc"
	"github.com/vmbusd/vmbusd/tap"
)

// A NIC's capture hub. With nobody capturing, the data path pays one atomic
// load per burst; each capture gets its own bounded queue, and frames that
// do not fit are counted as dropped rather than slowing the NIC.
type captureHub struct {
	active atomic.Pointer[[]*captureSub]
	mu     sync.Mutex
	subs   []*captureSub
}

type capturedFrame struct {
	at    time.Time
	in    bool // to the guest
	queue int
	data  []byte
	orig  int
}

type captureSub struct {
	queue   int // -1: every queue
	snaplen int
	frames  chan capturedFrame
	dropped atomic.Uint64
	queued  atomic.Int64 // bytes of frame data in frames
}

// A capture's queue: at most captureQueueLen frames and captureQueueBytes
// of their data, whichever comes first (a capture of jumbo frames whose
// client reads slowly holds 4 MiB, not 4096 × 9 KiB).
const (
	captureQueueLen   = 1024
	captureQueueBytes = 4 << 20
)

func (h *captureHub) add(queue, snaplen int) *captureSub {
	s := &captureSub{queue: queue, snaplen: snaplen, frames: make(chan capturedFrame, captureQueueLen)}
	h.mu.Lock()
	h.subs = append(h.subs, s)
	subs := append([]*captureSub(nil), h.subs...)
	h.active.Store(&subs)
	h.mu.Unlock()
	return s
}

func (h *captureHub) remove(s *captureSub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, x := range h.subs {
		if x == s {
			h.subs = append(h.subs[:i], h.subs[i+1:]...)
			break
		}
	}
	if len(h.subs) == 0 {
		h.active.Store(nil)
		return
	}
	subs := append([]*captureSub(nil), h.subs...)
	h.active.Store(&subs)
}

// observer returns the data-path hook for one incarnation of the NIC.
func (r *nicRunner) observer(nic *netvsc.NIC) func(toTAP bool, queue int, pkts []*netvsc.Packet) {
	return func(in bool, queue int, pkts []*netvsc.Packet) {
		subs := r.cap.active.Load()
		if subs == nil {
			return
		}
		now := time.Now()
		for _, p := range pkts {
			q := queue
			data := p.Data()
			if q < 0 { // from the TAP: the queue the send table picks
				q = nic.TxQueue(tap.FlowHash(data)).Index()
			}
			for _, s := range *subs {
				if s.queue >= 0 && s.queue != q {
					continue
				}
				n := len(data)
				if s.snaplen > 0 && n > s.snaplen {
					n = s.snaplen
				}
				if s.queued.Load()+int64(n) > captureQueueBytes {
					s.dropped.Add(1)
					continue
				}
				f := capturedFrame{at: now, in: in, queue: q, data: append([]byte(nil), data[:n]...), orig: len(data)}
				select {
				case s.frames <- f:
					s.queued.Add(int64(n))
				default:
					s.dropped.Add(1)
				}
			}
		}
	}
}
