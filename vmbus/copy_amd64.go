//go:build !purego

package vmbus

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// bulkCopyMin is the length from which ring copies use REP MOVSB.
var bulkCopyMin = bulkThreshold(cpu.X86.HasERMS, cpu.X86.HasERMS && hasFSRM())

// bulkThreshold picks where REP MOVSB starts to pay, as glibc's x86 memcpy
// does (and DPDK's ring code, which calls it): 2 KiB on CPUs with fast short
// REP MOVSB (FSRM), whose start-up cost is small; 4 KiB on CPUs that only
// have enhanced REP MOVSB (ERMS); never on CPUs without ERMS, where the
// microcode copy is not the fast one. Below 2 KiB copy's vector loop was as
// fast or faster in BenchmarkRingCrossCore.
func bulkThreshold(erms, fsrm bool) int {
	switch {
	case fsrm:
		return 2048
	case erms:
		return 4096
	}
	return noBulk
}

// bulkCopy is copy(dst, src) with REP MOVSB. Overlapping slices and blocks
// under 64 bytes are left to copy.
func bulkCopy(dst, src []byte) int {
	n := min(len(dst), len(src))
	if raceBuild || n < 64 {
		return copy(dst, src)
	}
	d := uintptr(unsafe.Pointer(unsafe.SliceData(dst)))
	s := uintptr(unsafe.Pointer(unsafe.SliceData(src)))
	if d-s < uintptr(n) || s-d < uintptr(n) {
		return copy(dst, src)
	}
	repMovsb(unsafe.SliceData(dst), unsafe.SliceData(src), n)
	return n
}

// repMovsb copies n >= 64 bytes from src to dst, which must not overlap.
// As in glibc, the string copy starts at dst's next 64-byte boundary and
// the bytes before it are stored from registers: from an 8-aligned start
// 64 KiB copies ran about 5% slower.
//
//go:noescape
func repMovsb(dst, src *byte, n int)

// hasFSRM reports CPUID leaf 7 EDX bit 4, fast short REP MOV. Call it only
// when leaf 7 exists (cpu.X86.HasERMS comes from it).
func hasFSRM() bool {
	_, _, _, edx := cpuid(7, 0)
	return edx&(1<<4) != 0
}

//go:noescape
func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)
