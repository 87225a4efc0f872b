package tap

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vmbusd/vmbusd/frame"
	"github.com/vmbusd/vmbusd/frame/gso"
	"github.com/vmbusd/vmbusd/rawio"
)

// Queue is one TAP queue (one fd of a multi-queue TAP). It is a
// frame.Source (frames the kernel sends out of the interface) and a
// frame.Sink (frames to hand to the kernel). Reads go into packets from
// the pool set with SetPool (big enough for a 64 KiB super-frame when the
// TAP has offloads; from the NIC's GPA pool when it has one, so a large
// send goes to the host without a copy). RxBurst/Wait belong to one
// goroutine and TxBurst to one other.
type Queue struct {
	d   *Device
	idx int
	f   *os.File
	rc  syscall.RawConn
	fd  int

	pool    atomic.Pointer[frame.Pool]
	segPool atomic.Pointer[frame.Pool] // MTU-sized packets for UDP super-frames cut here
	txOff   atomic.Pointer[frame.TxOffloads]

	rmu   sync.Mutex
	ready pktRing // read and decoded, handed out by the next RxBurst
	// dry: the last read found the kernel's queue empty. The next RxBurst
	// that finds nothing ready then returns 0 without asking again, and
	// leaves the check to Wait, which must ask anyway (its poller wait
	// needs a read that fails after it is armed): one empty read per
	// wake-up rather than two.
	dry bool

	readFn  func(fd uintptr) bool // bound once: no allocation per Wait
	readPkt *frame.Packet
	readErr error
	readN   int

	wmu     sync.Mutex
	gro     gro
	iov     [groMaxSegs]unix.Iovec
	writeFn func(w *groWrite) // bound once
	wpkts   []*frame.Packet   // the burst being written
	cut     []byte            // one segment of a coalesced frame cut for a TAP without a virtio-net header
	cutN    int               // its length, not yet written
	cutFn   func(n int) []byte
	// RxFrames, RxBytes: frames read from the kernel (a super-frame
	// counts once); RxSplit: UDP super-frames cut into datagrams here.
	RxFrames, RxBytes, RxNoBuf atomic.Uint64
	RxDropped                  atomic.Uint64 // virtio-net headers we cannot honour
	RxSplit                    atomic.Uint64
	// TxFrames, TxBytes: writes to the kernel (a coalesced super-frame
	// counts once); TxCoalesced: frames that went out as part of another's
	// super-frame.
	TxFrames, TxBytes, TxDrops atomic.Uint64
	TxCoalesced                atomic.Uint64
}

// pktRing is a fixed ring of packets.
type pktRing struct {
	buf        [readyCap]*frame.Packet
	head, size int
}

// readyCap bounds the decoded frames waiting for RxBurst: a UDP
// super-frame's datagrams (the kernel makes at most 128 per send) and a
// burst.
const readyCap = 256

func (r *pktRing) push(p *frame.Packet) bool {
	if r.size == len(r.buf) {
		return false
	}
	r.buf[(r.head+r.size)%len(r.buf)] = p
	r.size++
	return true
}

func (r *pktRing) pop() *frame.Packet {
	p := r.buf[r.head]
	r.buf[r.head] = nil
	r.head = (r.head + 1) % len(r.buf)
	r.size--
	return p
}

func newQueue(d *Device, idx int, f *os.File) (*Queue, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	q := &Queue{d: d, idx: idx, f: f, rc: rc, fd: -1}
	rc.Control(func(fd uintptr) { q.fd = int(fd) })
	q.readFn = q.readOnce
	q.writeFn = q.writeOne
	return q, nil
}

// Index returns the queue's number.
func (q *Queue) Index() int { return q.idx }

// SetPool sets the pool frames read from the kernel are put in.
func (q *Queue) SetPool(p *frame.Pool) { q.pool.Store(p) }

// SetNIC sets what the NIC the frames go to offers: its transmit offloads
// (which checksum requests it takes) and its queue's pool for the
// datagrams of UDP super-frames, which are cut here.
func (q *Queue) SetNIC(off frame.TxOffloads, segPool *frame.Pool) {
	q.txOff.Store(&off)
	q.segPool.Store(segPool)
}

func (q *Queue) close() { q.f.SetReadDeadline(time.Unix(1, 0)) }

// Interrupt makes a blocked Wait return (context.Canceled), and every
// later one until Resume: how a forwarder stops a pump that waits here.
func (q *Queue) Interrupt() { q.f.SetReadDeadline(time.Unix(1, 0)) }

