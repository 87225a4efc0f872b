package vmbustest

import (
	"sync/atomic"
	"unsafe"
)

// Control words of a ring's header page (struct hv_ring_buffer), which the
// misbehaving host writes directly.
const (
	writeIndexOff  = 0x00
	readIndexOff   = 0x04
	featureBitsOff = 0x40
)

// ringWord returns the 4-byte control word at off in the header of the
// ring that starts at mem. Every access to it is atomic: the peer's ring
// code reads it concurrently.
func ringWord(mem []byte, off int) *uint32 {
	_ = mem[off+3]
	return (*uint32)(unsafe.Pointer(&mem[off]))
}

func loadWord(mem []byte, off int) uint32     { return atomic.LoadUint32(ringWord(mem, off)) }
func storeWord(mem []byte, off int, v uint32) { atomic.StoreUint32(ringWord(mem, off), v) }
