//go:build linux

package afxdp

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Socket is one AF_XDP socket (XSK) bound to one RX/TX queue of a netdev,
// with its rings and its part of a UMEM.
//
// Concurrency: Recv and Wait are the receive side, Send and Flush the
// transmit side. Each side is serialised by its own lock, and the two
// sides may run at the same time from different goroutines (they share
// no ring). Stats, Mode and the other accessors are safe from anywhere.
// Close may be called at any time: it wakes a blocked Wait, waits for the
// calls in progress, and every later call returns ErrClosed.
//
// Buffers passed to Recv and Send belong to the caller; frames are copied
// between them and the UMEM, so the caller may reuse them at once.
type Socket struct {
	fd         int
	ifindex    int
	queue      int
	mode       BindMode // BindZeroCopy or BindCopy: what the kernel granted
	needWakeup bool
	busyPoll   bool

	x     xsk
	area  *umemArea
	rings [4][]byte

	frameSize int

	rxMu, txMu sync.Mutex
	fdMu       sync.RWMutex // fd against Stats racing Close
	closed     atomic.Bool
	w          waiter
}

// OpenSocket opens a socket on queue of the netdev ifname with its own
// UMEM. It does not load an XDP program, so on its own it can only
// transmit (and receive what another program redirects to it); Port
// pairs sockets with the program.
func OpenSocket(ifname string, queue int, cfg Config) (*Socket, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("afxdp: %w", err)
	}
	return openSocket(ifi.Index, queue, cfg, nil, 0, nil)
}

// openSocket creates and binds a socket. With area nil it maps and
// registers its own UMEM; otherwise it uses frames [first, first+2*ring)
// of area, registered by owner (the first socket of a shared UMEM).
func openSocket(ifindex, queue int, cfg Config, area *umemArea, first uint32, owner *Socket) (_ *Socket, err error) {
	if queue < 0 {
		return nil, fmt.Errorf("afxdp: queue %d", queue)
	}
	ring := uint32(cfg.RingSize)
	s := &Socket{fd: -1, ifindex: ifindex, queue: queue, needWakeup: !cfg.NoNeedWakeup, frameSize: cfg.FrameSize}
	s.w.nlfd, s.w.evfd = -1, -1
	defer func() {
		if err != nil {
			s.release()
		}
	}()
	s.fd, err = unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("afxdp: socket: %w", err)
	}
	if area == nil {
		if s.area, err = newUMEMArea(int(2*ring), cfg.FrameSize); err != nil {
			return nil, err
		}
	} else {
		area.ref()
		s.area = area
	}
	if owner == nil {
		reg := unix.XDPUmemReg{
			Addr:     uint64(uintptrOf(s.area.mem)),
			Len:      uint64(len(s.area.mem)),
			Size:     uint32(cfg.FrameSize),
			Headroom: uint32(cfg.Headroom),
		}
		if err = setUMEMReg(s.fd, &reg); err != nil {
			return nil, fmt.Errorf("afxdp: register umem: %w", err)
		}
	}
	for _, o := range []struct {
		opt int
		n   uint32
	}{
		{unix.XDP_UMEM_FILL_RING, 2 * ring},
		{unix.XDP_UMEM_COMPLETION_RING, ring},
		{unix.XDP_RX_RING, ring},
		{unix.XDP_TX_RING, ring},
	} {
		if err = unix.SetsockoptInt(s.fd, unix.SOL_XDP, o.opt, int(o.n)); err != nil {
			return nil, fmt.Errorf("afxdp: ring size option %d: %w", o.opt, err)
		}
	}
	off, err := getMmapOffsets(s.fd)
	if err != nil {
		return nil, fmt.Errorf("afxdp: mmap offsets: %w", err)
	}
	var rx, tx, fill, comp ringMem
	if s.rings[0], rx, err = mapRing(s.fd, unix.XDP_PGOFF_RX_RING, off.Rx, ring, descSize); err != nil {
		return nil, err
	}
	if s.rings[1], tx, err = mapRing(s.fd, unix.XDP_PGOFF_TX_RING, off.Tx, ring, descSize); err != nil {
		return nil, err
	}
	if s.rings[2], fill, err = mapRing(s.fd, unix.XDP_UMEM_PGOFF_FILL_RING, off.Fr, 2*ring, 8); err != nil {
		return nil, err
	}
	if s.rings[3], comp, err = mapRing(s.fd, unix.XDP_UMEM_PGOFF_COMPLETION_RING, off.Cr, ring, 8); err != nil {
		return nil, err
	}
	shift := uint(11)
	if cfg.FrameSize == 4096 {
		shift = 12
	}
	s.x = xsk{
		umem:    s.area.mem,
		rx:      consRing{m: rx, size: ring, which: RingRX},
		tx:      prodRing{m: tx, size: ring, which: RingTX},
		fill:    prodRing{m: fill, size: 2 * ring, which: RingFill},
		comp:    consRing{m: comp, size: ring, which: RingCompletion},
		fr:      newFrames(shift, first, ring, ring, uint64(cfg.Headroom)),
		maxTx:   cfg.FrameSize - cfg.Headroom,
		scratch: make([]uint32, ring),
	}
	// The kernel fills RX frames as soon as it is bound, so they go to
	// the fill ring first.
	s.x.primeFill()
	if err = s.bind(cfg, owner); err != nil {
		return nil, err
	}
	if s.mode == BindCopy {
		// Linux 6.17+: let one sendto move a whole TX ring instead of
		// 32 frames (XDP_MAX_TX_SKB_BUDGET); older kernels say
		// ENOPROTOOPT and keep the default.
		_ = unix.SetsockoptInt(s.fd, unix.SOL_XDP, unix.XDP_MAX_TX_SKB_BUDGET, int(ring))
	}
	if cfg.BusyPoll.Timeout > 0 {
		s.busyPoll = setBusyPoll(s.fd, cfg.BusyPoll) == nil
	}
	if err = s.w.open(ifindex, s.fd); err != nil {
		return nil, err
	}
	return s, nil
}

