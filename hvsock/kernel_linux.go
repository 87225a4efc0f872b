package hvsock

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The kernel transport: AF_VSOCK stream sockets, which a stock Linux guest
// on Hyper-V carries over VMBus with its hv_sock module (hyperv_transport.c)
// — the framing, ring rules and close handshake are then the kernel's. The
// Hyper-V rules of the address family apply (docs/protocol/hvsock.md
// §1.1): the guest
// binds and listens on VMADDR_CID_ANY, connects only to VMADDR_CID_HOST, and
// a port stands for the service GUID ServiceID(port). The sockets are
// non-blocking and wait in the Go netpoller, so deadlines work as on any
// *os.File.

// kernelStream is one AF_VSOCK connection. CloseRead and CloseWrite
// wake a Read or Write waiting in the netpoller by moving its deadline into
// the past: a socket shut for writing does not report itself writable
// (vsock_poll raises EPOLLOUT only while sending is allowed, unlike TCP),
// so nothing else would end that wait, and once a side is shut no later
// call on it reaches the poller, so its deadline no longer matters.
type kernelStream struct {
	f                      *os.File
	rc                     syscall.RawConn
	bytesRead, bytesWritte atomic.Uint64
	readShut, writeShut    atomic.Bool
	closed                 atomic.Bool
	gate                   closeGate
}

// past is a deadline that has passed: setting it wakes a blocked call.
var past = time.Unix(1, 0)

func newKernelStream(fd int) (*kernelStream, error) {
	f := os.NewFile(uintptr(fd), "vsock")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &kernelStream{f: f, rc: rc}, nil
}

// err maps an *os.File error to the bare sentinel Conn wraps. A file
// closed under a blocked call reports poll's "use of closed file", which
// no exported error matches: the stream's own flag tells.
func (s *kernelStream) err(err error) error {
	if err != nil && err != io.EOF && s.closed.Load() {
		return net.ErrClosed
	}
	return kernelErr(err)
}

