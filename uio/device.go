//go:build linux

package uio

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vmbusd/vmbusd/rawio"
)

// Options tune Open.
type Options struct {
	// RingSizes, when either is non-zero, is sent right after connect as
	// the 8-byte first message (u32 outbound, u32 inbound ring size in
	// bytes, little-endian). Only the simulator's hv_sock channel devices
	// take it (docs/uio-contract.md §7.3); on a character device it is an error.
	RingSizes [2]uint32

	// HelloTimeout bounds the wait for the simulator's hello (connect
	// included). Zero means DefaultHelloTimeout.
	HelloTimeout time.Duration

	// Prefault names maps (matched as Info.MapByName matches, so "recv:"
	// is the receive buffer) whose every page Open maps writable at once
	// (madvise MADV_POPULATE_WRITE, best effort) instead of at its first
	// touch. A buffer used a section at a time otherwise takes a page
	// fault for each page the first time it is used, 15-30 µs each on a
	// machine with nested paging, on the data path.
	Prefault []string
}

// prefaults reports whether Open prefaults map m.
func (o Options) prefaults(m Map) bool {
	for _, name := range o.Prefault {
		if m.Name == name || (strings.HasSuffix(name, ":") && strings.HasPrefix(m.Name, name)) {
			return true
		}
	}
	return false
}

// DefaultHelloTimeout is how long Open waits for the simulator's hello.
// The simulator opens the channel before sending it, which may involve a
// slow host reply, so it is generous.
const DefaultHelloTimeout = 5 * time.Second

// maxDrain bounds the reads of one drain, so that a flood of interrupts
// cannot keep a waiter spinning; what is left is read by the next call.
const maxDrain = 64

// pollConn is what a Device needs of its node: *os.File for the character
// device and *net.UnixConn for the simulator's socket. Reads go through the
// RawConn so they wait in the Go netpoller.
type pollConn interface {
	SyscallConn() (syscall.RawConn, error)
	SetReadDeadline(t time.Time) error
	Write(b []byte) (int, error)
	Close() error
}

// Device is an opened UIO device: its maps, mmapped, and its interrupt
// node. It is safe for concurrent use, except that only one goroutine may
// read the interrupt count (Wait or Poll) at a time. The zero value is not
// usable; get one from Open.
//
// The map slices stay valid until Close. Close unmaps them, so every user
// of the slices must be done with them before Close is called.
type Device struct {
	info Info
	path string
	sim  bool
	conn pollConn
	rc   syscall.RawConn
	// msgLen is the read size: exactly 4 on the character device (uio
	// rejects anything else), larger on the socket so that an over-long
	// message is noticed rather than silently truncated.
	msgLen int

	count  atomic.Uint32 // last cumulative count seen
	closed atomic.Bool

	// irqWords are the two irqcontrol messages (0 and 1), kept in the
	// Device so that a write through the conn interface does not move a
	// stack buffer to the heap on every host signal. Never written after
	// open, so concurrent IRQControl calls share them.
	irqWords [2][4]byte

	// The reader's state (one reader at a time): the drain callback is
	// bound once so that a read allocates nothing, and the cancellation of
	// the last context Wait saw stays registered across Waits (the
	// interrupt loop waits with one context for the device's lifetime).
	dr    drain
	wmu   sync.Mutex // guards wctx and wstop (Close stops the registration)
	wctx  context.Context
	wstop func() bool

	mu   sync.Mutex // guards mems and maps
	mems [][]byte   // the mappings as mmapped, for munmap
	maps [][]byte   // mems trimmed to the sysfs sizes

	closeOnce sync.Once
	closeErr  error
}

// newDevice wraps an opened node and its mappings (mems in map order).
// On error it closes conn and unmaps mems.
func newDevice(info Info, path string, conn pollConn, sim bool, mems [][]byte) (*Device, error) {
	rc, err := conn.SyscallConn()
	if err != nil {
		conn.Close()
		munmapAll(mems)
		return nil, fmt.Errorf("uio: open %s: %w", path, err)
	}
	d := &Device{info: info, path: path, sim: sim, conn: conn, rc: rc, msgLen: 4, mems: mems}
	if sim {
		d.msgLen = 8
	}
	d.irqWords[1][0] = 1 // little-endian u32 1
	d.dr.d = d
	d.dr.fn = d.dr.run
	d.maps = make([][]byte, len(mems))
	for i, m := range mems {
		d.maps[i] = trimMap(m, info.Maps[i].Size)
	}
	return d, nil
}

