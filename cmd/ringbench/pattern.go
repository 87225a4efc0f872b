package main

import "unsafe"

// The payload of packet seq is a run of little-endian u64 words: word 0 is
// seq, word k >= 1 is (seq+1)*k1 + k*k2 (mod 2^64), the same as ringpeer's.
// Each word is the previous one plus k2, so generating and checking need
// one add per word. These loops dominate large packets, so on amd64 the
// bulk runs in SSE2 assembly (pattern_amd64.s), two words per vector as in
// ringpeer's GCC-compiled loops: the default mode then compares ring code,
// not compilers. fillGo and diffGo are the portable loops (other
// architectures, -tags purego, and the reference in the tests).
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
	// Generate from word 0 (keeps the vector stores aligned as the buffer
	// is), then put seq there.
	fillFrom(p, (seq+1)*k1)
	p[0] = seq
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
		diff |= diffFrom(p[1:], (seq+1)*k1+k2)
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

// fillGo sets q[i] = v + i*k2.
func fillGo(q []uint64, v uint64) {
	v0, v1, v2, v3 := v, v+k2, v+k2x2, v+k2x3
	bs := blocks(q)
	for i := range bs {
		b := &bs[i]
		b[0], b[1], b[2], b[3] = v0, v1, v2, v3
		v0 += k2x4
		v1 += k2x4
		v2 += k2x4
		v3 += k2x4
	}
	tail := q[len(q)&^3:]
	for i := range tail {
		tail[i] = v0
		v0 += k2
	}
}

// diffGo ORs together q[i] ^ (v + i*k2): zero when q continues the
// pattern from v.
func diffGo(q []uint64, v uint64) uint64 {
	v0, v1, v2, v3 := v, v+k2, v+k2x2, v+k2x3
	var d0, d1 uint64
	bs := blocks(q)
	for i := range bs {
		b := &bs[i]
		d0 |= (b[0] ^ v0) | (b[1] ^ v1)
		d1 |= (b[2] ^ v2) | (b[3] ^ v3)
		v0 += k2x4
		v1 += k2x4
		v2 += k2x4
		v3 += k2x4
	}
	for _, w := range q[len(q)&^3:] {
		d0 |= w ^ v0
		v0 += k2
	}
	return d0 | d1
}

// blocks views the first len(q)/4*4 words of q as 4-word blocks, so the
// loops above index no slice (the compiler keeps them free of bounds checks).
func blocks(q []uint64) [][4]uint64 {
	if len(q) < 4 {
		return nil
	}
	return unsafe.Slice((*[4]uint64)(unsafe.Pointer(&q[0])), len(q)/4)
}

// asBytes views words as bytes (the host is little-endian: checked in main),
// so a payload generated as words is the byte string the ring carries.
func asBytes(w []uint64) []byte {
	if len(w) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), 8*len(w))
}
