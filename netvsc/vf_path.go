package netvsc

// The VF data path inside a Queue: which of the VF's sockets a queue polls
// and sends on, and the burst calls' VF halves (queue.go and tx.go call
// them). RX from the VF runs under the queue's inMu, TX under its txMu,
// so the VF manager detaches a binding by clearing it and then taking and
// releasing those locks once (a barrier); the lock-free readers
// (rxPending) only use socket methods that are safe on a closed socket.

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vmbusd/vmbusd/afxdp"
	"github.com/vmbusd/vmbusd/frame"
	"github.com/vmbusd/vmbusd/frame/csum"
)

// vfQueue is a queue index's VF state. It outlives sessions (counters are
// the NIC's); the binding is one attachment's.
type vfQueue struct {
	m    *vfManager
	idx  int
	bind atomic.Pointer[vfBinding]
	// txOn steers the queue's transmit to the VF: set once the host
	// completed SWITCH_DATA_PATH{VF}, cleared as soon as anything says the
	// VF is going.
	txOn atomic.Bool

	// Receive scratch (under the queue's inMu).
	rxPkts    []*frame.Packet
	drainPkts []*frame.Packet
	rxBufs    [][]byte
	rxSizes   []int
	rxNext    int

	// Transmit scratch (under the queue's txMu).
	txBufs [][]byte
	txSeg  []byte

	// Counters: rx under inMu, tx under txMu.
	rxPackets, rxBytes            ctr
	txPackets, txBytes, txDropped ctr
}

// vfBinding is what one queue uses of an attachment.
type vfBinding struct {
	rx []*afxdp.Socket // the sockets whose frames this queue receives
	tx *afxdp.Socket
	w  *vfWaker
}

// vfBurst is the most frames one VF receive or send call moves.
const vfBurst = 64

func newVFQueue(m *vfManager, idx int) *vfQueue {
	v := &vfQueue{m: m, idx: idx,
		rxPkts: make([]*frame.Packet, vfBurst), drainPkts: make([]*frame.Packet, vfBurst), rxBufs: make([][]byte, vfBurst), rxSizes: make([]int, vfBurst),
		txBufs: make([][]byte, 0, vfBurst)}
	return v
}

// vfRx receives VF frames into pkts (after the synthetic ring was
// drained); inMu is held.
func (q *Queue) vfRx(pkts []*frame.Packet) int {
	v := q.vf
	b := v.bind.Load()
	if b == nil {
		return 0
	}
	n := 0
	var bytes uint64
	for k := 0; k < len(b.rx) && n < len(pkts); k++ {
		s := b.rx[(v.rxNext+k)%len(b.rx)]
		if !s.RxPending() {
			continue
		}
		got := q.pool.GetBurst(v.rxPkts[:min(len(pkts)-n, vfBurst)])
		if got == 0 {
			q.c.rxNoMemory.inc()
			break
		}
		for i := 0; i < got; i++ {
			v.rxBufs[i] = v.rxPkts[i].Buffer()
		}
		m, err := s.Recv(v.rxBufs[:got], v.rxSizes[:got])
		for i := 0; i < m; i++ {
			p := v.rxPkts[i]
			p.SetLen(v.rxSizes[i])
			p.Meta.Flags = MetaRxVF
			pkts[n] = p
			n++
			bytes += uint64(p.Len())
		}
		if m < got {
			frame.PutBurst(v.rxPkts[m:got])
		}
		clear(v.rxPkts[:got])
		clear(v.rxBufs[:got])
		if err != nil {
			v.m.dataPathError(err)
			break
		}
	}
	v.rxNext++
	if n > 0 {
		v.rxPackets.add(uint64(n))
		v.rxBytes.add(bytes)
		q.rx.lastRx.Store(nanotime())
	}
	return n
}

