package hvsockhost

// hv_sock host endpoints (docs/protocol/hvsock.md; OpenVMM vmbus_server hvsock.rs and its
// hybrid vsock relay are the model).
//
// # One channel per connection
//
// Every hv_sock connection is its own VMBus channel, offered by the host and
// rescinded by the host once both directions are done. In the simulator each
// offer is a device, added with AddDevice and bound to uio_hv_generic, which
// a guest opens through its R/dev/uioN socket. What a real offer carries
// maps onto the sysfs tree as follows:
//
//	offer field                     sysfs (R/sys/bus/vmbus/devices/<instance>/)
//	if_type (service id)            class_id            real attribute
//	if_instance (endpoint id)       device_id           real attribute (and the directory name)
//	chn_flags (0x2011: TLNPI ...)   chn_flags           simulator-only, "0x2011"
//	user_def[0] is_for_guest_accept is_for_guest_accept simulator-only, "1" host-initiated, "0" guest-initiated
//	monitor_allocated = 0           no monitor_id       real (hv_sock channels are not monitored)
//	                                device = 0x10       real (HV_UNKNOWN, hv_get_dev_type)
//
// The two simulator-only attributes are the least a guest needs: the flag
// tells an hv_sock channel (whose opener chooses the ring sizes) from any
// other device, and the direction tells a listener's offer from a dialer's
// when both use the same port (Linux reads both from the offer message,
// which no sysfs attribute shows). Directions:
//
//	guest-initiated   class_id = service of the host port H, device_id = template of the guest's local port L, accept 0
//	host-initiated    class_id = service of the guest port G, device_id = random endpoint E (remote port = Data1(E)), accept 1
//
// Because hv_sock channels are not monitored, the guest signals the host
// with write(1) on the uio fd, which needs a 6.10+ kernel profile; on the
// legacy profile the simulator cannot offer them.
//
// # Guest-initiated connects: R/dev/vmbus-tl (simulator-only)
//
// A guest's connect is one VMBus control message, which only a kernel can
// post. Its stand-in is a SOCK_SEQPACKET socket at R/dev/vmbus-tl taking the
// message exactly as on the bus: 40 bytes (u32 type 21, u32 padding, guest
// endpoint GUID, host service GUID, wire byte order), or the 56-byte v2 form
// with a silo id. The host answers as Hyper-V does:
//
//	accept   offer the channel (a new device); no message
//	refuse   the 44-byte CHANNELMSG_TL_CONNECT_RESULT, status 0xC0000236, on the same socket
//
// Other messages are violations and are dropped. At most
// MaxPendingConnects requests are in progress; beyond that the host stops
// reading requests (OpenVMM's back-pressure at 16).
//
// # Timing rules
//
//   - Guest-initiated: the host waits GuestOpenTimeout (OpenVMM: 5 s) for the
//     guest to open the offered channel, then rescinds it. The host-side
//     endpoint (an in-process listener's backlog slot, or a connection to
//     a Unix socket) is secured when the guest opens, before the open is
//     accepted; if that fails the open is refused (no hello) and the offer
//     rescinded.
//   - Host-initiated: the host waits HostConnectTimeout (OpenVMM hybrid
//     listener: 2 s) for the guest to open, then rescinds; a guest without a
//     listener simply never opens.
//   - Rescind: once the host has sent its FIN and read the guest's, or the
//     guest closed the channel, or the guest broke the protocol, or the
//     host application closed and the guest then sent data (its socket
//     would fail with EPIPE). The guest can still read what is in its ring.
//
// # Host-side Unix socket front end (hybrid vsock)
//
// With SocketBase B set, ordinary programs reach guests and are reached:
//
//   - host to guest: connect to the stream socket B, write "CONNECT <port>\n"
//     (or "CONNECT <service GUID>\n"; prefix case-insensitive); on success the
//     host answers "OK <n>\n", n = Data1 of the endpoint id (the guest sees
//     it as the remote port; "OK <GUID>\n" for the GUID form), and relays
//     bytes both ways, half-closes included. On failure it closes the socket.
//   - guest to host: a connect to host port P goes to the in-process
//     listener on P if there is one, else to a program listening on the
//     Unix socket B_P, else B_<service GUID>; else it is refused.
//
// socat UNIX-CONNECT:B - after typing "CONNECT 2761" talks to a guest
// listening on port 2761; socat UNIX-LISTEN:B_2762,fork ... serves guest
// connects to port 2762.

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vmbusd/vmbusd/clock"
	"github.com/vmbusd/vmbusd/hvsock/wire"
	"github.com/vmbusd/vmbusd/sim/bus"
	"github.com/vmbusd/vmbusd/vmbus"
)

