package netvsc

// Finding, preparing and watching the VF's kernel netdev. The PCI picture
// comes from sysfs under the device's root R (docs/uio-contract.md §8),
// like every other lookup, so the simulator's stand-in is found the same
// way as a real VF; the netdev itself is looked up by name with rtnetlink
// in the current network namespace.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vmbusd/vmbusd/clock"
	"golang.org/x/sys/unix"
)

const (
	pciSlotsDir = "sys/bus/pci/slots"
	pciDevsDir  = "sys/bus/pci/devices"
)

// vfNetdev is a VF's netdev as found.
type vfNetdev struct {
	name    string
	index   int
	bdf     string // PCI function
	driver  string // its driver's name
	matched string // "serial" or "mac"
}

// errVFNotFound: no netdev matches the association (yet).
var errVFNotFound = errors.New("netvsc: VF netdev not found")

// findVF pairs the association's serial with a netdev: the PCI slot named
// after the serial gives domain:bus:slot, whose function's net/ directory
// names the netdev, which must carry the NIC's MAC (Linux checks both). If
// the slot leads nowhere, any PCI netdev under root with the NIC's MAC
// will do (DPDK pairs by MAC only). Netdevs that are not in this network
// namespace are passed over.
func findVF(root string, serial uint32, mac net.HardwareAddr) (vfNetdev, error) {
	b, err := os.ReadFile(filepath.Join(root, pciSlotsDir, fmt.Sprint(serial), "address"))
	if err == nil {
		addr := strings.TrimSpace(string(b))
		ents, _ := os.ReadDir(filepath.Join(root, pciDevsDir))
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), addr+".") {
				if d, ok := vfNetdevOf(root, e.Name(), mac); ok {
					d.matched = "serial"
					return d, nil
				}
			}
		}
	}
	ents, err := os.ReadDir(filepath.Join(root, pciDevsDir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return vfNetdev{}, fmt.Errorf("netvsc: VF lookup: %w", err)
	}
	for _, e := range ents {
		if d, ok := vfNetdevOf(root, e.Name(), mac); ok {
			d.matched = "mac"
			return d, nil
		}
	}
	return vfNetdev{}, errVFNotFound
}

// vfNetdevOf returns the netdev of PCI function bdf that carries mac, if
// one is in this namespace.
func vfNetdevOf(root, bdf string, mac net.HardwareAddr) (vfNetdev, bool) {
	dev := filepath.Join(root, pciDevsDir, bdf)
	names, err := os.ReadDir(filepath.Join(dev, "net"))
	if err != nil {
		return vfNetdev{}, false
	}
	for _, nm := range names {
		l, err := netlink.LinkByName(nm.Name())
		if err != nil || !slices.Equal(l.Attrs().HardwareAddr, mac) {
			continue
		}
		d := vfNetdev{name: nm.Name(), index: l.Attrs().Index, bdf: bdf}
		if t, err := os.Readlink(filepath.Join(dev, "driver")); err == nil {
			d.driver = filepath.Base(t)
		}
		return d, true
	}
	return vfNetdev{}, false
}

// prepareVF takes the netdev away from the kernel's stack: no addresses,
// IPv6 off (so the kernel sends nothing on it by itself), the NIC's MTU,
// up. It reports whether the link has carrier.
func prepareVF(name string, mtu int) (carrier bool, err error) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return false, fmt.Errorf("netvsc: VF %s: %w", name, err)
	}
	f := "/proc/sys/net/ipv6/conf/" + name + "/disable_ipv6"
	if err := os.WriteFile(f, []byte("1"), 0); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("netvsc: VF %s: IPv6 off: %w", name, err)
	}
	addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		return false, fmt.Errorf("netvsc: VF %s: addresses: %w", name, err)
	}
	for i := range addrs {
		if err := netlink.AddrDel(l, &addrs[i]); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			return false, fmt.Errorf("netvsc: VF %s: remove %s: %w", name, addrs[i].IPNet, err)
		}
	}
	if l.Attrs().MTU != mtu {
		if err := netlink.LinkSetMTU(l, mtu); err != nil {
			return false, fmt.Errorf("netvsc: VF %s: MTU %d: %w", name, mtu, err)
		}
	}
	if l.Attrs().Flags&net.FlagUp == 0 {
		if err := netlink.LinkSetUp(l); err != nil {
			return false, fmt.Errorf("netvsc: VF %s: up: %w", name, err)
		}
	}
	if l, err = netlink.LinkByName(name); err != nil {
		return false, fmt.Errorf("netvsc: VF %s: %w", name, err)
	}
	return l.Attrs().RawFlags&unix.IFF_LOWER_UP != 0, nil
}