// vfDrainLocked stages the VF's pending frames; inMu is held.
func (q *Queue) vfDrainLocked() int {
	v := q.vf
	total := 0
	for {
		room := min(q.rx.room(), vfBurst)
		if room == 0 {
			for _, s := range v.bindRx() {
				if s.RxPending() {
					q.c.rxNoMemory.inc() // staging full: what is left is lost
				}
			}
			return total
		}
		k := q.vfRx(v.drainPkts[:room])
		for _, p := range v.drainPkts[:k] {
			q.rx.push(p)
		}
		clear(v.drainPkts[:k])
		total += k
		if k == 0 {
			return total
		}
	}
}

func (v *vfQueue) bindRx() []*afxdp.Socket {
	if b := v.bind.Load(); b != nil {
		return b.rx
	}
	return nil
}

// vfPending reports, without locks, whether the VF has frames for q.
func (q *Queue) vfPending() bool {
	if q.vf == nil {
		return false
	}
	b := q.vf.bind.Load()
	if b == nil {
		return false
	}
	for _, s := range b.rx {
		if s.RxPending() {
			return true
		}
	}
	return false
}

// vfArm asks the queue's waker to end the sleep Wait is about to start as
// soon as the VF has frames, and reports whether it has some already (then
// Wait returns instead of sleeping). inMu is held.
func (q *Queue) vfArm() bool {
	if q.vf == nil {
		return false
	}
	b := q.vf.bind.Load()
	if b == nil {
		return false
	}
	b.w.armIt()
	return q.vfPending()
}

// vfKick ends a sleep in progress (the waker saw VF frames, or the manager
// needs the queue's locks): its context is cancelled, and the next sleep
// makes a new one. Transmit's sleep (WaitTx) holds the receive lock too,
// so both are woken; a spurious return is allowed to both.
func (q *Queue) vfKick() {
	q.w.kick()
}

// vfTx sends a burst on the VF. It returns how many packets it took and
// whether the VF took the burst's fate: false means the VF refused (gone,
// down, detached meanwhile), and the caller sends the rest synthetic.
func (q *Queue) vfTx(pkts []*frame.Packet) (int, bool) {
	v := q.vf
	q.txMu.Lock()
	defer q.txMu.Unlock()
	if q.s.err() != nil {
		return 0, true
	}
	b := v.bind.Load()
	if b == nil || !v.txOn.Load() {
		v.txOn.Store(false)
		return 0, false
	}
	s := b.tx
	maxLen := s.MaxFrameLen()
	mtuFrame := q.s.mtu + EthernetHeaderSize
	taken := 0
	for taken < len(pkts) {
		// A batch of plain frames, up to the first one needing
		// segmentation.
		v.txBufs = v.txBufs[:0]
		end := taken
		for end < len(pkts) && len(v.txBufs) < vfBurst {
			p := pkts[end]
			if p.Len() > mtuFrame || p.Len() > maxLen || p.Len() == 0 {
				break
			}
			vfTxOffloads(p)
			v.txBufs = append(v.txBufs, p.Data())
			end++
		}
		if batch := len(v.txBufs); batch > 0 {
			n, err := s.Send(v.txBufs)
			clear(v.txBufs)
			v.countTx(pkts[taken : taken+n])
			frame.PutBurst(pkts[taken : taken+n])
			taken += n
			if err != nil {
				if errors.Is(err, afxdp.ErrFrameSize) {
					v.txDropped.inc()
					pkts[taken].Free()
					taken++
					continue
				}
				v.m.dataPathError(err)
				v.txOn.Store(false)
				return taken, false
			}
			if n < batch {
				return taken, true // the TX ring is full: WaitTx
			}
			continue
		}
		// pkts[taken] is larger than the VF carries.
		p := pkts[taken]
		if err := q.vfSegment(s, p); err != nil {
			v.m.dataPathError(err)
			v.txOn.Store(false)
			return taken, false
		}
		taken++
	}
	return taken, true
}

func (v *vfQueue) countTx(pkts []*frame.Packet) {
	var b uint64
	for _, p := range pkts {
		b += uint64(p.Len())
	}
	v.txPackets.add(uint64(len(pkts)))
	v.txBytes.add(b)
}

