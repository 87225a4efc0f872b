package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	bits32 "math/bits"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vmbusd/vmbusd/hoptrace"
	"github.com/vmbusd/vmbusd/vmbus"
)

// Host is a simulated Hyper-V host together with the guest kernel's
// uio_hv_generic: it lays out a sysfs tree under a root directory, serves
// each device's R/dev/uioN socket (the uio contract, docs/uio-contract.md), and runs
// the host end of every channel with the same vmbus ring code the guest
// uses, following the host's rules: it masks the guest-to-host ring while
// draining and re-checks after unmasking, interrupts the guest only on
// empty to non-empty with the guest's mask clear, honours pending_send_sz,
// scans the monitor page at the latency the guest sets, offers
// sub-channels asynchronously and can rescind a device.
//
// A Host is safe for concurrent use.
type Host struct {
	cfg Config
	log *slog.Logger

	// The interrupt page and monitor page are global in the guest kernel
	// (vmbus_connection), so every device maps the same two.
	intFile, monFile *os.File
	intPage, monPage []byte

	mu        sync.Mutex
	devs      map[vmbus.GUID]*Device
	nextRelID uint32
	monUsed   [vmbus.MaxMonitorID]bool // monitor ids held by an offered channel
	monEver   [vmbus.MaxMonitorID]bool // ids ever given out (a stale bit on one is no violation)
	nextGPADL uint32
	monitored map[int]*Channel // monitor id -> channel, while its device is open
	monKick   chan struct{}
	// listening counts the host ends of monitored channels that wait for
	// a guest signal (Channel.BeginWait to EndWait): only then may a guest
	// set a monitor bit that matters, so only then does the scanner run.
	// listenKick wakes a parked scanner when the count leaves zero.
	listening  atomic.Int32
	listenKick chan struct{}
	viol       map[string]uint64
	closed     bool

	drv *driverCore // driver binding and its sysfs watcher (drivers.go)

	lock *os.File // the root directory, flocked while the host runs

	removeRoot bool // the root is NewTemp's: Close removes it

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Config configures a Host.
type Config struct {
	// Root is the directory standing for "/" (keep it on tmpfs).
	Root    string
	Profile Profile
	Logger  *slog.Logger
	// MonitorScan is the monitor-page scan interval used for channels whose
	// guest set no latency (Linux's comment: about 100 µs).
	MonitorScan time.Duration
	// AbsoluteLinks writes the tree's symbolic links with absolute targets
	// inside Root instead of kernfs's relative text, so that a guest that
	// bind-mounts only R/sys/bus and R/sys/class over /sys (the DPDK
	// dpdk-guest tool) still reaches the device directories in
	// R/sys/devices. The layout is otherwise the same.
	AbsoluteLinks bool
	// Faults are switched on for every device the host offers, from its
	// offer on: test devices, NICs, and the channel of every hv_sock
	// connection (a one-shot fault fires once per device). Device.SetFault
	// switches them per device afterwards.
	Faults []Fault
	// Stamps, when set, receives the host's hops of a traced round trip
	// (package hoptrace): its monitor scans and its interrupts.
	Stamps *hoptrace.Stamps
}

// absLinkRoots holds the roots whose hosts write absolute links.
var absLinkRoots sync.Map // string -> struct{}

// absoluteLinks reports whether a link at p belongs to such a root.
func absoluteLinks(p string) bool {
	abs := false
	absLinkRoots.Range(func(k, _ any) bool {
		r := k.(string)
		abs = p == r || strings.HasPrefix(p, r+string(filepath.Separator))
		return !abs
	})
	return abs
}

// New creates the tree under cfg.Root and returns a host with no devices.
func New(cfg Config) (*Host, error) {
	if cfg.Root == "" {
		return nil, fmt.Errorf("sim: no root directory")
	}
	if cfg.MonitorScan == 0 {
		cfg.MonitorScan = 100 * time.Microsecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Profile = cfg.Profile.orDefault()
	root, err := filepath.Abs(cfg.Root)
	if err != nil {
		return nil, err
	}
	cfg.Root = root
	// Before anything under the root is touched: a second host there
	// would replace the first one's device nodes.
	lock, err := lockRoot(root)
	if err != nil {
		return nil, err
	}
	if cfg.AbsoluteLinks {
		absLinkRoots.Store(root, struct{}{})
	}
	if err := initTree(root, cfg.Profile); err != nil {
		lock.Close()
		return nil, err
	}
	h := &Host{cfg: cfg, log: cfg.Logger.With("sim", "host"), devs: map[vmbus.GUID]*Device{},
		nextRelID: 14, nextGPADL: 0xe1e10, monitored: map[int]*Channel{}, monKick: make(chan struct{}, 1),
		listenKick: make(chan struct{}, 1),
		viol:       map[string]uint64{}, lock: lock}
	if h.intFile, h.intPage, err = newMemFile("int_page", 4096, true); err != nil {
		lock.Close()
		return nil, err
	}
	if h.monFile, h.monPage, err = newMemFile("monitor_page", vmbus.MonitorPageSize, true); err != nil {
		h.intFile.Close()
		lock.Close()
		return nil, err
	}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	h.wg.Add(1)
	go h.runMonitor()
	if err := h.startDrivers(); err != nil { // drivers.go
		h.Close()
		return nil, err
	}
	h.log.Info("simulated host started", "root", root, "profile", cfg.Profile.String())
	return h, nil
}

// Root returns the absolute root directory.
func (h *Host) Root() string { return h.cfg.Root }

// Profile returns the kernel profile the host simulates.
func (h *Host) Profile() Profile { return h.cfg.Profile }

// Violations returns the protocol violations guests committed, by kind.
func (h *Host) Violations() map[string]uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.viol)
}

