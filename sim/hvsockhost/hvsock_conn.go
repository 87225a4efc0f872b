package hvsockhost

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vmbusd/vmbusd/deadline"
	"github.com/vmbusd/vmbusd/hvsock/wire"
	"github.com/vmbusd/vmbusd/sim/bus"
	"github.com/vmbusd/vmbusd/vmbus"
)

// Conn is the host end of one hv_sock connection, what a host
// application (or the front end's relay) holds. It follows the host's rules,
// independently of the guest package: packets of at most the host's chunk
// size, no FIN reserve (a host FIN may wait for room), OpenVMM's reader
// checks on the guest's packets (inband, pipe type DATA or PARTIAL, payload
// at most 16 KiB; anything else is a violation that resets the connection),
// and the rescind once both directions are done (see hvsock.go).
//
//	Read   drains packets into b, copying each payload straight out of the
//	       ring as OpenVMM's pipe reader does (no private copy); partial
//	       reads keep the rest of a packet in the ring; the read index is
//	       published once no packet is left half-read;
//	       io.EOF after the guest's FIN; ECONNRESET if the guest closed the
//	       channel without one. Faults: FaultStopDraining/FaultSlowHost.
//	Write  chunks into packets, one commit per call (or when full: then
//	       pending_send_sz through WaitWritable).
//	CloseWrite  FIN.   Close  FIN, then rescind once the guest's FIN arrives,
//	       or at once if the guest sends more data (a closed host socket).
//
// It implements net.Conn; every method is safe for concurrent use (one
// Read and one Write at a time make progress). After the guest's session
// ends nothing touches the rings any more.
type Conn struct {
	hv            *Host
	sess          *bus.Session
	ch            *bus.Channel
	local, remote *wire.Addr
	chunk         int

	ring     sync.RWMutex // held shared by operations on the rings; detach takes it
	detached bool

	ctx      context.Context // ends at Close or with the session
	cancel   context.CancelFunc
	closed   atomic.Bool
	rdl, wdl *deadline.Deadline

	rmu     sync.Mutex
	curOff  int // the packet in hand (held in the ring by Peek): where
	curLen  int // its undelivered payload starts in the body, how long
	head    []byte
	finRcvd bool
	rerr    error

	wmu     sync.Mutex
	finSent bool
	finRace atomic.Bool
	hdr     [wire.PipeHeaderSize]byte

	doneMu              sync.Mutex
	guestDone, hostDone bool
	ending              bool

	bytesRead, bytesWritten atomic.Uint64
}

var _ net.Conn = (*Conn)(nil)

func newHvSockConn(o *hvOffer, s *bus.Session) *Conn {
	c := &Conn{hv: o.hv, sess: s, ch: s.Primary(), chunk: o.hv.cfg.ChunkSize, head: make([]byte, wire.HeaderLen)}
	guestPort := binary.BigEndian.Uint32(o.endpoint[:4])
	hostPort := binary.BigEndian.Uint32(o.service[:4])
	if o.fromHost {
		guestPort, hostPort = hostPort, guestPort
	}
	c.local = &wire.Addr{ContextID: wire.CIDHost, Port: hostPort}
	c.remote = &wire.Addr{ContextID: wire.CIDAny, Port: guestPort}
	c.ctx, c.cancel = context.WithCancel(s.Context())
	c.rdl, c.wdl = deadline.New(c.ctx), deadline.New(c.ctx)
	return c
}

// Device returns the connection's device (for faults and Rescind).
func (c *Conn) Device() *bus.Device { return c.sess.Device() }

// Channel returns the host end of the connection's channel.
func (c *Conn) Channel() *bus.Channel { return c.ch }

// BytesRead and BytesWritten count payload bytes.
func (c *Conn) BytesRead() uint64    { return c.bytesRead.Load() }
func (c *Conn) BytesWritten() uint64 { return c.bytesWritten.Load() }

// SetFinRace switches the "FIN racing the last data" fault: each Write's
// last packets stay unpublished, and CloseWrite or Close publish them with
// the FIN in one batch and rescind the channel right behind it, without
// waiting for the guest. The guest must still deliver every byte, then EOF.
func (c *Conn) SetFinRace(on bool) { c.finRace.Store(on) }

func (c *Conn) opErr(op string, err error) error {
	if err == nil || err == io.EOF {
		return err
	}
	return &net.OpError{Op: op, Net: "hvsock", Source: c.local, Addr: c.remote, Err: err}
}

