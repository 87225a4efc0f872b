package netvsp

// NetVSP: the host side of a Hyper-V synthetic NIC (docs/protocol/netvsc.md is the
// specification; openvmm's netvsp and what DPDK 22.11 and Linux do on the
// wire are the evidence). A NIC is a VMBus device of the network class
// whose Service speaks NVSP and RNDIS to the guest and connects it to a
// vSwitch port (package sim/vswitch).
//
// Per guest open of the device (a session) the NetVSP goes through the
// states below, in the order the reference fixes (§2.5, §7 guest 2). Every
// message out of order, on the wrong channel, or malformed is a protocol
// violation the host counts (bus.Host.Violations; the kinds are listed in
// netvsp_nvsp.go). The host stays lenient where the real one is (§7 host
// 1): 28- or 40-byte NVSP messages, NDIS_VERSION/NDIS_CONFIG completed only
// when a completion was requested, malformed RNDIS completed with a
// failure status instead of tearing the channel down.
//
//	INIT{v,v}                  -> INIT_COMPLETE (success for a supported v <= MaxNVSPVersion)
//	SEND_NDIS_CONFIG (v >= 2)  -> mtu (clamped 1514..9216 as vmswitch), capabilities
//	SEND_NDIS_VER              -> NDIS version
//	SEND_RECV_BUF              -> one section of RecvSectionSize sub-allocations
//	SEND_SEND_BUF              -> section size SendSectionSize (6144)
//	RNDIS INITIALIZE           -> INITIALIZE_CMPLT (8 packets, 0xEFFFFFFF, alignment 8);
//	                              VF_ASSOCIATION after VFDelay when a VF is offered
//	RNDIS QUERY/SET ...        -> completions (ControlDelay later), link, RSS, offloads,
//	                              packet filter
//	SUBCHANNEL (v >= 5)        -> grant min(asked, MaxQueues-1) (or fail); offers; once
//	                              all are open, SEND_INDIRECTION_TABLE
//	data both ways             -> transfer-page packets (tid = first sub-allocation),
//	                              completions for the guest's sends
//	REVOKE_*, HALT             -> no more receive data
//
// Receive-buffer layout: sub-allocations 0..15 are the primary channel's
// control pool (RNDIS completions and indications, as openvmm's
// RX_RESERVED_CONTROL_BUFFERS); the rest is split evenly between the
// MaxQueues channels the host could ever grant (the last takes the
// remainder), so a channel's partition never moves while it has data
// outstanding. A transfer-page packet takes a run of consecutive
// sub-allocations of its channel's partition, one or more per RNDIS
// message, and its transaction id is the run's first index; the run is
// reused only after the guest completed that id (docs/protocol/netvsc.md §2.6).

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vmbusd/vmbusd/netvsc/nvsp"
	"github.com/vmbusd/vmbusd/sim/bus"
	"github.com/vmbusd/vmbusd/sim/vswitch"
	"github.com/vmbusd/vmbusd/vmbus"
)

