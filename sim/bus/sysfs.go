package bus

// The simulated sysfs tree, laid out as the real kernel lays it out under a
// root R (docs/uio-contract.md §2; docs/protocol/vmbus-ring.md
// §1.2, §1.7, §1.10). One VMBus device bound to uio_hv_generic as uio0:
//
//	R/sys/devices/LNXSYSTM:00/LNXSYBUS:00/ACPI0004:00/VMBUS:00/<guid>/   the device (real directory)
//	    class_id device_id id monitor_id[m] numa_node driver_override modalias state vendor device
//	    uevent channel_vp_mapping {server,client}_monitor_{pending,latency,conn_id}[m] {in,out}_* debug values
//	    subsystem -> ../../../../../../bus/vmbus
//	    driver    -> ../../../../../../bus/vmbus/drivers/uio_hv_generic
//	    channels/<relid>/{subchannel_id cpu monitor_id[m] pending[m] latency[m] read_avail write_avail ... ring}
//	    uio/uio0/{name version dev event uevent device subsystem maps/mapK/{name addr size offset}}
//	R/sys/bus/vmbus/devices/<guid>             -> ../../../devices/LNXSYSTM:00/.../VMBUS:00/<guid>
//	R/sys/bus/vmbus/drivers/uio_hv_generic/<guid> -> ../../../../devices/LNXSYSTM:00/.../VMBUS:00/<guid>
//	R/sys/class/uio/uio0                       -> ../../devices/LNXSYSTM:00/.../VMBUS:00/<guid>/uio/uio0
//	R/sys/dev/char/243:0                       -> ../../devices/LNXSYSTM:00/.../VMBUS:00/<guid>/uio/uio0
//	R/dev/uio0                                 the uio node (a socket in the simulator; devnode.go)
//	R/proc/sys/kernel/osrelease
//
// ([m]: only for a monitored channel.) Symbolic links carry the relative text
// the kernel's kernfs gives them. Attribute values are written once, as the
// kernel would print them at that moment; the few that the real kernel
// computes on every read (state, in_mask, read_avail, event, ...) are static
// unless the host rewrites them with updateAttr.
//
// Anything a guest discovers by watching a directory appears atomically:
// the device symlink is created after the device directory is complete, a
// channel directory and a uio directory are built under a temporary name
// and renamed into place, and a ring file is sized and mapped before it is
// renamed to "ring" (guests watch channels/<relid>/ with inotify).
//
// These functions are safe for concurrent use on different devices. For one
// device, the caller orders them (writeDevice first, removeDevice last);
// writeChannel and removeChannel may run concurrently with each other.

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/vmbusd/vmbusd/vmbus"
)

// Paths relative to the root R.
const (
	vmbusDevRoot  = "sys/devices/LNXSYSTM:00/LNXSYBUS:00/ACPI0004:00/VMBUS:00"
	vmbusBusDir   = "sys/bus/vmbus"
	vmbusDevsDir  = "sys/bus/vmbus/devices"
	vmbusDrvsDir  = "sys/bus/vmbus/drivers"
	uioClassDir   = "sys/class/uio"
	devCharDir    = "sys/dev/char"
	osReleasePath = "proc/sys/kernel/osrelease"
)

const (
	uioDriverName = "uio_hv_generic"
	// uioDriverVersion is uio_hv_generic's DRIVER_VERSION, which it sets
	// as uio_info.version (all versions seen; docs/protocol/vmbus-ring.md §1.1).
	uioDriverVersion = "0.02.1"
	// uioMajor stands for the dynamically allocated uio character major;
	// any value works, this one is typical (alloc_chrdev_region hands
	// them out downwards from 254).
	uioMajor = 243
	// maxUIOMaps is MAX_UIO_MAPS (include/linux/uio_driver.h).
	maxUIOMaps = 5
	// msftVendorID is PCI_VENDOR_ID_MICROSOFT, every VMBus device's vendor
	// attribute (vmbus_device_create).
	msftVendorID = 0x1414
)

// vmbusDriverNames are the drivers whose directories exist under
// R/sys/bus/vmbus/drivers/.
var vmbusDriverNames = []string{uioDriverName, "hv_netvsc", "hv_sock"}

