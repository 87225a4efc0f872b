package bus

// The kernel NIC side of binding, and the rest of the tree a bring-up script
// looks at besides the bus: hv_netvsc's netdev in sysfs, the loopback
// device, the modules, and the routing table in R/proc/net.
//
//	R/sys/devices/.../VMBUS:00/<guid>/net/<ifname>/   while hv_netvsc has the device
//	    address addr_len broadcast carrier flags ifindex iflink mtu operstate type uevent ...
//	    device    -> ../../../<guid>
//	    subsystem -> ../../../../../../../class/net
//	R/sys/class/net/<ifname>        -> ../../devices/.../VMBUS:00/<guid>/net/<ifname>
//	R/sys/class/net/lo              -> ../../devices/virtual/net/lo
//	R/sys/module/<module>/{initstate,refcnt,drivers/vmbus:<driver>}
//	R/sys/bus/vmbus/drivers/<driver>/module -> ../../../../module/<module>
//	R/proc/net/route, R/proc/net/ipv6_route   the routes given to Host.SetRoutes
//
// The simulator does not keep addresses or link state: a netdev is always
// "up" (as if the network manager brought it up when it appeared) and has
// no addresses, so only what sysfs and /proc/net show can be checked
// against it. Routes stand for what the network manager configured: a route
// is listed only while its interface exists (the kernel flushes a vanished
// device's routes; the manager re-adds them when it comes back).

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"unicode"

	"github.com/vmbusd/vmbusd/vmbus"
)

const (
	netClassDir = "sys/class/net"
	virtNetDir  = "sys/devices/virtual/net"
	moduleDir   = "sys/module"
	procNetDir  = "proc/net"
	// defaultMTU is hv_netvsc's initial MTU (ETH_DATA_LEN).
	defaultMTU = 1500
)

// driverModules names the module that provides each driver.
var driverModules = map[string]string{
	uioDriverName: "uio_hv_generic",
	DriverNetvsc:  "hv_netvsc",
	driverHvSock:  "hv_sock",
}

// netdev is a network device as net-sysfs shows it.
type netdev struct {
	Name      string
	Index     int
	MAC       net.HardwareAddr
	MTU       int
	Flags     uint32 // IFF_*
	Type      int    // ARPHRD_*
	Operstate string
}

