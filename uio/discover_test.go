package uio

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

const testGUID = "f8615163-0000-1000-2000-000000000001"

// fakeMap is one map of a fake uio device.
type fakeMap struct {
	name string
	size uint64
}

// nicMaps are the five maps uio_hv_generic gives a NIC (docs/protocol/vmbus-ring.md §1.2),
// shrunk.
var nicMaps = []fakeMap{
	{"txrx_rings", 4 * 4096},
	{"int_page", 4096},
	{"monitor_page", 4096},
	{"recv:925201", 8 * 4096},
	{"send:925202", 4 * 4096},
}

// linkStyle is how R/sys/class/uio/uioN points at the device's uio dir.
type linkStyle int

const (
	linkRelative   linkStyle = iota // ../../bus/vmbus/devices/<guid>/uio/uioN, like the kernel
	linkAbsolute                    // R/sys/bus/... as a host path
	linkRootedAbs                   // /sys/bus/..., absolute inside R (chroot style)
	linkKernelLike                  // real sysfs: device under R/sys/devices, bus and class entries are links, uioN/device link
)

// writeFile creates path (and its parents) with content s.
func writeFile(t testing.TB, path, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func symlink(t testing.TB, target, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
}

// buildDevice lays out a VMBus device with uio node uio<n> under root R as
// sysfs does and returns the device directory R/sys/bus/vmbus/devices/<guid>.
func buildDevice(t testing.TB, root, guid string, n int, maps []fakeMap, style linkStyle) string {
	t.Helper()
	node := "uio" + strconv.Itoa(n)
	busDev := filepath.Join(root, "sys/bus/vmbus/devices", guid)
	devDir := busDev // where the device really lives
	if style == linkKernelLike {
		devDir = filepath.Join(root, "sys/devices/LNXSYSTM:00/VMBUS:00", guid)
		symlink(t, "../../../devices/LNXSYSTM:00/VMBUS:00/"+guid, busDev)
	}
	uioDir := filepath.Join(devDir, "uio", node)
	writeFile(t, filepath.Join(devDir, "class_id"), "{f8615163-df3e-46c5-913f-f2d2f965ed0e}\n")
	writeFile(t, filepath.Join(uioDir, "name"), "uio_hv_generic\n")
	writeFile(t, filepath.Join(uioDir, "version"), "0.02.1\n")
	for k, m := range maps {
		d := filepath.Join(uioDir, "maps", "map"+strconv.Itoa(k))
		writeFile(t, filepath.Join(d, "name"), m.name+"\n")
		writeFile(t, filepath.Join(d, "addr"), "0x00000000deadb000\n")
		writeFile(t, filepath.Join(d, "size"), "0x"+strconv.FormatUint(m.size, 16)+"\n")
		writeFile(t, filepath.Join(d, "offset"), "0x0\n")
	}
	class := filepath.Join(root, "sys/class/uio", node)
	switch style {
	case linkRelative:
		symlink(t, "../../bus/vmbus/devices/"+guid+"/uio/"+node, class)
	case linkAbsolute:
		symlink(t, uioDir, class)
	case linkRootedAbs:
		symlink(t, "/sys/bus/vmbus/devices/"+guid+"/uio/"+node, class)
	case linkKernelLike:
		symlink(t, "../../devices/LNXSYSTM:00/VMBUS:00/"+guid+"/uio/"+node, class)
		symlink(t, "../../../"+guid, filepath.Join(uioDir, "device"))
	}
	return busDev
}

func wantMaps(maps []fakeMap) []Map {
	var out []Map
	for k, m := range maps {
		out = append(out, Map{Index: k, Name: m.name, Addr: 0xdeadb000, Size: m.size})
	}
	return out
}

func TestScanFindsDevicesWhateverTheLinkStyle(t *testing.T) {
	for _, tc := range []struct {
		name  string
		style linkStyle
	}{
		{"relative", linkRelative},
		{"absolute", linkAbsolute},
		{"rooted-absolute", linkRootedAbs},
		{"kernel-like", linkKernelLike},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			devDir := buildDevice(t, root, testGUID, 3, nicMaps, tc.style)
			parent, err := filepath.EvalSymlinks(devDir)
			if err != nil {
				t.Fatal(err)
			}
			infos, err := Scan(root)
			if err != nil {
				t.Fatal(err)
			}
			want := Info{
				Name: "uio3", Number: 3, Root: root, Driver: "uio_hv_generic", Version: "0.02.1",
				Maps: wantMaps(nicMaps), Parent: parent, ParentID: testGUID,
			}
			if len(infos) != 1 || !reflect.DeepEqual(infos[0], want) {
				t.Fatalf("Scan = %+v\nwant [%+v]", infos, want)
			}
			got, err := Lookup(root, "uio3")
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("Lookup = %+v, %v", got, err)
			}
			got, err = ForDevice(root, devDir)
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("ForDevice = %+v, %v", got, err)
			}
			if p := want.NodePath(); p != filepath.Join(root, "dev/uio3") {
				t.Errorf("NodePath = %q", p)
			}
		})
	}
}