// devTypes maps a class GUID to its enum vmbus_device_type value, printed in
// the device's "device" attribute (include/linux/hyperv.h; hv_get_dev_type).
// Classes not listed (hv_sock services, vmbusd's test class) are HV_UNKNOWN.
var devTypes = map[vmbus.GUID]int{
	vmbus.ClassIDE:           0,  // HV_IDE
	vmbus.ClassSCSI:          1,  // HV_SCSI
	vmbus.ClassFC:            2,  // HV_FC
	vmbus.ClassNetwork:       3,  // HV_NIC
	vmbus.ClassNetworkDirect: 4,  // HV_ND
	vmbus.ClassPCIe:          5,  // HV_PCIE
	vmbus.ClassVideo:         6,  // HV_FB
	vmbus.ClassKeyboard:      7,  // HV_KBD
	vmbus.ClassMouse:         8,  // HV_MOUSE
	vmbus.ClassKVP:           9,  // HV_KVP
	vmbus.ClassTimeSync:      10, // HV_TS
	vmbus.ClassHeartbeat:     11, // HV_HB
	vmbus.ClassShutdown:      12, // HV_SHUTDOWN
	vmbus.ClassFCopy:         13, // HV_FCOPY
	vmbus.ClassVSS:           14, // HV_BACKUP
	vmbus.ClassDynMem:        15, // HV_DM
}

// devTypeUnknown is HV_UNKNOWN.
const devTypeUnknown = 16

// vpMapMu serialises rewrites of channel_vp_mapping.
var vpMapMu sync.Mutex

// initTree creates the skeleton every simulated system has: the vmbus bus
// with its drivers, the uio class, R/dev and R/proc/sys/kernel/osrelease.
// It is idempotent: existing directories and driver files are kept (a
// bring-up script or a host watcher may be using them); osrelease is
// rewritten for p.
func initTree(root string, p Profile) error {
	dirs := []string{
		vmbusDevRoot,
		vmbusDevsDir,
		uioClassDir,
		devCharDir,
		"dev",
		filepath.Dir(osReleasePath),
	}
	for _, name := range vmbusDriverNames {
		dirs = append(dirs, filepath.Join(vmbusDrvsDir, name))
	}
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return fmt.Errorf("sim: init tree: %w", err)
		}
	}
	type file struct {
		path, content string
		mode          fs.FileMode
	}
	files := []file{
		// Bus attributes (drivers/base/bus.c; vmbus_bus_attrs).
		{vmbusBusDir + "/drivers_autoprobe", "1\n", 0o644},
		{vmbusBusDir + "/drivers_probe", "", 0o200},
		{vmbusBusDir + "/uevent", "", 0o200},
		{vmbusBusDir + "/hibernation", "0\n", 0o444},
	}
	for _, name := range vmbusDriverNames {
		d := filepath.Join(vmbusDrvsDir, name)
		// Driver attributes: bind/unbind/uevent (drivers/base/bus.c),
		// new_id/remove_id (vmbus_drv_attrs). All write-only.
		for _, a := range []string{"bind", "unbind", "new_id", "remove_id", "uevent"} {
			files = append(files, file{filepath.Join(d, a), "", 0o200})
		}
	}
	for _, f := range files {
		if err := createFileIfMissing(filepath.Join(root, f.path), f.content, f.mode); err != nil {
			return fmt.Errorf("sim: init tree: %w", err)
		}
	}
	if err := updateAttr(filepath.Join(root, osReleasePath), p.OSRelease()+"\n"); err != nil {
		return fmt.Errorf("sim: init tree: %w", err)
	}
	return nil
}

// devAttrs describes a VMBus device (its primary channel's offer).
type devAttrs struct {
	Class    vmbus.GUID // offer if_type: class_id, modalias, device
	Instance vmbus.GUID // offer if_instance: the directory name and device_id
	RelID    uint32     // primary child_relid: id
	// MonitorID is the offer's monitorid, 0..255, or -1 when the channel
	// is not monitored (monitor_allocated clear): the monitor attributes
	// are then absent.
	MonitorID int
	NUMANode  int // numa_node of the channel's target CPU
	// HvSock marks an hv_sock offer (chn_flags has TLNPI_PROVIDER_OFFER).
	// Such offers carry two facts no real sysfs attribute shows, so the
	// simulator adds exactly two (sim/hvsockhost/hvsock.go): chn_flags and
	// is_for_guest_accept (Linux: u.pipe.user_def[0]).
	HvSock         bool
	ForGuestAccept bool
}