// Config configures the hv_sock host.
type Config struct {
	// SocketBase is the Unix socket front end path B (see above); "" means
	// no front end, only the in-process API.
	SocketBase string
	// ChunkSize is the most payload the host puts in one packet; 0 means
	// OpenVMM's 2048. At most wire.MTU.
	ChunkSize int
	// GuestOpenTimeout bounds the wait for the guest to open a channel it
	// asked for (OpenVMM: 5 s).
	GuestOpenTimeout time.Duration
	// HostConnectTimeout bounds a host-initiated connect (OpenVMM hybrid
	// listener: 2 s).
	HostConnectTimeout time.Duration
	// Clock times GuestOpenTimeout and HostConnectTimeout (nil: the real
	// clock), so that a test can hold an offer for as long as it looks at
	// it and then expire it.
	Clock clock.Clock
	// MaxPendingConnects bounds guest connect requests in progress
	// (OpenVMM: 16).
	MaxPendingConnects int
	// Backlog bounds an in-process listener's unaccepted connections
	// (go-winio listens with 16).
	Backlog int
}

// Defaults of Config.
const (
	DefaultHvSockChunk        = 2048
	DefaultGuestOpenTimeout   = 5 * time.Second
	DefaultHostConnectTimeout = 2 * time.Second
	DefaultMaxPendingConnects = 16
	DefaultHvSockBacklog      = 16
)

// Stats are the hv_sock side's counters.
type Stats struct {
	Requests     uint64 // guest connect requests taken
	Refused      uint64 // refused with a TL_CONNECT_RESULT
	Offers       uint64 // channels offered (both directions)
	OpenTimeouts uint64 // offers rescinded because the guest never opened them
	Rescinds     uint64 // connection channels rescinded
	Violations   uint64 // guest protocol violations on hv_sock channels or requests
}

// Host is the simulated host's hv_sock side: the R/dev/vmbus-tl server, the
// front end, in-process listeners and connects. Safe for concurrent use.
type Host struct {
	host *bus.Host
	cfg  Config
	log  *slog.Logger

	tl, front *net.UnixListener
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	pending   chan struct{} // outstanding guest connect requests

	mu        sync.Mutex
	listeners map[uint32]*Listener
	tlConns   map[*net.UnixConn]struct{}
	closed    bool

	offerDelay atomic.Int64

	requests, refused, offers, openTimeouts, rescinds, violations atomic.Uint64
}

