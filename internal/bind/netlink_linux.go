package bind

// Netlink steps, for a real root only: a simulated tree has no kernel
// netdevs behind its sysfs entries (sim/bus/drivers_net.go).

import (
	"errors"
	"fmt"
	"net/netip"
	"os/exec"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// addrList is netlink.AddrList retried once when the dump was interrupted
// (netlink v1.2.1+ returns partial results with ErrDumpInterrupted;
// docs/protocol/ecosystem.md §3.4).
func addrList(link netlink.Link) ([]netlink.Addr, error) {
	as, err := netlink.AddrList(link, netlink.FAMILY_ALL)
	if errors.Is(err, netlink.ErrDumpInterrupted) {
		as, err = netlink.AddrList(link, netlink.FAMILY_ALL)
	}
	return as, err
}

// linkAddrs lists the addresses of an interface worth restoring, in CIDR
// form: all but IPv6 link-local ones, which the kernel makes itself.
func linkAddrs(ifname string) ([]string, error) {
	link, err := netlink.LinkByName(ifname)
	if err != nil {
		return nil, err
	}
	as, err := addrList(link)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, a := range as {
		if a.IPNet == nil || (a.IP.To4() == nil && a.IP.IsLinkLocalUnicast()) {
			continue
		}
		out = append(out, a.IPNet.String())
	}
	return out, nil
}

// addrOnLink reports whether the interface holds address a.
func addrOnLink(ifname string, a netip.Addr) bool {
	link, err := netlink.LinkByName(ifname)
	if err != nil {
		return false
	}
	as, err := addrList(link)
	if err != nil {
		return false
	}
	for _, x := range as {
		if ip, ok := netip.AddrFromSlice(x.IP); ok && ip.Unmap() == a.Unmap() {
			return true
		}
	}
	return false
}

// setLinkDown sets the interface down before its driver goes (LISA's
// unbind, docs/protocol/ecosystem.md §1.7).
func setLinkDown(ifname string) error {
	link, err := netlink.LinkByName(ifname)
	if err != nil {
		return err
	}
	return netlink.LinkSetDown(link)
}

// restoreLink gives the re-created netdev what the record says it had: its
// name (when it came back under another and the old one is free), MTU,
// addresses (ones already there are fine) and up state. It returns the
// final name.
func restoreLink(ifname string, rec Record) (string, error) {
	link, err := netlink.LinkByName(ifname)
	if err != nil {
		return ifname, err
	}
	var errs []error
	if rec.Interface != "" && rec.Interface != ifname {
		if _, err := netlink.LinkByName(rec.Interface); err != nil {
			err := errors.Join(netlink.LinkSetDown(link), netlink.LinkSetName(link, rec.Interface))
			if err == nil {
				ifname = rec.Interface
			}
			errs = append(errs, err)
		}
	}
	if rec.MTU > 0 && link.Attrs().MTU != rec.MTU {
		errs = append(errs, netlink.LinkSetMTU(link, rec.MTU))
	}
	for _, s := range rec.Addresses {
		a, err := netlink.ParseAddr(s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := netlink.AddrAdd(link, a); err != nil && !errors.Is(err, unix.EEXIST) {
			errs = append(errs, fmt.Errorf("address %s: %w", s, err))
		}
	}
	if rec.Up {
		errs = append(errs, netlink.LinkSetUp(link))
	}
	return ifname, errors.Join(errs...)
}

// modprobe loads uio_hv_generic (real root only).
func modprobe() error {
	out, err := exec.Command("modprobe", "-q", DriverUIO).CombinedOutput()
	if err != nil {
		return fmt.Errorf("modprobe %s: %v: %s", DriverUIO, err, out)
	}
	return nil
}