// NICConfig describes a simulated NIC. The zero value is a NIC as Azure
// offers one: 31 MiB receive and 16 MiB send buffers, 1728-byte receive
// sections and 6144-byte send sections, NVSP 6.1, up to 8 channels, link
// up at 10 Gbit/s, guest memory from R/dev/guestmem.
type NICConfig struct {
	// Instance is the device's instance GUID; zero derives it from the
	// MAC the way Azure does (MAC 00:0D:3A:31:B5:38 gives
	// 000d3a31-b538-000d-3a31-b538000d3a31; docs/protocol/netvsc.md §1).
	Instance vmbus.GUID
	// MAC is the guest's permanent address; nil means a random one in
	// Hyper-V's 00:15:5D range.
	MAC net.HardwareAddr
	// MTU is the largest MTU (without the Ethernet header) the vSwitch
	// port allows; 0 means 1500. The guest's SEND_NDIS_CONFIG MTU is
	// clamped to 1514..9216 (vmswitch) and then to MTU+14.
	MTU int
	// MaxQueues is how many channels (the primary included) the host
	// grants at most: a sub-channel request above MaxQueues-1 gets a
	// partial grant. 0 means 8; at most 64.
	MaxQueues int
	// FailSubchannels fails every sub-channel request (status FAIL, 0
	// granted), as openvmm does for requests it cannot meet.
	FailSubchannels bool
	// NeverOpen is how many of the granted sub-channels are offered but
	// never opened by the (simulated) kernel: their channel directory
	// appears, their ring file never does.
	NeverOpen int
	// SubchannelDelay is how long after the previous one each granted
	// sub-channel's ring appears (the kernel opening it).
	SubchannelDelay time.Duration
	// RecvBuffer and SendBuffer are the buffer sizes uio_hv_generic
	// allocates; 0 means 31 MiB and 16 MiB (docs/protocol/netvsc.md §1, §4).
	RecvBuffer, SendBuffer int
	// RecvSectionSize is the receive sub-allocation size the host
	// announces: 0 means 1728 (what guests assume; DPDK accepts it),
	// RecvSectionFromMTU means openvmm's 256 + MTU + 36. At least 68.
	RecvSectionSize int
	// SendSectionSize is the send-buffer section size the host chooses;
	// 0 means 6144 (openvmm and Azure). A positive multiple of 4, >= 68.
	SendSectionSize int
	// MaxNVSPVersion is the newest NVSP version the host accepts; 0 means
	// 6.1. INIT for any other supported version at or below it succeeds.
	MaxNVSPVersion uint32
	// LinkDown starts the NIC with its cable unplugged (the zero value is
	// link up).
	LinkDown bool
	// LinkSpeed is OID_GEN_LINK_SPEED in bit/s; 0 means 10 Gbit/s.
	LinkSpeed uint64
	// LinkSpacing is the least time between two link indications
	// (openvmm: 5 s, "Linux guests are known to not act on link state
	// change notifications if they happen in quick succession"); 0
	// means 5 s.
	LinkSpacing time.Duration
	// VF, when non-zero, offers accelerated networking: the host sends
	// VF_ASSOCIATION{1, VF} (the VF's serial) VFDelay after the RNDIS
	// INITIALIZE completion, if NVSP >= 4 and the guest set the SR-IOV
	// capability (docs/protocol/netvsc.md §2.9).
	VF uint32
	// VFDelay is openvmm's 1 s before offering the VF; 0 means 1 s.
	VFDelay time.Duration
	// VFStandIn, with VF, stands a veth pair in for the VF, with its PCI
	// device under R, and lets the host steer traffic to it (vf.go).
	VFStandIn *VFConfig
	// ControlDelay delays every RNDIS control completion (a slow VSP;
	// Azure's take up to 15 s).
	ControlDelay time.Duration
	// Memory chooses where GPA-direct ranges are read from.
	Memory bus.MemoryModel
	// GuestMemSize is the least size R/dev/guestmem is created with
	// (GuestMemFile); 0 means DefaultGuestMemSize.
	GuestMemSize int64
	// NotMonitored offers the channels without a monitor id (DPDK 22.11
	// cannot see such a NIC).
	NotMonitored bool
	// RingSize and SubchannelRingSize are the ring sizes per direction
	// (0: 2 MiB, as uio_hv_generic).
	RingSize, SubchannelRingSize int
	// QueueLen is each channel's vSwitch queue of frames waiting for the
	// guest; 0 means 1024. Frames that find it full are dropped.
	QueueLen int
	// WakeTimeout bounds every wait of a channel's host loop: when it
	// expires the rings are checked again, and finding work then counts a
	// missed wake-up (a guest that forgot to signal, or DPDK's missed
	// pending_send_sz wake-up). 0 means 100 ms.
	WakeTimeout time.Duration
	// Faults are NIC faults switched on from the start.
	Faults []NICFault
	// Driver is the guest kernel driver that has the device when it is
	// offered (DeviceConfig.Driver): "" or DriverUIO for a user-space
	// guest, DriverNetvsc to start as a kernel NIC that bring-up scripts
	// move to uio_hv_generic.
	Driver string
	// IfName is the kernel netdev's name while hv_netvsc has the device
	// (default eth<N>).
	IfName string
}

