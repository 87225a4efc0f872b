package forward

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vmbusd/vmbusd/internal/connlimit"
)

// Reason says why a forwarded connection ended.
type Reason string

// Reasons a connection closes.
const (
	ReasonOpen        Reason = ""               // still forwarding
	ReasonDone        Reason = "done"           // both directions ended with a clean end of stream
	ReasonDialFailed  Reason = "dial failed"    // the dial side could not be reached
	ReasonClientError Reason = "client error"   // reading from or writing to the accepted connection failed
	ReasonUpstreamErr Reason = "upstream error" // reading from or writing to the dialed connection failed
	ReasonCanceled    Reason = "canceled"       // the forwarder's context ended
)

// Forwarder forwards the connections of Listener to what Dial opens. Set
// the fields, then call Serve; after Serve returns it may be given a new
// Listener and served again, keeping its counters. The counters are safe to read from any
// goroutine at any time.
type Forwarder struct {
	// Name labels the forwarder's logs.
	Name string
	// Listener is the accept side. Serve closes it when it returns.
	Listener net.Listener
	// Dial opens the dial side for one accepted connection. ctx carries
	// DialTimeout and ends with the forwarder.
	Dial func(ctx context.Context) (net.Conn, error)
	// DialTimeout bounds each Dial; 0 means DefaultDialTimeout.
	DialTimeout time.Duration
	// KeepClosed is how many closed connections' records Closed returns;
	// 0 means DefaultKeepClosed.
	KeepClosed int
	// BufferSize is each direction's copy buffer; 0 means 64 KiB.
	BufferSize int
	// MaxConnections bounds the connections forwarded at once; more are
	// closed as they are accepted, and counted (0: no limit).
	MaxConnections int
	// Logger receives a line per connection; nil discards them.
	Logger *slog.Logger

	mu       sync.Mutex
	nextID   uint64
	active   map[uint64]*conn
	closed   []Stats // the most recent, oldest first
	accepted atomic.Uint64
	failed   atomic.Uint64 // dials that failed
	refused  atomic.Uint64 // closed unserved: MaxConnections reached
	doneIn   atomic.Uint64 // bytes of closed connections
	doneOut  atomic.Uint64
	byReason map[Reason]uint64 // closed connections by reason, under mu
}

// Defaults of Forwarder.
const (
	DefaultDialTimeout = 10 * time.Second
	DefaultKeepClosed  = 64
)

// Stats describe one forwarded connection.
type Stats struct {
	ID       uint64
	Client   string // the accepted connection's remote address
	Upstream string // the dialed connection's remote address; "" until dialed
	Opened   time.Time
	Closed   time.Time // zero while open
	// BytesIn went from the client to the upstream, BytesOut back.
	BytesIn, BytesOut uint64
	// InDone and OutDone report directions that ended cleanly (and were
	// half-closed on the other side).
	InDone, OutDone bool
	Reason          Reason
	Err             string // the error behind Reason, if any
}

// Totals sum every connection the forwarder has handled.
type Totals struct {
	Accepted    uint64 // connections accepted
	DialFailed  uint64 // of which the dial side could not be reached
	Refused     uint64 // closed unserved: MaxConnections were forwarding
	Active      int    // forwarding now
	BytesIn     uint64 // client to upstream, closed and active connections
	BytesOut    uint64
	ClosedKept  int // records Closed returns
	LastClosure time.Time
	// ClosedBy counts every closed connection by reason.
	ClosedBy map[Reason]uint64
}

// conn is one connection's live state; the counters are atomics so that
// Stats can read them while the copies run.
type conn struct {
	id               uint64
	client, upstream atomic.Pointer[string]
	opened           time.Time
	in, out          atomic.Uint64
	inDone, outDone  atomic.Bool
}

func (c *conn) stats() Stats {
	s := Stats{ID: c.id, Opened: c.opened, BytesIn: c.in.Load(), BytesOut: c.out.Load(),
		InDone: c.inDone.Load(), OutDone: c.outDone.Load()}
	if p := c.client.Load(); p != nil {
		s.Client = *p
	}
	if p := c.upstream.Load(); p != nil {
		s.Upstream = *p
	}
	return s
}

func (f *Forwarder) log() *slog.Logger {
	if f.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return f.Logger.With("forward", f.Name)
}

// Serve accepts connections and forwards each on its own goroutines until
// ctx ends (then it closes the listener and every connection, and returns
// nil) or Accept fails (then it returns that error once the connections
// already accepted have ended; net.ErrClosed if the listener was closed).
func (f *Forwarder) Serve(ctx context.Context) error {
	if f.Listener == nil || f.Dial == nil {
		return errors.New("forward: Listener and Dial are required")
	}
	log := f.log()
	f.mu.Lock()
	if f.active == nil {
		f.active = map[uint64]*conn{}
	}
	f.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ln := f.Listener
	if f.MaxConnections > 0 {
		ln = connlimit.New(ln, connlimit.Config{Max: f.MaxConnections, OnRefuse: func(c net.Conn, _, _ string) {
			f.refused.Add(1)
			log.Warn("connection refused: too many connections", "limit", f.MaxConnections, "client", c.RemoteAddr().String())
		}})
	}
	stop := context.AfterFunc(ctx, func() { f.Listener.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	log.Info("forwarding", "listen", f.Listener.Addr().String())
	defer log.Info("forwarding stopped", "listen", f.Listener.Addr().String())
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			f.Listener.Close()
			return fmt.Errorf("forward %s: %w", f.Name, err)
		}
		f.accepted.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.forward(ctx, c)
		}()
	}
}