// Info returns the sysfs description the Device was opened with.
func (d *Device) Info() Info {
	i := d.info
	i.Maps = append([]Map(nil), i.Maps...)
	return i
}

// Simulated reports whether the node is the simulator's socket rather than
// the kernel's character device.
func (d *Device) Simulated() bool { return d.sim }

// Maps returns every map, in index order, each as long as its sysfs size.
// The memory is shared with the host (MAP_SHARED) and valid until Close;
// after Close, Maps returns nil.
func (d *Device) Maps() [][]byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([][]byte(nil), d.maps...)
}

// Map returns the map named name, matched as Info.MapByName does, or nil
// when there is none or the Device is closed.
func (d *Device) Map(name string) []byte {
	m, ok := d.info.MapByName(name)
	if !ok {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if m.Index >= len(d.maps) {
		return nil
	}
	return d.maps[m.Index]
}

// Count returns the last cumulative interrupt count seen by Wait or Poll
// (0 before the first).
func (d *Device) Count() uint32 { return d.count.Load() }

// Wait blocks until the cumulative interrupt count differs from the last one
// this Device saw, then returns the newest count. It reads every queued
// notification before returning, so several coalesced interrupts give one
// wake-up. It waits in the Go netpoller, not on a thread.
//
// Wait returns ctx.Err() when ctx ends first, an error wrapping ErrRescinded
// when the device goes away, and one matching os.ErrClosed and net.ErrClosed
// when the Device is closed, also while Wait is blocked. With an error, the
// count returned is still the newest seen (notifications read before a
// rescind count).
func (d *Device) Wait(ctx context.Context) (uint32, error) {
	if d.closed.Load() {
		return d.count.Load(), d.closedErr("wait")
	}
	if err := ctx.Err(); err != nil {
		return d.count.Load(), err
	}
	d.watch(ctx)
	for {
		c, changed, err := d.read("wait", true)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if cerr := ctx.Err(); cerr != nil {
				return c, cerr
			}
			// An earlier context's cancellation, or ours before its
			// Err is visible: clear the deadline and wait on.
			d.conn.SetReadDeadline(time.Time{})
			continue
		}
		if err != nil || changed {
			return c, err
		}
	}
}

// watch makes ctx's cancellation expire the read deadline, which wakes the
// netpoller. The registration is kept for the next Wait with the same ctx.
func (d *Device) watch(ctx context.Context) {
	d.wmu.Lock()
	defer d.wmu.Unlock()
	if ctx.Done() == nil || ctx == d.wctx {
		return
	}
	if d.wstop != nil {
		d.wstop()
	}
	d.wctx = ctx
	// AfterFunc runs f on its own goroutine, possibly after a later
	// watch replaced ctx (stop cannot recall an f already started): only
	// the context still watched may expire the deadline, so a stale
	// cancellation cannot fail the Poll or Wait that follows.
	d.wstop = context.AfterFunc(ctx, func() {
		d.wmu.Lock()
		defer d.wmu.Unlock()
		if d.wctx == ctx {
			d.conn.SetReadDeadline(time.Unix(1, 0))
		}
	})
}

// Poll reads every queued notification without blocking and returns the
// newest count and whether it differs from the last one seen. Errors are
// those of Wait.
func (d *Device) Poll() (count uint32, changed bool, err error) {
	if d.closed.Load() {
		return d.count.Load(), false, d.closedErr("poll")
	}
	c, changed, err := d.read("poll", false)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// A context an earlier Wait watched was cancelled since.
		d.conn.SetReadDeadline(time.Time{})
		c, changed, err = d.read("poll", false)
	}
	return c, changed, err
}

