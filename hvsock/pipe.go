package hvsock

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vmbusd/vmbusd/clock"
	"github.com/vmbusd/vmbusd/deadline"
	"github.com/vmbusd/vmbusd/hvsock/wire"
	"github.com/vmbusd/vmbusd/vmbus"
)

// vmbusStream is the guest's half of one hv_sock connection over its own
// VMBus channel (docs/protocol/hvsock.md §1.7 to §1.10):
//
//	Write       chunks of <= ChunkSize -> inband packets, while the data lasts
//	            and the ring has room beyond the Reserve; then one Flush
//	            (commit; signal the host only on empty -> non-empty with its
//	            mask clear). Full: Flush, pending_send_sz (WaitWritable),
//	            re-check, sleep; then carry on with the same Write.
//	Read        packet -> payload delivered across as many Reads as it takes
//	            (partial reads); the read index is published (CommitRecv:
//	            signal a blocked host when its pending_send_sz is crossed)
//	            only once the packet in hand is consumed.
//	CloseWrite  end the Write in progress (net.ErrClosed), then FIN
//	            (zero-length packet), once; the Reserve makes room for it.
//	CloseRead   local: end the Read in progress, later Reads io.EOF.
//	Close       end both, FIN; wait up to the linger for the host to finish
//	            (its rescind), discarding what it still sends; close the
//	            channel.
//	rescind     reads drain what the host left in the ring, then io.EOF;
//	            writes fail with EPIPE.
//
// Read and Write may run concurrently (one goroutine each at a time; more
// are serialised); Close, CloseRead, CloseWrite, the deadlines and Stats
// are safe from anywhere and never wait for a blocked Read or Write: each
// side's waits select on a context that its shutdown cancels (rdl, wdl are
// children of rctx, wctx, children of ctx), and a Write checks wstop
// between chunks, so the lock they then take is released at once.
type vmbusStream struct {
	dev    channelDevice
	name   string // the device, for logs
	ch     *vmbus.Channel
	chunk  int
	linger time.Duration
	clk    clock.Clock // times the linger
	log    *slog.Logger
	snd    int // ring sizes, header page included
	rcv    int

	ctx       context.Context // ends at Close
	cancel    context.CancelFunc
	rcancel   context.CancelFunc // ends the read side's waits (CloseRead)
	wcancel   context.CancelFunc // ends the write side's waits (CloseWrite)
	closed    atomic.Bool
	readShut  atomic.Bool // CloseRead: Reads return io.EOF
	writeShut atomic.Bool // CloseWrite: new Writes fail with EPIPE
	wstop     atomic.Bool // CloseWrite or Close: a Write in progress stops
	rdl, wdl  *deadline.Deadline

	rmu     sync.Mutex // the read side
	rbuf    []byte     // private copy of the packet being delivered
	cur     []byte     // its undelivered payload
	finRcvd bool
	rerr    error // sticky: the host broke the framing or the ring

	wmu     sync.Mutex // the write side
	finSent bool
	hdr     [wire.PipeHeaderSize]byte

	gate    closeGate
	release func() // frees the local port; may be nil
	st      streamCounters
}

type streamCounters struct {
	bytesRead, bytesWritten     atomic.Uint64
	packetsRead, packetsWritten atomic.Uint64
	discarded                   atomic.Uint64
	finSent, finRcvd, reset     atomic.Bool
}

// channelDevice is what a stream needs of the device its channel belongs
// to: a *vmbus.Handle, or in unit tests a vmbustest.Pair.
type channelDevice interface {
	Primary() *vmbus.Channel
	Interrupts() uint64
	// Close closes the channel; it is the stream's last use of it.
	Close() error
}

var _ channelDevice = (*vmbus.Handle)(nil)

func newVMBusStream(dev channelDevice, name string, cfg *Config, snd, rcv int) *vmbusStream {
	ctx, cancel := context.WithCancel(context.Background())
	rctx, rcancel := context.WithCancel(ctx)
	wctx, wcancel := context.WithCancel(ctx)
	return &vmbusStream{
		dev: dev, name: name, ch: dev.Primary(), chunk: cfg.chunk(dev.Primary().Out().DataSize()), linger: cfg.linger(), clk: clock.Or(cfg.Clock), log: cfg.logger(),
		snd: snd, rcv: rcv,
		ctx: ctx, cancel: cancel, rcancel: rcancel, wcancel: wcancel,
		rdl: deadline.New(rctx), wdl: deadline.New(wctx),
		rbuf: make([]byte, wire.MaxPacketBody),
	}
}

