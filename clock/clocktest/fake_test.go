package clocktest_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/clock"
	"github.com/vmbusd/vmbusd/clock/clocktest"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// fired reports what c holds now, without waiting.
func fired(c <-chan time.Time) (time.Time, bool) {
	select {
	case v := <-c:
		return v, true
	default:
		return time.Time{}, false
	}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestTimerFiresOnlyWhenItsTimeIsReached(t *testing.T) {
	f := clocktest.New(epoch)
	tm := f.NewTimer(2 * time.Second)
	f.Advance(2*time.Second - 1)
	if _, ok := fired(tm.C()); ok {
		t.Fatal("fired before its time")
	}
	f.Advance(1)
	v, ok := fired(tm.C())
	if !ok || !v.Equal(epoch.Add(2*time.Second)) {
		t.Fatalf("fired %v %v, want at %v", v, ok, epoch.Add(2*time.Second))
	}
	if got := f.Since(epoch); got != 2*time.Second {
		t.Fatalf("Since(epoch) = %v, want 2s", got)
	}
	if len(f.Pending()) != 0 {
		t.Fatalf("a fired timer is still pending: %v", f.Pending())
	}
}

func TestStopAndResetDropWhatFired(t *testing.T) {
	f := clocktest.New(epoch)
	tm := f.NewTimer(time.Second)
	f.Advance(time.Second)
	if tm.Reset(3 * time.Second) {
		t.Fatal("Reset of a fired timer reported it pending")
	}
	if _, ok := fired(tm.C()); ok {
		t.Fatal("a stale value survived Reset")
	}
	f.Advance(2 * time.Second)
	if _, ok := fired(tm.C()); ok {
		t.Fatal("reset timer fired early")
	}
	if !tm.Stop() {
		t.Fatal("Stop of a pending timer reported false")
	}
	f.Advance(time.Hour)
	if _, ok := fired(tm.C()); ok {
		t.Fatal("stopped timer fired")
	}
}

func TestAdvanceFiresInTimeOrder(t *testing.T) {
	f := clocktest.New(epoch)
	var got []time.Duration
	for _, d := range []time.Duration{3 * time.Second, time.Second, 2 * time.Second} {
		f.AfterFunc(d, func() {
			got = append(got, f.Since(epoch))
		})
	}
	f.Advance(5 * time.Second)
	want := []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}
	if !slices.Equal(got, want) {
		t.Fatalf("AfterFuncs ran at %v, want %v", got, want)
	}
	if f.Since(epoch) != 5*time.Second {
		t.Fatalf("clock at %v after Advance(5s)", f.Since(epoch))
	}
}

func TestTickerDropsMissedTicks(t *testing.T) {
	f := clocktest.New(epoch)
	k := f.NewTicker(time.Second)
	defer k.Stop()
	f.Advance(5 * time.Second)
	v, ok := fired(k.C())
	if !ok || !v.Equal(epoch.Add(time.Second)) {
		t.Fatalf("first tick %v %v, want the one at 1s (later ones dropped)", v, ok)
	}
	if _, ok := fired(k.C()); ok {
		t.Fatal("more than one tick buffered")
	}
	f.Advance(time.Second)
	if v, ok := fired(k.C()); !ok || !v.Equal(epoch.Add(6*time.Second)) {
		t.Fatalf("tick after draining: %v %v, want at 6s", v, ok)
	}
	k.Stop()
	f.Advance(time.Hour)
	if _, ok := fired(k.C()); ok {
		t.Fatal("stopped ticker ticked")
	}
}

// TestWaitTimerSeesTheCodeParked: the pattern the daemon tests use: the
// code under test parks on a timer in its own goroutine; the test waits
// for that timer by its duration, then advances.
func TestWaitTimerSeesTheCodeParked(t *testing.T) {
	f := clocktest.New(epoch)
	waits := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		beat := f.NewTicker(time.Second) // noise a count of waiters would not tell apart
		defer beat.Stop()
		for _, d := range waits {
			tm := f.NewTimer(d)
			<-tm.C()
		}
	}()
	ctx := ctxFor(t)
	for _, d := range waits {
		if err := f.WaitTimer(ctx, d); err != nil {
			t.Fatal(err)
		}
		f.Advance(d)
	}
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("the waiting goroutine did not finish")
	}
}

func TestWaitsEndWithTheContext(t *testing.T) {
	f := clocktest.New(epoch)
	f.NewTicker(time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for name, err := range map[string]error{
		"WaitTimer":  f.WaitTimer(ctx, time.Second), // a ticker is not a timer
		"BlockUntil": f.BlockUntil(ctx, 2),
	} {
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "ticker 1s") {
			t.Errorf("%s: %v, want context.Canceled listing the pending ticker", name, err)
		}
	}
	if err := f.BlockUntil(ctx, 1); err != nil {
		t.Fatalf("BlockUntil(1) with one ticker pending: %v", err)
	}
}

func TestWithTimeoutOnTheFakeClock(t *testing.T) {
	f := clocktest.New(epoch)
	ctx, cancel := clock.WithTimeout(context.Background(), f, 5*time.Second)
	defer cancel()
	if _, ok := ctx.Deadline(); ok {
		t.Fatal("a fake-clock context reports a wall-clock deadline")
	}
	f.Advance(5*time.Second - 1)
	if ctx.Err() != nil {
		t.Fatalf("ended early: %v", ctx.Err())
	}
	f.Advance(1)
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("Err = %v, want DeadlineExceeded", ctx.Err())
	}

	ctx2, cancel2 := clock.WithTimeout(context.Background(), f, time.Second)
	cancel2()
	if !errors.Is(ctx2.Err(), context.Canceled) || len(f.Pending()) != 0 {
		t.Fatalf("after cancel: Err %v, pending %v; want Canceled and its timer gone", ctx2.Err(), f.Pending())
	}
}
