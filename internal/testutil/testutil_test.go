package testutil

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeT records what a helper reports instead of failing the real test,
// so the helpers' failures can be tested. Fatalf does not stop the
// goroutine (a helper returns after calling it).
type fakeT struct {
	mu       sync.Mutex
	fatals   []string
	errors   []string
	cleanups []func()
	deadline time.Time // zero: no -timeout
}

func (f *fakeT) Helper()      {}
func (f *fakeT) Name() string { return "TestFake/sub" }
func (f *fakeT) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fatals = append(f.fatals, fmt.Sprintf(format, args...))
}
func (f *fakeT) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }
func (f *fakeT) Deadline() (time.Time, bool) {
	return f.deadline, !f.deadline.IsZero()
}

// runCleanups runs the recorded cleanups last first, as testing does.
func (f *fakeT) runCleanups() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
	f.cleanups = nil
}

func (f *fakeT) failures() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append(append([]string(nil), f.fatals...), f.errors...)
}

var _ TB = (*testing.T)(nil)
var _ TB = (*testing.B)(nil)
var _ TB = (*fakeT)(nil)

func TestWaitForReturnsOnceTheConditionHolds(t *testing.T) {
	for _, after := range []int{0, 1, 5, 20} {
		t.Run(fmt.Sprint(after), func(t *testing.T) {
			ft := &fakeT{}
			calls := 0
			WaitFor(ft, time.Minute, func() bool { calls++; return calls > after }, "the counter")
			if f := ft.failures(); len(f) != 0 {
				t.Fatalf("failures %q", f)
			}
			if calls != after+1 {
				t.Fatalf("cond called %d times, want %d: it must stop at the first true", calls, after+1)
			}
		})
	}
}

func TestWaitForFailsWhenTheConditionNeverHolds(t *testing.T) {
	ft := &fakeT{}
	const timeout = 30 * time.Millisecond
	calls := 0
	start := time.Now()
	WaitFor(ft, timeout, func() bool { calls++; return false }, "the impossible")
	took := time.Since(start)
	f := ft.failures()
	if len(f) != 1 || !strings.Contains(f[0], "waiting for the impossible") || !strings.Contains(f[0], timeout.String()) {
		t.Fatalf("failures %q, want one naming the condition and the timeout", f)
	}
	if len(ft.fatals) != 1 {
		t.Fatalf("fatals %q: a wait that timed out must be fatal", ft.fatals)
	}
	if took < timeout {
		t.Fatalf("gave up after %v, before its timeout %v", took, timeout)
	}
	if calls < 2 {
		t.Fatalf("cond called %d times: want polling until the deadline and a last look at it", calls)
	}
}

// A condition that comes true only at the very end is still seen: the
// last look happens at the deadline, not before it.
func TestWaitForLooksOnceMoreAtTheDeadline(t *testing.T) {
	ft := &fakeT{}
	end := time.Now().Add(20 * time.Millisecond)
	WaitFor(ft, 20*time.Millisecond, func() bool { return !time.Now().Before(end) }, "the deadline")
	if f := ft.failures(); len(f) != 0 {
		t.Fatalf("failures %q", f)
	}
}

func TestWaitDeadline(t *testing.T) {
	now := time.Now()
	near := func(got, want time.Time) bool { d := got.Sub(want); return d > -time.Second && d < time.Second }
	tests := []struct {
		name     string
		timeout  time.Duration
		deadline time.Time
		want     time.Time
	}{
		{"given", time.Minute, time.Time{}, now.Add(time.Minute)},
		{"none means the default", 0, time.Time{}, now.Add(DefaultTimeout)},
		{"negative means the default", -time.Second, time.Time{}, now.Add(DefaultTimeout)},
		{"the test binary's -timeout comes first", time.Hour, now.Add(time.Minute), now.Add(time.Minute - time.Second)},
		{"the wait's own comes first", time.Second, now.Add(time.Hour), now.Add(time.Second)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := waitDeadline(&fakeT{deadline: tc.deadline}, tc.timeout); !near(got, tc.want) {
				t.Fatalf("deadline in %v, want in %v", got.Sub(now), tc.want.Sub(now))
			}
		})
	}
}

// parkHere blocks on ch; the tests look for it by name.
func parkHere(ch chan struct{}) { <-ch }

func TestWaitBlocked(t *testing.T) {
	ch := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		parkHere(ch)
	}()
	defer func() { close(ch); <-done }()

	WaitBlocked(t, 0, "testutil.parkHere")
	WaitBlocked(t, 0, "testutil.parkHere", "chan receive")

	tests := []struct {
		name   string
		fn     string
		states []string
	}{
		{"no such function", "testutil.notAFunction", nil},
		{"blocked, but not in that state", "testutil.parkHere", []string{"IO wait"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ft := &fakeT{}
			WaitBlocked(ft, 10*time.Millisecond, tc.fn, tc.states...)
			if f := ft.failures(); len(f) != 1 || !strings.Contains(f[0], tc.fn) {
				t.Fatalf("failures %q, want one naming %s", f, tc.fn)
			}
		})
	}
}