// readCtxErr is the error of a Read whose wait context ended: Close, then
// CloseRead (the end of the stream, what arrived is dropped), else the
// deadline.
func (s *vmbusStream) readCtxErr() error {
	switch {
	case s.closed.Load():
		return net.ErrClosed
	case s.readShut.Load():
		s.discardLocked()
		return io.EOF
	}
	return os.ErrDeadlineExceeded
}

// writeCtxErr is the error of a Write whose wait context ended: a Write
// cut short by CloseWrite or Close reports the close, else the deadline.
func (s *vmbusStream) writeCtxErr() error {
	if s.wstop.Load() {
		return net.ErrClosed
	}
	return os.ErrDeadlineExceeded
}

// fail records that the host broke the protocol: the channel is dead for
// both directions (a violation kills the channel, never the process).
func (s *vmbusStream) fail(err error) {
	if s.rerr == nil {
		s.rerr = err
		s.log.Warn("hvsock: host protocol violation, connection dead", "err", err)
	}
	s.ch.Kill(err)
}

func (s *vmbusStream) Read(b []byte) (int, error) {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	switch {
	case s.closed.Load():
		return 0, net.ErrClosed
	case s.rerr != nil:
		return 0, s.rerr
	case s.readShut.Load():
		s.discardLocked()
		return 0, io.EOF
	}
	ctx := s.rdl.Context()
	if ctx.Err() != nil {
		return 0, s.readCtxErr()
	}
	if len(b) == 0 {
		return 0, nil
	}
	for {
		if n := s.fillLocked(b); n > 0 {
			return n, nil
		}
		if s.rerr != nil {
			return 0, s.rerr
		}
		if s.finRcvd {
			return 0, io.EOF
		}
		err := s.ch.WaitReadable(ctx)
		switch {
		case err == nil:
			continue
		case ctx.Err() != nil:
			return 0, s.readCtxErr()
		case errors.Is(err, vmbus.ErrRescinded):
			// The host is gone, but what it wrote is still in our
			// ring: deliver it, then the end of the stream.
			if s.ch.In().Available() > 0 {
				continue
			}
			return 0, io.EOF
		case errors.Is(err, vmbus.ErrChannelClosed):
			return 0, net.ErrClosed
		}
		s.fail(err)
		return 0, err
	}
}

// fillLocked copies what is waiting into b without blocking: the rest of
// the packet in hand, then further packets. It publishes the read index
// when no packet is left partly delivered.
func (s *vmbusStream) fillLocked(b []byte) int {
	n := 0
	for n < len(b) {
		if len(s.cur) == 0 && !s.nextLocked() {
			break
		}
		k := copy(b[n:], s.cur)
		s.cur = s.cur[k:]
		n += k
	}
	if len(s.cur) == 0 {
		s.commitLocked()
	}
	if n > 0 {
		s.st.bytesRead.Add(uint64(n))
	}
	return n
}

// nextLocked takes the next data packet out of the ring into s.cur. It
// reports false when there is none (ring empty, FIN seen, or the host broke
// the protocol, which sets s.rerr).
func (s *vmbusStream) nextLocked() bool {
	if !s.finRcvd && s.rerr == nil {
		p, err := s.ch.In().Read(s.rbuf)
		if err == vmbus.ErrRingEmpty {
			return false
		}
		if err != nil {
			s.fail(err)
			return false
		}
		data, err := wire.DecodePacket(p.Raw)
		if err != nil {
			s.fail(err)
			return false
		}
		s.st.packetsRead.Add(1)
		if len(data) == 0 {
			s.finRcvd = true
			s.st.finRcvd.Store(true)
			return false
		}
		s.cur = data
		return true
	}
	return false
}

// commitLocked releases what was read to the host, signalling it if it was
// blocked. After a rescind there is nobody to signal; that error is moot.
func (s *vmbusStream) commitLocked() {
	if err := s.ch.CommitRecv(); err != nil && s.ch.Err() == nil {
		s.log.Debug("hvsock: commit read", "err", err)
	}
}

