//go:build linux

package uio

import (
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// RingFile is a sub-channel's ring pair mapped from its sysfs file,
// R/sys/bus/vmbus/devices/<guid>/channels/<relid>/ring (docs/protocol/vmbus-ring.md §1.7).
// Close must not race with users of Mem; otherwise it is safe for concurrent
// use.
type RingFile struct {
	// Mem is the whole file, shared with the host: the outbound ring
	// first, the inbound ring at len(Mem)/2. Valid until Close.
	Mem  []byte
	Path string

	mem       []byte // as mmapped, for munmap
	closeOnce sync.Once
	closeErr  error
}

// OpenRingFile maps a ring file whole, shared and read-write, from offset
// 0. Its size comes from fstat, never from a constant (docs/protocol/vmbus-ring.md §1.3);
// it must be a non-zero multiple of two pages, one ring pair.
func OpenRingFile(path string) (*RingFile, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("uio: %w", &os.PathError{Op: "open ring", Path: path, Err: err})
	}
	defer unix.Close(fd) // the mapping outlives the descriptor
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("uio: open ring %s: %w", path, err)
	}
	pair := int64(2 * os.Getpagesize())
	if st.Size <= 0 || st.Size%pair != 0 {
		return nil, fmt.Errorf("uio: open ring %s: size %d is not a non-zero multiple of %d", path, st.Size, pair)
	}
	mem, err := mmapShared(fd, 0, uint64(st.Size))
	if err != nil {
		return nil, fmt.Errorf("uio: open ring %s: %w", path, err)
	}
	return &RingFile{Mem: mem, Path: path, mem: mem}, nil
}

// Close unmaps the ring file. It is idempotent.
func (r *RingFile) Close() error {
	r.closeOnce.Do(func() {
		if err := munmap(r.mem); err != nil {
			r.closeErr = fmt.Errorf("uio: close ring %s: %w", r.Path, err)
		}
		r.Mem, r.mem = nil, nil
	})
	return r.closeErr
}
