package tap

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync/atomic"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/vmbusd/vmbusd/frame"
)

// Config describes a TAP device to create.
type Config struct {
	// Name is the interface name or a template such as "vmbusd%d".
	Name string
	// Queues is the number of TAP queues (file descriptors); 0 means 1.
	Queues int
	MAC    net.HardwareAddr
	// MTU is the interface MTU; 0 leaves the kernel default.
	MTU int
	// Netns, when set, is the named network namespace
	// (/var/run/netns/<name>) the interface is moved into.
	Netns string
	// NoOffloads makes a plain TAP: no virtio-net header, every frame
	// complete and at most the MTU both ways, no coalescing. By default
	// the TAP has the header and every offload the kernel accepts
	// (Device.Offloads).
	NoOffloads bool
	// VnetHdr with NoOffloads keeps the virtio-net header (and the
	// coalescing and verified checksums toward the kernel) but asks the
	// kernel for no offloads.
	VnetHdr bool
	// GSO is kept for older callers: offloads are on unless NoOffloads.
	//
	// Deprecated: offloads are the default.
	GSO bool
	// Addr, when valid, is assigned to the interface.
	Addr netip.Prefix
	// Down leaves the interface administratively down.
	Down bool
}

// Device is a TAP interface this package created. Safe for concurrent use.
type Device struct {
	name     string
	index    int
	fds      []*os.File
	queues   []*Queue
	ns       netns.NsHandle // the namespace it lives in; -1 for the current
	vnet     bool
	offloads Offloads
	mtu      int
	closed   atomic.Bool
}

// Create creates a multi-queue TAP (IFF_TAP|IFF_MULTI_QUEUE|IFF_NO_PI,
// one fd per queue), sets its MAC and MTU, moves it into cfg.Netns and
// brings it up. The device is not persistent: it disappears when the
// last fd closes, so a crashed daemon leaves nothing behind (docs/protocol/ecosystem.md
// §3.1); Close also deletes it explicitly.
func Create(cfg Config) (*Device, error) {
	if cfg.Queues <= 0 {
		cfg.Queues = 1
	}
	if cfg.Name == "" {
		cfg.Name = "vmbusd%d"
	}
	flags := netlink.TUNTAP_MULTI_QUEUE_DEFAULTS
	vnet := !cfg.NoOffloads || cfg.VnetHdr
	if vnet {
		flags |= netlink.TUNTAP_VNET_HDR
	}
	t := &netlink.Tuntap{
		LinkAttrs:  netlink.LinkAttrs{Name: cfg.Name},
		Mode:       netlink.TUNTAP_MODE_TAP,
		Flags:      flags,
		Queues:     cfg.Queues,
		NonPersist: true,
	}
	if err := netlink.LinkAdd(t); err != nil {
		return nil, fmt.Errorf("tap: create %s: %w", cfg.Name, err)
	}
	d := &Device{name: t.Attrs().Name, fds: t.Fds, ns: netns.None(), vnet: vnet, mtu: cfg.MTU}
	if d.mtu == 0 {
		d.mtu = 1500
	}
	fail := func(err error) (*Device, error) {
		d.Close()
		return nil, err
	}
	link, err := netlink.LinkByName(d.name)
	if err != nil {
		return fail(fmt.Errorf("tap: %s: %w", d.name, err))
	}
	d.index = link.Attrs().Index
	if vnet {
		// Through RawConn: os.File.Fd would switch the fd to blocking. The
		// header size and the offloads belong to the device, not the fd.
		rc, err := d.fds[0].SyscallConn()
		var ierr error
		if err == nil {
			err = rc.Control(func(fd uintptr) {
				if ierr = unix.IoctlSetPointerInt(int(fd), unix.TUNSETVNETHDRSZ, vnetHdrLen); ierr != nil {
					ierr = fmt.Errorf("TUNSETVNETHDRSZ: %w", ierr)
					return
				}
				if !cfg.NoOffloads {
					d.offloads = probeOffloads(setOffloads(int(fd)))
				}
			})
		}
		if err == nil {
			err = ierr
		}
		if err != nil {
			return fail(fmt.Errorf("tap: %s: %w", d.name, err))
		}
	}
	if cfg.MAC != nil {
		if err := netlink.LinkSetHardwareAddr(link, cfg.MAC); err != nil {
			return fail(fmt.Errorf("tap: %s: set MAC: %w", d.name, err))
		}
	}
	if cfg.MTU > 0 {
		if err := netlink.LinkSetMTU(link, cfg.MTU); err != nil {
			return fail(fmt.Errorf("tap: %s: set MTU %d: %w", d.name, cfg.MTU, err))
		}
	}
	h := &netlink.Handle{}
	if cfg.Netns != "" {
		ns, err := netns.GetFromName(cfg.Netns)
		if err != nil {
			return fail(fmt.Errorf("tap: netns %s: %w", cfg.Netns, err))
		}
		if err := netlink.LinkSetNsFd(link, int(ns)); err != nil {
			ns.Close()
			return fail(fmt.Errorf("tap: move %s to %s: %w", d.name, cfg.Netns, err))
		}
		d.ns = ns
		if h, err = netlink.NewHandleAt(ns); err != nil {
			return fail(fmt.Errorf("tap: netlink in %s: %w", cfg.Netns, err))
		}
		defer h.Close()
		if link, err = h.LinkByName(d.name); err != nil {
			return fail(fmt.Errorf("tap: %s in %s: %w", d.name, cfg.Netns, err))
		}
	}
	if cfg.Addr.IsValid() {
		a, err := netlink.ParseAddr(cfg.Addr.String())
		if err == nil {
			err = h.AddrAdd(link, a)
		}
		if err != nil {
			return fail(fmt.Errorf("tap: %s: address %s: %w", d.name, cfg.Addr, err))
		}
	}
	if !cfg.Down {
		if err := h.LinkSetUp(link); err != nil {
			return fail(fmt.Errorf("tap: %s up: %w", d.name, err))
		}
	}
	for i, f := range d.fds {
		q, err := newQueue(d, i, f)
		if err != nil {
			return fail(err)
		}
		d.queues = append(d.queues, q)
	}
	return d, nil
}

