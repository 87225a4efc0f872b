//go:build !purego

package main

// fillFrom sets q[i] = v + i*k2: 8-word blocks in assembly, the rest in Go.
func fillFrom(q []uint64, v uint64) {
	n := len(q) / 8
	if n > 0 {
		fill8(&q[0], n, v)
	}
	fillGo(q[8*n:], v+uint64(8*n)*k2)
}

// diffFrom ORs together q[i] ^ (v + i*k2).
func diffFrom(q []uint64, v uint64) uint64 {
	n := len(q) / 8
	var d uint64
	if n > 0 {
		d = diff8(&q[0], n, v)
	}
	return d | diffGo(q[8*n:], v+uint64(8*n)*k2)
}

// fill8 sets the n*8 words at p to v, v+k2, v+2*k2, ... (SSE2).
//
//go:noescape
func fill8(p *uint64, n int, v uint64)

// diff8 ORs together the n*8 words at p XORed with v, v+k2, ... (SSE2).
//
//go:noescape
func diff8(p *uint64, n int, v uint64) uint64
