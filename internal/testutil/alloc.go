package testutil

import (
	"strings"
	"testing"
)

// AllocBudget runs f runs times (after one warm-up call) with
// testing.AllocsPerRun and fails t if f allocated more than budget times
// per run. The failure names the count, the budget and how to find the
// allocation.
//
// AllocsPerRun counts every allocation in the process while f runs and
// rounds the mean down, so with a budget of 0 fewer than runs stray
// allocations by other goroutines in all pass, while one allocation per
// call by f never does: use runs of 100 or more. It sets GOMAXPROCS to 1
// meanwhile, so f must not wait for another goroutine that needs a
// second processor, and t must not be a parallel test.
func AllocBudget(t TB, budget float64, runs int, f func()) {
	t.Helper()
	if runs <= 0 {
		t.Fatalf("AllocBudget: %d runs", runs)
		return
	}
	got := testing.AllocsPerRun(runs, f)
	if got > budget {
		t.Errorf("%v allocations per run (mean of %d runs, rounded down), budget %v: "+
			"a path held to its allocation budget allocates; find it with "+
			"go test -run '^%s$' -memprofile mem.out -memprofilerate 1 && go tool pprof -sample_index=alloc_objects -top mem.out",
			got, runs, budget, rootName(t))
	}
}

// rootName returns the top-level test's name, for a -run pattern.
func rootName(t TB) string {
	n, ok := t.(interface{ Name() string })
	if !ok {
		return "TestName"
	}
	name, _, _ := strings.Cut(n.Name(), "/")
	return name
}
