package netvsp

// The accelerated-networking VF stand-in (docs/uio-contract.md §8). On
// Azure a synthetic NIC usually comes with an SR-IOV virtual function
// carrying the same MAC; the host steers the guest's traffic to it once
// the guest asks (SWITCH_DATA_PATH{VF}) and keeps exception traffic on the
// synthetic path. Here a veth pair stands in for the VF:
//
//	guest end   the VF's netdev: in the guest's network namespace, the
//	            synthetic NIC's MAC, IPv6 off, up; shown under its PCI
//	            device in R/sys (vf_sysfs.go)
//	host end    the simulator's side of the wire, read and written through
//	            an AF_PACKET socket: frames the vSwitch steers to the VF
//	            go out of it, frames the guest sends on the VF come in
//
//	 port --Deliver--> steering --unicast for the guest, while switched--> host end ==veth==> VF netdev
//	                       '--broadcast, multicast, TCP SYN, or not switched--> NetVSP (synthetic)
//	 port <--Transmit-- NetVSP <-- guest (synthetic)
//	 port <--Transmit-- host end <==veth== VF netdev <-- guest (VF)
//
// The host steers a frame to the VF only while the guest's
// SWITCH_DATA_PATH{VF} is in force (the NetVSP flips its steering when it
// processes the message) and the VF is present with its link up. Guest
// traffic is accepted from both paths and counted per path (VFStats; the
// synthetic path's counters are NICStats').
//
// The VF comes and goes as on a real host (Remove, Add, SetLink; the
// scenarios of vf_scenario.go): graceful servicing switches the guest to
// synthetic, withdraws the association (VF_ASSOCIATION{0}), then removes
// the VF; a surprise removal takes the netdev away first and tells the
// guest afterwards; a slow probe lets the netdev appear long after the
// association. Every step is logged with its time (Events), so a test can
// measure the guest's reaction from the moment of injection.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/vmbusd/vmbusd/clock"
)

// VFKind is the VF's PCI identity: what a guest finds under its PCI device.
type VFKind int

const (
	// VFMellanox is a Mellanox ConnectX-4 Lx virtual function (15b3:1016,
	// driver mlx5_core).
	VFMellanox VFKind = iota
	// VFMANA is a Microsoft Azure Network Adapter virtual function
	// (1414:00ba, driver mana).
	VFMANA
)

func (k VFKind) String() string {
	switch k {
	case VFMellanox:
		return "mlx5"
	case VFMANA:
		return "mana"
	}
	return fmt.Sprintf("vfkind(%d)", int(k))
}

// ParseVFKind takes a kind's name as String prints it.
func ParseVFKind(s string) (VFKind, error) {
	for _, k := range []VFKind{VFMellanox, VFMANA} {
		if k.String() == s {
			return k, nil
		}
	}
	return 0, fmt.Errorf("sim: unknown VF kind %q (mlx5, mana)", s)
}

func (k VFKind) pci(serial uint32, domain uint16) vfPCI {
	p := vfPCI{serial: serial, domain: domain, vendor: 0x15b3, device: 0x1016,
		subVendor: 0x15b3, subDevice: 0x0190, driver: "mlx5_core"}
	if k == VFMANA {
		p.vendor, p.device, p.subVendor, p.subDevice, p.driver = 0x1414, 0x00ba, 0x1414, 0x0001, "mana"
	}
	return p
}

// VFOrder is the order in which a returning VF shows itself to the guest.
type VFOrder int

const (
	// VFNetdevFirst: the VF's netdev is there when the host sends
	// VF_ASSOCIATION{1}.
	VFNetdevFirst VFOrder = iota
	// VFAssociationFirst: the host sends VF_ASSOCIATION{1} as soon as the
	// PCI device is added; the netdev appears ProbeDelay later (a slow
	// driver probe: MANA's can take more than 100 s).
	VFAssociationFirst
)

func (o VFOrder) String() string {
	if o == VFAssociationFirst {
		return "association-first"
	}
	return "netdev-first"
}

