package bus

// Guest memory for GPA-direct ranges.
//
// A guest that transmits GPA-direct (docs/protocol/netvsc.md §2.7; VMBus packet type 9)
// names its data by guest page frame numbers (4 KiB Hyper-V pages). A real
// host reads guest RAM; the simulator has two stand-ins, chosen per NIC
// (NICConfig.Memory):
//
//	GuestMemFile  R/dev/guestmem, a tmpfs file standing for guest RAM (docs/uio-contract.md §6):
//	              page frame n is the 4 KiB at offset n*4096. The simulator creates it
//	              (DefaultGuestMemSize unless a NIC asks for more) and removes it when
//	              the host stops; a guest maps it MAP_SHARED and carves its pinned
//	              pool from it (a pool outliving its host is stale).
//	GuestMemProc  the guest process's own memory, read through /proc/<pid>/mem, for an
//	              unmodified guest running with IOVA = virtual address (DPDK
//	              --iova-mode=va): page frame n is the guest's virtual page n. The pid is
//	              the peer of the uio socket (Session.GuestPID).
//
// Either way a range outside guest memory is the guest's protocol
// violation: the host completes the send with a failure status.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/vmbusd/vmbusd/vmbus"
)

// MemoryModel chooses how a NIC's host reads GPA-direct ranges.
type MemoryModel int

const (
	// GuestMemFile reads R/dev/guestmem: page frame n at offset n*4096.
	GuestMemFile MemoryModel = iota
	// GuestMemProc reads the guest process's memory (/proc/<pid>/mem):
	// page frame n is its virtual page n (IOVA = VA).
	GuestMemProc
)

var memoryModelNames = [...]string{GuestMemFile: "file", GuestMemProc: "proc"}

// String returns "file" or "proc", as ParseMemoryModel takes them.
func (m MemoryModel) String() string {
	if m >= 0 && int(m) < len(memoryModelNames) {
		return memoryModelNames[m]
	}
	return fmt.Sprintf("MemoryModel(%d)", int(m))
}

// ParseMemoryModel parses "file" or "proc".
func ParseMemoryModel(s string) (MemoryModel, error) {
	for i, n := range memoryModelNames {
		if s == n {
			return MemoryModel(i), nil
		}
	}
	return 0, fmt.Errorf("sim: unknown memory model %q (valid: file, proc)", s)
}

// GuestMemPath is where the GuestMemFile model's file lives under the root.
const GuestMemPath = "dev/guestmem"

// DefaultGuestMemSize is the size R/dev/guestmem is created with: 256 MiB
// of guest RAM, sparse on tmpfs until written.
const DefaultGuestMemSize = 256 << 20

// errGuestRange is a GPA range the guest memory does not hold.
var errGuestRange = errors.New("guest page outside guest memory")

// GuestMemory reads guest pages for one session. Not safe for concurrent
// use by several goroutines unless the implementation says so; both
// implementations here are (they only read).
type GuestMemory interface {
	// ReadPage copies len(p) bytes from guest page pfn at offset off;
	// off+len(p) <= 4096. errGuestRange when the page is not guest memory.
	ReadPage(p []byte, pfn uint64, off uint32) error
	Close() error
}

// guestMemFileMu serialises the creation and growth of R/dev/guestmem by
// several NICs of one or more hosts.
var guestMemFileMu sync.Mutex

// EnsureGuestMemFile creates R/dev/guestmem with at least size bytes (a
// larger existing file is kept: it is the guest's RAM, shared by NICs).
func EnsureGuestMemFile(root string, size int64) error {
	guestMemFileMu.Lock()
	defer guestMemFileMu.Unlock()
	p := filepath.Join(root, GuestMemPath)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("sim: guest memory: %w", err)
	}
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("sim: guest memory: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("sim: guest memory: %w", err)
	}
	if st.Size() < size {
		if err := f.Truncate(size); err != nil {
			return fmt.Errorf("sim: guest memory: %w", err)
		}
	}
	return nil
}

