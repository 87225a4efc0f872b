package bus

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/vmbusd/vmbusd/vmbus"
)

var (
	sysfsTestNIC   = vmbus.MustParseGUID("ed963694-e847-4b2a-85af-bc9cfc11d6f3")
	sysfsTestFCopy = vmbus.MustParseGUID("eb765408-105f-49b6-b4aa-c123b64d17d4")
)

const sysfsTestVMBusDir = "sys/devices/LNXSYSTM:00/LNXSYBUS:00/ACPI0004:00/VMBUS:00"

func sysfsTestTree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	if err := initTree(root, DefaultProfile); err != nil {
		t.Fatal(err)
	}
	return root
}

func sysfsReadFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func sysfsWantFile(t *testing.T, path, want string) {
	t.Helper()
	if got := sysfsReadFile(t, path); got != want {
		t.Errorf("%s = %q, want %q", path, got, want)
	}
}

func sysfsWantAbsent(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s: %v, want absent", path, err)
	}
}

func sysfsWantMode(t *testing.T, path string, want fs.FileMode) {
	t.Helper()
	st, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode() != want {
		t.Errorf("%s mode %v, want %v", path, st.Mode(), want)
	}
}

// sysfsWantLink checks a symlink's text (as the kernel would give it) and that it
// resolves to target.
func sysfsWantLink(t *testing.T, link, text, target string) {
	t.Helper()
	got, err := os.Readlink(link)
	if err != nil {
		t.Fatal(err)
	}
	if got != text {
		t.Errorf("%s -> %q, want %q", link, got, text)
	}
	res, err := filepath.EvalSymlinks(link)
	if err != nil {
		t.Fatalf("%s does not resolve: %v", link, err)
	}
	wantRes, err := filepath.EvalSymlinks(target)
	if err != nil {
		t.Fatal(err)
	}
	if res != wantRes {
		t.Errorf("%s resolves to %s, want %s", link, res, wantRes)
	}
}

func TestInitTreeLayoutAndIdempotence(t *testing.T) {
	root := t.TempDir()
	if err := initTree(root, Profile6_16); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"sys/bus/vmbus/devices", "sys/class/uio", "dev", sysfsTestVMBusDir} {
		if st, err := os.Stat(filepath.Join(root, d)); err != nil || !st.IsDir() {
			t.Errorf("%s: %v", d, err)
		}
	}
	for _, drv := range []string{"uio_hv_generic", "hv_netvsc", "hv_sock"} {
		for _, f := range []string{"new_id", "remove_id", "bind", "unbind"} {
			sysfsWantMode(t, filepath.Join(root, "sys/bus/vmbus/drivers", drv, f), 0o200)
		}
	}
	sysfsWantFile(t, filepath.Join(root, "proc/sys/kernel/osrelease"), "6.16.0-vmbusd-sim\n")

	// A bring-up script wrote to new_id; a second init keeps it and
	// switches the kernel version.
	newID := filepath.Join(root, "sys/bus/vmbus/drivers/uio_hv_generic/new_id")
	if err := os.WriteFile(newID, []byte(vmbus.ClassNetwork.String()+"\n"), 0o200); err != nil {
		t.Fatal(err)
	}
	if err := initTree(root, ProfileLegacy); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(newID); err != nil || st.Size() != int64(len(vmbus.ClassNetwork.String())+1) {
		t.Errorf("new_id after a second init: %v, %v; want the written id kept", st, err)
	}
	sysfsWantFile(t, filepath.Join(root, "proc/sys/kernel/osrelease"), "5.15.0-vmbusd-sim\n")
}