// linkEvent is what rtnetlink said about one netdev: registered or changed
// (flags), or unregistered.
type linkEvent struct {
	index   int
	deleted bool
	flags   uint32 // IFF_*
	at      time.Time
}

// usable reports whether the netdev can carry traffic: admin up and with
// carrier.
func (e linkEvent) usable() bool {
	return !e.deleted && e.flags&unix.IFF_UP != 0 && e.flags&unix.IFF_LOWER_UP != 0
}

// linkWatch listens to rtnetlink's link group and keeps the events for the
// VF manager, which it pokes. It never blocks on the manager: events pile
// up in a bounded list, and an overrun (of the list or of the socket)
// tells the manager to look at the netdev again instead.
type linkWatch struct {
	fd, evfd int
	notify   func()
	clk      clock.Clock // stamps the events

	mu      sync.Mutex
	events  []linkEvent
	overrun bool

	done chan struct{}
}

// maxLinkEvents bounds the events kept between two looks of the manager.
const maxLinkEvents = 256

func newLinkWatch(notify func(), clk clock.Clock) (*linkWatch, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netvsc: rtnetlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: unix.RTMGRP_LINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netvsc: rtnetlink bind: %w", err)
	}
	evfd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netvsc: eventfd: %w", err)
	}
	w := &linkWatch{fd: fd, evfd: evfd, notify: notify, clk: clk, done: make(chan struct{})}
	go w.run()
	return w, nil
}

func (w *linkWatch) run() {
	defer close(w.done)
	buf := make([]byte, 64<<10)
	fds := []unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLIN}, {Fd: int32(w.evfd), Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(fds, -1); err != nil && err != unix.EINTR {
			return
		}
		if fds[1].Revents != 0 {
			return
		}
		got := false
		for {
			n, err := unix.Read(w.fd, buf)
			if err == unix.EINTR {
				continue
			}
			if err == unix.ENOBUFS {
				w.mu.Lock()
				w.overrun = true
				w.mu.Unlock()
				got = true
				continue
			}
			if err != nil || n <= 0 {
				break
			}
			now := w.clk.Now()
			w.mu.Lock()
			for _, e := range parseLinkEvents(buf[:n]) {
				if len(w.events) == maxLinkEvents {
					w.overrun = true
					break
				}
				e.at = now
				w.events = append(w.events, e)
			}
			w.mu.Unlock()
			got = true
		}
		if got {
			w.notify()
		}
	}
}

// take returns the events since the last take, and whether some were lost.
func (w *linkWatch) take() ([]linkEvent, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ev, over := w.events, w.overrun
	w.events, w.overrun = nil, false
	return ev, over
}

func (w *linkWatch) close() {
	var one = [8]byte{1}
	unix.Write(w.evfd, one[:])
	<-w.done
	unix.Close(w.fd)
	unix.Close(w.evfd)
}

// parseLinkEvents reads the RTM_NEWLINK and RTM_DELLINK messages of one
// rtnetlink datagram. Every length is checked; a malformed message ends
// the scan. A DELLINK of another family than AF_UNSPEC (a bridge port
// leaving its bridge) is not an unregistration and is skipped.
func parseLinkEvents(b []byte) []linkEvent {
	const hdr = unix.SizeofNlMsghdr
	var out []linkEvent
	for len(b) >= hdr {
		l := int(binary.NativeEndian.Uint32(b[0:4]))
		typ := binary.NativeEndian.Uint16(b[4:6])
		if l < hdr || l > len(b) {
			return out
		}
		if (typ == unix.RTM_NEWLINK || typ == unix.RTM_DELLINK) && l >= hdr+unix.SizeofIfInfomsg {
			m := b[hdr:l]
			family := m[0]
			index := int(int32(binary.NativeEndian.Uint32(m[4:8])))
			flags := binary.NativeEndian.Uint32(m[8:12])
			if index > 0 && (typ == unix.RTM_NEWLINK || family == unix.AF_UNSPEC) {
				out = append(out, linkEvent{index: index, deleted: typ == unix.RTM_DELLINK, flags: flags})
			}
		}
		next := (l + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1)
		if next >= len(b) {
			return out
		}
		b = b[next:]
	}
	return out
}

// linkNow reads a netdev's state by index, for when events were lost,
// stamped with clk's time.
func linkNow(index int, clk clock.Clock) linkEvent {
	l, err := netlink.LinkByIndex(index)
	if err != nil {
		return linkEvent{index: index, deleted: true, at: clk.Now()}
	}
	return linkEvent{index: index, flags: l.Attrs().RawFlags, at: clk.Now()}
}
