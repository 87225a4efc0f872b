package hvsock

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Listener accepts connections the host makes to a guest port. It
// implements net.Listener; every method is safe for concurrent use.
type Listener struct {
	addr   *Addr
	accept func() (*Conn, error)
	close  func() error
}

var _ net.Listener = (*Listener)(nil)

// Listen listens on port with the default Config. PortAny picks a free
// port (see Addr).
func Listen(port uint32) (*Listener, error) {
	var c Config
	return c.Listen(port)
}

// Listen listens on port with c's settings; the connections it accepts use
// c's ring sizes, chunk size and linger.
func (c *Config) Listen(port uint32) (*Listener, error) {
	cfg := *c
	tr := cfg.transport()
	opErr := func(err error) error {
		return &net.OpError{Op: "listen", Net: (&Addr{Transport: tr}).Network(),
			Addr: &Addr{ContextID: CIDAny, Port: port, Transport: tr}, Err: err}
	}
	if err := cfg.check(); err != nil {
		return nil, opErr(err)
	}
	var l *Listener
	var err error
	if tr == TransportKernel {
		l, err = listenKernel(&cfg, port)
	} else {
		l, err = listenVMBus(&cfg, port)
	}
	if err != nil {
		return nil, opErr(err)
	}
	return l, nil
}

// Accept waits for the next connection; it returns a *Conn.
func (l *Listener) Accept() (net.Conn, error) { return l.AcceptHvsock() }

// AcceptHvsock is Accept returning the concrete type.
func (l *Listener) AcceptHvsock() (*Conn, error) {
	c, err := l.accept()
	if err != nil {
		return nil, &net.OpError{Op: "accept", Net: l.addr.Network(), Addr: l.addr, Err: err}
	}
	return c, nil
}

// Close stops listening. Accept returns net.ErrClosed; connections made but
// not yet accepted are closed.
func (l *Listener) Close() error {
	if err := l.close(); err != nil {
		return &net.OpError{Op: "close", Net: l.addr.Network(), Addr: l.addr, Err: err}
	}
	return nil
}

// Addr returns (CIDAny, port).
func (l *Listener) Addr() net.Addr { return l.addr }

// vmbusListener takes host-initiated offers for its service id (interface
// ServiceID(port), is_for_guest_accept 1) and opens each with its ring
// sizes (hvs_open_connection for a listening socket). With the backlog full
// an offer is left unopened, and the host gives up on it.
type vmbusListener struct {
	cfg      Config
	port     uint32
	snd, rcv int
	queue    chan *Conn
	pending  atomic.Int32 // opens in progress
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	unwatch  func()
	release  func()
	once     sync.Once
}

// openTimeout bounds a listener's open of an offered channel (the host
// gives up after 2 s; docs/protocol/hvsock.md §1.2).
const openTimeout = 5 * time.Second

func listenVMBus(cfg *Config, port uint32) (*Listener, error) {
	root := cfg.root()
	var release func()
	var err error
	if port == PortAny {
		port, release, err = ephemeralPort(root)
	} else {
		release, err = reservePort(root, port)
	}
	if err != nil {
		return nil, err
	}
	l := &vmbusListener{cfg: *cfg, port: port, queue: make(chan *Conn, cfg.backlog()), release: release}
	l.snd, l.rcv = cfg.RingSizes()
	l.ctx, l.cancel = context.WithCancel(context.Background())
	svc := ServiceID(port)
	l.unwatch = watch(root, cfg.logger(), &subscriber{
		match:   func(o offer) bool { return o.forGuestAccept && o.class == svc },
		deliver: l.deliver,
	})
	cfg.logger().Debug("hvsock: listening", "port", port, "root", root)
	return &Listener{addr: &Addr{ContextID: CIDAny, Port: port, Transport: TransportVMBus},
		accept: l.accept, close: l.close}, nil
}

// deliver runs on the watcher's goroutine: it must not block.
func (l *vmbusListener) deliver(o offer) {
	if l.ctx.Err() != nil {
		return
	}
	if len(l.queue)+int(l.pending.Load()) >= cap(l.queue) {
		l.cfg.logger().Warn("hvsock: accept backlog full, offer ignored", "port", l.port, "device", o.instance.String())
		return
	}
	l.pending.Add(1)
	l.wg.Add(1)
	go l.open(o)
}

func (l *vmbusListener) open(o offer) {
	defer l.wg.Done()
	defer l.pending.Add(-1)
	ctx, cancel := context.WithTimeout(l.ctx, openTimeout)
	defer cancel()
	h, err := openOffer(ctx, &l.cfg, o, l.snd, l.rcv)
	if err != nil {
		l.cfg.logger().Warn("hvsock: cannot open offered connection", "port", l.port, "device", o.instance.String(), "err", err)
		return
	}
	c := &Conn{s: newVMBusStream(h, o.instance.String(), &l.cfg, l.snd, l.rcv),
		local:  &Addr{ContextID: CIDAny, Port: l.port, Transport: TransportVMBus},
		remote: &Addr{ContextID: CIDHost, Port: o.remotePort(), Transport: TransportVMBus}}
	select {
	case l.queue <- c:
	default:
		go c.Close() // cannot happen: the backlog counted this open
	}
}

func (l *vmbusListener) accept() (*Conn, error) {
	select {
	case c := <-l.queue:
		return c, nil
	case <-l.ctx.Done():
	}
	// Closed: connections that raced the close are still handed out, so
	// none is leaked; then net.ErrClosed.
	select {
	case c := <-l.queue:
		return c, nil
	default:
		return nil, net.ErrClosed
	}
}

func (l *vmbusListener) close() error {
	first := false
	l.once.Do(func() {
		first = true
		l.cancel()
		l.unwatch()
		l.wg.Wait()
		l.release()
		for {
			select {
			case c := <-l.queue:
				go c.Close() // FIN and linger in the background
				continue
			default:
			}
			break
		}
	})
	if !first {
		return net.ErrClosed
	}
	return nil
}