// violation counts a rule a guest broke. It never stops the host.
func (h *Host) violation(dev vmbus.GUID, what string) {
	h.mu.Lock()
	h.viol[what]++
	n := h.viol[what]
	h.mu.Unlock()
	if n <= 3 || n&(n-1) == 0 { // log the first few, then at powers of two
		h.log.Warn("guest protocol violation", "device", dev.String(), "what", what, "count", n)
	}
}

// Devices returns the devices currently offered.
func (h *Host) Devices() []*Device {
	h.mu.Lock()
	defer h.mu.Unlock()
	ds := slices.Collect(maps.Values(h.devs))
	slices.SortFunc(ds, func(a, b *Device) int { return int(a.relid) - int(b.relid) })
	return ds
}

// Device returns the offered device with the instance id, or nil.
func (h *Host) Device(instance vmbus.GUID) *Device {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.devs[instance]
}

// Close rescinds every device and stops the host. The tree stays, but for
// R/dev/guestmem: guest RAM lives as long as the host that serves it (a
// guest's pool in it is stale then: netvsc.GPAPool.Valid). A NewTemp host
// removes its whole root.
func (h *Host) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	devs := slices.Collect(maps.Values(h.devs))
	h.mu.Unlock()
	var first error
	for _, d := range devs {
		if err := d.Rescind(); err != nil && first == nil {
			first = err
		}
	}
	h.cancel()
	h.wg.Wait()
	unmapMem(h.intPage)
	unmapMem(h.monPage)
	h.intFile.Close()
	h.monFile.Close()
	if err := removeGuestMemFile(h.cfg.Root); err != nil && first == nil {
		first = err
	}
	h.lock.Close() // releases the root
	if h.removeRoot {
		if err := os.RemoveAll(h.cfg.Root); err != nil && first == nil {
			first = fmt.Errorf("sim: remove root: %w", err)
		}
	}
	h.log.Info("simulated host stopped")
	return first
}

// ErrRootInUse is New's error when another simulated host, in this
// process or another, serves the root.
var ErrRootInUse = errors.New("in use by another simulated host")

// lockRoot takes an exclusive flock on the root directory itself (a lock
// file would be left behind); the kernel drops it when the host closes it
// or its process dies, so a crashed host never blocks the next.
func lockRoot(root string) (*os.File, error) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("sim: root: %w", err)
	}
	f, err := os.Open(root)
	if err != nil {
		return nil, fmt.Errorf("sim: root: %w", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		if err == unix.EWOULDBLOCK {
			return nil, fmt.Errorf("sim: %s: %w (stop it first; nothing was changed)", root, ErrRootInUse)
		}
		return nil, fmt.Errorf("sim: lock %s: %w", root, err)
	}
	return f, nil
}

