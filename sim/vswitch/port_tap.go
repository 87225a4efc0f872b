package vswitch

// A port into the kernel: a TAP device, or a veth pair, whose kernel side
// sits in a named network namespace. Frames the guest sends come out of
// the interface there, and what the kernel sends into it (ARP, ping, a
// TCP connection) reaches the guest, so real tools in that namespace talk
// to the guest through the simulated host:
//
//	ip netns exec NS ping 10.0.0.2        # NS has TAPConfig.Addr 10.0.0.1/24
//
// TAP: the device is created inside the namespace and the simulator holds
// its file descriptor (IFF_TAP|IFF_NO_PI|IFF_VNET_HDR: a virtio-net header
// and an Ethernet frame per read or write). With the header the TAP is a
// NIC with offloads, as the physical NIC behind a Hyper-V vSwitch is: the
// kernel accepts the guest's large sends whole and finishes checksums
// (OffloadPort; TUNSETOFFLOAD makes it hand us 64 KiB TCP super-frames and
// partial checksums too: a TCP super-frame goes to the vSwitch whole with
// its offload when the NIC takes them (OffloadUplink), which delivers it
// coalesced to a guest with RSC and cuts it for any other; UDP
// super-frames, and TCP ones for an uplink without offloads, the port
// cuts into MTU-sized frames with their checksums itself). veth: one end goes into the namespace, the other
// stays in the simulator's own namespace, read and written through an
// AF_PACKET socket, without offloads. A namespace that does not exist is
// created (like `ip netns add`) and deleted again by Close. Needs
// CAP_NET_ADMIN.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/vmbusd/vmbusd/frame/csum"
	"github.com/vmbusd/vmbusd/hoptrace"
	"github.com/vmbusd/vmbusd/rawio"
)

// TAPConfig describes a kernel port.
type TAPConfig struct {
	// Netns is the named network namespace (/run/netns/NAME) of the
	// kernel side; created when missing. "" means the simulator's own.
	Netns string
	// Name is the interface's name there; "" means "vmbusd0".
	Name string
	// Veth uses a veth pair instead of a TAP device.
	Veth bool
	// Addr, when valid, is assigned to the kernel side (which is always
	// brought up).
	Addr netip.Prefix
	// MTU of the kernel side; 0 means the NIC's MTU.
	MTU int
	// NoOffloads opens a TAP without a virtio-net header: one plain
	// frame per read or write, every checksum complete.
	NoOffloads bool
	// Stamps, when set, receives the port's hops of a traced round trip
	// (package hoptrace): frames written to and read from the kernel.
	Stamps *hoptrace.Stamps
}

// TAP is a port into the kernel. Safe for concurrent use; make it with
// NewTAP. Attach it to one NIC only.
type TAP struct {
	cfg       TAPConfig
	f         *os.File
	rc        syscall.RawConn
	hostEnd   string // veth: the simulator's end
	createdNS bool
	up        Uplink
	oup       OffloadUplink // up, when it takes TCP super-frames whole
	wg        sync.WaitGroup
	closeOnce sync.Once
	closed    atomic.Bool

	vnet     bool        // every read and write starts with a virtio-net header
	offloads tunOffloads // what TUNSETOFFLOAD accepted
	writers  chan *tapWriter

	// The read side's state, shared by runRead and the reads a Transmit
	// makes after its writes (pollAfterWrite); rmu serialises them, so
	// frames reach the vSwitch in the kernel's order.
	rmu        sync.Mutex
	rd         *tapReader
	readWanted atomic.Bool // runRead found rmu held: read again after it

	rx, tx, txErrors, rxDropped atomic.Uint64
}

// NewTAP creates the kernel side. The port starts moving frames when
// attached to a NIC.
func NewTAP(cfg TAPConfig) (*TAP, error) {
	if cfg.Name == "" {
		cfg.Name = "vmbusd0"
	}
	if len(cfg.Name) > unix.IFNAMSIZ-1 {
		return nil, fmt.Errorf("sim: tap: interface name %q too long", cfg.Name)
	}
	t := &TAP{cfg: cfg}
	var err error
	if cfg.Veth {
		err = t.createVeth()
	} else {
		err = t.createTAP()
	}
	if err != nil {
		t.cleanupNS()
		return nil, err
	}
	return t, nil
}