// RecvSectionFromMTU as NICConfig.RecvSectionSize sizes receive
// sub-allocations as openvmm does: 256 + MTU (with header) + 36.
const RecvSectionFromMTU = -1

// Defaults of NICConfig (docs/protocol/netvsc.md §2.5, §4, §7 host 2).
const (
	DefaultRecvSectionSize = 1728
	DefaultSendSectionSize = 6144
	DefaultMaxQueues       = 8
	DefaultLinkSpeed       = 10_000_000_000
	DefaultLinkSpacing     = 5 * time.Second
	DefaultVFDelay         = time.Second
	DefaultNICQueueLen     = 1024
	defaultNICWakeTimeout  = 100 * time.Millisecond
	// rxControlSections is openvmm's RX_RESERVED_CONTROL_BUFFERS.
	rxControlSections = 16
	// minNDISMTU and maxNDISMTU bound the SEND_NDIS_CONFIG MTU (with
	// header) as vmswitch does.
	minNDISMTU = 1514
	maxNDISMTU = 9216
)

// NIC is a simulated synthetic NIC: a network-class VMBus device, its
// NetVSP and its vSwitch port. Safe for concurrent use; made by
// AddNIC. It lives until Remove or the host's Close (which closes its
// port).
type NIC struct {
	host *bus.Host
	dev  *bus.Device
	cfg  NICConfig
	mac  [6]byte
	log  *slog.Logger

	faults   nicFaults
	ctlDelay atomic.Int64 // ControlDelay, changed by SetControlDelay
	port     atomic.Pointer[vswitch.Port]
	sess     atomic.Pointer[nicSession]
	vf       *VF       // the VF stand-in, or nil
	cuts     sync.Pool // *cutBuf: scratch for cutting super-frames (DeliverOffload)

	linkMu    sync.Mutex
	linkUp    bool // what the host reports (OID_GEN_MEDIA_CONNECT_STATUS)
	linkWant  bool // what SetLink asked for
	linkLast  time.Time
	vfPresent bool
	linkKick  chan struct{}

	st nicCounters

	closeOnce sync.Once
	done      chan struct{}
}

// AddNIC offers a synthetic NIC on h, bound to uio_hv_generic, with its
// NetVSP running on the host end.
func AddNIC(h *bus.Host, cfg NICConfig) (*NIC, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	n := &NIC{host: h, cfg: cfg, linkUp: !cfg.LinkDown, linkWant: !cfg.LinkDown, vfPresent: cfg.VF != 0,
		linkKick: make(chan struct{}, 1), done: make(chan struct{})}
	copy(n.mac[:], cfg.MAC)
	n.ctlDelay.Store(int64(cfg.ControlDelay))
	n.log = h.Logger().With("nic", cfg.MAC.String())
	for _, f := range cfg.Faults {
		n.faults.set(f, true)
	}
	if cfg.Memory == bus.GuestMemFile {
		size := cfg.GuestMemSize
		if size == 0 {
			size = bus.DefaultGuestMemSize
		}
		if err := bus.EnsureGuestMemFile(h.Root(), size); err != nil {
			return nil, err
		}
	}
	d, err := h.AddDevice(bus.DeviceConfig{
		Class: vmbus.ClassNetwork, Instance: cfg.Instance, NotMonitored: cfg.NotMonitored,
		RingSize: cfg.RingSize, SubchannelRingSize: cfg.SubchannelRingSize,
		RecvBuffer: cfg.RecvBuffer, SendBuffer: cfg.SendBuffer, Service: n,
		Driver: cfg.Driver, MAC: cfg.MAC, IfName: cfg.IfName,
	})
	if err != nil {
		return nil, err
	}
	n.dev = d
	if cfg.VFStandIn != nil {
		if n.vf, err = newVF(n, *cfg.VFStandIn); err != nil {
			d.Rescind()
			return nil, err
		}
	}
	h.Go(n.runLink)
	n.log.Info("nic offered", "instance", d.Instance().String(), "mtu", cfg.MTU, "max_queues", cfg.MaxQueues,
		"memory", cfg.Memory.String(), "link_up", !cfg.LinkDown)
	return n, nil
}

