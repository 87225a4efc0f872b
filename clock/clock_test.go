package clock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/clock"
)

func TestOrDefaultsToTheRealClock(t *testing.T) {
	c := clock.Or(nil)
	before := time.Now()
	if now := c.Now(); now.Before(before) || c.Since(before) < 0 {
		t.Fatalf("Or(nil).Now() = %v, before %v", now, before)
	}
	if c != clock.Real() {
		t.Fatal("Or(nil) is not Real()")
	}
}

// TestRealTimersFire: the real clock's timers are package time's; they
// fire (no threshold on when).
func TestRealTimersFire(t *testing.T) {
	c := clock.Real()
	tm := c.NewTimer(time.Millisecond)
	k := c.NewTicker(time.Millisecond)
	defer k.Stop()
	f := make(chan struct{})
	c.AfterFunc(time.Millisecond, func() { close(f) })
	ctx, cancel := clock.WithTimeout(context.Background(), c, time.Millisecond)
	defer cancel()
	bound := time.After(30 * time.Second)
	for name, ch := range map[string]<-chan struct{}{"AfterFunc": f, "WithTimeout": ctx.Done()} {
		select {
		case <-ch:
		case <-bound:
			t.Fatalf("%s never fired", name)
		}
	}
	for name, ch := range map[string]<-chan time.Time{"timer": tm.C(), "ticker": k.C()} {
		select {
		case <-ch:
		case <-bound:
			t.Fatalf("%s never fired", name)
		}
	}
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("WithTimeout on the real clock: Err %v", ctx.Err())
	}
	if _, ok := ctx.Deadline(); !ok {
		t.Fatal("WithTimeout on the real clock has no deadline")
	}
}