// Start starts the hv_sock host on h: R/dev/vmbus-tl and, with SocketBase,
// the front end. Close it before closing h.
func Start(h *bus.Host, cfg Config) (*Host, error) {
	if h.Profile().RequiresMonitor() {
		return nil, fmt.Errorf("sim: hv_sock channels are not monitored, and kernel profile %s cannot signal them from user space", h.Profile())
	}
	if cfg.ChunkSize == 0 {
		cfg.ChunkSize = DefaultHvSockChunk
	}
	if cfg.ChunkSize < 0 || cfg.ChunkSize > wire.MTU {
		return nil, fmt.Errorf("sim: hv_sock chunk size %d: want 1..%d", cfg.ChunkSize, wire.MTU)
	}
	if cfg.GuestOpenTimeout <= 0 {
		cfg.GuestOpenTimeout = DefaultGuestOpenTimeout
	}
	if cfg.HostConnectTimeout <= 0 {
		cfg.HostConnectTimeout = DefaultHostConnectTimeout
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.MaxPendingConnects <= 0 {
		cfg.MaxPendingConnects = DefaultMaxPendingConnects
	}
	if cfg.Backlog <= 0 {
		cfg.Backlog = DefaultHvSockBacklog
	}
	hv := &Host{host: h, cfg: cfg, log: h.Logger().With("service", "hvsock"),
		pending:   make(chan struct{}, cfg.MaxPendingConnects),
		listeners: map[uint32]*Listener{}, tlConns: map[*net.UnixConn]struct{}{}}
	hv.ctx, hv.cancel = context.WithCancel(h.Context())
	path := filepath.Join(h.Root(), wire.ConnectNode)
	var err error
	if hv.tl, err = listenUnix("unixpacket", path); err != nil {
		return nil, err
	}
	if cfg.SocketBase != "" {
		if hv.front, err = listenUnix("unix", cfg.SocketBase); err != nil {
			hv.tl.Close()
			return nil, err
		}
		hv.wg.Add(1)
		go hv.runFront()
	}
	hv.wg.Add(1)
	go hv.runTL()
	hv.log.Info("hv_sock host started", "tl", path, "front", cfg.SocketBase, "chunk", cfg.ChunkSize)
	return hv, nil
}

// listenUnix listens on path, replacing a stale socket file.
func listenUnix(network, path string) (*net.UnixListener, error) {
	if st, err := os.Lstat(path); err == nil && st.Mode().Type() == os.ModeSocket {
		os.Remove(path)
	}
	ln, err := net.ListenUnix(network, &net.UnixAddr{Name: path, Net: network})
	if err != nil {
		return nil, fmt.Errorf("sim: hv_sock: %w", err)
	}
	return ln, nil
}

// Config returns the configuration in use, defaults filled in.
func (hv *Host) Config() Config { return hv.cfg }

// Stats returns the counters.
func (hv *Host) Stats() Stats {
	return Stats{Requests: hv.requests.Load(), Refused: hv.refused.Load(), Offers: hv.offers.Load(),
		OpenTimeouts: hv.openTimeouts.Load(), Rescinds: hv.rescinds.Load(), Violations: hv.violations.Load()}
}

// SetOfferDelay delays the offer that answers each guest connect request
// from now on (a slow host; with a delay beyond the guest's connect
// timeout, the late offer the guest must ignore).
func (hv *Host) SetOfferDelay(d time.Duration) { hv.offerDelay.Store(int64(d)) }

// Close stops taking requests and connects and closes the listeners.
// Connections already made live on until they end or their devices are
// rescinded (bus.Host.Close rescinds every device).
func (hv *Host) Close() error {
	hv.mu.Lock()
	if hv.closed {
		hv.mu.Unlock()
		return nil
	}
	hv.closed = true
	ls := make([]*Listener, 0, len(hv.listeners))
	for _, l := range hv.listeners {
		ls = append(ls, l)
	}
	for c := range hv.tlConns {
		c.Close()
	}
	hv.mu.Unlock()
	hv.cancel()
	for _, l := range ls {
		l.Close()
	}
	hv.tl.Close()
	os.Remove(filepath.Join(hv.host.Root(), wire.ConnectNode))
	if hv.front != nil {
		hv.front.Close()
	}
	hv.wg.Wait()
	hv.log.Info("hv_sock host stopped")
	return nil
}

// violation counts a guest's protocol violation on the hv_sock side.
func (hv *Host) violation(dev vmbus.GUID, what string) {
	hv.violations.Add(1)
	hv.host.Violation(dev, "hv_sock: "+what)
}

// runTL accepts R/dev/vmbus-tl connections, one goroutine each.
func (hv *Host) runTL() {
	hv.acceptLoop(hv.tl, "connect-request loop", func(c *net.UnixConn) {
		hv.tlConns[c] = struct{}{}
	}, hv.serveTL)
}

// acceptLoop accepts on ln until it is closed, handing each connection to
// serve on its own goroutine (which must call hv.wg.Done). track, when
// not nil, runs under hv.mu before serve starts; a connection arriving
// after Close is dropped.
func (hv *Host) acceptLoop(ln *net.UnixListener, what string, track func(*net.UnixConn), serve func(*net.UnixConn)) {
	defer hv.wg.Done()
	hv.log.Debug("hv_sock "+what+" started", "socket", ln.Addr().String())
	defer hv.log.Debug("hv_sock "+what+" stopped", "socket", ln.Addr().String())
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		hv.mu.Lock()
		if hv.closed {
			hv.mu.Unlock()
			c.Close()
			continue
		}
		if track != nil {
			track(c)
		}
		hv.wg.Add(1)
		hv.mu.Unlock()
		go serve(c)
	}
}

