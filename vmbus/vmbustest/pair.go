package vmbustest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/vmbus"
)

// DefaultRingSize is each ring's size, header page included, when Options
// gives none: room for a few dozen typical packets.
const DefaultRingSize = 64 << 10

// Options shape a Pair. The zero value is a primary channel with two
// 64 KiB rings, both ends waiting by interrupt, on the newest kernel.
type Options struct {
	// OutRingSize and InRingSize are the guest's outbound (guest to host)
	// and inbound ring sizes, each with its header page (vmbus.DataOffset)
	// included; the data area must be a positive multiple of 8. 0 means
	// DefaultRingSize.
	OutRingSize, InRingSize int
	// GuestMode and HostMode are how each end waits.
	GuestMode, HostMode vmbus.WaitMode
	// Kernel is the uio_hv_generic the guest runs on; nil is the newest
	// (6.18).
	Kernel *vmbus.Kernel
	// RelID and SubchannelID name the channel; SubchannelID > 0 makes it
	// a sub-channel, whose interrupts reach the guest only from 6.16.
	RelID        uint32
	SubchannelID uint16
	// NoPendingSend opens the rings without the pending_send_sz feature
	// bit, so a writer blocked on a full ring polls instead of waiting
	// for the reader's signal.
	NoPendingSend bool
	// MaxPacket bounds the packets the guest accepts (0:
	// vmbus.DefaultMaxPacket); the host accepts any that fits its ring.
	MaxPacket int
	// Requests and HostRequests size each end's request-id table (0:
	// none, and a completion is then passed up as any other packet).
	Requests, HostRequests int
	// PollInterval and WakeTimeout apply to both ends (0: the vmbus
	// defaults).
	PollInterval, WakeTimeout time.Duration
}

// Fault is a way the host misbehaves, switched on and off at any time with
// Pair.SetFault.
type Fault uint32

const (
	// FaultNoInterrupts loses every signal of the host: the guest finds
	// new packets, or room it waited for, only when its wait's
	// WakeTimeout expires (counted in ChannelStats.MissedWakeups). Lost
	// signals are counted in Stats.LostInterrupts.
	FaultNoInterrupts Fault = 1 << iota
	// FaultStopReading stops the host draining the guest's ring:
	// Host.Recv finds it empty and Host.WaitReadable waits for the fault
	// to end, so a guest that keeps writing fills the ring and blocks.
	FaultStopReading
)

// Stats count the signals the pair carried.
type Stats struct {
	Interrupts     uint64 // host signals delivered to the guest
	LostInterrupts uint64 // host signals the guest never saw (FaultNoInterrupts, or a sub-channel before 6.16)
	GuestSignals   uint64 // guest signals delivered to the host
}

// Pair is a connected guest and host channel. Guest is used as a driver
// uses a channel it opened; Host is the test's host end. The methods
// Primary, Channels, Interrupts, Err and Close make a Pair stand where a
// driver expects the *vmbus.Handle it opened.
//
// A Pair starts no goroutines. Its methods are safe for concurrent use;
// each end follows vmbus.Channel's rule of one sending and one receiving
// goroutine.
type Pair struct {
	Guest *vmbus.Channel
	Host  *Host

	mem    []byte // the guest's outbound ring, then its inbound ring
	split  int
	opts   Options
	kernel vmbus.Kernel
	// interruptsReach is false for a sub-channel on a kernel that cannot
	// deliver its interrupts.
	interruptsReach bool

	faults                     atomic.Uint32
	interrupts, lost, gSignals atomic.Uint64

	mu      sync.Mutex
	resumed chan struct{} // closed when FaultStopReading goes off
	err     error         // Rescind or Close

	closeOnce sync.Once
}

// New connects a pair with opts. It fails tb if opts cannot make one, and
// closes the pair when the test ends.
func New(tb testing.TB, opts Options) *Pair {
	tb.Helper()
	p, err := newPair(opts)
	if err != nil {
		tb.Fatalf("vmbustest: %v", err)
	}
	tb.Cleanup(func() { p.Close() })
	return p
}

// newestKernel is what a Pair's guest runs on unless Options.Kernel says
// otherwise.
const newestKernel = "6.18.0-vmbustest"