// hvSockChnFlags is the chn_flags of an hv_sock offer as OpenVMM sets it:
// TLNPI_PROVIDER_OFFER 0x2000 | NAMED_PIPE_MODE 0x10 |
// ENUMERATE_DEVICE_INTERFACE 0x1 (docs/protocol/hvsock.md §1.2).
const hvSockChnFlags = 0x2011

// writeDevice creates the device's directory and, last, the symlink
// R/sys/bus/vmbus/devices/<guid> that makes it visible. It returns that
// symlink's path, which the other functions take as devDir. The device
// starts unbound with an empty channels/ directory; add its channels with
// writeChannel. It fails if the device exists.
func writeDevice(root string, a devAttrs) (devDir string, err error) {
	if a.MonitorID > 255 {
		return "", fmt.Errorf("sim: device %s: monitor id %d out of range", a.Instance, a.MonitorID)
	}
	name := a.Instance.String()
	link := filepath.Join(root, vmbusDevsDir, name)
	real := filepath.Join(root, vmbusDevRoot, name)
	if _, err := os.Lstat(link); err == nil {
		return "", fmt.Errorf("sim: device %s: %w", name, fs.ErrExist)
	}
	if err := os.MkdirAll(filepath.Dir(real), 0o755); err != nil {
		return "", fmt.Errorf("sim: device %s: %w", name, err)
	}
	if err := os.Mkdir(real, 0o755); err != nil {
		return "", fmt.Errorf("sim: device %s: %w", name, err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(real)
		}
	}()

	devType, ok := devTypes[a.Class]
	if !ok {
		devType = devTypeUnknown
	}
	// vmbus_dev_attrs (vmbus_drv.c), formats as printed there.
	attrs := []struct {
		name, value string
	}{
		{"id", fmt.Sprintf("%d\n", a.RelID)},
		{"state", "0\n"}, // CHANNEL_OFFER_STATE
		{"class_id", a.Class.Braced() + "\n"},
		{"device_id", a.Instance.Braced() + "\n"},
		{"modalias", modalias(a.Class) + "\n"},
		{"numa_node", fmt.Sprintf("%d\n", a.NUMANode)},
		{"out_intr_mask", "0\n"},
		{"out_read_index", "0\n"},
		{"out_write_index", "0\n"},
		{"out_read_bytes_avail", "0\n"},
		{"out_write_bytes_avail", "0\n"},
		{"in_intr_mask", "0\n"},
		{"in_read_index", "0\n"},
		{"in_write_index", "0\n"},
		{"in_read_bytes_avail", "0\n"},
		{"in_write_bytes_avail", "0\n"},
		{"channel_vp_mapping", ""},
		{"vendor", fmt.Sprintf("0x%x\n", msftVendorID)},
		{"device", fmt.Sprintf("0x%x\n", devType)},
	}
	if a.HvSock {
		// Simulator-only (sim/hvsockhost/hvsock.go): the offer's flags and pipe
		// direction, which a guest needs to tell an hv_sock channel and
		// its direction apart; a real kernel keeps them in the channel.
		accept := 0
		if a.ForGuestAccept {
			accept = 1
		}
		attrs = append(attrs, []struct{ name, value string }{
			{"chn_flags", fmt.Sprintf("0x%04x\n", hvSockChnFlags)},
			{"is_for_guest_accept", fmt.Sprintf("%d\n", accept)},
		}...)
	}
	if a.MonitorID >= 0 {
		// Hidden when !monitor_allocated (vmbus_dev_attr_is_visible).
		attrs = append(attrs, []struct{ name, value string }{
			{"monitor_id", fmt.Sprintf("%d\n", a.MonitorID)},
			{"server_monitor_pending", "0\n"},
			{"client_monitor_pending", "0\n"},
			{"server_monitor_latency", "0\n"},
			{"client_monitor_latency", "0\n"},
			{"server_monitor_conn_id", "0\n"},
			{"client_monitor_conn_id", "0\n"},
		}...)
	}
	for _, at := range attrs {
		if err := putFile(filepath.Join(real, at.name), at.value, 0o444); err != nil {
			return "", err
		}
	}
	// driver_override is read-write; a NULL override prints as "(null)".
	if err := putFile(filepath.Join(real, "driver_override"), "(null)\n", 0o644); err != nil {
		return "", err
	}
	if err := putFile(filepath.Join(real, "uevent"), deviceUevent(a.Class, ""), 0o644); err != nil {
		return "", err
	}
	if err := os.Mkdir(filepath.Join(real, "channels"), 0o755); err != nil {
		return "", fmt.Errorf("sim: device %s: %w", name, err)
	}
	if err := kernfsSymlink(filepath.Join(real, "subsystem"), filepath.Join(root, vmbusBusDir)); err != nil {
		return "", err
	}
	if err := kernfsSymlink(link, real); err != nil {
		return "", err
	}
	return link, nil
}

