package netvsc

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/vmbusd/vmbusd/afxdp"
	"github.com/vmbusd/vmbusd/clock"
	"github.com/vmbusd/vmbusd/netvsc/nvsp"
	"github.com/vmbusd/vmbusd/netvsc/protoerr"
	"github.com/vmbusd/vmbusd/netvsc/rndis"
	"github.com/vmbusd/vmbusd/vmbus"
)

// Mode is how a queue waits for the host when its rings are quiet.
type Mode int

const (
	// Hybrid (the default) polls while traffic flows and, once the rings
	// have been quiet for Config.PollBudget, sleeps on the device's
	// interrupt fd: unmask, re-check, block (docs/architecture.md §5.2 "Idle when idle";
	// the vhost_net seed: stop polling when idle).
	Hybrid Mode = iota
	// Poll spins on the rings forever: DPDK's model, one core at 100%.
	Poll
	// Interrupt sleeps on the interrupt fd as soon as the rings are empty.
	Interrupt
)

func (m Mode) String() string {
	switch m {
	case Hybrid:
		return "hybrid"
	case Poll:
		return "poll"
	case Interrupt:
		return "interrupt"
	}
	return fmt.Sprintf("mode(%d)", int(m))
}

// ParseMode takes a mode's name as String prints it.
func ParseMode(s string) (Mode, error) {
	for _, m := range []Mode{Hybrid, Poll, Interrupt} {
		if m.String() == s {
			return m, nil
		}
	}
	return 0, fmt.Errorf("netvsc: unknown mode %q (hybrid, poll, interrupt)", s)
}

// Config tunes Open. The zero value is a working single-queue NIC with an
// MTU of 1500 in hybrid mode.
type Config struct {
	// Queues is the number of queues (channels) wanted: the primary plus
	// Queues-1 sub-channels. The host may grant fewer; Queues() tells.
	// 0 means 1.
	Queues int
	// MTU is the IP MTU (the Ethernet header is not included). 0 means
	// 1500. The host may lower it (OID_GEN_MAXIMUM_FRAME_SIZE).
	MTU  int
	Mode Mode
	// GPAPool, when set, provides packet buffers whose guest-physical
	// pages are known, so frames larger than a send section go GPA-direct.
	// Without one such frames are dropped (QueueStats.TxDropOversize);
	// only TSO super-frames are segmented in software.
	GPAPool *GPAPool
	// ControlTimeout bounds each NVSP or RNDIS control request (0: 60 s;
	// Azure hosts may take 15 s, DPDK d564751748).
	ControlTimeout time.Duration
	// Clock times ControlTimeout and the VF's timers: VFTimeout, the
	// retry backoff, the switch and drain bounds (nil: the real clock), so
	// that a test can expire them without waiting, and a loaded machine
	// cannot.
	Clock clock.Clock
	// SubchannelTimeout bounds the wait for granted sub-channels' rings to
	// appear (0: 10 s, DPDK's 1000 × 10 ms).
	SubchannelTimeout time.Duration
	// PollBudget is how long a hybrid queue keeps polling after it last
	// found work before it sleeps (0: 50 µs). It is the most it polls: a
	// queue whose frames keep coming later than that (request/response
	// traffic, a host sending in rounds further apart) halves its share
	// per sleep, down to sleeping at once, and gets it back when a frame
	// comes within PollBudget again. A queue under full load (a TxBurst
	// came back short or left the host holding half the send sections,
	// or an RxBurst of at least 8 came back full) polls on while the
	// host's work keeps coming, up to 5 ms apart (Queue.Wait).
	PollBudget time.Duration
	// BusyPoll, when non-zero, is the latency setting for request/response
	// workloads (as SO_BUSY_POLL): before a hybrid or interrupt queue
	// sleeps it spins on its ring for up to BusyPoll, and a queue that
	// transmits wakes its sleeping receiver to spin for the answer, which
	// then needs no interrupt. It costs up to BusyPoll of CPU per request;
	// an idle queue still sleeps. Poll mode ignores it.
	BusyPoll time.Duration
	// MonitorLatency is the host's monitor-page scan latency written for
	// the device's channels (0: 50 µs, as DPDK).
	MonitorLatency time.Duration
	// PoolPackets is the number of packet buffers per queue (0: 4096).
	PoolPackets int
	// RxStage bounds the received packets a queue holds between a drain
	// and RxBurst; beyond it frames are dropped and counted (0: 1024).
	RxStage int
	// MaxInFlight bounds each channel's outstanding requests: sends
	// waiting for a completion (0: 4096).
	MaxInFlight int
	// SendBufferLimit, when non-zero, uses only the first SendBufferLimit
	// bytes of the send buffer (the send-buffer size sweep).
	SendBufferLimit int
	// Promiscuous sets the packet filter to PROMISCUOUS instead of
	// DIRECTED|ALL_MULTICAST|BROADCAST.
	Promiscuous bool
	// NoOffloads leaves the host's checksum and LSO offloads off.
	NoOffloads bool
	// RSC asks the host for receive segment coalescing over VMBus (NVSP
	// 6.1, not with NoOffloads): RxBurst then returns coalesced TCP
	// frames of up to 64 KiB, larger than the MTU, marked
	// MetaRxCoalesced.
	RSC bool
	// RSSKey is the 40-byte rndis.Toeplitz key (nil: Microsoft's default).
	RSSKey []byte
	// VF says whether the NIC pairs and drives the accelerated-networking
	// VF the host associates with it (vf.go): VFOff (the zero value),
	// VFAuto or VFRequired.
	VF VFMode
	// VFXDP configures the VF's AF_XDP data path; the zero value opens a
	// socket on every RX queue, zero-copy where the driver offers it.
	VFXDP afxdp.Config
	// VFTimeout bounds Open's wait for a VFRequired VF (0: 30 s).
	VFTimeout time.Duration
	// Kernel overrides the uio semantics detected from the kernel.
	Kernel *vmbus.Kernel
	Logger *slog.Logger
}