func (c *NICConfig) fill() error {
	if c.MAC == nil {
		c.MAC = net.HardwareAddr{0x00, 0x15, 0x5d, 0, 0, 0}
		rand.Read(c.MAC[3:])
	}
	if len(c.MAC) != 6 {
		return fmt.Errorf("sim: nic: MAC %v: want 6 bytes", c.MAC)
	}
	c.MAC = slices.Clone(c.MAC)
	if c.Instance.IsZero() {
		h := hex.EncodeToString(c.MAC)
		h = (h + h + h)[:32]
		g, err := vmbus.ParseGUID(h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32])
		if err != nil {
			return err
		}
		c.Instance = g
	}
	if c.MTU == 0 {
		c.MTU = 1500
	}
	if c.MTU < 68 || c.MTU+vswitch.EthHeaderLen > maxNDISMTU {
		return fmt.Errorf("sim: nic: MTU %d out of range 68..%d", c.MTU, maxNDISMTU-vswitch.EthHeaderLen)
	}
	if c.MaxQueues == 0 {
		c.MaxQueues = DefaultMaxQueues
	}
	if c.MaxQueues < 1 || c.MaxQueues > nvsp.MaxSubchannels {
		return fmt.Errorf("sim: nic: MaxQueues %d out of range 1..%d", c.MaxQueues, nvsp.MaxSubchannels)
	}
	if c.NeverOpen < 0 {
		return fmt.Errorf("sim: nic: NeverOpen %d", c.NeverOpen)
	}
	if c.RecvBuffer == 0 {
		c.RecvBuffer = bus.DefaultRecvBuffer
	}
	if c.SendBuffer == 0 {
		c.SendBuffer = bus.DefaultSendBuffer
	}
	if c.RecvSectionSize == 0 {
		c.RecvSectionSize = DefaultRecvSectionSize
	}
	if c.RecvSectionSize != RecvSectionFromMTU && c.RecvSectionSize < nvsp.MinSectionSize {
		return fmt.Errorf("sim: nic: receive section size %d below %d", c.RecvSectionSize, nvsp.MinSectionSize)
	}
	if c.SendSectionSize == 0 {
		c.SendSectionSize = DefaultSendSectionSize
	}
	if c.SendSectionSize < nvsp.MinSectionSize || c.SendSectionSize%4 != 0 || c.SendSectionSize > c.SendBuffer {
		return fmt.Errorf("sim: nic: send section size %d: want a multiple of 4, >= %d, <= the send buffer", c.SendSectionSize, nvsp.MinSectionSize)
	}
	if c.RecvBuffer < (rxControlSections+c.MaxQueues)*maxNDISMTU {
		return fmt.Errorf("sim: nic: receive buffer of %d bytes too small for %d queues", c.RecvBuffer, c.MaxQueues)
	}
	if c.MaxNVSPVersion == 0 {
		c.MaxNVSPVersion = nvsp.Version61
	}
	if !slices.Contains(nvsp.Versions(), c.MaxNVSPVersion) {
		return fmt.Errorf("sim: nic: NVSP version %#x is not one of the protocol's", c.MaxNVSPVersion)
	}
	if c.LinkSpeed == 0 {
		c.LinkSpeed = DefaultLinkSpeed
	}
	if c.LinkSpacing == 0 {
		c.LinkSpacing = DefaultLinkSpacing
	}
	if c.VFDelay == 0 {
		c.VFDelay = DefaultVFDelay
	}
	if c.VFStandIn != nil {
		if c.VF == 0 {
			c.VF = 1
		}
		v := *c.VFStandIn
		c.VFStandIn = &v
	}
	if c.QueueLen == 0 {
		c.QueueLen = DefaultNICQueueLen
	}
	if c.WakeTimeout == 0 {
		c.WakeTimeout = defaultNICWakeTimeout
	}
	if c.Memory != bus.GuestMemFile && c.Memory != bus.GuestMemProc {
		return fmt.Errorf("sim: nic: unknown memory model %d", c.Memory)
	}
	return nil
}

// Device returns the NIC's VMBus device.
func (n *NIC) Device() *bus.Device { return n.dev }

// MAC returns the guest's permanent MAC address (Uplink).
func (n *NIC) MAC() net.HardwareAddr { return net.HardwareAddr(slices.Clone(n.mac[:])) }