func (c *Conn) ctxErr() error {
	switch {
	case c.closed.Load():
		return net.ErrClosed
	case c.sess.Context().Err() != nil:
		return syscall.ECONNRESET
	}
	return os.ErrDeadlineExceeded
}

// violation records a guest protocol violation; the connection is reset.
func (c *Conn) violation(err error) {
	c.rerr = err
	c.hv.violation(c.Device().Instance(), err.Error())
	c.ch.Kill(err)
	c.end()
}

// nextLocked takes the next packet in hand, leaving it in the ring; ok is
// false when none is waiting.
func (c *Conn) nextLocked() (ok bool, err error) {
	head := c.head[:wire.HeaderLen]
	for {
		p, err := c.ch.Peek(head)
		if err == vmbus.ErrRingEmpty {
			return false, nil
		}
		if err != nil {
			if _, corrupt := vmbus.IsCorrupt(err); corrupt {
				c.violation(err)
				return false, err
			}
			return false, syscall.ECONNRESET
		}
		start, size, need, err := wire.DecodeHead(p.Raw)
		if err != nil {
			c.violation(err)
			return false, err
		}
		if need > 0 { // a pipe header past offset8 2: peek that far
			if need > len(c.head) {
				c.head = make([]byte, need)
			}
			head = c.head[:need]
			continue
		}
		if size == 0 {
			c.ch.Skip()
			c.finRcvd = true
			c.markDone(true, false)
			return false, nil
		}
		c.curOff, c.curLen = start, size
		return true, nil
	}
}

// copyCurLocked copies what b takes of the packet in hand straight from
// the ring, and moves past the packet once it is delivered.
func (c *Conn) copyCurLocked(b []byte) int {
	k := c.ch.In().CopyBody(b[:min(len(b), c.curLen)], c.curOff)
	c.curOff += k
	c.curLen -= k
	if k == 0 { // no packet held: nothing else reads this ring, but never spin
		c.curLen = 0
	}
	if c.curLen == 0 {
		c.ch.Skip()
	}
	return k
}

// Read implements net.Conn.
func (c *Conn) Read(b []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.closed.Load() {
		return 0, c.opErr("read", net.ErrClosed)
	}
	if c.rerr != nil {
		return 0, c.opErr("read", c.rerr)
	}
	if c.finRcvd { // the end of the stream stays the end, rescind or not
		return 0, io.EOF
	}
	ctx := c.rdl.Context()
	if ctx.Err() != nil && c.sess.Context().Err() == nil {
		return 0, c.opErr("read", c.ctxErr())
	}
	if len(b) == 0 {
		return 0, nil
	}
	n, err := c.read(ctx, b)
	c.bytesRead.Add(uint64(n))
	if n > 0 {
		return n, nil
	}
	return 0, c.opErr("read", err)
}

func (c *Conn) read(ctx context.Context, b []byte) (int, error) {
	c.ring.RLock()
	defer c.ring.RUnlock()
	for {
		if c.detached || c.sess.Context().Err() != nil {
			// The guest's channel is closed: the ring, and what was
			// left unread in it, are gone (OpenVMM: ConnectionReset).
			return 0, syscall.ECONNRESET
		}
		if err := c.ch.Throttle(ctx); err != nil {
			return 0, c.ctxErr()
		}
		n := 0
		var err error
		for n < len(b) && err == nil {
			if c.curLen == 0 {
				var ok bool
				if ok, err = c.nextLocked(); !ok {
					break
				}
			}
			n += c.copyCurLocked(b[n:])
		}
		if c.curLen == 0 && c.rerr == nil {
			c.ch.CommitRecv()
		}
		switch {
		case n > 0:
			return n, nil
		case err != nil:
			return 0, err
		case c.finRcvd:
			return 0, io.EOF
		}
		if err := c.ch.WaitReadable(ctx); err != nil {
			if ctx.Err() != nil {
				return 0, c.ctxErr()
			}
			if _, corrupt := vmbus.IsCorrupt(err); corrupt {
				c.violation(err)
				return 0, err
			}
			return 0, syscall.ECONNRESET
		}
	}
}