func newPair(opts Options) (*Pair, error) {
	if opts.OutRingSize == 0 {
		opts.OutRingSize = DefaultRingSize
	}
	if opts.InRingSize == 0 {
		opts.InRingSize = DefaultRingSize
	}
	page := vmbus.DataOffset()
	for _, n := range []int{opts.OutRingSize, opts.InRingSize} {
		if n <= page || (n-page)%8 != 0 {
			return nil, fmt.Errorf("ring of %d bytes: want a %d-byte header page and a data area that is a positive multiple of 8", n, page)
		}
	}
	k, err := vmbus.KernelForRelease(newestKernel)
	if err != nil {
		return nil, err
	}
	if opts.Kernel != nil {
		k = *opts.Kernel
	}
	p := &Pair{
		mem: make([]byte, opts.OutRingSize+opts.InRingSize), split: opts.OutRingSize,
		opts: opts, kernel: k, resumed: make(chan struct{}),
		interruptsReach: opts.SubchannelID == 0 || k.SubchannelInterrupts,
	}
	close(p.resumed)
	// The rings as the guest kernel's open leaves them (hv_ringbuffer_init;
	// hv_uio_open masks the inbound ring before 6.18).
	for _, ring := range [][]byte{p.out(), p.in()} {
		if err := vmbus.InitRingHeader(ring); err != nil {
			return nil, err
		}
		if opts.NoPendingSend {
			storeWord(ring, featureBitsOff, 0)
		}
	}
	p.Guest, err = vmbus.NewChannel(vmbus.ChannelConfig{
		RelID: opts.RelID, SubchannelID: opts.SubchannelID, Ring: p.mem, Split: p.split,
		Signaler: guestSignaler{p}, MaxPacket: opts.MaxPacket, Requests: opts.Requests,
		Interrupts: p.interruptsReach, Mode: opts.GuestMode,
		PollInterval: opts.PollInterval, WakeTimeout: opts.WakeTimeout,
	})
	if err != nil {
		return nil, err
	}
	host, err := vmbus.NewChannel(vmbus.ChannelConfig{
		RelID: opts.RelID, SubchannelID: opts.SubchannelID, Ring: p.mem, Split: p.split, HostSide: true,
		Signaler: hostSignaler{p}, Requests: opts.HostRequests,
		// The host reads whatever the guest may write.
		MaxPacket:  min(opts.OutRingSize-page-8, 1<<20),
		Interrupts: true, Mode: opts.HostMode,
		PollInterval: opts.PollInterval, WakeTimeout: opts.WakeTimeout,
	})
	if err != nil {
		return nil, err
	}
	p.Host = &Host{Channel: host, p: p}
	return p, nil
}

// out and in are the guest's outbound and inbound rings.
func (p *Pair) out() []byte { return p.mem[:p.split:p.split] }
func (p *Pair) in() []byte  { return p.mem[p.split:] }

// Kernel returns the uio semantics the guest runs with.
func (p *Pair) Kernel() vmbus.Kernel { return p.kernel }

// guestSignaler is the guest's way to signal the host (the monitor bit or
// the uio write, in a real guest): it wakes the host end's waiters.
type guestSignaler struct{ p *Pair }

func (s guestSignaler) Signal() error {
	s.p.gSignals.Add(1)
	s.p.Host.Notify()
	return nil
}

// hostSignaler is the host's interrupt of the guest, as the guest
// kernel's uio_hv_generic turns it into a wake-up of the uio fd.
type hostSignaler struct{ p *Pair }

func (s hostSignaler) Signal() error {
	s.p.interrupt()
	return nil
}

// interrupt delivers one host interrupt: before 6.18 the kernel's channel
// callback masks the inbound ring first; then every waiter of the guest
// channel wakes, as vmbus.Handle's interrupt loop wakes them.
func (p *Pair) interrupt() {
	if Fault(p.faults.Load())&FaultNoInterrupts != 0 || !p.interruptsReach {
		p.lost.Add(1)
		return
	}
	if p.kernel.KernelMasks {
		p.Guest.In().SetInterruptMask(true)
	}
	p.interrupts.Add(1)
	p.Guest.Notify()
}

// Interrupt raises one host interrupt with nothing new on the ring: the
// spurious interrupt a shared interrupt fd, or a host, may raise.
func (p *Pair) Interrupt() { p.interrupt() }

// SetFault switches a fault on or off.
func (p *Pair) SetFault(f Fault, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := Fault(p.faults.Load())
	now := old &^ f
	if on {
		now |= f
	}
	p.faults.Store(uint32(now))
	switch {
	case now&FaultStopReading != 0 && old&FaultStopReading == 0:
		p.resumed = make(chan struct{})
	case now&FaultStopReading == 0 && old&FaultStopReading != 0:
		close(p.resumed)
		p.Host.Notify() // a reader held by the fault looks again
	}
}