// inNS runs f with the calling thread in namespace ns (the current one when
// ns is None), creating the named namespace if needed.
func (t *TAP) inNS(f func(target netns.NsHandle) error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("sim: tap: %w", err)
	}
	defer orig.Close()
	restored := true
	defer func() {
		if restored {
			runtime.UnlockOSThread()
		} // else: leave the thread locked so it dies with the goroutine
	}()
	target := orig
	if t.cfg.Netns != "" {
		target, err = netns.GetFromName(t.cfg.Netns)
		if err != nil {
			if target, err = netns.NewNamed(t.cfg.Netns); err != nil {
				netns.Set(orig)
				return fmt.Errorf("sim: tap: create network namespace %s: %w", t.cfg.Netns, err)
			}
			t.createdNS = true
		}
		defer target.Close()
	}
	if err := netns.Set(target); err != nil {
		return fmt.Errorf("sim: tap: enter network namespace %s: %w", t.cfg.Netns, err)
	}
	ferr := f(target)
	if err := netns.Set(orig); err != nil {
		restored = false
		return fmt.Errorf("sim: tap: leave network namespace: %w", err)
	}
	return ferr
}

func (t *TAP) createTAP() error {
	return t.inNS(func(target netns.NsHandle) error {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			return fmt.Errorf("sim: tap: %w", err)
		}
		ifr, err := unix.NewIfreq(t.cfg.Name)
		if err != nil {
			unix.Close(fd)
			return err
		}
		flags := uint16(unix.IFF_TAP | unix.IFF_NO_PI)
		if !t.cfg.NoOffloads {
			flags |= unix.IFF_VNET_HDR
		}
		ifr.SetUint16(flags)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			unix.Close(fd)
			return fmt.Errorf("sim: tap: TUNSETIFF %s: %w", t.cfg.Name, err)
		}
		if !t.cfg.NoOffloads {
			if err := unix.IoctlSetPointerInt(fd, unix.TUNSETVNETHDRSZ, vnetHdrLen); err != nil {
				unix.Close(fd)
				return fmt.Errorf("sim: tap: TUNSETVNETHDRSZ %s: %w", t.cfg.Name, err)
			}
			t.vnet = true
			t.offloads = probeTUNOffloads(fd)
		}
		t.f = os.NewFile(uintptr(fd), "tap:"+t.cfg.Name)
		if err := t.initIO(); err != nil {
			return err
		}
		return t.configure(netlink.NewHandle)
	})
}

func (t *TAP) createVeth() error {
	t.hostEnd = "vh-" + t.cfg.Name
	if len(t.hostEnd) > unix.IFNAMSIZ-1 {
		t.hostEnd = t.hostEnd[:unix.IFNAMSIZ-1]
	}
	var nsFd int = -1
	err := t.inNS(func(target netns.NsHandle) error {
		d, err := unix.Dup(int(target))
		nsFd = d
		return err
	})
	if err != nil {
		return err
	}
	defer unix.Close(nsFd)
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: t.hostEnd}, PeerName: t.cfg.Name}
	if t.cfg.Netns != "" {
		veth.PeerNamespace = netlink.NsFd(nsFd)
	}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("sim: veth %s: %w", t.hostEnd, err)
	}
	host, err := netlink.LinkByName(t.hostEnd)
	if err == nil {
		// No addresses and no IPv6 chatter on the simulator's end.
		os.WriteFile("/proc/sys/net/ipv6/conf/"+t.hostEnd+"/disable_ipv6", []byte("1"), 0)
		err = netlink.LinkSetUp(host)
	}
	if err == nil {
		err = t.openPacket(host.Attrs().Index)
	}
	if err == nil {
		err = t.inNS(func(netns.NsHandle) error { return t.configure(netlink.NewHandle) })
	}
	if err != nil {
		netlink.LinkDel(veth)
		return fmt.Errorf("sim: veth %s: %w", t.hostEnd, err)
	}
	return nil
}