// VFConfig describes a NIC's VF stand-in (NICConfig.VFStandIn).
type VFConfig struct {
	// HostIf is the simulator's end of the veth pair. If an interface of
	// that name exists already in the simulator's namespace (a harness
	// made the pair, like dpdk-guest's run-vf.sh with CREATE_VETH=1), the
	// simulator uses it as it is: it neither creates, renames nor deletes
	// it, and takes the VF away by setting its end down (the guest end
	// loses carrier). Otherwise the simulator creates the pair and deletes
	// it to remove the VF. Required.
	HostIf string
	// GuestIf is the guest end, the VF's netdev. Required when the
	// simulator creates the pair, or when the pair's guest end is in
	// another namespace.
	GuestIf string
	// GuestNetns is the named network namespace (/run/netns/NAME) of the
	// guest end; created when missing (and then deleted by the
	// simulator). "" means the simulator's own.
	GuestNetns string
	// Kind is the PCI identity (default VFMellanox).
	Kind VFKind
	// Queues is the number of RX and TX queues of each end (0: 1).
	Queues int
	// PCIDomain is the VF's PCI domain (0: 0x7870 + the serial, so that
	// every NIC's VF sits on its own domain, as Hyper-V's vPCI buses do).
	PCIDomain uint16
	// ProbeDelay is how long the netdev takes to appear after the PCI
	// device (the driver's probe), at start and whenever the VF returns.
	ProbeDelay time.Duration
	// Order is how a returning VF shows itself (Add).
	Order VFOrder
	// AssociationDelay, with VFNetdevFirst, separates the netdev's
	// appearance from VF_ASSOCIATION{1}.
	AssociationDelay time.Duration
	// RemoveDelay is how long graceful servicing waits between withdrawing
	// the association and removing the VF (0: 200 ms): the guest's time
	// to drain the VF.
	RemoveDelay time.Duration
	// NoticeDelay is how long after a surprise removal the host switches
	// the guest to synthetic and withdraws the association (0: 50 ms).
	NoticeDelay time.Duration
	// Away is how long Service and Flap keep the VF away (0: 1 s).
	Away time.Duration
	// Offline starts the NIC without its VF: no PCI device, no netdev, no
	// association until Add (a VF hot-added to a running VM).
	Offline bool
	// Clock times the delays above, Away and graceful servicing's wait for
	// the guest (nil: the real clock), so that a test can play a scenario
	// without waiting. Event times stay wall-clock times.
	Clock clock.Clock
}

// Defaults of VFConfig.
const (
	DefaultVFRemoveDelay = 200 * time.Millisecond
	DefaultVFNoticeDelay = 50 * time.Millisecond
	DefaultVFAway        = time.Second
	// vfEjectTimeout bounds graceful servicing's wait for the guest to
	// leave the VF after the withdrawal.
	vfEjectTimeout = 10 * time.Second
)

func (c *VFConfig) fill(serial uint32) error {
	if c.HostIf == "" {
		return fmt.Errorf("sim: vf: no host interface name")
	}
	for _, n := range []string{c.HostIf, c.GuestIf} {
		if len(n) > unix.IFNAMSIZ-1 {
			return fmt.Errorf("sim: vf: interface name %q too long", n)
		}
	}
	if c.Queues <= 0 {
		c.Queues = 1
	}
	if c.PCIDomain == 0 {
		c.PCIDomain = uint16(0x7870 + serial)
	}
	if c.RemoveDelay <= 0 {
		c.RemoveDelay = DefaultVFRemoveDelay
	}
	if c.NoticeDelay <= 0 {
		c.NoticeDelay = DefaultVFNoticeDelay
	}
	if c.Away <= 0 {
		c.Away = DefaultVFAway
	}
	if c.Kind != VFMellanox && c.Kind != VFMANA {
		return fmt.Errorf("sim: vf: unknown kind %d", c.Kind)
	}
	return nil
}

// VF is a NIC's VF stand-in: the veth pair, its PCI picture in R, the
// host's steering to it and the host end's traffic. Made by AddNIC when
// NICConfig.VFStandIn is set; NIC.VF returns it. Safe for concurrent use;
// its operations (Add, Remove, SetLink, the scenarios) run one at a time.
type VF struct {
	n        *NIC
	cfg      VFConfig
	pci      vfPCI
	root     string
	external bool // the veth pair was there before us
	mac      net.HardwareAddr

	opMu sync.Mutex // one operation at a time

	mu        sync.Mutex
	pciUp     bool
	netdevUp  bool // the pair exists (or, external, is not taken away)
	linkUp    bool // the host end is up: the guest end has carrier
	guestIdx  int
	sock      *vfSocket
	createdNS bool
	closed    bool

	// steer is the host end's socket while the host may steer frames to
	// the VF (netdev present, link up); nil otherwise.
	steer atomic.Pointer[vfSocket]

	st vfCounters

	evMu   sync.Mutex
	events []VFEvent
	evCh   chan struct{}

	wg   sync.WaitGroup // a delayed probe
	stop chan struct{}
}

