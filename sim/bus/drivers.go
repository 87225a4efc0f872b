package bus

// Driver binding: which guest kernel driver owns each device, and the
// simulated kernel's reaction to the sysfs writes that move a device between
// drivers (docs/protocol/ecosystem.md §1.3, §1.8; docs/protocol/vmbus-ring.md §1.10; vmbus_drv.c,
// drivers/base/bus.c, drivers/base/driver.c driver_set_override).
//
// A device is bound to one driver at a time, or to none:
//
//	uio_hv_generic  uio/uioN, R/sys/class/uio/uioN, R/sys/dev/char/243:N and the
//	                R/dev/uioN socket; a guest that opens it gets a session
//	                running the device's Service (device.go, devnode.go)
//	hv_netvsc       a kernel NIC, network class only: net/<ifname>/ and
//	                R/sys/class/net/<ifname> (drivers_net.go); no channel is opened
//	(unbound)       neither
//
//	               drivers/D/bind G (D matches, G unbound)
//	               drivers/D/new_id C (D matches, G unbound, class C)
//	               drivers_probe G (first matching driver in probe order)
//	   unbound  -------------------------------------------------->  bound to D
//	      ^                                                              |
//	      '--------------------------------------------------------------'
//	               drivers/D/unbind G (a guest holding uio is cut off: EOF)
//	               Rescind (the device goes altogether)
//
// Matching is vmbus_match + hv_vmbus_get_id: an hv_sock offer matches only
// the hv_sock driver; a driver_override naming another driver never
// matches; then the dynamic ids (new_id), then the static id table (only
// hv_netvsc has one: the network class; uio_hv_generic has none), and last an
// override naming the driver matches by itself. driver_override alone
// neither unbinds nor probes: it only counts when something probes.
//
// The attribute files are regular files on tmpfs. The host watches them
// with inotify (drivers_watch.go: IN_CLOSE_WRITE on the driver directories,
// the bus directory and every device's driver_override), reads what was
// written, truncates the file again and applies it with the kernel's
// semantics. A simulator cannot
// fail a write(2): a write the kernel would refuse (ENODEV: no such device or
// no match; EBUSY: already bound; EEXIST: id already listed; EINVAL) is
// ignored and logged instead, so a caller must check the outcome (the driver
// link, the uio node or the netdev), as a careful bring-up script does on a
// real system anyway. Two writes to one file closer together than the host
// reads them can merge (the second wins); a probe re-reads driver_override,
// so an override written just before a bind is never missed.
//
// The hv_sock driver directory exists, but binding to it is not simulated:
// in the simulator an hv_sock offer is served through uio_hv_generic
// (docs/uio-contract.md §7), which the matching rules above never let it back into.

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/vmbusd/vmbusd/vmbus"
)

// Driver names for DeviceConfig.Driver and Device.Driver.
const (
	DriverUIO    = uioDriverName // uio_hv_generic
	DriverNetvsc = "hv_netvsc"
	// DriverNone offers a device that no driver has claimed (as a
	// driver_override of "none" leaves one).
	DriverNone   = "none"
	driverHvSock = "hv_sock"
)

// probeOrder is the order in which device_attach tries the drivers: the
// order they registered on the bus (bus_for_each_drv). hv_netvsc and hv_sock
// load at boot; uio_hv_generic when the operator loads it. So a
// drivers_probe of a NIC whose override is clear goes to hv_netvsc even when
// uio_hv_generic has the network class as a dynamic id.
var probeOrder = []string{DriverNetvsc, driverHvSock, DriverUIO}

// devBinding is a device's driver state (Device.drv).
type devBinding struct {
	// mu serialises the device's driver changes (offer, bind, unbind,
	// driver_override, rescind). It is taken before Device.mu and
	// Host.mu, never while holding them.
	mu sync.Mutex

	// offered is set once the offer has made the device visible; after
	// that Rescind undoes the binding. Written under mu and Device.mu.
	offered bool

	// Under mu and Device.mu (written holding both; read holding either):
	name    string // the bound driver; "" when unbound
	ifName  string // hv_netvsc's netdev
	ifIndex int

	// Under mu:
	override string // driver_override; "" is NULL
	shown    string // what the driver_override file was last given
	wd       int    // inotify watch of driver_override; 0 when none
}

