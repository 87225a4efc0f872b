package bind_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/internal/bind"
	"github.com/vmbusd/vmbusd/sim"
	"github.com/vmbusd/vmbusd/vmbus"
)

var (
	mgmtNIC = vmbus.MustParseGUID("11111111-2222-4333-8444-555555555555")
	dataNIC = vmbus.MustParseGUID("66666666-7777-4888-9999-aaaaaaaaaaaa")
	dataMAC = net.HardwareAddr{0x00, 0x15, 0x5d, 0xaa, 0xbb, 0xcc}
)

// testSystem is a simulated guest with two kernel NICs: eth0 carries the
// default route, eth1 a data subnet.
type testSystem struct {
	h     *sim.Host
	root  string
	state string
	mgmt  *sim.Device
	data  *sim.Device
	opts  bind.Options
	ctx   context.Context
}

func newTestSystem(t *testing.T, p sim.Profile, notMonitored bool) *testSystem {
	t.Helper()
	root := t.TempDir()
	if d, err := os.MkdirTemp("/dev/shm", "bind-test-"); err == nil {
		root = d
		t.Cleanup(func() { os.RemoveAll(d) })
	}
	h, err := sim.New(sim.Config{Root: root, Profile: p})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	s := &testSystem{h: h, root: h.Root(), state: filepath.Join(t.TempDir(), "state"), ctx: context.Background()}
	s.mgmt, err = h.AddDevice(sim.DeviceConfig{Class: vmbus.ClassNetwork, Instance: mgmtNIC, Driver: sim.DriverNetvsc, IfName: "eth0"})
	if err != nil {
		t.Fatal(err)
	}
	s.data, err = h.AddDevice(sim.DeviceConfig{Class: vmbus.ClassNetwork, Instance: dataNIC, Driver: sim.DriverNetvsc,
		IfName: "eth1", MAC: dataMAC, NotMonitored: notMonitored})
	if err != nil {
		t.Fatal(err)
	}
	err = h.SetRoutes([]sim.Route{
		{Iface: "eth0", Dst: netip.MustParsePrefix("0.0.0.0/0"), Gateway: netip.MustParseAddr("10.0.0.1"), Metric: 100},
		{Iface: "eth0", Dst: netip.MustParsePrefix("10.0.0.0/24"), Metric: 100},
		{Iface: "eth1", Dst: netip.MustParsePrefix("10.1.0.0/24"), Metric: 100},
		{Iface: "eth0", Dst: netip.MustParsePrefix("::/0"), Gateway: netip.MustParseAddr("fe80::1"), Metric: 1024},
	})
	if err != nil {
		t.Fatal(err)
	}
	s.opts = bind.Options{StateDir: s.state, Timeout: 5 * time.Second, Getenv: func(string) string { return "" }}
	return s
}

func wantSimDriver(t *testing.T, d *sim.Device, drv, ifname string) {
	t.Helper()
	if got := d.Driver(); got != drv {
		t.Errorf("device %s on %q, want %q", d.Instance(), got, drv)
	}
	if got := d.IfName(); got != ifname {
		t.Errorf("device %s interface %q, want %q", d.Instance(), got, ifname)
	}
}

func wantNoRecord(t *testing.T, s *testSystem, dev vmbus.GUID) {
	t.Helper()
	if _, err := os.Stat(bind.RecordPath(s.state, dev)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("record of %s: %v, want none", dev, err)
	}
}