// vfCounters are the VF path's host-side counters.
type vfCounters struct {
	rxPackets, rxBytes, rxErrors atomic.Uint64
	exceptions                   atomic.Uint64
	txPackets, txBytes           atomic.Uint64
}

// VFStats are the VF path's host-side counters and its state. The
// synthetic path's counters are the rest of NICStats.
type VFStats struct {
	// RxPackets and RxBytes: frames the host steered to the guest through
	// the VF. RxErrors: steered frames the host end refused (the VF went
	// away under them). Exceptions: frames that went synthetic while the
	// guest was switched to the VF: broadcast, multicast, TCP SYN, and
	// frames not for the NIC's MAC, tagged or above the MTU
	// (docs/uio-contract.md §8).
	RxPackets, RxBytes, RxErrors, Exceptions uint64
	// TxPackets and TxBytes: frames the guest sent on the VF, forwarded to
	// the port.
	TxPackets, TxBytes uint64
	// The VF's state: PCI device present, netdev present, link up,
	// association offered, and whether the host steers to it now.
	PCI, Netdev, LinkUp, Offered, Steering bool
	// HostIf and GuestIf name the pair; BDF is the PCI function.
	HostIf, GuestIf, BDF string
}

// VFEventKind names a step of the VF's life as the host took it.
type VFEventKind string

// The VF's events.
const (
	VFPCIAdded          VFEventKind = "pci-added"
	VFPCIRemoved        VFEventKind = "pci-removed"
	VFNetdevAdded       VFEventKind = "netdev-added"
	VFNetdevRemoved     VFEventKind = "netdev-removed"
	VFLinkUp            VFEventKind = "link-up"
	VFLinkDown          VFEventKind = "link-down"
	VFAssociationSent   VFEventKind = "association-sent"
	VFWithdrawalSent    VFEventKind = "withdrawal-sent"
	VFHostSwitchSent    VFEventKind = "host-switch-synthetic"
	VFGuestSwitchVF     VFEventKind = "guest-switch-vf"
	VFGuestSwitchSynth  VFEventKind = "guest-switch-synthetic"
	VFServiceStarted    VFEventKind = "service-started"
	VFScenarioCompleted VFEventKind = "scenario-done"
)

// VFEvent is one step, with the time the host took it.
type VFEvent struct {
	Time   time.Time
	Kind   VFEventKind
	Detail string
}

// newVF sets the stand-in up: the PCI device at once, the netdev at once
// or ProbeDelay later.
func newVF(n *NIC, cfg VFConfig) (*VF, error) {
	if err := cfg.fill(n.cfg.VF); err != nil {
		return nil, err
	}
	v := &VF{n: n, cfg: cfg, pci: cfg.Kind.pci(n.cfg.VF, cfg.PCIDomain), root: n.host.Root(),
		mac: n.MAC(), evCh: make(chan struct{}), stop: make(chan struct{})}
	if l, err := netlink.LinkByName(cfg.HostIf); err == nil {
		v.external = true
		if err := v.adoptExternal(l); err != nil {
			return nil, err
		}
	} else if cfg.GuestIf == "" {
		return nil, fmt.Errorf("sim: vf: no guest interface name for the veth pair %s", cfg.HostIf)
	}
	if cfg.Offline {
		n.vfPresent = false
		if v.external {
			v.mu.Lock()
			v.netdevUp = true // adopted up; taken away now
			v.mu.Unlock()
			if err := v.removeNetdev(); err != nil {
				v.close()
				return nil, err
			}
		}
		return v, nil
	}
	if err := v.addPCI(); err != nil {
		v.close()
		return nil, err
	}
	if v.external {
		v.mu.Lock()
		err := v.writeNetdevLocked()
		v.mu.Unlock()
		if err != nil {
			v.close()
			return nil, err
		}
		return v, nil
	}
	if cfg.ProbeDelay <= 0 {
		if err := v.addNetdev(); err != nil {
			v.close()
			return nil, err
		}
		return v, nil
	}
	v.wg.Add(1)
	go func() {
		defer v.wg.Done()
		if sleepCtx(v.stopCtx(), cfg.Clock, cfg.ProbeDelay) == nil {
			if err := v.addNetdev(); err != nil {
				n.log.Warn("vf netdev", "err", err)
			}
		}
	}()
	return v, nil
}

