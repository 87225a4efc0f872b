package vmbus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vmbusd/vmbusd/uio"
)

// ErrRescinded is the death of every channel of a device the host took
// away (uio read/write EIO, or the simulator closing its socket).
var ErrRescinded = uio.ErrRescinded

// Options tune how a device is opened.
type Options struct {
	// Mode is the wait mode of every channel.
	Mode WaitMode
	// MaxPacket bounds inbound packets on each channel (DefaultMaxPacket).
	MaxPacket int
	// Requests is the request-table size of each channel (0: none).
	Requests int
	// Kernel overrides the uio semantics detected from the kernel release.
	Kernel *Kernel
	// RingSizes are the outbound and inbound ring sizes an hv_sock opener
	// chooses; only the simulated host's hv_sock devices take them.
	RingSizes [2]uint32
	// MonitorLatency, when non-zero, is written to the monitor page as the
	// host's scan latency for the device's monitored channels (DPDK: 50 µs).
	MonitorLatency time.Duration
	PollInterval   time.Duration
	WakeTimeout    time.Duration
	// BusyPoll is every channel's busy-poll budget (ChannelConfig.BusyPoll).
	BusyPoll time.Duration
	Logger   *slog.Logger
}

// Handle is an opened VMBus device: its uio node, the primary channel and
// any sub-channels, and one goroutine that turns the device's interrupt fd
// into wake-ups for every channel. Safe for concurrent use.
type Handle struct {
	dev    Device
	uio    *uio.Device
	kernel Kernel
	opts   Options
	log    *slog.Logger

	mu    sync.Mutex
	rings []*uio.RingFile
	chans atomic.Pointer[[]*Channel] // primary first; replaced, never mutated

	interrupts atomic.Uint64
	cancel     context.CancelFunc
	done       chan struct{} // runIRQ has returned
	err        atomic.Pointer[error]
	closeOnce  sync.Once
}

// Open binds to a device that uio_hv_generic (or the simulated host) has
// handed to user space, maps its primary channel and starts listening for
// interrupts.
func Open(dev Device, opts Options) (*Handle, error) {
	log := LimitLogger(opts.Logger, 0, 0) // a host can repeat what we log: lograte.go
	info, err := uio.ForDevice(dev.Root, dev.Path)
	if err != nil {
		return nil, fmt.Errorf("vmbus: open %s: not bound to uio_hv_generic: %w", dev.Instance, err)
	}
	var k Kernel
	if opts.Kernel != nil {
		k = *opts.Kernel
	} else if k, err = DetectKernel(dev.Root); err != nil {
		return nil, fmt.Errorf("vmbus: open %s: %w", dev.Instance, err)
	}
	if dev.MonitorID < 0 && !k.ControlSignals {
		return nil, fmt.Errorf("vmbus: open %s: channel is not monitored and kernel %s cannot signal it from user space (needs 6.10+)", dev.Instance, k.Release)
	}
	if opts.RingSizes != [2]uint32{} {
		// An hv_sock opener's rings are the sizes it asks for, clamped
		// as the host clamps them: map 0 is sized at the open, so what
		// sysfs listed before it is stale (docs/uio-contract.md
		// §7.3).
		want := uint64(ClampHvSockRing(opts.RingSizes[0]) + ClampHvSockRing(opts.RingSizes[1]))
		for i := range info.Maps {
			if info.Maps[i].Name == "txrx_rings" {
				info.Maps[i].Size = want
			}
		}
	}
	// A NIC's buffers are used a section at a time: mapped in full now,
	// their first use on the data path takes no page fault.
	u, err := uio.Open(info, uio.Options{RingSizes: opts.RingSizes, Prefault: []string{"recv:", "send:"}})
	if err != nil {
		return nil, fmt.Errorf("vmbus: open %s: %w", dev.Instance, err)
	}
	h := &Handle{dev: dev, uio: u, kernel: k, opts: opts, log: log.With("device", dev.Instance.String()),
		done: make(chan struct{})}
	ring := u.Map("txrx_rings")
	if ring == nil {
		u.Close()
		return nil, fmt.Errorf("vmbus: open %s: no txrx_rings map", dev.Instance)
	}
	sig, err := h.signaler(dev.MonitorID, true)
	if err != nil {
		u.Close()
		return nil, fmt.Errorf("vmbus: open %s: %w", dev.Instance, err)
	}
	cfg := h.channelConfig(dev.RelID, 0, ring, sig, true)
	if opts.RingSizes[0] != 0 {
		cfg.Split = ClampHvSockRing(opts.RingSizes[0])
	}
	primary, err := NewChannel(cfg)
	if err != nil {
		u.Close()
		return nil, fmt.Errorf("vmbus: open %s: %w", dev.Instance, err)
	}
	h.chans.Store(&[]*Channel{primary})
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go h.runIRQ(ctx)
	h.log.Info("vmbus device opened", "class", dev.ClassName(), "relid", dev.RelID, "monitor_id", dev.MonitorID,
		"uio", info.Name, "kernel", k.Release, "mode", opts.Mode.String(), "ring_bytes", len(ring))
	return h, nil
}

