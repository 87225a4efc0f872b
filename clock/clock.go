package clock

import (
	"context"
	"time"
)

// Clock tells the time and makes timers. Implementations are safe for
// concurrent use.
type Clock interface {
	Now() time.Time
	Since(t time.Time) time.Duration
	// NewTimer fires once, d from now, on its channel.
	NewTimer(d time.Duration) Timer
	// NewTicker fires every d on its channel, dropping ticks a slow
	// receiver misses, as time.Ticker does. d must be positive.
	NewTicker(d time.Duration) Ticker
	// AfterFunc calls f once, d from now; the Timer's C is nil.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a one-shot timer; Stop and Reset follow time.Timer (since Go
// 1.23: no stale value is received after either returns).
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// Ticker is a periodic timer, as time.Ticker.
type Ticker interface {
	C() <-chan time.Time
	Stop()
	Reset(d time.Duration)
}

// Real is the system clock (package time).
func Real() Clock { return realClock{} }

// Or returns c, or Real when c is nil: what an Options field of type
// Clock means when left unset.
func Or(c Clock) Clock {
	if c == nil {
		return Real()
	}
	return c
}

type realClock struct{}

func (realClock) Now() time.Time                  { return time.Now() }
func (realClock) Since(t time.Time) time.Duration { return time.Since(t) }
func (realClock) NewTimer(d time.Duration) Timer  { return realTimer{time.NewTimer(d)} }
func (realClock) NewTicker(d time.Duration) Ticker {
	return realTicker{time.NewTicker(d)}
}
func (realClock) AfterFunc(d time.Duration, f func()) Timer { return realTimer{time.AfterFunc(d, f)} }

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time        { return t.t.C }
func (t realTimer) Stop() bool                 { return t.t.Stop() }
func (t realTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }

type realTicker struct{ t *time.Ticker }

func (t realTicker) C() <-chan time.Time   { return t.t.C }
func (t realTicker) Stop()                 { t.t.Stop() }
func (t realTicker) Reset(d time.Duration) { t.t.Reset(d) }

// WithTimeout is context.WithTimeout on c's time: the context ends, with
// Err context.DeadlineExceeded, when c reaches d from now. On the real
// clock it is context.WithTimeout itself. On another clock the context
// reports no Deadline, since its deadline is not a wall-clock time that
// code below (a poll(2) timeout, a socket deadline) could use.
func WithTimeout(parent context.Context, c Clock, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := Or(c).(realClock); ok {
		return context.WithTimeout(parent, d)
	}
	ctx, cancel := context.WithCancelCause(parent)
	t := c.AfterFunc(d, func() { cancel(context.DeadlineExceeded) })
	return timeoutCtx{ctx}, func() {
		t.Stop()
		cancel(context.Canceled)
	}
}

// timeoutCtx reports the end of a WithTimeout on a non-real clock as
// context.DeadlineExceeded, as context.WithTimeout does.
type timeoutCtx struct{ context.Context }

func (c timeoutCtx) Err() error {
	err := c.Context.Err()
	if err != nil && context.Cause(c.Context) == context.DeadlineExceeded {
		return context.DeadlineExceeded
	}
	return err
}
