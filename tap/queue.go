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

	"github.com/vmbusd/vmbusd/netvsc"
)

// Queue is one TAP queue (one fd of a multi-queue TAP). It is a
// PacketSource (frames the kernel sends out of the interface) and a
// PacketSink (frames to hand to the kernel). Reads go into packets from
// the pool set with SetPool (a NIC queue's, so they can be transmitted
// without a copy). RxBurst/Wait belong to one goroutine and TxBurst to
// one other.
type Queue struct {
	d   *Device
	idx int
	f   *os.File
	rc  syscall.RawConn
	fd  int

	pool  atomic.Pointer[netvsc.Pool]
	rmu   sync.Mutex
	stash *netvsc.Packet // read by Wait, handed out by the next RxBurst

	readFn  func(fd uintptr) bool // bound once: no allocation per Wait
	readPkt *netvsc.Packet
	readErr error
	readN   int

	RxFrames, RxBytes, RxNoBuf atomic.Uint64 // from the kernel
	RxDropped                  atomic.Uint64 // virtio-net headers we cannot honour
	TxFrames, TxBytes, TxDrops atomic.Uint64 // to the kernel
}

func newQueue(d *Device, idx int, f *os.File) (*Queue, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	q := &Queue{d: d, idx: idx, f: f, rc: rc, fd: -1}
	rc.Control(func(fd uintptr) { q.fd = int(fd) })
	q.readFn = q.readOnce
	return q, nil
}

// Index returns the queue's number.
func (q *Queue) Index() int { return q.idx }

// SetPool sets the pool frames read from the kernel are put in.
func (q *Queue) SetPool(p *netvsc.Pool) { q.pool.Store(p) }

func (q *Queue) close() { q.f.SetReadDeadline(time.Unix(1, 0)) }

// interrupt makes a blocked Wait return.
func (q *Queue) interrupt() { q.f.SetReadDeadline(time.Unix(1, 0)) }

// RxBurst reads frames the kernel sent out of the interface, without
// blocking, until pkts is full or nothing is left.
func (q *Queue) RxBurst(pkts []*netvsc.Packet) int {
	if len(pkts) == 0 || q.d.closed.Load() {
		return 0
	}
	q.rmu.Lock()
	defer q.rmu.Unlock()
	n := 0
	if q.stash != nil {
		pkts[0] = q.stash
		q.stash = nil
		n = 1
	}
	pool := q.pool.Load()
	if pool == nil {
		return n
	}
	for n < len(pkts) {
		p := pool.Get()
		if p == nil {
			q.RxNoBuf.Add(1)
			break
		}
		if q.d.vnet {
			p.Prepend(vnetHdrLen)
		}
		k, err := unix.Read(q.fd, p.Buffer())
		if err != nil || k <= 0 {
			p.Free()
			break
		}
		p.SetLen(k)
		if !q.took(p) {
			continue
		}
		pkts[n] = p
		n++
	}
	return n
}

// readOnce is the RawConn read callback: one non-blocking read; false
// asks the poller to wait for readability.
func (q *Queue) readOnce(fd uintptr) bool {
	k, err := unix.Read(int(fd), q.readPkt.Buffer())
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
	if q.stash != nil {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if q.d.closed.Load() {
		return os.ErrClosed
	}
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
	if q.took(p) {
		q.stash = p
	}
	return nil
}

// took accounts for a frame read from the kernel and decodes its
// virtio-net header; false means it was dropped (and freed).
func (q *Queue) took(p *netvsc.Packet) bool {
	if q.d.vnet && !fromVnet(p, q.d.mtu) {
		q.RxDropped.Add(1)
		p.Free()
		return false
	}
	q.RxFrames.Add(1)
	q.RxBytes.Add(uint64(p.Len()))
	return true
}

// TxBurst hands frames to the kernel (one write each) and frees them. A
// frame the kernel refuses is dropped and counted; it always takes all.
func (q *Queue) TxBurst(pkts []*netvsc.Packet) int {
	closed := q.d.closed.Load()
	for _, p := range pkts {
		if !closed {
			b := p.Data()
			if q.d.vnet {
				b = toVnet(p)
			}
			if _, err := unix.Write(q.fd, b); err != nil {
				q.TxDrops.Add(1)
			} else {
				q.TxFrames.Add(1)
				q.TxBytes.Add(uint64(len(b)))
			}
		} else {
			q.TxDrops.Add(1)
		}
	}
	netvsc.PutBurst(pkts)
	return len(pkts)
}

// WaitTx returns at once: TxBurst never refuses.
func (q *Queue) WaitTx(ctx context.Context) error { return ctx.Err() }
