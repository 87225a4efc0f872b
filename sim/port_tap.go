package sim

// A port into the kernel: a TAP device, or a veth pair, whose kernel side
// sits in a named network namespace. Frames the guest sends come out of
// the interface there, and what the kernel sends into it (ARP, ping, a
// TCP connection) reaches the guest, so real tools in that namespace talk
// to the guest through the simulated host:
//
//	ip netns exec NS ping 10.0.0.2        # NS has TAPConfig.Addr 10.0.0.1/24
//
// TAP: the device is created inside the namespace and the simulator holds
// its file descriptor (IFF_TAP|IFF_NO_PI: one plain Ethernet frame per
// read or write). veth: one end goes into the namespace, the other stays
// in the simulator's own namespace, read and written through an AF_PACKET
// socket. A namespace that does not exist is created (like `ip netns add`)
// and deleted again by Close. Needs CAP_NET_ADMIN.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
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
}

// TAP is a port into the kernel. Safe for concurrent use; make it with
// NewTAP. Attach it to one NIC only.
type TAP struct {
	cfg       TAPConfig
	f         *os.File
	hostEnd   string // veth: the simulator's end
	createdNS bool
	up        Uplink
	wg        sync.WaitGroup
	closeOnce sync.Once
	closed    atomic.Bool

	rx, tx, txErrors atomic.Uint64
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
		ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			unix.Close(fd)
			return fmt.Errorf("sim: tap: TUNSETIFF %s: %w", t.cfg.Name, err)
		}
		t.f = os.NewFile(uintptr(fd), "tap:"+t.cfg.Name)
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
	return nil
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
	t.wg.Add(1)
	go t.runRead()
	return nil
}

// runRead hands every frame the kernel sends to the guest, until Close.
func (t *TAP) runRead() {
	defer t.wg.Done()
	buf := make([]byte, 65536)
	frames := make([][]byte, 1)
	for {
		n, err := t.f.Read(buf)
		if err != nil {
			if t.closed.Load() || errors.Is(err, os.ErrClosed) {
				return
			}
			continue
		}
		if n < ethHeaderLen {
			continue
		}
		frames[0] = buf[:n]
		t.rx.Add(1)
		t.up.Deliver(frames)
	}
}

// Transmit implements Port: one write per frame.
func (t *TAP) Transmit(frames [][]byte) {
	if t.closed.Load() {
		return
	}
	for _, f := range frames {
		if _, err := t.f.Write(f); err != nil {
			t.txErrors.Add(1)
			continue
		}
		t.tx.Add(1)
	}
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

// Stats returns the frames the kernel sent to the guest (rx), the frames
// the guest sent into the kernel (tx), and failed writes.
func (t *TAP) Stats() (rx, tx, txErrors uint64) { return t.rx.Load(), t.tx.Load(), t.txErrors.Load() }
