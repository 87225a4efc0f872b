package bus

import "unsafe"

// uintptrOf returns the virtual address of b's first byte (the page frame
// numbers of GuestMemProc are this process's virtual pages).
func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