// vfSegment sends an oversized TCP frame as MTU-sized segments with their
// checksums (the host's LSO is not there on the VF), and drops anything
// else too large. It always takes the packet; an error is the socket's.
func (q *Queue) vfSegment(s *afxdp.Socket, p *frame.Packet) error {
	v := q.vf
	defer p.Free()
	data := p.Data()
	maxFrame := min(q.s.mtu+EthernetHeaderSize, s.MaxFrameLen())
	if len(data) < EthernetHeaderSize+20 {
		v.txDropped.inc()
		return nil
	}
	et := binary.BigEndian.Uint16(data[12:])
	l3 := EthernetHeaderSize
	var l4, proto int
	switch et {
	case etherTypeIPv4:
		ihl := int(data[l3]&0xf) * 4
		if data[l3]>>4 != 4 || ihl < 20 || l3+ihl > len(data) {
			v.txDropped.inc()
			return nil
		}
		l4, proto = l3+ihl, int(data[l3+9])
	case etherTypeIPv6:
		if len(data) < l3+40 {
			v.txDropped.inc()
			return nil
		}
		l4, proto = l3+40, int(data[l3+6])
	default:
		v.txDropped.inc()
		return nil
	}
	if proto != protoTCP || len(data) < l4+20 {
		v.txDropped.inc()
		return nil
	}
	thl := int(data[l4+12]>>4) * 4
	hdr := l4 + thl
	if thl < 20 || hdr >= len(data) {
		v.txDropped.inc()
		return nil
	}
	mss := maxFrame - hdr
	if p.Meta.Flags&frame.MetaTxLSO != 0 && p.Meta.MSS > 0 {
		mss = min(mss, int(p.Meta.MSS))
	}
	if mss <= 0 {
		v.txDropped.inc()
		return nil
	}
	k := (len(data) - hdr + mss - 1) / mss
	need := k * (hdr + mss)
	if cap(v.txSeg) < need {
		v.txSeg = make([]byte, need)
	}
	seg := v.txSeg[:need]
	v.txBufs = v.txBufs[:0]
	for i, off := 0, hdr; off < len(data); i, off = i+1, off+mss {
		n := min(mss, len(data)-off)
		f := seg[:hdr+n]
		seg = seg[hdr+mss:]
		copy(f, data[:hdr])
		copy(f[hdr:], data[off:off+n])
		fixTCPSegment(f, et, l3, l4, uint32(off-hdr), i, off+n == len(data), off == hdr)
		v.txBufs = append(v.txBufs, f)
	}
	bufs := v.txBufs
	var bytes uint64
	for _, f := range bufs {
		bytes += uint64(len(f))
	}
	// The segments go together: retry a full ring a little while, then
	// give up on the rest (TCP retransmits).
	for try := 0; len(bufs) > 0; try++ {
		n, err := s.Send(bufs)
		bufs = bufs[n:]
		if err != nil {
			if errors.Is(err, afxdp.ErrFrameSize) {
				break
			}
			return err
		}
		if len(bufs) == 0 || try == 100 {
			break
		}
		if err := s.Flush(); err != nil {
			return err
		}
	}
	if len(bufs) > 0 {
		v.txDropped.inc()
	}
	v.txPackets.add(uint64(len(v.txBufs) - len(bufs)))
	v.txBytes.add(bytes)
	clear(v.txBufs)
	v.txBufs = v.txBufs[:0]
	return nil
}

