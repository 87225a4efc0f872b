package csum

import (
	"fmt"
	"testing"
)

func TestChecksum(t *testing.T) {
	// An IPv4 header from RFC 1071's usual example (checksum field zero):
	// 4500 0073 0000 4000 4011 0000 c0a8 0001 c0a8 00c7 -> b861.
	h := []byte{0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0, 0, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7}
	if got := Checksum(0, h); got != 0xb861 {
		t.Fatalf("checksum %#x, want 0xb861", got)
	}
	h[10], h[11] = 0xb8, 0x61
	if got := Checksum(0, h); got != 0 {
		t.Fatalf("checksum over a valid header %#x, want 0", got)
	}
	if Add(0, []byte{1}) != 0x100 {
		t.Fatal("odd byte not padded")
	}
}

// slowAdd is RFC 1071's loop, word by word: the reference Add is checked
// against.
func slowAdd(sum uint32, b []byte) uint32 {
	s := uint64(sum)
	for len(b) >= 2 {
		s += uint64(b[0])<<8 | uint64(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint64(b[0]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return uint32(s)
}

func TestAddMatchesReference(t *testing.T) {
	b := make([]byte, 70000)
	for i := range b {
		b[i] = byte(i*7 + i>>8)
	}
	ff := make([]byte, 4096)
	for i := range ff {
		ff[i] = 0xff // every carry path at once
	}
	for _, in := range [][]byte{nil, {0}, {0xff}, {0xff, 0xff}, ff, ff[:31], ff[:33], b, b[:63], b[:1501], b[3:4099]} {
		for _, sum := range []uint32{0, 1, 0xffff, 0x1fffe, 0xfffffff0} {
			if got, want := Fold(Add(sum, in)), Fold(slowAdd(sum, in)); got != want {
				t.Errorf("%d bytes from %#x: %#x, want %#x", len(in), sum, got, want)
			}
			if Add(sum, in) > 0xffff {
				t.Errorf("%d bytes: sum %#x not folded", len(in), Add(sum, in))
			}
		}
	}
}

func FuzzAdd(f *testing.F) {
	f.Add(uint32(0), []byte{1, 2, 3})
	f.Add(uint32(0xffffffff), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, sum uint32, b []byte) {
		if got, want := Fold(Add(sum, b)), Fold(slowAdd(sum, b)); got != want {
			t.Fatalf("%#x, want %#x", got, want)
		}
	})
}

func BenchmarkAdd(b *testing.B) {
	for _, n := range []int{20, 1500, 65536} {
		buf := make([]byte, n)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				Add(0, buf)
			}
		})
	}
}

func BenchmarkAddReference(b *testing.B) {
	buf := make([]byte, 65536)
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		slowAdd(0, buf)
	}
}