func TestScanSortsByNumberAndSkipsOtherEntries(t *testing.T) {
	root := t.TempDir()
	for i, n := range []int{10, 2, 0} {
		guid := testGUID[:len(testGUID)-1] + strconv.Itoa(i)
		buildDevice(t, root, guid, n, nicMaps[:1], linkRelative)
	}
	writeFile(t, filepath.Join(root, "sys/class/uio/README"), "not a device")
	infos, err := Scan(root)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, i := range infos {
		names = append(names, i.Name)
	}
	if got := strings.Join(names, " "); got != "uio0 uio2 uio10" {
		t.Errorf("Scan order = %q, want %q", got, "uio0 uio2 uio10")
	}
}

func TestScanMissingDirectoryIsEmpty(t *testing.T) {
	infos, err := Scan(t.TempDir())
	if err != nil || len(infos) != 0 {
		t.Fatalf("Scan = %v, %v; want empty, nil", infos, err)
	}
}

func TestScanReportsBadNodeAndKeepsTheOthers(t *testing.T) {
	root := t.TempDir()
	buildDevice(t, root, testGUID, 0, nicMaps[:1], linkRelative)
	bad := buildDevice(t, root, testGUID[:len(testGUID)-1]+"2", 1, nicMaps[:1], linkRelative)
	writeFile(t, filepath.Join(bad, "uio/uio1/maps/map0/size"), "lots\n")
	infos, err := Scan(root)
	if err == nil || !strings.Contains(err.Error(), "map0/size") {
		t.Errorf("Scan error = %v, want one naming map0/size", err)
	}
	if len(infos) != 1 || infos[0].Name != "uio0" {
		t.Errorf("Scan = %+v, want uio0 only", infos)
	}
}

func TestDiscoveryErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func(t *testing.T, uioDir string)
		want  string
	}{
		{"malformed size", func(t *testing.T, d string) {
			writeFile(t, filepath.Join(d, "maps/map1/size"), "0x12g\n")
		}, "map1/size"},
		{"missing size", func(t *testing.T, d string) {
			os.Remove(filepath.Join(d, "maps/map0/size"))
		}, "map0/size"},
		{"malformed offset", func(t *testing.T, d string) {
			writeFile(t, filepath.Join(d, "maps/map0/offset"), "-1\n")
		}, "map0/offset"},
		{"gap in maps", func(t *testing.T, d string) {
			os.RemoveAll(filepath.Join(d, "maps/map1"))
		}, "map1 missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			devDir := buildDevice(t, root, testGUID, 0, nicMaps, linkRelative)
			tc.spoil(t, filepath.Join(devDir, "uio/uio0"))
			if _, err := Lookup(root, "uio0"); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Lookup error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestDiscoveryToleratesOptionalFiles(t *testing.T) {
	root := t.TempDir()
	devDir := buildDevice(t, root, testGUID, 0, nicMaps[:2], linkRelative)
	d := filepath.Join(devDir, "uio/uio0")
	os.Remove(filepath.Join(d, "version"))
	os.Remove(filepath.Join(d, "maps/map1/name"))
	os.Remove(filepath.Join(d, "maps/map1/addr"))
	writeFile(t, filepath.Join(d, "maps/map0/size"), "16384") // decimal, no newline
	info, err := Lookup(root, "uio0")
	if err != nil {
		t.Fatal(err)
	}
	want := []Map{
		{Index: 0, Name: "txrx_rings", Addr: 0xdeadb000, Size: 16384},
		{Index: 1, Size: 4096},
	}
	if info.Version != "" || !reflect.DeepEqual(info.Maps, want) {
		t.Errorf("Lookup = %+v, want version \"\" and maps %+v", info, want)
	}
}

func TestLookupAndForDeviceNotFound(t *testing.T) {
	root := t.TempDir()
	if _, err := Lookup(root, "uio7"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Lookup(uio7) = %v, want ErrNotExist", err)
	}
	for _, name := range []string{"../uio0", "uio", "uio-1", "uio1x", "card0"} {
		if _, err := Lookup(root, name); err == nil {
			t.Errorf("Lookup(%q) succeeded", name)
		}
	}
	devDir := filepath.Join(root, "sys/bus/vmbus/devices", testGUID)
	writeFile(t, filepath.Join(devDir, "class_id"), "{x}\n")
	if _, err := ForDevice(root, devDir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ForDevice(no uio dir) = %v, want ErrNotExist", err)
	}
	os.MkdirAll(filepath.Join(devDir, "uio"), 0o755)
	if _, err := ForDevice(root, devDir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ForDevice(empty uio dir) = %v, want ErrNotExist", err)
	}
	os.MkdirAll(filepath.Join(devDir, "uio/uio1"), 0o755)
	os.MkdirAll(filepath.Join(devDir, "uio/uio2"), 0o755)
	if _, err := ForDevice(root, devDir); err == nil || errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ForDevice(two nodes) = %v, want a plain error", err)
	}
}

func TestResolveInStopsAtRootAndLoops(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "sys/a"), 0o755)
	symlink(t, "../../../../../../sys/a", filepath.Join(root, "sys/up"))
	got, err := resolveIn(root, filepath.Join(root, "sys/up"))
	if want := filepath.Join(root, "sys/a"); err != nil || got != want {
		t.Errorf("resolveIn(../ past root) = %q, %v; want %q", got, err, want)
	}
	symlink(t, "loop2", filepath.Join(root, "loop1"))
	symlink(t, "loop1", filepath.Join(root, "loop2"))
	if _, err := resolveIn(root, filepath.Join(root, "loop1")); err == nil {
		t.Error("resolveIn(loop) succeeded")
	}
}

