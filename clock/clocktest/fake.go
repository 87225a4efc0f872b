package clocktest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/vmbusd/vmbusd/clock"
)

// Fake is a clock.Clock whose time moves only by Advance. The zero value
// is not usable; make one with New.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	seq     uint64
	pending []*timer
	// changed is closed, and replaced, whenever pending changes, waking
	// the test waiting in BlockUntil or WaitTimer.
	changed chan struct{}
}

var _ clock.Clock = (*Fake)(nil)

// New returns a fake clock reading now.
func New(now time.Time) *Fake {
	return &Fake{now: now, changed: make(chan struct{})}
}

// Timer describes a pending timer, for a failing test's message and for
// Pending.
type Timer struct {
	// Duration is what the timer was made or last reset with (a ticker's
	// period).
	Duration time.Duration
	// Left is the time until it fires.
	Left   time.Duration
	Ticker bool
}

func (t Timer) String() string {
	kind := "timer"
	if t.Ticker {
		kind = "ticker"
	}
	return fmt.Sprintf("%s %v (fires in %v)", kind, t.Duration, t.Left)
}

type timer struct {
	f      *Fake
	c      chan time.Time
	fn     func()
	d      time.Duration
	when   time.Time
	seq    uint64
	ticker bool
}

func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *Fake) Since(t time.Time) time.Duration { return f.Now().Sub(t) }

func (f *Fake) NewTimer(d time.Duration) clock.Timer {
	t := &timer{f: f, c: make(chan time.Time, 1)}
	f.mu.Lock()
	f.schedule(t, d)
	f.mu.Unlock()
	return t
}

func (f *Fake) AfterFunc(d time.Duration, fn func()) clock.Timer {
	t := &timer{f: f, fn: fn}
	f.mu.Lock()
	f.schedule(t, d)
	f.mu.Unlock()
	return t
}

func (f *Fake) NewTicker(d time.Duration) clock.Ticker {
	if d <= 0 {
		panic("clocktest: non-positive interval for NewTicker")
	}
	t := &timer{f: f, c: make(chan time.Time, 1), ticker: true}
	f.mu.Lock()
	f.schedule(t, d)
	f.mu.Unlock()
	return ticker{t}
}

// schedule (re)arms t to fire d from now. f.mu is held.
func (f *Fake) schedule(t *timer, d time.Duration) {
	f.remove(t)
	f.seq++
	t.d, t.when, t.seq = d, f.now.Add(d), f.seq
	f.pending = append(f.pending, t)
	f.notify()
}

// remove unschedules t, reporting whether it was pending. f.mu is held.
func (f *Fake) remove(t *timer) bool {
	i := slices.Index(f.pending, t)
	if i < 0 {
		return false
	}
	f.pending = slices.Delete(f.pending, i, i+1)
	f.notify()
	return true
}

func (f *Fake) notify() {
	close(f.changed)
	f.changed = make(chan struct{})
}

func (t *timer) C() <-chan time.Time { return t.c }

func (t *timer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	t.drain()
	return t.f.remove(t)
}

func (t *timer) Reset(d time.Duration) bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	t.drain()
	was := t.f.remove(t)
	t.f.schedule(t, d)
	return was
}

// drain drops a value fired but not received, as Stop and Reset of a
// time.Timer do since Go 1.23.
func (t *timer) drain() {
	if t.c == nil {
		return
	}
	select {
	case <-t.c:
	default:
	}
}

type ticker struct{ t *timer }

func (k ticker) C() <-chan time.Time { return k.t.c }
func (k ticker) Stop()               { k.t.Stop() }
func (k ticker) Reset(d time.Duration) {
	if d <= 0 {
		panic("clocktest: non-positive interval for Ticker.Reset")
	}
	k.t.Reset(d)
}

// Advance moves the clock d forward, firing every timer that comes due on
// the way, in order of their times (the clock reads each one's time as it
// fires); a ticker fires once per period passed, and a tick its receiver
// has not taken yet is dropped, as with time.Ticker. AfterFunc functions
// run on the caller's goroutine, in order, before Advance returns.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	end := f.now.Add(d)
	for {
		t := f.next()
		if t == nil || t.when.After(end) {
			break
		}
		f.now = t.when
		if t.ticker {
			t.when = t.when.Add(t.d)
		} else {
			f.remove(t)
		}
		if t.fn != nil {
			f.mu.Unlock()
			t.fn()
			f.mu.Lock()
			continue
		}
		select {
		case t.c <- f.now:
		default:
		}
	}
	f.now = end
	f.mu.Unlock()
}

// next returns the timer due first (the earliest made on a tie), or nil.
// f.mu is held.
func (f *Fake) next() *timer {
	var first *timer
	for _, t := range f.pending {
		if first == nil || t.when.Before(first.when) || (t.when.Equal(first.when) && t.seq < first.seq) {
			first = t
		}
	}
	return first
}

// Pending lists the timers and tickers waiting to fire, soonest first.
func (f *Fake) Pending() []Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pendingLocked()
}

func (f *Fake) pendingLocked() []Timer {
	ts := slices.Clone(f.pending)
	slices.SortFunc(ts, func(a, b *timer) int {
		if c := a.when.Compare(b.when); c != 0 {
			return c
		}
		return int(a.seq - b.seq)
	})
	out := make([]Timer, len(ts))
	for i, t := range ts {
		out[i] = Timer{Duration: t.d, Left: t.when.Sub(f.now), Ticker: t.ticker}
	}
	return out
}

// BlockUntil waits until at least n timers and tickers are pending, or
// ctx ends (then it returns an error listing what is pending).
func (f *Fake) BlockUntil(ctx context.Context, n int) error {
	return f.wait(ctx, fmt.Sprintf("%d timers pending", n), func(ts []Timer) bool { return len(ts) >= n })
}

// WaitTimer waits until a one-shot timer (NewTimer, AfterFunc) made or
// reset with duration d is pending, that is, until the code under test is
// parked on a wait of d, or ctx ends (then it returns an error listing
// what is pending).
func (f *Fake) WaitTimer(ctx context.Context, d time.Duration) error {
	return f.wait(ctx, fmt.Sprintf("a %v timer", d), func(ts []Timer) bool {
		return slices.ContainsFunc(ts, func(t Timer) bool { return !t.Ticker && t.Duration == d })
	})
}

func (f *Fake) wait(ctx context.Context, what string, ok func([]Timer) bool) error {
	for {
		f.mu.Lock()
		ts, changed := f.pendingLocked(), f.changed
		f.mu.Unlock()
		if ok(ts) {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("clocktest: waiting for %s: %w; pending: %v", what, ctx.Err(), ts)
		}
	}
}
