package deadline

import (
	"context"
	"sync"
	"time"
)

// Deadline turns a net.Conn deadline into a context that blocked waits can
// select on: it is cancelled when the deadline passes or when its parent
// (the connection's lifetime) ends. Setting a new deadline re-arms the same
// context while it has not fired, so an operation already waiting sees the
// change; once it has fired, the next operation gets a fresh one. Safe for
// concurrent use; the zero value is not usable (New).
type Deadline struct {
	parent context.Context

	mu     sync.Mutex
	ctx    context.Context
	cancel context.CancelFunc
	timer  *time.Timer
	gen    uint64 // bumped on every set, so a stale timer cannot fire
}

// New returns a disarmed deadline whose context ends with parent.
func New(parent context.Context) *Deadline {
	d := &Deadline{parent: parent}
	d.ctx, d.cancel = context.WithCancel(parent)
	return d
}

// Set arms the deadline at t; the zero time disarms it.
func (d *Deadline) Set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.gen++
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
	if d.ctx.Err() != nil && d.parent.Err() == nil {
		d.ctx, d.cancel = context.WithCancel(d.parent)
	}
	if t.IsZero() {
		return
	}
	dur := time.Until(t)
	if dur <= 0 {
		d.cancel()
		return
	}
	gen, cancel := d.gen, d.cancel
	d.timer = time.AfterFunc(dur, func() {
		d.mu.Lock()
		if d.gen == gen {
			cancel()
		}
		d.mu.Unlock()
	})
}

// Context returns the context of the current deadline.
func (d *Deadline) Context() context.Context {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ctx
}

// Stop releases the timer and cancels (the connection is closed).
func (d *Deadline) Stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.gen++
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
	d.cancel()
}