// Defaults for Config.
const (
	DefaultMTU               = 1500
	DefaultControlTimeout    = 60 * time.Second
	DefaultSubchannelTimeout = 10 * time.Second
	DefaultPollBudget        = 50 * time.Microsecond
	DefaultMonitorLatency    = 50 * time.Microsecond
	DefaultPoolPackets       = 4096
	DefaultRxStage           = 1024
	DefaultMaxInFlight       = 4096
	// MaxMTU bounds the MTU a guest asks for (openvmm: 9216 with the
	// Ethernet header).
	MaxMTU = 9216 - EthernetHeaderSize
	// MaxBusyPoll bounds Config.BusyPoll: a longer spin is poll mode.
	MaxBusyPoll = 10 * time.Millisecond
	// MinMTU is IPv4's minimum (ETH_MIN_MTU).
	MinMTU = 68
	// EthernetHeaderSize is what NDIS_CONFIG adds to the MTU.
	EthernetHeaderSize = 14
)

func (c Config) withDefaults() (Config, error) {
	if c.Queues <= 0 {
		c.Queues = 1
	}
	c.Queues = min(c.Queues, nvsp.MaxSubchannels)
	if c.MTU == 0 {
		c.MTU = DefaultMTU
	}
	if c.MTU < MinMTU || c.MTU > MaxMTU {
		return c, fmt.Errorf("netvsc: MTU %d outside %d..%d", c.MTU, MinMTU, MaxMTU)
	}
	if c.ControlTimeout <= 0 {
		c.ControlTimeout = DefaultControlTimeout
	}
	if c.SubchannelTimeout <= 0 {
		c.SubchannelTimeout = DefaultSubchannelTimeout
	}
	if c.PollBudget <= 0 {
		c.PollBudget = DefaultPollBudget
	}
	if c.MonitorLatency <= 0 {
		c.MonitorLatency = DefaultMonitorLatency
	}
	if c.PoolPackets <= 0 {
		c.PoolPackets = DefaultPoolPackets
	}
	if c.RxStage <= 0 {
		c.RxStage = DefaultRxStage
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.BusyPoll < 0 || c.BusyPoll > MaxBusyPoll {
		return c, fmt.Errorf("netvsc: busy poll %v outside 0..%v", c.BusyPoll, MaxBusyPoll)
	}
	if c.RSSKey != nil && len(c.RSSKey) != rndis.RSSHashKeySize {
		return c, fmt.Errorf("netvsc: RSS key of %d bytes, want %d", len(c.RSSKey), rndis.RSSHashKeySize)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// Errors a NIC's owner acts on.
var (
	// ErrClosed: the NIC was closed.
	ErrClosed = errors.New("netvsc: nic closed")
	// ErrReconfigured: the queue belonged to a configuration that
	// Reconfigure replaced; fetch the new ones with Queues.
	ErrReconfigured = errors.New("netvsc: queue replaced by a reconfiguration")
	// ErrControlTimeout: the host did not answer a control request within
	// Config.ControlTimeout.
	ErrControlTimeout = errors.New("netvsc: control request timed out")
	// ErrNotSupported: the negotiated protocol lacks the feature.
	ErrNotSupported = errors.New("netvsc: not supported by the host")
)

// DeviceError is why a NIC died: a host protocol violation (Err is a
// *vmbus.CorruptError or a *protoerr.Error), a rescind, or a failed
// control exchange. The NIC's channels are dead; the owner resets it
// (Close, then Open again).
type DeviceError struct {
	Check string // the violated check, "vmbus: <kind>" / "netvsc: <kind>", or "" for other failures
	Err   error
}

func (e *DeviceError) Error() string { return "netvsc: device failed: " + e.Err.Error() }
func (e *DeviceError) Unwrap() error { return e.Err }

// CheckOf names the check a host error violated, as used in the
// violation counters: "vmbus: <kind>", "netvsc: <kind>", or "" when err is
// not a protocol violation.
func CheckOf(err error) string {
	if ce, ok := vmbus.IsCorrupt(err); ok {
		return "vmbus: " + ce.Kind.String()
	}
	if pe, ok := protoerr.As(err); ok {
		return "netvsc: " + pe.Kind.String()
	}
	return ""
}

// Validate reports whether Open would accept c's settings, without a
// device: the queue count, the MTU, the buffer counts and the RSS key. It
// is the one place these limits live; a configuration file's checker calls
// it rather than copying them. A host may still grant less (fewer queues,
// a smaller MTU) than a valid configuration asks for.
func (c Config) Validate() error {
	if c.Queues < 0 || c.Queues > nvsp.MaxSubchannels {
		return fmt.Errorf("netvsc: %d queues outside 1..%d", c.Queues, nvsp.MaxSubchannels)
	}
	if c.Mode < Hybrid || c.Mode > Interrupt {
		return fmt.Errorf("netvsc: unknown %v", c.Mode)
	}
	for _, v := range []struct {
		what string
		n    int
	}{{"packet buffers", c.PoolPackets}, {"receive stage", c.RxStage}, {"in-flight requests", c.MaxInFlight},
		{"send buffer limit", c.SendBufferLimit}} {
		if v.n < 0 {
			return fmt.Errorf("netvsc: %s %d is negative", v.what, v.n)
		}
	}
	if c.VF < VFOff || c.VF > VFRequired {
		return fmt.Errorf("netvsc: unknown VF mode %d", c.VF)
	}
	if c.VFTimeout < 0 {
		return fmt.Errorf("netvsc: VF timeout %v is negative", c.VFTimeout)
	}
	if c.VF != VFOff {
		if err := c.VFXDP.Validate(); err != nil {
			return fmt.Errorf("netvsc: VF: %w", err)
		}
	}
	_, err := c.withDefaults()
	return err
}
