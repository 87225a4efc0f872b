package vmbus

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Device is a VMBus device as sysfs shows it under
// R/sys/bus/vmbus/devices/<instance-guid> (vmbus_drv.c vmbus_dev_attrs;
// docs/protocol/vmbus-ring.md §1.10, §3.1). It is a snapshot: sub-channels and the uio node
// come and go, so re-read with LookupDevice or ReadChannels. The zero value
// is not a device.
type Device struct {
	Root           string        // the root directory R ("/" on a real system)
	Path           string        // R/sys/bus/vmbus/devices/<instance-guid>, not resolved
	Class          GUID          // class_id
	Instance       GUID          // device_id
	RelID          uint32        // id, the primary channel's relid
	MonitorID      int           // monitor_id; -1 when absent (the channel is not monitored)
	NUMANode       int           // numa_node; -1 when absent or no node
	Driver         string        // base name of the driver link's target; "" when unbound
	DriverOverride string        // driver_override; "" when unset ("(null)") or absent
	Channels       []ChannelInfo // channels/<relid>/, sorted by relid
	UIO            string        // "uioN" when the device has a uio node (uio/uioN), else ""
}

// ChannelInfo is one channel of a device, channels/<relid>/
// (vmbus_drv.c vmbus_chan_attrs; docs/protocol/vmbus-ring.md §1.7).
type ChannelInfo struct {
	RelID        uint32
	SubchannelID int    // subchannel_id: 0 for the primary; -1 when unreadable (not yet opened)
	MonitorID    int    // monitor_id; -1 when absent (hidden without a monitor)
	CPU          int    // cpu, the target CPU; -1 when absent
	RingPath     string // channels/<relid>/ring
	// HasRing reports that the ring file exists and opens read-write. The
	// kernel shows it only once uio_hv_generic has opened the channel, and
	// never if that failed (docs/protocol/vmbus-ring.md §1.8), so poll for it.
	HasRing bool
}

// ClassName returns the short name of the device class (see ClassName).
func (d Device) ClassName() string { return ClassName(d.Class) }

// devicesDir returns R/sys/bus/vmbus/devices.
func devicesDir(root string) string {
	if root == "" {
		root = "/"
	}
	return filepath.Join(root, "sys", "bus", "vmbus", "devices")
}

// ScanDevices reads every device under R/sys/bus/vmbus/devices, sorted by
// directory name. A missing directory gives an empty list. A device that
// vanishes during the scan (rescinded) is skipped; one that cannot be read
// is left out and reported in the returned error, which comes with the
// devices that could be read.
func ScanDevices(root string) ([]Device, error) {
	dir := devicesDir(root)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("vmbus: scan devices: %w", err)
	}
	var devs []Device
	var errs []error
	for _, e := range ents { // ReadDir sorts by name
		p := filepath.Join(dir, e.Name())
		d, err := readDevice(root, p)
		if err != nil {
			if _, serr := os.Stat(p); errors.Is(serr, fs.ErrNotExist) {
				continue
			}
			errs = append(errs, err)
			continue
		}
		devs = append(devs, d)
	}
	return devs, errors.Join(errs...)
}

// LookupDevice reads the device with the given instance GUID. A missing
// device gives an error wrapping fs.ErrNotExist.
func LookupDevice(root string, instance GUID) (Device, error) {
	p := filepath.Join(devicesDir(root), instance.String())
	if _, err := os.Stat(p); err != nil {
		return Device{}, fmt.Errorf("vmbus: device %s: %w", instance, err)
	}
	d, err := readDevice(root, p)
	if err != nil {
		return Device{}, err
	}
	if d.Instance != instance {
		return Device{}, fmt.Errorf("vmbus: %s: device_id is %s", p, d.Instance)
	}
	return d, nil
}

// readDevice reads the device directory p.
func readDevice(root, p string) (Device, error) {
	if root == "" {
		root = "/"
	}
	d := Device{Root: root, Path: p}
	var err error
	for _, g := range []struct {
		file string
		dst  *GUID
	}{{"class_id", &d.Class}, {"device_id", &d.Instance}} {
		if *g.dst, err = sysfsGUID(filepath.Join(p, g.file)); err != nil {
			return Device{}, err
		}
	}
	if d.RelID, err = sysfsUint32(filepath.Join(p, "id")); err != nil {
		return Device{}, err
	}
	// monitor_id is hidden when the channel has no monitor
	// (vmbus_dev_attr_is_visible); kernels print it with %d of a u8.
	if d.MonitorID, err = sysfsOptInt(filepath.Join(p, "monitor_id"), 0, 255); err != nil {
		return Device{}, err
	}
	if d.NUMANode, err = sysfsOptInt(filepath.Join(p, "numa_node"), -1, 1<<20); err != nil {
		return Device{}, err
	}
	if d.Driver, err = sysfsLinkBase(filepath.Join(p, "driver")); err != nil {
		return Device{}, err
	}
	ov, _, err := sysfsOptString(filepath.Join(p, "driver_override"))
	if err != nil {
		return Device{}, err
	}
	if ov != "(null)" {
		d.DriverOverride = ov
	}
	if d.Channels, err = d.ReadChannels(); err != nil {
		return Device{}, err
	}
	if d.UIO, err = uioNode(p); err != nil {
		return Device{}, err
	}
	return d, nil
}

