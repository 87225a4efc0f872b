package main

import "unsafe"

// The payload of packet seq is a run of little-endian u64 words: word 0 is
// seq, word k >= 1 is (seq+1)*k1 + k*k2 (mod 2^64), the same as ringpeer's.
// Each word is the previous one plus k2, so generating and checking need
// one add per word; the loops are unrolled four ways with independent
// accumulators and no bounds checks inside (they dominate large packets).
const (
	k1 uint64 = 0x9E3779B97F4A7C15
	k2 uint64 = 0xD1B54A32D192ED03
	// multiples of k2, reduced mod 2^64 so they are valid uint64 constants
	k2x2 = uint64((2 * 0xD1B54A32D192ED03) % (1 << 64))
	k2x3 = uint64((3 * 0xD1B54A32D192ED03) % (1 << 64))
	k2x4 = uint64((4 * 0xD1B54A32D192ED03) % (1 << 64))
)

// fill writes the whole payload of packet seq into p.
func fill(p []uint64, seq uint64) {
	if len(p) == 0 {
		return
	}
	p[0] = seq
	q := p[1:]
	v := (seq+1)*k1 + k2 // word 1
	for len(q) >= 4 {
		q[0] = v
		q[1] = v + k2
		q[2] = v + k2x2
		q[3] = v + k2x3
		v += k2x4
		q = q[4:]
	}
	for i := range q {
		q[i] = v
		v += k2
	}
}

// firstBad returns the index of the first word of p that differs from the
// payload of packet seq, or len(p) when none does. With seqOnly (-x) only
// word 0 is checked.
func firstBad(p []uint64, seq uint64, seqOnly bool) int {
	if len(p) == 0 {
		return 0
	}
	diff := p[0] ^ seq
	if !seqOnly {
		q := p[1:]
		v := (seq+1)*k1 + k2
		var d0, d1, d2, d3 uint64
		for len(q) >= 4 {
			d0 |= q[0] ^ v
			d1 |= q[1] ^ (v + k2)
			d2 |= q[2] ^ (v + k2x2)
			d3 |= q[3] ^ (v + k2x3)
			v += k2x4
			q = q[4:]
		}
		for _, w := range q {
			diff |= w ^ v
			v += k2
		}
		diff |= d0 | d1 | d2 | d3
	}
	if diff == 0 {
		return len(p)
	}
	// Slow path, only for a broken packet: find the word.
	if p[0] != seq {
		return 0
	}
	v := (seq+1)*k1 + k2
	for k := 1; k < len(p); k++ {
		if p[k] != v {
			return k
		}
		v += k2
	}
	return len(p)
}

// asBytes views words as bytes (the host is little-endian: checked in main),
// so a payload generated as words is the byte string the ring carries.
func asBytes(w []uint64) []byte {
	if len(w) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), 8*len(w))
}
