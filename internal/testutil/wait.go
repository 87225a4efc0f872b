package testutil

import (
	"slices"
	"strings"
	"time"
)

// TB is the part of testing.TB the helpers use. *testing.T and *testing.B
// satisfy it.
type TB interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// DefaultTimeout is the deadline of a wait given none (timeout <= 0). It is
// no performance bound: it only turns a wait that would hang into a
// failure that says what never happened, and is generous because the
// machines that run the tests are small and shared.
const DefaultTimeout = 30 * time.Second

// The poll interval starts short, so a condition that holds within
// microseconds is seen at once, and doubles up to a ceiling low enough that
// a wait ends soon after its condition holds.
const (
	firstPoll = 50 * time.Microsecond
	maxPoll   = 10 * time.Millisecond
)

// deadliner is *testing.T's Deadline: when the test binary's -timeout
// comes before a wait's own deadline, the wait fails first, with its
// message, instead of the binary panicking.
type deadliner interface {
	Deadline() (time.Time, bool)
}

// waitDeadline returns when a wait of timeout that starts now must give
// up.
func waitDeadline(t TB, timeout time.Duration) time.Time {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	end := time.Now().Add(timeout)
	if d, ok := t.(deadliner); ok {
		if td, ok := d.Deadline(); ok {
			// Leave the binary a moment to report the failure.
			if td = td.Add(-time.Second); td.Before(end) {
				end = td
			}
		}
	}
	return end
}

// WaitFor polls cond until it returns true, backing off from 50 µs to
// 10 ms between calls. If cond still does not hold after timeout (or
// DefaultTimeout when timeout <= 0), it fails the test with
// "timed out after D waiting for WHAT" and returns. cond runs on the
// calling goroutine; it must not block.
func WaitFor(t TB, timeout time.Duration, cond func() bool, what string) {
	t.Helper()
	if poll(waitDeadline(t, timeout), cond) {
		return
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	t.Fatalf("timed out after %v waiting for %s", timeout, what)
}

// poll calls cond with backoff until it holds (true) or end passes
// (false). cond is called once more at the deadline, so a slow machine
// that wakes late still sees a condition that came true meanwhile.
func poll(end time.Time, cond func() bool) bool {
	wait := firstPoll
	for !cond() {
		left := time.Until(end)
		if left <= 0 {
			return cond()
		}
		time.Sleep(min(wait, left))
		wait = min(2*wait, maxPoll)
	}
	return true
}

// runningStates are the goroutine states of a stack trace's header that
// are not parked: a goroutine in one of them may be about to block, or
// may never.
var runningStates = []string{"running", "runnable", "syscall", "idle"}

// WaitBlocked waits until some goroutine whose stack holds fn (a function
// as a stack trace names it, e.g. "uio.(*Device).Wait") is parked: its
// state is a waiting one ("IO wait", "select", "chan receive", ...), or,
// when states are given, begins with one of them. It fails the test like
// WaitFor when none is, by the deadline.
//
// It stands in for "sleep a little so the call blocks": a test that needs
// a call to be really blocked before it acts (a Close that must wake it, a
// check that it returned nothing yet) waits for exactly that.
func WaitBlocked(t TB, timeout time.Duration, fn string, states ...string) {
	t.Helper()
	cond := func() bool {
		return slices.ContainsFunc(goroutines(), func(g goroutine) bool {
			return strings.Contains(g.stack, fn) && parked(g.state, states)
		})
	}
	what := "a goroutine in " + fn + " to block"
	if len(states) > 0 {
		what += " (" + strings.Join(states, ", ") + ")"
	}
	WaitFor(t, timeout, cond, what)
}

func parked(state string, want []string) bool {
	if len(want) > 0 {
		for _, s := range want {
			if strings.HasPrefix(state, s) {
				return true
			}
		}
		return false
	}
	for _, s := range runningStates {
		if strings.HasPrefix(state, s) {
			return false
		}
	}
	return true
}