// kernelErr maps an *os.File error to the bare sentinel Conn wraps.
func kernelErr(err error) error {
	switch {
	case err == nil, err == io.EOF:
		return err
	case errors.Is(err, os.ErrClosed), errors.Is(err, fs.ErrClosed):
		return net.ErrClosed
	case errors.Is(err, os.ErrDeadlineExceeded):
		return os.ErrDeadlineExceeded
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func (s *kernelStream) Read(b []byte) (int, error) {
	if s.readShut.Load() {
		return 0, io.EOF
	}
	n, err := s.f.Read(b)
	s.bytesRead.Add(uint64(n))
	switch {
	case err == nil || err == io.EOF || s.closed.Load():
	case errors.Is(err, unix.ENOTCONN):
		err = io.EOF // mdlayher/vsock: a reset stream reads as its end
	case s.readShut.Load():
		err = io.EOF // CloseRead woke this Read
	}
	return n, s.err(err)
}

func (s *kernelStream) Write(b []byte) (int, error) {
	if s.writeShut.Load() && !s.closed.Load() {
		return 0, syscall.EPIPE
	}
	n, err := s.f.Write(b)
	s.bytesWritte.Add(uint64(n))
	if err != nil && s.writeShut.Load() {
		err = net.ErrClosed // CloseWrite ended this Write
	}
	return n, s.err(err)
}

// Close closes the socket; the kernel's hv_sock does the close handshake
// and its linger after close(2) has returned, so the result is decided at
// once and a concurrent Close returns it.
func (s *kernelStream) Close() error {
	return s.gate.close(func() error {
		s.closed.Store(true)
		return kernelErr(s.f.Close())
	}, nil)
}

func (s *kernelStream) shutdown(how int) error {
	var serr error
	if err := s.rc.Control(func(fd uintptr) { serr = unix.Shutdown(int(fd), how) }); err != nil {
		return s.err(err)
	}
	return serr
}

func (s *kernelStream) CloseRead() error {
	if s.closed.Load() {
		return net.ErrClosed
	}
	s.readShut.Store(true)
	err := s.shutdown(unix.SHUT_RD)
	s.f.SetReadDeadline(past)
	return err
}

func (s *kernelStream) CloseWrite() error {
	if s.closed.Load() {
		return net.ErrClosed
	}
	s.writeShut.Store(true)
	err := s.shutdown(unix.SHUT_WR)
	s.f.SetWriteDeadline(past)
	return err
}

func (s *kernelStream) SetReadDeadline(t time.Time) error  { return s.err(s.f.SetReadDeadline(t)) }
func (s *kernelStream) SetWriteDeadline(t time.Time) error { return s.err(s.f.SetWriteDeadline(t)) }

func (s *kernelStream) stats() ConnStats {
	return ConnStats{BytesRead: s.bytesRead.Load(), BytesWritten: s.bytesWritte.Load(),
		FINSent: s.writeShut.Load()}
}

// vsockSocket creates a non-blocking AF_VSOCK stream socket with the
// configured buffer sizes. hv_sock sizes its rings from sk_sndbuf and
// sk_rcvbuf, which Linux sets to twice the value given, so half of each
// ring size is passed (docs/protocol/hvsock.md §1.4; a client socket's
// values may be reset at connect by kernels since 5.5, open question 1
// there).
func vsockSocket(cfg *Config) (int, error) {
	fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, os.NewSyscallError("socket", err)
	}
	for _, o := range []struct{ opt, size int }{{unix.SO_SNDBUF, cfg.SendRingSize}, {unix.SO_RCVBUF, cfg.RecvRingSize}} {
		if o.size == 0 {
			continue
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, o.opt, ClampRingSize(o.size)/2); err != nil {
			unix.Close(fd)
			return -1, os.NewSyscallError("setsockopt", err)
		}
	}
	return fd, nil
}

func vsockAddr(sa unix.Sockaddr) *Addr {
	a := &Addr{Transport: TransportKernel}
	if vm, ok := sa.(*unix.SockaddrVM); ok {
		a.ContextID, a.Port = vm.CID, vm.Port
	}
	return a
}

// dialKernel connects to (CIDHost, port).
func dialKernel(ctx context.Context, cfg *Config, port uint32, timeout time.Duration) (*Conn, error) {
	fd, err := vsockSocket(cfg)
	if err != nil {
		return nil, err
	}
	err = unix.Connect(fd, &unix.SockaddrVM{CID: CIDHost, Port: port})
	if err != nil && err != unix.EINPROGRESS && err != unix.EINTR {
		unix.Close(fd)
		return nil, os.NewSyscallError("connect", err)
	}
	s, err := newKernelStream(fd)
	if err != nil {
		return nil, err
	}
	if err := s.waitConnected(ctx, timeout); err != nil {
		s.f.Close()
		return nil, err
	}
	var local unix.Sockaddr
	s.rc.Control(func(fd uintptr) { local, _ = unix.Getsockname(int(fd)) })
	return &Conn{s: s, local: vsockAddr(local),
		remote: &Addr{ContextID: CIDHost, Port: port, Transport: TransportKernel}}, nil
}

// waitConnected waits in the netpoller for a non-blocking connect to end.
func (s *kernelStream) waitConnected(ctx context.Context, timeout time.Duration) error {
	s.f.SetWriteDeadline(time.Now().Add(timeout))
	stop := context.AfterFunc(ctx, func() { s.f.SetWriteDeadline(time.Unix(1, 0)) })
	defer stop()
	var cerr error
	err := s.rc.Write(func(fd uintptr) bool {
		v, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR)
		if err != nil {
			cerr = os.NewSyscallError("getsockopt", err)
			return true
		}
		if v != 0 {
			cerr = syscall.Errno(v)
			return true
		}
		if _, err := unix.Getpeername(int(fd)); err == unix.ENOTCONN {
			return false // still connecting
		}
		return true
	})
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, os.ErrDeadlineExceeded):
		return syscall.ETIMEDOUT
	case err != nil:
		return kernelErr(err)
	case cerr != nil:
		return cerr
	}
	s.f.SetWriteDeadline(time.Time{})
	return nil
}

// listenKernel binds (CIDAny, port) and listens.
func listenKernel(cfg *Config, port uint32) (*Listener, error) {
	fd, err := vsockSocket(cfg)
	if err != nil {
		return nil, err
	}
	if err := unix.Bind(fd, &unix.SockaddrVM{CID: CIDAny, Port: port}); err != nil {
		unix.Close(fd)
		return nil, os.NewSyscallError("bind", err)
	}
	if err := unix.Listen(fd, cfg.backlog()); err != nil {
		unix.Close(fd)
		return nil, os.NewSyscallError("listen", err)
	}
	ls, err := newKernelStream(fd)
	if err != nil {
		return nil, err
	}
	var local unix.Sockaddr
	ls.rc.Control(func(fd uintptr) { local, _ = unix.Getsockname(int(fd)) })
	addr := vsockAddr(local)
	accept := func() (*Conn, error) {
		var nfd int
		var sa unix.Sockaddr
		var aerr error
		err := ls.rc.Read(func(fd uintptr) bool {
			nfd, sa, aerr = unix.Accept4(int(fd), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
			return aerr != unix.EAGAIN
		})
		if err != nil {
			return nil, ls.err(err)
		}
		if aerr != nil {
			return nil, os.NewSyscallError("accept4", aerr)
		}
		s, err := newKernelStream(nfd)
		if err != nil {
			return nil, err
		}
		return &Conn{s: s, local: addr, remote: vsockAddr(sa)}, nil
	}
	return &Listener{addr: addr, accept: accept, close: ls.Close}, nil
}
