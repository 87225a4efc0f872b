package hoptrace

import (
	"fmt"
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Stage is one hop of a round trip, in path order.
type Stage int

// The hops of a request from a client in the guest's namespace to a server
// behind the host's TAP port, and of its response.
const (
	ClientSend   Stage = iota // client: request written to its socket
	GuestTAPRead              // guest: request read from the guest's TAP
	GuestSignal               // guest: request in the outbound ring, host signalled
	HostScan                  // host: monitor scan found the guest's bit
	HostTAPWrite              // host: request written to the host's TAP
	ServerEcho                // server: request read (after the host's TAP write returned), response about to be written
	HostTAPRead               // host: response read from the host's TAP
	HostSignal                // host: response in the inbound ring, guest interrupted
	GuestWake                 // guest: interrupt read, channel waiters notified
	GuestRx                   // guest: response taken from the inbound ring
	ClientRecv                // client: response read from its socket
	NumStages
)

var stageNames = [NumStages]string{
	"client send", "guest TAP read", "guest ring write + signal", "host monitor scan",
	"host TAP write", "server echo", "host TAP read (response)", "host ring write + interrupt",
	"guest interrupt wake-up", "guest receive (ring read)", "client receive (TAP write + socket)",
}

func (s Stage) String() string {
	if s < 0 || s >= NumStages {
		return fmt.Sprintf("stage(%d)", int(s))
	}
	return stageNames[s]
}

// after is the hop a stage follows: a stage records only once that one
// has. Signals and interrupts are optional (a polling peer is not
// signalled), so the hops after them follow the last mandatory one.
var after = [NumStages]Stage{
	ClientSend:   -1,
	GuestTAPRead: ClientSend,
	GuestSignal:  GuestTAPRead,
	HostScan:     GuestTAPRead,
	HostTAPWrite: GuestTAPRead,
	// The host's TAP write delivers the request: a server that runs
	// before the write returns has its hop inside the write's.
	ServerEcho:  HostTAPWrite,
	HostTAPRead: HostTAPWrite,
	HostSignal:  HostTAPRead,
	GuestWake:   HostSignal,
	GuestRx:     HostTAPRead,
	ClientRecv:  -1,
}

// until is the hop that closes a stage's window (-1: none).
var until = [NumStages]Stage{
	ClientSend:   -1,
	GuestTAPRead: HostTAPWrite,
	GuestSignal:  HostTAPWrite,
	HostScan:     HostTAPWrite,
	HostTAPWrite: -1,
	ServerEcho:   HostTAPRead,
	HostTAPRead:  GuestRx,
	HostSignal:   GuestRx,
	GuestWake:    GuestRx,
	GuestRx:      ClientRecv,
	ClientRecv:   -1,
}

// PageSize is the size of the shared page.
const PageSize = 4096

// Stamps is a mapped trace page. The nil *Stamps is valid and records
// nothing.
type Stamps struct {
	mem   []byte
	slots *[NumStages]atomic.Int64
}

// Create makes (or truncates) the page file at path and maps it.
func Create(path string) (*Stamps, error) {
	return open(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC)
}

// Open maps an existing page file.
func Open(path string) (*Stamps, error) { return open(path, os.O_RDWR) }

func open(path string, flag int) (*Stamps, error) {
	f, err := os.OpenFile(path, flag, 0o600)
	if err != nil {
		return nil, fmt.Errorf("hoptrace: %w", err)
	}
	defer f.Close()
	if flag&os.O_CREATE != 0 {
		if err := f.Truncate(PageSize); err != nil {
			return nil, fmt.Errorf("hoptrace: size %s: %w", path, err)
		}
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, PageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("hoptrace: map %s: %w", path, err)
	}
	return &Stamps{mem: mem, slots: (*[NumStages]atomic.Int64)(unsafe.Pointer(&mem[0]))}, nil
}

// Close unmaps the page.
func (s *Stamps) Close() error {
	if s == nil || s.mem == nil {
		return nil
	}
	err := unix.Munmap(s.mem)
	s.mem, s.slots = nil, nil
	return err
}

// Now is the clock stamps use: wall-clock nanoseconds, the same in every
// process on the machine.
func Now() int64 { return time.Now().UnixNano() }

// Stamp records stage now, if it is the stage's first occurrence in the
// round and the hop it follows has been recorded.
func (s *Stamps) Stamp(stage Stage) {
	if s == nil {
		return
	}
	s.StampAt(stage, Now())
}

// StampAt is Stamp with a given time.
func (s *Stamps) StampAt(stage Stage, t int64) {
	if s == nil || stage < 0 || stage >= NumStages {
		return
	}
	sl := &s.slots[stage]
	if sl.Load() != 0 {
		return
	}
	if p := after[stage]; p >= 0 && s.slots[p].Load() == 0 {
		return
	}
	if u := until[stage]; u >= 0 && s.slots[u].Load() != 0 {
		return
	}
	sl.CompareAndSwap(0, t)
}

// Reset clears every slot (the client, before a request).
func (s *Stamps) Reset() {
	if s == nil {
		return
	}
	for i := range s.slots {
		s.slots[i].Store(0)
	}
}

// Legs turns a filled page into the time each recorded hop took: from the
// latest earlier hop (in path order) stamped no later than it. Hops not
// recorded are 0 and ok false.
func Legs(page *[NumStages]int64) (legs [NumStages]int64, ok [NumStages]bool) {
	for k := Stage(1); k < NumStages; k++ {
		t := page[k]
		if t == 0 {
			continue
		}
		from := int64(0)
		for j := k - 1; j >= 0; j-- {
			if p := page[j]; p != 0 && p <= t && p > from {
				from = p
			}
		}
		if from == 0 {
			continue
		}
		legs[k], ok[k] = t-from, true
	}
	return legs, ok
}

// Read copies the slots out; 0 is a hop not seen (every slot, from a nil
// *Stamps).
func (s *Stamps) Read(dst *[NumStages]int64) {
	if s == nil {
		*dst = [NumStages]int64{}
		return
	}
	for i := range s.slots {
		dst[i] = s.slots[i].Load()
	}
}
