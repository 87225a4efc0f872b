package netvsp

import (
	"encoding/binary"
	"math/rand/v2"
	"runtime"
	"testing"
	"unsafe"
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

// TestFrameQueueConcurrentProducers: producers pushing alone and in
// batches while the consumer reads and releases lose, duplicate and
// reorder nothing (each producer's frames come out in its order), and the
// queue holds at most its bound.
func TestFrameQueueConcurrentProducers(t *testing.T) {
	const producers, perProducer, bound = 3, 20000, 64
	q := newFrameQueue(bound)
	done := make(chan struct{})
	for p := range producers {
		go func() {
			defer func() { done <- struct{}{} }()
			f := make([]byte, 60)
			f[0] = byte(p)
			var b pushBatch
			for i := 0; i < perProducer; {
				binary.LittleEndian.PutUint32(f[1:], uint32(i))
				var ok bool
				if p == 0 {
					ok = q.push(f, 0, 0, false, 1)
				} else {
					if ok = b.push(&q, f, 0, 0, false, 1); !ok || i%7 == 0 {
						b.done()
					}
				}
				if ok {
					i++
				} else {
					runtime.Gosched() // full: let the consumer run
				}
			}
			b.done()
		}()
	}
	next := make([]uint32, producers)
	finished := 0
	for got := 0; got < producers*perProducer; {
		head, tail := q.span()
		if tail-head > bound {
			t.Fatalf("%d frames queued in a queue of %d", tail-head, bound)
		}
		if head == tail {
			select {
			case <-done:
				finished++
			default:
				runtime.Gosched()
			}
			continue
		}
		n := uint64(1 + rand.IntN(int(tail-head)))
		for i := range n {
			f := q.at(head + i).frame()
			p, seq := f[0], binary.LittleEndian.Uint32(f[1:])
			if seq != next[p] {
				t.Fatalf("producer %d: frame %d, want %d", p, seq, next[p])
			}
			next[p]++
		}
		q.release(n)
		got += int(n)
	}
	for ; finished < producers; finished++ {
		<-done
	}
	if q.pending() {
		t.Fatal("frames left after all were read")
	}
}

func TestRxSlotIsOneCacheLine(t *testing.T) {
	if n := unsafe.Sizeof(rxSlot{}); n != 64 {
		t.Fatalf("rxSlot is %d bytes, want 64", n)
	}
}
