package bind

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/vmbusd/vmbusd/vmbus"
)

// Status is a check's verdict.
type Status int

const (
	StatusOK Status = iota
	StatusWarn
	StatusFail
)

func (s Status) String() string {
	switch s {
	case StatusOK:
		return "ok"
	case StatusWarn:
		return "warn"
	}
	return "FAIL"
}

// Item is one row of the checks table (docs/protocol/ecosystem.md §1.7).
type Item struct {
	Name   string
	Status Status
	Detail string
}

// DeviceInfo is one VMBus device as Check saw it.
type DeviceInfo struct {
	Instance  vmbus.GUID
	Class     vmbus.GUID
	ClassName string
	Driver    string // "" when unbound
	Override  string // driver_override, "" when unset
	Interface string // the kernel netdev, if any
	UIO       string // uioN, if uio_hv_generic has it
	// Management says why the interface must not be bound ("" when
	// nothing does): the default route.
	Management string
}

// Hugepages is one hugepage size's pool (R/sys/kernel/mm/hugepages).
type Hugepages struct {
	SizeKB      int
	Total, Free int
}

// Report is the outcome of Check. Items hold the verdicts; the rest is
// what they were drawn from.
type Report struct {
	Root         string
	Kernel       string // osrelease
	Module       string // ModuleLoaded, ModuleBuiltin, ModuleAvailable, ModuleMissing
	Items        []Item
	Devices      []DeviceInfo
	DefaultRoute []string // interfaces carrying a default route
	Hugepages    []Hugepages
	Hugetlbfs    []string // hugetlbfs mount points
}

// OK reports whether no check failed.
func (r Report) OK() bool {
	return !slices.ContainsFunc(r.Items, func(i Item) bool { return i.Status == StatusFail })
}

// Check runs the bring-up checks against the tree under root: the vmbus
// bus, uio_hv_generic, the kernel release, driver_override, the devices
// with their drivers and which NIC carries the default route, and
// hugepages. It never changes anything.
func Check(root string) Report {
	if root == "" {
		root = "/"
	}
	root = filepath.Clean(root)
	r := Report{Root: root, Kernel: kernelRelease(root)}
	add := func(name string, st Status, format string, args ...any) {
		r.Items = append(r.Items, Item{Name: name, Status: st, Detail: fmt.Sprintf(format, args...)})
	}

	devs, scanErr := vmbus.ScanDevices(root)
	if _, err := os.Stat(filepath.Join(root, devicesDir)); err != nil {
		add("vmbus", StatusFail, "no %s: not running on Hyper-V", filepath.Join(root, devicesDir))
	} else if scanErr != nil {
		add("vmbus", StatusWarn, "%d devices; %v", len(devs), scanErr)
	} else {
		add("vmbus", StatusOK, "%d devices", len(devs))
	}

	r.Module = moduleState(root, r.Kernel)
	switch r.Module {
	case ModuleLoaded, ModuleBuiltin:
		add("uio_hv_generic", StatusOK, "%s", r.Module)
	case ModuleAvailable:
		add("uio_hv_generic", StatusWarn, "installed, not loaded: modprobe uio_hv_generic")
	default:
		add("uio_hv_generic", StatusFail, "not found (kernel built without CONFIG_UIO_HV_GENERIC?)")
	}

	maj, min, ok := parseRelease(r.Kernel)
	switch {
	case !ok:
		add("kernel", StatusWarn, "release %q unknown", r.Kernel)
	case maj < 4 || (maj == 4 && min < 16):
		add("kernel", StatusFail, "%s: uio_hv_generic needs 4.16 or later", r.Kernel)
	case maj == 4 && min < 17:
		add("kernel", StatusWarn, "%s: single queue only (sub-channels need 4.17)", r.Kernel)
	default:
		add("kernel", StatusOK, "%s", r.Kernel)
	}

	routes, err := readRoutes(root)
	if err != nil {
		add("routes", StatusWarn, "%v", err)
	}
	r.DefaultRoute = defaultRouteIfaces(routes)

	nics, override := 0, 0
	for _, d := range devs {
		di := DeviceInfo{Instance: d.Instance, Class: d.Class, ClassName: d.ClassName(), Driver: d.Driver,
			Override: d.DriverOverride, Interface: netdevOf(d.Path), UIO: d.UIO}
		if di.Interface != "" && slices.Contains(r.DefaultRoute, di.Interface) {
			di.Management = "default route"
		}
		if d.Class == vmbus.ClassNetwork {
			nics++
		}
		if _, present, _ := readOverride(d.Path); present {
			override++
		}
		r.Devices = append(r.Devices, di)
	}
	switch {
	case len(devs) == 0:
	case override == len(devs):
		add("driver_override", StatusOK, "per-device binding available")
	default:
		add("driver_override", StatusWarn, "missing on %d of %d devices: kernel too old for per-device binding", len(devs)-override, len(devs))
	}
	if len(devs) > 0 {
		if nics == 0 {
			add("nics", StatusWarn, "no synthetic NIC offered")
		} else {
			add("nics", StatusOK, "%d synthetic NIC(s)", nics)
		}
	}
	var mgmt []string
	for _, d := range r.Devices {
		if d.Management != "" {
			mgmt = append(mgmt, d.Interface)
		}
	}
	switch {
	case len(mgmt) > 0:
		add("default route", StatusOK, "via %s: do not bind it (or use --force)", strings.Join(mgmt, ", "))
	case len(r.DefaultRoute) > 0:
		add("default route", StatusOK, "via %s (not a VMBus NIC)", strings.Join(r.DefaultRoute, ", "))
	default:
		add("default route", StatusOK, "none")
	}

	r.Hugepages, r.Hugetlbfs = readHugepages(root)
	var pools []string
	for _, h := range r.Hugepages {
		if h.Total > 0 {
			pools = append(pools, fmt.Sprintf("%d x %s (%d free)", h.Total, sizeName(h.SizeKB), h.Free))
		}
	}
	switch {
	case len(pools) == 0:
		add("hugepages", StatusOK, "none reserved (needed only for a GPA-direct pool)")
	case len(r.Hugetlbfs) == 0:
		add("hugepages", StatusWarn, "%s reserved, hugetlbfs not mounted", strings.Join(pools, ", "))
	default:
		add("hugepages", StatusOK, "%s; hugetlbfs on %s", strings.Join(pools, ", "), strings.Join(r.Hugetlbfs, ", "))
	}
	return r
}