func TestParseStacks(t *testing.T) {
	dump := "goroutine 1 [running]:\nmain.main()\n\t/x.go:1 +0x1\n\n" +
		"goroutine 42 [chan receive, 3 minutes]:\npkg.f()\n\t/y.go:2 +0x2\ncreated by pkg.g in goroutine 1\n\t/y.go:9 +0x3\n\n" +
		"garbage\n"
	gs := parseStacks(dump)
	if len(gs) != 2 || gs[0].id != 1 || gs[0].state != "running" || gs[1].id != 42 || gs[1].state != "chan receive, 3 minutes" {
		t.Fatalf("parsed %+v", gs)
	}
	if !strings.Contains(gs[1].stack, "created by pkg.g") {
		t.Fatalf("stack %q lost its creator", gs[1].stack)
	}
}

func TestIgnoredLooksAtFramesNotTheCreator(t *testing.T) {
	tests := []struct {
		stack string
		want  bool
	}{
		{"goroutine 7 [chan receive]:\ntesting.(*T).Run(...)\n\t/t.go:1", true},
		{"goroutine 8 [select]:\nos/signal.signal_recv()\n\t/s.go:1", true},
		{"goroutine 9 [select]:\npkg.leaky()\n\t/l.go:1\ncreated by pkg.TestX in goroutine 7\n\t/l_test.go:3", false},
		{"goroutine 9 [select]:\npkg.leaky()\n\t/l.go:1\ncreated by testing.tRunner in goroutine 7\n\t/t.go:3", false},
	}
	for _, tc := range tests {
		if got := ignored(parseStacks(tc.stack)[0]); got != tc.want {
			t.Errorf("ignored(%q) = %v, want %v", tc.stack, got, tc.want)
		}
	}
}

func TestCheckGoroutineLeaksReportsAGoroutineThatOutlivesTheTest(t *testing.T) {
	ft := &fakeT{}
	checkGoroutineLeaks(ft, 20*time.Millisecond)
	ch := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		parkHere(ch)
	}()
	ft.runCleanups()
	close(ch)
	<-done
	f := ft.failures()
	if len(f) != 1 || !strings.Contains(f[0], "1 goroutines") || !strings.Contains(f[0], "testutil.parkHere") {
		t.Fatalf("failures %q, want one with the leaked goroutine's stack", f)
	}
	if len(ft.errors) != 1 {
		t.Fatal("a leak must be reported with Errorf, so the test's other cleanups still run")
	}
}

// A goroutine that is stopping when the test ends is waited for, not
// reported.
func TestCheckGoroutineLeaksWaitsForGoroutinesThatEnd(t *testing.T) {
	ft := &fakeT{}
	checkGoroutineLeaks(ft, DefaultTimeout)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		parkHere(stop)
	}()
	// The test's own cleanup stops it, but does not wait for it to end.
	ft.Cleanup(func() { close(stop) })
	ft.runCleanups()
	if f := ft.failures(); len(f) != 0 {
		t.Fatalf("failures %q", f)
	}
	<-done
}

// The check runs on this package's own tests too.
func TestCheckGoroutineLeaksPassesACleanTest(t *testing.T) {
	CheckGoroutineLeaks(t)
	done := make(chan struct{})
	go func() { close(done) }()
	<-done
}

var sink []byte

func TestAllocBudget(t *testing.T) {
	tests := []struct {
		name   string
		budget float64
		f      func()
		fail   bool
	}{
		{"nothing allocated", 0, func() {}, false},
		{"one allocation, budget 0", 0, func() { sink = make([]byte, 64) }, true},
		{"one allocation, budget 1", 1, func() { sink = make([]byte, 64) }, false},
		{"two allocations, budget 1", 1, func() { sink = make([]byte, 64); sink = make([]byte, 128) }, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ft := &fakeT{}
			AllocBudget(ft, tc.budget, 100, tc.f)
			f := ft.failures()
			if !tc.fail {
				if len(f) != 0 {
					t.Fatalf("failures %q", f)
				}
				return
			}
			if len(f) != 1 || !strings.Contains(f[0], "budget") || !strings.Contains(f[0], "-run '^TestFake$'") {
				t.Fatalf("failures %q, want one with the count, the budget and how to profile", f)
			}
		})
	}
}

func TestAllocBudgetRejectsNoRuns(t *testing.T) {
	ft := &fakeT{}
	AllocBudget(ft, 0, 0, func() {})
	if len(ft.fatals) != 1 {
		t.Fatalf("fatals %q", ft.fatals)
	}
}