func TestBindAndUnbindRoundTripRestoresTheNIC(t *testing.T) {
	s := newTestSystem(t, sim.DefaultProfile, false)
	rec, err := bind.Bind(s.ctx, s.root, "eth1", s.opts)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Device != dataNIC || rec.OriginalDriver != bind.DriverNetvsc || rec.Interface != "eth1" ||
		rec.MAC != dataMAC.String() || rec.MTU != 1500 || !rec.Up || rec.OriginalOverride != "" || rec.By != "vmbusd" {
		t.Errorf("record %+v", rec)
	}
	wantSimDriver(t, s.data, bind.DriverUIO, "")
	if s.data.UIONode() == "" {
		t.Fatal("no uio node after Bind")
	}
	dev, err := vmbus.LookupDevice(s.root, dataNIC)
	if err != nil || dev.Driver != bind.DriverUIO || dev.UIO == "" || dev.DriverOverride != bind.DriverUIO {
		t.Fatalf("device after Bind %+v, %v", dev, err)
	}
	onDisk, err := bind.ReadRecord(s.state, dataNIC)
	if err != nil || onDisk.Device != rec.Device || onDisk.Interface != "eth1" {
		t.Fatalf("record on disk %+v, %v", onDisk, err)
	}
	// Binding again changes nothing and returns the record.
	again, err := bind.Bind(s.ctx, s.root, dataNIC.String(), s.opts)
	if err != nil || again.Interface != "eth1" {
		t.Fatalf("second Bind: %+v, %v", again, err)
	}
	wantSimDriver(t, s.mgmt, bind.DriverNetvsc, "eth0")

	// The netdev is gone; the recorded name still finds the device.
	back, err := bind.Unbind(s.ctx, s.root, "eth1", s.opts)
	if err != nil {
		t.Fatal(err)
	}
	if back.Device != dataNIC {
		t.Errorf("Unbind returned %+v", back)
	}
	wantSimDriver(t, s.data, bind.DriverNetvsc, "eth1")
	wantNoRecord(t, s, dataNIC)
	if dev, _ := vmbus.LookupDevice(s.root, dataNIC); dev.DriverOverride != "" {
		t.Errorf("override %q left after Unbind", dev.DriverOverride)
	}
}

func TestBindRefusesTheDefaultRouteInterfaceUnlessForced(t *testing.T) {
	s := newTestSystem(t, sim.DefaultProfile, false)
	_, err := bind.Bind(s.ctx, s.root, "eth0", s.opts)
	var be *bind.Error
	if !errors.Is(err, bind.ErrManagement) || !errors.As(err, &be) || be.Step != "check" || be.Device != mgmtNIC.String() {
		t.Fatalf("Bind(eth0) = %v, want a check refusal naming the device", err)
	}
	if !strings.Contains(err.Error(), "default route") {
		t.Errorf("error %q does not say why", err)
	}
	wantSimDriver(t, s.mgmt, bind.DriverNetvsc, "eth0")
	wantNoRecord(t, s, mgmtNIC)

	forced := s.opts
	forced.Force = true
	if _, err := bind.Bind(s.ctx, s.root, "eth0", forced); err != nil {
		t.Fatal(err)
	}
	wantSimDriver(t, s.mgmt, bind.DriverUIO, "")
	if _, err := bind.Unbind(s.ctx, s.root, mgmtNIC.String(), s.opts); err != nil {
		t.Fatal(err)
	}
	wantSimDriver(t, s.mgmt, bind.DriverNetvsc, "eth0")
}

func TestBindRefusesTheSSHSessionInterface(t *testing.T) {
	s := newTestSystem(t, sim.DefaultProfile, false)
	opts := s.opts
	opts.Getenv = func(k string) string {
		if k == "SSH_CONNECTION" {
			return "10.1.0.9 51234 10.1.0.4 22"
		}
		return ""
	}
	if _, err := bind.Bind(s.ctx, s.root, "eth1", opts); !errors.Is(err, bind.ErrManagement) || !strings.Contains(err.Error(), "SSH") {
		t.Fatalf("Bind(eth1) during an SSH session over it = %v", err)
	}
	wantSimDriver(t, s.data, bind.DriverNetvsc, "eth1")
}

func TestBindAndUnbindRejectBadNames(t *testing.T) {
	s := newTestSystem(t, sim.DefaultProfile, false)
	test, err := s.h.AddDevice(sim.DeviceConfig{Class: vmbus.ClassTest, Driver: sim.DriverNone})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		want error
	}{
		{"", bind.ErrNotFound},
		{"eth9", bind.ErrNotFound},
		{"../../etc", bind.ErrNotFound},
		{"lo", bind.ErrNotVMBus},
		{"01234567-89ab-4cde-8f01-23456789abcd", bind.ErrNotFound},
		{test.Instance().String(), bind.ErrNotNIC},
	} {
		_, err := bind.Bind(s.ctx, s.root, tc.name, s.opts)
		if !errors.Is(err, tc.want) {
			t.Errorf("Bind(%q) = %v, want %v", tc.name, err, tc.want)
		}
		if tc.want != bind.ErrNotNIC {
			if _, err := bind.Unbind(s.ctx, s.root, tc.name, s.opts); !errors.Is(err, tc.want) {
				t.Errorf("Unbind(%q) = %v, want %v", tc.name, err, tc.want)
			}
		}
	}
	if d, err := bind.Resolve(s.root, dataNIC.Braced()); err != nil || d.Instance != dataNIC {
		t.Errorf("Resolve(braced) = %v, %v", d.Instance, err)
	}
	if d, err := bind.Resolve(s.root, "eth1"); err != nil || d.Instance != dataNIC || d.Driver != bind.DriverNetvsc {
		t.Errorf("Resolve(eth1) = %+v, %v", d, err)
	}
}

