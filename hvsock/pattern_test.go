package hvsock_test

import (
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
)

// A stream's bytes are a pure function of (seed, offset), so a receiver
// checks them on the fly without keeping a copy.

func patternWord(seed, i uint64) uint64 {
	z := seed ^ (i * 0x9E3779B97F4A7C15)
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// fillPattern writes the stream's bytes [off, off+len(b)) into b.
func fillPattern(b []byte, seed, off uint64) {
	for len(b) > 0 {
		w := off / 8
		var word [8]byte
		binary.LittleEndian.PutUint64(word[:], patternWord(seed, w))
		k := copy(b, word[off%8:])
		b, off = b[k:], off+uint64(k)
	}
}

// patternChecker verifies a stream as it is written to it.
type patternChecker struct {
	seed, off uint64
	want      []byte
}

func (c *patternChecker) Write(b []byte) (int, error) {
	if cap(c.want) < len(b) {
		c.want = make([]byte, len(b))
	}
	want := c.want[:len(b)]
	fillPattern(want, c.seed, c.off)
	for i := range b {
		if b[i] != want[i] {
			return i, fmt.Errorf("byte %d of the stream is %#x, want %#x", c.off+uint64(i), b[i], want[i])
		}
	}
	c.off += uint64(len(b))
	return len(b), nil
}

// sendPattern writes n bytes of the stream to w in writes of random size
// up to maxWrite.
func sendPattern(w io.Writer, seed, n uint64, maxWrite int, rng *rand.Rand) error {
	buf := make([]byte, maxWrite)
	for off := uint64(0); off < n; {
		k := min(uint64(1+rng.IntN(maxWrite)), n-off)
		fillPattern(buf[:k], seed, off)
		m, err := w.Write(buf[:k])
		off += uint64(m)
		if err != nil {
			return fmt.Errorf("write at %d: %w", off, err)
		}
	}
	return nil
}

// recvPattern reads the stream from r to its end in reads of random size
// up to maxRead and checks n bytes came, all right.
func recvPattern(r io.Reader, seed, n uint64, maxRead int, rng *rand.Rand) error {
	chk := &patternChecker{seed: seed}
	buf := make([]byte, maxRead)
	for {
		k := 1 + rng.IntN(maxRead)
		m, err := r.Read(buf[:k])
		if m > 0 {
			if _, werr := chk.Write(buf[:m]); werr != nil {
				return werr
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("read at %d: %w", chk.off, err)
		}
	}
	if chk.off != n {
		return fmt.Errorf("stream ended after %d bytes, want %d", chk.off, n)
	}
	return nil
}
