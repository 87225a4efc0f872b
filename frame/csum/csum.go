package csum

import (
	"encoding/binary"
	"math/bits"
)

// Add adds b to a running one's-complement sum (big-endian 16-bit words;
// an odd last byte is padded with zero). The result is folded to 16 bits
// (a one's-complement sum may be folded at any point), so callers may add a
// few small values to it (a protocol number, a length) without overflow.
//
// It sums 32 bytes per iteration as four 64-bit words with carries, in
// the machine's byte order (the one's-complement sum is byte-order
// independent up to a final swap): about 5x the 16-bit
// loop.
func Add(sum uint32, b []byte) uint32 {
	// Summed as little-endian words and swapped back at the end.
	var s, c uint64
	for len(b) >= 32 {
		s, c = bits.Add64(s, binary.LittleEndian.Uint64(b), c)
		s, c = bits.Add64(s, binary.LittleEndian.Uint64(b[8:]), c)
		s, c = bits.Add64(s, binary.LittleEndian.Uint64(b[16:]), c)
		s, c = bits.Add64(s, binary.LittleEndian.Uint64(b[24:]), c)
		b = b[32:]
	}
	for len(b) >= 8 {
		s, c = bits.Add64(s, binary.LittleEndian.Uint64(b), c)
		b = b[8:]
	}
	s, c = bits.Add64(s, c, 0)
	s += c // at most 1, into a sum that just wrapped: cannot wrap again
	var tail uint64
	for len(b) >= 2 {
		tail += uint64(binary.LittleEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		tail += uint64(b[0])
	}
	s, c = bits.Add64(s, tail, 0)
	s += c
	// Fold 64 -> 16 bits with end-around carries, swap to network order,
	// add the caller's sum and fold again.
	t := s>>32 + s&0xffffffff
	t = t>>16 + t&0xffff
	t = t>>16 + t&0xffff
	t = t>>16 + t&0xffff
	t = uint64(bits.ReverseBytes16(uint16(t))) + uint64(sum)
	t = t>>32 + t&0xffffffff
	t = t>>16 + t&0xffff
	t = t>>16 + t&0xffff
	t = t>>16 + t&0xffff
	return uint32(t)
}

// Fold folds a running sum into 16 bits (not complemented).
func Fold(sum uint32) uint16 {
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return uint16(sum)
}

// Checksum is the complemented checksum of b with an initial sum.
func Checksum(sum uint32, b []byte) uint16 { return ^Fold(Add(sum, b)) }
