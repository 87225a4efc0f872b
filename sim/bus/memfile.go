package bus

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// newMemFile creates an anonymous shared-memory file of size bytes
// (memfd_create with MFD_CLOEXEC, then ftruncate, so it reads as zeros) and
// maps it MAP_SHARED read-write. It stands for memory the kernel hands to
// user space through a uio map: the host keeps mem, and the file is what a
// uio node sends to the guest (SCM_RIGHTS), who maps it from offset 0.
//
// With populated, the host's mapping is filled at once (populate): for
// memory the host reads or writes on the data path, which a real host has
// backed and pinned before the guest first uses it.
//
// The caller owns both: close f when no further guest will receive it, and
// release mem with unmapMem when the host no longer touches it. Either may go
// first; the memory lives until the last mapping and descriptor are gone.
func newMemFile(name string, size int, populated bool) (f *os.File, mem []byte, err error) {
	if size <= 0 {
		return nil, nil, fmt.Errorf("sim: memfile %q: size %d, want > 0", name, size)
	}
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, nil, fmt.Errorf("sim: memfd_create %q: %w", name, err)
	}
	f = os.NewFile(uintptr(fd), "memfd:"+name)
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("sim: memfile %q: ftruncate %d: %w", name, size, err)
	}
	mem, err = unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("sim: memfile %q: mmap %d: %w", name, size, err)
	}
	if populated {
		populate(mem, true)
	}
	return f, mem, nil
}

// populate maps every page of mem now (MADV_POPULATE_WRITE for a writable
// mapping, MADV_POPULATE_READ for a read-only one) instead of at its first
// touch. The memory the host shares with the guest (buffers, rings, guest
// RAM) stands for guest memory a real host has backed and pinned when the
// guest offers it (a GPADL; a NIC's buffers are registered at probe,
// docs/protocol/vmbus-ring.md §1.2), so the host's first read or write of
// a page does not fault; here a first touch of a shared page costs a page
// fault, 15-30 µs on a machine with nested paging.
// Best effort: a kernel before 5.14 refuses the advice (EINVAL) and the
// pages fault in on first touch as before.
func populate(mem []byte, writable bool) {
	if len(mem) == 0 {
		return
	}
	advice := unix.MADV_POPULATE_READ
	if writable {
		advice = unix.MADV_POPULATE_WRITE
	}
	unix.Madvise(mem, advice)
}

// unmapMem releases a mapping made by newMemFile or createRingFile. mem must
// not be used afterwards; a nil or empty mem is a no-op.
func unmapMem(mem []byte) error {
	if len(mem) == 0 {
		return nil
	}
	if err := unix.Munmap(mem); err != nil {
		return fmt.Errorf("sim: munmap: %w", err)
	}
	return nil
}