// initNetTree creates R/sys/class/net with the loopback device, the module
// directories and R/proc/net. Idempotent, like initTree.
func initNetTree(root string) error {
	for _, d := range []string{netClassDir, virtNetDir, procNetDir} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return fmt.Errorf("sim: init tree: %w", err)
		}
	}
	if _, err := os.Lstat(filepath.Join(root, netClassDir, "lo")); err != nil {
		lo := netdev{Name: "lo", Index: 1, MAC: make(net.HardwareAddr, 6), MTU: 65536,
			Flags: 0x9, Type: 772, Operstate: "unknown"} // IFF_UP|IFF_LOOPBACK, ARPHRD_LOOPBACK
		if err := writeNetdev(root, filepath.Join(root, virtNetDir), "", lo); err != nil {
			return err
		}
	}
	for drv, mod := range driverModules {
		md := filepath.Join(root, moduleDir, mod)
		if err := os.MkdirAll(filepath.Join(md, "drivers"), 0o755); err != nil {
			return fmt.Errorf("sim: init tree: %w", err)
		}
		for _, f := range []struct{ name, value string }{{"initstate", "live\n"}, {"refcnt", "0\n"}} {
			if err := createFileIfMissing(filepath.Join(md, f.name), f.value, 0o444); err != nil {
				return fmt.Errorf("sim: init tree: %w", err)
			}
		}
		drvDir := filepath.Join(root, vmbusDrvsDir, drv)
		links := []struct{ link, target string }{
			{filepath.Join(md, "drivers", "vmbus:"+drv), drvDir},
			{filepath.Join(drvDir, "module"), md},
		}
		for _, l := range links {
			if _, err := os.Lstat(l.link); err == nil {
				continue
			}
			if err := kernfsSymlink(l.link, l.target); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeNetdev creates parent/<name>/ with the attributes net-sysfs shows,
// built under a temporary name and renamed into place, and then
// R/sys/class/net/<name>. dev, when not empty, is the device directory the
// netdev belongs to (its "device" link).
func writeNetdev(root, parent, dev string, nd netdev) error {
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("sim: netdev %s: %w", nd.Name, err)
	}
	final := filepath.Join(parent, nd.Name)
	tmp, err := os.MkdirTemp(parent, ".net-*")
	if err != nil {
		return fmt.Errorf("sim: netdev %s: %w", nd.Name, err)
	}
	defer os.RemoveAll(tmp) // no-op once renamed
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("sim: netdev %s: %w", nd.Name, err)
	}
	// net-sysfs.c formats.
	attrs := []struct{ name, value string }{
		{"address", nd.MAC.String() + "\n"},
		{"addr_assign_type", "0\n"}, // NET_ADDR_PERM
		{"addr_len", fmt.Sprintf("%d\n", len(nd.MAC))},
		{"broadcast", "ff:ff:ff:ff:ff:ff\n"},
		{"carrier", "1\n"},
		{"dev_id", "0x0\n"},
		{"dev_port", "0\n"},
		{"flags", fmt.Sprintf("0x%x\n", nd.Flags)},
		{"ifindex", fmt.Sprintf("%d\n", nd.Index)},
		{"iflink", fmt.Sprintf("%d\n", nd.Index)},
		{"mtu", fmt.Sprintf("%d\n", nd.MTU)},
		{"operstate", nd.Operstate + "\n"},
		{"tx_queue_len", "1000\n"},
		{"type", fmt.Sprintf("%d\n", nd.Type)},
	}
	if nd.Type == 772 {
		attrs[2].value = "0\n"          // addr_len
		attrs[3].value = attrs[0].value // broadcast 00:...
	}
	for _, at := range attrs {
		if err := putFile(filepath.Join(tmp, at.name), at.value, 0o444); err != nil {
			return err
		}
	}
	uevent := fmt.Sprintf("INTERFACE=%s\nIFINDEX=%d\n", nd.Name, nd.Index)
	if err := putFile(filepath.Join(tmp, "uevent"), uevent, 0o644); err != nil {
		return err
	}
	if dev != "" {
		if err := symlinkAs(filepath.Join(tmp, "device"), filepath.Join(final, "device"), dev); err != nil {
			return err
		}
	}
	if err := symlinkAs(filepath.Join(tmp, "subsystem"), filepath.Join(final, "subsystem"), filepath.Join(root, netClassDir)); err != nil {
		return err
	}
	if err := renameNoReplace(tmp, final); err != nil {
		return fmt.Errorf("sim: netdev %s: %w", nd.Name, err)
	}
	if err := kernfsSymlink(filepath.Join(root, netClassDir, nd.Name), final); err != nil {
		removeDirAtomically(final, parent)
		return err
	}
	return nil
}

// removeNetdev undoes writeNetdev: the class link first.
func removeNetdev(root, parent, name string) error {
	return errors.Join(
		removeIfExists(filepath.Join(root, netClassDir, name)),
		removeDirAtomically(filepath.Join(parent, name), parent))
}

// linkDriver makes the device's driver links (driver, drivers/<drv>/<guid>)
// and its uevent's DRIVER=, as driver_bound does.
func linkDriver(root, real, drv string) error {
	drvDir := filepath.Join(root, vmbusDrvsDir, drv)
	class, err := readDeviceClass(real)
	if err != nil {
		return err
	}
	return errors.Join(
		kernfsSymlink(filepath.Join(real, "driver"), drvDir),
		kernfsSymlink(filepath.Join(drvDir, filepath.Base(real)), real),
		updateAttr(filepath.Join(real, "uevent"), deviceUevent(class, drv)))
}

