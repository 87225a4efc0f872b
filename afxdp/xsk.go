package afxdp

import "sync/atomic"

// xsk is the data path of one socket over its four rings and its part of
// the UMEM, with no system calls: the Linux socket wraps it with the
// wake-ups, and tests drive it against rings in ordinary memory.
//
// recv touches the RX and fill rings and the RX half of the frames; send
// touches the TX and completion rings and the TX half. The two may run
// concurrently with each other, each from one goroutine at a time.
type xsk struct {
	umem  []byte // the whole UMEM (shared by several sockets or not)
	rx    consRing
	fill  prodRing
	tx    prodRing
	comp  consRing
	fr    frames
	maxTx int // longest frame send accepts
	c     counters

	scratch []uint32 // recv's frames of one batch, len rx ring size
	failed  atomic.Pointer[failure]
}

type failure struct{ err error }

// fail makes err the socket's sticky error (the first one wins) and
// returns the error in force.
func (x *xsk) fail(err error) error {
	if ce, ok := err.(*CorruptError); ok && ce != nil {
		x.c.invalidDesc.Add(1)
	}
	x.failed.CompareAndSwap(nil, &failure{err})
	return x.failed.Load().err
}

func (x *xsk) err() error {
	if f := x.failed.Load(); f != nil {
		return f.err
	}
	return nil
}

// recv copies up to min(len(bufs), len(sizes)) received frames into bufs,
// sets sizes, returns the frames' UMEM slots to the fill ring and returns
// the count. A frame longer than its buffer is dropped and counted. On a
// corrupt entry it returns the frames before it with the error.
func (x *xsk) recv(bufs [][]byte, sizes []int) (int, error) {
	if err := x.err(); err != nil {
		return 0, err
	}
	avail, cerr := x.rx.peek()
	if cerr != nil {
		return 0, x.fail(cerr)
	}
	n := min(avail, uint32(min(len(bufs), len(sizes))))
	if n == 0 {
		return 0, nil
	}
	// Every frame taken from RX goes straight back to the fill ring. The
	// fill ring is twice the RX frames, so an honest kernel always leaves
	// room even while it publishes its consumer index late; take no more
	// than there is room for, whatever the kernel says.
	free, cerr := x.fill.free(n)
	if cerr != nil {
		return 0, x.fail(cerr)
	}
	n = min(n, free)
	var (
		out, bytes, tooLong uint32
		i                   uint32
	)
	cons := x.rx.cons
	for i = 0; i < n; i++ {
		d := x.rx.m.desc(cons + i)
		addr, length, options := d.addr, d.len, d.options // read once: the kernel's memory
		rel, kind := x.fr.checkRX(addr, length, options)
		if kind != 0 {
			cerr = &CorruptError{Ring: RingRX, Kind: kind, Index: cons + i, Addr: addr, Len: length}
			break
		}
		// Ours until the end of the batch, so a frame named twice in one
		// batch fails the ownership check.
		x.fr.state[rel] = frameOurs
		x.scratch[i] = rel
		if b := bufs[out]; len(b) >= int(length) {
			copy(b, x.umem[addr:addr+uint64(length)])
			sizes[out] = int(length)
			out++
			bytes += length
		} else {
			tooLong++
		}
	}
	prod := x.fill.prod
	for j := uint32(0); j < i; j++ {
		rel := x.scratch[j]
		x.fr.state[rel] = frameInFill
		*x.fill.m.addr(prod + j) = x.fr.addrOf(rel)
	}
	x.rx.release(i)
	x.fill.submit(i)
	x.c.rxPackets.Add(uint64(out))
	x.c.rxBytes.Add(uint64(bytes))
	if tooLong != 0 {
		x.c.rxTooLong.Add(uint64(tooLong))
	}
	if cerr != nil {
		return int(out), x.fail(cerr)
	}
	return int(out), nil
}

// primeFill hands every RX frame to the kernel. Called once, before bind.
func (x *xsk) primeFill() {
	prod := x.fill.prod
	for rel := uint32(0); rel < x.fr.rxCount; rel++ {
		x.fr.state[rel] = frameInFill
		*x.fill.m.addr(prod + rel) = x.fr.addrOf(rel)
	}
	x.fill.submit(x.fr.rxCount)
}

// reap takes completed TX frames back onto the free list.
func (x *xsk) reap() error {
	avail, cerr := x.comp.peek()
	if cerr != nil {
		return x.fail(cerr)
	}
	cons := x.comp.cons
	var i uint32
	for i = 0; i < avail; i++ {
		addr := *x.comp.m.addr(cons + i)
		rel, kind := x.fr.checkCompletion(addr)
		if kind != 0 {
			cerr = &CorruptError{Ring: RingCompletion, Kind: kind, Index: cons + i, Addr: addr}
			break
		}
		x.fr.state[rel] = frameOurs
		x.fr.free = append(x.fr.free, x.fr.first+rel)
	}
	x.comp.release(i)
	if cerr != nil {
		return x.fail(cerr)
	}
	return nil
}

// send copies frames into free TX frames and queues them on the TX ring,
// after reaping completions. It returns how many it queued: fewer than
// len(bufs) when the TX ring or the TX frames ran out (counted), or with
// ErrFrameSize at the first frame of a bad size.
func (x *xsk) send(bufs [][]byte) (int, error) {
	if err := x.err(); err != nil {
		return 0, err
	}
	if err := x.reap(); err != nil {
		return 0, err
	}
	n := uint32(min(len(bufs), len(x.fr.free)))
	space, cerr := x.tx.free(n)
	if cerr != nil {
		return 0, x.fail(cerr)
	}
	n = min(n, space)
	var (
		i     uint32
		bytes uint64
		err   error
	)
	prod := x.tx.prod
	for i = 0; i < n; i++ {
		b := bufs[i]
		if len(b) == 0 || len(b) > x.maxTx {
			err = ErrFrameSize
			break
		}
		idx := x.fr.free[len(x.fr.free)-1]
		x.fr.free = x.fr.free[:len(x.fr.free)-1]
		addr := uint64(idx)<<x.fr.shift + x.fr.txOff
		copy(x.umem[addr:addr+uint64(len(b))], b)
		x.fr.state[idx-x.fr.first] = frameInTx
		d := x.tx.m.desc(prod + i)
		d.addr, d.len, d.options = addr, uint32(len(b)), 0
		bytes += uint64(len(b))
	}
	x.tx.submit(i)
	x.c.txPackets.Add(uint64(i))
	x.c.txBytes.Add(bytes)
	if err == nil && int(i) < len(bufs) {
		x.c.txRingFull.Add(1)
	}
	return int(i), err
}