// removeGuestMemFile removes R/dev/guestmem when the host that served the
// root stops: nothing reads it any more, and on tmpfs its pages hold RAM.
// (Only one host serves a root at a time, so the file is the stopping
// host's, whoever created it.)
func removeGuestMemFile(root string) error {
	guestMemFileMu.Lock()
	defer guestMemFileMu.Unlock()
	if err := os.Remove(filepath.Join(root, GuestMemPath)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("sim: guest memory: %w", err)
	}
	return nil
}

// fileGuestMemory maps R/dev/guestmem read-only for a session.
type fileGuestMemory struct {
	mem []byte
}

// OpenFileGuestMemory maps R/dev/guestmem for a session of the file model.
func OpenFileGuestMemory(root string) (GuestMemory, error) {
	p := filepath.Join(root, GuestMemPath)
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("sim: guest memory: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("sim: guest memory: %w", err)
	}
	if st.Size() < vmbus.HyperVPageSize {
		return nil, fmt.Errorf("sim: guest memory %s: %d bytes", p, st.Size())
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("sim: guest memory: mmap %s: %w", p, err)
	}
	populateData(f, mem)
	return &fileGuestMemory{mem: mem}, nil
}

// populateData maps now the pages of mem, a mapping of f from offset 0,
// that the file holds data for (SEEK_DATA/SEEK_HOLE): the guest RAM a
// guest has written, its pinned pool among it, which a real host reads
// without faulting (populate). Holes stay lazy: populating them would
// allocate the whole sparse file on tmpfs, and a read of a hole is rare
// (a guest sends from memory it wrote). Pages the guest writes after the
// session opened fault in at the host's first read, as before. Best effort.
func populateData(f *os.File, mem []byte) {
	fd, size := int(f.Fd()), int64(len(mem))
	for off := int64(0); off < size; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if err != nil || data >= size {
			return // ENXIO: no data past off
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			return
		}
		hole = min(hole, size)
		page := int64(os.Getpagesize())
		start, end := data&^(page-1), min((hole+page-1)&^(page-1), size)
		populate(mem[start:end], false)
		off = hole
	}
}

func (g *fileGuestMemory) ReadPage(p []byte, pfn uint64, off uint32) error {
	pages := uint64(len(g.mem)) / vmbus.HyperVPageSize
	if pfn >= pages || uint64(off)+uint64(len(p)) > vmbus.HyperVPageSize {
		return errGuestRange
	}
	copy(p, g.mem[pfn*vmbus.HyperVPageSize+uint64(off):])
	return nil
}

func (g *fileGuestMemory) Close() error { return unmapMem(g.mem) }

// procGuestMemory reads another process's memory through /proc/<pid>/mem
// (pread at the virtual address; unmapped addresses fail with EIO).
type procGuestMemory struct {
	f *os.File
}

// OpenProcGuestMemory opens the guest process pid's memory for a session
// of the proc model.
func OpenProcGuestMemory(pid int) (GuestMemory, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("sim: guest memory: no guest pid")
	}
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/mem")
	if err != nil {
		return nil, fmt.Errorf("sim: guest memory: %w", err)
	}
	return &procGuestMemory{f: f}, nil
}

// maxUserPFN bounds page frame numbers to the 47-bit user address space,
// so pfn*4096 cannot overflow the file offset.
const maxUserPFN = 1 << (47 - 12)

func (g *procGuestMemory) ReadPage(p []byte, pfn uint64, off uint32) error {
	if pfn >= maxUserPFN || uint64(off)+uint64(len(p)) > vmbus.HyperVPageSize {
		return errGuestRange
	}
	at := int64(pfn*vmbus.HyperVPageSize) + int64(off)
	for len(p) > 0 {
		n, err := unix.Pread(int(g.f.Fd()), p, at)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return errGuestRange
		}
		p, at = p[n:], at+int64(n)
	}
	return nil
}

func (g *procGuestMemory) Close() error { return g.f.Close() }