// Write implements net.Conn.
func (c *Conn) Write(b []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	switch {
	case c.closed.Load():
		return 0, c.opErr("write", net.ErrClosed)
	case c.finSent:
		return 0, c.opErr("write", syscall.EPIPE)
	}
	ctx := c.wdl.Context()
	if ctx.Err() != nil {
		return 0, c.opErr("write", c.ctxErr())
	}
	n, err := c.write(ctx, b)
	c.bytesWritten.Add(uint64(n))
	return n, c.opErr("write", err)
}

// minPartialWrite is the least payload worth a packet when a whole chunk
// does not fit.
const minPartialWrite = 1024

func (c *Conn) write(ctx context.Context, b []byte) (int, error) {
	c.ring.RLock()
	defer c.ring.RUnlock()
	if c.detached {
		return 0, syscall.ECONNRESET
	}
	out := c.ch.Out()
	n := 0
	for n < len(b) {
		if c.ch.Err() != nil {
			c.ch.Flush()
			return n, syscall.EPIPE
		}
		k := min(len(b)-n, c.chunk)
		// A packet fits when free > its length: payload <= free - 40.
		fit := out.Free() - wire.PacketLen(0) - 8
		if fit < k && fit < minPartialWrite {
			if err := c.ch.Flush(); err != nil {
				return n, syscall.EPIPE
			}
			if err := c.ch.WaitWritable(ctx, min(wire.PacketLen(k), out.MaxPacket()-8)); err != nil {
				if ctx.Err() != nil {
					return n, c.ctxErr()
				}
				return n, syscall.EPIPE
			}
			continue
		}
		k = min(k, fit)
		wire.PutPipeHeader(c.hdr[:], k)
		if err := c.ch.SendInband(0, c.hdr[:], b[n:n+k]); err != nil {
			c.ch.Flush()
			return n, syscall.EPIPE
		}
		n += k
	}
	if c.finRace.Load() {
		return n, nil // published with the FIN
	}
	if err := c.ch.Flush(); err != nil {
		return n, syscall.EPIPE
	}
	return n, nil
}

// sendFINLocked queues the FIN and publishes it (and, under the FIN race,
// the data before it), waiting for room within ctx. The caller holds wmu.
func (c *Conn) sendFINLocked(ctx context.Context) error {
	if c.finSent {
		return nil
	}
	c.ring.RLock()
	defer c.ring.RUnlock()
	if c.detached || c.ch.Err() != nil {
		return syscall.EPIPE
	}
	wire.PutPipeHeader(c.hdr[:], 0)
	for {
		err := c.ch.SendInband(0, c.hdr[:])
		if err == nil {
			break
		}
		var full *vmbus.RingFullError
		if !errors.As(err, &full) {
			return syscall.EPIPE
		}
		c.ch.Flush()
		if err := c.ch.WaitWritable(ctx, wire.FINLen); err != nil {
			return err
		}
	}
	c.finSent = true
	if err := c.ch.Flush(); err != nil {
		return syscall.EPIPE
	}
	if c.finRace.Load() {
		c.end() // rescind right behind the FIN
	}
	return nil
}

// CloseWrite sends the host's FIN.
func (c *Conn) CloseWrite() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closed.Load() {
		return c.opErr("close", net.ErrClosed)
	}
	if err := c.sendFINLocked(c.ctx); err != nil {
		return c.opErr("close", err)
	}
	c.markDone(false, true)
	return nil
}

// CloseRead is not signalled to the guest (the protocol has no message
// for it); it exists for symmetry and does nothing but refuse later Reads.
func (c *Conn) CloseRead() error {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.rerr == nil {
		c.rerr = net.ErrClosed
	}
	return nil
}

// closeFINWait bounds the wait for room for the host's FIN in Close.
const closeFINWait = 2 * time.Second

// Close sends the FIN and stops reading. The channel is rescinded once the
// guest's FIN has come (or already had), or as soon as the guest sends
// data instead, which a closed host socket could not take.
func (c *Conn) Close() error {
	if c.closed.Swap(true) {
		return c.opErr("close", net.ErrClosed)
	}
	c.cancel()
	c.rdl.Stop()
	c.wdl.Stop()
	fctx, cancel := context.WithTimeout(c.sess.Context(), closeFINWait)
	c.wmu.Lock()
	c.sendFINLocked(fctx)
	c.wmu.Unlock()
	cancel()
	c.markDone(false, true)
	c.doneMu.Lock()
	both := c.guestDone
	c.doneMu.Unlock()
	if !both {
		go c.drainAfterClose()
	}
	return nil
}

