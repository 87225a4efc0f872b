// Package csum is the Internet checksum (RFC 1071), shared by the guest's
// software segmentation and the simulated host's frame checks.
package csum

// Add adds b to a running one's-complement sum (big-endian 16-bit words;
// an odd last byte is padded with zero).
func Add(sum uint32, b []byte) uint32 {
	for len(b) >= 2 {
		sum += uint32(b[0])<<8 | uint32(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		sum += uint32(b[0]) << 8
	}
	return sum
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
