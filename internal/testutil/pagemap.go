package testutil

import (
	"encoding/binary"
	"os"
	"testing"
	"unsafe"
)

// ResidentPages reports, for each page of mem, whether it has a page-table
// entry now (/proc/self/pagemap bit 63), without touching it: the tests
// of memory mapped in full at creation (uio's Prefault, the simulated
// host's shared memory) check with it that a first touch will not fault.
// A test without a readable pagemap skips.
func ResidentPages(t testing.TB, mem []byte) []bool {
	t.Helper()
	f, err := os.Open("/proc/self/pagemap")
	if err != nil {
		t.Skipf("pagemap: %v", err)
	}
	defer f.Close()
	page := uintptr(os.Getpagesize())
	start := uintptr(unsafe.Pointer(unsafe.SliceData(mem))) / page
	n := (uintptr(len(mem)) + page - 1) / page
	buf := make([]byte, 8*n)
	if _, err := f.ReadAt(buf, int64(start*8)); err != nil {
		t.Fatalf("pagemap: %v", err)
	}
	present := make([]bool, n)
	for i := range present {
		present[i] = binary.LittleEndian.Uint64(buf[8*i:])&(1<<63) != 0
	}
	return present
}
