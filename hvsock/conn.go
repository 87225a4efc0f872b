package hvsock

import (
	"errors"
	"io"
	"net"
	"os"
	"time"

	"github.com/vmbusd/vmbusd/vmbus"
)

// stream is one transport's connection; Conn adds addresses and error
// wrapping. Errors are bare sentinels (io.EOF, net.ErrClosed,
// os.ErrDeadlineExceeded, syscall errnos, *wire.FrameError, *vmbus.CorruptError).
type stream interface {
	Read(b []byte) (int, error)
	Write(b []byte) (int, error)
	Close() error
	CloseRead() error
	CloseWrite() error
	SetReadDeadline(t time.Time) error
	SetWriteDeadline(t time.Time) error
	stats() ConnStats
}

// Conn is an hv_sock connection. It implements net.Conn: Read and Write may
// be called from different goroutines at once, and every method is safe for
// concurrent use. Errors are *net.OpError wrapping net.ErrClosed (after
// Close, or a Write ended by CloseWrite), os.ErrDeadlineExceeded (a
// deadline passed), syscall.EPIPE (write after CloseWrite, or the host has
// gone), or why the host broke the
// connection; Read returns io.EOF itself at the end of the stream.
type Conn struct {
	s             stream
	local, remote *Addr
}

var _ net.Conn = (*Conn)(nil)

func (c *Conn) opErr(op string, err error) error {
	if err == nil || err == io.EOF {
		return err
	}
	if errors.Is(err, os.ErrClosed) {
		err = net.ErrClosed
	}
	return &net.OpError{Op: op, Net: c.local.Network(), Source: c.local, Addr: c.remote, Err: err}
}

// Read reads data the host sent. It returns io.EOF once the host has shut
// its side (its FIN, or the channel's rescind) and every byte before it has
// been read, and after CloseRead.
func (c *Conn) Read(b []byte) (int, error) {
	n, err := c.s.Read(b)
	return n, c.opErr("read", err)
}

// Write sends b and returns once all of it is queued to the host, or with
// the count queued before the error. Bytes a Write reported as written are
// delivered before the FIN of CloseWrite or Close.
func (c *Conn) Write(b []byte) (int, error) {
	n, err := c.s.Write(b)
	return n, c.opErr("write", err)
}

// Close sends FIN and waits for the host to finish its side of the
// connection (its FIN and the rescind of the channel) for at most the
// configured linger, then resets the connection locally. Blocked Reads and
// Writes return net.ErrClosed at once; data the host still sends is
// discarded. Close never blocks longer than the linger, and only the first
// call lingers: a Close made while it does returns its result at once, one
// made after it returned fails with net.ErrClosed.
func (c *Conn) Close() error { return c.opErr("close", c.s.Close()) }

// CloseWrite sends FIN: the host reads the end of the stream once it has
// read everything written before. A Write in progress returns at once with
// what it queued and net.ErrClosed; later Writes fail with EPIPE. Reading
// continues.
func (c *Conn) CloseWrite() error { return c.opErr("close", c.s.CloseWrite()) }

// CloseRead shuts the reading side locally: a Read waiting for data and
// every later Read return io.EOF. The host is not told (the protocol has
// no such message).
func (c *Conn) CloseRead() error { return c.opErr("close", c.s.CloseRead()) }

// LocalAddr returns (CIDAny, local port) on Hyper-V.
func (c *Conn) LocalAddr() net.Addr { return c.local }

// RemoteAddr returns (CIDHost, host port).
func (c *Conn) RemoteAddr() net.Addr { return c.remote }

// SetDeadline sets both deadlines.
func (c *Conn) SetDeadline(t time.Time) error {
	if err := c.s.SetReadDeadline(t); err != nil {
		return c.opErr("set", err)
	}
	return c.opErr("set", c.s.SetWriteDeadline(t))
}

// SetReadDeadline implements net.Conn.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.opErr("set", c.s.SetReadDeadline(t)) }

// SetWriteDeadline implements net.Conn.
func (c *Conn) SetWriteDeadline(t time.Time) error { return c.opErr("set", c.s.SetWriteDeadline(t)) }

// ErrRingsFixed is returned by SetReadBuffer and SetWriteBuffer: the ring
// sizes are chosen in the Config before the connection exists; VMBus cannot
// resize a ring of an open channel.
var ErrRingsFixed = errors.New("hvsock: ring sizes are fixed once connected; set them in the Config")

// SetReadBuffer and SetWriteBuffer exist for code written against
// *net.TCPConn; on an established hv_sock connection they always fail with
// ErrRingsFixed.
func (c *Conn) SetReadBuffer(int) error  { return c.opErr("set", ErrRingsFixed) }
func (c *Conn) SetWriteBuffer(int) error { return c.opErr("set", ErrRingsFixed) }

// ConnStats are a connection's counters, read at any time.
type ConnStats struct {
	BytesRead, BytesWritten     uint64 // payload bytes
	PacketsRead, PacketsWritten uint64 // data and FIN packets (VMBus transport)
	// Discarded counts bytes dropped unread: after CloseRead, or sent by
	// the host while Close waited for it.
	Discarded   uint64
	FINSent     bool
	FINReceived bool
	// Reset reports that Close gave up waiting for the host (linger).
	Reset bool
	// SendRingSize and RecvRingSize are the rings in use, header page
	// included (VMBus transport).
	SendRingSize, RecvRingSize int
	// Channel and Interrupts are the VMBus channel's counters: packets,
	// commits, signals raised to the host, wake-ups (VMBus transport).
	Channel    vmbus.ChannelStats
	Interrupts uint64
}

// Stats returns the connection's counters.
func (c *Conn) Stats() ConnStats { return c.s.stats() }

// RingSizes returns the send and receive ring sizes in use (header page
// included); 0, 0 on the kernel transport, where the kernel chose them.
func (c *Conn) RingSizes() (send, recv int) {
	st := c.s.stats()
	return st.SendRingSize, st.RecvRingSize
}