// openPacket opens an AF_PACKET socket on the veth's host end that sees
// what arrives from the peer (not what we send).
func (t *TAP) openPacket(ifindex int) error {
	proto := htons(unix.ETH_P_ALL)
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, int(proto))
	if err != nil {
		return err
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1); err != nil {
		unix.Close(fd)
		return err
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: ifindex}); err != nil {
		unix.Close(fd)
		return err
	}
	t.f = os.NewFile(uintptr(fd), "packet:"+t.hostEnd)
	return t.initIO()
}

func htons(v uint16) uint16 {
	var b [2]byte
	be.PutUint16(b[:], v)
	return binary.NativeEndian.Uint16(b[:])
}

// configure sets the kernel side's MTU and address and brings it up; it
// runs inside the namespace.
func (t *TAP) configure(newHandle func(...int) (*netlink.Handle, error)) error {
	h, err := newHandle()
	if err != nil {
		return err
	}
	defer h.Close()
	l, err := h.LinkByName(t.cfg.Name)
	if err != nil {
		return err
	}
	if t.cfg.MTU > 0 {
		if err := h.LinkSetMTU(l, t.cfg.MTU); err != nil {
			return err
		}
	}
	if t.cfg.Addr.IsValid() {
		a, err := netlink.ParseAddr(t.cfg.Addr.String())
		if err != nil {
			return err
		}
		if err := h.AddrAdd(l, a); err != nil && !errors.Is(err, unix.EEXIST) {
			return err
		}
	}
	if lo, err := h.LinkByName("lo"); err == nil {
		h.LinkSetUp(lo)
	}
	return h.LinkSetUp(l)
}

// Connect implements Port: frames from the kernel start flowing to the
// guest.
func (t *TAP) Connect(up Uplink) error {
	if t.cfg.MTU == 0 && up.MTU() != 1500 {
		t.cfg.MTU = up.MTU()
		if err := t.inNS(func(netns.NsHandle) error { return t.configure(netlink.NewHandle) }); err != nil {
			return err
		}
	}
	t.up = up
	t.oup, _ = up.(OffloadUplink)
	t.wg.Add(1)
	go t.runRead()
	return nil
}

// Offloads reports whether the kernel side takes frames with work left
// (OffloadPort): a TAP with a virtio-net header does.
func (t *TAP) Offloads() bool { return t.vnet }

// TUNSETOFFLOAD features (include/uapi/linux/if_tun.h) and the
// virtio-net header (include/uapi/linux/virtio_net.h).
type tunOffloads uint32

const (
	tunFCsum   tunOffloads = 0x01
	tunFTSO4   tunOffloads = 0x02
	tunFTSO6   tunOffloads = 0x04
	tunFTSOECN tunOffloads = 0x08
	tunFUSO4   tunOffloads = 0x20
	tunFUSO6   tunOffloads = 0x40

	vnetHdrLen    = 10
	vnetNeedsCsum = 1
	vnetGSONone   = 0
	vnetGSOTCPv4  = 1
	vnetGSOTCPv6  = 4
	vnetGSOUDPL4  = 5
	vnetGSOECN    = 0x80
)

