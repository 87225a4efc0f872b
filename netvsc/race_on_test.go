//go:build race

package netvsc_test

// raceEnabled: under the race detector the ring's copies and the
// variadic payloads of a send move to the heap, so allocation budgets
// are checked by the run without -race (make unit).
const raceEnabled = true