// bind binds to the queue: zero-copy first (unless told otherwise), copy
// mode if the driver refuses zero-copy.
func (s *Socket) bind(cfg Config, owner *Socket) error {
	sa := &unix.SockaddrXDP{Ifindex: uint32(s.ifindex), QueueID: uint32(s.queue)}
	if owner != nil {
		// Flags are inherited from the owner; the kernel refuses any.
		sa.Flags = unix.XDP_SHARED_UMEM
		sa.SharedUmemFD = uint32(owner.fd)
		if err := bindRetry(s.fd, sa); err != nil {
			return fmt.Errorf("afxdp: bind queue %d (shared umem): %w", s.queue, err)
		}
		s.mode, s.needWakeup = owner.mode, owner.needWakeup
		return nil
	}
	var wake uint16
	if s.needWakeup {
		wake = unix.XDP_USE_NEED_WAKEUP
	}
	if cfg.Bind != BindCopy {
		sa.Flags = unix.XDP_ZEROCOPY | wake
		err := bindRetry(s.fd, sa)
		if err == nil {
			s.mode = BindZeroCopy
			return nil
		}
		if cfg.Bind == BindZeroCopy || !errors.Is(err, unix.EOPNOTSUPP) {
			return fmt.Errorf("afxdp: bind queue %d zero-copy: %w", s.queue, err)
		}
	}
	sa.Flags = unix.XDP_COPY | wake
	if err := bindRetry(s.fd, sa); err != nil {
		return fmt.Errorf("afxdp: bind queue %d copy mode: %w", s.queue, err)
	}
	s.mode = BindCopy
	return nil
}

// bindRetry binds, retrying for a while on EBUSY: the kernel frees a
// closed socket's claim on its queue from a work queue, after close
// returns, so a socket reopened at once on the same queue can find it
// still taken.
func bindRetry(fd int, sa *unix.SockaddrXDP) error {
	delay := time.Millisecond
	deadline := time.Now().Add(bindBusyTimeout)
	for {
		err := unix.Bind(fd, sa)
		if err != unix.EBUSY || time.Now().After(deadline) {
			return err
		}
		time.Sleep(delay)
		delay = min(2*delay, 50*time.Millisecond)
	}
}

// bindBusyTimeout bounds bindRetry; a queue held by another live socket
// stays busy and fails after it.
const bindBusyTimeout = 2 * time.Second

func setBusyPoll(fd int, bp BusyPoll) error {
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PREFER_BUSY_POLL, 1); err != nil {
		return err
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_BUSY_POLL, int(bp.Timeout.Microseconds())); err != nil {
		return err
	}
	if bp.Budget > 0 {
		return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_BUSY_POLL_BUDGET, bp.Budget)
	}
	return nil
}

// Recv copies up to min(len(bufs), len(sizes)) received frames into bufs
// and their lengths into sizes, and returns how many. It never blocks:
// with nothing received it returns 0, nil (use Wait to sleep). Each
// buffer should hold MaxFrameLen bytes; a frame longer than its buffer is
// dropped and counted (Stats.RxTooLong). After ErrDeviceGone or a
// *CorruptError the socket is dead and returns that error forever.
func (s *Socket) Recv(bufs [][]byte, sizes []int) (int, error) {
	s.rxMu.Lock()
	defer s.rxMu.Unlock()
	if s.closed.Load() {
		return 0, ErrClosed
	}
	n, err := s.x.recv(bufs, sizes)
	if n == 0 && err == nil && (s.busyPoll || s.x.fill.needWakeup()) {
		// The driver waits for a system call before it looks at the
		// fill ring again (zero-copy need-wakeup), or busy polling
		// runs NAPI from here.
		if err := s.kickRx(); err != nil {
			return 0, err
		}
		n, err = s.x.recv(bufs, sizes)
	}
	return n, err
}

// Send copies frames into the UMEM, queues them for transmission and
// wakes the kernel if it asks to be woken. It returns how many frames it
// queued: fewer than len(bufs) when the TX ring or the TX frames are
// exhausted (try again after a moment), and ErrFrameSize for an empty or
// oversized frame (those before it were queued). It never blocks.
func (s *Socket) Send(bufs [][]byte) (int, error) {
	s.txMu.Lock()
	defer s.txMu.Unlock()
	if s.closed.Load() {
		return 0, ErrClosed
	}
	n, err := s.x.send(bufs)
	if n > 0 {
		if kerr := s.kickTxLocked(); kerr != nil {
			return n, kerr
		}
	}
	return n, err
}