func TestBindRollsBackWhenUIOCannotTakeTheDevice(t *testing.T) {
	// Legacy uio_hv_generic refuses a channel without a monitor id: the
	// bind write is refused and nothing claims the device.
	s := newTestSystem(t, sim.ProfileLegacy, true)
	opts := s.opts
	opts.Timeout = 300 * time.Millisecond
	_, err := bind.Bind(s.ctx, s.root, "eth1", opts)
	var be *bind.Error
	if !errors.Is(err, bind.ErrTimeout) || !errors.As(err, &be) || be.Step != "bind" {
		t.Fatalf("Bind = %v, want a bind-step timeout", err)
	}
	wantSimDriver(t, s.data, bind.DriverNetvsc, "eth1")
	wantNoRecord(t, s, dataNIC)
	if dev, _ := vmbus.LookupDevice(s.root, dataNIC); dev.DriverOverride != "" {
		t.Errorf("override %q left after rollback", dev.DriverOverride)
	}
}

func TestRestoreGivesBackEveryRecordedDeviceAfterACrash(t *testing.T) {
	s := newTestSystem(t, sim.DefaultProfile, false)
	spare, err := s.h.AddDevice(sim.DeviceConfig{Class: vmbus.ClassNetwork, Driver: sim.DriverNetvsc, IfName: "eth2"})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"eth1", "eth2"} {
		if _, err := bind.Bind(s.ctx, s.root, n, s.opts); err != nil {
			t.Fatal(err)
		}
	}
	// The "daemon" had eth1 open when it died: its guest connection is
	// simply gone; the devices stay bound and the records stay.
	c, err := net.Dial("unixpacket", s.data.UIONode())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	// A record for a device that has since been rescinded, and one made
	// for another root.
	gone, err := s.h.AddDevice(sim.DeviceConfig{Class: vmbus.ClassNetwork, Driver: sim.DriverNetvsc})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bind.Bind(s.ctx, s.root, gone.Instance().String(), s.opts); err != nil {
		t.Fatal(err)
	}
	gone.Rescind()
	other := bind.Record{Version: 1, Device: vmbus.MustParseGUID("abcdefab-cdef-4abc-8def-abcdefabcdef"), Root: "/elsewhere"}
	b, _ := json.Marshal(other)
	if err := os.WriteFile(bind.RecordPath(s.state, other.Device), b, 0o644); err != nil {
		t.Fatal(err)
	}

	done, err := bind.Restore(s.ctx, s.root, s.opts)
	if err == nil || !strings.Contains(err.Error(), "/elsewhere") {
		t.Errorf("Restore error %v, want the other root's record reported", err)
	}
	if len(done) != 3 {
		t.Errorf("Restore settled %d records, want 3: %+v", len(done), done)
	}
	wantSimDriver(t, s.data, bind.DriverNetvsc, "eth1")
	wantSimDriver(t, spare, bind.DriverNetvsc, "eth2")
	wantNoRecord(t, s, dataNIC)
	wantNoRecord(t, s, spare.Instance())
	wantNoRecord(t, s, gone.Instance())
	if _, err := bind.ReadRecord(s.state, other.Device); err != nil {
		t.Errorf("the other root's record: %v, want it kept", err)
	}
	// Nothing left to do.
	os.Remove(bind.RecordPath(s.state, other.Device))
	if done, err := bind.Restore(s.ctx, s.root, s.opts); err != nil || len(done) != 0 {
		t.Errorf("second Restore: %v, %v", done, err)
	}
}

func TestUnbindWithoutRecordUsesTheDefaultDriver(t *testing.T) {
	s := newTestSystem(t, sim.DefaultProfile, false)
	// Bound to uio by someone else (driverctl at boot, say): no record.
	test, err := s.h.AddDevice(sim.DeviceConfig{Class: vmbus.ClassTest})
	if err != nil {
		t.Fatal(err)
	}
	nic, err := s.h.AddDevice(sim.DeviceConfig{Class: vmbus.ClassNetwork, IfName: "eth5"})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := bind.Bind(s.ctx, s.root, nic.Instance().String(), s.opts)
	if err != nil || rec.OriginalDriver != bind.DriverUIO {
		t.Fatalf("Bind of a device uio already has: %+v, %v", rec, err)
	}
	wantNoRecord(t, s, nic.Instance())
	if _, err := bind.Unbind(s.ctx, s.root, nic.Instance().String(), s.opts); err != nil {
		t.Fatal(err)
	}
	wantSimDriver(t, nic, bind.DriverNetvsc, "eth5")
	if _, err := bind.Unbind(s.ctx, s.root, test.Instance().String(), s.opts); err != nil {
		t.Fatal(err)
	}
	wantSimDriver(t, test, "", "")
}