// modalias is "vmbus:" followed by the class GUID's 16 wire bytes in hex
// (modalias_show: "vmbus:%*phN" of dev_type).
func modalias(class vmbus.GUID) string {
	w := class.Wire()
	return fmt.Sprintf("vmbus:%x", w[:])
}

// deviceUevent is the device's uevent attribute: DRIVER= when bound
// (dev_uevent), then the bus's MODALIAS= (vmbus_uevent).
func deviceUevent(class vmbus.GUID, driver string) string {
	var b strings.Builder
	if driver != "" {
		b.WriteString("DRIVER=" + driver + "\n")
	}
	b.WriteString("MODALIAS=" + modalias(class) + "\n")
	return b.String()
}

// chanAttrs describes one channel (an offer) of a device.
type chanAttrs struct {
	RelID        uint32 // child_relid: the directory name
	SubchannelID uint16 // offer sub_channel_index; 0 for the primary
	// MonitorID is the offer's monitorid, or -1 when not monitored:
	// monitor_id, pending and latency are then absent.
	MonitorID int
	CPU       int // target_cpu
	// IDLater writes subchannel_id empty: an independent host that writes
	// the attribute in two steps (FaultSplitSubchannelID); the value
	// follows with writeSubchannelID.
	IDLater bool
}

// writeChannel adds R/.../<guid>/channels/<relid>/ with the channel
// attributes of vmbus_chan_attrs (vmbus_drv.c), but no ring file: that
// appears when the channel is opened (createRingFile). The directory
// appears atomically. It also refreshes the device's channel_vp_mapping.
func writeChannel(devDir string, c chanAttrs) error {
	if c.MonitorID > 255 {
		return fmt.Errorf("sim: channel %d: monitor id %d out of range", c.RelID, c.MonitorID)
	}
	tmp, err := os.MkdirTemp(devDir, ".channel-*")
	if err != nil {
		return fmt.Errorf("sim: channel %d: %w", c.RelID, err)
	}
	defer os.RemoveAll(tmp) // no-op once renamed
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("sim: channel %d: %w", c.RelID, err)
	}
	attrs := []struct {
		name, value string
		mode        fs.FileMode
	}{
		{"out_mask", "0\n", 0o444},
		{"in_mask", "0\n", 0o444},
		{"read_avail", "0\n", 0o444},
		{"write_avail", "0\n", 0o444},
		{"cpu", fmt.Sprintf("%d\n", c.CPU), 0o644},
		{"interrupts", "0\n", 0o444},
		{"events", "0\n", 0o444},
		{"intr_in_full", "0\n", 0o444},
		{"intr_out_empty", "0\n", 0o444},
		{"out_full_first", "0\n", 0o444},
		{"out_full_total", "0\n", 0o444},
		{"subchannel_id", fmt.Sprintf("%d\n", c.SubchannelID), 0o444},
	}
	if c.IDLater {
		attrs[len(attrs)-1].value = ""
	}
	if c.MonitorID >= 0 {
		// Hidden without a monitor (vmbus_chan_attr_is_visible).
		attrs = append(attrs, []struct {
			name, value string
			mode        fs.FileMode
		}{
			{"monitor_id", fmt.Sprintf("%d\n", c.MonitorID), 0o444},
			{"pending", "0\n", 0o444},
			{"latency", "0\n", 0o444},
		}...)
	}
	for _, at := range attrs {
		if err := putFile(filepath.Join(tmp, at.name), at.value, at.mode); err != nil {
			return err
		}
	}
	dst := channelDir(devDir, c.RelID)
	if err := renameNoReplace(tmp, dst); err != nil {
		return fmt.Errorf("sim: channel %d: %w", c.RelID, err)
	}
	return updateVPMapping(devDir)
}

