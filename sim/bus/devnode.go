package bus

// The R/dev/uioN socket server: the one piece of the uio contract that cannot
// be byte-for-byte (docs/uio-contract.md §3.2,
// contract version 1). One SOCK_SEQPACKET connection stands for one open of
// /dev/uioN:
//
//	guest                                        node
//	connect()  --------------------------------> accept (a second live connection:
//	                                             Violation, closed at once)
//	[u32 out, u32 in ring sizes] --------------> only for an hv_sock channel device
//	                                             Open(c, out, in) -> K map files
//	           <-------------------------------- "VMBUSUIO" u32 1, u32 K + SCM_RIGHTS(K fds)
//	           <-------------------------------- u32 cumulative interrupt count (Notify;
//	                                             at most one undelivered)
//	u32 irqcontrol (4 bytes) ------------------> Control(c, 0 or 1)
//	close() -----------------------------------> Closed(c): the last close
//	           <-------------------------------- EOF (nodeConn.Close, or node.Close = rescind)
//
// The interrupt count is the device's (uio_device.event): it starts at 0 when
// the node is created and keeps counting across connections, as the real
// count does across opens; a guest compares counts, it never assumes a start
// value (docs/protocol/vmbus-ring.md §1.5).

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	// uioContractVersion is the version in the hello message.
	uioContractVersion = 1
	// uioHelloMagic opens the hello message.
	uioHelloMagic = "VMBUSUIO"
	// uioHelloLen is the hello's data: magic, u32 version, u32 map count.
	uioHelloLen = len(uioHelloMagic) + 8
	// ringSizesLen is the hv_sock opener's first message: u32 out, u32 in.
	ringSizesLen = 8
	// connectGrace is how long a new connection waits for the previous one
	// to finish before it counts as a second concurrent connect. A guest
	// that closes and reopens can get its connect in before the old
	// socket is gone: Go's Close defers the close(2) while another
	// goroutine is still inside a Read on it.
	connectGrace = 100 * time.Millisecond
	// recvBufLen bounds what is read of one guest message; longer ones are
	// a violation anyway and their length is still reported (MSG_TRUNC).
	recvBufLen = 64
)

// nodeConfig configures a uio node. Path and Open are required.
//
// Open, Control and Closed run on the connection's goroutine and never
// concurrently with each other, also across connections: the Open of a new
// connection starts after the Closed of the previous one has returned.
// Violation may run concurrently with them.
type nodeConfig struct {
	// Path is R/dev/uioN; a SOCK_SEQPACKET listening socket is created
	// there, replacing whatever file was left at that path.
	Path string
	// WantRingSizes marks an hv_sock channel device: the guest speaks
	// first with 8 bytes, u32 outbound and u32 inbound ring size (LE).
	WantRingSizes bool
	// Open opens the channel for a new connection, after the ring-size
	// message when WantRingSizes (out and in are 0 otherwise; clamping
	// and alignment are the caller's business). It returns one file per
	// map in index order (at most five); the node sends them in the hello
	// and does not close them. An error closes the connection without a
	// hello, and Closed is not called for it.
	Open func(c *nodeConn, out, in uint32) ([]*os.File, error)
	// Control receives each 4-byte irqcontrol message: 0, or 1 for any
	// non-zero value (uio_write passes an s32 used as a boolean).
	// Messages that arrive after the connection was closed by the host
	// are dropped. May be nil.
	Control func(c *nodeConn, v uint32)
	// Closed is called once for each connection whose Open succeeded,
	// when it ends: the guest closed it (the last close), or the host
	// did (nodeConn.Close, node.Close). c is dead afterwards. May be nil.
	Closed func(c *nodeConn)
	// Violation is called when the guest breaks the contract: a second
	// concurrent connect, a message of the wrong size. The connection
	// carries on unless the message was the ring-size one. May be nil.
	Violation func(what string)
	// Logger receives the node's logs; nil discards them.
	Logger *slog.Logger
}

// node serves one R/dev/uioN socket. It is safe for concurrent use; the zero
// value is not usable (see listenNode).
type node struct {
	cfg   nodeConfig
	log   *slog.Logger
	ln    *net.UnixListener
	sock  os.FileInfo   // the socket file, so Close removes only its own
	count atomic.Uint32 // cumulative interrupt count of the device
	wg    sync.WaitGroup

	mu     sync.Mutex
	cur    *nodeConn // the open connection, if any
	closed bool
}