func TestParseGPADLName(t *testing.T) {
	for _, tc := range []struct {
		name   string
		kind   string
		handle uint32
		ok     bool
	}{
		{"recv:925201", "recv", 925201, true},
		{"send:12", "send", 12, true},
		{"recv:0", "recv", 0, true},
		{"send:4294967295", "send", 4294967295, true},
		{"recv:", "", 0, false},
		{"recv:x", "", 0, false},
		{"recv:99999999999", "", 0, false},
		{"send:4294967296", "", 0, false},
		{"recv:-1", "", 0, false},
		{"recv:+1", "", 0, false},
		{"recv:0x10", "", 0, false},
		{"recv:1_0", "", 0, false},
		{"recv: 1", "", 0, false},
		{"recv:12 ", "", 0, false},
		{"recv:12:3", "", 0, false},
		{"txrx_rings", "", 0, false},
		{"int_page", "", 0, false},
		{"xmit:12", "", 0, false},
		{"RECV:12", "", 0, false},
		{"", "", 0, false},
	} {
		kind, handle, err := ParseGPADLName(tc.name)
		if (err == nil) != tc.ok || kind != tc.kind || handle != tc.handle {
			t.Errorf("ParseGPADLName(%q) = %q, %d, %v; want %q, %d, ok=%v",
				tc.name, kind, handle, err, tc.kind, tc.handle, tc.ok)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "uio: ") {
			t.Errorf("ParseGPADLName(%q) error %q lacks the package prefix", tc.name, err)
		}
		if k, h, ok := (Map{Name: tc.name}).GPADL(); ok != tc.ok || k != tc.kind || h != tc.handle {
			t.Errorf("Map{%q}.GPADL() = %q, %d, %v", tc.name, k, h, ok)
		}
	}
}

func FuzzParseGPADLName(f *testing.F) {
	for _, s := range []string{"recv:925201", "send:12", "recv:", "recv:x", "recv:99999999999", "txrx_rings", "send:007"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		kind, handle, err := ParseGPADLName(name)
		if err != nil {
			if kind != "" || handle != 0 {
				t.Fatalf("error with results %q, %d", kind, handle)
			}
			return
		}
		if kind != GPADLRecv && kind != GPADLSend {
			t.Fatalf("kind %q", kind)
		}
		num := strings.TrimPrefix(name, kind+":")
		if num == "" || strings.Trim(num, "0123456789") != "" {
			t.Fatalf("accepted %q", name)
		}
		// The kernel's own spelling parses to the same thing.
		k2, h2, err := ParseGPADLName(kind + ":" + strconv.FormatUint(uint64(handle), 10))
		if err != nil || k2 != kind || h2 != handle {
			t.Fatalf("round trip of %q: %q, %d, %v", name, k2, h2, err)
		}
	})
}

func TestMapByName(t *testing.T) {
	info := Info{Maps: wantMaps(nicMaps)}
	for _, tc := range []struct {
		name  string
		index int // -1: not found
	}{
		{"txrx_rings", 0},
		{"monitor_page", 2},
		{"recv:", 3},
		{"send:", 4},
		{"send:925202", 4},
		{"send:1", -1},
		{"recv", -1},
		{"txrx", -1},
		{"", -1},
	} {
		m, ok := info.MapByName(tc.name)
		if ok != (tc.index >= 0) || (ok && m.Index != tc.index) {
			t.Errorf("MapByName(%q) = %+v, %v; want index %d", tc.name, m, ok, tc.index)
		}
	}
}