// writeSubchannelID is the second step of a two-step subchannel_id write
// (chanAttrs.IDLater): the value, then channel_vp_mapping.
func writeSubchannelID(devDir string, relid uint32, sub uint16) error {
	if err := updateAttr(filepath.Join(channelDir(devDir, relid), "subchannel_id"), fmt.Sprintf("%d\n", sub)); err != nil {
		return err
	}
	return updateVPMapping(devDir)
}

// removeChannel removes channels/<relid>/ (a rescinded sub-channel) in one
// step, and refreshes channel_vp_mapping. A missing channel is not an error.
// Remove its ring file first if the host still has it mapped; the mapping
// itself stays valid.
func removeChannel(devDir string, relid uint32) error {
	if err := removeDirAtomically(channelDir(devDir, relid), devDir); err != nil {
		return fmt.Errorf("sim: remove channel %d: %w", relid, err)
	}
	return updateVPMapping(devDir)
}

func channelDir(devDir string, relid uint32) string {
	return filepath.Join(devDir, "channels", strconv.FormatUint(uint64(relid), 10))
}

// updateVPMapping rewrites channel_vp_mapping: "relid:cpu" per line, the
// primary first, then the sub-channels (channel_vp_mapping_show).
func updateVPMapping(devDir string) error {
	vpMapMu.Lock()
	defer vpMapMu.Unlock()
	ents, err := os.ReadDir(filepath.Join(devDir, "channels"))
	if err != nil {
		return fmt.Errorf("sim: channel_vp_mapping: %w", err)
	}
	type vp struct{ relid, sub, cpu uint64 }
	var vps []vp
	for _, e := range ents {
		relid, err := strconv.ParseUint(e.Name(), 10, 32)
		if err != nil {
			continue
		}
		d := filepath.Join(devDir, "channels", e.Name())
		if b, err := os.ReadFile(filepath.Join(d, "subchannel_id")); err == nil && len(b) == 0 {
			continue // its second write is still to come (writeSubchannelID)
		}
		sub, err1 := readUintAttr(filepath.Join(d, "subchannel_id"))
		cpu, err2 := readUintAttr(filepath.Join(d, "cpu"))
		if err := errors.Join(err1, err2); err != nil {
			return fmt.Errorf("sim: channel_vp_mapping: %w", err)
		}
		vps = append(vps, vp{relid, sub, cpu})
	}
	slices.SortFunc(vps, func(a, b vp) int {
		return cmp.Or(cmp.Compare(a.sub, b.sub), cmp.Compare(a.relid, b.relid))
	})
	var b strings.Builder
	for _, v := range vps {
		fmt.Fprintf(&b, "%d:%d\n", v.relid, v.cpu)
	}
	return updateAttr(filepath.Join(devDir, "channel_vp_mapping"), b.String())
}

func readUintAttr(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
}

// createRingFile creates channels/<relid>/ring: a regular file of size bytes
// (mode 0600, like the sysfs binary attribute), mapped MAP_SHARED read-write
// for the host. The file is sized and mapped under a temporary name in the
// same directory and then renamed, so a guest watching with inotify sees
// IN_MOVED_TO "ring" and finds it complete. The channel directory must
// exist; an existing ring file is an error.
//
// init, when not nil, prepares the memory before the file becomes visible
// (the kernel opens the channel, initialising its ring headers, before it
// creates the attribute).
//
// The caller owns f and mem (close f; unmapMem(mem)). Removing the file
// (removeRingFile) does not invalidate either.
func createRingFile(devDir string, relid uint32, size int, init func(mem []byte) error) (f *os.File, mem []byte, err error) {
	f, mem, err = prepareRingFile(devDir, relid, size, init)
	if err != nil {
		return nil, nil, err
	}
	if err := publishRingFile(f, devDir, relid); err != nil {
		unmapMem(mem)
		f.Close()
		os.Remove(f.Name())
		return nil, nil, err
	}
	return f, mem, nil
}

// publishRingFile makes a ring file made by prepareRingFile visible as
// channels/<relid>/ring.
func publishRingFile(f *os.File, devDir string, relid uint32) error {
	if err := renameNoReplace(f.Name(), filepath.Join(channelDir(devDir, relid), "ring")); err != nil {
		return fmt.Errorf("sim: ring %d: %w", relid, err)
	}
	return nil
}