// listenNode creates the socket at cfg.Path (mode 0600, as /dev/uioN) and
// starts accepting connections.
func listenNode(cfg nodeConfig) (*node, error) {
	if cfg.Path == "" || cfg.Open == nil {
		return nil, errors.New("sim: uio node: Path and Open are required")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("node", cfg.Path)
	if err := os.Remove(cfg.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("sim: uio node: remove stale %s: %w", cfg.Path, err)
	}
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: cfg.Path, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("sim: uio node: %w", err)
	}
	ln.SetUnlinkOnClose(false) // Close removes it, first and only if still ours
	st, err := os.Lstat(cfg.Path)
	if err == nil {
		err = os.Chmod(cfg.Path, 0o600)
	}
	if err != nil {
		ln.Close()
		os.Remove(cfg.Path)
		return nil, fmt.Errorf("sim: uio node: %w", err)
	}
	n := &node{cfg: cfg, log: log, ln: ln, sock: st}
	n.wg.Add(1)
	go n.runAccept()
	return n, nil
}

// Close rescinds the node: the socket file is removed (new connects fail),
// the listener closed, and the open connection closed from this side (the
// guest reads EOF; its writes fail with EPIPE). Close waits until the
// connection's Closed callback has returned and the node's goroutines have
// exited, so it must not be called from a callback or with a lock a callback
// takes. It is idempotent.
func (n *node) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		n.wg.Wait()
		return nil
	}
	n.closed = true
	cur := n.cur
	n.mu.Unlock()

	var errs []error
	if st, err := os.Lstat(n.cfg.Path); err == nil && os.SameFile(st, n.sock) {
		if err := os.Remove(n.cfg.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := n.ln.Close(); err != nil {
		errs = append(errs, err)
	}
	if cur != nil {
		cur.Close()
	}
	n.wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sim: uio node %s: close: %w", n.cfg.Path, err)
	}
	return nil
}

func (n *node) violation(what string) {
	n.log.Warn("sim: uio node: guest broke the contract", "what", what)
	if n.cfg.Violation != nil {
		n.cfg.Violation(what)
	}
}

