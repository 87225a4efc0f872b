package vmbus_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/vmbusd/vmbusd/vmbus"
)

const (
	nicInstance = "9c5f1b4e-2f3a-4c8e-8f67-1d2a3b4c5d6e"
	kvpInstance = "242ff919-07db-4180-9c2e-b86cb68c8c55"
)

func put(t *testing.T, path, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func link(t *testing.T, target, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
}

// fakeChannel describes channels/<relid>/ of a fake device.
type fakeChannel struct {
	relid   string
	sub     string // subchannel_id contents; "" for absent
	monitor string // "" for absent
	cpu     string // "" for absent
	ring    bool
}

// buildNIC lays out a monitored NIC bound to uio_hv_generic with a primary
// channel (ring open) and a sub-channel whose ring is not there yet.
func buildNIC(t *testing.T, root string) string {
	dev := filepath.Join(root, "sys/bus/vmbus/devices", nicInstance)
	put(t, filepath.Join(dev, "class_id"), "{f8615163-df3e-46c5-913f-f2d2f965ed0e}\n")
	put(t, filepath.Join(dev, "device_id"), "{"+nicInstance+"}\n")
	put(t, filepath.Join(dev, "id"), "14\n")
	put(t, filepath.Join(dev, "monitor_id"), "2\n")
	put(t, filepath.Join(dev, "numa_node"), "0\n")
	put(t, filepath.Join(dev, "driver_override"), "(null)\n")
	link(t, "../../../../bus/vmbus/drivers/uio_hv_generic", filepath.Join(dev, "driver"))
	put(t, filepath.Join(dev, "uio/uio0/name"), "uio_hv_generic\n")
	addChannels(t, dev,
		fakeChannel{relid: "14", sub: "0", monitor: "2", cpu: "1", ring: true},
		fakeChannel{relid: "31", sub: "1", monitor: "5", cpu: "0"},
	)
	return dev
}

// buildKVP lays out a non-monitored, unbound device: no monitor_id, no
// driver link, no uio node; its channel has no monitor_id either.
func buildKVP(t *testing.T, root string) string {
	dev := filepath.Join(root, "sys/bus/vmbus/devices", kvpInstance)
	put(t, filepath.Join(dev, "class_id"), "{a9a0f4e7-5a45-4d96-b827-8a841e8c03e6}")
	put(t, filepath.Join(dev, "device_id"), "{"+kvpInstance+"}")
	put(t, filepath.Join(dev, "id"), "7")
	put(t, filepath.Join(dev, "numa_node"), "-1\n")
	put(t, filepath.Join(dev, "driver_override"), "uio_hv_generic\n")
	addChannels(t, dev, fakeChannel{relid: "7", sub: "0", cpu: "0"})
	return dev
}

func addChannels(t *testing.T, dev string, chans ...fakeChannel) {
	for _, c := range chans {
		dir := filepath.Join(dev, "channels", c.relid)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []struct{ name, val string }{{"subchannel_id", c.sub}, {"monitor_id", c.monitor}, {"cpu", c.cpu}} {
			if f.val != "" {
				put(t, filepath.Join(dir, f.name), f.val+"\n")
			}
		}
		if c.ring {
			put(t, filepath.Join(dir, "ring"), strings.Repeat("\x00", 8192))
		}
	}
}

func TestScanDevicesReadsMonitoredAndUnmonitoredDevices(t *testing.T) {
	root := t.TempDir()
	nic := buildNIC(t, root)
	kvp := buildKVP(t, root)
	put(t, filepath.Join(nic, "channels/README"), "not a channel") // ignored

	devs, err := vmbus.ScanDevices(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []vmbus.Device{
		{
			Root: root, Path: kvp,
			Class: vmbus.ClassKVP, Instance: vmbus.MustParseGUID(kvpInstance),
			RelID: 7, MonitorID: -1, NUMANode: -1,
			DriverOverride: "uio_hv_generic",
			Channels: []vmbus.ChannelInfo{
				{RelID: 7, SubchannelID: 0, MonitorID: -1, CPU: 0, RingPath: filepath.Join(kvp, "channels/7/ring")},
			},
		},
		{
			Root: root, Path: nic,
			Class: vmbus.ClassNetwork, Instance: vmbus.MustParseGUID(nicInstance),
			RelID: 14, MonitorID: 2, NUMANode: 0,
			Driver: "uio_hv_generic",
			Channels: []vmbus.ChannelInfo{
				{RelID: 14, SubchannelID: 0, MonitorID: 2, CPU: 1, RingPath: filepath.Join(nic, "channels/14/ring"), HasRing: true},
				{RelID: 31, SubchannelID: 1, MonitorID: 5, CPU: 0, RingPath: filepath.Join(nic, "channels/31/ring")},
			},
			UIO: "uio0",
		},
	}
	if !reflect.DeepEqual(devs, want) {
		t.Fatalf("ScanDevices =\n%+v\nwant\n%+v", devs, want)
	}
	if devs[1].ClassName() != "netvsc" || devs[0].ClassName() != "kvp" {
		t.Errorf("ClassName = %q, %q", devs[1].ClassName(), devs[0].ClassName())
	}
}

func TestScanDevicesFollowsKernelSymlinks(t *testing.T) {
	root := t.TempDir()
	devDir := filepath.Join(root, "sys/devices/LNXSYSTM:00/VMBUS:00", nicInstance)
	put(t, filepath.Join(devDir, "class_id"), "{f8615163-df3e-46c5-913f-f2d2f965ed0e}\n")
	put(t, filepath.Join(devDir, "device_id"), "{"+nicInstance+"}\n")
	put(t, filepath.Join(devDir, "id"), "14\n")
	link(t, "../../../devices/LNXSYSTM:00/VMBUS:00/"+nicInstance, filepath.Join(root, "sys/bus/vmbus/devices", nicInstance))
	d, err := vmbus.LookupDevice(root, vmbus.MustParseGUID(nicInstance))
	if err != nil {
		t.Fatal(err)
	}
	if d.Path != filepath.Join(root, "sys/bus/vmbus/devices", nicInstance) || d.RelID != 14 || d.MonitorID != -1 || d.UIO != "" {
		t.Errorf("LookupDevice = %+v", d)
	}
}

func TestScanDevicesMissingDirectoryIsEmpty(t *testing.T) {
	devs, err := vmbus.ScanDevices(t.TempDir())
	if err != nil || len(devs) != 0 {
		t.Fatalf("ScanDevices = %v, %v; want empty, nil", devs, err)
	}
}

func TestLookupDevice(t *testing.T) {
	root := t.TempDir()
	buildNIC(t, root)
	d, err := vmbus.LookupDevice(root, vmbus.MustParseGUID(nicInstance))
	if err != nil || d.RelID != 14 || d.UIO != "uio0" {
		t.Fatalf("LookupDevice = %+v, %v", d, err)
	}
	if _, err := vmbus.LookupDevice(root, vmbus.MustParseGUID(kvpInstance)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("LookupDevice(absent) = %v, want ErrNotExist", err)
	}
	// A directory whose device_id disagrees with its name.
	other := filepath.Join(root, "sys/bus/vmbus/devices", kvpInstance)
	put(t, filepath.Join(other, "class_id"), "{f8615163-df3e-46c5-913f-f2d2f965ed0e}")
	put(t, filepath.Join(other, "device_id"), "{"+nicInstance+"}")
	put(t, filepath.Join(other, "id"), "3")
	if _, err := vmbus.LookupDevice(root, vmbus.MustParseGUID(kvpInstance)); err == nil || !strings.Contains(err.Error(), "device_id") {
		t.Errorf("LookupDevice(mismatched device_id) = %v", err)
	}
}

func TestReadChannelsSeesLateSubchannels(t *testing.T) {
	root := t.TempDir()
	dev := buildNIC(t, root)
	d, err := vmbus.LookupDevice(root, vmbus.MustParseGUID(nicInstance))
	if err != nil {
		t.Fatal(err)
	}
	// The sub-channel's ring appears, a new one is offered with its
	// attributes not readable yet, and one is rescinded.
	put(t, filepath.Join(dev, "channels/31/ring"), strings.Repeat("\x00", 8192))
	if err := os.MkdirAll(filepath.Join(dev, "channels/32"), 0o755); err != nil {
		t.Fatal(err)
	}
	chans, err := d.ReadChannels()
	if err != nil {
		t.Fatal(err)
	}
	want := []vmbus.ChannelInfo{
		{RelID: 14, SubchannelID: 0, MonitorID: 2, CPU: 1, RingPath: filepath.Join(dev, "channels/14/ring"), HasRing: true},
		{RelID: 31, SubchannelID: 1, MonitorID: 5, CPU: 0, RingPath: filepath.Join(dev, "channels/31/ring"), HasRing: true},
		{RelID: 32, SubchannelID: -1, MonitorID: -1, CPU: -1, RingPath: filepath.Join(dev, "channels/32/ring")},
	}
	if !reflect.DeepEqual(chans, want) {
		t.Errorf("ReadChannels =\n%+v\nwant\n%+v", chans, want)
	}
}

func TestRingDirectoryIsNotARing(t *testing.T) {
	root := t.TempDir()
	dev := buildNIC(t, root)
	os.MkdirAll(filepath.Join(dev, "channels/31/ring"), 0o755) // exists, cannot be opened read-write
	d, err := vmbus.LookupDevice(root, vmbus.MustParseGUID(nicInstance))
	if err != nil {
		t.Fatal(err)
	}
	if d.Channels[1].HasRing {
		t.Error("HasRing for a ring that cannot be opened read-write")
	}
}

func TestMalformedAttributesNameTheFile(t *testing.T) {
	for _, tc := range []struct {
		file, val string // relative to the NIC device; val "" removes the file
	}{
		{"class_id", "{f8615163-df3e-46c5-913f}\n"},
		{"class_id", ""},
		{"device_id", "not a guid\n"},
		{"id", "fourteen\n"},
		{"id", "-1\n"},
		{"id", "4294967296\n"},
		{"id", ""},
		{"monitor_id", "256\n"},
		{"monitor_id", "0x2\n"},
		{"numa_node", "-2\n"},
		{"channels/14/subchannel_id", "one\n"},
		{"channels/31/monitor_id", "-3\n"},
		{"channels/31/cpu", "cpu0\n"},
	} {
		name := tc.file + "=" + strings.TrimSpace(tc.val)
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			dev := buildNIC(t, root)
			p := filepath.Join(dev, tc.file)
			if tc.val == "" {
				os.Remove(p)
			} else {
				put(t, p, tc.val)
			}
			_, err := vmbus.LookupDevice(root, vmbus.MustParseGUID(nicInstance))
			if err == nil || !strings.Contains(err.Error(), p) || !strings.HasPrefix(err.Error(), "vmbus: ") {
				t.Errorf("LookupDevice = %v, want an error naming %s", err, p)
			}
			devs, err := vmbus.ScanDevices(root)
			if err == nil || len(devs) != 0 {
				t.Errorf("ScanDevices = %d devices, %v; want none and an error", len(devs), err)
			}
		})
	}
}

func TestScanDevicesKeepsGoodDevicesBesideABadOne(t *testing.T) {
	root := t.TempDir()
	buildNIC(t, root)
	kvp := buildKVP(t, root)
	put(t, filepath.Join(kvp, "id"), "seven\n")
	devs, err := vmbus.ScanDevices(root)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(kvp, "id")) {
		t.Errorf("ScanDevices error = %v, want one naming %s", err, filepath.Join(kvp, "id"))
	}
	if len(devs) != 1 || devs[0].RelID != 14 {
		t.Errorf("ScanDevices = %+v, want the NIC only", devs)
	}
}

func TestTwoUIONodesIsAnError(t *testing.T) {
	root := t.TempDir()
	dev := buildNIC(t, root)
	os.MkdirAll(filepath.Join(dev, "uio/uio5"), 0o755)
	if _, err := vmbus.LookupDevice(root, vmbus.MustParseGUID(nicInstance)); err == nil {
		t.Error("LookupDevice with two uio nodes succeeded")
	}
}