// serveTL reads connect requests from one guest socket. It takes the next
// request only once a pending slot is free: the back-pressure.
func (hv *Host) serveTL(c *net.UnixConn) {
	defer hv.wg.Done()
	defer func() {
		hv.mu.Lock()
		delete(hv.tlConns, c)
		hv.mu.Unlock()
		c.Close()
	}()
	var reqs sync.WaitGroup
	defer reqs.Wait()
	buf := make([]byte, 128)
	for {
		select {
		case hv.pending <- struct{}{}:
		case <-hv.ctx.Done():
			return
		}
		n, err := c.Read(buf)
		if err != nil || n == 0 {
			<-hv.pending
			return
		}
		req, err := wire.ParseConnectRequest(buf[:n])
		if err != nil {
			<-hv.pending
			hv.violation(vmbus.GUID{}, err.Error())
			continue
		}
		hv.requests.Add(1)
		reqs.Add(1)
		go func() {
			defer reqs.Done()
			defer func() { <-hv.pending }()
			hv.guestConnect(c, req)
		}()
	}
}

// refuse answers a request with STATUS_CONNECTION_REFUSED.
func (hv *Host) refuse(c *net.UnixConn, req wire.ConnectRequest, why string) {
	hv.refused.Add(1)
	res := wire.ConnectResult{Endpoint: req.Endpoint, Service: req.Service, Status: wire.StatusConnectionRefused}
	c.Write(res.Marshal())
	hv.log.Debug("hv_sock connect refused", "service", req.Service.String(), "endpoint", req.Endpoint.String(), "why", why)
}

// guestConnect handles one request: find the host endpoint, offer the
// channel, and wait for the guest to open it.
func (hv *Host) guestConnect(c *net.UnixConn, req wire.ConnectRequest) {
	o := &hvOffer{hv: hv, service: req.Service, endpoint: req.Endpoint,
		opened: make(chan struct{}), refused: make(chan struct{})}
	if port, ok := wire.ServicePort(req.Service); ok {
		hv.mu.Lock()
		o.listener = hv.listeners[port]
		hv.mu.Unlock()
		if o.listener == nil && hv.cfg.SocketBase != "" {
			o.unixPath = socketIfExists(hv.cfg.SocketBase + "_" + strconv.FormatUint(uint64(port), 10))
		}
	}
	if o.listener == nil && o.unixPath == "" && hv.cfg.SocketBase != "" {
		o.unixPath = socketIfExists(hv.cfg.SocketBase + "_" + req.Service.String())
	}
	if o.listener == nil && o.unixPath == "" {
		hv.refuse(c, req, "no listener")
		return
	}
	if d := time.Duration(hv.offerDelay.Load()); d > 0 {
		select {
		case <-time.After(d):
		case <-hv.ctx.Done():
			return
		}
	}
	dev, err := hv.offer(o, false)
	if err != nil {
		hv.refuse(c, req, err.Error())
		return
	}
	t := hv.cfg.Clock.NewTimer(hv.cfg.GuestOpenTimeout)
	defer t.Stop()
	select {
	case <-o.opened:
	case <-o.refused:
		hv.log.Info("hv_sock open refused, rescinding", "device", dev.Instance().String())
		hv.rescind(dev)
	case <-t.C():
		hv.openTimeouts.Add(1)
		hv.log.Info("hv_sock offer not opened in time, rescinding", "device", dev.Instance().String())
		hv.rescind(dev)
	case <-hv.ctx.Done():
	}
}

