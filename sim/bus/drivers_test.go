package bus

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/internal/testutil"
	"github.com/vmbusd/vmbusd/vmbus"
)

// drvTestHost is a host under a fresh root on tmpfs when there is one.

// waitFor waits, without a wall-clock threshold of its own, until cond holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.WaitFor(t, 0, cond, what)
}

func drvTestHost(t *testing.T, p Profile) *Host {
	t.Helper()
	root := t.TempDir()
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "sim-drivers-"); err == nil {
			root = d
			t.Cleanup(func() { os.RemoveAll(d) })
		}
	}
	h, err := New(Config{Root: root, Profile: p})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func drvAdd(t *testing.T, h *Host, cfg DeviceConfig) *Device {
	t.Helper()
	d, err := h.AddDevice(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// drvWrite writes v to the attribute rel under the root, as `echo -n v >`
// does, and waits until the host has handled the write (applied or
// refused).
func drvWrite(t *testing.T, h *Host, rel, v string) {
	t.Helper()
	before := h.drv.writes.Load()
	f, err := os.OpenFile(filepath.Join(h.Root(), rel), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteString(v)
	if err = errors.Join(err, f.Close()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, fmt.Sprintf("the host to handle the write of %q to %s", v, rel), func() bool { return h.drv.writes.Load() != before })
}

func drvOverride(t *testing.T, h *Host, d *Device, v string) {
	t.Helper()
	drvWrite(t, h, filepath.Join(vmbusDevsDir, d.Instance().String(), "driver_override"), v)
}

func drvDriverFile(drv, attr string) string { return filepath.Join(vmbusDrvsDir, drv, attr) }

func drvRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func drvExists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// drvWantDriver checks Driver() and the driver link together.
func drvWantDriver(t *testing.T, h *Host, d *Device, want string) {
	t.Helper()
	if got := d.Driver(); got != want {
		t.Errorf("device %s: Driver() = %q, want %q", d.Instance(), got, want)
	}
	link := filepath.Join(d.Path(), "driver")
	target, err := os.Readlink(link)
	switch {
	case want == "" && !errors.Is(err, fs.ErrNotExist):
		t.Errorf("device %s: driver link %q (%v), want none", d.Instance(), target, err)
	case want != "" && (err != nil || filepath.Base(target) != want):
		t.Errorf("device %s: driver link %q (%v), want .../%s", d.Instance(), target, err, want)
	}
	bound := drvExists(filepath.Join(h.Root(), vmbusDrvsDir, want, d.Instance().String()))
	if want != "" && !bound {
		t.Errorf("device %s: not listed in drivers/%s", d.Instance(), want)
	}
}

// drvWantUIO checks that the device has a uio node (uio/uioN, the class
// link, R/dev/uioN socket), or none.
func drvWantUIO(t *testing.T, h *Host, d *Device, want bool) string {
	t.Helper()
	ents, _ := os.ReadDir(filepath.Join(d.Path(), "uio"))
	node := d.UIONode()
	if !want {
		if len(ents) != 0 || node != "" {
			t.Errorf("device %s: uio %v, node %q; want none", d.Instance(), ents, node)
		}
		return ""
	}
	if len(ents) != 1 || node == "" {
		t.Fatalf("device %s: uio %v, node %q; want one", d.Instance(), ents, node)
	}
	name := ents[0].Name()
	if filepath.Base(node) != name {
		t.Errorf("node %s for uio %s", node, name)
	}
	if st, err := os.Stat(node); err != nil || st.Mode().Type() != fs.ModeSocket {
		t.Errorf("%s: %v, want a socket", node, err)
	}
	if !drvExists(filepath.Join(h.Root(), uioClassDir, name)) {
		t.Errorf("no class/uio/%s", name)
	}
	return name
}

var drvTestNIC = vmbus.MustParseGUID("ed963694-e847-4b2a-85af-bc9cfc11d6f3")

func TestTreeHasModulesLoopbackAndRoutes(t *testing.T) {
	h := drvTestHost(t, DefaultProfile)
	root := h.Root()
	for _, drv := range []string{DriverUIO, DriverNetvsc} {
		link := filepath.Join(root, vmbusDrvsDir, drv, "module")
		sysfsWantLink(t, link, "../../../../module/"+drv, filepath.Join(root, moduleDir, drv))
		sysfsWantLink(t, filepath.Join(root, moduleDir, drv, "drivers", "vmbus:"+drv),
			"../../../bus/vmbus/drivers/"+drv, filepath.Join(root, vmbusDrvsDir, drv))
	}
	sysfsWantLink(t, filepath.Join(root, netClassDir, "lo"), "../../devices/virtual/net/lo", filepath.Join(root, virtNetDir, "lo"))
	sysfsWantFile(t, filepath.Join(root, netClassDir, "lo", "ifindex"), "1\n")
	sysfsWantAbsent(t, filepath.Join(root, netClassDir, "lo", "device"))
	if got := drvRead(t, filepath.Join(root, procNetDir, "route")); !strings.HasPrefix(got, "Iface\tDestination\tGateway \tFlags") || len(got) != 128 {
		t.Errorf("empty route table %q", got)
	}
	sysfsWantFile(t, filepath.Join(root, procNetDir, "ipv6_route"), "")
	// A second host is refused while the first runs; the next host on the
	// same tree keeps it.
	if _, err := New(Config{Root: root}); !errors.Is(err, ErrRootInUse) {
		t.Fatalf("second host on a live tree: %v", err)
	}
	h.Close()
	h2, err := New(Config{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	h2.Close()
	sysfsWantFile(t, filepath.Join(root, netClassDir, "lo", "ifindex"), "1\n")
}

func TestOfferedDriverDefaultsToUIO(t *testing.T) {
	h := drvTestHost(t, DefaultProfile)
	d := drvAdd(t, h, DeviceConfig{Class: vmbus.ClassTest})
	drvWantDriver(t, h, d, DriverUIO)
	if got := drvWantUIO(t, h, d, true); got != "uio0" {
		t.Errorf("first uio node %s, want uio0", got)
	}
	sysfsWantFile(t, filepath.Join(d.Path(), "driver_override"), "(null)\n")

	none := drvAdd(t, h, DeviceConfig{Class: vmbus.ClassNetwork, Driver: DriverNone})
	drvWantDriver(t, h, none, "")
	drvWantUIO(t, h, none, false)
	if !strings.HasPrefix(drvRead(t, filepath.Join(none.Path(), "uevent")), "MODALIAS=") {
		t.Error("unbound device's uevent has a DRIVER line")
	}

	for _, bad := range []DeviceConfig{
		{Class: vmbus.ClassTest, Driver: DriverNetvsc},
		{Class: vmbus.ClassNetwork, Driver: "e1000"},
		{Class: vmbus.ClassNetwork, Driver: DriverNetvsc, IfName: "a/b"},
		{Class: vmbus.ClassNetwork, Driver: DriverNetvsc, IfName: "sixteen-chars-xx"},
		{Class: vmbus.ClassNetwork, Driver: DriverNetvsc, MAC: net.HardwareAddr{1, 2}},
	} {
		if d, err := h.AddDevice(bad); err == nil {
			t.Errorf("AddDevice(%+v) = %s, want an error", bad, d.Instance())
		}
	}
}

func TestNetvscDeviceHasNetdevInSysfs(t *testing.T) {
	h := drvTestHost(t, DefaultProfile)
	root := h.Root()
	mac := net.HardwareAddr{0x00, 0x15, 0x5d, 0x01, 0x02, 0x03}
	d := drvAdd(t, h, DeviceConfig{Class: vmbus.ClassNetwork, Instance: drvTestNIC, Driver: DriverNetvsc, IfName: "eth1", MAC: mac})
	drvWantDriver(t, h, d, DriverNetvsc)
	drvWantUIO(t, h, d, false)
	if d.IfName() != "eth1" {
		t.Errorf("IfName() = %q, want eth1", d.IfName())
	}
	guid := drvTestNIC.String()
	real := filepath.Join(root, sysfsTestVMBusDir, guid)
	nd := filepath.Join(real, "net", "eth1")
	sysfsWantLink(t, filepath.Join(root, netClassDir, "eth1"), "../../devices/LNXSYSTM:00/LNXSYBUS:00/ACPI0004:00/VMBUS:00/"+guid+"/net/eth1", nd)
	sysfsWantLink(t, filepath.Join(nd, "device"), "../../../"+guid, real)
	sysfsWantLink(t, filepath.Join(nd, "subsystem"), "../../../../../../../../class/net", filepath.Join(root, netClassDir))
	sysfsWantFile(t, filepath.Join(nd, "address"), "00:15:5d:01:02:03\n")
	sysfsWantFile(t, filepath.Join(nd, "mtu"), "1500\n")
	sysfsWantFile(t, filepath.Join(nd, "operstate"), "up\n")
	sysfsWantFile(t, filepath.Join(nd, "ifindex"), "2\n")
	sysfsWantFile(t, filepath.Join(real, "uevent"), "DRIVER=hv_netvsc\nMODALIAS="+modalias(vmbus.ClassNetwork)+"\n")
	// Resolving an interface name the DPDK way.
	if got, err := filepath.EvalSymlinks(filepath.Join(root, netClassDir, "eth1", "device")); err != nil || filepath.Base(got) != guid {
		t.Errorf("class/net/eth1/device -> %s, %v", got, err)
	}

	// Without a name: the lowest free ethN; without a MAC: from the instance.
	d2 := drvAdd(t, h, DeviceConfig{Class: vmbus.ClassNetwork, Driver: DriverNetvsc})
	if d2.IfName() != "eth0" {
		t.Errorf("second NIC named %q, want eth0", d2.IfName())
	}
	inst := d2.Instance()
	if mac := d2.MAC(); mac[0] != inst[0]&^1 || string(mac[1:]) != string(inst[1:6]) {
		t.Errorf("derived MAC %v from instance %s", mac, d2.Instance())
	}
	// A name in use is not given twice.
	d3 := drvAdd(t, h, DeviceConfig{Class: vmbus.ClassNetwork, Driver: DriverNetvsc, IfName: "eth1"})
	if d3.IfName() != "eth2" {
		t.Errorf("third NIC asking for eth1 named %q, want eth2", d3.IfName())
	}
}

func TestDriverOverrideWritesFollowDriverSetOverride(t *testing.T) {
	h := drvTestHost(t, DefaultProfile)
	d := drvAdd(t, h, DeviceConfig{Class: vmbus.ClassNetwork, Driver: DriverNetvsc})
	file := filepath.Join(d.Path(), "driver_override")
	for _, tc := range []struct{ write, show string }{
		{"uio_hv_generic", "uio_hv_generic\n"},
		{"\n", "(null)\n"},
		{"hv_netvsc\n", "hv_netvsc\n"},
		{"", "(null)\n"},
		{"none\nrest", "none\n"},
		{"uio_hv_generic\x00junk", "uio_hv_generic\n"},
	} {
		drvOverride(t, h, d, tc.write)
		sysfsWantFile(t, file, tc.show)
	}
	// Setting an override neither unbinds nor probes.
	drvWantDriver(t, h, d, DriverNetvsc)
	sysfsWantMode(t, file, 0o644)
}

// The manual round trip of docs/protocol/ecosystem.md §1.8: override, unbind, bind; then unbind, clear,
// drivers_probe.
func TestOverrideMovesNICBetweenNetvscAndUIO(t *testing.T) {
	h := drvTestHost(t, DefaultProfile)
	root := h.Root()
	d := drvAdd(t, h, DeviceConfig{Class: vmbus.ClassNetwork, Instance: drvTestNIC, Driver: DriverNetvsc, IfName: "eth1"})
	guid := drvTestNIC.String()
	if err := h.SetRoutes([]Route{{Iface: "eth1", Dst: netip.MustParsePrefix("0.0.0.0/0"), Gateway: netip.MustParseAddr("10.0.0.1"), Metric: 100}}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(drvRead(t, filepath.Join(root, procNetDir, "route")), "eth1\t00000000") {
		t.Fatal("default route via eth1 not listed")
	}

	drvOverride(t, h, d, DriverUIO)
	drvWrite(t, h, drvDriverFile(DriverNetvsc, "unbind"), guid)
	drvWantDriver(t, h, d, "")
	sysfsWantAbsent(t, filepath.Join(root, netClassDir, "eth1"))
	sysfsWantAbsent(t, filepath.Join(d.Path(), "net"))
	if strings.Contains(drvRead(t, filepath.Join(root, procNetDir, "route")), "eth1") {
		t.Error("route via eth1 still listed after its netdev went")
	}
	drvWrite(t, h, drvDriverFile(DriverUIO, "bind"), guid+"\n")
	drvWantDriver(t, h, d, DriverUIO)
	drvWantUIO(t, h, d, true)
	if d.IfName() != "" {
		t.Errorf("IfName() = %q while uio has the device", d.IfName())
	}
	g := dialRawUIOGuest(t, d.UIONode())
	g.readHello()

	drvWrite(t, h, drvDriverFile(DriverUIO, "unbind"), guid)
	g.expectEOF()
	drvWantDriver(t, h, d, "")
	drvWantUIO(t, h, d, false)
	drvOverride(t, h, d, "\n")
	drvWrite(t, h, filepath.Join(vmbusBusDir, "drivers_probe"), guid)
	drvWantDriver(t, h, d, DriverNetvsc)
	if d.IfName() != "eth1" || !drvExists(filepath.Join(root, netClassDir, "eth1")) {
		t.Errorf("netdev after reprobe: %q", d.IfName())
	}
	sysfsWantFile(t, filepath.Join(root, netClassDir, "eth1", "ifindex"), "3\n") // a new netdev
	if !strings.Contains(drvRead(t, filepath.Join(root, procNetDir, "route")), "eth1\t00000000") {
		t.Error("default route via eth1 not back with its netdev")
	}
	// The driver files are empty again.
	for _, f := range []string{drvDriverFile(DriverUIO, "bind"), drvDriverFile(DriverUIO, "unbind"), filepath.Join(vmbusBusDir, "drivers_probe")} {
		if b, err := readWriteOnly(filepath.Join(root, f)); err != nil || len(b) != 0 {
			t.Errorf("%s holds %q (%v) after the write was applied", f, b, err)
		}
	}
}

func TestWritesTheKernelWouldFailChangeNothing(t *testing.T) {
	h := drvTestHost(t, DefaultProfile)
	nic := drvAdd(t, h, DeviceConfig{Class: vmbus.ClassNetwork, Driver: DriverNone})
	test := drvAdd(t, h, DeviceConfig{Class: vmbus.ClassTest, Driver: DriverNone})
	bound := drvAdd(t, h, DeviceConfig{Class: vmbus.ClassNetwork, Driver: DriverNetvsc})
	for _, w := range []struct{ file, value string }{
		{drvDriverFile(DriverUIO, "bind"), nic.Instance().String()},     // no override, no id: no match
		{drvDriverFile(DriverNetvsc, "bind"), test.Instance().String()}, // not a NIC
		{drvDriverFile(DriverUIO, "unbind"), bound.Instance().String()}, // bound elsewhere
		{drvDriverFile(DriverUIO, "bind"), "ffffffff-0000-0000-0000-000000000000"},
		{drvDriverFile(DriverUIO, "new_id"), "{" + vmbus.ClassNetwork.String() + "}"}, // braces: EINVAL
		{drvDriverFile(DriverUIO, "new_id"), "not a guid"},
		{drvDriverFile(DriverUIO, "remove_id"), vmbus.ClassNetwork.String()}, // not listed: ENODEV
		{filepath.Join(vmbusBusDir, "drivers_probe"), "nonexistent"},
		{filepath.Join(vmbusBusDir, "drivers_probe"), test.Instance().String()}, // nothing matches: stays unbound
	} {
		drvWrite(t, h, w.file, w.value)
	}
	drvWantDriver(t, h, nic, "")
	drvWantDriver(t, h, test, "")
	drvWantDriver(t, h, bound, DriverNetvsc)
	if ids := h.DynamicIDs(DriverUIO); len(ids) != 0 {
		t.Errorf("dynamic ids %v after malformed new_id writes", ids)
	}
	// Already bound: EBUSY, even with a matching override.
	drvOverride(t, h, bound, DriverUIO)
	drvWrite(t, h, drvDriverFile(DriverUIO, "bind"), bound.Instance().String())
	drvWantDriver(t, h, bound, DriverNetvsc)
}

func TestNewIDAttachesEveryUnboundMatchingDevice(t *testing.T) {
	h := drvTestHost(t, DefaultProfile)
	kernelNIC := drvAdd(t, h, DeviceConfig{Class: vmbus.ClassNetwork, Driver: DriverNetvsc})
	free := drvAdd(t, h, DeviceConfig{Class: vmbus.ClassNetwork, Driver: DriverNone})
	pinned := drvAdd(t, h, DeviceConfig{Class: vmbus.ClassNetwork, Driver: DriverNone})
	other := drvAdd(t, h, DeviceConfig{Class: vmbus.ClassTest, Driver: DriverNone})
	drvOverride(t, h, pinned, DriverNetvsc) // an override naming another driver wins over ids

	class := vmbus.ClassNetwork.String()
	drvWrite(t, h, drvDriverFile(DriverUIO, "new_id"), class+"\n")
	drvWantDriver(t, h, free, DriverUIO)
	drvWantUIO(t, h, free, true)
	drvWantDriver(t, h, kernelNIC, DriverNetvsc) // new_id does not steal bound devices
	drvWantDriver(t, h, pinned, "")
	drvWantDriver(t, h, other, "")
	if ids := h.DynamicIDs(DriverUIO); !slices.Equal(ids, []vmbus.GUID{vmbus.ClassNetwork}) {
		t.Errorf("dynamic ids %v", ids)
	}
	drvWrite(t, h, drvDriverFile(DriverUIO, "new_id"), class) // EEXIST
	if ids := h.DynamicIDs(DriverUIO); len(ids) != 1 {
		t.Errorf("dynamic ids %v after a duplicate new_id", ids)
	}

	// The DPDK recipe: with the id in place, unbind + bind needs no override.
	drvWrite(t, h, drvDriverFile(DriverNetvsc, "unbind"), kernelNIC.Instance().String())
	drvWrite(t, h, drvDriverFile(DriverUIO, "bind"), kernelNIC.Instance().String())
	drvWantDriver(t, h, kernelNIC, DriverUIO)

	drvWrite(t, h, drvDriverFile(DriverUIO, "remove_id"), class)
	if ids := h.DynamicIDs(DriverUIO); len(ids) != 0 {
		t.Errorf("dynamic ids %v after remove_id", ids)
	}
	drvWantDriver(t, h, free, DriverUIO) // remove_id unbinds nothing
	drvWrite(t, h, drvDriverFile(DriverUIO, "unbind"), free.Instance().String())
	drvWrite(t, h, drvDriverFile(DriverUIO, "bind"), free.Instance().String())
	drvWantDriver(t, h, free, "")
}

func TestDriversProbeTriesOverrideThenIDsInProbeOrder(t *testing.T) {
	h := drvTestHost(t, DefaultProfile)
	nic := drvAdd(t, h, DeviceConfig{Class: vmbus.ClassNetwork, Driver: DriverNone})
	guid := nic.Instance().String()
	probe := filepath.Join(vmbusBusDir, "drivers_probe")

	drvOverride(t, h, nic, DriverUIO)
	drvWrite(t, h, probe, guid)
	drvWantDriver(t, h, nic, DriverUIO)
	drvWrite(t, h, probe, guid) // bound: nothing to do
	drvWantDriver(t, h, nic, DriverUIO)

	// Override cleared: hv_netvsc registered first, so it wins even when
	// uio_hv_generic lists the class.
	drvWrite(t, h, drvDriverFile(DriverUIO, "new_id"), vmbus.ClassNetwork.String())
	drvWrite(t, h, drvDriverFile(DriverUIO, "unbind"), guid)
	drvOverride(t, h, nic, "")
	drvWrite(t, h, probe, guid)
	drvWantDriver(t, h, nic, DriverNetvsc)

	// "none" matches no driver: the device stays unbound.
	drvOverride(t, h, nic, DriverNone)
	drvWrite(t, h, drvDriverFile(DriverNetvsc, "unbind"), guid)
	drvWrite(t, h, probe, guid)
	drvWantDriver(t, h, nic, "")
}

func TestOverrideWrittenJustBeforeBindIsApplied(t *testing.T) {
	h := drvTestHost(t, DefaultProfile)
	nic := drvAdd(t, h, DeviceConfig{Class: vmbus.ClassNetwork, Driver: DriverNone})
	// Write the override behind the watcher's back (as if its event were
	// still queued): the bind's probe reads the file.
	h.drv.unwatch(nic.drv.wd)
	if err := os.WriteFile(filepath.Join(nic.Path(), "driver_override"), []byte("uio_hv_generic\n"), 0); err != nil {
		t.Fatal(err)
	}
	drvWrite(t, h, drvDriverFile(DriverUIO, "bind"), nic.Instance().String())
	drvWantDriver(t, h, nic, DriverUIO)
}

func TestHvSockOfferNeverMatchesUIO(t *testing.T) {
	h := drvTestHost(t, DefaultProfile)
	service := vmbus.HvSockServiceID(5000)
	d := drvAdd(t, h, DeviceConfig{Class: service, HvSock: true, NotMonitored: true})
	drvWantDriver(t, h, d, DriverUIO) // the simulator's stand-in for the kernel's hv_sock
	guid := d.Instance().String()

	drvWrite(t, h, drvDriverFile(DriverUIO, "unbind"), guid)
	drvWantDriver(t, h, d, "")
	drvOverride(t, h, d, DriverUIO)
	drvWrite(t, h, drvDriverFile(DriverUIO, "bind"), guid)
	drvWrite(t, h, drvDriverFile(DriverUIO, "new_id"), service.String())
	drvWrite(t, h, filepath.Join(vmbusBusDir, "drivers_probe"), guid)
	drvWantDriver(t, h, d, "")
	drvWantUIO(t, h, d, false)
}

func TestUnbindEndsGuestSessionButDeviceStays(t *testing.T) {
	h := drvTestHost(t, DefaultProfile)
	d := drvAdd(t, h, DeviceConfig{Class: vmbus.ClassTest})
	guid := d.Instance().String()
	g := dialRawUIOGuest(t, d.UIONode())
	g.readHello()
	waitFor(t, "session", func() bool { return d.Session() != nil })
	sess := d.Session()

	drvWrite(t, h, drvDriverFile(DriverUIO, "unbind"), guid)
	g.expectEOF()
	select {
	case <-sess.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("session still running after unbind")
	}
	if d.Session() != nil {
		t.Error("Session() not nil after unbind")
	}
	if _, err := os.Stat(d.Path()); err != nil {
		t.Errorf("device gone after unbind: %v", err)
	}
	if h.Device(d.Instance()) != d {
		t.Error("host forgot the device after unbind")
	}
	sysfsWantAbsent(t, filepath.Join(h.Root(), "dev", "uio0"))
	sysfsWantAbsent(t, filepath.Join(h.Root(), uioClassDir, "uio0"))
	sysfsWantAbsent(t, filepath.Join(h.Root(), devCharDir, "243:0"))
	sysfsWantAbsent(t, filepath.Join(d.Path(), "channels", fmt.Sprint(d.RelID()), "ring"))

	drvOverride(t, h, d, DriverUIO)
	drvWrite(t, h, drvDriverFile(DriverUIO, "bind"), guid)
	drvWantUIO(t, h, d, true)
	g2 := dialRawUIOGuest(t, d.UIONode())
	g2.readHello()
	waitFor(t, "second session", func() bool { return d.Opens() == 2 })
}

func TestUIOMinorIsLowestFree(t *testing.T) {
	h := drvTestHost(t, DefaultProfile)
	var ds []*Device
	for range 3 {
		ds = append(ds, drvAdd(t, h, DeviceConfig{Class: vmbus.ClassTest}))
	}
	drvWrite(t, h, drvDriverFile(DriverUIO, "unbind"), ds[0].Instance().String())
	d := drvAdd(t, h, DeviceConfig{Class: vmbus.ClassTest})
	if got := drvWantUIO(t, h, d, true); got != "uio0" {
		t.Errorf("new device got %s, want the freed uio0", got)
	}
	if err := ds[1].Rescind(); err != nil {
		t.Fatal(err)
	}
	drvOverride(t, h, ds[0], DriverUIO)
	drvWrite(t, h, drvDriverFile(DriverUIO, "bind"), ds[0].Instance().String())
	if got := drvWantUIO(t, h, ds[0], true); got != "uio1" {
		t.Errorf("rebound device got %s, want the rescinded device's uio1", got)
	}
}

func TestLegacyUIOProbeRefusesUnmonitoredChannel(t *testing.T) {
	h := drvTestHost(t, ProfileLegacy)
	d := drvAdd(t, h, DeviceConfig{Class: vmbus.ClassNetwork, Driver: DriverNetvsc, NotMonitored: true})
	drvOverride(t, h, d, DriverUIO)
	drvWrite(t, h, drvDriverFile(DriverNetvsc, "unbind"), d.Instance().String())
	drvWrite(t, h, drvDriverFile(DriverUIO, "bind"), d.Instance().String())
	drvWantDriver(t, h, d, "")
	drvWantUIO(t, h, d, false)
	if _, err := h.AddDevice(DeviceConfig{Class: vmbus.ClassTest, NotMonitored: true}); err == nil {
		t.Error("legacy profile offered an unmonitored device bound to uio")
	}
}

func TestRescindRemovesUnboundAndKernelNICDevices(t *testing.T) {
	h := drvTestHost(t, DefaultProfile)
	root := h.Root()
	unbound := drvAdd(t, h, DeviceConfig{Class: vmbus.ClassTest, Driver: DriverNone})
	nic := drvAdd(t, h, DeviceConfig{Class: vmbus.ClassNetwork, Driver: DriverNetvsc, IfName: "eth7"})
	for _, d := range []*Device{unbound, nic} {
		path := d.Path()
		if err := d.Rescind(); err != nil {
			t.Fatal(err)
		}
		sysfsWantAbsent(t, path)
		sysfsWantAbsent(t, filepath.Join(root, sysfsTestVMBusDir, d.Instance().String()))
	}
	sysfsWantAbsent(t, filepath.Join(root, netClassDir, "eth7"))
	sysfsWantAbsent(t, filepath.Join(root, vmbusDrvsDir, DriverNetvsc, nic.Instance().String()))
	// A write naming a rescinded device is refused.
	drvWrite(t, h, filepath.Join(vmbusBusDir, "drivers_probe"), nic.Instance().String())
}

func TestSetRoutesWritesProcNetRoute(t *testing.T) {
	h := drvTestHost(t, DefaultProfile)
	root := h.Root()
	drvAdd(t, h, DeviceConfig{Class: vmbus.ClassNetwork, Driver: DriverNetvsc, IfName: "eth0"})
	err := h.SetRoutes([]Route{
		{Iface: "eth0", Dst: netip.MustParsePrefix("0.0.0.0/0"), Gateway: netip.MustParseAddr("10.0.0.1"), Metric: 100},
		{Iface: "eth0", Dst: netip.MustParsePrefix("10.0.0.0/24"), Metric: 100},
		{Iface: "eth0", Dst: netip.MustParsePrefix("::/0"), Gateway: netip.MustParseAddr("fe80::1"), Metric: 1024},
		{Iface: "eth0", Dst: netip.MustParsePrefix("fd00::/64"), Metric: 256},
		{Iface: "eth9", Dst: netip.MustParsePrefix("192.168.0.0/16")}, // no such interface
	})
	if err != nil {
		t.Fatal(err)
	}
	pad := func(s string) string { return fmt.Sprintf("%-127s\n", s) }
	want := pad("Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT") +
		pad("eth0\t00000000\t0100000A\t0003\t0\t0\t100\t00000000\t0\t0\t0") +
		pad("eth0\t0000000A\t00000000\t0001\t0\t0\t100\t00FFFFFF\t0\t0\t0")
	sysfsWantFile(t, filepath.Join(root, procNetDir, "route"), want)
	want6 := "00000000000000000000000000000000 00 00000000000000000000000000000000 00 fe800000000000000000000000000001 00000400 00000001 00000000 00000003     eth0\n" +
		"fd000000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0\n"
	sysfsWantFile(t, filepath.Join(root, procNetDir, "ipv6_route"), want6)
	sysfsWantMode(t, filepath.Join(root, procNetDir, "route"), 0o444)

	if err := h.SetRoutes([]Route{{Iface: "bad/name", Dst: netip.MustParsePrefix("0.0.0.0/0")}}); err == nil {
		t.Error("SetRoutes took a bad interface name")
	}
	if err := h.SetRoutes([]Route{{Iface: "eth0", Dst: netip.MustParsePrefix("0.0.0.0/0"), Gateway: netip.MustParseAddr("fe80::1")}}); err == nil {
		t.Error("SetRoutes took an IPv6 gateway for an IPv4 route")
	}
}

func TestRescindReturnsTheMonitorID(t *testing.T) {
	h := drvTestHost(t, DefaultProfile)
	// More offers than there are monitor ids: each rescind gives its id
	// back, so the next offer gets it again (the lowest free one).
	first := -1
	for i := 0; i < 2*vmbus.MaxMonitorID; i++ {
		d := drvAdd(t, h, DeviceConfig{Class: vmbus.ClassTest, Driver: DriverNone})
		if first < 0 {
			first = d.MonitorID()
		}
		if d.MonitorID() != first {
			t.Fatalf("offer %d got monitor id %d, want the freed %d", i, d.MonitorID(), first)
		}
		if err := d.Rescind(); err != nil {
			t.Fatal(err)
		}
	}
}