func TestWriteDeviceLayout(t *testing.T) {
	for _, tc := range []struct {
		name      string
		a         devAttrs
		device    string
		monitored bool
	}{
		{"monitored NIC", devAttrs{Class: vmbus.ClassNetwork, Instance: sysfsTestNIC, RelID: 14, MonitorID: 3, NUMANode: 0}, "0x3\n", true},
		{"unmonitored fcopy", devAttrs{Class: vmbus.ClassFCopy, Instance: sysfsTestFCopy, RelID: 9, MonitorID: -1, NUMANode: 1}, "0xd\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := sysfsTestTree(t)
			devDir, err := writeDevice(root, tc.a)
			if err != nil {
				t.Fatal(err)
			}
			guid := tc.a.Instance.String()
			if want := filepath.Join(root, "sys/bus/vmbus/devices", guid); devDir != want {
				t.Errorf("devDir %s, want %s", devDir, want)
			}
			real := filepath.Join(root, sysfsTestVMBusDir, guid)
			sysfsWantLink(t, devDir, "../../../devices/LNXSYSTM:00/LNXSYBUS:00/ACPI0004:00/VMBUS:00/"+guid, real)
			sysfsWantLink(t, filepath.Join(devDir, "subsystem"), "../../../../../../bus/vmbus", filepath.Join(root, "sys/bus/vmbus"))

			sysfsWantFile(t, filepath.Join(devDir, "class_id"), "{"+tc.a.Class.String()+"}\n")
			sysfsWantFile(t, filepath.Join(devDir, "device_id"), "{"+guid+"}\n")
			sysfsWantFile(t, filepath.Join(devDir, "id"), fmt.Sprintf("%d\n", tc.a.RelID))
			sysfsWantFile(t, filepath.Join(devDir, "numa_node"), fmt.Sprintf("%d\n", tc.a.NUMANode))
			sysfsWantFile(t, filepath.Join(devDir, "driver_override"), "(null)\n")
			sysfsWantFile(t, filepath.Join(devDir, "state"), "0\n")
			sysfsWantFile(t, filepath.Join(devDir, "vendor"), "0x1414\n")
			sysfsWantFile(t, filepath.Join(devDir, "device"), tc.device)
			sysfsWantMode(t, filepath.Join(devDir, "class_id"), 0o444)
			sysfsWantMode(t, filepath.Join(devDir, "driver_override"), 0o644)
			if tc.monitored {
				sysfsWantFile(t, filepath.Join(devDir, "monitor_id"), "3\n")
				sysfsWantFile(t, filepath.Join(devDir, "client_monitor_latency"), "0\n")
			} else {
				sysfsWantAbsent(t, filepath.Join(devDir, "monitor_id"))
				sysfsWantAbsent(t, filepath.Join(devDir, "server_monitor_pending"))
			}
			ents, err := os.ReadDir(filepath.Join(devDir, "channels"))
			if err != nil || len(ents) != 0 {
				t.Errorf("channels/: %d entries, %v", len(ents), err)
			}
			sysfsWantAbsent(t, filepath.Join(devDir, "driver"))
			sysfsWantAbsent(t, filepath.Join(devDir, "uio"))

			if _, err := writeDevice(root, tc.a); !errors.Is(err, fs.ErrExist) {
				t.Errorf("second writeDevice: %v, want ErrExist", err)
			}
		})
	}
}

// The modalias is the class GUID's wire bytes in hex: the well-known alias
// hv_netvsc is loaded for.
func TestModaliasUsesWireBytes(t *testing.T) {
	root := sysfsTestTree(t)
	devDir, err := writeDevice(root, devAttrs{Class: vmbus.ClassNetwork, Instance: sysfsTestNIC, RelID: 14, MonitorID: 0})
	if err != nil {
		t.Fatal(err)
	}
	const alias = "vmbus:635161f83edfc546913ff2d2f965ed0e"
	sysfsWantFile(t, filepath.Join(devDir, "modalias"), alias+"\n")
	sysfsWantFile(t, filepath.Join(devDir, "uevent"), "MODALIAS="+alias+"\n")
}