// parseRelease reads "major.minor" from the front of an osrelease.
func parseRelease(s string) (maj, min int, ok bool) {
	a, rest, found := strings.Cut(s, ".")
	if !found {
		return 0, 0, false
	}
	b := rest
	if i := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		b = rest[:i]
	}
	x, err1 := strconv.Atoi(a)
	y, err2 := strconv.Atoi(b)
	return x, y, err1 == nil && err2 == nil
}

// readHugepages reads the pools (R/sys/kernel/mm/hugepages/hugepages-<N>kB)
// and the hugetlbfs mounts (R/proc/mounts).
func readHugepages(root string) ([]Hugepages, []string) {
	var hs []Hugepages
	dir := filepath.Join(root, "sys/kernel/mm/hugepages")
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		kb, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(e.Name(), "hugepages-"), "kB"))
		if err != nil {
			continue
		}
		h := Hugepages{SizeKB: kb}
		h.Total = readInt(filepath.Join(dir, e.Name(), "nr_hugepages"))
		h.Free = readInt(filepath.Join(dir, e.Name(), "free_hugepages"))
		hs = append(hs, h)
	}
	var mounts []string
	if b, err := os.ReadFile(filepath.Join(root, "proc/mounts")); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 3 && f[2] == "hugetlbfs" {
				mounts = append(mounts, f[1])
			}
		}
	}
	return hs, mounts
}

func readInt(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	v, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return v
}

func sizeName(kb int) string {
	switch {
	case kb >= 1<<20 && kb%(1<<20) == 0:
		return fmt.Sprintf("%dG", kb>>20)
	case kb >= 1<<10 && kb%(1<<10) == 0:
		return fmt.Sprintf("%dM", kb>>10)
	}
	return fmt.Sprintf("%dkB", kb)
}

// Format writes the report for people: the checks, then the devices.
func (r Report) Format(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "VMBus bring-up checks (root %s)\n", r.Root)
	for _, i := range r.Items {
		fmt.Fprintf(tw, "  [%s]\t%s\t%s\n", i.Status, i.Name, i.Detail)
	}
	if len(r.Devices) > 0 {
		fmt.Fprintf(tw, "\nDevices:\n  INSTANCE\tCLASS\tDRIVER\tOVERRIDE\tIFACE\tUIO\tNOTE\n")
		for _, d := range r.Devices {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.Instance, d.ClassName, dash(d.Driver),
				dash(d.Override), dash(d.Interface), dash(d.UIO), dash(d.Management))
		}
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