// unlinkDriver removes what linkDriver made.
func unlinkDriver(root, real, drv string) error {
	errs := []error{
		removeIfExists(filepath.Join(real, "driver")),
		removeIfExists(filepath.Join(root, vmbusDrvsDir, drv, filepath.Base(real))),
	}
	if class, err := readDeviceClass(real); err == nil {
		errs = append(errs, updateAttr(filepath.Join(real, "uevent"), deviceUevent(class, "")))
	}
	return errors.Join(errs...)
}

// attachNetvscLocked is netvsc_probe: a netdev appears, named as the
// device is configured (udev's rename) or else the lowest free ethN, with a
// new ifindex. d.drv.mu is held.
func (d *Device) attachNetvscLocked() error {
	if d.cfg.Class != vmbus.ClassNetwork || d.cfg.HvSock {
		return fmt.Errorf("sim: hv_netvsc: device %s is not a synthetic NIC", d.cfg.Instance)
	}
	h := d.host
	root := h.cfg.Root
	real := deviceRealDir(root, d.path)
	name, idx := h.drv.allocNetdev(d.cfg.IfName)
	nd := netdev{Name: name, Index: idx, MAC: d.MAC(), MTU: defaultMTU,
		Flags: 0x1003, Type: 1, Operstate: "up"} // IFF_UP|IFF_BROADCAST|IFF_MULTICAST, ARPHRD_ETHER
	d.setBoundLocked(DriverNetvsc, name, idx) // before sysfs shows it
	if err := writeNetdev(root, filepath.Join(real, "net"), real, nd); err != nil {
		d.setBoundLocked("", "", 0)
		h.drv.freeNetdev(name)
		return err
	}
	if err := linkDriver(root, real, DriverNetvsc); err != nil {
		d.setBoundLocked("", "", 0)
		unlinkDriver(root, real, DriverNetvsc)
		removeNetdev(root, filepath.Join(real, "net"), name)
		h.drv.freeNetdev(name)
		return err
	}
	if err := h.drv.renderRoutes(); err != nil {
		h.log.Warn("sim: routes", "err", err)
	}
	return nil
}

// detachNetvscLocked is netvsc_remove: the netdev goes, and with it its
// routes. d.drv.mu is held.
func (d *Device) detachNetvscLocked() error {
	h := d.host
	root := h.cfg.Root
	real := deviceRealDir(root, d.path)
	name := d.drv.ifName
	d.setBoundLocked("", "", 0) // before sysfs shows it
	errs := []error{removeNetdev(root, filepath.Join(real, "net"), name)}
	if err := os.Remove(filepath.Join(real, "net")); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	errs = append(errs, unlinkDriver(root, real, DriverNetvsc))
	h.drv.freeNetdev(name)
	errs = append(errs, h.drv.renderRoutes())
	return errors.Join(errs...)
}

// allocNetdev reserves want if it is free, else the lowest free ethN, and
// a new ifindex (dev_new_index never reuses one soon).
func (ds *driverCore) allocNetdev(want string) (string, int) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	free := func(n string) bool {
		if ds.ifUsed[n] {
			return false
		}
		_, err := os.Lstat(filepath.Join(ds.h.cfg.Root, netClassDir, n))
		return err != nil
	}
	name := want
	if name == "" || !free(name) {
		for i := 0; ; i++ {
			if name = fmt.Sprintf("eth%d", i); free(name) {
				break
			}
		}
	}
	ds.ifUsed[name] = true
	idx := ds.nextIfIndex
	ds.nextIfIndex++
	return name, idx
}

func (ds *driverCore) freeNetdev(name string) {
	ds.mu.Lock()
	delete(ds.ifUsed, name)
	ds.mu.Unlock()
}

// validIfName is dev_valid_name: 1 to 15 bytes, not "." or "..", no '/',
// ':' or white space.
func validIfName(s string) bool {
	if s == "" || len(s) >= 16 || s == "." || s == ".." {
		return false
	}
	return !strings.ContainsFunc(s, func(r rune) bool { return r == '/' || r == ':' || unicode.IsSpace(r) })
}