// runAccept accepts connections until the listener is closed.
func (n *node) runAccept() {
	defer n.wg.Done()
	n.log.Debug("sim: uio node: accept loop start")
	defer n.log.Debug("sim: uio node: accept loop stop")
	for {
		uc, err := n.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// E.g. EMFILE: back off instead of spinning.
			n.log.Warn("sim: uio node: accept", "err", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		n.admit(uc)
	}
}

// admit makes uc the open connection, or rejects it if another one is open.
func (n *node) admit(uc *net.UnixConn) {
	c, err := newNodeConn(n, uc)
	if err != nil {
		n.log.Warn("sim: uio node: accept", "err", err)
		return
	}
	n.mu.Lock()
	prev, closed := n.cur, n.closed
	n.mu.Unlock()
	if closed {
		c.discard()
		return
	}
	if prev != nil && !prev.waitGone(connectGrace) {
		n.violation(fmt.Sprintf("second concurrent connect (pid %d) while pid %d has the device open", c.pid, prev.pid))
		c.discard()
		return
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		c.discard()
		return
	}
	n.cur = c
	n.wg.Add(1)
	n.mu.Unlock()
	go n.runConn(c)
}

// runConn serves one connection: open, control messages, close.
func (n *node) runConn(c *nodeConn) {
	defer n.wg.Done()
	n.log.Debug("sim: uio node: connection start", "pid", c.pid)
	opened := c.open()
	if opened {
		c.readControls()
	}
	c.teardown(opened)
	n.log.Debug("sim: uio node: connection stop", "pid", c.pid, "opened", opened)
}

// nodeConn is one open of the device. It is safe for concurrent use.
type nodeConn struct {
	n *node
	// fd is the connection's socket, non-blocking and outside Go's
	// network poller (see newNodeConn). Only the connection's goroutine
	// reads from it and closes it (teardown, under mu, setting it to -1);
	// every other use holds mu and checks it is not -1.
	fd int
	// ep is an epoll instance of the connection's own with fd registered
	// for input only; it is in Go's poller, and the connection's
	// goroutine waits on it (epRaw) when fd has nothing to read.
	ep    *os.File
	epRaw syscall.RawConn
	pid   int
	done  chan struct{} // closed once the connection is finished (after Closed)

	// closing is set when the connection is going away: the host closed
	// it, or its goroutine is tearing it down.
	closing atomic.Bool

	// mu guards the sending side: the hello and the notifications.
	mu    sync.Mutex
	ready bool // the hello went out
	dead  bool // nothing more is sent
	// pending: Notify was called before the hello went out.
	pending bool
	// helloUnread: the hello may still sit unread in the guest's queue,
	// so unread output does not by itself mean an undelivered
	// notification; sentAfterHello: a notification was queued behind it.
	helloUnread, sentAfterHello bool

	// sendBuf is the notification being sent, guarded by mu.
	sendBuf [4]byte
	// recv*: recvRaw's callback, its argument and results, made once so
	// that an irqcontrol write costs no allocation; they belong to the
	// connection's goroutine.
	recvBuf []byte
	recvN   int
	recvErr error
	recvFn  func(uintptr) bool
}

// newNodeConn takes uc's socket out of Go's network poller: it keeps a
// duplicate of the descriptor and closes uc (which deregisters it). The
// poller registers a socket for input and output alike (edge-triggered),
// and every message the guest reads off its end frees send space here,
// which woke the poller for nothing: one thread wake-up per interrupt the
// guest takes. Instead the socket goes into an epoll instance of its own,
// for input only (EPOLLIN|EPOLLRDHUP), and that instance into Go's poller:
// it becomes ready only when an irqcontrol write or the end of the stream
// arrives, and the connection's goroutine still waits as a parked
// goroutine, not as a thread blocked in a system call (which must win a P
// back on every wake, and cost hv_sock's many signals dearly). Sends never
// block (MSG_DONTWAIT). uc is closed in all cases.
func newNodeConn(n *node, uc *net.UnixConn) (*nodeConn, error) {
	raw, err := uc.SyscallConn()
	if err != nil {
		uc.Close()
		return nil, err
	}
	fd := -1
	var cerr error
	var cred *unix.Ucred
	if err := raw.Control(func(ufd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(ufd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if cerr != nil {
			cerr = fmt.Errorf("SO_PEERCRED: %w", cerr)
			return
		}
		fd, cerr = unix.FcntlInt(ufd, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		uc.Close()
		return nil, err
	}
	if cerr != nil {
		uc.Close()
		if fd >= 0 {
			unix.Close(fd)
		}
		return nil, cerr
	}
	if err := uc.Close(); err != nil {
		unix.Close(fd)
		return nil, err
	}
	ep, err := inputPoller(fd)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	epRaw, err := ep.SyscallConn()
	if err != nil {
		ep.Close()
		unix.Close(fd)
		return nil, err
	}
	c := &nodeConn{n: n, fd: fd, ep: ep, epRaw: epRaw, pid: int(cred.Pid), done: make(chan struct{})}
	c.recvFn = c.recvOnce
	return c, nil
}

// inputPoller returns a new epoll instance, in Go's poller, with fd
// registered for input and the end of the stream only (level-triggered).
func inputPoller(fd int) (*os.File, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: int32(fd)}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("epoll_ctl: %w", err)
	}
	// Non-blocking, so that os.NewFile puts it in Go's poller.
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		return nil, err
	}
	return os.NewFile(uintptr(epfd), "uio-conn-epoll"), nil
}

// PeerPID returns the guest process's pid (SO_PEERCRED at connect time).
func (c *nodeConn) PeerPID() int { return c.pid }

// Count returns the device's cumulative interrupt count: every Notify on a
// live connection of this node so far, including earlier connections.
func (c *nodeConn) Count() uint32 { return c.n.count.Load() }

// Notify raises an interrupt: the count goes up by one and, unless a
// notification is still unread by the guest, a 4-byte message with the new
// count is sent. The guest therefore reads at most one stale value (the
// count when the queued message was sent) and then, at its next interrupt,
// the current one; interrupts raised while a message was queued are folded
// into that message's wake-up, as they happened before the guest read it.
// Interrupts raised during Open are announced by one message right after
// the hello. Notify never blocks; on a dead connection it does nothing.
func (c *nodeConn) Notify() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return
	}
	v := c.n.count.Add(1)
	if !c.ready {
		c.pending = true
		return
	}
	c.sendCountLocked(v)
}

// sendCountLocked sends v unless a notification is undelivered. The caller
// holds c.mu.
//
// Undelivered output is measured with SIOCOUTQ: for a unix socket it is
// the memory of sent messages the peer has not yet consumed. The hello is
// such a message too; until the queue has been seen empty once, one
// notification may be queued behind it.
func (c *nodeConn) sendCountLocked(v uint32) {
	binary.LittleEndian.PutUint32(c.sendBuf[:], v)
	serr := c.sendRaw()
	if errors.Is(serr, unix.EAGAIN) {
		serr = nil // full: skip, the next message carries the count
	}
	if serr != nil {
		// The guest is gone (EPIPE, ECONNRESET) or closing; the reader
		// sees the end of the stream and tears the connection down.
		c.n.log.Debug("sim: uio node: notify", "err", serr)
	}
}