// driverCore is the host's half of binding: dynamic ids, the inotify
// watcher, uio minor and netdev allocation, routes.
type driverCore struct {
	h   *Host
	ino *os.File // inotify, non-blocking: Close wakes the reader

	mu          sync.Mutex
	dynIDs      map[string][]vmbus.GUID // driver -> new_id list
	watches     map[int]watchTarget     // inotify wd -> what it watches
	uioUsed     map[int]bool            // uio minors in use (idr)
	ifUsed      map[string]bool         // netdev names in use
	nextIfIndex int
	routes      []Route

	writes atomic.Uint64 // writes handled, applied or refused (tests wait on it)
}

type watchTarget struct {
	driver string  // a driver directory: bind, unbind, new_id, remove_id
	bus    bool    // R/sys/bus/vmbus: drivers_probe
	dev    *Device // a device's driver_override
}

// writeError is a write the kernel would have failed with errno.
type writeError struct {
	errno unix.Errno
	why   string
}

func (e *writeError) Error() string { return unix.ErrnoName(e.errno) + ": " + e.why }

func refuse(errno unix.Errno, format string, args ...any) error {
	return &writeError{errno: errno, why: fmt.Sprintf(format, args...)}
}

// sysfsName is a device name as bus_find_device_by_name compares it
// (sysfs_streq: one trailing newline does not count).
func sysfsName(v string) string { return strings.TrimSuffix(v, "\n") }

// deviceByName finds an offered device by its bus name, the instance GUID.
func (ds *driverCore) deviceByName(v string) *Device {
	name := sysfsName(v)
	for _, d := range ds.h.Devices() {
		if d.cfg.Instance.String() == name {
			return d
		}
	}
	return nil
}

// parseKernelGUID is guid_parse: 36 characters of canonical text at the
// start of the buffer; anything after them is ignored.
func parseKernelGUID(v string) (vmbus.GUID, error) {
	if len(v) < 36 || strings.ContainsAny(v[:36], "{} \t\n") {
		return vmbus.GUID{}, refuse(unix.EINVAL, "%q is not a GUID", strings.TrimSpace(v))
	}
	g, err := vmbus.ParseGUID(v[:36])
	if err != nil {
		return vmbus.GUID{}, refuse(unix.EINVAL, "%q is not a GUID", strings.TrimSpace(v))
	}
	return g, nil
}

// bindWritten is drivers/<drv>/bind (bind_store): the device must exist,
// match the driver and have no driver yet.
func (ds *driverCore) bindWritten(drv, v string) error {
	d := ds.deviceByName(v)
	if d == nil {
		return refuse(unix.ENODEV, "no device %q", sysfsName(v))
	}
	d.drv.mu.Lock()
	defer d.drv.mu.Unlock()
	if !d.visible() {
		return refuse(unix.ENODEV, "no device %q", sysfsName(v))
	}
	d.syncOverrideLocked()
	if !ds.matches(d, drv) {
		return refuse(unix.ENODEV, "%s does not match device %s", drv, d.cfg.Instance)
	}
	if d.drv.name != "" {
		return refuse(unix.EBUSY, "device %s is bound to %s", d.cfg.Instance, d.drv.name)
	}
	return d.attachLocked(drv)
}

// unbindWritten is drivers/<drv>/unbind (unbind_store): only a device bound
// to this driver.
func (ds *driverCore) unbindWritten(drv, v string) error {
	d := ds.deviceByName(v)
	if d == nil {
		return refuse(unix.ENODEV, "no device %q", sysfsName(v))
	}
	d.drv.mu.Lock()
	defer d.drv.mu.Unlock()
	if !d.visible() || d.drv.name != drv {
		return refuse(unix.ENODEV, "device %s is not bound to %s", sysfsName(v), drv)
	}
	return d.detachLocked()
}

