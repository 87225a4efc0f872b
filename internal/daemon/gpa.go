package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/vmbusd/vmbusd/internal/config"
	"github.com/vmbusd/vmbusd/netvsc"
	"github.com/vmbusd/vmbusd/nictap"
	"github.com/vmbusd/vmbusd/vmbus"
)

// GPA-direct pools for the NICs. A NIC sends a frame larger than a send
// section GPA-direct, from a buffer whose guest-physical pages it knows;
// without a pool such frames are dropped and counted. Each incarnation of
// a NIC gets a pool of its own and gives it back when it closes (a pool
// only ever grows, so a shared one would run out after some resets):
//
//   - sim: a window of the simulated host's guest memory, R/dev/guestmem
//     (page frame n is the page at n*4096); windows are handed out first
//     fit and reused;
//   - hugepage: hugepages, locked, frame numbers from /proc/self/pagemap
//     (root with CAP_SYS_ADMIN, reserved hugepages: scripts/vmbus-hugepages).
//
// [gpa] pool = "auto" takes the first that works for the root (sim under a
// simulated root, hugepages on a real one) and otherwise runs without;
// "sim" or "hugepage" insist (a NIC that cannot have one fails), "off"
// never sets one up.
type gpaSource struct {
	mode config.GPAPool
	root string
	log  *slog.Logger

	mu      sync.Mutex
	fixed   *netvsc.GPAPool // Options.GPAPool: shared by every NIC until found stale
	windows []gpaWindow     // guest memory in use, by offset
	last    string          // what was last logged
}

type gpaWindow struct{ off, size int }

func newGPASource(cfg config.Config, fixed *netvsc.GPAPool, log *slog.Logger) *gpaSource {
	return &gpaSource{mode: cfg.GPA.Pool, root: cfg.Root, fixed: fixed, log: log}
}

// errNoPool is why there is no pool, for "auto".
type errNoPool struct{ reason string }

func (e errNoPool) Error() string { return e.reason }

// poolSize is what netvsc carves from a pool for nic: one pool of
// PoolPackets buffers per queue, each the headroom plus the largest frame,
// page-rounded; and, for a NIC attached to a TAP, the TAP's super-frame
// buffers per queue (nictap), so that its large sends go GPA-direct.
func poolSize(nic config.NIC) int {
	const page = vmbus.HyperVPageSize
	queues := max(nic.Queues, 1)
	mtu := nic.MTU
	if mtu == 0 {
		mtu = netvsc.DefaultMTU
	}
	buf := (netvsc.Headroom + mtu + netvsc.EthernetHeaderSize + 4 + 63) &^ 63
	perQueue := (netvsc.DefaultPoolPackets*buf + page - 1) &^ (page - 1)
	if nic.Attach == config.AttachTAP {
		perQueue += nictap.SuperFramePoolBytes()
	}
	return queues * perQueue
}

// open returns a pool for one incarnation of nic and the function that
// gives it back (after the NIC is closed): nil without a pool, with a
// nil error when that is acceptable.
func (g *gpaSource) open(nic config.NIC) (*netvsc.GPAPool, func(), error) {
	g.mu.Lock()
	fixed := g.fixed
	g.mu.Unlock()
	if fixed != nil {
		g.note("GPA-direct pool: the one the daemon was given", "backend", fixed.Kind())
		return fixed, func() {}, nil
	}
	size := poolSize(nic)
	var pool *netvsc.GPAPool
	var release func()
	var err error
	switch g.mode {
	case config.GPAOff:
		g.note("GPA-direct pool: off ([gpa] pool = \"off\"); frames larger than a send section are dropped")
		return nil, func() {}, nil
	case config.GPASim:
		pool, release, err = g.openSim(size)
	case config.GPAHugepage:
		pool, release, err = g.openHuge(size)
	default:
		if filepath.Clean(g.root) == "/" {
			pool, release, err = g.openHuge(size)
		} else {
			pool, release, err = g.openSim(size)
		}
		if err != nil {
			g.note("GPA-direct pool: none; frames larger than a send section are dropped", "why", err.Error())
			return nil, func() {}, nil
		}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("GPA-direct pool ([gpa] pool = %q): %w", g.mode, err)
	}
	g.note("GPA-direct pool", "backend", pool.Kind(), "bytes_per_nic", size)
	return pool, release, nil
}

// stale retires a pool netvsc.Open found stale (netvsc.ErrGPAPoolStale):
// the pool the daemon was given is not handed out again, and later NICs get
// pools of their own ([gpa] pool). A pool of ours is simply released by its
// caller; the next open maps the memory the host reads now.
func (g *gpaSource) stale(pool *netvsc.GPAPool) {
	g.mu.Lock()
	retired := pool != nil && g.fixed == pool
	if retired {
		g.fixed = nil
	}
	g.mu.Unlock()
	if retired {
		g.log.Warn("the GPA-direct pool the daemon was given is stale; NICs get pools of their own from now on", "gpa_pool", g.mode.String())
	}
}

// note logs what the NICs get, once per change.
func (g *gpaSource) note(msg string, args ...any) {
	key := fmt.Sprint(msg, args)
	g.mu.Lock()
	same := g.last == key
	g.last = key
	g.mu.Unlock()
	if !same {
		g.log.Info(msg, args...)
	}
}

func (g *gpaSource) openSim(size int) (*netvsc.GPAPool, func(), error) {
	path := filepath.Join(g.root, "dev", "guestmem")
	st, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil, errNoPool{"no simulated guest memory (" + path + ")"}
		}
		return nil, nil, err
	}
	g.mu.Lock()
	off, ok := g.fitLocked(size, int(st.Size()))
	if ok {
		g.windows = append(g.windows, gpaWindow{off, size})
		slices.SortFunc(g.windows, func(a, b gpaWindow) int { return a.off - b.off })
	}
	g.mu.Unlock()
	if !ok {
		return nil, nil, errNoPool{fmt.Sprintf("the simulated guest memory (%d MiB) has no free %d MiB window", st.Size()>>20, size>>20)}
	}
	pool, err := netvsc.OpenSimGPAPool(g.root, off, size)
	free := func() {
		g.mu.Lock()
		g.windows = slices.DeleteFunc(g.windows, func(w gpaWindow) bool { return w.off == off })
		g.mu.Unlock()
	}
	if err != nil {
		free()
		return nil, nil, err
	}
	return pool, func() {
		pool.Close()
		free()
	}, nil
}

// fitLocked finds the first free window of size bytes in a file of total
// bytes; g.mu is held.
func (g *gpaSource) fitLocked(size, total int) (int, bool) {
	off := 0
	for _, w := range g.windows {
		if w.off-off >= size {
			return off, true
		}
		off = max(off, w.off+w.size)
	}
	return off, total-off >= size
}

func (g *gpaSource) openHuge(size int) (*netvsc.GPAPool, func(), error) {
	pool, err := netvsc.OpenHugepageGPAPool(size)
	if err != nil {
		if errors.Is(err, netvsc.ErrNoPagemap) {
			return nil, nil, errNoPool{"hugepages without frame numbers: /proc/self/pagemap needs CAP_SYS_ADMIN"}
		}
		return nil, nil, errNoPool{fmt.Sprintf("no hugepages (reserve some with scripts/vmbus-hugepages): %v", err)}
	}
	return pool, func() { pool.Close() }, nil
}
