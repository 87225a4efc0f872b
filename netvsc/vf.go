package netvsc

// Accelerated networking: the SR-IOV VF paired with the synthetic NIC
// (docs/accelerated-networking.md; docs/protocol/netvsc.md §2.9).
//
// When Config.VF is VFAuto or VFRequired, the NIC pairs the VF the host
// associates (NVSP VF_ASSOCIATION) with a kernel netdev, drives that
// netdev with AF_XDP sockets (package afxdp), and moves its traffic there:
//
//	VF_ASSOCIATION{1, serial}
//	  -> find the netdev: R/sys/bus/pci/slots/<serial>/address -> the PCI
//	     function's net/<ifname> (its MAC must be the NIC's), else any PCI
//	     netdev under R with the NIC's MAC; the netdev by name in the
//	     current network namespace
//	  -> prepare it: no addresses, IPv6 off, MTU = the NIC's, up, carrier
//	  -> an XDP program and an XSK on every RX queue; each queue of the
//	     NIC polls its share of them
//	  -> SWITCH_DATA_PATH{VF}, completion requested; transmit moves to the
//	     VF only after the completion (Linux's order)
//	removal: association withdrawn, the host's SWITCH_DATA_PATH{0}, the
//	netdev gone or down (rtnetlink), ENXIO from the data path
//	  -> transmit back to synthetic at once, SWITCH_DATA_PATH{0} with
//	     completion, drain the VF's receive rings, detach (sockets, program),
//	     then keep looking for the VF's return, for as long as it is
//	     associated (a MANA probe can take more than 100 s)
//
// While switched, each queue's RxBurst takes the synthetic ring first (the
// host keeps exception traffic there: broadcast, multicast, a flow's first
// packet) and then the VF; TxBurst sends the whole burst to the VF, doing
// in software the offloads the host would have done (checksums, TCP
// segmentation). The burst interface is unchanged, so whatever drives the
// queues (TAP, forwarder, capture) follows the traffic between paths.

import (
	"context"
	"fmt"
	"time"

	"github.com/vmbusd/vmbusd/frame"
)

// VFMode says whether a NIC uses the VF the host associates with it.
type VFMode int

const (
	// VFOff leaves any VF alone; traffic stays synthetic.
	VFOff VFMode = iota
	// VFAuto pairs and uses the VF whenever the host offers one.
	VFAuto
	// VFRequired is VFAuto, and Open fails unless the VF carries traffic
	// within Config.VFTimeout. A VF that goes away later (servicing) does
	// not fail the NIC; VFStatus reports it.
	VFRequired
)

func (m VFMode) String() string {
	switch m {
	case VFOff:
		return "off"
	case VFAuto:
		return "auto"
	case VFRequired:
		return "required"
	}
	return fmt.Sprintf("vfmode(%d)", int(m))
}

// ParseVFMode takes a mode's name as String prints it.
func ParseVFMode(s string) (VFMode, error) {
	for _, m := range []VFMode{VFOff, VFAuto, VFRequired} {
		if m.String() == s {
			return m, nil
		}
	}
	return 0, fmt.Errorf("netvsc: unknown VF mode %q (off, auto, required)", s)
}

// Path is where a NIC's traffic flows.
type Path int

const (
	// PathSynthetic: through the VMBus rings.
	PathSynthetic Path = iota
	// PathVF: through the VF's AF_XDP sockets.
	PathVF
)

func (p Path) String() string {
	if p == PathVF {
		return "vf"
	}
	return "synthetic"
}

// VFState is where the pairing stands.
type VFState int

const (
	// VFStateOff: Config.VF is VFOff.
	VFStateOff VFState = iota
	// VFStateNone: the host has associated no VF.
	VFStateNone
	// VFStateSearching: a VF is associated but not usable yet: its
	// netdev is not found, not in this namespace, without carrier, or a
	// previous attempt failed. Retried on every netdev event and with a
	// backoff.
	VFStateSearching
	// VFStateAttaching: the netdev is being prepared, its sockets opened
	// and the data path switched.
	VFStateAttaching
	// VFStateActive: the data path is on the VF.
	VFStateActive
	// VFStateDetaching: switching back to synthetic, draining, detaching.
	VFStateDetaching
)

func (s VFState) String() string {
	switch s {
	case VFStateOff:
		return "off"
	case VFStateNone:
		return "none"
	case VFStateSearching:
		return "searching"
	case VFStateAttaching:
		return "attaching"
	case VFStateActive:
		return "active"
	case VFStateDetaching:
		return "detaching"
	}
	return fmt.Sprintf("vfstate(%d)", int(s))
}

// Reasons a NIC's data path switches, as VFEvent.Reason and the keys of
// VFStatus.Reasons.
const (
	ReasonVFReady        = "vf ready"
	ReasonWithdrawn      = "association withdrawn"
	ReasonHostSwitch     = "host switched to synthetic"
	ReasonNetdevRemoved  = "netdev removed"
	ReasonNetdevDown     = "netdev down"
	ReasonDataPathError  = "data path error"
	ReasonSessionEnded   = "session ended"
	ReasonReconfigure    = "reconfigure"
	ReasonClosing        = "closing"
	ReasonSwitchRejected = "switch failed"
)