func socketIfExists(path string) string {
	if st, err := os.Stat(path); err == nil && st.Mode().Type() == os.ModeSocket {
		return path
	}
	return ""
}

// offer adds the device of one connection.
func (hv *Host) offer(o *hvOffer, fromHost bool) (*bus.Device, error) {
	o.fromHost = fromHost
	dev, err := hv.host.AddDevice(bus.DeviceConfig{
		Class: o.service, Instance: o.endpoint,
		HvSock: true, HvSockForGuestAccept: fromHost, NotMonitored: true,
		Service: o, Admit: o.admit,
	})
	if err != nil {
		return nil, err
	}
	hv.offers.Add(1)
	return dev, nil
}

// rescind takes a connection's channel away, asynchronously: the caller
// may be inside the device's session, which the rescind waits for.
//
// It is not tracked by hv.wg: it may start while Close waits, and it ends
// on its own (Rescind is idempotent, and bus.Host.Close rescinds every
// device).
func (hv *Host) rescind(d *bus.Device) {
	go func() {
		if d.Rescinded() {
			return
		}
		hv.rescinds.Add(1)
		if err := d.Rescind(); err != nil {
			hv.log.Warn("hv_sock rescind", "device", d.Instance().String(), "err", err)
		}
	}()
}

// Connect connects the host to a guest listening on port (host-initiated,
// docs/protocol/hvsock.md §1.2): it offers a channel for the port's service with a
// random endpoint id and returns once the guest has opened it. A guest that
// does not open it within HostConnectTimeout (no listener, backlog full)
// gets the offer rescinded, and Connect fails with ETIMEDOUT.
func (hv *Host) Connect(ctx context.Context, port uint32) (*Conn, error) {
	return hv.ConnectService(ctx, wire.ServiceID(port))
}

// ConnectService is Connect for any service GUID (Linux guests ignore
// offers whose service id does not follow the port template).
func (hv *Host) ConnectService(ctx context.Context, service vmbus.GUID) (*Conn, error) {
	if hv.ctx.Err() != nil {
		return nil, net.ErrClosed
	}
	o := &hvOffer{hv: hv, service: service, endpoint: randomGUID(), opened: make(chan struct{}),
		refused: make(chan struct{}), ready: make(chan *Conn, 1)}
	dev, err := hv.offer(o, true)
	if err != nil {
		return nil, err
	}
	t := hv.cfg.Clock.NewTimer(hv.cfg.HostConnectTimeout)
	defer t.Stop()
	var fail error
	select {
	case c := <-o.ready:
		return c, nil
	case <-t.C():
		fail = syscall.ETIMEDOUT
	case <-ctx.Done():
		fail = ctx.Err()
	case <-hv.ctx.Done():
		fail = net.ErrClosed
	}
	select {
	case <-o.opened:
		// The guest opened just now: the connection is on its way.
		select {
		case c := <-o.ready:
			return c, nil
		case <-hv.ctx.Done():
		}
	default:
		hv.openTimeouts.Add(1)
	}
	hv.rescind(dev)
	return nil, fmt.Errorf("sim: hv_sock connect to %s: %w", service, fail)
}

func randomGUID() vmbus.GUID {
	var g vmbus.GUID
	rand.Read(g[:])
	g[6] = g[6]&0x0f | 0x40
	g[8] = g[8]&0x3f | 0x80
	return g
}

// hvOffer is one connection's device from offer to the end of its session:
// its Service and its Admit hook.
type hvOffer struct {
	hv                *Host
	service, endpoint vmbus.GUID
	fromHost          bool
	opened            chan struct{} // closed when the guest's open is admitted
	refused           chan struct{} // closed when it is not
	admitted          atomic.Bool

	// Guest-initiated: where the host end goes.
	listener *Listener
	unixPath string
	unixConn net.Conn
	// Host-initiated: the connection, for Connect.
	ready chan *Conn
}

