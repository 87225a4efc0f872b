package main

import (
	"encoding/binary"
	"fmt"
	"testing"
)

// word is the pattern by its definition, for checking the fast loops.
func word(seq uint64, k int) uint64 {
	if k == 0 {
		return seq
	}
	return (seq+1)*0x9E3779B97F4A7C15 + uint64(k)*0xD1B54A32D192ED03
}

func TestPattern(t *testing.T) {
	for _, words := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 13, 16, 17, 18, 64, 100, 1023, 8193} {
		for _, seq := range []uint64{0, 1, 12345, 1<<64 - 1} {
			p := make([]uint64, words)
			fill(p, seq)
			b := asBytes(p)
			for k := range p {
				if got := binary.LittleEndian.Uint64(b[8*k:]); got != word(seq, k) {
					t.Fatalf("words=%d seq=%d: word %d = %#x, want %#x", words, seq, k, got, word(seq, k))
				}
			}
			if bad := firstBad(p, seq, false); bad != words {
				t.Fatalf("words=%d seq=%d: intact payload reported bad at %d", words, seq, bad)
			}
			if bad := firstBad(p, seq+1, false); bad != 0 {
				t.Fatalf("words=%d seq=%d: wrong seq reported bad at %d, want 0", words, seq, bad)
			}
			for k := 1; k < words; k++ {
				p[k] ^= 1 << (k % 64)
				if bad := firstBad(p, seq, false); bad != k {
					t.Fatalf("words=%d seq=%d: word %d flipped, reported %d", words, seq, k, bad)
				}
				if bad := firstBad(p, seq, true); bad != words {
					t.Fatalf("words=%d seq=%d: -x must check word 0 only, reported %d", words, seq, bad)
				}
				p[k] ^= 1 << (k % 64)
			}
		}
	}
	if firstBad(nil, 0, false) != 0 {
		t.Fatal("empty payload must be reported bad")
	}
}

func TestParseNum(t *testing.T) {
	for s, want := range map[string]uint64{"8": 8, "4K": 4096, "2M": 2 << 20, "1G": 1 << 30, "0x10": 16, "256K": 256 << 10} {
		if got := parseNum(s); got != want {
			t.Errorf("parseNum(%q) = %d, want %d", s, got, want)
		}
	}
}

// BenchmarkPattern measures generating and checking one payload, the work
// per packet that default mode adds on top of the ring.
func BenchmarkPattern(b *testing.B) {
	for _, size := range []int{64, 1024, 16384, 65536} {
		p := make([]uint64, size/8)
		b.Run(fmt.Sprintf("fill/%d", size), func(b *testing.B) {
			b.SetBytes(int64(size))
			for i := range b.N {
				fill(p, uint64(i))
			}
		})
		b.Run(fmt.Sprintf("check/%d", size), func(b *testing.B) {
			fill(p, 7)
			b.SetBytes(int64(size))
			for range b.N {
				if firstBad(p, 7, false) != len(p) {
					b.Fatal("bad")
				}
			}
		})
	}
}