// discardLocked drops everything waiting (after CloseRead, or while
// lingering in Close), FINs included, and releases the space.
func (s *vmbusStream) discardLocked() {
	if len(s.cur) > 0 {
		s.st.discarded.Add(uint64(len(s.cur)))
		s.cur = nil
	}
	for s.rerr == nil {
		p, err := s.ch.In().Read(s.rbuf)
		if err == vmbus.ErrRingEmpty {
			break
		}
		if err != nil {
			s.fail(err)
			break
		}
		data, err := wire.DecodePacket(p.Raw)
		if err != nil {
			s.fail(err)
			break
		}
		if len(data) == 0 {
			s.finRcvd = true
			s.st.finRcvd.Store(true)
		}
		s.st.discarded.Add(uint64(len(data)))
	}
	s.commitLocked()
}

// flush publishes what was written and signals the host if the ring rules
// say so. Once published the packets are the host's: a signal that fails
// because the host rescinded the channel meanwhile (it may have read them,
// finished and gone before our write(1)) is not the writer's error, as in
// Linux, where nothing can fail after the ring write (vmbus_setevent).
func (s *vmbusStream) flush() error {
	err := s.ch.Flush()
	if err != nil && errors.Is(err, vmbus.ErrRescinded) && s.ch.Out().Pending() == 0 {
		return nil
	}
	return err
}

// writeErr maps a channel error to what a writer sees: the host gone is a
// broken pipe (Linux: EPIPE), our own close net.ErrClosed.
func (s *vmbusStream) writeErr(err error) error {
	switch {
	case errors.Is(err, vmbus.ErrRescinded):
		return syscall.EPIPE
	case errors.Is(err, vmbus.ErrChannelClosed):
		return net.ErrClosed
	}
	return err
}