// ClampHvSockRing applies hyperv_transport.c's bounds to an hv_sock
// opener's ring size (header page included): rounded up to 4 KiB pages,
// then clamped to 24 KiB .. 256 KiB (docs/protocol/hvsock.md §1.4).
func ClampHvSockRing(n uint32) int {
	const lo, hi = 6 * HyperVPageSize, 64 * HyperVPageSize
	v := (int(n) + HyperVPageSize - 1) &^ (HyperVPageSize - 1)
	return min(max(v, lo), hi)
}

func (h *Handle) channelConfig(relid uint32, sub uint16, ring []byte, sig Signaler, interrupts bool) ChannelConfig {
	return ChannelConfig{
		RelID: relid, SubchannelID: sub, Ring: ring, Signaler: sig,
		MaxPacket: h.opts.MaxPacket, Requests: h.opts.Requests, Interrupts: interrupts,
		PollInterval: h.opts.PollInterval, WakeTimeout: h.opts.WakeTimeout, Mode: h.opts.Mode,
		BusyPoll: h.opts.BusyPoll,
	}
}

// signaler picks how to signal a channel: its monitor bit when monitored,
// else write(1) on the uio fd, which reaches a sub-channel only from 6.16.
func (h *Handle) signaler(monitorID int, primary bool) (Signaler, error) {
	if monitorID >= 0 {
		page := h.uio.Map("monitor_page")
		s, err := NewMonitorSignaler(page, monitorID)
		if err != nil {
			return nil, err
		}
		if h.opts.MonitorLatency > 0 {
			SetMonitorLatency(page, monitorID, int(h.opts.MonitorLatency/time.Microsecond))
		}
		return s, nil
	}
	if !h.kernel.ControlSignals || (!primary && !h.kernel.ControlAll) {
		return nil, fmt.Errorf("channel is not monitored and kernel %s cannot signal it", h.kernel.Release)
	}
	return ControlFunc(h.uio.IRQControl), nil
}

// runIRQ waits on the device's interrupt fd and wakes every channel: the
// fd is shared, so the reader cannot tell which channel fired.
func (h *Handle) runIRQ(ctx context.Context) {
	defer close(h.done)
	h.log.Debug("interrupt loop started")
	for {
		_, err := h.uio.Wait(ctx)
		if err != nil {
			if ctx.Err() == nil {
				if errors.Is(err, uio.ErrRescinded) {
					h.log.Debug("device rescinded by the host") // routine for hv_sock; the NIC's owner reports its own
					h.fail(ErrRescinded)
				} else {
					h.log.Error("interrupt fd failed", "err", err)
					h.fail(fmt.Errorf("vmbus: interrupt fd: %w", err))
				}
			}
			h.log.Debug("interrupt loop stopped")
			return
		}
		h.interrupts.Add(1)
		for _, c := range *h.chans.Load() {
			c.Notify()
		}
	}
}

func (h *Handle) fail(err error) {
	h.err.CompareAndSwap(nil, &err)
	for _, c := range *h.chans.Load() {
		c.Kill(err)
	}
}

// Err returns why the device stopped (rescind), or nil.
func (h *Handle) Err() error {
	if p := h.err.Load(); p != nil {
		return *p
	}
	return nil
}

// Device returns the sysfs description the handle was opened from.
func (h *Handle) Device() Device { return h.dev }

// Kernel returns the uio semantics in use.
func (h *Handle) Kernel() Kernel { return h.kernel }

// Primary returns the primary channel.
func (h *Handle) Primary() *Channel { return (*h.chans.Load())[0] }

// Channels returns the primary and every opened sub-channel.
func (h *Handle) Channels() []*Channel { return *h.chans.Load() }

// Interrupts returns how many interrupt notifications the device delivered.
func (h *Handle) Interrupts() uint64 { return h.interrupts.Load() }

// Map returns a uio map by name ("recv:", "send:" prefixes match the NIC's
// buffers), or nil.
func (h *Handle) Map(name string) []byte { return h.uio.Map(name) }

// GPADL returns the GPADL handle of the NIC's "recv" or "send" buffer from
// its uio map name, and the buffer.
func (h *Handle) GPADL(kind string) (handle uint32, buf []byte, ok bool) {
	m, found := h.uio.Info().MapByName(kind + ":")
	if !found {
		return 0, nil, false
	}
	_, handle, ok = m.GPADL()
	if !ok {
		return 0, nil, false
	}
	return handle, h.uio.Map(m.Name), true
}

// UIO returns the underlying uio device.
func (h *Handle) UIO() *uio.Device { return h.uio }