// sleepUntilNext sleeps until the deadline after prev (CLOCK_MONOTONIC
// nanoseconds, 0 for none), interval apart, and returns it; a scanner that
// fell more than an interval behind starts a new cadence from now.
func sleepUntilNext(prev int64, interval time.Duration) int64 {
	var now unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &now)
	next := prev + int64(interval)
	if n := now.Nano(); next < n-int64(interval) || next > n+int64(interval) {
		next = n + int64(interval)
	}
	ts := unix.NsecToTimespec(next)
	for unix.ClockNanosleep(unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME, &ts, nil) == unix.EINTR {
	}
	return next
}

// allocMonitorLocked gives out the lowest free monitor id, or -1 when all
// are held. Ids come back when their channel's offer ends (a rescind, or
// the sub-channels of a closed session), as the host reuses them: without
// reuse a device re-offered often enough would run out. h.mu is held.
func (h *Host) allocMonitorLocked() int {
	for id := range h.monUsed {
		if !h.monUsed[id] {
			h.monUsed[id], h.monEver[id] = true, true
			return id
		}
	}
	return -1
}

// freeMonitor returns a monitor id given out by allocMonitorLocked.
func (h *Host) freeMonitor(id int) {
	if id < 0 {
		return
	}
	h.mu.Lock()
	h.monUsed[id] = false
	h.mu.Unlock()
}

// registerMonitor makes the scanner watch a channel's monitor bit.
func (h *Host) registerMonitor(id int, c *Channel) {
	h.mu.Lock()
	if c == nil {
		delete(h.monitored, id)
	} else {
		h.monitored[id] = c
	}
	h.mu.Unlock()
	select {
	case h.monKick <- struct{}{}:
	default:
	}
}

// listen and unlisten count a monitored channel's host end in and out
// of a wait for a guest signal (Channel.BeginWait, EndWait); the first
// one in wakes a parked scanner.
func (h *Host) listen() {
	if h.listening.Add(1) == 1 {
		select {
		case h.listenKick <- struct{}{}:
		default:
		}
	}
}

func (h *Host) unlisten() { h.listening.Add(-1) }

// Idle scanning (runMonitor).
const (
	monitorIdleAfter = 100 * time.Millisecond
	monitorIdleScan  = time.Millisecond
)

