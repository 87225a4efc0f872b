//go:build race && amd64 && !purego

package vmbus

import (
	"runtime"
	"unsafe"
)

// raceCopy tells the race detector about the accesses of a copy made in
// assembly, which it does not see.
func raceCopy(dst, src []byte) {
	runtime.RaceReadRange(unsafe.Pointer(unsafe.SliceData(src)), len(src))
	runtime.RaceWriteRange(unsafe.Pointer(unsafe.SliceData(dst)), len(dst))
}