// adoptExternal takes over a pair someone else made: the host end is
// opened as it is; the guest end's name comes from GuestIf or, when the
// peer is in this namespace, from the pair itself.
func (v *VF) adoptExternal(l netlink.Link) error {
	if _, ok := l.(*netlink.Veth); !ok {
		return fmt.Errorf("sim: vf: %s is a %s, not a veth", v.cfg.HostIf, l.Type())
	}
	if v.cfg.GuestIf == "" {
		peer, err := netlink.LinkByIndex(l.Attrs().ParentIndex)
		if err != nil || l.Attrs().NetNsID >= 0 {
			return fmt.Errorf("sim: vf: the peer of %s is not in this namespace: name it (GuestIf)", v.cfg.HostIf)
		}
		v.cfg.GuestIf = peer.Attrs().Name
	}
	err := v.inGuestNS(false, func(h *netlink.Handle) error {
		g, err := h.LinkByName(v.cfg.GuestIf)
		if err != nil {
			return err
		}
		v.guestIdx = g.Attrs().Index
		if g.Attrs().HardwareAddr.String() != v.mac.String() {
			v.n.log.Warn("vf guest end's MAC is not the NIC's: guests pair by MAC", "vf", v.cfg.GuestIf,
				"mac", g.Attrs().HardwareAddr.String(), "nic", v.mac.String())
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sim: vf: guest end %s: %w", v.cfg.GuestIf, err)
	}
	sock, err := openVFSocket(l.Attrs().Index, v.cfg.HostIf)
	if err != nil {
		return err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.sock, v.netdevUp = sock, true
	v.linkUp = l.Attrs().Flags&net.FlagUp != 0
	sock.start(v)
	v.updateSteerLocked()
	return nil
}

// NIC returns the NIC whose VF this is.
func (v *VF) NIC() *NIC { return v.n }

// Config returns the stand-in's configuration with defaults filled in.
func (v *VF) Config() VFConfig { return v.cfg }

// External reports whether the veth pair belongs to someone else.
func (v *VF) External() bool { return v.external }

// BDF returns the VF's PCI function name (domain:bus:slot.function).
func (v *VF) BDF() string { return v.pci.bdf() }

// Stats returns the VF path's counters and state.
func (v *VF) Stats() VFStats {
	v.mu.Lock()
	st := VFStats{PCI: v.pciUp, Netdev: v.netdevUp, LinkUp: v.linkUp,
		HostIf: v.cfg.HostIf, GuestIf: v.cfg.GuestIf, BDF: v.pci.bdf()}
	v.mu.Unlock()
	st.RxPackets, st.RxBytes, st.RxErrors = v.st.rxPackets.Load(), v.st.rxBytes.Load(), v.st.rxErrors.Load()
	st.Exceptions = v.st.exceptions.Load()
	st.TxPackets, st.TxBytes = v.st.txPackets.Load(), v.st.txBytes.Load()
	st.Steering = v.steer.Load() != nil
	if ss := v.n.sess.Load(); ss != nil {
		st.Steering = st.Steering && ss.cfg.Load().dataPathVF
	} else {
		st.Steering = false
	}
	v.n.linkMu.Lock()
	st.Offered = v.n.vfPresent
	v.n.linkMu.Unlock()
	return st
}

// Events returns the steps the host took so far, oldest first.
func (v *VF) Events() []VFEvent {
	v.evMu.Lock()
	defer v.evMu.Unlock()
	return slices.Clone(v.events)
}

// EventsChanged returns a channel closed at the next event.
func (v *VF) EventsChanged() <-chan struct{} {
	v.evMu.Lock()
	defer v.evMu.Unlock()
	return v.evCh
}

func (v *VF) note(kind VFEventKind, detail string) { v.noteAt(kind, detail, time.Now()) }

// noteAt records an event that happened at t (a step's start, when its
// effect begins before the step returns).
func (v *VF) noteAt(kind VFEventKind, detail string, t time.Time) {
	v.evMu.Lock()
	v.events = append(v.events, VFEvent{Time: t, Kind: kind, Detail: detail})
	close(v.evCh)
	v.evCh = make(chan struct{})
	v.evMu.Unlock()
	v.n.log.Info("vf", "event", string(kind), "detail", detail)
}

// waitEvent waits, at most d, for an event of kind at or after since.
func (v *VF) waitEvent(ctx context.Context, kind VFEventKind, since time.Time, d time.Duration) bool {
	t := clock.Or(v.cfg.Clock).NewTimer(d)
	defer t.Stop()
	for {
		ch := v.EventsChanged()
		for _, e := range v.Events() {
			if e.Kind == kind && !e.Time.Before(since) {
				return true
			}
		}
		select {
		case <-ch:
		case <-t.C():
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// Add brings the VF back: the PCI device, then the netdev and the
// association in the order given (ProbeDelay between the PCI device and the
// netdev; AssociationDelay between the netdev and the association with
// VFNetdevFirst). It returns when all three are done.
func (v *VF) Add(ctx context.Context, order VFOrder) error {
	return v.add(ctx, order, v.cfg.ProbeDelay)
}

func (v *VF) add(ctx context.Context, order VFOrder, probe time.Duration) error {
	v.opMu.Lock()
	defer v.opMu.Unlock()
	if err := v.addPCI(); err != nil {
		return err
	}
	if order == VFAssociationFirst {
		if err := v.n.offerVF(ctx, true); err != nil {
			return err
		}
	}
	if err := sleepCtx(ctx, v.cfg.Clock, probe); err != nil {
		return err
	}
	if err := v.addNetdev(); err != nil {
		return err
	}
	if order == VFNetdevFirst {
		if err := sleepCtx(ctx, v.cfg.Clock, v.cfg.AssociationDelay); err != nil {
			return err
		}
		return v.n.offerVF(ctx, true)
	}
	return nil
}

// Remove takes the VF away. Graceful (surprise false), as in host
// servicing: the host switches the guest to synthetic (if it was on the
// VF), withdraws the association, waits for the guest to leave the VF (its
// own SWITCH_DATA_PATH{0}, as a guest ejects the PCI device before the
// host takes it; at most 10 s) and RemoveDelay more, then removes the
// netdev and the PCI device. A surprise removal takes the netdev and the
// PCI device away first and tells the guest NoticeDelay later.
func (v *VF) Remove(ctx context.Context, surprise bool) error {
	v.opMu.Lock()
	defer v.opMu.Unlock()
	if surprise {
		err := errors.Join(v.removeNetdev(), v.removePCI())
		if err != nil {
			return err
		}
		if err := sleepCtx(ctx, v.cfg.Clock, v.cfg.NoticeDelay); err != nil {
			return err
		}
		return v.n.offerVF(ctx, false)
	}
	start := time.Now()
	v.note(VFServiceStarted, "graceful")
	onVF := false
	if ss := v.n.sess.Load(); ss != nil {
		onVF = ss.cfg.Load().dataPathVF
	}
	if err := v.n.offerVF(ctx, false); err != nil {
		return err
	}
	if onVF {
		v.waitEvent(ctx, VFGuestSwitchSynth, start, vfEjectTimeout)
	}
	if err := sleepCtx(ctx, v.cfg.Clock, v.cfg.RemoveDelay); err != nil {
		return err
	}
	return errors.Join(v.removeNetdev(), v.removePCI())
}

// SetLink sets the VF's link (the host end) up or down without removing
// it: the guest end gains or loses carrier, and the host stops steering to
// it while it is down.
func (v *VF) SetLink(ctx context.Context, up bool) error {
	v.opMu.Lock()
	defer v.opMu.Unlock()
	return v.setLink(up)
}

// Present reports whether the VF's netdev is there (not taken away).
func (v *VF) Present() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.netdevUp
}

func (v *VF) addPCI() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.pciUp || v.closed {
		return nil
	}
	if err := writeVFPCI(v.root, v.pci); err != nil {
		return err
	}
	v.pciUp = true
	v.noteLocked(VFPCIAdded, v.pci.bdf())
	return nil
}

func (v *VF) removePCI() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.pciUp {
		return nil
	}
	v.pciUp = false
	err := removeVFPCI(v.root, v.pci)
	v.noteLocked(VFPCIRemoved, v.pci.bdf())
	return err
}

// noteLocked records an event while v.mu is held (the event lock is
// separate).
func (v *VF) noteLocked(kind VFEventKind, detail string) { v.note(kind, detail) }

// addNetdev makes the VF's netdev appear: the veth pair (or, external, its
// host end up again) and its sysfs entries.
func (v *VF) addNetdev() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.netdevUp || v.closed {
		return nil
	}
	if v.external {
		if err := v.setHostUp(true); err != nil {
			return err
		}
		v.netdevUp, v.linkUp = true, true
	} else if err := v.createPairLocked(); err != nil {
		return err
	}
	if err := v.writeNetdevLocked(); err != nil {
		return err
	}
	v.noteLocked(VFNetdevAdded, v.cfg.GuestIf)
	v.updateSteerLocked()
	return nil
}

// writeNetdevLocked shows the netdev under the PCI device, if both exist.
func (v *VF) writeNetdevLocked() error {
	if !v.pciUp || !v.netdevUp {
		return nil
	}
	return writeVFNetdev(v.root, v.pci, v.cfg.GuestIf, v.guestIdx, v.mac, v.n.cfg.MTU)
}

// removeNetdev takes the netdev away: steering stops first, then the
// pair goes (or, external, its host end goes down).
func (v *VF) removeNetdev() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.netdevUp {
		return nil
	}
	start := time.Now()
	v.netdevUp = false
	v.updateSteerLocked()
	var err error
	if v.external {
		err = v.setHostUp(false)
		v.linkUp = false
	} else {
		err = v.deletePairLocked()
	}
	err = errors.Join(err, removeVFNetdev(v.root, v.pci, v.cfg.GuestIf))
	v.noteAt(VFNetdevRemoved, v.cfg.GuestIf, start)
	return err
}

func (v *VF) setLink(up bool) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.netdevUp || v.linkUp == up {
		return nil
	}
	start := time.Now()
	if !up {
		v.linkUp = false
		v.updateSteerLocked()
	}
	if err := v.setHostUp(up); err != nil {
		return err
	}
	v.linkUp = up
	v.updateSteerLocked()
	if up {
		v.noteLocked(VFLinkUp, v.cfg.HostIf)
	} else {
		v.noteAt(VFLinkDown, v.cfg.HostIf, start)
	}
	return nil
}