// probeWritten is R/sys/bus/vmbus/drivers_probe (drivers_probe_store,
// bus_rescan_devices_helper): a device with no driver is offered to every
// driver in probe order; finding none is not an error.
func (ds *driverCore) probeWritten(v string) error {
	d := ds.deviceByName(v)
	if d == nil {
		return refuse(unix.ENODEV, "no device %q", sysfsName(v))
	}
	d.drv.mu.Lock()
	defer d.drv.mu.Unlock()
	if !d.visible() {
		return refuse(unix.ENODEV, "no device %q", sysfsName(v))
	}
	if d.drv.name != "" {
		return nil
	}
	d.syncOverrideLocked()
	d.probeLocked()
	return nil
}

// newIDWritten is drivers/<drv>/new_id (new_id_store, vmbus_add_dynid):
// the class becomes a dynamic id and every device without a driver that now
// matches is attached (driver_attach).
func (ds *driverCore) newIDWritten(drv, v string) error {
	g, err := parseKernelGUID(v)
	if err != nil {
		return err
	}
	ds.mu.Lock()
	if slices.Contains(ds.dynIDs[drv], g) {
		ds.mu.Unlock()
		return refuse(unix.EEXIST, "%s already lists %s", drv, g)
	}
	ds.dynIDs[drv] = append(ds.dynIDs[drv], g)
	ds.mu.Unlock()
	for _, d := range ds.h.Devices() {
		d.drv.mu.Lock()
		if d.visible() && d.drv.name == "" {
			d.syncOverrideLocked()
			if ds.matches(d, drv) {
				if err := d.attachLocked(drv); err != nil {
					ds.h.log.Warn("sim: probe failed", "device", d.cfg.Instance.String(), "driver", drv, "err", err)
				}
			}
		}
		d.drv.mu.Unlock()
	}
	return nil
}

// removeIDWritten is drivers/<drv>/remove_id: the dynamic id goes; bound
// devices stay bound.
func (ds *driverCore) removeIDWritten(drv, v string) error {
	g, err := parseKernelGUID(v)
	if err != nil {
		return err
	}
	ds.mu.Lock()
	defer ds.mu.Unlock()
	i := slices.Index(ds.dynIDs[drv], g)
	if i < 0 {
		return refuse(unix.ENODEV, "%s does not list %s", drv, g)
	}
	ds.dynIDs[drv] = slices.Delete(ds.dynIDs[drv], i, i+1)
	return nil
}

// overrideWritten applies a write to a device's driver_override.
func (ds *driverCore) overrideWritten(d *Device) {
	d.drv.mu.Lock()
	defer d.drv.mu.Unlock()
	if d.visible() && d.syncOverrideLocked() {
		ds.writes.Add(1)
	}
}

// matches is vmbus_match with hv_vmbus_get_id (vmbus_drv.c).
func (ds *driverCore) matches(d *Device, drv string) bool {
	if d.cfg.HvSock {
		return drv == driverHvSock // "The hv_sock driver handles all hv_sock offers."
	}
	ov := d.drv.override
	if ov != "" && ov != drv {
		return false
	}
	ds.mu.Lock()
	dyn := slices.Contains(ds.dynIDs[drv], d.cfg.Class)
	ds.mu.Unlock()
	if dyn {
		return true
	}
	if drv == DriverNetvsc && d.cfg.Class == vmbus.ClassNetwork {
		return true // netvsc_id_table
	}
	return ov == drv // the override's dummy id
}

// visible reports whether the device is on the bus: offered and not
// rescinded. Takes Device.mu.
func (d *Device) visible() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.drv.offered && !d.rescinded
}