func TestWriteChannelLayout(t *testing.T) {
	root := sysfsTestTree(t)
	devDir, err := writeDevice(root, devAttrs{Class: vmbus.ClassNetwork, Instance: sysfsTestNIC, RelID: 14, MonitorID: 3})
	if err != nil {
		t.Fatal(err)
	}
	if err := writeChannel(devDir, chanAttrs{RelID: 14, SubchannelID: 0, MonitorID: 3, CPU: 0}); err != nil {
		t.Fatal(err)
	}
	if err := writeChannel(devDir, chanAttrs{RelID: 31, SubchannelID: 1, MonitorID: -1, CPU: 2}); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(devDir, "channels", "14")
	sysfsWantFile(t, filepath.Join(p, "subchannel_id"), "0\n")
	sysfsWantFile(t, filepath.Join(p, "cpu"), "0\n")
	sysfsWantFile(t, filepath.Join(p, "monitor_id"), "3\n")
	sysfsWantFile(t, filepath.Join(p, "latency"), "0\n")
	sysfsWantFile(t, filepath.Join(p, "pending"), "0\n")
	sysfsWantFile(t, filepath.Join(p, "read_avail"), "0\n")
	sysfsWantFile(t, filepath.Join(p, "write_avail"), "0\n")
	sysfsWantAbsent(t, filepath.Join(p, "ring"))
	s := filepath.Join(devDir, "channels", "31")
	sysfsWantFile(t, filepath.Join(s, "subchannel_id"), "1\n")
	sysfsWantFile(t, filepath.Join(s, "cpu"), "2\n")
	sysfsWantMode(t, filepath.Join(s, "cpu"), 0o644)
	sysfsWantAbsent(t, filepath.Join(s, "monitor_id"))
	sysfsWantAbsent(t, filepath.Join(s, "latency"))
	sysfsWantAbsent(t, filepath.Join(s, "pending"))
	sysfsWantAbsent(t, filepath.Join(s, "ring"))
	ents, _ := os.ReadDir(filepath.Join(devDir, "channels"))
	if len(ents) != 2 {
		t.Errorf("channels/ has %d entries, want 2 (no temporaries left)", len(ents))
	}
	sysfsWantFile(t, filepath.Join(devDir, "channel_vp_mapping"), "14:0\n31:2\n")

	if err := writeChannel(devDir, chanAttrs{RelID: 31, SubchannelID: 1, MonitorID: -1}); err == nil {
		t.Error("second writeChannel for relid 31 succeeded")
	}
	if err := removeChannel(devDir, 31); err != nil {
		t.Fatal(err)
	}
	sysfsWantAbsent(t, s)
	sysfsWantFile(t, filepath.Join(devDir, "channel_vp_mapping"), "14:0\n")
	if err := removeChannel(devDir, 31); err != nil {
		t.Errorf("removing a missing channel: %v", err)
	}
}

// subchannelTestDir writes the test NIC with its subchannel 31 (no ring
// file yet) into a fresh tree and returns the device's directory.
func subchannelTestDir(t *testing.T) string {
	t.Helper()
	root := sysfsTestTree(t)
	devDir, err := writeDevice(root, devAttrs{Class: vmbus.ClassNetwork, Instance: sysfsTestNIC, RelID: 14, MonitorID: 3})
	if err != nil {
		t.Fatal(err)
	}
	if err := writeChannel(devDir, chanAttrs{RelID: 31, SubchannelID: 1, MonitorID: -1, CPU: 1}); err != nil {
		t.Fatal(err)
	}
	return devDir
}