// ReadChannels re-reads the device's channels/ directory: sub-channels are
// offered after the device, and their ring files appear later still. A
// device without a channels/ directory has no channels listed.
func (d Device) ReadChannels() ([]ChannelInfo, error) {
	dir := filepath.Join(d.Path, "channels")
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("vmbus: %w", err)
	}
	var chans []ChannelInfo
	for _, e := range ents {
		relid, err := strconv.ParseUint(e.Name(), 10, 32)
		if err != nil {
			continue // not a channel
		}
		cdir := filepath.Join(dir, e.Name())
		c, err := readChannel(cdir, uint32(relid))
		if _, serr := os.Stat(cdir); errors.Is(serr, fs.ErrNotExist) {
			continue // rescinded while we looked
		}
		if err != nil {
			return nil, err
		}
		chans = append(chans, c)
	}
	sort.Slice(chans, func(a, b int) bool { return chans[a].RelID < chans[b].RelID })
	return chans, nil
}

// readChannel reads channels/<relid>/.
func readChannel(dir string, relid uint32) (ChannelInfo, error) {
	c := ChannelInfo{RelID: relid, SubchannelID: -1, RingPath: filepath.Join(dir, "ring")}
	// The attributes of a channel that is not open yet may be unreadable
	// (DPDK 4970103e89), or empty while a host that writes them in two
	// steps is between them; that is not an error, only "not yet".
	s, present, err := sysfsOptString(filepath.Join(dir, "subchannel_id"))
	if err == nil && present && s != "" {
		if c.SubchannelID, err = sysfsParseInt(filepath.Join(dir, "subchannel_id"), s, 0, 0xffff); err != nil {
			return ChannelInfo{}, err
		}
	}
	if c.MonitorID, err = sysfsOptInt(filepath.Join(dir, "monitor_id"), 0, 255); err != nil {
		return ChannelInfo{}, err
	}
	if c.CPU, err = sysfsOptInt(filepath.Join(dir, "cpu"), 0, 1<<20); err != nil {
		return ChannelInfo{}, err
	}
	if f, err := os.OpenFile(c.RingPath, os.O_RDWR, 0); err == nil {
		f.Close()
		c.HasRing = true
	}
	return c, nil
}

// uioNode returns the name of the one uio/uioN entry of a device, "" when
// there is none.
func uioNode(p string) (string, error) {
	ents, err := os.ReadDir(filepath.Join(p, "uio"))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("vmbus: %w", err)
	}
	var names []string
	for _, e := range ents {
		n, ok := strings.CutPrefix(e.Name(), "uio")
		if _, err := strconv.ParseUint(n, 10, 31); ok && err == nil {
			names = append(names, e.Name())
		}
	}
	switch len(names) {
	case 0:
		return "", nil
	case 1:
		return names[0], nil
	}
	return "", fmt.Errorf("vmbus: %s: %d uio nodes (%s), want one", filepath.Join(p, "uio"), len(names), strings.Join(names, ", "))
}

// sysfsOptString reads an attribute with surrounding white space removed;
// present is false, without an error, when the file does not exist.
func sysfsOptString(path string) (s string, present bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("vmbus: %w", err)
	}
	return strings.TrimSpace(string(b)), true, nil
}

// sysfsString reads an attribute that must exist.
func sysfsString(path string) (string, error) {
	s, present, err := sysfsOptString(path)
	if err == nil && !present {
		err = fmt.Errorf("vmbus: %s: %w", path, fs.ErrNotExist)
	}
	return s, err
}

// sysfsGUID reads a GUID attribute; the kernel prints class_id and
// device_id as {%pUl}, with braces.
func sysfsGUID(path string) (GUID, error) {
	s, err := sysfsString(path)
	if err != nil {
		return GUID{}, err
	}
	g, err := ParseGUID(s)
	if err != nil {
		return GUID{}, fmt.Errorf("vmbus: %s: malformed guid %q", path, s)
	}
	return g, nil
}

// sysfsUint32 reads a decimal u32 attribute that must exist.
func sysfsUint32(path string) (uint32, error) {
	s, err := sysfsString(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("vmbus: %s: malformed number %q", path, s)
	}
	return uint32(v), nil
}

// sysfsOptInt reads a decimal attribute in [lo, hi]; -1 when absent.
func sysfsOptInt(path string, lo, hi int) (int, error) {
	s, present, err := sysfsOptString(path)
	if err != nil || !present {
		return -1, err
	}
	return sysfsParseInt(path, s, lo, hi)
}

// sysfsParseInt parses the contents s of attribute path as a decimal in
// [lo, hi].
func sysfsParseInt(path, s string, lo, hi int) (int, error) {
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("vmbus: %s: malformed number %q", path, s)
	}
	if v < lo || v > hi {
		return 0, fmt.Errorf("vmbus: %s: %d out of range [%d, %d]", path, v, lo, hi)
	}
	return v, nil
}

// sysfsLinkBase returns the base name of a symlink's target, "" when the
// link does not exist.
func sysfsLinkBase(path string) (string, error) {
	t, err := os.Readlink(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("vmbus: %w", err)
	}
	return filepath.Base(t), nil
}