func (s *vmbusStream) Write(b []byte) (int, error) {
	if s.closed.Load() {
		return 0, net.ErrClosed // not even behind Close's FIN
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	switch {
	case s.closed.Load():
		return 0, net.ErrClosed
	case s.writeShut.Load():
		return 0, syscall.EPIPE
	}
	if err := s.ch.Err(); err != nil {
		return 0, s.writeErr(err)
	}
	ctx := s.wdl.Context()
	if ctx.Err() != nil {
		return 0, s.writeCtxErr()
	}
	out := s.ch.Out()
	n, pkts := 0, 0
	defer func() {
		s.st.bytesWritten.Add(uint64(n))
		s.st.packetsWritten.Add(uint64(pkts))
	}()
	for n < len(b) {
		if s.wstop.Load() {
			// CloseWrite or Close came while this Write was moving
			// data: they wait for wmu, so stop at a packet boundary.
			break
		}
		w := wire.Writable(out.Free())
		if w == 0 {
			if err := s.flush(); err != nil {
				return n, s.writeErr(err)
			}
			// Sleep until a whole chunk (or the rest) fits beside the
			// Reserve; the host signals once pending_send_sz is free.
			k := min(len(b)-n, s.chunk)
			need := min(wire.Reserve+align8(k), out.MaxPacket()-8)
			if err := s.ch.WaitWritable(ctx, need); err != nil {
				if ctx.Err() != nil {
					return n, s.writeCtxErr()
				}
				return n, s.writeErr(err)
			}
			continue
		}
		k := min(len(b)-n, w, s.chunk)
		wire.PutPipeHeader(s.hdr[:], k)
		if err := s.ch.SendInband(0, s.hdr[:], b[n:n+k]); err != nil {
			s.ch.Flush()
			return n, s.writeErr(err)
		}
		n += k
		pkts++
	}
	if err := s.flush(); err != nil {
		return n, s.writeErr(err)
	}
	if n < len(b) {
		return n, net.ErrClosed
	}
	return n, nil
}

// sendFINLocked queues the FIN once and publishes it. The Reserve every
// Write keeps guarantees the room; only a host lying about its read index
// could make it wait, and then ctx bounds the wait.
func (s *vmbusStream) sendFINLocked(ctx context.Context) error {
	if s.finSent {
		return nil
	}
	if err := s.ch.Err(); err != nil {
		return s.writeErr(err)
	}
	wire.PutPipeHeader(s.hdr[:], 0)
	for {
		err := s.ch.SendInband(0, s.hdr[:])
		if err == nil {
			break
		}
		var full *vmbus.RingFullError
		if !errors.As(err, &full) {
			return s.writeErr(err)
		}
		s.ch.Flush()
		if err := s.ch.WaitWritable(ctx, wire.FINLen); err != nil {
			if ctx.Err() != nil {
				return net.ErrClosed
			}
			return s.writeErr(err)
		}
	}
	s.finSent = true
	s.st.finSent.Store(true)
	s.st.packetsWritten.Add(1)
	return s.writeErr(s.flush())
}

// CloseWrite ends a Write in progress (it returns net.ErrClosed with what
// it queued), then queues the FIN behind everything written. Waking the
// Write first is what lets wmu be taken at once: a Write blocked on a full
// ring would otherwise hold it until the host reads.
func (s *vmbusStream) CloseWrite() error {
	if s.closed.Load() {
		return net.ErrClosed
	}
	s.writeShut.Store(true)
	s.wstop.Store(true)
	s.wcancel()
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed.Load() {
		return net.ErrClosed // Close sends the FIN
	}
	return s.sendFINLocked(s.ctx)
}

// CloseRead is local: the protocol has no way to tell the host
// (docs/protocol/hvsock.md §1.10, SHUT_RD). A Read waiting for data returns io.EOF now; later Reads
// return io.EOF and drop what arrived. It takes no lock, so it cannot wait
// behind that Read.
func (s *vmbusStream) CloseRead() error {
	if s.closed.Load() {
		return net.ErrClosed
	}
	s.readShut.Store(true)
	s.rcancel()
	return nil
}

// Close decides its result at once — nil: what the host does during the
// linger is in Stats and the log, not an error of Close — so a concurrent
// Close returns without waiting for the linger (closeGate).
func (s *vmbusStream) Close() error {
	return s.gate.close(s.stop, s.shutdown)
}

// stop marks the stream closed and wakes every blocked Read and Write.
func (s *vmbusStream) stop() error {
	s.closed.Store(true)
	s.wstop.Store(true)
	s.cancel()
	s.rdl.Stop()
	s.wdl.Stop()
	return nil
}

// shutdown is the close handshake (patch (c), hvs_close_lock_held): FIN,
// then wait for the host to finish its side — in hv_sock that is the
// rescind, which the host sends once both directions are done — for at
// most the linger, draining what it still sends so that it can finish.
// Then the channel is closed; if the host had not finished, that is the
// local reset. The read lock is held only to drain, not while waiting, so
// a Read called meanwhile returns net.ErrClosed at once; no Read waits on
// the channel any more (they see closed under rmu), so the wait is ours.
func (s *vmbusStream) shutdown() {
	lctx, cancel := context.Background(), context.CancelFunc(func() {})
	if s.linger > 0 {
		lctx, cancel = clock.WithTimeout(context.Background(), s.clk, s.linger)
	}
	defer cancel()
	s.wmu.Lock()
	finErr := s.sendFINLocked(lctx)
	s.wmu.Unlock()

	reset := false
	if s.ch.Err() == nil {
		if s.linger <= 0 {
			reset = true
		}
		for !reset {
			s.rmu.Lock()
			s.discardLocked()
			s.rmu.Unlock()
			if err := s.ch.WaitReadable(lctx); err != nil {
				reset = lctx.Err() != nil && s.ch.Err() == nil
				break
			}
		}
	}
	if reset {
		s.st.reset.Store(true)
	}
	err := s.dev.Close()
	if s.release != nil {
		s.release()
	}
	s.log.Debug("hvsock: connection closed", "device", s.name,
		"fin_err", finErr, "reset", reset, "close_err", err,
		"read", s.st.bytesRead.Load(), "written", s.st.bytesWritten.Load())
}

func (s *vmbusStream) SetReadDeadline(t time.Time) error {
	if s.closed.Load() {
		return net.ErrClosed
	}
	s.rdl.Set(t)
	return nil
}

func (s *vmbusStream) SetWriteDeadline(t time.Time) error {
	if s.closed.Load() {
		return net.ErrClosed
	}
	s.wdl.Set(t)
	return nil
}

func (s *vmbusStream) stats() ConnStats {
	return ConnStats{
		BytesRead: s.st.bytesRead.Load(), BytesWritten: s.st.bytesWritten.Load(),
		PacketsRead: s.st.packetsRead.Load(), PacketsWritten: s.st.packetsWritten.Load(),
		Discarded: s.st.discarded.Load(),
		FINSent:   s.st.finSent.Load(), FINReceived: s.st.finRcvd.Load(), Reset: s.st.reset.Load(),
		SendRingSize: s.snd, RecvRingSize: s.rcv,
		Channel: s.ch.Stats(), Interrupts: s.dev.Interrupts(),
	}
}

func align8(n int) int { return (n + 7) &^ 7 }