// syncOverrideLocked applies what is in driver_override if it is not what
// the host last put there (a write the watcher has not handled yet), and
// reports whether it did. d.drv.mu is held.
func (d *Device) syncOverrideLocked() bool {
	b, err := os.ReadFile(filepath.Join(d.path, "driver_override"))
	if err != nil || string(b) == d.drv.shown {
		return false
	}
	d.setOverrideLocked(string(b))
	return true
}

// setOverrideLocked is driver_set_override: the text up to the first NUL
// or newline; empty (so also a lone "\n") clears it. The file then shows it
// as driver_override_show does ("%s\n", "(null)" when clear). Setting it
// neither unbinds nor probes. d.drv.mu is held.
func (d *Device) setOverrideLocked(v string) {
	h := d.host
	if i := strings.IndexByte(v, 0); i >= 0 {
		v = v[:i]
	}
	if len(v) >= 4096-1 { // PAGE_SIZE - 1: EINVAL, the old value stays
		h.log.Warn("sim: driver_override refused (EINVAL: too long)", "device", d.cfg.Instance.String())
	} else {
		if i := strings.IndexByte(v, '\n'); i >= 0 {
			v = v[:i]
		}
		d.drv.override = v
		h.log.Info("sim: driver_override", "device", d.cfg.Instance.String(), "value", v)
	}
	d.drv.shown = "(null)\n"
	if d.drv.override != "" {
		d.drv.shown = d.drv.override + "\n"
	}
	// In place, not renamed: the watch is on this inode.
	p := filepath.Join(d.path, "driver_override")
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	if err == nil {
		_, err = f.WriteString(d.drv.shown)
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		h.log.Warn("sim: driver_override", "device", d.cfg.Instance.String(), "err", err)
	}
}

// probeLocked is device_attach: the first driver in probe order that
// matches and probes successfully gets the device. d.drv.mu is held.
func (d *Device) probeLocked() {
	ds := d.host.drv
	for _, drv := range probeOrder {
		if !ds.matches(d, drv) {
			continue
		}
		err := d.attachLocked(drv)
		if err == nil {
			return
		}
		d.host.log.Warn("sim: probe failed", "device", d.cfg.Instance.String(), "driver", drv, "err", err)
	}
	d.host.log.Info("sim: no driver for device", "device", d.cfg.Instance.String())
}

// attachLocked is the driver's probe. d.drv.mu is held; the device is
// unbound.
func (d *Device) attachLocked(drv string) error {
	var err error
	switch drv {
	case DriverUIO:
		err = d.attachUIOLocked()
	case DriverNetvsc:
		err = d.attachNetvscLocked()
	default:
		err = fmt.Errorf("sim: binding to %s is not simulated", drv)
	}
	if err != nil {
		return err
	}
	d.host.log.Info("sim: device bound", "device", d.cfg.Instance.String(), "driver", drv,
		"uio", d.uioNameLocked(), "ifname", d.drv.ifName)
	return nil
}

// detachLocked is the driver's remove. d.drv.mu is held.
func (d *Device) detachLocked() error {
	drv := d.drv.name
	var err error
	switch drv {
	case "":
		return nil
	case DriverUIO:
		err = d.detachUIOLocked()
	case DriverNetvsc:
		err = d.detachNetvscLocked()
	}
	d.host.log.Info("sim: device unbound", "device", d.cfg.Instance.String(), "driver", drv)
	return err
}