// vfTxOffloads does in software the checksums a frame asks the host for
// (the VF has no such offload here).
func vfTxOffloads(p *frame.Packet) {
	m := &p.Meta
	if m.Flags&(frame.MetaTxIPChecksum|frame.MetaTxTCPChecksum|frame.MetaTxUDPChecksum) == 0 {
		return
	}
	f := p.Data()
	l3 := int(m.L3Off)
	if l3 == 0 {
		l3 = EthernetHeaderSize
	}
	if len(f) < l3+20 {
		return
	}
	v6 := f[l3]>>4 == 6
	l4 := int(m.L4Off)
	if !v6 {
		ihl := int(f[l3]&0xf) * 4
		if l4 == 0 {
			l4 = l3 + ihl
		}
		if m.Flags&frame.MetaTxIPChecksum != 0 && l3+ihl <= len(f) {
			h := f[l3 : l3+ihl]
			h[10], h[11] = 0, 0
			binary.BigEndian.PutUint16(h[10:], ^csum.Fold(csum.Add(0, h)))
		}
	} else if l4 == 0 {
		l4 = l3 + 40
	}
	at, proto := 16, uint32(protoTCP)
	if m.Flags&frame.MetaTxUDPChecksum != 0 {
		at, proto = 6, 17
	} else if m.Flags&frame.MetaTxTCPChecksum == 0 {
		return
	}
	if l4+at+2 > len(f) || (v6 && len(f) < l3+40) {
		return
	}
	seg := f[l4:]
	seg[at], seg[at+1] = 0, 0
	var sum uint32
	if v6 {
		sum = csum.Add(sum, f[l3+8:l3+40])
	} else {
		sum = csum.Add(sum, f[l3+12:l3+20])
	}
	sum += proto + uint32(len(seg))
	c := ^csum.Fold(csum.Add(sum, seg))
	if proto == 17 && c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(seg[at:], c)
	m.Flags &^= frame.MetaTxIPChecksum | frame.MetaTxTCPChecksum | frame.MetaTxUDPChecksum
}

// vfWaitTx waits for room on the VF's TX ring: it reaps completions, kicks
// the kernel, and sleeps briefly. A nil return can be spurious.
func (q *Queue) vfWaitTx(ctx context.Context) error {
	v := q.vf
	q.txMu.Lock()
	b := v.bind.Load()
	var err error
	if b != nil && v.txOn.Load() {
		err = b.tx.Flush()
	}
	q.txMu.Unlock()
	if err != nil {
		v.m.dataPathError(err)
		v.txOn.Store(false)
		return nil
	}
	// A pause for the kernel to free ring slots, not a timeout: real
	// time, as the NIC's data path is never paced by Config.Clock.
	t := time.NewTimer(50 * time.Microsecond)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-q.s.dead:
		return q.s.err()
	}
}

// vfWaker ends a queue's receive sleep when one of its VF sockets has
// frames. Armed by each sleep, it polls the sockets once and kicks the
// queue; it never spins on a socket the queue is busy emptying.
type vfWaker struct {
	q    *Queue
	fds  []unix.PollFd // the sockets, then the eventfd
	evfd int
	arm  chan struct{}
	quit chan struct{}
	once sync.Once
	done chan struct{}
}

func newVFWaker(q *Queue, socks []*afxdp.Socket) (*vfWaker, error) {
	evfd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, err
	}
	w := &vfWaker{q: q, evfd: evfd, arm: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	for _, s := range socks {
		w.fds = append(w.fds, unix.PollFd{Fd: int32(s.FD()), Events: unix.POLLIN})
	}
	w.fds = append(w.fds, unix.PollFd{Fd: int32(evfd), Events: unix.POLLIN})
	go w.run()
	return w, nil
}

func (w *vfWaker) armIt() {
	select {
	case w.arm <- struct{}{}:
	default:
	}
}

func (w *vfWaker) run() {
	defer close(w.done)
	for {
		select {
		case <-w.arm:
		case <-w.quit:
			return
		}
		for {
			if _, err := unix.Poll(w.fds, -1); err != unix.EINTR {
				break
			}
		}
		if w.fds[len(w.fds)-1].Revents != 0 {
			return // stop
		}
		w.q.vfKick()
	}
}

// stop ends the waker and waits for it; the sockets may be closed after.
func (w *vfWaker) stop() {
	w.once.Do(func() {
		close(w.quit)
		var one = [8]byte{1}
		unix.Write(w.evfd, one[:])
		<-w.done
		unix.Close(w.evfd)
	})
}
