package netvsp

import (
	"math/rand/v2"
	"testing"
)

func TestSectionRingHandsOutRunsInOrderAndReusesOnlyAfterCompletion(t *testing.T) {
	var r sectionRing
	r.init(16, 26) // 10 sub-allocations
	a, ok := r.alloc(4)
	if !ok || a != 16 {
		t.Fatalf("first run %d %v", a, ok)
	}
	if !r.grow(a, 2) {
		t.Fatal("grow the last run")
	}
	b, ok := r.alloc(3)
	if !ok || b != 22 {
		t.Fatalf("second run %d %v", b, ok)
	}
	if r.grow(a, 1) {
		t.Fatal("grew a run that is not the last")
	}
	// One left at the end; a run of 2 cannot wrap while the start is held.
	if _, ok := r.alloc(2); ok {
		t.Fatal("allocated over outstanding runs")
	}
	// Completing the second run first frees nothing: the first holds the tail.
	if !r.release(b) || r.canAlloc() && r.contiguous() > 1 {
		t.Fatalf("out-of-order release freed space: contiguous %d", r.contiguous())
	}
	if r.release(b) {
		t.Fatal("released twice")
	}
	if !r.release(a) {
		t.Fatal("release first run")
	}
	if r.used != 0 {
		t.Fatalf("used %d after every release", r.used)
	}
	// Wrap: a run that does not fit before hi skips the end.
	x, _ := r.alloc(7) // 16..22
	y, _ := r.alloc(2) // 23..24
	r.release(x)
	z, ok := r.alloc(4) // 25 is skipped; wraps to 16
	if !ok || z != 16 {
		t.Fatalf("wrapped run %d %v", z, ok)
	}
	if r.isOut(25) {
		t.Fatal("skipped sub-allocation handed out")
	}
	r.release(y)
	r.release(z)
	if r.used != 0 {
		t.Fatalf("used %d, skipped part not reclaimed", r.used)
	}
}

func TestSectionRingNeverHandsOutASubAllocationTwice(t *testing.T) {
	var r sectionRing
	r.init(0, 97)
	out := map[uint32]uint32{} // start -> length
	owner := make([]int, 97)   // 0 free, else run start+1
	rng := rand.New(rand.NewPCG(1, 2))
	for step := 0; step < 20000; step++ {
		if rng.IntN(2) == 0 || len(out) == 0 {
			k := uint32(1 + rng.IntN(6))
			s, ok := r.alloc(k)
			if !ok {
				continue
			}
			if s+k > 97 {
				t.Fatalf("run %d+%d past the end", s, k)
			}
			for i := s; i < s+k; i++ {
				if owner[i] != 0 {
					t.Fatalf("step %d: sub-allocation %d handed out twice", step, i)
				}
				owner[i] = int(s) + 1
			}
			out[s] = k
			continue
		}
		for s, k := range out { // release a random one
			if !r.release(s) {
				t.Fatalf("release %d failed", s)
			}
			delete(out, s)
			_ = k
			break
		}
		// What the ring reclaimed must be free in our model too: rebuild
		// ownership from the outstanding runs.
		for i := range owner {
			owner[i] = 0
		}
		for s, k := range out {
			for i := s; i < s+k; i++ {
				owner[i] = int(s) + 1
			}
		}
	}
}
