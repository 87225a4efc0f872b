package vswitch

// The simulated vSwitch: every NIC has one port, and the port is connected
// to one of (NIC.Attach):
//
//	PatchPorts / Patch   another simulated NIC (a patch cable)
//	NewTAP               a kernel TAP device, or a veth pair, in a named network
//	                     namespace: the kernel side gets the frames, so ping and
//	                     other real tools reach the guest through the host
//	NewGenerator         a traffic generator and sink for benchmarks (flows,
//	                     frame sizes, rate, counters)
//	NewReflector         frames come back with source and destination MAC swapped
//	(your own Port)      anything a test needs
//
//	 guest ==VMBus==> NetVSP --validated frames--> Port.Transmit
//	 guest <==VMBus== NetVSP <--filter, RSS, queue-- NIC.Deliver <-- port
//
// Between the NetVSP and the port the vSwitch does what the Hyper-V switch
// port does for the guest: it applies the guest's packet filter, picks the
// receive channel with the guest's RSS parameters (Toeplitz over the
// guest's key and indirection table) and tags the frame with the hash,
// strips 802.1Q tags into the VLAN per-packet info, verifies checksums, and
// queues the frame per channel (dropping, and counting, when a queue is
// full). Guest frames are checked and their offloads done (checksums,
// LSOv2 segmentation, the VLAN tag re-inserted from its per-packet info)
// before the port sees them.

import (
	"net"
	"sync/atomic"
)

// A Port is what a NIC's vSwitch port is connected to.
type Port interface {
	// Connect is called once, by NIC.Attach, before any Transmit: frames
	// for the guest go to up.Deliver from then until Close.
	Connect(up Uplink) error
	// Transmit takes frames the guest sent, after the host checked them
	// and did their offloads. The frames belong to the caller and are
	// valid only during the call; Transmit may modify them in place and
	// must not retain them. It is called from several goroutines at once
	// (one per channel) and should not block for long: the guest's
	// channel waits meanwhile.
	Transmit(frames [][]byte)
	// Close disconnects the port; Transmit is not called after it
	// returns. It is idempotent.
	Close() error
}

// Uplink is a NIC's end of its vSwitch port. *NIC implements it.
type Uplink interface {
	// Deliver hands frames to the vSwitch for the guest: the packet
	// filter and RSS apply, and each frame is copied to its channel's
	// queue. It never blocks and may be called from any goroutine; it
	// returns how many frames were queued (the others were filtered or
	// dropped, and counted in NICStats). Frames are plain Ethernet
	// frames without FCS, with any 802.1Q tag in the frame.
	Deliver(frames [][]byte) int
	// MAC returns the guest NIC's MAC address.
	MAC() net.HardwareAddr
	// MTU returns the largest frame payload the port carries (the NIC's
	// MTU, without the Ethernet header).
	MTU() int
}

// Reflector is a port that sends every frame back to the guest with its
// source and destination MAC swapped (the peer DPDK's testpmd io mode
// expects). Safe for concurrent use; the zero value works.
type Reflector struct {
	up                     Uplink // set by Connect, before any Transmit
	frames, bytes, dropped atomic.Uint64
}

// NewReflector returns a reflecting port.
func NewReflector() *Reflector { return &Reflector{} }

// Connect implements Port.
func (r *Reflector) Connect(up Uplink) error { r.up = up; return nil }

// Transmit implements Port: swap MACs in place and deliver back.
func (r *Reflector) Transmit(frames [][]byte) {
	var b uint64
	for _, f := range frames {
		if len(f) >= 12 {
			var t [6]byte
			copy(t[:], f[0:6])
			copy(f[0:6], f[6:12])
			copy(f[6:12], t[:])
		}
		b += uint64(len(f))
	}
	n := r.up.Deliver(frames)
	r.frames.Add(uint64(len(frames)))
	r.bytes.Add(b)
	r.dropped.Add(uint64(len(frames) - n))
}

// Close implements Port.
func (r *Reflector) Close() error { return nil }

// Stats returns the frames and bytes reflected, and how many of them the
// guest's side dropped or filtered.
func (r *Reflector) Stats() (frames, bytes, dropped uint64) {
	return r.frames.Load(), r.bytes.Load(), r.dropped.Load()
}

// PatchPorts returns the two ends of a patch cable between two NICs:
// attach one to each (or use Patch).
func PatchPorts() (Port, Port) {
	a, b := &patchEnd{}, &patchEnd{}
	a.peer, b.peer = b, a
	return a, b
}

type patchEnd struct {
	peer   *patchEnd
	up     atomic.Pointer[Uplink] // the peer's Transmit reads it
	closed atomic.Bool
}

func (p *patchEnd) Connect(up Uplink) error { p.up.Store(&up); return nil }

func (p *patchEnd) Transmit(frames [][]byte) {
	o := p.peer
	up := o.up.Load()
	if up == nil || o.closed.Load() {
		return
	}
	(*up).Deliver(frames)
}

func (p *patchEnd) Close() error { p.closed.Store(true); return nil }
