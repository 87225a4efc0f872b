package vmbus

import (
	"sync/atomic"
	"unsafe"
)

// ringControl is the start of struct hv_ring_buffer (include/linux/hyperv.h;
// docs/protocol/vmbus-ring.md §2.1). Every field is shared with the peer and is only ever
// touched through sync/atomic: each store is one 4-byte access, and Go's
// atomics are sequentially consistent, which gives the full barriers the
// signalling rules need between publishing an index and reading the peer's
// mask or pending size.
type ringControl struct {
	writeIndex    atomic.Uint32 // 0x00, owned by the writer
	readIndex     atomic.Uint32 // 0x04, owned by the reader
	interruptMask atomic.Uint32 // 0x08, owned by the reader
	pendingSendSz atomic.Uint32 // 0x0c, owned by the writer
	_             [12]uint32    // 0x10 reserved1
	featureBits   atomic.Uint32 // 0x40, bit 0 = feat_pending_send_sz
}

// controlOf returns the control words at the start of mem. The caller has
// checked that mem is long enough and 4-byte aligned.
func controlOf(mem []byte) *ringControl {
	return (*ringControl)(unsafe.Pointer(unsafe.SliceData(mem)))
}

// aligned4 reports whether b starts on a 4-byte boundary.
func aligned4(b []byte) bool {
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))%4 == 0
}

// word32 returns the 4-byte word at off in shared memory, for atomic use.
// off must be 4-aligned and inside b.
func word32(b []byte, off int) *uint32 {
	_ = b[off+3]
	return (*uint32)(unsafe.Pointer(&b[off]))
}
