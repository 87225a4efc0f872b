package afxdp

// The two halves of a ring, seen from this side. Every index the kernel
// writes is checked before use; the indices this side publishes are
// private copies that are never read back from shared memory.

// xdpRingNeedWakeup is XDP_RING_NEED_WAKEUP (linux/if_xdp.h): the kernel
// asks for a syscall before it will look at the ring again.
const xdpRingNeedWakeup = 1

// consRing is a ring the kernel produces and this side consumes (RX,
// completion).
type consRing struct {
	m     ringMem
	size  uint32
	cons  uint32 // our consumer index (published copy lives in m.consumer)
	which Ring
}

// peek returns how many entries the kernel has produced past our consumer
// index. A producer more than a ring ahead is corrupt.
func (r *consRing) peek() (uint32, *CorruptError) {
	prod := r.m.producer.Load()
	n := prod - r.cons
	if n > r.size {
		return 0, &CorruptError{Ring: r.which, Kind: KindProducer, Index: prod}
	}
	return n, nil
}

// release hands n consumed entries back to the kernel.
func (r *consRing) release(n uint32) {
	if n == 0 {
		return
	}
	r.cons += n
	r.m.consumer.Store(r.cons)
}

// prodRing is a ring this side produces and the kernel consumes (fill,
// TX).
type prodRing struct {
	m     ringMem
	size  uint32
	prod  uint32 // our producer index (published copy lives in m.producer)
	cons  uint32 // the kernel's consumer index, last seen and checked
	which Ring
}

// free returns the number of empty slots, at least want if there are that
// many. It reads the kernel's consumer index only when the cached one
// shows fewer than want free, as the kernel publishes it lazily anyway.
// A consumer that moved backwards, or past our producer, is corrupt.
func (r *prodRing) free(want uint32) (uint32, *CorruptError) {
	if n := r.size - (r.prod - r.cons); n >= want {
		return n, nil
	}
	cons := r.m.consumer.Load()
	if cons-r.cons > r.prod-r.cons {
		return 0, &CorruptError{Ring: r.which, Kind: KindConsumer, Index: cons}
	}
	r.cons = cons
	return r.size - (r.prod - cons), nil
}

// submit publishes n entries written at our producer index.
func (r *prodRing) submit(n uint32) {
	if n == 0 {
		return
	}
	r.prod += n
	r.m.producer.Store(r.prod)
}

func (r *prodRing) needWakeup() bool {
	return r.m.flags.Load()&xdpRingNeedWakeup != 0
}