// Route is one entry of the guest's routing table.
type Route struct {
	Iface   string
	Dst     netip.Prefix // 0.0.0.0/0 or ::/0 for a default route
	Gateway netip.Addr   // the zero Addr for a directly connected route
	Metric  uint32
}

// SetRoutes replaces the guest's routing table, shown in R/proc/net/route
// (IPv4) and R/proc/net/ipv6_route (IPv6) in the kernel's formats. As on a
// real system, a route is listed only while its interface exists: binding a
// NIC away from hv_netvsc removes its routes from the files, and they are
// back when its netdev is (as the network manager would restore them).
func (h *Host) SetRoutes(routes []Route) error {
	for _, r := range routes {
		if !validIfName(r.Iface) {
			return fmt.Errorf("sim: route %v: bad interface %q", r.Dst, r.Iface)
		}
		if !r.Dst.IsValid() || (r.Gateway.IsValid() && r.Gateway.Is4() != r.Dst.Addr().Is4()) {
			return fmt.Errorf("sim: route %v via %v: bad destination or gateway", r.Dst, r.Gateway)
		}
	}
	h.drv.mu.Lock()
	h.drv.routes = append([]Route(nil), routes...)
	h.drv.mu.Unlock()
	return h.drv.renderRoutes()
}

// Route flags (include/uapi/linux/route.h).
const (
	rtfUp      = 0x0001
	rtfGateway = 0x0002
	rtfHost    = 0x0004
)

// renderRoutes rewrites R/proc/net/route and R/proc/net/ipv6_route.
func (ds *driverCore) renderRoutes() error {
	root := ds.h.cfg.Root
	ds.mu.Lock()
	routes := append([]Route(nil), ds.routes...)
	ds.mu.Unlock()
	// fib_route_seq_show: a header and lines padded to 127 characters.
	var v4, v6 strings.Builder
	fmt.Fprintf(&v4, "%-127s\n", "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT")
	for _, r := range routes {
		if _, err := os.Lstat(filepath.Join(root, netClassDir, r.Iface)); err != nil {
			continue // no such interface (now): the kernel has no such route
		}
		dst := r.Dst.Masked()
		flags := uint32(rtfUp)
		if r.Gateway.IsValid() {
			flags |= rtfGateway
		}
		if dst.Addr().Is4() {
			if dst.Bits() == 32 {
				flags |= rtfHost
			}
			var mask [4]byte
			for i := 0; i < dst.Bits(); i++ {
				mask[i/8] |= 0x80 >> (i % 8)
			}
			var gw [4]byte
			if r.Gateway.IsValid() {
				gw = r.Gateway.As4()
			}
			// The kernel prints each __be32 as a host-order integer.
			a := dst.Addr().As4()
			line := fmt.Sprintf("%s\t%08X\t%08X\t%04X\t%d\t%d\t%d\t%08X\t%d\t%d\t%d", r.Iface,
				binary.NativeEndian.Uint32(a[:]), binary.NativeEndian.Uint32(gw[:]), flags, 0, 0, r.Metric,
				binary.NativeEndian.Uint32(mask[:]), 0, 0, 0)
			fmt.Fprintf(&v4, "%-127s\n", line)
			continue
		}
		// ipv6_route_native_seq_show: dst plen src plen gateway metric
		// refcnt use flags dev, addresses as 32 hex digits.
		var gw [16]byte
		if r.Gateway.IsValid() {
			gw = r.Gateway.As16()
		}
		a := dst.Addr().As16()
		fmt.Fprintf(&v6, "%x %02x %x %02x %x %08x %08x %08x %08x %8s\n",
			a[:], dst.Bits(), make([]byte, 16), 0, gw[:], r.Metric, 1, 0, flags, r.Iface)
	}
	return errors.Join(
		updateAttr(filepath.Join(root, procNetDir, "route"), v4.String()),
		updateAttr(filepath.Join(root, procNetDir, "ipv6_route"), v6.String()))
}
