package netvsc

import "unsafe"

// addrOf returns the virtual address of b's first byte (for pagemap).
func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
