package netvsc

import "sync/atomic"

// idxRing is a single-producer single-consumer ring of free indices
// (send-buffer sections, GPA send slots). The consumer is the transmit
// path (under the queue's txMu), the producer whoever processes
// completions (under inMu), so one lock-free ring between them suffices
// and neither side ever waits for the other.
type idxRing struct {
	idx  []uint32
	mask uint32
	head atomic.Uint32 // next to take (consumer)
	tail atomic.Uint32 // next to fill (producer)
}

func newIdxRing(n int) *idxRing {
	c := 1
	for c < n {
		c <<= 1
	}
	return &idxRing{idx: make([]uint32, c), mask: uint32(c - 1)}
}

// take returns a free index; ok is false when there is none.
func (r *idxRing) take() (uint32, bool) {
	h := r.head.Load()
	if h == r.tail.Load() {
		return 0, false
	}
	v := r.idx[h&r.mask]
	r.head.Store(h + 1)
	return v, true
}

// put returns an index.
func (r *idxRing) put(v uint32) {
	t := r.tail.Load()
	r.idx[t&r.mask] = v
	r.tail.Store(t + 1)
}

// takeAll appends every free index to dst, oldest first, with one store
// of head however many it takes.
func (r *idxRing) takeAll(dst []uint32) []uint32 {
	h, t := r.head.Load(), r.tail.Load()
	for i := h; i != t; i++ {
		dst = append(dst, r.idx[i&r.mask])
	}
	if h != t {
		r.head.Store(t)
	}
	return dst
}

// len returns how many indices are free now.
func (r *idxRing) len() int { return int(r.tail.Load() - r.head.Load()) }

// sendBuf is the send (chimney) buffer as negotiated: sections of
// sectionSize bytes; section 0 is reserved for control messages and the
// rest are split between queues, each owning a contiguous run so that no
// queue starves another (DPDK cc02518132).
type sendBuf struct {
	mem         []byte
	sectionSize int
	sections    int // usable sections (limited by Config.SendBufferLimit)
}

// ctlSection is the section control messages are copied into; one control
// request is in flight at a time.
const ctlSection = 0

// partition returns the sections of queue q out of n queues: [lo, hi).
func (b *sendBuf) partition(q, n int) (lo, hi int) {
	per := (b.sections - 1) / n
	lo = 1 + q*per
	hi = lo + per
	if q == n-1 {
		hi = b.sections
	}
	return lo, hi
}

// section returns section i's bytes.
func (b *sendBuf) section(i int) []byte {
	off := i * b.sectionSize
	return b.mem[off : off+b.sectionSize : off+b.sectionSize]
}

// gatherFreed moves the sections the host completed since the last take
// from the free ring onto the stash, in the order they were freed, so
// that takeSection, which takes from the stash's end, hands out the
// section freed last (LIFO). A request at a time then reuses one section
// whose lines are still in the caches of both sides (the sender's copy,
// the host's read), instead of walking the queue's whole run of sections
// (megabytes) round-robin and touching a cold one every send. It moves
// them all at once: a sender under load pays two atomic stores per
// gather, not per section. Sender side (txMu). The lock-free readers of
// the free count (txPath.ready, owed) may see a section twice while it
// moves, never not at all: a spurious "room", which a waiter retries,
// rather than a missed one.
func (t *txPath) gatherFreed() {
	k := t.sec.len()
	if k == 0 {
		return
	}
	n := len(t.stash)
	t.stashN.Store(int32(n + k))
	t.stash = t.sec.takeAll(t.stash)
	if len(t.stash) != n+k {
		t.stashN.Store(int32(len(t.stash))) // more came meanwhile
	}
}