// Flush wakes the kernel's transmit if frames queued by earlier Sends are
// still in the TX ring (the kernel stopped early: device busy, or a
// budget). It also reaps completions.
func (s *Socket) Flush() error {
	s.txMu.Lock()
	defer s.txMu.Unlock()
	if s.closed.Load() {
		return ErrClosed
	}
	if err := s.x.reap(); err != nil {
		return err
	}
	if s.x.tx.m.consumer.Load() != s.x.tx.prod {
		return s.kickTxLocked()
	}
	return nil
}

// kickTxLocked makes the kernel transmit what is in the TX ring, when it
// asks for it (always, in copy mode). Copy mode moves a bounded batch per
// call and answers EAGAIN while frames remain, so it repeats a bounded
// number of times. Caller holds txMu.
func (s *Socket) kickTxLocked() error {
	if s.needWakeup && !s.x.tx.needWakeup() {
		return nil
	}
	for range s.x.tx.size/32 + 2 {
		s.x.c.txWakeups.Add(1)
		err := kick(s.fd, unix.SYS_SENDTO)
		switch err {
		case nil:
			return nil
		case unix.EAGAIN:
			continue
		case unix.EBUSY, unix.ENOBUFS:
			return nil // the kernel is busy with this ring; the next Send retries
		}
		return s.sysErr("sendto", err)
	}
	return nil
}

// kickRx is the RX wake-up: recvfrom without data. It also reports a
// device that has gone away.
func (s *Socket) kickRx() error {
	s.x.c.rxWakeups.Add(1)
	err := kick(s.fd, unix.SYS_RECVFROM)
	if err == nil || err == unix.EAGAIN || err == unix.EBUSY {
		return nil
	}
	return s.sysErr("recvfrom", err)
}

// sysErr turns a wake-up's errno into the package's errors. ENXIO means
// the kernel unbound the socket because its netdev was unregistered.
func (s *Socket) sysErr(op string, err error) error {
	switch err {
	case unix.ENXIO:
		return s.x.fail(ErrDeviceGone)
	case unix.ENETDOWN:
		return ErrDeviceDown
	}
	return fmt.Errorf("afxdp: %s on queue %d: %w", op, s.queue, err)
}

// Mode reports what the kernel granted: BindZeroCopy or BindCopy.
func (s *Socket) Mode() BindMode { return s.mode }

// Queue is the queue id the socket is bound to.
func (s *Socket) Queue() int { return s.queue }

// Ifindex is the netdev's interface index.
func (s *Socket) Ifindex() int { return s.ifindex }

// FD is the socket's file descriptor, for an XSKMAP. It stays owned by
// the Socket.
func (s *Socket) FD() int { return s.fd }

// BusyPolling reports whether busy polling was asked for and the kernel
// accepted the socket options.
func (s *Socket) BusyPolling() bool { return s.busyPoll }

// MaxFrameLen is the longest frame Recv can deliver; Send accepts the
// same (its own limit is larger by the 256 bytes of XDP headroom).
func (s *Socket) MaxFrameLen() int {
	return s.frameSize - xdpPacketHeadroom - int(s.x.fr.txOff)
}

// Err returns the socket's sticky error (ErrDeviceGone, *CorruptError),
// or nil while it works.
func (s *Socket) Err() error { return s.x.err() }

// Stats returns the socket's counters, with the kernel's own.
func (s *Socket) Stats() Stats {
	st := s.x.c.snapshot()
	var ks unix.XDPStatistics
	s.fdMu.RLock()
	defer s.fdMu.RUnlock()
	if s.fd >= 0 && getXDPStatistics(s.fd, &ks) == nil {
		st.KernelRxDropped = ks.Rx_dropped
		st.KernelRxInvalid = ks.Rx_invalid_descs
		st.KernelTxInvalid = ks.Tx_invalid_descs
		st.KernelRxRingFull = ks.Rx_ring_full
		st.KernelFillRingEmpty = ks.Rx_fill_ring_empty_descs
		st.KernelTxRingEmpty = ks.Tx_ring_empty_descs
	}
	return st
}

// Close unbinds the socket (the kernel also drops it from any XSKMAP) and
// frees its rings and, when it is the last user, the UMEM.
func (s *Socket) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	s.w.interrupt()
	s.rxMu.Lock()
	s.txMu.Lock()
	defer s.txMu.Unlock()
	defer s.rxMu.Unlock()
	s.release()
	return nil
}

func (s *Socket) release() {
	s.w.close()
	s.fdMu.Lock()
	if s.fd >= 0 {
		_ = unix.Close(s.fd)
		s.fd = -1
	}
	s.fdMu.Unlock()
	for i, m := range s.rings {
		if m != nil {
			_ = unix.Munmap(m)
			s.rings[i] = nil
		}
	}
	if s.area != nil {
		s.area.unref()
		s.area = nil
	}
}
