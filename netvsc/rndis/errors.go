package rndis

import (
	"encoding/binary"
	"errors"
	"slices"
)

// ErrBufferTooSmall is returned by the Put… encoders when the destination
// cannot hold the message. It is the caller's sizing problem, not a
// protocol violation.
var ErrBufferTooSmall = errors.New("netvsc: destination buffer too small")

var le = binary.LittleEndian

// grow extends dst by n zero bytes and returns the result and the new
// bytes. It allocates only when dst lacks the capacity.
func grow(dst []byte, n int) ([]byte, []byte) {
	l := len(dst)
	dst = slices.Grow(dst, n)[:l+n]
	b := dst[l:]
	clear(b)
	return dst, b
}
