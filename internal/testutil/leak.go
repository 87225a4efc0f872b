package testutil

import (
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// CheckGoroutineLeaks fails t if goroutines started during it are still
// running once it has cleaned up. Call it first in the test, so that its
// cleanup runs last, after the test's own (Cleanup is last in, first out).
//
// It takes a snapshot of the goroutines now and, at cleanup, waits up to
// DefaultTimeout for every goroutine not in the snapshot to end (a
// goroutine that is stopping is not a leak), polling with backoff; those
// that remain are reported with their stacks. Goroutines of the runtime
// and of package testing are not counted. A test that runs in parallel
// with others (t.Parallel) cannot use it: their goroutines would count.
func CheckGoroutineLeaks(t TB) {
	t.Helper()
	checkGoroutineLeaks(t, DefaultTimeout)
}

func checkGoroutineLeaks(t TB, timeout time.Duration) {
	before := map[int]bool{}
	for _, g := range goroutines() {
		before[g.id] = true
	}
	t.Cleanup(func() {
		var leaked []goroutine
		if poll(time.Now().Add(timeout), func() bool {
			leaked = leaked[:0]
			for _, g := range goroutines() {
				if !before[g.id] && !ignored(g) {
					leaked = append(leaked, g)
				}
			}
			return len(leaked) == 0
		}) {
			return
		}
		var b strings.Builder
		for _, g := range leaked {
			b.WriteString("\n\n")
			b.WriteString(g.stack)
		}
		t.Errorf("%d goroutines started by the test are still running %v after it ended:%s", len(leaked), timeout, b.String())
	})
}

// goroutine is one entry of runtime.Stack(all).
type goroutine struct {
	id    int
	state string // "chan receive", "IO wait, 2 minutes", ...
	stack string // the whole entry, header included
}

// goroutines returns every goroutine's stack.
func goroutines() []goroutine {
	buf := make([]byte, 64<<10)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return parseStacks(string(buf[:n]))
		}
		buf = make([]byte, 2*len(buf))
	}
}

// parseStacks splits a runtime.Stack(all) dump into its goroutines:
// each is a "goroutine N [state]:" line and its frames, followed by a
// blank line.
func parseStacks(dump string) []goroutine {
	var gs []goroutine
	for entry := range strings.SplitSeq(strings.TrimSpace(dump), "\n\n") {
		head, _, _ := strings.Cut(entry, "\n")
		rest, ok := strings.CutPrefix(head, "goroutine ")
		if !ok {
			continue
		}
		idStr, rest, ok := strings.Cut(rest, " [")
		if !ok {
			continue
		}
		id, err := strconv.Atoi(idStr)
		if err != nil {
			continue
		}
		state, _, _ := strings.Cut(rest, "]")
		gs = append(gs, goroutine{id: id, state: state, stack: entry})
	}
	return gs
}

// ignoredFrames mark goroutines that belong to the runtime or package
// testing (a subtest's goroutine finishing, the -timeout alarm) or that a
// standard package starts once for the life of the process (signal
// delivery): none of them is the test's to stop.
var ignoredFrames = []string{
	"testing.tRunner(",
	"testing.(*T).Run(",
	"testing.(*M).",
	"testing.runTests",
	"testing.(*B).",
	"os/signal.signal_recv",
	"os/signal.loop",
	"runtime.ensureSigM",
	"runtime/trace.",
	"runtime.ReadTrace",
}

// ignored reports a goroutine to leave out of the count. Only its frames
// are looked at, not its "created by" line: a goroutine the test body
// started directly is created by the test function, which runs in
// testing.tRunner, and is exactly what must be counted.
func ignored(g goroutine) bool {
	frames := g.stack
	if i := strings.Index(frames, "\ncreated by "); i >= 0 {
		frames = frames[:i]
	}
	return slices.ContainsFunc(ignoredFrames, func(f string) bool { return strings.Contains(frames, f) })
}