func (o tunOffloads) String() string {
	var names []string
	for _, f := range []struct {
		bit  tunOffloads
		name string
	}{{tunFCsum, "csum"}, {tunFTSO4, "tso4"}, {tunFTSO6, "tso6"}, {tunFTSOECN, "tso_ecn"}, {tunFUSO4, "uso4"}, {tunFUSO6, "uso6"}} {
		if o&f.bit != 0 {
			names = append(names, f.name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ",")
}

// probeTUNOffloads enables the most the kernel takes: checksums, TSO
// with ECN, and USO (Linux 6.2 on); an older kernel refuses unknown bits
// with EINVAL, so it falls back step by step.
func probeTUNOffloads(fd int) tunOffloads {
	for _, o := range []tunOffloads{
		tunFCsum | tunFTSO4 | tunFTSO6 | tunFTSOECN | tunFUSO4 | tunFUSO6,
		tunFCsum | tunFTSO4 | tunFTSO6 | tunFTSOECN,
		tunFCsum | tunFTSO4 | tunFTSO6,
		tunFCsum,
	} {
		if unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, int(o)) == nil {
			return o
		}
	}
	return 0
}

// OffloadsString names the TUNSETOFFLOAD features the kernel accepted
// ("csum,tso4,tso6,tso_ecn,uso4,uso6"; "none" without a virtio-net
// header).
func (t *TAP) OffloadsString() string { return t.offloads.String() }

// The read side's buffers: each read takes up to a 64 KiB super-frame
// into the slab, which its segments follow; the batch goes to the vSwitch
// when the slab or the frame list fills, or the kernel has nothing more.
const (
	tapReadMax  = vnetHdrLen + 65536 + 64
	tapSlab     = 1 << 20
	tapMaxBatch = 512
)

// tapReader is the read loop's state, owned by runRead.
type tapReader struct {
	slab   []byte
	pos    int
	frames [][]byte
	offs   []FrameOffload // frames[i]'s offload, when super
	super  bool           // some frame in the batch is a TCP super-frame
	err    error
	readFn func(fd uintptr) bool // bound once: no allocation per wait
	pollFn func(fd uintptr)      // the same for pollAfterWrite
}

func (t *TAP) initIO() error {
	rc, err := t.f.SyscallConn()
	if err != nil {
		return fmt.Errorf("sim: tap: %w", err)
	}
	t.rc = rc
	t.rd = &tapReader{slab: make([]byte, tapSlab), frames: make([][]byte, 0, tapMaxBatch),
		offs: make([]FrameOffload, 0, tapMaxBatch)}
	t.rd.readFn = func(fd uintptr) bool { return t.readAndDeliver(t.rd, int(fd)) }
	t.rd.pollFn = func(fd uintptr) { t.drainAndUnlock(t.rd, int(fd)) }
	t.writers = make(chan *tapWriter, 4)
	for range cap(t.writers) {
		w := &tapWriter{parts: make([][]byte, 0, tapMaxMerge)}
		w.fn = func(fd uintptr) bool { w.write(fd); return true }
		t.writers <- w
	}
	return nil
}

// runRead hands every frame the kernel sends to the guest, until Close.
func (t *TAP) runRead() {
	defer t.wg.Done()
	r := t.rd
	for {
		err := t.rc.Read(r.readFn)
		if t.closed.Load() || errors.Is(err, os.ErrClosed) {
			return
		}
	}
}

// readAndDeliver is the read callback: batches read and handed to the
// vSwitch until the kernel has no more, then false, so that the poller
// waits for the next frame. Delivering from here rather than after
// RawRead returns saves a read per wake-up: a new RawRead rearms the
// poller and must then try a read that fails before it may wait, while
// here the read that emptied the kernel's queue was already after the
// last wake-up. true (RawRead returns) only for a read error or Close.
func (t *TAP) readAndDeliver(r *tapReader, fd int) bool {
	t.readWanted.Store(true)
	if !t.rmu.TryLock() {
		// A Transmit is reading (pollAfterWrite): it reads again after
		// it lets go, so what woke us is not left behind.
		return false
	}
	return t.drainAndUnlock(r, fd)
}

// drainAndUnlock drains with t.rmu held and lets it go; it drains again
// while a reader that found the lock held asked for it meanwhile
// (readWanted). The result is drainLocked's.
func (t *TAP) drainAndUnlock(r *tapReader, fd int) bool {
	for {
		t.readWanted.Store(false)
		stop := t.drainLocked(r, fd)
		t.rmu.Unlock()
		if stop || !t.readWanted.Load() || !t.rmu.TryLock() {
			return stop
		}
	}
}

// drainLocked reads and delivers batches until the kernel has no more
// (false) or a read fails or the port closes (true); t.rmu is held.
func (t *TAP) drainLocked(r *tapReader, fd int) bool {
	r.err = nil
	for {
		empty := t.readBatch(r, fd)
		t.deliver(r)
		if r.err != nil || t.closed.Load() { // Close waits for RawRead to return
			return true
		}
		if empty {
			return false
		}
	}
}

// pollAfterWrite reads what the kernel queued for the guest while a
// Transmit wrote: a frame written to the TAP is received by the kernel
// inside the write, and its answer (a TCP ACK, an echo) is often queued
// before the write returns. Taking it here, on the channel loop that is
// about to deliver anyway, saves it the wait for runRead's goroutine to
// be woken by the poller and then to wake the loop. When runRead is
// reading already, it is left to it. A read error is left for runRead to
// find and report.
func (t *TAP) pollAfterWrite() {
	if t.closed.Load() || !t.rmu.TryLock() {
		return
	}
	if t.rc.Control(t.rd.pollFn) != nil {
		t.rmu.Unlock() // closed: pollFn, which lets it go, did not run
	}
}

// deliver hands the batch read to the vSwitch and empties it.
func (t *TAP) deliver(r *tapReader) {
	if len(r.frames) > 0 {
		t.cfg.Stamps.Stamp(hoptrace.HostTAPRead)
		t.rx.Add(uint64(len(r.frames)))
		if r.super {
			t.oup.DeliverOffload(r.frames, r.offs)
		} else {
			t.up.Deliver(r.frames)
		}
	}
	clear(r.frames)
	r.frames, r.offs, r.pos, r.super = r.frames[:0], r.offs[:0], 0, false
}

// readBatch reads frames without blocking until the batch is full, the
// kernel has no more (true) or a read fails (r.err).
func (t *TAP) readBatch(r *tapReader, fd int) bool {
	for len(r.frames) < tapMaxBatch-64 && len(r.slab)-r.pos >= 2*tapReadMax+4096 {
		buf := r.slab[r.pos : r.pos+tapReadMax]
		n, err := rawio.Read(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN || err == nil && n <= 0 {
			return true
		}
		if err != nil {
			r.err = err
			return false
		}
		t.takeFrame(r, buf[:n])
	}
	return false
}

// takeFrame adds one frame read from the kernel (at r.slab[r.pos:]) to the
// batch, finishing what its virtio-net header leaves to the NIC: a partial
// checksum is completed, a super-frame cut into MTU-sized frames after it
// in the slab. A header the port cannot honour drops the frame.
func (t *TAP) takeFrame(r *tapReader, b []byte) {
	end := r.pos + len(b)
	f := b
	var flags, gsoType uint8
	var gsoSize, start, off int
	if t.vnet {
		if len(b) < vnetHdrLen {
			t.rxDropped.Add(1)
			return
		}
		flags, gsoType = b[0], b[1]
		gsoSize = int(binary.LittleEndian.Uint16(b[4:]))
		start = int(binary.LittleEndian.Uint16(b[6:]))
		off = int(binary.LittleEndian.Uint16(b[8:]))
		f = b[vnetHdrLen:]
	}
	if len(f) < EthHeaderLen {
		t.rxDropped.Add(1)
		return
	}
	if gsoType&^vnetGSOECN == vnetGSONone {
		if flags&vnetNeedsCsum != 0 && !finishChecksum(f, start, off) {
			t.rxDropped.Add(1)
			return
		}
		r.frames = append(r.frames, f)
		r.offs = append(r.offs, FrameOffload{})
		r.pos = (end + 7) &^ 7
		return
	}
	r.pos = (end + 7) &^ 7
	add := func(n int) []byte {
		if r.pos+n > len(r.slab) || len(r.frames) == cap(r.frames) {
			return nil
		}
		o := r.slab[r.pos : r.pos+n]
		r.pos = (r.pos + n + 7) &^ 7
		r.frames = append(r.frames, o)
		r.offs = append(r.offs, FrameOffload{})
		return o
	}
	fl := ParseFlow(f)
	tcp := (gsoType&^vnetGSOECN == vnetGSOTCPv4 && !fl.V6 || gsoType&^vnetGSOECN == vnetGSOTCPv6 && fl.V6) && fl.L4 == IPProtoTCP
	switch {
	case gsoSize == 0 || !fl.IP || fl.Frag:
		t.rxDropped.Add(1)
	case tcp && t.oup != nil:
		o := FrameOffload{CsumStart: uint16(fl.L4Off), CsumOffset: 16, MSS: uint16(gsoSize), IPv6: fl.V6}
		if _, ok := CheckSuperFrame(f, o); !ok {
			t.rxDropped.Add(1)
			return
		}
		r.frames = append(r.frames, f)
		r.offs = append(r.offs, o)
		r.super = true
	case tcp:
		SegmentLSO(f, fl, gsoSize, add)
	case gsoType == vnetGSOUDPL4 && fl.L4 == IPProtoUDP:
		segmentUDP(f, fl, gsoSize, add)
	default:
		t.rxDropped.Add(1)
	}
}

// finishChecksum completes a partial checksum: the field at start+off
// holds the pseudo-header sum, the rest of the frame from start is to be
// added (virtio-net NEEDS_CSUM).
func finishChecksum(f []byte, start, off int) bool {
	if start < EthHeaderLen || off < 0 || start+off+2 > len(f) {
		return false
	}
	c := ^csum.Fold(csum.Add(0, f[start:]))
	if c == 0 && off == 6 { // UDP: 0 means "no checksum"
		c = 0xffff
	}
	be.PutUint16(f[start+off:], c)
	return true
}

// tapWriter is one writer's scratch: a virtio-net header and the iovec
// naming it and the frame's parts. A few of them circulate through
// TAP.writers, so concurrent Transmits (one per channel) neither allocate
// nor wait.
type tapWriter struct {
	hdr   [vnetHdrLen]byte
	iov   [1 + tapMaxMerge]unix.Iovec
	parts [][]byte // the frame: the head with its headers, then payloads
	vnet  bool
	err   error
	fn    func(fd uintptr) bool
}

// tapMaxMerge bounds the frames written as one super-frame.
const tapMaxMerge = 64

// write is the RawConn callback: one writev of header and frame (the fd
// stays open while it runs).
func (w *tapWriter) write(fd uintptr) {
	w.err = nil
	if !w.vnet {
		_, w.err = rawio.Write(int(fd), w.parts[0])
		return
	}
	w.iov[0].Base = &w.hdr[0]
	w.iov[0].SetLen(vnetHdrLen)
	n := 1
	for _, p := range w.parts {
		if len(p) > 0 {
			w.iov[n].Base = &p[0]
			w.iov[n].SetLen(len(p))
			n++
		}
	}
	_, w.err = rawio.Writev(int(fd), w.iov[:n])
	clear(w.iov[:n])
}

// Transmit implements Port: one write per frame.
func (t *TAP) Transmit(frames [][]byte) { t.TransmitOffload(frames, nil) }

// TransmitOffload implements OffloadPort: each frame goes to the kernel
// with a virtio-net header carrying its remaining work (a large send the
// kernel cuts, or a checksum it finishes). Without a header (a veth, or
// NoOffloads) only complete frames come here (Offloads is false).
//
// The kernel side receives as a host with GRO receives from a real wire:
// consecutive large sends (and segments) of one TCP flow in a batch, in
// sequence, are handed over as one super-frame (mergeRun), as a guest
// without a GPA pool sends a 64 KiB super-frame as one large send per
// send section.
func (t *TAP) TransmitOffload(frames [][]byte, offs []FrameOffload) {
	if t.closed.Load() || len(frames) == 0 {
		return
	}
	w := <-t.writers
	defer func() { t.writers <- w }()
	w.vnet = t.vnet
	for i := 0; i < len(frames); {
		f := frames[i]
		j := i + 1
		w.hdr = [vnetHdrLen]byte{}
		w.parts = append(w.parts[:0], f)
		if offs != nil && t.vnet {
			if j = mergeRun(frames, offs, i, w); j == i+1 {
				putVnetHdr(&w.hdr, f, offs[i])
			}
		}
		i = j
		if len(f) == 0 {
			continue
		}
		err := t.rc.Write(w.fn)
		clear(w.parts)
		if err == nil {
			err = w.err
		}
		if err != nil {
			t.txErrors.Add(1)
			continue
		}
		t.tx.Add(1)
		t.cfg.Stamps.Stamp(hoptrace.HostTAPWrite)
	}
	t.pollAfterWrite()
}

// lsoSegment is what mergeRun reads from a candidate frame.
type lsoSegment struct {
	l4, pl  int // TCP header, payload
	seq     uint32
	flags   uint8
	payload int
}

// mergeable parses a frame with its offload for merging: TCP over IPv4
// without options or over IPv6, untagged, flags ACK or ACK|PSH, a partial
// checksum (the host's own offload) and some payload.
func mergeable(f []byte, o FrameOffload, s *lsoSegment) bool {
	if o.CsumStart == 0 || o.CsumOffset != 16 || len(f) < EthHeaderLen+ipv6Header+tcpMinHeader {
		return false
	}
	switch be.Uint16(f[12:]) {
	case EthTypeIPv4:
		if f[EthHeaderLen] != 0x45 || f[EthHeaderLen+9] != IPProtoTCP || be.Uint16(f[EthHeaderLen+6:])&0x3fff != 0 ||
			int(be.Uint16(f[EthHeaderLen+2:])) != len(f)-EthHeaderLen {
			return false
		}
		s.l4 = EthHeaderLen + ipv4MinHeader
	case EthTypeIPv6:
		if f[EthHeaderLen+6] != IPProtoTCP || int(be.Uint16(f[EthHeaderLen+4:])) != len(f)-EthHeaderLen-ipv6Header {
			return false
		}
		s.l4 = EthHeaderLen + ipv6Header
	default:
		return false
	}
	if int(o.CsumStart) != s.l4 {
		return false
	}
	s.pl = s.l4 + int(f[s.l4+12]>>4)*4
	s.flags = f[s.l4+13]
	if s.pl < s.l4+tcpMinHeader || s.pl >= len(f) || (s.flags != 0x10 && s.flags != 0x18) {
		return false
	}
	s.seq = be.Uint32(f[s.l4+4:])
	s.payload = len(f) - s.pl
	return true
}

// mergeRun gathers into w.parts the frames from i on that continue frame
// i's large send in sequence and returns the index after the run; for a
// run of more than one it fixes up the head's headers and writes w.hdr.
// Every frame joins only if it is a whole number of segments of the same
// MSS (the last may be shorter), with the same Ethernet, IP and TCP
// header fields but length, id, checksum, sequence number and PSH, the
// run closing at PSH.
func mergeRun(frames [][]byte, offs []FrameOffload, i int, w *tapWriter) int {
	h, oh := frames[i], offs[i]
	var hs, s lsoSegment
	if oh.MSS == 0 || !mergeable(h, oh, &hs) {
		return i + 1
	}
	mss := int(oh.MSS)
	next, total := hs.seq+uint32(hs.payload), hs.payload
	closed := hs.flags&0x08 != 0 || hs.payload%mss != 0
	psh := hs.flags&0x08 != 0
	j := i + 1
	for ; j < len(frames) && !closed && len(w.parts) < tapMaxMerge; j++ {
		f, o := frames[j], offs[j]
		if !mergeable(f, o, &s) || s.pl != hs.pl || s.seq != next || total+s.payload+hs.pl-EthHeaderLen > 0xffff ||
			(o.MSS != oh.MSS && !(o.MSS == 0 && s.payload <= mss)) {
			break
		}
		if !bytes.Equal(f[:12], h[:12]) || !sameIPHeader(f, h, hs.l4) ||
			!bytes.Equal(f[s.l4:s.l4+4], h[hs.l4:hs.l4+4]) || // ports
			!bytes.Equal(f[s.l4+8:s.l4+13], h[hs.l4+8:hs.l4+13]) || // ack, data offset
			!bytes.Equal(f[s.l4+14:s.l4+16], h[hs.l4+14:hs.l4+16]) || // window
			!bytes.Equal(f[s.l4+18:s.pl], h[hs.l4+18:hs.pl]) { // urgent pointer, options
			break
		}
		w.parts = append(w.parts, f[s.pl:])
		next += uint32(s.payload)
		total += s.payload
		if s.flags&0x08 != 0 {
			closed, psh = true, true
		}
		if s.payload%mss != 0 {
			closed = true
		}
	}
	if j == i+1 {
		return j
	}
	end := hs.pl + total
	if hs.l4 == EthHeaderLen+ipv6Header {
		be.PutUint16(h[EthHeaderLen+4:], uint16(end-hs.l4))
	} else {
		ip := h[EthHeaderLen:hs.l4]
		be.PutUint16(ip[2:], uint16(end-EthHeaderLen))
		ip[10], ip[11] = 0, 0
		be.PutUint16(ip[10:], ^csum.Fold(csum.Add(0, ip)))
	}
	if psh {
		h[hs.l4+13] |= 0x08
	}
	fl := ParseFlowAt(h, Flow{V6: hs.l4 != EthHeaderLen+ipv4MinHeader, L3: EthHeaderLen})
	be.PutUint16(h[hs.l4+16:], csum.Fold(PseudoSum(&fl, IPProtoTCP, end-hs.l4)))
	putVnetHdr(&w.hdr, h, FrameOffload{CsumStart: uint16(hs.l4), CsumOffset: 16, MSS: oh.MSS, IPv6: fl.V6})
	return j
}

// sameIPHeader reports whether two frames' IP headers agree in every
// field but length, id and checksum.
func sameIPHeader(a, b []byte, l4 int) bool {
	x, y := a[EthHeaderLen:l4], b[EthHeaderLen:l4]
	if l4 == EthHeaderLen+ipv6Header {
		return bytes.Equal(x[0:4], y[0:4]) && bytes.Equal(x[6:], y[6:])
	}
	return x[1] == y[1] && bytes.Equal(x[6:10], y[6:10]) && bytes.Equal(x[12:], y[12:])
}

// putVnetHdr writes the virtio-net header for a frame and its offload.
func putVnetHdr(h *[vnetHdrLen]byte, f []byte, o FrameOffload) {
	if o.CsumStart == 0 {
		return
	}
	h[0] = vnetNeedsCsum
	binary.LittleEndian.PutUint16(h[6:], o.CsumStart)
	binary.LittleEndian.PutUint16(h[8:], o.CsumOffset)
	if o.MSS == 0 {
		return
	}
	h[1] = vnetGSOTCPv4
	if o.IPv6 {
		h[1] = vnetGSOTCPv6
	}
	if int(o.CsumStart)+14 <= len(f) && f[o.CsumStart+13]&0x80 != 0 { // CWR
		h[1] |= vnetGSOECN
	}
	binary.LittleEndian.PutUint16(h[2:], uint16(int(o.CsumStart)+int(f[o.CsumStart+12]>>4)*4))
	binary.LittleEndian.PutUint16(h[4:], o.MSS)
}

// Close implements Port: the TAP device (or veth pair) goes away, and a
// namespace NewTAP created is deleted.
func (t *TAP) Close() error {
	var err error
	t.closeOnce.Do(func() {
		t.closed.Store(true)
		if t.f != nil {
			err = t.f.Close()
		}
		t.wg.Wait()
		if t.hostEnd != "" {
			if l, e := netlink.LinkByName(t.hostEnd); e == nil {
				netlink.LinkDel(l)
			}
		}
		t.cleanupNS()
	})
	return err
}

func (t *TAP) cleanupNS() {
	if t.createdNS {
		netns.DeleteNamed(t.cfg.Netns)
		t.createdNS = false
	}
}

// Stats returns the frames the kernel sent to the guest (rx, as the port
// handed them to the vSwitch: a super-frame the port cut counts once per
// segment, one it handed on whole counts once), the frames the guest sent into the kernel (tx,
// a large send counting once), and failed writes.
func (t *TAP) Stats() (rx, tx, txErrors uint64) { return t.rx.Load(), t.tx.Load(), t.txErrors.Load() }

// RxDropped returns the frames read from the kernel that the port could
// not make into frames for the guest (a virtio-net header it cannot
// honour).
func (t *TAP) RxDropped() uint64 { return t.rxDropped.Load() }