// MTU returns the largest MTU the port allows (Uplink).
func (n *NIC) MTU() int { return n.cfg.MTU }

// Config returns the NIC's configuration with defaults filled in.
func (n *NIC) Config() NICConfig { return n.cfg }

// Attach connects the NIC's vSwitch port to p, closing the port attached
// before, if any. Frames the guest sends before a port is attached are
// counted and dropped.
func (n *NIC) Attach(p vswitch.Port) error {
	if err := p.Connect(n); err != nil {
		return err
	}
	if old := n.port.Swap(&p); old != nil {
		(*old).Close()
	}
	return nil
}

// Detach disconnects and closes the NIC's port.
func (n *NIC) Detach() error {
	if old := n.port.Swap(nil); old != nil {
		return (*old).Close()
	}
	return nil
}

// Remove rescinds the NIC's device and closes its port.
func (n *NIC) Remove() error {
	err := n.dev.Rescind()
	n.stop()
	return err
}

func (n *NIC) stop() {
	n.closeOnce.Do(func() {
		close(n.done)
		if n.vf != nil {
			n.vf.close()
		}
		n.Detach()
	})
}

// Serve implements Service: one guest open of the NIC.
func (n *NIC) Serve(ctx context.Context, s *bus.Session) error {
	ss, err := newNICSession(ctx, n, s)
	if err != nil {
		n.log.Warn("netvsp session refused", "err", err)
		return err
	}
	n.sess.Store(ss)
	n.st.opens.Add(1)
	defer n.sess.CompareAndSwap(ss, nil)
	return ss.run()
}

// Deliver implements Uplink: frames for the guest.
func (n *NIC) Deliver(frames [][]byte) int {
	ss := n.sess.Load()
	if ss == nil {
		n.st.rxNoGuest.Add(uint64(len(frames)))
		return 0
	}
	if n.vf != nil {
		return n.vf.deliver(ss, frames)
	}
	return ss.deliver(frames)
}

// transmitBatch hands a batch of frames the guest sent to the port.
// Frames that leave work to an OffloadPort go to one; should the port
// have been replaced by one that takes no offloads since they were
// batched, they are dropped (as in-flight frames are when a cable is
// swapped) and counted.
func (n *NIC) transmitBatch(b *txBatch) {
	frames := b.frames
	if len(frames) == 0 {
		return
	}
	p := n.port.Load()
	if p == nil {
		n.st.txNoPort.Add(uint64(len(frames)))
		return
	}
	if b.work {
		if op, ok := (*p).(vswitch.OffloadPort); ok {
			op.TransmitOffload(frames, b.offs)
			return
		}
		k := 0
		for i, f := range frames {
			if b.offs[i] == (vswitch.FrameOffload{}) {
				frames[k] = f
				k++
			}
		}
		n.st.txDropped.Add(uint64(len(frames) - k))
		frames = frames[:k]
	}
	(*p).Transmit(frames)
}

// SetLink plugs (up) or unplugs the NIC's cable. The host reports the
// change with a MEDIA_CONNECT or MEDIA_DISCONNECT indication no sooner
// than LinkSpacing after the previous one, as a real host spaces them; a
// change undone before it was reported is never reported.
func (n *NIC) SetLink(up bool) {
	n.linkMu.Lock()
	n.linkWant = up
	n.linkMu.Unlock()
	n.kickLink()
}

// LinkUp reports the link state the host currently reports to the guest.
func (n *NIC) LinkUp() bool {
	n.linkMu.Lock()
	defer n.linkMu.Unlock()
	return n.linkUp
}

// SetVF offers (present) or withdraws the VF. Withdrawing it switches a
// guest that moved its data path to the VF back to synthetic first
// (SWITCH_DATA_PATH{0}), then sends VF_ASSOCIATION{0} (docs/protocol/netvsc.md §2.9).
// Needs NICConfig.VF.
func (n *NIC) SetVF(present bool) {
	if n.cfg.VF == 0 {
		return
	}
	n.linkMu.Lock()
	n.vfPresent = present
	n.linkMu.Unlock()
	if ss := n.sess.Load(); ss != nil {
		ss.post(ctlEvent{kind: evVF, up: present})
	}
}