// Name returns the interface name the kernel chose.
func (d *Device) Name() string { return d.name }

// Queues returns the TAP queues, one per fd.
func (d *Device) Queues() []*Queue { return d.queues }

// Offloads returns the TUNSETOFFLOAD features the kernel accepted (none
// with NoOffloads).
func (d *Device) Offloads() Offloads { return d.offloads }

// SetGSOMaxSize caps the super-frames the kernel hands over
// (IFLA_GSO_MAX_SIZE), for a NIC whose host takes large sends only up to
// a size: they then go to the host whole.
func (d *Device) SetGSOMaxSize(n int) error {
	h, err := d.handle()
	if err != nil {
		return err
	}
	defer h.Close()
	link, err := h.LinkByIndex(d.index)
	if err == nil {
		err = h.LinkSetGSOMaxSize(link, n)
	}
	if err != nil {
		return fmt.Errorf("tap: %s: gso_max_size %d: %w", d.name, n, err)
	}
	return nil
}

// handle returns a netlink handle in the device's namespace.
func (d *Device) handle() (*netlink.Handle, error) {
	if d.ns != netns.None() {
		return netlink.NewHandleAt(d.ns)
	}
	return netlink.NewHandle()
}

// SetCarrier sets the interface's carrier (TUNSETCARRIER), as a NIC's
// link state.
func (d *Device) SetCarrier(up bool) error {
	if len(d.fds) == 0 || d.closed.Load() {
		return os.ErrClosed
	}
	v := 0
	if up {
		v = 1
	}
	rc, err := d.fds[0].SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	err = rc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetPointerInt(int(fd), unix.TUNSETCARRIER, v)
	})
	if err == nil {
		err = ierr
	}
	if err != nil {
		return fmt.Errorf("tap: %s: TUNSETCARRIER: %w", d.name, err)
	}
	return nil
}

// Close closes every queue and deletes the interface.
func (d *Device) Close() error {
	if !d.closed.CompareAndSwap(false, true) {
		return nil
	}
	var first error
	for _, q := range d.queues {
		q.close()
	}
	// No read or write may be under way on an fd being closed (its number
	// could be reused): take each queue's locks, which Wait gives up once
	// the deadline above wakes it.
	for _, q := range d.queues {
		q.rmu.Lock()
		q.wmu.Lock()
		defer q.rmu.Unlock()
		defer q.wmu.Unlock()
	}
	// Delete before the last fd closes would race with the kernel's own
	// removal of a non-persistent device: delete first, tolerate absence.
	if err := d.deleteLink(); err != nil && first == nil {
		first = err
	}
	for _, f := range d.fds {
		if err := f.Close(); err != nil && first == nil && !errors.Is(err, os.ErrClosed) {
			first = err
		}
	}
	if d.ns != netns.None() {
		d.ns.Close()
	}
	return first
}

func (d *Device) deleteLink() error {
	var h *netlink.Handle
	var err error
	if d.ns != netns.None() {
		if h, err = netlink.NewHandleAt(d.ns); err != nil {
			return err
		}
		defer h.Close()
	} else {
		h = &netlink.Handle{}
	}
	link, err := h.LinkByIndex(d.index)
	if err != nil {
		return nil // already gone
	}
	if link.Attrs().Name != d.name {
		return nil
	}
	if err := h.LinkDel(link); err != nil {
		var lnf netlink.LinkNotFoundError
		if errors.As(err, &lnf) || errors.Is(err, unix.ENODEV) {
			return nil
		}
		return fmt.Errorf("tap: delete %s: %w", d.name, err)
	}
	return nil
}

// InNetns runs fn on a thread inside the named network namespace (for
// sockets: a socket keeps the namespace it was created in).
func InNetns(name string, fn func() error) error {
	ns, err := netns.GetFromName(name)
	if err != nil {
		return err
	}
	defer ns.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// The thread is left locked: it dies with the goroutine rather
		// than going back to the pool in the wrong namespace.
		if err := netns.Set(ns); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// A TAP queue is a frame port both ways.
var (
	_ frame.Source = (*Queue)(nil)
	_ frame.Sink   = (*Queue)(nil)
)