// prepareRingFile is createRingFile up to the rename: the file exists,
// sized, mapped and initialised, under its temporary name.
func prepareRingFile(devDir string, relid uint32, size int, init func(mem []byte) error) (f *os.File, mem []byte, err error) {
	if size <= 0 {
		return nil, nil, fmt.Errorf("sim: ring %d: size %d, want > 0", relid, size)
	}
	dir := channelDir(devDir, relid)
	tf, err := os.CreateTemp(dir, ".ring-*")
	if err != nil {
		return nil, nil, fmt.Errorf("sim: ring %d: %w", relid, err)
	}
	var m []byte
	fail := func(err error) (*os.File, []byte, error) {
		unmapMem(m)
		tf.Close()
		os.Remove(tf.Name())
		return nil, nil, fmt.Errorf("sim: ring %d: %w", relid, err)
	}
	if err := tf.Chmod(0o600); err != nil {
		return fail(err)
	}
	if err := tf.Truncate(int64(size)); err != nil {
		return fail(err)
	}
	m, err = unix.Mmap(int(tf.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail(fmt.Errorf("mmap: %w", err))
	}
	populate(m, true)
	if init != nil {
		if err := init(m); err != nil {
			return fail(err)
		}
	}
	return tf, m, nil
}

// removeRingFile removes channels/<relid>/ring (hv_remove_ring_sysfs). A
// missing file is not an error.
func removeRingFile(devDir string, relid uint32) error {
	err := os.Remove(filepath.Join(channelDir(devDir, relid), "ring"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("sim: remove ring %d: %w", relid, err)
	}
	return nil
}

// uioMap is one uio memory map as listed in maps/mapK.
type uioMap struct {
	Name string // txrx_rings, int_page, monitor_page, recv:<gpadl>, send:<gpadl>
	Size uint64 // bytes; what the guest maps
	Addr uint64 // what the kernel would show (a physical or kernel virtual address); informational
}

// writeUIONode binds the device to uio_hv_generic as uioN: it creates
// devDir/uio/uioN (atomically) with its attributes and maps, the driver
// links (devDir/driver and drivers/uio_hv_generic/<guid>), R/sys/dev/char/MAJ:N
// and, last, R/sys/class/uio/uioN. Create the node's socket (listenNode on
// R/dev/uioN) before calling this, as the kernel's /dev node exists before
// its maps are listed. At most five maps (MAX_UIO_MAPS). On failure,
// whatever was created is removed again.
func writeUIONode(root, devDir string, n int, maps []uioMap) (err error) {
	if n < 0 {
		return fmt.Errorf("sim: uio%d: bad number", n)
	}
	if len(maps) > maxUIOMaps {
		return fmt.Errorf("sim: uio%d: %d maps, at most %d", n, len(maps), maxUIOMaps)
	}
	real := deviceRealDir(root, devDir)
	class, err := readDeviceClass(real)
	if err != nil {
		return err
	}
	uioName := fmt.Sprintf("uio%d", n)
	parent := filepath.Join(real, "uio")
	final := filepath.Join(parent, uioName)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("sim: %s: %w", uioName, err)
	}
	tmp, err := os.MkdirTemp(parent, ".uio-*")
	if err != nil {
		return fmt.Errorf("sim: %s: %w", uioName, err)
	}
	defer os.RemoveAll(tmp) // no-op once renamed
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("sim: %s: %w", uioName, err)
	}
	// uio class device attributes (uio.c uio_groups; core dev/uevent).
	attrs := []struct{ name, value string }{
		{"name", uioDriverName + "\n"},
		{"version", uioDriverVersion + "\n"},
		{"event", "0\n"},
		{"dev", fmt.Sprintf("%d:%d\n", uioMajor, n)},
	}
	for _, at := range attrs {
		if err := putFile(filepath.Join(tmp, at.name), at.value, 0o444); err != nil {
			return err
		}
	}
	uevent := fmt.Sprintf("MAJOR=%d\nMINOR=%d\nDEVNAME=%s\n", uioMajor, n, uioName)
	if err := putFile(filepath.Join(tmp, "uevent"), uevent, 0o644); err != nil {
		return err
	}
	// Link texts are computed for the final location; tmp is its sibling.
	if err := symlinkAs(filepath.Join(tmp, "device"), filepath.Join(final, "device"), real); err != nil {
		return err
	}
	if err := symlinkAs(filepath.Join(tmp, "subsystem"), filepath.Join(final, "subsystem"), filepath.Join(root, uioClassDir)); err != nil {
		return err
	}
	if len(maps) > 0 {
		if err := os.Mkdir(filepath.Join(tmp, "maps"), 0o755); err != nil {
			return fmt.Errorf("sim: %s: %w", uioName, err)
		}
	}
	for k, m := range maps {
		if m.Name == "" || strings.ContainsAny(m.Name, "\n/") {
			return fmt.Errorf("sim: %s: map %d: bad name %q", uioName, k, m.Name)
		}
		d := filepath.Join(tmp, "maps", fmt.Sprintf("map%d", k))
		if err := os.Mkdir(d, 0o755); err != nil {
			return fmt.Errorf("sim: %s: %w", uioName, err)
		}
		// uio.c map_*_show: addr and size with "%pa" (0x and 16 zero-padded
		// hex digits for a 64-bit phys_addr_t), offset with "0x%llx".
		mattrs := []struct{ name, value string }{
			{"name", m.Name + "\n"},
			{"addr", fmt.Sprintf("0x%016x\n", m.Addr)},
			{"size", fmt.Sprintf("0x%016x\n", m.Size)},
			{"offset", "0x0\n"},
		}
		for _, at := range mattrs {
			if err := putFile(filepath.Join(d, at.name), at.value, 0o444); err != nil {
				return err
			}
		}
	}
	if err := renameNoReplace(tmp, final); err != nil {
		return fmt.Errorf("sim: %s: %w", uioName, err)
	}
	defer func() {
		if err != nil {
			removeUIONode(root, devDir, n)
		}
	}()

	guid := filepath.Base(real)
	drvDir := filepath.Join(root, vmbusDrvsDir, uioDriverName)
	if err := kernfsSymlink(filepath.Join(real, "driver"), drvDir); err != nil {
		return err
	}
	if err := kernfsSymlink(filepath.Join(drvDir, guid), real); err != nil {
		return err
	}
	if err := updateAttr(filepath.Join(real, "uevent"), deviceUevent(class, uioDriverName)); err != nil {
		return err
	}
	if err := kernfsSymlink(filepath.Join(root, devCharDir, fmt.Sprintf("%d:%d", uioMajor, n)), final); err != nil {
		return err
	}
	return kernfsSymlink(filepath.Join(root, uioClassDir, uioName), final)
}