// SetControlDelay changes how long the host takes to answer RNDIS control
// requests (a slow VSP: Azure's take up to 15 s, docs/protocol/netvsc.md §2.5).
func (n *NIC) SetControlDelay(d time.Duration) { n.ctlDelay.Store(int64(d)) }

func (n *NIC) controlDelay() time.Duration { return time.Duration(n.ctlDelay.Load()) }

func (n *NIC) kickLink() {
	select {
	case n.linkKick <- struct{}{}:
	default:
	}
}

// runLink applies link changes with the configured spacing, and runs the
// link-flap and vf-flap faults. It stops with the host or the NIC, and
// closes the port then.
func (n *NIC) runLink() {
	defer n.stop()
	n.log.Debug("link loop started")
	defer n.log.Debug("link loop stopped")
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	var vfFlapNext time.Time
	for {
		now := time.Now()
		var wait time.Duration = time.Hour
		n.linkMu.Lock()
		want := n.linkWant
		if n.faults.has(NICFaultLinkFlap) {
			want = !n.linkUp
		}
		if want != n.linkUp {
			if next := n.linkLast.Add(n.cfg.LinkSpacing); now.Before(next) {
				wait = next.Sub(now)
			} else {
				n.linkUp = want
				n.linkLast = now
				if n.faults.has(NICFaultLinkFlap) {
					n.faults.count(NICFaultLinkFlap)
				}
				n.linkMu.Unlock()
				n.log.Info("link", "up", want)
				n.st.linkChanges.Add(1)
				if ss := n.sess.Load(); ss != nil {
					ss.post(ctlEvent{kind: evLink, up: want})
				}
				continue
			}
		}
		n.linkMu.Unlock()
		if n.cfg.VF != 0 && n.faults.has(NICFaultVFFlap) {
			if !now.Before(vfFlapNext) {
				vfFlapNext = now.Add(time.Second)
				if ss := n.sess.Load(); ss != nil {
					n.faults.count(NICFaultVFFlap)
					ss.post(ctlEvent{kind: evVF, up: false})
					ss.post(ctlEvent{kind: evVF, up: true, delay: 10 * time.Millisecond})
				}
			}
			wait = min(wait, vfFlapNext.Sub(now))
		}
		t.Reset(wait)
		select {
		case <-t.C:
		case <-n.linkKick:
			t.Stop()
		case <-n.done:
			return
		case <-n.host.Context().Done():
			return
		}
	}
}

// nicCounters are a NIC's host-side counters.
type nicCounters struct {
	opens                                                 atomic.Uint64
	txPackets, txBytes, txSends, txSectionSends, txGPA    atomic.Uint64
	txDropped, txErrors, txNoPort                         atomic.Uint64
	rxPackets, rxBytes, rxTransfers, rxDropped, rxNoGuest atomic.Uint64
	rxFiltered, rxTooBig                                  atomic.Uint64
	rxCoalesced, rxCut                                    atomic.Uint64
	control, indications, linkChanges                     atomic.Uint64
	missedWakeups                                         atomic.Uint64
	mu                                                    sync.Mutex
	chans                                                 []ChannelCounters
}

