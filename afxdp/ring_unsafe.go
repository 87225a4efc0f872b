package afxdp

import (
	"sync/atomic"
	"unsafe"
)

// ringMem is one AF_XDP ring as the kernel lays it out in a shared
// mapping: a producer word, a consumer word, a flags word and an array of
// entries, each at an offset the kernel reports (XDP_MMAP_OFFSETS). Both
// index words are free-running uint32s; an entry's slot is index & mask.
//
// The words are shared with the kernel, so every access to them is
// atomic. Entries are plain memory ordered by the index words: the writer
// fills an entry before it stores the producer index (release), the
// reader loads the producer index (acquire) before it reads the entry.
type ringMem struct {
	producer *atomic.Uint32
	consumer *atomic.Uint32
	flags    *atomic.Uint32
	entries  unsafe.Pointer
	mask     uint32
}

// newRingMem points a ringMem at mem. The offsets and sizes must already
// have been checked against len(mem) (checkRingLayout).
func newRingMem(mem []byte, prod, cons, flags, entries uint64, n uint32) ringMem {
	base := unsafe.Pointer(unsafe.SliceData(mem))
	return ringMem{
		producer: (*atomic.Uint32)(unsafe.Add(base, prod)),
		consumer: (*atomic.Uint32)(unsafe.Add(base, cons)),
		flags:    (*atomic.Uint32)(unsafe.Add(base, flags)),
		entries:  unsafe.Add(base, entries),
		mask:     n - 1,
	}
}

// desc is struct xdp_desc (linux/if_xdp.h): 16 bytes.
type desc struct {
	addr    uint64
	len     uint32
	options uint32
}

const descSize = int(unsafe.Sizeof(desc{}))

func (r *ringMem) desc(i uint32) *desc {
	return (*desc)(unsafe.Add(r.entries, uintptr(i&r.mask)*unsafe.Sizeof(desc{})))
}

func (r *ringMem) addr(i uint32) *uint64 {
	return (*uint64)(unsafe.Add(r.entries, uintptr(i&r.mask)*8))
}

func uintptrOf(b []byte) uintptr {
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))
}
