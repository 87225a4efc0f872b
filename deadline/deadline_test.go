package deadline_test

import (
	"context"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/deadline"
)

// done reports whether ctx has ended, without waiting.
func done(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return true
	default:
		return false
	}
}

// waitDone waits for ctx to end, failing the test after a generous bound.
func waitDone(t *testing.T, ctx context.Context, what string) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: context not cancelled", what)
	}
}

func TestDeadline(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, d *deadline.Deadline)
	}{
		{"disarmed until set", func(t *testing.T, d *deadline.Deadline) {
			if done(d.Context()) {
				t.Fatal("a fresh deadline is already done")
			}
		}},
		{"a past deadline cancels at once", func(t *testing.T, d *deadline.Deadline) {
			d.Set(time.Now().Add(-time.Second))
			if !done(d.Context()) {
				t.Fatal("past deadline did not cancel")
			}
		}},
		{"a future deadline fires", func(t *testing.T, d *deadline.Deadline) {
			ctx := d.Context()
			d.Set(time.Now().Add(time.Millisecond))
			waitDone(t, ctx, "1 ms deadline")
		}},
		{"a waiter sees a deadline set after it started", func(t *testing.T, d *deadline.Deadline) {
			ctx := d.Context() // taken before Set, as a blocked Read does
			d.Set(time.Now().Add(-time.Second))
			if !done(ctx) {
				t.Fatal("the context taken before Set was not cancelled")
			}
		}},
		{"zero time disarms", func(t *testing.T, d *deadline.Deadline) {
			d.Set(time.Now().Add(time.Hour))
			d.Set(time.Time{})
			if done(d.Context()) {
				t.Fatal("disarmed deadline is done")
			}
		}},
		{"re-arming after it fired gives a fresh context", func(t *testing.T, d *deadline.Deadline) {
			d.Set(time.Now().Add(-time.Second))
			old := d.Context()
			d.Set(time.Now().Add(time.Hour))
			if !done(old) {
				t.Fatal("the fired context came back to life")
			}
			if done(d.Context()) {
				t.Fatal("re-armed deadline is already done")
			}
		}},
		{"stop cancels and stays cancelled", func(t *testing.T, d *deadline.Deadline) {
			d.Set(time.Now().Add(time.Hour))
			d.Stop()
			if !done(d.Context()) {
				t.Fatal("stopped deadline not done")
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := deadline.New(context.Background())
			defer d.Stop()
			tc.run(t, d)
		})
	}
}

func TestDeadlineEndsWithItsParent(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	d := deadline.New(parent)
	d.Set(time.Now().Add(time.Hour))
	cancel()
	if !done(d.Context()) {
		t.Fatal("parent cancelled, deadline context not done")
	}
	// Once the parent is gone, setting a new deadline cannot revive it.
	d.Set(time.Now().Add(time.Hour))
	if !done(d.Context()) {
		t.Fatal("a Set after the parent ended revived the context")
	}
}
