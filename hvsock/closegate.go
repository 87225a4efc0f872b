package hvsock

import (
	"net"
	"sync"
)

// closeGate runs a connection's Close once and answers every other call
// without making it wait for the first to finish. The first call decides
// the result (quickly: mark the connection closed, wake what is blocked,
// close a file) and then finishes the close, which may take long (the
// linger). A Close that arrives while that finishing runs returns the
// decided result at once; one that arrives after the first returned gets
// net.ErrClosed, as a *net.TCPConn closed twice does.
type closeGate struct {
	mu    sync.Mutex
	state gateState
	err   error // decided by the first Close
}

type gateState uint8

const (
	gateOpen gateState = iota
	gateClosing
	gateClosed
)

// close is Close: decide runs once, under the gate's lock (so it must not
// block: concurrent calls wait for it), then finish (may be nil) outside it.
func (g *closeGate) close(decide func() error, finish func()) error {
	g.mu.Lock()
	switch g.state {
	case gateClosing:
		err := g.err
		g.mu.Unlock()
		return err
	case gateClosed:
		g.mu.Unlock()
		return net.ErrClosed
	}
	err := decide()
	g.state, g.err = gateClosing, err
	g.mu.Unlock()
	if finish != nil {
		finish()
	}
	g.mu.Lock()
	g.state = gateClosed
	g.mu.Unlock()
	return err
}