// NICStats are a NIC's host-side counters and its negotiated state.
type NICStats struct {
	Opens uint64 // guest opens of the device (sessions)
	// Guest to host: frames forwarded to the port and their bytes, NVSP
	// send packets (through a send section or GPA-direct), frames dropped
	// by the host's checks (in-frame VLAN tags, bad LSO, ...), sends
	// completed with a failure, frames dropped for want of a port.
	TxPackets, TxBytes, TxSends, TxSectionSends, TxGPASends uint64
	TxDropped, TxErrors, TxNoPort                           uint64
	// Host to guest: frames delivered and their bytes, transfer-page
	// packets, frames dropped on a full channel queue, arriving without
	// a guest, refused by the packet filter, or too big for the MTU.
	RxPackets, RxBytes, RxTransfers, RxDropped, RxNoGuest uint64
	RxFiltered, RxTooBig                                  uint64
	// TCP super-frames from the port delivered coalesced (RSC) and cut
	// into MTU-sized frames for a guest without RSC.
	RxCoalesced, RxCut uint64
	// RNDIS control messages answered, indications sent, link changes.
	Control, Indications, LinkChanges uint64
	// MissedWakeups counts waits that found work only on their timeout:
	// the guest did not signal (or missed a pending_send_sz wake-up).
	MissedWakeups uint64
	// The current session's negotiated state.
	NVSPVersion, NDISVersion uint32
	MTU                      int // NDIS config MTU with the Ethernet header
	PacketFilter             uint32
	RSS                      bool
	Channels                 int // channels open in the current session
	LinkUp                   bool
	DataPathVF               bool
	RSCIPv4, RSCIPv6         bool // the host coalesces TCP for the guest (RSC over VMBus)
	// VF is the VF path's counters and state (with NICConfig.VFStandIn).
	VF VFStats
	// PerChannel has one entry per channel index (0 = primary) ever used.
	PerChannel []ChannelCounters
}

// ChannelCounters are one channel index's counters, summed over sessions.
type ChannelCounters struct {
	RxPackets, RxTransfers uint64 // frames and transfer-page packets sent to the guest
	TxPackets              uint64 // frames the guest sent on the channel
	Unacked                uint64 // transfer-page packets outstanding now
	// UnackedAtClose sums the transfer-page packets the guest had not
	// completed when it closed the device (DPDK leaves some on
	// sub-channels).
	UnackedAtClose uint64
}

// Stats returns a snapshot of the NIC's counters.
func (n *NIC) Stats() NICStats {
	s := &n.st
	st := NICStats{
		Opens: s.opens.Load(), TxPackets: s.txPackets.Load(), TxBytes: s.txBytes.Load(),
		TxSends: s.txSends.Load(), TxSectionSends: s.txSectionSends.Load(), TxGPASends: s.txGPA.Load(),
		TxDropped: s.txDropped.Load(), TxErrors: s.txErrors.Load(), TxNoPort: s.txNoPort.Load(),
		RxPackets: s.rxPackets.Load(), RxBytes: s.rxBytes.Load(), RxTransfers: s.rxTransfers.Load(),
		RxDropped: s.rxDropped.Load(), RxNoGuest: s.rxNoGuest.Load(), RxFiltered: s.rxFiltered.Load(),
		RxTooBig: s.rxTooBig.Load(), RxCoalesced: s.rxCoalesced.Load(), RxCut: s.rxCut.Load(), Control: s.control.Load(), Indications: s.indications.Load(),
		LinkChanges: s.linkChanges.Load(), MissedWakeups: s.missedWakeups.Load(),
		LinkUp: n.LinkUp(),
	}
	s.mu.Lock()
	st.PerChannel = slices.Clone(s.chans)
	s.mu.Unlock()
	if n.vf != nil {
		st.VF = n.vf.Stats()
	}
	if ss := n.sess.Load(); ss != nil {
		cfg := ss.cfg.Load()
		st.NVSPVersion, st.NDISVersion, st.MTU = cfg.version, cfg.ndisVersion, cfg.mtu
		st.PacketFilter, st.RSS, st.DataPathVF = cfg.filter, cfg.rss != nil, cfg.dataPathVF
		st.RSCIPv4, st.RSCIPv6 = cfg.rscOn(false), cfg.rscOn(true)
		chans := ss.channels()
		st.Channels = len(chans)
		for _, c := range chans {
			if c.idx < len(st.PerChannel) {
				st.PerChannel[c.idx].Unacked = uint64(c.outstanding.Load())
			}
		}
	}
	return st
}

// chanCounters adds to channel idx's counters.
func (s *nicCounters) chanAdd(idx int, f func(c *ChannelCounters)) {
	s.mu.Lock()
	for len(s.chans) <= idx {
		s.chans = append(s.chans, ChannelCounters{})
	}
	f(&s.chans[idx])
	s.mu.Unlock()
}

// Patch connects two NICs' ports to each other.
func Patch(a, b *NIC) error {
	pa, pb := vswitch.PatchPorts()
	if err := a.Attach(pa); err != nil {
		return err
	}
	return b.Attach(pb)
}