// admit is the host accepting the guest's open: once only, and for a
// guest-initiated connection only if the host endpoint can be had now
// (OpenVMM connects the Unix socket before accepting the open).
func (o *hvOffer) admit() error {
	if !o.admitted.CompareAndSwap(false, true) {
		return errors.New("sim: hv_sock channel opened a second time")
	}
	var err error
	switch {
	case o.listener != nil:
		if !o.listener.reserve() {
			err = errors.New("sim: hv_sock listener backlog full or closed")
		}
	case o.unixPath != "":
		var c net.Conn
		if c, err = net.DialTimeout("unix", o.unixPath, o.hv.cfg.HostConnectTimeout); err == nil {
			o.unixConn = c
		} else {
			err = fmt.Errorf("sim: hv_sock: connect %s: %w", o.unixPath, err)
		}
	}
	if err != nil {
		close(o.refused) // the offer is dropped at once
		return err
	}
	close(o.opened)
	return nil
}

// Serve runs while the guest has the channel open: it hands the host end
// to its owner, and when the session ends makes sure the host end no
// longer touches the rings and the device is rescinded.
func (o *hvOffer) Serve(ctx context.Context, s *bus.Session) error {
	c := newHvSockConn(o, s)
	switch {
	case o.ready != nil:
		o.ready <- c
	case o.listener != nil:
		o.listener.push(c)
	case o.unixConn != nil:
		// The relay ends with the connection; like rescind it is not
		// tracked by hv.wg.
		go relay(o.unixConn, c)
	}
	<-ctx.Done()
	c.detach()
	o.hv.rescind(s.Device())
	return nil
}

// Listener takes guest connects to one host port in process. Safe for
// concurrent use.
type Listener struct {
	hv       *Host
	port     uint32
	queue    chan *Conn
	mu       sync.Mutex
	reserved int
	closed   bool
	done     chan struct{}
}

// Listen makes port reachable for guest connects; each connection is
// returned by Accept. A port with a listener takes precedence over the
// front end's Unix sockets.
func (hv *Host) Listen(port uint32) (*Listener, error) {
	hv.mu.Lock()
	defer hv.mu.Unlock()
	if hv.closed {
		return nil, net.ErrClosed
	}
	if hv.listeners[port] != nil {
		return nil, fmt.Errorf("sim: hv_sock port %d: %w", port, syscall.EADDRINUSE)
	}
	l := &Listener{hv: hv, port: port, queue: make(chan *Conn, hv.cfg.Backlog), done: make(chan struct{})}
	hv.listeners[port] = l
	return l, nil
}

// reserve takes a backlog slot for a connection being opened.
func (l *Listener) reserve() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || len(l.queue)+l.reserved >= cap(l.queue) {
		return false
	}
	l.reserved++
	return true
}

// push queues a connection whose slot was reserved.
func (l *Listener) push(c *Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reserved--
	if l.closed {
		go c.Close()
		return
	}
	l.queue <- c
}

// Accept implements net.Listener.
func (l *Listener) Accept() (net.Conn, error) { return l.AcceptHvSock() }

// AcceptHvSock waits for the next guest connection.
func (l *Listener) AcceptHvSock() (*Conn, error) {
	select {
	case c := <-l.queue:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops listening; queued connections are closed.
func (l *Listener) Close() error {
	l.hv.mu.Lock()
	if l.hv.listeners[l.port] == l {
		delete(l.hv.listeners, l.port)
	}
	l.hv.mu.Unlock()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	close(l.done)
	l.mu.Unlock()
	for {
		select {
		case c := <-l.queue:
			go c.Close()
			continue
		default:
		}
		return nil
	}
}

// Addr returns the host port as a *wire.Addr (CIDHost).
func (l *Listener) Addr() net.Addr {
	return &wire.Addr{ContextID: wire.CIDHost, Port: l.port}
}