// removeUIONode undoes writeUIONode: the device stays, unbound. R/sys/class/uio/uioN
// goes first, so a guest never follows it into a half-removed directory.
// Missing pieces are not an error.
func removeUIONode(root, devDir string, n int) error {
	real := deviceRealDir(root, devDir)
	guid := filepath.Base(real)
	uioName := fmt.Sprintf("uio%d", n)
	var errs []error
	errs = append(errs,
		removeIfExists(filepath.Join(root, uioClassDir, uioName)),
		removeIfExists(filepath.Join(root, devCharDir, fmt.Sprintf("%d:%d", uioMajor, n))),
		removeDirAtomically(filepath.Join(real, "uio", uioName), real),
	)
	// The class glue directory goes with its last entry (cleanup_glue_dir).
	if err := os.Remove(filepath.Join(real, "uio")); err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, unix.ENOTEMPTY) {
		errs = append(errs, err)
	}
	if t, err := os.Readlink(filepath.Join(real, "driver")); err == nil && filepath.Base(t) == uioDriverName {
		errs = append(errs, removeIfExists(filepath.Join(real, "driver")))
	}
	errs = append(errs, removeIfExists(filepath.Join(root, vmbusDrvsDir, uioDriverName, guid)))
	if class, err := readDeviceClass(real); err == nil {
		errs = append(errs, updateAttr(filepath.Join(real, "uevent"), deviceUevent(class, "")))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sim: remove %s: %w", uioName, err)
	}
	return nil
}

// removeDevice makes the device disappear entirely, as vmbus_device_unregister
// does (a rescind on 6.11+, see Profile.UnregistersOnRescind): the bus symlink
// first, then the uio class links, driver links and the directory itself.
// Ring files the host still maps stay valid memory. A missing device is not
// an error.
func removeDevice(root, devDir string) error {
	real := deviceRealDir(root, devDir)
	guid := filepath.Base(real)
	var errs []error
	errs = append(errs, removeIfExists(filepath.Join(root, vmbusDevsDir, guid)))
	// Class and dev/char links that point into the device.
	for _, d := range []string{uioClassDir, devCharDir} {
		dir := filepath.Join(root, d)
		ents, err := os.ReadDir(dir)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		for _, e := range ents {
			p := filepath.Join(dir, e.Name())
			t, err := os.Readlink(p)
			if err != nil {
				continue
			}
			if strings.HasPrefix(filepath.Join(dir, t), real+string(filepath.Separator)) {
				errs = append(errs, removeIfExists(p))
			}
		}
	}
	for _, name := range vmbusDriverNames {
		errs = append(errs, removeIfExists(filepath.Join(root, vmbusDrvsDir, name, guid)))
	}
	errs = append(errs, removeDirAtomically(real, filepath.Dir(real)))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sim: remove device %s: %w", guid, err)
	}
	return nil
}