// sendRaw is sendCountLocked's socket step, under c.mu. Both calls are raw
// system calls: neither blocks (sendto with MSG_DONTWAIT on a blocking
// socket), and a notification costs the simulated host no allocation.
func (c *nodeConn) sendRaw() error {
	if c.fd < 0 {
		return errConnDead
	}
	var q int32
	if _, _, e := unix.RawSyscall(unix.SYS_IOCTL, uintptr(c.fd), unix.SIOCOUTQ, uintptr(unsafe.Pointer(&q))); e != 0 {
		return fmt.Errorf("SIOCOUTQ: %w", e)
	}
	if q == 0 {
		c.helloUnread = false
	} else if !c.helloUnread || c.sentAfterHello {
		return nil // one is queued already; the count is cumulative
	}
	for {
		_, _, e := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(c.fd), uintptr(unsafe.Pointer(&c.sendBuf[0])), uintptr(len(c.sendBuf)),
			unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL, 0, 0)
		switch e {
		case 0:
			if c.helloUnread {
				c.sentAfterHello = true
			}
			return nil
		case unix.EINTR:
			continue
		}
		return e
	}
}

// Close drops this guest: it reads EOF and its writes fail; Closed follows
// from the connection's goroutine. Close does not wait and may be called
// from any callback. It is idempotent.
func (c *nodeConn) Close() {
	if c.closing.Swap(true) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dead = true
	// shutdown, not close: the guest sees a clean EOF (no ECONNRESET for
	// messages of its own still queued here), and the reader drains those
	// and then reads the end of the stream (its epoll instance wakes it).
	if c.fd >= 0 {
		unix.Shutdown(c.fd, unix.SHUT_RDWR)
	}
}

// waitGone waits for a previous connection to finish: without limit if it
// is already going away (the guest hung up or the host closed it), else up
// to grace. It reports whether the connection is finished.
func (c *nodeConn) waitGone(grace time.Duration) bool {
	if c.closing.Load() || c.hungUp() {
		<-c.done
		return true
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-c.done:
		return true
	case <-t.C:
		return false
	}
}

// hungUp reports whether the stream has ended in either direction: the
// guest closed or shut down its side, or this side was shut down.
func (c *nodeConn) hungUp() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fd < 0 {
		return true
	}
	p := []unix.PollFd{{Fd: int32(c.fd), Events: unix.POLLRDHUP}}
	for {
		k, err := unix.Poll(p, 0)
		if err == unix.EINTR {
			continue
		}
		return err == nil && k > 0 && p[0].Revents&(unix.POLLRDHUP|unix.POLLHUP) != 0
	}
}

// open runs the open handshake: the optional ring-size message, Open and the
// hello. It reports whether Open succeeded.
func (c *nodeConn) open() bool {
	var out, in uint32
	if c.n.cfg.WantRingSizes {
		var buf [recvBufLen]byte
		m, eof, err := c.recv(buf[:])
		if eof || err != nil || c.closing.Load() {
			return false
		}
		if m != ringSizesLen {
			c.n.violation(fmt.Sprintf("ring-size message of %d bytes, want %d", m, ringSizesLen))
			return false
		}
		out = binary.LittleEndian.Uint32(buf[0:4])
		in = binary.LittleEndian.Uint32(buf[4:8])
	}
	files, err := c.n.cfg.Open(c, out, in)
	if err != nil {
		c.n.log.Info("sim: uio node: open failed", "pid", c.pid, "err", err)
		return false
	}
	if err := c.sendHello(files); err != nil {
		c.n.log.Info("sim: uio node: hello not sent", "pid", c.pid, "err", err)
		c.mu.Lock()
		c.dead = true
		c.mu.Unlock()
	}
	return true
}

var errConnDead = errors.New("connection closed")