// read drains queued notifications (at most maxDrain) and, when block is
// set and none of them changed the count, waits in the netpoller for more.
// A deadline expiry is returned as os.ErrDeadlineExceeded, unwrapped.
func (d *Device) read(op string, block bool) (count uint32, changed bool, err error) {
	r := &d.dr
	r.block, r.last, r.got, r.ioErr = block, d.count.Load(), false, nil
	r.newest = r.last
	pollErr := d.rc.Read(r.fn)
	newest, last, ioErr := r.newest, r.last, r.ioErr
	if r.got {
		d.count.Store(newest)
	}
	changed = r.got && newest != last
	switch {
	case d.closed.Load() && (pollErr != nil || ioErr != nil):
		return newest, changed, d.closedErr(op)
	case errors.Is(pollErr, os.ErrDeadlineExceeded):
		return newest, changed, os.ErrDeadlineExceeded
	case pollErr != nil:
		// The netpoller reports an EPOLLERR-only event as "not
		// pollable" without calling us; on /dev/uioN that is the
		// rescind (uio_poll; docs/protocol/vmbus-ring.md §1.5).
		return newest, changed, fmt.Errorf("uio: %s %s: %w (%w)", op, d.path, ErrRescinded, pollErr)
	case ioErr != nil:
		return newest, changed, d.ioError(op, ioErr)
	}
	return newest, changed, nil
}

// drain is one read's state; run is called by the netpoller with the fd
// and reads every queued count, keeping the newest.
type drain struct {
	d            *Device
	fn           func(fd uintptr) bool
	block, got   bool
	last, newest uint32
	ioErr        error
	buf          [8]byte
}

func (r *drain) run(fd uintptr) bool {
	for range maxDrain {
		n, err := rawio.Read(int(fd), r.buf[:r.d.msgLen])
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return !r.block || (r.got && r.newest != r.last)
		case err != nil:
			r.ioErr = err
			return true
		case n == 0:
			r.ioErr = io.EOF // the socket's peer closed it
			return true
		case n != 4:
			r.ioErr = fmt.Errorf("notification of %d bytes, want 4", n)
			return true
		}
		r.newest, r.got = binary.LittleEndian.Uint32(r.buf[:4]), true
	}
	return true
}

// IRQControl writes the 4-byte irqcontrol value, 1 to enable interrupts or
// 0 to disable them. What that does depends on the kernel (docs/protocol/vmbus-ring.md
// §1.4): 1 also signals the host on a channel without a monitor.
func (d *Device) IRQControl(enable bool) error {
	if d.closed.Load() {
		return d.closedErr("irqcontrol")
	}
	b := d.irqWords[0][:]
	if enable {
		b = d.irqWords[1][:]
	}
	if _, err := d.conn.Write(b); err != nil {
		return d.ioError("irqcontrol", err)
	}
	return nil
}

// Close unmaps every map and closes the node, which closes the channel
// (the last close of /dev/uioN; docs/protocol/vmbus-ring.md §1.6). A Wait blocked in
// another goroutine returns an error matching os.ErrClosed and
// net.ErrClosed. Close is idempotent: later calls return the first result.
func (d *Device) Close() error {
	d.closeOnce.Do(func() {
		d.closed.Store(true)
		d.wmu.Lock()
		if d.wstop != nil {
			d.wstop()
		}
		d.wmu.Unlock()
		err := d.conn.Close()
		d.mu.Lock()
		mems := d.mems
		d.mems, d.maps = nil, nil
		d.mu.Unlock()
		if uerr := munmapAll(mems); err == nil {
			err = uerr
		}
		if err != nil {
			d.closeErr = fmt.Errorf("uio: close %s: %w", d.path, err)
		}
	})
	return d.closeErr
}

func (d *Device) closedErr(op string) error {
	return fmt.Errorf("uio: %s %s: %w", op, d.path, errClosed)
}

// ioError classifies an error from reading or writing the node.
func (d *Device) ioError(op string, err error) error {
	if d.closed.Load() {
		return d.closedErr(op)
	}
	if isRescind(err) {
		return fmt.Errorf("uio: %s %s: %w (%w)", op, d.path, ErrRescinded, err)
	}
	return fmt.Errorf("uio: %s %s: %w", op, d.path, err)
}

// isRescind reports whether err means the device is gone: EIO from
// /dev/uioN after a rescind (uio.c uio_read/uio_write; docs/protocol/vmbus-ring.md §1.9),
// ENODEV once the device is unregistered, and end-of-file, ECONNRESET or
// EPIPE on the simulator's socket (docs/uio-contract.md §3.5).
func isRescind(err error) bool {
	for _, e := range []error{unix.EIO, unix.ENODEV, unix.ECONNRESET, unix.EPIPE, io.EOF} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
