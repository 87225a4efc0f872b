package connlimit

import (
	"net"
	"sync"
	"sync/atomic"
)

// Refusal reasons.
const (
	ReasonTotal     = "total"      // Config.Max connections are open
	ReasonPerClient = "per_client" // Config.PerClient connections of this client are open
)

// Config tunes New.
type Config struct {
	// Max is the connections open at once (at least 1).
	Max int
	// PerClient bounds one client's connections (0: no per-client limit).
	PerClient int
	// Client names a connection's client ("" when unknown: only Max
	// applies). nil: no per-client limit.
	Client func(net.Conn) string
	// OnRefuse is called (from Accept) for each connection closed
	// unserved, before it is closed.
	OnRefuse func(c net.Conn, client, reason string)
}

// Listener is a net.Listener with limits. Safe for concurrent use.
type Listener struct {
	net.Listener
	cfg Config

	mu       sync.Mutex
	active   int
	byClient map[string]int

	accepted atomic.Uint64
	refused  [2]atomic.Uint64 // by reason: total, per client
}

// New wraps ln.
func New(ln net.Listener, cfg Config) *Listener {
	cfg.Max = max(cfg.Max, 1)
	return &Listener{Listener: ln, cfg: cfg, byClient: map[string]int{}}
}

// Accept returns the next connection within the limits; the others are
// closed unserved. A connection's slot is freed when it is closed.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		client := ""
		if l.cfg.Client != nil && l.cfg.PerClient > 0 {
			client = l.cfg.Client(c)
		}
		reason := ""
		l.mu.Lock()
		switch {
		case l.active >= l.cfg.Max:
			reason = ReasonTotal
		case client != "" && l.byClient[client] >= l.cfg.PerClient:
			reason = ReasonPerClient
		default:
			l.active++
			if client != "" {
				l.byClient[client]++
			}
		}
		l.mu.Unlock()
		if reason == "" {
			l.accepted.Add(1)
			return &conn{Conn: c, l: l, client: client}, nil
		}
		if reason == ReasonTotal {
			l.refused[0].Add(1)
		} else {
			l.refused[1].Add(1)
		}
		if l.cfg.OnRefuse != nil {
			l.cfg.OnRefuse(c, client, reason)
		}
		c.Close()
	}
}

func (l *Listener) release(client string) {
	l.mu.Lock()
	l.active--
	if client != "" {
		if l.byClient[client]--; l.byClient[client] <= 0 {
			delete(l.byClient, client)
		}
	}
	l.mu.Unlock()
}

// Stats are a Listener's counters.
type Stats struct {
	Active           int
	Accepted         uint64
	RefusedTotal     uint64 // closed unserved: Max reached
	RefusedPerClient uint64 // closed unserved: the client's PerClient reached
}

// Stats returns the counters.
func (l *Listener) Stats() Stats {
	l.mu.Lock()
	active := l.active
	l.mu.Unlock()
	return Stats{Active: active, Accepted: l.accepted.Load(), RefusedTotal: l.refused[0].Load(), RefusedPerClient: l.refused[1].Load()}
}

type conn struct {
	net.Conn
	l      *Listener
	client string
	once   sync.Once
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.client) })
	return err
}

// NetConn returns the accepted connection (for peer credentials).
func (c *conn) NetConn() net.Conn { return c.Conn }
