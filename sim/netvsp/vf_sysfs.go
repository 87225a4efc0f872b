package netvsp

// The VF's PCI picture under R, laid out as Linux shows a Hyper-V PCI
// pass-through device (docs/uio-contract.md §8):
//
//	R/sys/bus/pci/slots/<serial>/address              <domain>:<bus>:<slot>, e.g. 7870:00:00
//	R/sys/devices/pci<domain>:00/<bdf>/                vendor device subsystem_vendor subsystem_device
//	                                                   class numa_node uevent
//	    driver    -> ../../../bus/pci/drivers/<drv>
//	    subsystem -> ../../../bus/pci
//	    net/<ifname>/                                  while the netdev exists (net-sysfs attributes)
//	R/sys/bus/pci/devices/<bdf>                     -> ../../../devices/pci<domain>:00/<bdf>
//	R/sys/bus/pci/drivers/<drv>/<bdf>               -> the device directory
//	R/sys/class/net/<ifname>                        -> the device's net/<ifname>
//
// The slot is named after the serial the host puts in VF_ASSOCIATION, which
// is how a guest pairs the two. The device directory appears complete, in
// one step (built under a temporary name and renamed), then its bus and
// driver links, then the slot; removal runs the other way.

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/vmbusd/vmbusd/sim/bus"
)

const (
	pciBusDir     = "sys/bus/pci"
	pciDevsDir    = "sys/bus/pci/devices"
	pciDrvsDir    = "sys/bus/pci/drivers"
	pciSlotsDir   = "sys/bus/pci/slots"
	pciClassEther = 0x020000 // PCI_CLASS_NETWORK_ETHERNET << 8
)

// vfPCI is the identity of a VF's PCI function.
type vfPCI struct {
	serial    uint32
	domain    uint16
	vendor    uint16
	device    uint16
	subVendor uint16
	subDevice uint16
	driver    string
	numaNode  int
}

// slotAddr is the slot's address attribute: domain:bus:slot.
func (p vfPCI) slotAddr() string { return fmt.Sprintf("%04x:00:00", p.domain) }

// bdf is the function's name: domain:bus:slot.function.
func (p vfPCI) bdf() string { return p.slotAddr() + ".0" }

// deviceDir is the function's real directory under R.
func (p vfPCI) deviceDir(root string) string {
	return filepath.Join(root, "sys/devices", fmt.Sprintf("pci%04x:00", p.domain), p.bdf())
}

// writeVFPCI creates the PCI device, its links and its slot.
func writeVFPCI(root string, p vfPCI) error {
	dev := p.deviceDir(root)
	parent := filepath.Dir(dev)
	drvDir := filepath.Join(root, pciDrvsDir, p.driver)
	for _, d := range []string{parent, filepath.Join(root, pciDevsDir), drvDir, filepath.Join(root, pciSlotsDir)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("sim: vf pci: %w", err)
		}
	}
	tmp, err := os.MkdirTemp(parent, ".pci-*")
	if err != nil {
		return fmt.Errorf("sim: vf pci: %w", err)
	}
	defer os.RemoveAll(tmp) // no-op once renamed
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("sim: vf pci: %w", err)
	}
	attrs := []struct{ name, value string }{
		{"vendor", fmt.Sprintf("0x%04x\n", p.vendor)},
		{"device", fmt.Sprintf("0x%04x\n", p.device)},
		{"subsystem_vendor", fmt.Sprintf("0x%04x\n", p.subVendor)},
		{"subsystem_device", fmt.Sprintf("0x%04x\n", p.subDevice)},
		{"class", fmt.Sprintf("0x%06x\n", pciClassEther)},
		{"numa_node", fmt.Sprintf("%d\n", p.numaNode)},
		{"uevent", fmt.Sprintf("DRIVER=%s\nPCI_CLASS=%X\nPCI_ID=%04X:%04X\nPCI_SUBSYS_ID=%04X:%04X\nPCI_SLOT_NAME=%s\n",
			p.driver, pciClassEther, p.vendor, p.device, p.subVendor, p.subDevice, p.bdf())},
	}
	for _, a := range attrs {
		if err := bus.PutFile(filepath.Join(tmp, a.name), a.value, 0o444); err != nil {
			return err
		}
	}
	if err := os.Mkdir(filepath.Join(tmp, "net"), 0o755); err != nil {
		return fmt.Errorf("sim: vf pci: %w", err)
	}
	if err := bus.SymlinkAs(filepath.Join(tmp, "driver"), filepath.Join(dev, "driver"), drvDir); err != nil {
		return err
	}
	if err := bus.SymlinkAs(filepath.Join(tmp, "subsystem"), filepath.Join(dev, "subsystem"), filepath.Join(root, pciBusDir)); err != nil {
		return err
	}
	if err := bus.RenameNoReplace(tmp, dev); err != nil {
		return fmt.Errorf("sim: vf pci %s: %w", p.bdf(), err)
	}
	slot := filepath.Join(root, pciSlotsDir, fmt.Sprint(p.serial))
	err = errors.Join(
		bus.KernfsSymlink(filepath.Join(root, pciDevsDir, p.bdf()), dev),
		bus.KernfsSymlink(filepath.Join(drvDir, p.bdf()), dev),
		os.MkdirAll(slot, 0o755),
		bus.PutFile(filepath.Join(slot, "address"), p.slotAddr()+"\n", 0o444))
	if err != nil {
		removeVFPCI(root, p)
		return fmt.Errorf("sim: vf pci %s: %w", p.bdf(), err)
	}
	return nil
}

// removeVFPCI undoes writeVFPCI (and any netdev left under the device): the
// slot first, then the links, then the device directory. Missing pieces
// are not errors.
func removeVFPCI(root string, p vfPCI) error {
	dev := p.deviceDir(root)
	var errs []error
	if ents, err := os.ReadDir(filepath.Join(dev, "net")); err == nil {
		for _, e := range ents {
			errs = append(errs, bus.RemoveNetdev(root, filepath.Join(dev, "net"), e.Name()))
		}
	}
	slot := filepath.Join(root, pciSlotsDir, fmt.Sprint(p.serial))
	errs = append(errs,
		bus.RemoveIfExists(filepath.Join(slot, "address")),
		bus.RemoveIfExists(slot),
		bus.RemoveIfExists(filepath.Join(root, pciDevsDir, p.bdf())),
		bus.RemoveIfExists(filepath.Join(root, pciDrvsDir, p.driver, p.bdf())),
		bus.RemoveDirAtomically(dev, filepath.Dir(dev)))
	return errors.Join(errs...)
}

// writeVFNetdev shows the VF's netdev under its PCI device (and in
// R/sys/class/net), as the driver's probe registers it.
func writeVFNetdev(root string, p vfPCI, name string, index int, mac net.HardwareAddr, mtu int) error {
	nd := bus.Netdev{Name: name, Index: index, MAC: mac, MTU: mtu,
		Flags: 0x1003, Type: 1, Operstate: "up"} // IFF_UP|IFF_BROADCAST|IFF_MULTICAST, ARPHRD_ETHER
	dev := p.deviceDir(root)
	return bus.WriteNetdev(root, filepath.Join(dev, "net"), dev, nd)
}

// removeVFNetdev removes it again (the netdev unregistered).
func removeVFNetdev(root string, p vfPCI, name string) error {
	return bus.RemoveNetdev(root, filepath.Join(p.deviceDir(root), "net"), name)
}
