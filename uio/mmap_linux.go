package uio

import (
	"fmt"
	"math"
	"os"

	"golang.org/x/sys/unix"
)

// All mmap and munmap calls of the package are here. Errors carry no
// "uio: " prefix; callers add it with their context.

// charMapOffset is the mmap offset of map index on /dev/uioN: the uio core
// takes the map index from vm_pgoff, so map K is at K pages (uio.c
// uio_mmap; docs/protocol/vmbus-ring.md §1.2).
func charMapOffset(index int) int64 { return int64(index) * int64(os.Getpagesize()) }

// mapLen returns size rounded up to whole pages, the length to mmap for a
// region of size bytes; uio accepts up to the map size rounded up to pages.
func mapLen(size uint64) (int, error) {
	page := uint64(os.Getpagesize())
	if size == 0 || size > math.MaxInt-page {
		return 0, fmt.Errorf("cannot map %d bytes", size)
	}
	return int((size + page - 1) &^ (page - 1)), nil
}

// mmapShared maps size bytes (rounded up to pages) of fd at off, shared and
// read-write. The returned slice has the full, rounded length and must be
// passed unchanged to munmap; hand callers trimMap of it.
func mmapShared(fd int, off int64, size uint64) ([]byte, error) {
	n, err := mapLen(size)
	if err != nil {
		return nil, err
	}
	mem, err := unix.Mmap(fd, off, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %d bytes at offset %#x: %w", n, off, err)
	}
	return mem, nil
}

// prefault maps every page of mem writable now (MADV_POPULATE_WRITE),
// best effort: a kernel before 5.14, or a mapping the kernel filled at
// mmap (VM_PFNMAP), refuses it and the pages fault in on first touch as
// before (Options.Prefault).
func prefault(mem []byte) {
	if len(mem) > 0 {
		unix.Madvise(mem, unix.MADV_POPULATE_WRITE)
	}
}

// trimMap returns mem cut to the sysfs size, with the capacity cut too so
// an append cannot reach the rest of the last page.
func trimMap(mem []byte, size uint64) []byte { return mem[:size:size] }

// munmap undoes mmapShared; mem must be the slice mmapShared returned.
func munmap(mem []byte) error {
	if mem == nil {
		return nil
	}
	if err := unix.Munmap(mem); err != nil {
		return fmt.Errorf("munmap: %w", err)
	}
	return nil
}

// munmapAll unmaps every mapping in mems and returns the first error.
func munmapAll(mems [][]byte) error {
	var first error
	for _, m := range mems {
		if err := munmap(m); err != nil && first == nil {
			first = err
		}
	}
	return first
}