func TestCreateRingFileAppearsAtomically(t *testing.T) {
	devDir := subchannelTestDir(t)
	chDir := filepath.Join(devDir, "channels", "31")
	ifd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ifd)
	if _, err := unix.InotifyAddWatch(ifd, chDir, unix.IN_CREATE|unix.IN_MOVED_TO); err != nil {
		t.Fatal(err)
	}

	const size = 2 * 0x5000
	f, mem, err := createRingFile(devDir, 31, size, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	defer unmapMem(mem)

	// The guest sees "ring" only by rename; it never sees it created.
	buf := make([]byte, 4096)
	n, err := unix.Read(ifd, buf)
	if err != nil {
		t.Fatal(err)
	}
	movedTo := false
	for off := 0; off+unix.SizeofInotifyEvent <= n; {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
		name := string(bytes.TrimRight(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+int(ev.Len)], "\x00"))
		off += unix.SizeofInotifyEvent + int(ev.Len)
		if name != "ring" {
			continue
		}
		if ev.Mask&unix.IN_CREATE != 0 {
			t.Error("ring was created in place (IN_CREATE), not renamed")
		}
		if ev.Mask&unix.IN_MOVED_TO != 0 {
			movedTo = true
		}
	}
	if !movedTo {
		t.Error("no IN_MOVED_TO for ring")
	}
	ring := filepath.Join(chDir, "ring")
	sysfsWantMode(t, ring, 0o600)
	if st, _ := os.Stat(ring); st == nil || st.Size() != size {
		t.Errorf("ring size %v, want %d", st, size)
	}
	ents, _ := os.ReadDir(chDir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("temporary %s left behind", e.Name())
		}
	}

	// The guest maps the file as the sysfs ring: memory is shared.
	gf, err := os.OpenFile(ring, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	gm, err := unix.Mmap(int(gf.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	gf.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(gm)
	mem[0x5000+8] = 0x42
	if gm[0x5000+8] != 0x42 {
		t.Error("host write not seen through the ring file")
	}
	gm[3] = 0x17
	if mem[3] != 0x17 {
		t.Error("guest write not seen by the host")
	}

	if _, _, err := createRingFile(devDir, 31, size, nil); err == nil {
		t.Error("second createRingFile succeeded")
	}
	if _, _, err := createRingFile(devDir, 99, size, nil); err == nil {
		t.Error("createRingFile for a missing channel succeeded")
	}
	if err := removeRingFile(devDir, 31); err != nil {
		t.Fatal(err)
	}
	sysfsWantAbsent(t, ring)
	if err := removeRingFile(devDir, 31); err != nil {
		t.Errorf("removing a missing ring: %v", err)
	}
	mem[5] = 1 // still mapped
	if gm[5] != 1 {
		t.Error("mappings no longer shared after the file was removed")
	}
}

func sysfsTestMaps() []uioMap {
	return []uioMap{
		{Name: "txrx_rings", Size: 0x400000, Addr: 0x12345000},
		{Name: "int_page", Size: 0x1000, Addr: 0xffff9c5e01234000},
		{Name: "monitor_page", Size: 0x1000, Addr: 0xffff9c5e01236000},
		{Name: "recv:17", Size: 31 << 20, Addr: 0xffffb00000000000},
		{Name: "send:18", Size: 16 << 20, Addr: 0xffffb00002000000},
	}
}

func TestWriteUIONodeLayout(t *testing.T) {
	root := sysfsTestTree(t)
	devDir, err := writeDevice(root, devAttrs{Class: vmbus.ClassNetwork, Instance: sysfsTestNIC, RelID: 14, MonitorID: 3})
	if err != nil {
		t.Fatal(err)
	}
	if err := writeUIONode(root, devDir, 3, sysfsTestMaps()); err != nil {
		t.Fatal(err)
	}
	guid := sysfsTestNIC.String()
	real := filepath.Join(root, sysfsTestVMBusDir, guid)
	uioDir := filepath.Join(real, "uio", "uio3")
	class := filepath.Join(root, "sys/class/uio/uio3")

	sysfsWantLink(t, class, "../../devices/LNXSYSTM:00/LNXSYBUS:00/ACPI0004:00/VMBUS:00/"+guid+"/uio/uio3", uioDir)
	sysfsWantLink(t, filepath.Join(root, "sys/dev/char/243:3"), "../../devices/LNXSYSTM:00/LNXSYBUS:00/ACPI0004:00/VMBUS:00/"+guid+"/uio/uio3", uioDir)
	sysfsWantLink(t, filepath.Join(devDir, "driver"), "../../../../../../bus/vmbus/drivers/uio_hv_generic", filepath.Join(root, "sys/bus/vmbus/drivers/uio_hv_generic"))
	sysfsWantLink(t, filepath.Join(root, "sys/bus/vmbus/drivers/uio_hv_generic", guid), "../../../../devices/LNXSYSTM:00/LNXSYBUS:00/ACPI0004:00/VMBUS:00/"+guid, real)
	sysfsWantLink(t, filepath.Join(class, "device"), "../../../"+guid, real)
	sysfsWantLink(t, filepath.Join(class, "subsystem"), "../../../../../../../../class/uio", filepath.Join(root, "sys/class/uio"))

	sysfsWantFile(t, filepath.Join(class, "name"), "uio_hv_generic\n")
	sysfsWantFile(t, filepath.Join(class, "version"), "0.02.1\n")
	sysfsWantFile(t, filepath.Join(class, "dev"), "243:3\n")
	sysfsWantFile(t, filepath.Join(devDir, "uio/uio3/name"), "uio_hv_generic\n")
	sysfsWantFile(t, filepath.Join(devDir, "uevent"), "DRIVER=uio_hv_generic\nMODALIAS=vmbus:635161f83edfc546913ff2d2f965ed0e\n")
	// uio.c: addr and size with %pa, offset with 0x%llx.
	for k, want := range []struct{ name, addr, size string }{
		{"txrx_rings", "0x0000000012345000", "0x0000000000400000"},
		{"int_page", "0xffff9c5e01234000", "0x0000000000001000"},
		{"monitor_page", "0xffff9c5e01236000", "0x0000000000001000"},
		{"recv:17", "0xffffb00000000000", "0x0000000001f00000"},
		{"send:18", "0xffffb00002000000", "0x0000000001000000"},
	} {
		m := filepath.Join(class, "maps", fmt.Sprintf("map%d", k))
		sysfsWantFile(t, filepath.Join(m, "name"), want.name+"\n")
		sysfsWantFile(t, filepath.Join(m, "addr"), want.addr+"\n")
		sysfsWantFile(t, filepath.Join(m, "size"), want.size+"\n")
		sysfsWantFile(t, filepath.Join(m, "offset"), "0x0\n")
	}
	ents, _ := os.ReadDir(filepath.Join(real, "uio"))
	if len(ents) != 1 {
		t.Errorf("uio/ has %d entries, want 1 (no temporaries left)", len(ents))
	}

	// Taken numbers and too many maps are refused, and leave the node intact.
	if err := writeUIONode(root, devDir, 3, sysfsTestMaps()[:3]); err == nil {
		t.Error("second writeUIONode for uio3 succeeded")
	}
	sysfsWantFile(t, filepath.Join(class, "maps/map4/name"), "send:18\n")
	if err := writeUIONode(root, devDir, 4, append(sysfsTestMaps(), uioMap{Name: "extra", Size: 1})); err == nil {
		t.Error("six maps accepted")
	}
	sysfsWantAbsent(t, filepath.Join(root, "sys/class/uio/uio4"))

	if err := removeUIONode(root, devDir, 3); err != nil {
		t.Fatal(err)
	}
	sysfsWantAbsent(t, class)
	sysfsWantAbsent(t, filepath.Join(root, "sys/dev/char/243:3"))
	sysfsWantAbsent(t, filepath.Join(real, "uio"))
	sysfsWantAbsent(t, filepath.Join(real, "driver"))
	sysfsWantAbsent(t, filepath.Join(root, "sys/bus/vmbus/drivers/uio_hv_generic", guid))
	sysfsWantFile(t, filepath.Join(devDir, "class_id"), "{"+vmbus.ClassNetwork.String()+"}\n")
	sysfsWantFile(t, filepath.Join(devDir, "uevent"), "MODALIAS=vmbus:635161f83edfc546913ff2d2f965ed0e\n")
	if err := removeUIONode(root, devDir, 3); err != nil {
		t.Errorf("second removeUIONode: %v", err)
	}
	// Rebinding works.
	if err := writeUIONode(root, devDir, 3, sysfsTestMaps()[:3]); err != nil {
		t.Fatal(err)
	}
	sysfsWantAbsent(t, filepath.Join(class, "maps/map3"))
}

func TestRemoveDeviceRemovesEverything(t *testing.T) {
	root := sysfsTestTree(t)
	devDir, err := writeDevice(root, devAttrs{Class: vmbus.ClassNetwork, Instance: sysfsTestNIC, RelID: 14, MonitorID: 3})
	if err != nil {
		t.Fatal(err)
	}
	if err := writeChannel(devDir, chanAttrs{RelID: 14, MonitorID: 3}); err != nil {
		t.Fatal(err)
	}
	f, mem, err := createRingFile(devDir, 14, 8192, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	defer unmapMem(mem)
	if err := writeUIONode(root, devDir, 0, sysfsTestMaps()); err != nil {
		t.Fatal(err)
	}
	other, err := writeDevice(root, devAttrs{Class: vmbus.ClassFCopy, Instance: sysfsTestFCopy, RelID: 9, MonitorID: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := writeUIONode(root, other, 1, sysfsTestMaps()[:3]); err != nil {
		t.Fatal(err)
	}

	if err := removeDevice(root, devDir); err != nil {
		t.Fatal(err)
	}
	guid := sysfsTestNIC.String()
	sysfsWantAbsent(t, devDir)
	sysfsWantAbsent(t, filepath.Join(root, sysfsTestVMBusDir, guid))
	sysfsWantAbsent(t, filepath.Join(root, "sys/class/uio/uio0"))
	sysfsWantAbsent(t, filepath.Join(root, "sys/dev/char/243:0"))
	sysfsWantAbsent(t, filepath.Join(root, "sys/bus/vmbus/drivers/uio_hv_generic", guid))
	mem[0] = 1 // the host's mapping outlives the file

	// The other device is untouched.
	sysfsWantFile(t, filepath.Join(root, "sys/class/uio/uio1/name"), "uio_hv_generic\n")
	sysfsWantFile(t, filepath.Join(other, "id"), "9\n")
	ents, _ := os.ReadDir(filepath.Join(root, sysfsTestVMBusDir))
	if len(ents) != 1 {
		t.Errorf("VMBUS:00 has %d entries, want 1", len(ents))
	}
	if err := removeDevice(root, devDir); err != nil {
		t.Errorf("second removeDevice: %v", err)
	}
	// Re-offer of the same instance.
	if _, err := writeDevice(root, devAttrs{Class: vmbus.ClassNetwork, Instance: sysfsTestNIC, RelID: 15, MonitorID: 3}); err != nil {
		t.Errorf("re-offer: %v", err)
	}
}

func TestUpdateAttrKeepsMode(t *testing.T) {
	root := sysfsTestTree(t)
	devDir, err := writeDevice(root, devAttrs{Class: vmbus.ClassNetwork, Instance: sysfsTestNIC, RelID: 14, MonitorID: 3})
	if err != nil {
		t.Fatal(err)
	}
	if err := updateAttr(filepath.Join(devDir, "state"), "3\n"); err != nil {
		t.Fatal(err)
	}
	sysfsWantFile(t, filepath.Join(devDir, "state"), "3\n")
	sysfsWantMode(t, filepath.Join(devDir, "state"), 0o444)
	if err := updateAttr(filepath.Join(devDir, "driver_override"), "uio_hv_generic\n"); err != nil {
		t.Fatal(err)
	}
	sysfsWantMode(t, filepath.Join(devDir, "driver_override"), 0o644)
}