// drainAfterClose reads what the guest sends after the host closed: its
// FIN ends the connection normally, data resets it.
func (c *Conn) drainAfterClose() {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.ring.RLock()
	defer c.ring.RUnlock()
	ctx := c.sess.Context()
	for !c.detached && c.rerr == nil {
		if c.curLen > 0 {
			c.end()
			return
		}
		ok, err := c.nextLocked()
		if err != nil || c.finRcvd {
			return
		}
		if ok {
			c.end()
			return
		}
		c.ch.CommitRecv()
		if err := c.ch.WaitReadable(ctx); err != nil {
			return
		}
	}
}

// markDone records that a direction finished and rescinds the channel once
// both have.
func (c *Conn) markDone(guest, host bool) {
	c.doneMu.Lock()
	c.guestDone = c.guestDone || guest
	c.hostDone = c.hostDone || host
	both := c.guestDone && c.hostDone
	c.doneMu.Unlock()
	if both {
		c.end()
	}
}

// end rescinds the connection's channel, once.
func (c *Conn) end() {
	c.doneMu.Lock()
	if c.ending {
		c.doneMu.Unlock()
		return
	}
	c.ending = true
	c.doneMu.Unlock()
	c.hv.rescind(c.Device())
}

// detach runs when the session ends: from now on nothing touches the
// rings, which are about to be unmapped.
func (c *Conn) detach() {
	c.cancel()
	c.ring.Lock()
	c.detached = true
	c.ring.Unlock()
	c.rdl.Stop()
	c.wdl.Stop()
	c.doneMu.Lock()
	c.guestDone, c.hostDone, c.ending = true, true, true
	c.doneMu.Unlock()
}

// LocalAddr is (CIDHost, host port); RemoteAddr (CIDAny, guest port).
func (c *Conn) LocalAddr() net.Addr  { return c.local }
func (c *Conn) RemoteAddr() net.Addr { return c.remote }

// SetDeadline implements net.Conn.
func (c *Conn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

// SetReadDeadline implements net.Conn.
func (c *Conn) SetReadDeadline(t time.Time) error {
	if c.closed.Load() {
		return c.opErr("set", net.ErrClosed)
	}
	c.rdl.Set(t)
	return nil
}

// SetWriteDeadline implements net.Conn.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	if c.closed.Load() {
		return c.opErr("set", net.ErrClosed)
	}
	c.wdl.Set(t)
	return nil
}

// Malformed lists the malformed hv_sock packets InjectMalformed
// writes, one per framing check a guest makes (wire.FrameKind).
var Malformed = []wire.FrameKind{
	wire.FrameShort, wire.FrameType, wire.FrameOffset,
	wire.FramePipeType, wire.FrameSize, wire.FrameMTU,
}

// InjectMalformed publishes one packet that is a valid VMBus packet but
// breaks the hv_sock framing in the way kind names. The guest must reset
// the connection with that kind.
func (c *Conn) InjectMalformed(kind wire.FrameKind) error {
	var pkt []byte
	switch kind {
	case wire.FrameShort: // a bare descriptor: no room for the pipe header
		pkt = bus.RawDescriptor(6, 2, 2, 0, 0)
	case wire.FrameType: // a completion, not inband
		pkt = bus.RawDescriptor(0xb, 2, 3, 0, 8)
		wire.PutPipeHeader(pkt[16:], 0)
	case wire.FrameOffset: // offset8 leaving no pipe header
		pkt = bus.RawDescriptor(6, 3, 3, 0, 8)
	case wire.FramePipeType:
		pkt = bus.RawDescriptor(6, 2, 4, 0, 16)
		binary.LittleEndian.PutUint32(pkt[16:], 3) // a GPA-direct setup packet
		binary.LittleEndian.PutUint32(pkt[20:], 4)
	case wire.FrameSize: // data_size beyond the packet
		pkt = bus.RawDescriptor(6, 2, 4, 0, 16)
		wire.PutPipeHeader(pkt[16:], 64)
	case wire.FrameMTU:
		pkt = bus.RawDescriptor(6, 2, 4, 0, 16)
		wire.PutPipeHeader(pkt[16:], wire.MTU+1)
	default:
		return fmt.Errorf("sim: no malformed packet for %v", kind)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.ring.RLock()
	defer c.ring.RUnlock()
	if c.detached {
		return syscall.ECONNRESET
	}
	if err := c.ch.Out().WriteRaw(pkt); err != nil {
		return err
	}
	return c.ch.Flush()
}