// OpenSubchannels waits for sub-channels the host offers after the guest
// asked for them (netvsc: NVSP sub-channel request) and maps up to want of
// them. The kernel opens each one asynchronously and makes its ring file
// visible only then, so it watches channels/ (inotify, and a 20 ms poll as a
// fallback) and maps each sub-channel as soon as its ring and attributes
// are there, until want are mapped or ctx ends. A partial grant is not an
// error: it returns what appeared.
//
// A sub-channel that is not usable yet (no ring, a subchannel_id that
// reads empty or unparsable because the host is still writing it, a ring
// that cannot be mapped yet) is tried again at the next change or poll,
// never given up on while the wait lasts; its first failure is logged.
// If the device is rescinded (or closed) meanwhile, the wait ends at once
// with that error, which wraps ErrRescinded for a rescind.
func (h *Handle) OpenSubchannels(ctx context.Context, want int) ([]*Channel, error) {
	dir := filepath.Join(h.dev.Path, "channels")
	var got []*Channel
	have := map[uint32]bool{}
	for _, c := range h.Channels() {
		have[c.relID] = true
	}
	failed := map[uint32]string{} // the last failure logged per channel
	scan := func() (bool, error) {
		ents, err := os.ReadDir(dir)
		if errors.Is(err, os.ErrNotExist) {
			return false, nil // the device is going away: its rescind ends the wait
		}
		if err != nil {
			return false, err
		}
		for _, e := range ents {
			relid, err := strconv.ParseUint(e.Name(), 10, 32)
			if err != nil || have[uint32(relid)] || len(got) >= want {
				continue
			}
			c, ok, err := h.openSubchannel(filepath.Join(dir, e.Name()), uint32(relid))
			if err != nil {
				if msg := err.Error(); failed[uint32(relid)] != msg {
					failed[uint32(relid)] = msg
					h.log.Warn("sub-channel not usable yet: trying again", "relid", relid, "err", err)
				}
				continue
			}
			if ok {
				have[uint32(relid)] = true
				got = append(got, c)
			}
		}
		return len(got) >= want, nil
	}
	// The primary dies with the device: stop waiting then, not when ctx
	// ends.
	wctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-h.Primary().Dead():
			cancel()
		case <-wctx.Done():
		}
	}()
	err := waitDir(wctx, dir, scan)
	cancel()
	if len(got) > 0 {
		h.mu.Lock()
		all := append(append([]*Channel(nil), h.Channels()...), got...)
		h.chans.Store(&all)
		h.mu.Unlock()
	}
	if e := h.Primary().Err(); e != nil { // rescinded or closed while we waited
		for _, c := range got {
			c.Kill(e)
		}
		h.log.Info("sub-channel wait ended: device gone", "wanted", want, "got", len(got), "err", e)
		return nil, fmt.Errorf("vmbus: %s: sub-channels: %w", h.dev.Instance, e)
	}
	h.log.Info("sub-channels opened", "wanted", want, "got", len(got))
	if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		return got, fmt.Errorf("vmbus: %s: sub-channels: %w", h.dev.Instance, err)
	}
	return got, nil
}

// openSubchannel maps channels/<relid>/ring once the kernel has opened the
// channel; ok is false while the ring is not there yet. An error means
// not usable now (the caller tries again).
func (h *Handle) openSubchannel(dir string, relid uint32) (*Channel, bool, error) {
	sub, err := readIntAttr(filepath.Join(dir, "subchannel_id"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, false, nil
		}
		return nil, false, err
	}
	if sub <= 0 || sub > 0xffff {
		return nil, false, fmt.Errorf("subchannel_id %d: not a sub-channel", sub)
	}
	ringPath := filepath.Join(dir, "ring")
	rf, err := uio.OpenRingFile(ringPath)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission) {
			return nil, false, nil // not opened by the kernel yet
		}
		return nil, false, err
	}
	mon := -1 // monitor_id is absent for a channel without a monitor
	if v, err := readIntAttr(filepath.Join(dir, "monitor_id")); err == nil {
		mon = v
	} else if !errors.Is(err, os.ErrNotExist) {
		rf.Close()
		return nil, false, err
	}
	sig, err := h.signaler(mon, false)
	if err != nil {
		rf.Close()
		return nil, false, err
	}
	c, err := NewChannel(h.channelConfig(relid, uint16(sub), rf.Mem, sig, h.kernel.SubchannelInterrupts))
	if err != nil {
		rf.Close()
		return nil, false, err
	}
	h.mu.Lock()
	h.rings = append(h.rings, rf)
	h.mu.Unlock()
	return c, true, nil
}

func readIntAttr(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return 0, fmt.Errorf("%s: empty", path)
	}
	v, err := strconv.Atoi(t)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// Close stops the interrupt loop, kills every channel and unmaps the device.
// The caller must have stopped using the channels' rings first: after
// Close their memory is gone.
func (h *Handle) Close() error {
	var err error
	h.closeOnce.Do(func() {
		h.fail(ErrChannelClosed)
		h.cancel()
		err = h.uio.Close()
		<-h.done
		h.mu.Lock()
		for _, r := range h.rings {
			if e := r.Close(); e != nil && err == nil {
				err = e
			}
		}
		h.rings = nil
		h.mu.Unlock()
		h.log.Info("vmbus device closed", "interrupts", h.interrupts.Load())
	})
	return err
}