// uioNameLocked is "uioN" while uio_hv_generic has the device, else "".
// d.drv.mu is held.
func (d *Device) uioNameLocked() string {
	if d.drv.name != DriverUIO {
		return ""
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return fmt.Sprintf("uio%d", d.uioN)
}

// attachUIOLocked is hv_uio_probe: the lowest free uio minor (idr_alloc),
// the R/dev/uioN node, then the sysfs uio device with its maps. The
// buffers and their GPADL handles are the device's for its lifetime (a real
// probe allocates and registers new ones).
func (d *Device) attachUIOLocked() error {
	h := d.host
	if d.cfg.NotMonitored && h.cfg.Profile.RequiresMonitor() {
		return fmt.Errorf("sim: kernel profile %s: uio_hv_generic refuses a channel without a monitor id", h.cfg.Profile)
	}
	n := h.drv.allocUIO()
	d.mu.Lock()
	d.uioN = n
	d.mu.Unlock()
	node, err := listenNode(nodeConfig{
		Path:          filepath.Join(h.cfg.Root, "dev", fmt.Sprintf("uio%d", n)),
		WantRingSizes: d.cfg.HvSock,
		Open:          d.open,
		Control:       d.control,
		Closed:        d.closed,
		Violation:     func(what string) { h.violation(d.cfg.Instance, what) },
		Logger:        h.log,
	})
	if err != nil {
		h.drv.freeUIO(n)
		return err
	}
	// A guest may open the node as soon as it exists.
	d.mu.Lock()
	d.node = node
	d.mu.Unlock()
	txrx := uint64(2 * d.cfg.RingSize)
	if d.cfg.HvSock {
		// The opener chooses; until then the default pair (open rewrites it).
		txrx = uint64(2 * vmbus.ClampHvSockRing(0))
	}
	maps := []uioMap{
		{Name: "txrx_rings", Size: txrx},
		{Name: "int_page", Size: 4096},
		{Name: "monitor_page", Size: vmbus.MonitorPageSize},
	}
	if d.cfg.RecvBuffer > 0 {
		maps = append(maps,
			uioMap{Name: fmt.Sprintf("recv:%d", d.recvGPADL), Size: uint64(d.cfg.RecvBuffer)},
			uioMap{Name: fmt.Sprintf("send:%d", d.sendGPADL), Size: uint64(d.cfg.SendBuffer)})
	}
	// Driver() says so before sysfs does: whoever sees the links
	// complete also sees Driver().
	d.setBoundLocked(DriverUIO, "", 0)
	if err := writeUIONode(h.cfg.Root, d.path, n, maps); err != nil {
		d.setBoundLocked("", "", 0)
		node.Close()
		d.mu.Lock()
		d.node = nil
		d.mu.Unlock()
		h.drv.freeUIO(n)
		return err
	}
	return nil
}

// detachUIOLocked is hv_uio_remove: a guest holding the device open is cut
// off as by a rescind (it reads EOF, standing for EIO), its session stops,
// and the uio device and node go. The device itself stays.
func (d *Device) detachUIOLocked() error {
	h := d.host
	d.setBoundLocked("", "", 0)
	d.mu.Lock()
	node, n := d.node, d.uioN
	d.node = nil
	d.mu.Unlock()
	var errs []error
	if node != nil {
		errs = append(errs, node.Close()) // closed() stops the session
	}
	if s := d.Session(); s != nil {
		s.stop()
	}
	errs = append(errs, removeUIONode(h.cfg.Root, d.path, n))
	h.drv.freeUIO(n)
	return errors.Join(errs...)
}

func (ds *driverCore) allocUIO() int {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	n := 0
	for ds.uioUsed[n] {
		n++
	}
	ds.uioUsed[n] = true
	return n
}

func (ds *driverCore) freeUIO(n int) {
	ds.mu.Lock()
	delete(ds.uioUsed, n)
	ds.mu.Unlock()
}

// probeOffered finishes an offer: the device becomes visible on the bus and
// is bound to its configured driver. On failure the device is removed.
func (d *Device) probeOffered() error {
	h := d.host
	d.drv.mu.Lock()
	defer d.drv.mu.Unlock()
	d.mu.Lock()
	if d.rescinded { // Host.Close ran while the device was being offered
		d.mu.Unlock()
		removeDevice(h.cfg.Root, d.path)
		return fmt.Errorf("sim: device %s rescinded while being offered", d.cfg.Instance)
	}
	d.drv.offered = true
	d.mu.Unlock()
	d.drv.shown = "(null)\n" // as writeDevice wrote it
	wd, err := h.drv.watch(filepath.Join(d.path, "driver_override"), watchTarget{dev: d})
	if err != nil {
		// Overrides are still applied when something probes.
		h.log.Warn("sim: device offered without an override watch", "device", d.cfg.Instance.String(), "err", err)
	}
	d.drv.wd = wd
	switch d.cfg.Driver {
	case DriverUIO:
		err = d.attachUIOLocked()
	case DriverNetvsc:
		err = d.attachNetvscLocked()
	}
	if err != nil {
		h.drv.unwatch(d.drv.wd)
		d.drv.wd = 0
		d.mu.Lock()
		d.drv.offered = false
		d.mu.Unlock()
		removeDevice(h.cfg.Root, d.path)
		return err
	}
	h.log.Info("device offered", "class", vmbus.ClassName(d.cfg.Class), "instance", d.cfg.Instance.String(),
		"relid", d.relid, "monitor_id", d.mon, "driver", d.cfg.Driver, "uio", d.uioNameLocked(), "ifname", d.drv.ifName)
	return nil
}

// detachForRescind unbinds the device as part of its rescind.
func (d *Device) detachForRescind() error {
	d.drv.mu.Lock()
	defer d.drv.mu.Unlock()
	d.host.drv.unwatch(d.drv.wd)
	d.drv.wd = 0
	return d.detachLocked()
}

// fillDriver defaults and checks the driver fields of a DeviceConfig.
func (c *DeviceConfig) fillDriver() error {
	switch c.Driver {
	case "":
		c.Driver = DriverUIO
	case DriverUIO, DriverNone:
	case DriverNetvsc:
		if c.Class != vmbus.ClassNetwork || c.HvSock {
			return fmt.Errorf("sim: device %s: hv_netvsc binds only the network class", c.Instance)
		}
	default:
		return fmt.Errorf("sim: device %s: driver %q: want %s, %s or %s", c.Instance, c.Driver, DriverUIO, DriverNetvsc, DriverNone)
	}
	if c.MAC != nil && len(c.MAC) != 6 {
		return fmt.Errorf("sim: device %s: MAC %v: want 6 bytes", c.Instance, c.MAC)
	}
	if c.IfName != "" && !validIfName(c.IfName) {
		return fmt.Errorf("sim: device %s: bad interface name %q", c.Instance, c.IfName)
	}
	return nil
}

// setBoundLocked records the bound driver (and netdev). d.drv.mu is held.
func (d *Device) setBoundLocked(drv, ifName string, ifIndex int) {
	d.mu.Lock()
	d.drv.name, d.drv.ifName, d.drv.ifIndex = drv, ifName, ifIndex
	d.mu.Unlock()
}

// Driver returns the driver the device is bound to: DriverUIO,
// DriverNetvsc, or "" when unbound.
func (d *Device) Driver() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.drv.name
}

// IfName returns the name of the device's kernel netdev while hv_netvsc
// has it, else "".
func (d *Device) IfName() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.drv.ifName
}

// MAC returns the NIC's permanent address: DeviceConfig.MAC, or one derived
// from the instance GUID (its first six bytes, unicast), which is the MAC
// itself for a NIC whose instance NewNIC derived from its MAC.
func (d *Device) MAC() net.HardwareAddr {
	if d.cfg.MAC != nil {
		return slices.Clone(d.cfg.MAC)
	}
	m := net.HardwareAddr(slices.Clone(d.cfg.Instance[:6]))
	m[0] &^= 1
	return m
}

// DynamicIDs returns the classes written to a driver's new_id and not
// removed since.
func (h *Host) DynamicIDs(driver string) []vmbus.GUID {
	h.drv.mu.Lock()
	defer h.drv.mu.Unlock()
	return slices.Clone(h.drv.dynIDs[driver])
}