// Resume undoes Interrupt.
func (q *Queue) Resume() { q.f.SetReadDeadline(time.Time{}) }

// RxBurst reads frames the kernel sent out of the interface, without
// blocking, until pkts is full or nothing is left. A call that has
// nothing to return right after one that emptied the kernel's queue
// returns 0 without asking it again: the caller's Wait asks.
func (q *Queue) RxBurst(pkts []*frame.Packet) int {
	if len(pkts) == 0 || q.d.closed.Load() {
		return 0
	}
	q.rmu.Lock()
	defer q.rmu.Unlock()
	n := 0
	pool := q.pool.Load()
	for n < len(pkts) {
		if q.ready.size > 0 {
			pkts[n] = q.ready.pop()
			n++
			continue
		}
		if pool == nil {
			break
		}
		if q.dry {
			if n == 0 {
				q.dry = false
			}
			break
		}
		p := pool.Get()
		if p == nil {
			q.RxNoBuf.Add(1)
			break
		}
		if q.d.vnet {
			p.Prepend(vnetHdrLen)
		}
		k, err := rawio.Read(q.fd, p.Buffer())
		if err != nil || k <= 0 {
			q.dry = err == unix.EAGAIN
			p.Free()
			break
		}
		p.SetLen(k)
		q.took(p)
	}
	return n
}

// readOnce is the RawConn read callback: one non-blocking read; false
// asks the poller to wait for readability.
func (q *Queue) readOnce(fd uintptr) bool {
	k, err := rawio.Read(int(fd), q.readPkt.Buffer())
	if err == unix.EAGAIN || err == unix.EINTR {
		return false
	}
	q.readN, q.readErr = k, err
	return true
}

// Wait blocks until the kernel has a frame for us (it reads it, for the
// next RxBurst), ctx ends or the queue closes.
func (q *Queue) Wait(ctx context.Context) error {
	q.rmu.Lock()
	defer q.rmu.Unlock()
	q.dry = false
	for q.ready.size == 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		if q.d.closed.Load() {
			return os.ErrClosed
		}
		if err := q.waitOne(ctx); err != nil {
			return err
		}
	}
	return nil
}

// waitOne blocks for one frame and decodes it into ready (a frame it
// drops leaves ready empty).
func (q *Queue) waitOne(ctx context.Context) error {
	pool := q.pool.Load()
	if pool == nil {
		return errors.New("tap: queue has no pool")
	}
	p := pool.Get()
	if p == nil {
		q.RxNoBuf.Add(1)
		t := time.NewTimer(100 * time.Microsecond)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		return ctx.Err()
	}
	if q.d.vnet {
		p.Prepend(vnetHdrLen)
	}
	q.readPkt = p
	err := q.rc.Read(q.readFn)
	q.readPkt = nil
	if err == nil {
		err = q.readErr
	}
	if err != nil || q.readN <= 0 {
		p.Free()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if q.d.closed.Load() {
				return os.ErrClosed
			}
			return context.Canceled
		}
		if err == nil {
			return nil
		}
		return fmt.Errorf("tap: %s queue %d: read: %w", q.d.name, q.idx, err)
	}
	p.SetLen(q.readN)
	q.took(p)
	return nil
}

// took accounts for a frame read from the kernel and decodes its
// virtio-net header into ready: the frame with its Meta, the datagrams of
// a UDP super-frame, or nothing (dropped and freed).
func (q *Queue) took(p *frame.Packet) {
	q.RxFrames.Add(1)
	if !q.d.vnet {
		q.RxBytes.Add(uint64(p.Len()))
		q.ready.push(p)
		return
	}
	off := q.txOff.Load()
	if off == nil {
		off = &frame.TxOffloads{}
	}
	act, h := fromVnet(p, q.d.mtu, off)
	q.RxBytes.Add(uint64(p.Len()))
	switch act {
	case txAsIs:
		q.ready.push(p)
	case txSplitUDP:
		q.splitUDP(p, int(h.gsoSize), off)
		p.Free()
	default:
		q.RxDropped.Add(1)
		p.Free()
	}
}