// Faults returns the faults switched on.
func (p *Pair) Faults() Fault { return Fault(p.faults.Load()) }

// stopped returns whether the host has stopped reading, and the channel
// closed when it starts again.
func (p *Pair) stopped() (bool, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Fault(p.faults.Load())&FaultStopReading != 0, p.resumed
}

// Stats returns the signal counters.
func (p *Pair) Stats() Stats {
	return Stats{Interrupts: p.interrupts.Load(), LostInterrupts: p.lost.Load(), GuestSignals: p.gSignals.Load()}
}

// Rescind takes the channel away as the host does: the guest channel dies
// with vmbus.ErrRescinded (what it already received stays readable in its
// ring, as the mapping stays until the guest closes), the host end with
// vmbus.ErrChannelClosed.
func (p *Pair) Rescind() {
	p.setErr(vmbus.ErrRescinded)
	p.Guest.Kill(vmbus.ErrRescinded)
	p.Host.Kill(vmbus.ErrChannelClosed)
}

// Close closes both ends (vmbus.ErrChannelClosed; a rescinded guest keeps
// ErrRescinded), waking every blocked wait. Later calls do nothing. It
// always returns nil; the error is for the Handle-like method set.
func (p *Pair) Close() error {
	p.closeOnce.Do(func() {
		p.setErr(vmbus.ErrChannelClosed)
		p.Guest.Kill(vmbus.ErrChannelClosed)
		p.Host.Kill(vmbus.ErrChannelClosed)
	})
	return nil
}

func (p *Pair) setErr(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		p.err = err
	}
}

// Primary returns the guest channel, as vmbus.Handle.Primary does.
func (p *Pair) Primary() *vmbus.Channel { return p.Guest }

// Channels returns the guest channel alone.
func (p *Pair) Channels() []*vmbus.Channel { return []*vmbus.Channel{p.Guest} }

// Interrupts returns the host interrupts the guest received, as
// vmbus.Handle.Interrupts does.
func (p *Pair) Interrupts() uint64 { return p.interrupts.Load() }

// Err returns why the pair ended (vmbus.ErrRescinded, or
// vmbus.ErrChannelClosed after Close), or nil, as vmbus.Handle.Err does.
// Corruption kills only a channel; see its Err.
func (p *Pair) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Host is the host end of a Pair: a vmbus.Channel attached from the
// host's side, whose Recv, WaitReadable, CommitRecv and Flush apply the
// pair's faults. Calls that reach the rings directly (Out, In) bypass
// them.
type Host struct {
	*vmbus.Channel
	p *Pair
	// broken is set once WriteCorrupt has published a bad index: the
	// host's private cursors no longer match the shared ones, so it
	// publishes nothing more and the bad index stays for the guest.
	broken atomic.Bool
}

// Recv returns the next packet from the guest, or vmbus.ErrRingEmpty while
// FaultStopReading is on.
func (h *Host) Recv() (vmbus.Packet, error) {
	if stopped, _ := h.p.stopped(); stopped {
		return vmbus.Packet{}, vmbus.ErrRingEmpty
	}
	return h.Channel.Recv()
}

// WaitReadable waits until the guest's ring has data, as
// vmbus.Channel.WaitReadable does, and while FaultStopReading is on first
// until it goes off.
func (h *Host) WaitReadable(ctx context.Context) error {
	if stopped, resumed := h.p.stopped(); stopped {
		select {
		case <-resumed:
		case <-ctx.Done():
			return ctx.Err()
		case <-h.Dead():
			return h.Err()
		}
	}
	return h.Channel.WaitReadable(ctx)
}

// CommitRecv releases what the host read to the guest, signalling it when
// it waits for that room; it publishes nothing once the host is broken.
func (h *Host) CommitRecv() error {
	if h.broken.Load() {
		return nil
	}
	return h.Channel.CommitRecv()
}

// Flush publishes what the host wrote, interrupting the guest when the
// ring rules say so; it publishes nothing once the host is broken.
func (h *Host) Flush() error {
	if h.broken.Load() {
		return nil
	}
	return h.Channel.Flush()
}

var (
	_ vmbus.Signaler = guestSignaler{}
	_ vmbus.Signaler = hostSignaler{}
)