// sendHello sends the hello with one descriptor per map, then the count
// message for interrupts raised during Open, if any.
func (c *nodeConn) sendHello(files []*os.File) error {
	if len(files) > maxUIOMaps {
		return fmt.Errorf("%d maps, at most %d", len(files), maxUIOMaps)
	}
	var hello [uioHelloLen]byte
	copy(hello[:], uioHelloMagic)
	binary.LittleEndian.PutUint32(hello[8:12], uioContractVersion)
	binary.LittleEndian.PutUint32(hello[12:16], uint32(len(files)))
	var oob []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			if f == nil {
				return fmt.Errorf("map %d: nil file", i)
			}
			fds[i] = int(f.Fd())
		}
		oob = unix.UnixRights(fds...)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead || c.fd < 0 {
		return errConnDead
	}
	// The first message on the socket: it cannot find the queue full.
	_, err := unix.SendmsgN(c.fd, hello[:], oob, nil, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
	runtime.KeepAlive(files)
	if err != nil {
		return err
	}
	c.ready = true
	c.helloUnread = true
	if c.pending {
		c.pending = false
		c.sendCountLocked(c.n.count.Load())
	}
	return nil
}

// readControls delivers irqcontrol messages until the stream ends.
func (c *nodeConn) readControls() {
	var buf [recvBufLen]byte
	for {
		m, eof, err := c.recv(buf[:])
		if eof {
			return
		}
		if err != nil {
			if !c.closing.Load() {
				c.n.log.Warn("sim: uio node: read", "pid", c.pid, "err", err)
			}
			return
		}
		if c.closing.Load() {
			continue // after a rescind the real write fails with EIO
		}
		if m != 4 {
			c.n.violation(fmt.Sprintf("irqcontrol message of %d bytes, want 4", m))
			continue
		}
		v := binary.LittleEndian.Uint32(buf[:4])
		if v != 0 {
			v = 1
		}
		if c.n.cfg.Control != nil {
			c.n.cfg.Control(c, v)
		}
	}
}

// recv reads one message into buf and returns its full length, which may
// exceed len(buf) (the rest is discarded). eof reports the end of the
// stream: the guest closed, shut down or reset its side, or this side was
// shut down and everything queued has been read. A zero-length message is a
// violation and is skipped.
func (c *nodeConn) recv(buf []byte) (m int, eof bool, err error) {
	for {
		m, rerr := c.recvRaw(buf)
		switch {
		case rerr == unix.ECONNRESET:
			return 0, true, nil
		case rerr != nil:
			return 0, false, rerr
		case m == 0:
			// The end of the stream, or an empty message: only the
			// hang-up state tells them apart.
			if c.hungUp() {
				return 0, true, nil
			}
			if !c.closing.Load() {
				c.n.violation("zero-length message")
			}
			continue
		}
		return m, false, nil
	}
}

// recvRaw is recv's socket step, on the connection's goroutine, the only
// one that closes c.fd: a message, waiting on c.ep while there is none.
func (c *nodeConn) recvRaw(buf []byte) (int, error) {
	c.recvBuf = buf
	defer func() { c.recvBuf = nil }()
	c.recvN, c.recvErr = 0, nil
	if err := c.epRaw.Read(c.recvFn); err != nil {
		return 0, err
	}
	return c.recvN, c.recvErr
}

// recvOnce is recvRaw's callback (c.recvFn): one non-blocking recvfrom(2),
// false when there is nothing to read. It calls recvfrom itself:
// unix.Recvmsg returns the sender's address, which it allocates, and a
// connected socket's sender is known.
func (c *nodeConn) recvOnce(uintptr) bool {
	for {
		// MSG_TRUNC: return the message's real length.
		n, _, errno := unix.Syscall6(unix.SYS_RECVFROM, uintptr(c.fd), uintptr(unsafe.Pointer(&c.recvBuf[0])), uintptr(len(c.recvBuf)),
			unix.MSG_DONTWAIT|unix.MSG_TRUNC, 0, 0)
		switch errno {
		case 0:
			c.recvN = int(n)
			return true
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		}
		c.recvErr = errno
		return true
	}
}

// discard closes the connection's descriptors for good: for a connection
// that was never served (no goroutine reads it), or from teardown.
func (c *nodeConn) discard() {
	c.mu.Lock()
	c.dead = true
	c.ep.Close()
	unix.Close(c.fd)
	c.fd = -1
	c.mu.Unlock()
}

// teardown ends the connection on its goroutine: nothing more is sent, the
// socket is closed, Closed runs (if Open succeeded), and the node is free
// for the next connection.
func (c *nodeConn) teardown(opened bool) {
	c.closing.Store(true)
	c.discard()
	if opened && c.n.cfg.Closed != nil {
		c.n.cfg.Closed(c)
	}
	c.n.mu.Lock()
	if c.n.cur == c {
		c.n.cur = nil
	}
	c.n.mu.Unlock()
	close(c.done)
}