// splitUDP cuts a UDP super-frame into datagrams (netvsc has no UDP
// segmentation offload), each in a packet of the NIC's pool, with the
// checksum offloaded when the host took it.
func (q *Queue) splitUDP(p *frame.Packet, mss int, off *frame.TxOffloads) {
	f := p.Data()
	l, err := gso.Parse(f)
	pool := q.segPool.Load()
	if err != nil || pool == nil || gso.Segments(l, mss) > len(q.ready.buf)-q.ready.size {
		q.RxDropped.Add(1)
		return
	}
	mode := gso.Full
	var meta frame.Meta
	if csumOffloaded(l, off) {
		mode = gso.Partial
		meta.Flags = frame.MetaTxUDPChecksum | frame.MetaTxIPv4
		if l.V6 {
			meta.Flags = frame.MetaTxUDPChecksum | frame.MetaTxIPv6
		}
		meta.L3Off, meta.L4Off = uint16(l.L3), uint16(l.L4)
	}
	var cur *frame.Packet
	next := func(n int) []byte {
		cur = pool.Get()
		if cur == nil || cur.Cap() < n {
			if cur != nil {
				cur.Free()
			}
			return nil
		}
		cur.Meta = meta
		q.ready.push(cur)
		return cur.SetLen(n)
	}
	if _, err := gso.Split(f, l, mss, 1, mode, next); err != nil {
		q.RxNoBuf.Add(1) // the rest of the datagrams are lost, as on a full queue
	}
	q.RxSplit.Add(1)
}

// TxBurst hands frames to the kernel and frees them: with a virtio-net
// header, each flow's in-order TCP segments coalesced into super-frames
// (gro.go) and every write a writev of header, headers and payloads. A
// write the kernel refuses is dropped and counted; it always takes all.
func (q *Queue) TxBurst(pkts []*frame.Packet) int {
	q.wmu.Lock()
	switch {
	case q.d.closed.Load():
		q.TxDrops.Add(uint64(len(pkts)))
	case !q.d.vnet:
		for _, p := range pkts {
			if rxSuperFrame(p) {
				q.writeCut(p)
				continue
			}
			q.write(p.Data(), 1)
		}
	default:
		q.wpkts = pkts
		q.gro.burst(pkts, q.writeFn)
		q.wpkts = nil
	}
	q.wmu.Unlock()
	frame.PutBurst(pkts)
	return len(pkts)
}

// writeOne is gro's write callback: the header into the head packet's
// headroom, then one writev of it, the head frame and the other members'
// payloads.
func (q *Queue) writeOne(w *groWrite) {
	head := q.wpkts[w.members[0]]
	b := head.Prepend(vnetHdrLen)
	w.hdr.encode(b)
	if len(w.members) == 1 {
		q.write(b, 1)
		return
	}
	q.setIov(0, b)
	total := len(b)
	for k, i := range w.members[1:] {
		d := q.wpkts[i].Data()[w.payload:]
		q.setIov(k+1, d)
		total += len(d)
	}
	n := len(w.members)
	_, err := rawio.Writev(q.fd, q.iov[:n])
	clear(q.iov[:n])
	if err != nil {
		q.TxDrops.Add(uint64(n))
		return
	}
	q.TxFrames.Add(1)
	q.TxCoalesced.Add(uint64(n - 1))
	q.TxBytes.Add(uint64(total))
}

func (q *Queue) setIov(k int, b []byte) {
	q.iov[k].Base = &b[0]
	q.iov[k].SetLen(len(b))
}

// writeCut writes a coalesced frame to a TAP without a virtio-net
// header, which takes nothing larger than the MTU: cut into MSS-sized
// segments with complete checksums, one write each.
func (q *Queue) writeCut(p *frame.Packet) {
	l, ok := superLayout(p)
	if !ok {
		q.write(p.Data(), 1)
		return
	}
	if q.cutFn == nil {
		q.cut = make([]byte, 0, 64<<10)
		q.cutFn = func(n int) []byte {
			if q.cutN > 0 {
				q.write(q.cut[:q.cutN], 1)
			}
			if n > cap(q.cut) {
				q.cutN = 0
				return nil
			}
			q.cutN = n
			return q.cut[:n]
		}
	}
	q.cutN = 0
	if _, err := gso.Split(p.Data(), l, int(p.Meta.MSS), 1, gso.Full, q.cutFn); err != nil {
		q.TxDrops.Add(1)
	}
	if q.cutN > 0 {
		q.write(q.cut[:q.cutN], 1)
		q.cutN = 0
	}
}

// write writes one frame (frames of it: for the counters).
func (q *Queue) write(b []byte, frames uint64) {
	if _, err := rawio.Write(q.fd, b); err != nil {
		q.TxDrops.Add(frames)
		return
	}
	q.TxFrames.Add(frames)
	q.TxBytes.Add(uint64(len(b)))
}

// WaitTx returns at once: TxBurst never refuses.
func (q *Queue) WaitTx(ctx context.Context) error { return ctx.Err() }
