package netvsc

import "testing"

// TestTakeSectionLIFO: takeSection hands out the section the host
// completed last (cache-warm), not the next one of the run round-robin,
// and counts every free section as it moves from the free ring to the
// stash.
func TestTakeSectionLIFO(t *testing.T) {
	tests := []struct {
		name  string
		freed []uint32 // completed by the host, in this order, after all were taken
		want  []uint32 // takeSection's answers, in order
	}{
		{"one at a time", []uint32{5}, []uint32{5}},
		{"last freed first", []uint32{3, 7, 4}, []uint32{4, 7, 3}},
		{"all", []uint32{1, 2, 3, 4, 5, 6, 7, 8}, []uint32{8, 7, 6, 5, 4, 3, 2, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := takenTxPath(t, 1, 9)
			for _, s := range tc.freed {
				if _, _, ok := p.sectionDone(s); !ok {
					t.Fatalf("sectionDone(%d) refused", s)
				}
			}
			if got := p.sections(); got != len(tc.freed) {
				t.Errorf("sections() = %d, want %d", got, len(tc.freed))
			}
			for _, w := range tc.want {
				if v, ok := p.takeSection(); !ok || v != w {
					t.Fatalf("takeSection = %d, %v; want %d", v, ok, w)
				}
			}
		})
	}
	// A request at a time reuses one section.
	var p txPath
	p.init(1500)
	p.assign(1, 9)
	first, _ := p.takeSection()
	p.sectionDone(first)
	for i := range 20 {
		v, _ := p.takeSection()
		if v != first {
			t.Fatalf("send %d took section %d, want %d again", i, v, first)
		}
		p.sectionDone(v)
	}
	if p.sections() != 8 {
		t.Errorf("sections() = %d after the sends, want 8", p.sections())
	}
}

// TestTakeSectionConcurrentFrees: sections the drain frees while the
// sender gathers (the SPSC ring's two sides at once, under -race) come
// back inside the run, and none is lost or counted twice: every section
// is free again at the end, by the sender's count and the lock-free one.
func TestTakeSectionConcurrentFrees(t *testing.T) {
	const secs, rounds = 64, 20000
	var p txPath
	p.init(1500)
	p.assign(1, 1+secs)
	held := make([]uint32, 0, secs)
	for {
		v, ok := p.takeSection()
		if !ok {
			break
		}
		held = append(held, v)
	}
	if len(held) != secs {
		t.Fatalf("took %d of %d fresh sections", len(held), secs)
	}
	freed := make(chan uint32, secs)
	done := make(chan struct{})
	go func() { // the drain: completes what the sender hands it
		defer close(done)
		for v := range freed {
			p.sectionDone(v)
		}
	}()
	for _, v := range held {
		freed <- v
	}
	for got := 0; got < rounds; {
		v, ok := p.takeSection()
		if !ok {
			continue // the drain is behind: poll again
		}
		if v < 1 || v > secs {
			t.Fatalf("takeSection = %d, outside the run", v)
		}
		got++
		freed <- v
	}
	close(freed)
	<-done
	if n := p.sections(); n != secs {
		t.Errorf("sections() = %d at the end, want %d", n, secs)
	}
	if free := p.sec.len() + int(p.stashN.Load()); free != secs {
		t.Errorf("lock-free count %d at the end, want %d", free, secs)
	}
}
