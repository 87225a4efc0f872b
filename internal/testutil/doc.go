// Package testutil holds the helpers every test in the repository waits,
// checks for leaks and counts allocations with, so that each of those is
// written once and always bounded:
//
//   - WaitFor polls a condition with backoff until it holds, and always
//     has a deadline: a test never sleeps to wait for something, and a
//     condition that never comes fails the test naming what it waited for.
//   - WaitBlocked waits until a goroutine is parked inside a given
//     function, for tests that must act on a call that is really blocked
//     (not merely about to block).
//   - CheckGoroutineLeaks fails a test whose goroutines outlive it.
//   - AllocBudget fails a test whose hot path allocates more than its
//     budget (testing.AllocsPerRun), so a regression breaks the build
//     rather than a benchmark column nobody reads.
//
// It is for tests only: no non-test package may import it (a test in this
// package checks the tree). Each helper takes a TB, the part of
// testing.TB it uses, so that its own tests can hand it a recorder.
package testutil