// forward runs one connection to its end and records it.
func (f *Forwarder) forward(ctx context.Context, client net.Conn) {
	c := &conn{opened: time.Now()}
	addr := client.RemoteAddr().String()
	c.client.Store(&addr)
	f.mu.Lock()
	f.nextID++
	c.id = f.nextID
	f.active[c.id] = c
	f.mu.Unlock()

	reason, err := f.run(ctx, c, client)
	f.finish(c, reason, err)
}

// run dials, splices and closes; it returns why the connection ended.
func (f *Forwarder) run(ctx context.Context, c *conn, client net.Conn) (Reason, error) {
	defer client.Close()
	timeout := f.DialTimeout
	if timeout <= 0 {
		timeout = DefaultDialTimeout
	}
	dctx, dcancel := context.WithTimeout(ctx, timeout)
	up, err := f.Dial(dctx)
	dcancel()
	if err != nil {
		f.failed.Add(1)
		if ctx.Err() != nil {
			return ReasonCanceled, ctx.Err()
		}
		return ReasonDialFailed, err
	}
	defer up.Close()
	ua := up.RemoteAddr().String()
	c.upstream.Store(&ua)

	var once sync.Once
	var reason Reason
	var failure error
	abort := func(r Reason, err error) {
		once.Do(func() {
			reason, failure = r, err
			client.Close()
			up.Close()
		})
	}
	stop := context.AfterFunc(ctx, func() { abort(ReasonCanceled, ctx.Err()) })
	defer stop()
	size := f.BufferSize
	if size <= 0 {
		size = 64 << 10
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		if r, err := pipe(up, client, &c.in, size); err != nil {
			abort(r.flip(ReasonClientError, ReasonUpstreamErr), err)
			return
		}
		c.inDone.Store(true)
		if err := closeWrite(up); err != nil {
			abort(ReasonUpstreamErr, err)
		}
	}()
	go func() {
		defer wg.Done()
		if r, err := pipe(client, up, &c.out, size); err != nil {
			abort(r.flip(ReasonUpstreamErr, ReasonClientError), err)
			return
		}
		c.outDone.Store(true)
		if err := closeWrite(client); err != nil {
			abort(ReasonClientError, err)
		}
	}()
	wg.Wait()
	once.Do(func() { reason = ReasonDone })
	return reason, failure
}

// side says which end of a pipe failed: its source or its destination.
type side bool

const (
	srcFailed side = false
	dstFailed side = true
)

// flip returns src when the source failed, dst when the destination did.
func (s side) flip(src, dst Reason) Reason {
	if s == dstFailed {
		return dst
	}
	return src
}

// pipe copies src to dst until src's end of stream, counting into n.
func pipe(dst io.Writer, src io.Reader, n *atomic.Uint64, size int) (side, error) {
	buf := make([]byte, size)
	for {
		k, rerr := src.Read(buf)
		if k > 0 {
			w, werr := dst.Write(buf[:k])
			n.Add(uint64(w))
			if werr != nil {
				return dstFailed, werr
			}
		}
		if rerr == io.EOF {
			return srcFailed, nil
		}
		if rerr != nil {
			return srcFailed, rerr
		}
	}
}

// closeWrite passes an end of stream on: a half-close when the connection
// has one, else a full close (the other direction then ends too).
func closeWrite(c net.Conn) error {
	if hc, ok := c.(interface{ CloseWrite() error }); ok {
		return hc.CloseWrite()
	}
	return c.Close()
}

// finish moves a connection from active to closed.
func (f *Forwarder) finish(c *conn, reason Reason, err error) {
	s := c.stats()
	s.Closed, s.Reason = time.Now(), reason
	if err != nil && reason != ReasonDone {
		s.Err = err.Error()
	}
	keep := f.KeepClosed
	if keep <= 0 {
		keep = DefaultKeepClosed
	}
	f.mu.Lock()
	delete(f.active, c.id)
	f.closed = append(f.closed, s)
	if len(f.closed) > keep {
		f.closed = append(f.closed[:0:0], f.closed[len(f.closed)-keep:]...)
	}
	f.doneIn.Add(s.BytesIn)
	f.doneOut.Add(s.BytesOut)
	if f.byReason == nil {
		f.byReason = map[Reason]uint64{}
	}
	f.byReason[reason]++
	f.mu.Unlock()
	f.log().Info("connection closed", "id", s.ID, "client", s.Client, "upstream", s.Upstream,
		"in", s.BytesIn, "out", s.BytesOut, "reason", string(s.Reason), "err", s.Err,
		"duration", s.Closed.Sub(s.Opened).Round(time.Millisecond))
}

// Active returns the connections forwarding now, by id.
func (f *Forwarder) Active() []Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Stats, 0, len(f.active))
	for _, c := range f.active {
		out = append(out, c.stats())
	}
	slices.SortFunc(out, func(a, b Stats) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Closed returns the most recently closed connections, oldest first.
func (f *Forwarder) Closed() []Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Stats(nil), f.closed...)
}

// Totals returns the forwarder's sums.
func (f *Forwarder) Totals() Totals {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := Totals{Accepted: f.accepted.Load(), DialFailed: f.failed.Load(), Refused: f.refused.Load(), Active: len(f.active),
		BytesIn: f.doneIn.Load(), BytesOut: f.doneOut.Load(), ClosedKept: len(f.closed)}
	for _, c := range f.active {
		t.BytesIn += c.in.Load()
		t.BytesOut += c.out.Load()
	}
	if n := len(f.closed); n > 0 {
		t.LastClosure = f.closed[n-1].Closed
	}
	t.ClosedBy = maps.Clone(f.byReason)
	return t
}