// runMonitor is the host's periodic scan of the monitor page: it takes and
// clears the pending bits and wakes the channels they belong to. It sleeps
// the shortest latency the guests asked for (100 ns units in the page),
// and not at all while no monitored channel is open.
//
// Nor while no monitored channel's host end waits for a signal: a guest
// signals a monitored channel by setting its bit only when the host's
// reader has its interrupt_mask clear and the ring was empty, or when
// its read crossed the host writer's pending_send_sz
// (docs/protocol/vmbus-ring.md §2.4). The host's services clear the one
// and set the other only inside a wait (Channel.BeginWait to EndWait);
// while every one of them is draining, masked, there is no signal for a
// scan to find, so the scanner parks until one begins a wait. A bit set
// while nobody waits (a stale or spurious one) is taken at the next scan
// and wakes nothing that was asleep, as it would have then. While some
// end waits, bits are seen within the scan interval, as before.
func (h *Host) runMonitor() {
	defer h.wg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	// Go timers fire about 1 ms late on an idle process, twenty times the
	// 50 µs DPDK asks for; a scan interval below 1 ms (the guest's latency
	// or the 100 µs default) is slept on this goroutine's own thread with
	// an absolute clock_nanosleep and no timer slack, so the scans keep
	// their cadence. The thread is locked only while those scans run:
	// parked, or on a Go timer, the goroutine is an ordinary one, so a
	// channel's wait that kicks it, and the channel loops its scan wakes
	// before it parks, run on the same thread, rather than each crossing
	// costing the runtime a hand-off between threads (two futex calls and
	// a context switch or more; the TAP iperf3 row made some 2000 a second).
	locked := false
	precise := func() {
		if !locked {
			runtime.LockOSThread()
			unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
			locked = true
		}
	}
	unlock := func() {
		if locked {
			runtime.UnlockOSThread()
			locked = false
		}
	}
	defer unlock()
	var next int64 // CLOCK_MONOTONIC deadline of the next precise scan
	// An idle host scans less: after monitorIdleAfter of waiting without a
	// pending bit (time parked, with nobody waiting, does not count), the
	// scan interval grows to at least monitorIdleScan, so a guest that set
	// 50 µs does not cost a busy core while nothing happens. The first
	// signal after a quiet spell may then wait up to monitorIdleScan
	// (Hyper-V's own scan cadence is not documented; guests must cope
	// with any).
	lastBit := time.Now()
	for {
		h.mu.Lock()
		n := len(h.monitored)
		interval := time.Duration(0)
		for id := range h.monitored {
			if lat := vmbus.MonitorLatency(h.monPage, id); lat > 0 {
				d := time.Duration(lat) * 100 * time.Nanosecond
				if interval == 0 || d < interval {
					interval = d
				}
			}
		}
		h.mu.Unlock()
		if n > 0 && h.listening.Load() == 0 {
			// Park. A wait that begins after the load above sends the
			// kick before its unmask, and the select below takes it.
			unlock()
			parked := time.Now()
			select {
			case <-h.ctx.Done():
				return
			case <-h.monKick:
			case <-h.listenKick:
			}
			lastBit = lastBit.Add(time.Since(parked))
			continue
		}
		if interval == 0 {
			interval = h.cfg.MonitorScan
		}
		if time.Since(lastBit) > monitorIdleAfter && interval < monitorIdleScan {
			interval = monitorIdleScan
		}
		var wait <-chan time.Time
		if n > 0 && interval < time.Millisecond {
			// The nanosleep keeps this thread's P in a system call until
			// the runtime takes it back (a sysmon tick, 20 µs or more):
			// goroutines ready on it (channel loops, a port's sender)
			// would wait that long each scan. Yield it to them first,
			// unlocked (see woke below); with nothing ready this returns
			// at once and the scan keeps its cadence.
			unlock()
			runtime.Gosched()
			precise()
			next = sleepUntilNext(next, interval)
			select {
			case <-h.ctx.Done():
				return
			case <-h.monKick:
				continue
			default:
			}
		} else {
			unlock()
			if n > 0 {
				t.Reset(interval)
				wait = t.C
			}
			select {
			case <-h.ctx.Done():
				return
			case <-h.monKick:
				t.Stop()
				continue
			case <-wait:
			}
		}
		woke := false
		for g := 0; g < vmbus.MaxMonitorID/32; g++ {
			if vmbus.MonitorPeek(h.monPage, g) == 0 {
				continue // a plain load: no write to the guest's cache line
			}
			bits := vmbus.MonitorPending(h.monPage, g)
			if bits != 0 {
				lastBit = time.Now()
				h.cfg.Stamps.Stamp(hoptrace.HostScan)
			}
			for bits != 0 {
				b := bits32.TrailingZeros32(bits)
				bits &^= 1 << b
				id := g*32 + b
				h.mu.Lock()
				c := h.monitored[id]
				allocated := h.monEver[id]
				h.mu.Unlock()
				if c == nil {
					// A guest that signalled just before it closed its
					// channel leaves the bit behind: the host ignores it.
					// A bit no channel was ever given is the guest's fault.
					if !allocated {
						h.violation(vmbus.GUID{}, "monitor bit set for an id no channel has")
					}
					continue
				}
				c.guestSignal()
				woke = true
			}
		}
		if woke {
			// The channel loops just woken sit on this thread's P, which
			// the next nanosleep keeps in a system call until the runtime
			// takes it back: yield it so they run now, here (a locked
			// thread would hand its P to another one to run them).
			unlock()
			runtime.Gosched()
		}
	}
}
