package netvsc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/vmbusd/vmbusd/vmbus"
)

// GPAPool is pinned memory whose guest-physical page numbers are known, so
// frames in it can be handed to the host GPA-direct (docs/protocol/netvsc.md §2.7,
// docs/protocol/vmbus-ring.md lesson 9). Two backends:
//
//   - OpenHugepageGPAPool: MAP_HUGETLB memory, locked, its frame numbers
//     read from /proc/self/pagemap (root only; DPDK's IOVA=PA model).
//   - OpenSimGPAPool: a window of the simulator's R/dev/guestmem, where
//     page frame n is the 4 KiB page at offset n*4096 (docs/uio-contract.md §6).
//
// Pools carve packet buffers from it (NewPool). Safe for concurrent use.
type GPAPool struct {
	kind  string
	path  string      // a simulator pool's R/dev/guestmem
	file  os.FileInfo // ... as it was when mapped
	mem   []byte
	pfn   []uint64 // per 4 KiB page of mem
	mu    sync.Mutex
	next  int
	unmap func() error
}

// ErrGPAPoolStale: a simulator pool's R/dev/guestmem is gone or is another
// file than the one mapped: the simulated host that served it exited (a
// host removes the file then) and the host reads another guest RAM now.
// Close the pool and open a new one.
var ErrGPAPoolStale = errors.New("netvsc: GPA pool stale: the simulator's guest memory was replaced")

// Valid reports whether the host still reads the memory the pool maps:
// for a simulator pool, that R/dev/guestmem is still the file it mapped
// (ErrGPAPoolStale otherwise); a hugepage pool is always valid. Open
// checks it, so that frames are never sent from memory the host does not
// see.
func (g *GPAPool) Valid() error {
	if g.file == nil {
		return nil
	}
	st, err := os.Stat(g.path)
	if err != nil || !os.SameFile(st, g.file) {
		return fmt.Errorf("%w (%s)", ErrGPAPoolStale, g.path)
	}
	return nil
}

// ErrNoPagemap: /proc/self/pagemap hides frame numbers (not root, or a
// kernel that refuses), so a hugepage pool cannot be used.
var ErrNoPagemap = errors.New("netvsc: /proc/self/pagemap shows no page frame numbers (needs root)")

// OpenSimGPAPool maps size bytes at offset off of root/dev/guestmem, the
// simulated guest RAM, as a GPA pool. off and size are multiples of 4 KiB
// and the file must be at least off+size long.
func OpenSimGPAPool(root string, off, size int) (*GPAPool, error) {
	if off%vmbus.HyperVPageSize != 0 || size <= 0 || size%vmbus.HyperVPageSize != 0 {
		return nil, fmt.Errorf("netvsc: guest memory window %d+%d is not whole 4 KiB pages", off, size)
	}
	path := filepath.Join(root, "dev", "guestmem")
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("netvsc: guest memory: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() < int64(off+size) {
		return nil, fmt.Errorf("netvsc: %s holds %d bytes, want %d", path, st.Size(), off+size)
	}
	mem, err := unix.Mmap(int(f.Fd()), int64(off), size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("netvsc: map %s: %w", path, err)
	}
	g := &GPAPool{kind: "sim", path: path, file: st, mem: mem, pfn: make([]uint64, size/vmbus.HyperVPageSize),
		unmap: func() error { return unix.Munmap(mem) }}
	for i := range g.pfn {
		g.pfn[i] = uint64(off/vmbus.HyperVPageSize + i)
	}
	return g, nil
}

// OpenHugepageGPAPool maps size bytes (rounded up to 2 MiB) of hugepages,
// locks them, and reads their frame numbers from /proc/self/pagemap. The
// hugepages must be reserved (vm.nr_hugepages). It returns ErrNoPagemap
// when the kernel hides frame numbers.
func OpenHugepageGPAPool(size int) (*GPAPool, error) {
	const huge = 2 << 20
	size = (size + huge - 1) &^ (huge - 1)
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_HUGETLB|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("netvsc: map %d bytes of hugepages: %w", size, err)
	}
	if err := unix.Mlock(mem); err != nil {
		unix.Munmap(mem)
		return nil, fmt.Errorf("netvsc: lock hugepages: %w", err)
	}
	for i := 0; i < size; i += vmbus.HyperVPageSize {
		mem[i] = 0 // fault every page in
	}
	pfn, err := pagemap(mem)
	if err != nil {
		unix.Munmap(mem)
		return nil, err
	}
	return &GPAPool{kind: "hugepage", mem: mem, pfn: pfn, unmap: func() error { return unix.Munmap(mem) }}, nil
}

// pagemap reads the frame number of every 4 KiB page of mem
// (Documentation/admin-guide/mm/pagemap.rst: bit 63 present, bits 0-54
// the PFN, zero without CAP_SYS_ADMIN).
func pagemap(mem []byte) ([]uint64, error) {
	if os.Getpagesize() != vmbus.HyperVPageSize {
		return nil, fmt.Errorf("netvsc: system pages of %d bytes; GPA pools need 4 KiB", os.Getpagesize())
	}
	f, err := os.Open("/proc/self/pagemap")
	if err != nil {
		return nil, fmt.Errorf("netvsc: %w", err)
	}
	defer f.Close()
	n := len(mem) / vmbus.HyperVPageSize
	raw := make([]byte, 8*n)
	if _, err := f.ReadAt(raw, int64(addrOf(mem)/vmbus.HyperVPageSize)*8); err != nil {
		return nil, fmt.Errorf("netvsc: read pagemap: %w", err)
	}
	pfn := make([]uint64, n)
	for i := range pfn {
		e := binary.LittleEndian.Uint64(raw[8*i:])
		if e&(1<<63) == 0 || e&(1<<55-1) == 0 {
			return nil, ErrNoPagemap
		}
		pfn[i] = e & (1<<55 - 1)
	}
	return pfn, nil
}

// Kind returns "sim" or "hugepage"; Size the pool's bytes; Used how many
// are carved.
func (g *GPAPool) Kind() string { return g.kind }
func (g *GPAPool) Size() int    { return len(g.mem) }
func (g *GPAPool) Used() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.next
}

// PFN returns the frame number of the 4 KiB page at byte off.
func (g *GPAPool) PFN(off int) uint64 { return g.pfn[off/vmbus.HyperVPageSize] }

// carve takes n bytes (page aligned) from the pool.
func (g *GPAPool) carve(n int) (int, []byte, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	n = (n + vmbus.HyperVPageSize - 1) &^ (vmbus.HyperVPageSize - 1)
	if g.next+n > len(g.mem) {
		return 0, nil, fmt.Errorf("netvsc: GPA pool exhausted: %d of %d bytes used, want %d more", g.next, len(g.mem), n)
	}
	off := g.next
	g.next += n
	return off, g.mem[off : off+n : off+n], nil
}

// ranges appends the frame numbers of bytes [off, off+n) to pfns and
// returns the in-page offset of the first byte.
func (g *GPAPool) ranges(off, n int, pfns []uint64) (uint32, []uint64, bool) {
	if off < 0 || n <= 0 || off+n > len(g.mem) {
		return 0, pfns, false
	}
	first, last := off/vmbus.HyperVPageSize, (off+n-1)/vmbus.HyperVPageSize
	pfns = append(pfns, g.pfn[first:last+1]...)
	return uint32(off % vmbus.HyperVPageSize), pfns, true
}

// Close unmaps the pool. Every NIC and Pool using it must be closed.
func (g *GPAPool) Close() error {
	if g.unmap == nil {
		return nil
	}
	err := g.unmap()
	g.unmap = nil
	return err
}
