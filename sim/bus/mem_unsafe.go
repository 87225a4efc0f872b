package bus

import (
	"sync/atomic"
	"unsafe"
)

// ringMaskWord returns the interrupt_mask word (offset 8) of the ring whose
// header starts at mem[0]. The simulated guest kernel writes it the way
// uio_hv_generic does before 6.18.
func ringMaskWord(mem []byte) *uint32 {
	_ = mem[11]
	return (*uint32)(unsafe.Pointer(&mem[8]))
}

func setRingMask(mem []byte, masked bool) {
	var v uint32
	if masked {
		v = 1
	}
	atomic.StoreUint32(ringMaskWord(mem), v)
}

// ringWord returns the 4-byte ring header word at off (0 write index,
// 4 read index), for fault injection.
func ringWord(mem []byte, off int) *uint32 {
	_ = mem[off+3]
	return (*uint32)(unsafe.Pointer(&mem[off]))
}