func (v *VF) updateSteerLocked() {
	if v.netdevUp && v.linkUp && v.sock != nil && !v.closed {
		v.steer.Store(v.sock)
	} else {
		v.steer.Store(nil)
	}
}

func (v *VF) setHostUp(up bool) error {
	l, err := netlink.LinkByName(v.cfg.HostIf)
	if err != nil {
		return fmt.Errorf("sim: vf: %w", err)
	}
	if up {
		err = netlink.LinkSetUp(l)
	} else {
		err = netlink.LinkSetDown(l)
	}
	if err != nil {
		return fmt.Errorf("sim: vf: %s: %w", v.cfg.HostIf, err)
	}
	return nil
}

// createPairLocked creates the veth pair: host end here, guest end in
// GuestNetns with the NIC's MAC; IPv6 off on both (so the kernel sends
// nothing on the wire by itself), both up, and the host end's socket.
func (v *VF) createPairLocked() error {
	mtu := v.n.cfg.MTU
	q := uint32(v.cfg.Queues)
	la := netlink.NewLinkAttrs()
	la.Name, la.MTU, la.NumTxQueues, la.NumRxQueues = v.cfg.HostIf, mtu, int(q), int(q)
	veth := &netlink.Veth{LinkAttrs: la, PeerName: v.cfg.GuestIf, PeerHardwareAddr: v.mac,
		PeerTxQLen: -1, PeerNumTxQueues: q, PeerNumRxQueues: q, PeerMTU: uint32(mtu)}
	nsFd := -1
	if v.cfg.GuestNetns != "" {
		err := v.inGuestNS(true, func(*netlink.Handle) error {
			h, err := netns.Get()
			if err != nil {
				return err
			}
			nsFd = int(h)
			return nil
		})
		if err != nil {
			return fmt.Errorf("sim: vf: namespace %s: %w", v.cfg.GuestNetns, err)
		}
		defer unix.Close(nsFd)
		veth.PeerNamespace = netlink.NsFd(nsFd)
	}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("sim: vf: veth %s/%s: %w", v.cfg.HostIf, v.cfg.GuestIf, err)
	}
	fail := func(err error) error {
		if l, e := netlink.LinkByName(v.cfg.HostIf); e == nil {
			netlink.LinkDel(l)
		}
		return fmt.Errorf("sim: vf: veth %s/%s: %w", v.cfg.HostIf, v.cfg.GuestIf, err)
	}
	err := v.inGuestNS(false, func(h *netlink.Handle) error {
		g, err := h.LinkByName(v.cfg.GuestIf)
		if err != nil {
			return err
		}
		disableIPv6(v.cfg.GuestIf)
		v.guestIdx = g.Attrs().Index
		return h.LinkSetUp(g)
	})
	if err != nil {
		return fail(err)
	}
	host, err := netlink.LinkByName(v.cfg.HostIf)
	if err != nil {
		return fail(err)
	}
	disableIPv6(v.cfg.HostIf)
	sock, err := openVFSocket(host.Attrs().Index, v.cfg.HostIf)
	if err != nil {
		return fail(err)
	}
	if err := netlink.LinkSetUp(host); err != nil {
		sock.close()
		return fail(err)
	}
	v.sock, v.netdevUp, v.linkUp = sock, true, true
	sock.start(v)
	return nil
}

