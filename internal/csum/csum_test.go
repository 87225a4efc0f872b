package csum

import "testing"

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