// VFEvent is one switch of the data path.
type VFEvent struct {
	// To is the path the NIC moved to.
	To Path
	// Reason is one of the Reason constants.
	Reason string
	// Observed is when the NIC saw the cause (the association, the
	// rtnetlink message, the data path's error); Switched when transmit
	// moved; Done when the switch was complete (the host's completion
	// and, towards synthetic, the VF drained and detached).
	Observed, Switched, Done time.Time
	// IfName is the VF's netdev.
	IfName string
	// Err is why a switch to the VF failed, if it did.
	Err string
}

// PathStats counts one path's traffic. TxDropped: frames the path could
// not carry (too large and not segmentable).
type PathStats struct {
	RxPackets, RxBytes, TxPackets, TxBytes, TxDropped uint64
}

// VFStatus is a snapshot of a NIC's VF pairing and data path.
type VFStatus struct {
	Mode  VFMode
	State VFState
	// Associated and Serial: what the host last said in VF_ASSOCIATION.
	Associated bool
	Serial     uint32
	// The VF's netdev, PCI function and its driver, as last paired, and
	// how it was found ("serial" or "mac").
	IfName    string
	Ifindex   int
	PCI       string
	Driver    string
	MatchedBy string
	// Path is where transmit goes now.
	Path Path
	// XDP: the program's hook (native, generic) and the sockets' mode
	// (zero-copy, copy), and the number of sockets.
	Attach, Bind string
	Sockets      int
	// Per-path traffic since the NIC was opened. Synthetic receive counts
	// every frame the host's rings delivered; synthetic transmit counts
	// frames the host completed.
	Synthetic, VF PathStats
	// Time spent on each path since the NIC was opened.
	TimeSynthetic, TimeVF time.Duration
	// Switches counts path changes; Reasons counts them by reason, at
	// the moment the path changes (before a detach's drain ends), plus
	// the switches to the VF the host refused (ReasonSwitchRejected),
	// which change no path.
	Switches uint64
	Reasons  map[string]uint64
	// Events are the latest switches, oldest first (at most 64).
	Events []VFEvent
	// Attempts to attach the VF, and how many failed; LastError is the
	// latest failure.
	Attempts, Failures uint64
	LastError          string
}

// Ethtool returns the VF counters under Linux hv_netvsc's ethtool -S names
// (docs/protocol/netvsc.md §6).
func (st *VFStatus) Ethtool() []Named {
	return []Named{
		{"vf_rx_packets", st.VF.RxPackets}, {"vf_rx_bytes", st.VF.RxBytes},
		{"vf_tx_packets", st.VF.TxPackets}, {"vf_tx_bytes", st.VF.TxBytes},
		{"vf_tx_dropped", st.VF.TxDropped},
	}
}

// VFStatus returns the VF pairing's state and per-path counters.
func (n *NIC) VFStatus() VFStatus {
	st := VFStatus{Mode: n.cfg.VF, Reasons: map[string]uint64{}}
	for _, q := range n.Queues() {
		qs := q.stats()
		st.Synthetic.RxPackets += qs.RxPackets
		st.Synthetic.RxBytes += qs.RxBytes
		st.Synthetic.TxPackets += qs.TxPackets
		st.Synthetic.TxBytes += qs.TxBytes
		st.Synthetic.TxDropped += qs.TxTooBig
	}
	if n.vf == nil {
		st.TimeSynthetic = time.Since(n.opened)
		return st
	}
	n.vf.status(&st)
	return st
}

// VFChanged returns a channel that is closed at the next change of the VF
// pairing's state or path.
func (n *NIC) VFChanged() <-chan struct{} {
	if n.vf == nil {
		return nil
	}
	return n.vf.changedCh()
}

// MetaRxVF marks a frame RxBurst took from the VF rather than from the
// host's rings (it carries no receive offload metadata then).
const MetaRxVF frame.MetaFlags = 1 << 15

// DefaultVFTimeout bounds Open's wait for a required VF.
const DefaultVFTimeout = 30 * time.Second

// startVF starts the VF manager once the first session is up, and for a
// required VF waits until it carries traffic.
func (n *NIC) startVF(ctx context.Context) error {
	n.vf.start()
	if n.cfg.VF != VFRequired {
		return nil
	}
	t := n.cfg.VFTimeout
	if t <= 0 {
		t = DefaultVFTimeout
	}
	return n.vf.waitActive(ctx, t)
}

// vfQueue returns queue idx's VF state, or nil with the VF off.
func (n *NIC) vfQueue(idx int) *vfQueue {
	if n.vf == nil {
		return nil
	}
	return n.vf.queue(idx)
}

// vfAssociation and vfHostSwitch pass NVSP messages to the VF manager.
func (n *NIC) vfAssociation(s *session, allocated bool, serial uint32) {
	if n.vf != nil {
		n.vf.association(s, allocated, serial)
	}
}

func (n *NIC) vfHostSwitch(s *session, path uint32) {
	if n.vf != nil {
		n.vf.hostSwitch(s, path)
	}
}