// deletePairLocked stops the reader and deletes the pair.
func (v *VF) deletePairLocked() error {
	if v.sock != nil {
		v.sock.close()
		v.sock = nil
	}
	v.linkUp = false
	l, err := netlink.LinkByName(v.cfg.HostIf)
	if err != nil {
		return nil // gone already
	}
	if err := netlink.LinkDel(l); err != nil {
		return fmt.Errorf("sim: vf: delete %s: %w", v.cfg.HostIf, err)
	}
	return nil
}

// disableIPv6 turns IPv6 off on ifname in the calling thread's namespace;
// without the IPv6 module there is nothing to turn off.
func disableIPv6(ifname string) {
	os.WriteFile("/proc/sys/net/ipv6/conf/"+ifname+"/disable_ipv6", []byte("1"), 0)
}

// inGuestNS runs f with the calling thread in the guest end's namespace (the
// simulator's own when GuestNetns is empty), creating it if create is set
// and it is missing, with a netlink handle for it.
func (v *VF) inGuestNS(create bool, f func(h *netlink.Handle) error) error {
	if v.cfg.GuestNetns == "" {
		h, err := netlink.NewHandle()
		if err != nil {
			return err
		}
		defer h.Close()
		return f(h)
	}
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	restored := true
	defer func() {
		if restored {
			runtime.UnlockOSThread()
		} // else the thread stays locked and dies with the goroutine
	}()
	target, err := netns.GetFromName(v.cfg.GuestNetns)
	if err != nil {
		if !create {
			return err
		}
		if target, err = netns.NewNamed(v.cfg.GuestNetns); err != nil {
			netns.Set(orig)
			return err
		}
		v.createdNS = true
		if lo, e := netlink.LinkByName("lo"); e == nil {
			netlink.LinkSetUp(lo)
		}
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		return err
	}
	h, err := netlink.NewHandle()
	if err == nil {
		err = f(h)
		h.Close()
	}
	if e := netns.Set(orig); e != nil {
		restored = false
		return errors.Join(err, e)
	}
	return err
}

// close removes everything the stand-in made: the pair (unless it is
// someone else's), the sysfs entries, a namespace it created.
func (v *VF) close() {
	v.mu.Lock()
	if v.closed {
		v.mu.Unlock()
		return
	}
	v.closed = true
	close(v.stop)
	v.steer.Store(nil)
	v.mu.Unlock()
	v.wg.Wait() // a delayed probe finishes (it sees closed) before the pair goes
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.external {
		if v.sock != nil {
			v.sock.close()
			v.sock = nil
		}
	} else {
		v.deletePairLocked()
	}
	removeVFPCI(v.root, v.pci)
	if v.createdNS {
		netns.DeleteNamed(v.cfg.GuestNetns)
	}
}

func (v *VF) stopCtx() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-v.stop:
		case <-ctx.Done():
		}
		cancel()
	}()
	return ctx
}

// sleepCtx waits d on clk (nil: the real clock) or until ctx ends.
func sleepCtx(ctx context.Context, clk clock.Clock, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := clock.Or(clk).NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