// updateAttr replaces the content of an attribute file atomically (a
// temporary file in the same directory renamed over it), keeping its mode,
// or 0444 for a new file. For values the real kernel computes on read
// (state, in_mask, event, ...) that the host wants to keep current.
func updateAttr(path, content string) error {
	mode := fs.FileMode(0o444)
	if st, err := os.Stat(path); err == nil {
		mode = st.Mode().Perm()
	}
	dir, base := filepath.Split(path)
	tf, err := os.CreateTemp(dir, "."+base+"-*")
	if err != nil {
		return fmt.Errorf("sim: update %s: %w", path, err)
	}
	tmp := tf.Name()
	_, err = tf.WriteString(content)
	err = errors.Join(err, tf.Chmod(mode), tf.Close())
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("sim: update %s: %w", path, err)
	}
	return nil
}

// putFile creates (or truncates) path with content and exactly mode.
func putFile(path, content string, mode fs.FileMode) error {
	err := os.WriteFile(path, []byte(content), mode)
	if err == nil {
		err = os.Chmod(path, mode) // WriteFile's mode is filtered by the umask
	}
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	return nil
}

func createFileIfMissing(path, content string, mode fs.FileMode) error {
	if _, err := os.Lstat(path); err == nil {
		return nil
	}
	return putFile(path, content, mode)
}

func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// removeDirAtomically renames dir to a hidden name in tmpParent, so that it
// vanishes in one step, then deletes it. A missing dir is not an error.
func removeDirAtomically(dir, tmpParent string) error {
	gone, err := os.MkdirTemp(tmpParent, ".gone-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(gone)
	dst := filepath.Join(gone, "d")
	if err := os.Rename(dir, dst); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	return os.RemoveAll(gone)
}

// renameNoReplace renames like rename(2) but fails if newpath exists, even
// as an empty directory (renameat2 RENAME_NOREPLACE).
func renameNoReplace(oldpath, newpath string) error {
	if err := unix.Renameat2(unix.AT_FDCWD, oldpath, unix.AT_FDCWD, newpath, unix.RENAME_NOREPLACE); err != nil {
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: err}
	}
	return nil
}

// deviceRealDir is the device's real directory under
// R/sys/devices/.../VMBUS:00, whether devDir is the bus symlink or the real
// directory.
func deviceRealDir(root, devDir string) string {
	return filepath.Join(root, vmbusDevRoot, filepath.Base(devDir))
}

func readDeviceClass(real string) (vmbus.GUID, error) {
	b, err := os.ReadFile(filepath.Join(real, "class_id"))
	if err != nil {
		return vmbus.GUID{}, fmt.Errorf("sim: device %s: %w", filepath.Base(real), err)
	}
	return vmbus.ParseGUID(string(b))
}

// kernfsSymlink creates link pointing at target with the relative text
// kernfs gives sysfs links (kernfs_get_target_path): up from the link's
// directory to the nearest ancestor of the target's parent, then down to the
// target. This differs from filepath.Rel when the target is an ancestor of
// the link ("../../../<guid>", not "../..").
func kernfsSymlink(link, target string) error {
	return symlinkAs(link, link, target)
}

// symlinkAs creates a symlink at path whose text is computed as if it lived
// at as (a path at the same depth, e.g. inside a directory about to be
// renamed into place).
func symlinkAs(path, as, target string) error {
	rel, err := filepath.Rel(filepath.Dir(as), filepath.Dir(target))
	if err != nil {
		return fmt.Errorf("sim: link %s: %w", path, err)
	}
	text := filepath.Join(rel, filepath.Base(target))
	if absoluteLinks(as) { // Config.AbsoluteLinks
		text = target
	}
	if err := os.Symlink(text, path); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	return nil
}