func TestCheckReportsTheSimulatedSystem(t *testing.T) {
	s := newTestSystem(t, sim.DefaultProfile, false)
	r := bind.Check(s.root)
	if !r.OK() {
		t.Errorf("Check not OK: %+v", r.Items)
	}
	if r.Module != bind.ModuleLoaded || !strings.HasPrefix(r.Kernel, "6.") || len(r.Devices) != 2 {
		t.Errorf("report %+v", r)
	}
	if len(r.DefaultRoute) != 1 || r.DefaultRoute[0] != "eth0" {
		t.Errorf("default route via %v, want eth0", r.DefaultRoute)
	}
	var b strings.Builder
	if err := r.Format(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"[ok]", "vmbus", "2 devices", "uio_hv_generic", mgmtNIC.String(), "default route", "eth0", "hv_netvsc"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}

	empty := bind.Check(t.TempDir())
	if empty.OK() {
		t.Errorf("Check of an empty tree OK: %+v", empty.Items)
	}
}

func TestCheckFindsModulesAndHugepagesInAFakeTree(t *testing.T) {
	root := t.TempDir()
	write := func(rel, v string) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("proc/sys/kernel/osrelease", "4.16.3-custom\n")
	os.MkdirAll(filepath.Join(root, "sys/bus/vmbus/devices"), 0o755)
	write("lib/modules/4.16.3-custom/modules.dep", "kernel/drivers/uio/uio_hv_generic.ko.xz: kernel/drivers/uio/uio.ko.xz\n")
	write("sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", "512\n")
	write("sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages", "500\n")
	write("proc/mounts", "hugetlbfs /dev/hugepages hugetlbfs rw,relatime,pagesize=2M 0 0\n")
	r := bind.Check(root)
	if r.Module != bind.ModuleAvailable {
		t.Errorf("module %s, want available", r.Module)
	}
	status := map[string]bind.Status{}
	for _, i := range r.Items {
		status[i.Name] = i.Status
	}
	if status["kernel"] != bind.StatusWarn || status["uio_hv_generic"] != bind.StatusWarn || status["hugepages"] != bind.StatusOK {
		t.Errorf("items %+v", r.Items)
	}
	if len(r.Hugepages) != 1 || r.Hugepages[0] != (bind.Hugepages{SizeKB: 2048, Total: 512, Free: 500}) || len(r.Hugetlbfs) != 1 {
		t.Errorf("hugepages %+v on %v", r.Hugepages, r.Hugetlbfs)
	}
	write("lib/modules/4.16.3-custom/modules.builtin", "kernel/drivers/uio/uio_hv_generic.ko\n")
	if r := bind.Check(root); r.Module != bind.ModuleBuiltin {
		t.Errorf("module %s, want builtin", r.Module)
	}
}

// A record as the scripts write it (scripts/vmbus-lib.sh) reads back.
func TestRecordWrittenByTheScriptsParses(t *testing.T) {
	dir := t.TempDir()
	text := `{
  "version": 1,
  "device": "66666666-7777-4888-9999-aaaaaaaaaaaa",
  "class": "f8615163-df3e-46c5-913f-f2d2f965ed0e",
  "root": "/",
  "by": "vmbus-bind",
  "time": "2026-01-02T03:04:05Z",
  "original_driver": "hv_netvsc",
  "original_override": "",
  "interface": "eth1",
  "mac": "00:15:5d:aa:bb:cc",
  "mtu": 1500,
  "up": true,
  "addresses": [
    "10.1.0.4/24",
    "fd00::4/64"
  ]
}
`
	if err := os.WriteFile(bind.RecordPath(dir, dataNIC), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	recs, err := bind.Records(dir)
	if err != nil || len(recs) != 1 {
		t.Fatalf("Records = %+v, %v", recs, err)
	}
	r := recs[0]
	if r.Device != dataNIC || r.Class != vmbus.ClassNetwork || r.Interface != "eth1" || len(r.Addresses) != 2 || !r.Up || r.MTU != 1500 {
		t.Errorf("record %+v", r)
	}
}
