//go:build linux

package afxdp

import (
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

var errOldKernel = errors.New("afxdp: kernel too old (XDP_MMAP_OFFSETS without ring flags; need Linux 5.4 or later)")

// umemArea is the memory behind a UMEM registration: one anonymous
// mapping of frameCount frames. Sockets sharing it each hold a reference;
// the last Close unmaps it.
type umemArea struct {
	mem       []byte
	frameSize int
	mu        sync.Mutex
	refs      int
}

func newUMEMArea(frames, frameSize int) (*umemArea, error) {
	mem, err := unix.Mmap(-1, 0, frames*frameSize, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("afxdp: map %d-frame umem: %w", frames, err)
	}
	return &umemArea{mem: mem, frameSize: frameSize, refs: 1}, nil
}

func (u *umemArea) ref() {
	u.mu.Lock()
	u.refs++
	u.mu.Unlock()
}

func (u *umemArea) unref() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.refs--; u.refs == 0 && u.mem != nil {
		_ = unix.Munmap(u.mem)
		u.mem = nil
	}
}

// mapRing maps one of a socket's rings and checks the kernel's offsets
// against the mapping before anything points into it.
func mapRing(fd int, pgoff int64, off unix.XDPRingOffset, entries uint32, entrySize int) ([]byte, ringMem, error) {
	if off.Desc > 1<<20 {
		return nil, ringMem{}, fmt.Errorf("afxdp: ring descriptor offset %d implausible", off.Desc)
	}
	size := int(off.Desc) + int(entries)*entrySize
	mem, err := unix.Mmap(fd, pgoff, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, ringMem{}, fmt.Errorf("afxdp: map ring at %#x: %w", pgoff, err)
	}
	for _, o := range []uint64{off.Producer, off.Consumer, off.Flags} {
		if o%4 != 0 || o+4 > uint64(size) {
			_ = unix.Munmap(mem)
			return nil, ringMem{}, fmt.Errorf("afxdp: ring word offset %d outside %d-byte mapping", o, size)
		}
	}
	if off.Desc%8 != 0 {
		_ = unix.Munmap(mem)
		return nil, ringMem{}, fmt.Errorf("afxdp: ring descriptor offset %d misaligned", off.Desc)
	}
	return mem, newRingMem(mem, off.Producer, off.Consumer, off.Flags, off.Desc, entries), nil
}
