package uio

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

// Map is one memory region of a UIO device, read from maps/mapK in sysfs
// (uio.c map_*_show; docs/protocol/vmbus-ring.md §1.2).
type Map struct {
	Index  int    // K in maps/mapK; on a character device it is mapped at offset K*page size
	Name   string // maps/mapK/name, trimmed; "" when the file is absent
	Addr   uint64 // maps/mapK/addr (kernel address, informational)
	Size   uint64 // maps/mapK/size in bytes; the length of the mapping
	Offset uint64 // maps/mapK/offset (offset of the region in its first page)
}

// Map name kinds for the NIC receive and send buffers. uio_hv_generic names
// those maps "recv:%u" and "send:%u" with the GPADL handle in decimal
// (hv_uio_probe; docs/protocol/vmbus-ring.md §1.2).
const (
	GPADLRecv = "recv"
	GPADLSend = "send"
)

// ParseGPADLName parses a map name of the form "recv:<gpadl>" or
// "send:<gpadl>", the handle a decimal u32 as the kernel prints it with %u.
// kind is GPADLRecv or GPADLSend. Any other name, an empty, signed, non-decimal
// or out-of-range handle, or trailing junk is an error.
func ParseGPADLName(name string) (kind string, handle uint32, err error) {
	k, num, ok := strings.Cut(name, ":")
	if !ok || (k != GPADLRecv && k != GPADLSend) {
		return "", 0, fmt.Errorf("uio: map name %q: want recv:<gpadl> or send:<gpadl>", name)
	}
	// Base 10 without a bit of leniency: ParseUint rejects signs, spaces and
	// underscores in base 10, and values above 2^32-1 with bitSize 32.
	v, err := strconv.ParseUint(num, 10, 32)
	if err != nil {
		return "", 0, fmt.Errorf("uio: map name %q: gpadl handle is not a decimal u32", name)
	}
	return k, uint32(v), nil
}

// GPADL returns the GPADL kind and handle of a "recv:"/"send:" map; ok is
// false for any other map.
func (m Map) GPADL() (kind string, handle uint32, ok bool) {
	kind, handle, err := ParseGPADLName(m.Name)
	return kind, handle, err == nil
}

// Info describes one UIO device as sysfs shows it. The zero value is not a
// device; Info values come from Scan, Lookup and ForDevice.
type Info struct {
	Name     string // "uio3"
	Number   int    // 3
	Root     string // the root directory R ("/" on a real system)
	Driver   string // R/sys/class/uio/uioN/name, trimmed ("uio_hv_generic")
	Version  string // R/sys/class/uio/uioN/version, trimmed
	Maps     []Map  // maps/mapK in index order, K = 0, 1, 2, ...
	Parent   string // resolved parent device directory (for VMBus: R/sys/bus/vmbus/devices/<guid> through symlinks); "" if none
	ParentID string // base name of Parent: the instance GUID of a VMBus device
}

// NodePath returns the device node, R/dev/uioN.
func (i Info) NodePath() string { return filepath.Join(rootOrSlash(i.Root), "dev", i.Name) }

// MapByName returns the map with exactly that name. A name ending in ':'
// (such as "recv:" or "send:") matches the first map whose name starts with
// it, since the GPADL handle after the colon is not known in advance.
func (i Info) MapByName(name string) (Map, bool) {
	for _, m := range i.Maps {
		if m.Name == name {
			return m, true
		}
	}
	if strings.HasSuffix(name, ":") {
		for _, m := range i.Maps {
			if strings.HasPrefix(m.Name, name) {
				return m, true
			}
		}
	}
	return Map{}, false
}

// Scan lists every R/sys/class/uio/uioN, sorted by N. A missing directory
// gives an empty list. A node that vanishes during the scan is skipped; one
// that cannot be read is left out and reported in the returned error, which
// comes with the nodes that could be read.
func Scan(root string) ([]Info, error) {
	root = rootOrSlash(root)
	dir := filepath.Join(root, "sys", "class", "uio")
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("uio: scan: %w", err)
	}
	var infos []Info
	var errs []error
	for _, e := range ents {
		if _, ok := parseNodeName(e.Name()); !ok {
			continue
		}
		p := filepath.Join(dir, e.Name())
		info, err := readInfo(root, e.Name(), p)
		if err != nil {
			if _, lerr := os.Lstat(p); errors.Is(lerr, fs.ErrNotExist) {
				continue // removed while we looked
			}
			errs = append(errs, err)
			continue
		}
		infos = append(infos, info)
	}
	sort.Slice(infos, func(a, b int) bool { return infos[a].Number < infos[b].Number })
	return infos, errors.Join(errs...)
}

// Lookup returns the UIO device R/sys/class/uio/<name>, name being "uioN".
// A missing device gives an error wrapping fs.ErrNotExist.
func Lookup(root, name string) (Info, error) {
	root = rootOrSlash(root)
	if _, ok := parseNodeName(name); !ok {
		return Info{}, fmt.Errorf("uio: lookup %q: not a uio device name", name)
	}
	p := filepath.Join(root, "sys", "class", "uio", name)
	if _, err := os.Lstat(p); err != nil {
		return Info{}, fmt.Errorf("uio: lookup %s: %w", name, err)
	}
	return readInfo(root, name, p)
}

// ForDevice returns the UIO device of a device directory (for VMBus,
// R/sys/bus/vmbus/devices/<guid>): the one entry devDir/uio/uioN. devDir is
// a full path, not relative to root. A device without a uio node (not bound
// to a uio driver) gives an error wrapping fs.ErrNotExist.
func ForDevice(root, devDir string) (Info, error) {
	root = rootOrSlash(root)
	ents, err := os.ReadDir(filepath.Join(devDir, "uio"))
	if err != nil {
		return Info{}, fmt.Errorf("uio: %s: no uio node: %w", devDir, err)
	}
	var names []string
	for _, e := range ents {
		if _, ok := parseNodeName(e.Name()); ok {
			names = append(names, e.Name())
		}
	}
	switch len(names) {
	case 0:
		return Info{}, fmt.Errorf("uio: %s: no uio node: %w", devDir, fs.ErrNotExist)
	case 1:
		return readInfo(root, names[0], filepath.Join(devDir, "uio", names[0]))
	}
	return Info{}, fmt.Errorf("uio: %s: %d uio nodes (%s), want one", devDir, len(names), strings.Join(names, ", "))
}

// readInfo reads the uio directory dir (possibly a symlink) of node name.
func readInfo(root, name, dir string) (Info, error) {
	num, _ := parseNodeName(name)
	info := Info{Name: name, Number: num, Root: root}
	resolved, err := resolveIn(root, dir)
	if err != nil {
		return Info{}, fmt.Errorf("uio: %s: %w", name, err)
	}
	if info.Driver, err = readOptAttr(filepath.Join(resolved, "name")); err != nil {
		return Info{}, err
	}
	if info.Version, err = readOptAttr(filepath.Join(resolved, "version")); err != nil {
		return Info{}, err
	}
	if info.Maps, err = readMaps(resolved); err != nil {
		return Info{}, err
	}
	info.Parent, err = parentOf(root, resolved)
	if err != nil {
		return Info{}, fmt.Errorf("uio: %s: parent: %w", name, err)
	}
	if info.Parent != "" {
		info.ParentID = filepath.Base(info.Parent)
	}
	return info, nil
}

// parentOf returns the resolved parent device of the uio directory dir: the
// target of its "device" link when present (as on a real system), else the
// directory above ".../uio/uioN".
func parentOf(root, dir string) (string, error) {
	link := filepath.Join(dir, "device")
	if _, err := os.Lstat(link); err == nil {
		return resolveIn(root, link)
	}
	up := filepath.Dir(dir)
	if filepath.Base(up) == "uio" {
		return filepath.Dir(up), nil
	}
	return "", nil
}

// readMaps reads dir/maps/mapK for K = 0, 1, ...; a missing maps directory
// means no maps.
func readMaps(dir string) ([]Map, error) {
	mdir := filepath.Join(dir, "maps")
	ents, err := os.ReadDir(mdir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("uio: %w", err)
	}
	var idx []int
	for _, e := range ents {
		n, ok := parseIndex(e.Name(), "map")
		if ok {
			idx = append(idx, n)
		}
	}
	sort.Ints(idx)
	maps := make([]Map, 0, len(idx))
	for k, n := range idx {
		if n != k {
			return nil, fmt.Errorf("uio: %s: map%d missing (maps not contiguous)", mdir, k)
		}
		m, err := readMap(filepath.Join(mdir, "map"+strconv.Itoa(k)), k)
		if err != nil {
			return nil, err
		}
		maps = append(maps, m)
	}
	return maps, nil
}

// readMap reads one maps/mapK directory. size is required; name, addr and
// offset default to empty and zero.
func readMap(dir string, k int) (Map, error) {
	m := Map{Index: k}
	var err error
	if m.Name, err = readOptAttr(filepath.Join(dir, "name")); err != nil {
		return Map{}, err
	}
	s, err := readAttr(filepath.Join(dir, "size"))
	if err != nil {
		return Map{}, err
	}
	if m.Size, err = parseSysfsUint(filepath.Join(dir, "size"), s); err != nil {
		return Map{}, err
	}
	for _, f := range []struct {
		name string
		dst  *uint64
	}{{"addr", &m.Addr}, {"offset", &m.Offset}} {
		p := filepath.Join(dir, f.name)
		s, err := readOptAttr(p)
		if err != nil {
			return Map{}, err
		}
		if s == "" {
			continue
		}
		if *f.dst, err = parseSysfsUint(p, s); err != nil {
			return Map{}, err
		}
	}
	return m, nil
}

// parseSysfsUint parses a sysfs number: "0x..." in hex (addr and size are
// printed with %pa, offset with 0x%llx), otherwise decimal.
func parseSysfsUint(path, s string) (uint64, error) {
	base, digits := 10, s
	if strings.HasPrefix(s, "0x") || strings.HasPrefix(s, "0X") {
		base, digits = 16, s[2:]
	}
	v, err := strconv.ParseUint(digits, base, 64)
	if err != nil {
		return 0, fmt.Errorf("uio: %s: malformed number %q", path, s)
	}
	return v, nil
}

// readAttr returns a sysfs attribute with surrounding white space removed.
func readAttr(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("uio: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// readOptAttr is readAttr for an attribute that may be absent ("").
func readOptAttr(path string) (string, error) {
	s, err := readAttr(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	return s, err
}

// parseNodeName parses "uioN".
func parseNodeName(name string) (int, bool) { return parseIndex(name, "uio") }

// parseIndex parses prefix followed by a plain decimal number.
func parseIndex(name, prefix string) (int, bool) {
	s, ok := strings.CutPrefix(name, prefix)
	if !ok || s == "" || len(s) > 9 {
		return 0, false
	}
	n := 0
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

func rootOrSlash(root string) string {
	if root == "" {
		return "/"
	}
	return root
}

// maxLinks bounds symlink expansion in resolveIn, like the kernel's 40.
const maxLinks = 40

// resolveIn resolves every symlink in p, which lies under root, treating
// root as the file-system root: ".." stops at root, and an absolute link
// target is taken as relative to root unless it already lies under root.
// So both a kernel-style relative link (../../devices/...) and an absolute
// one (to root/sys/... or, chroot style, to /sys/...) resolve inside root.
// A p outside root is resolved by filepath.EvalSymlinks.
func resolveIn(root, p string) (string, error) {
	absRoot, err := filepath.Abs(root)
	if err != nil {
		return "", err
	}
	absP, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(absRoot, absP)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return filepath.EvalSymlinks(absP)
	}
	realRoot, err := filepath.EvalSymlinks(absRoot)
	if err != nil {
		return "", err
	}
	cur := realRoot
	todo := splitPath(rel)
	links := 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if cur != realRoot {
				cur = filepath.Dir(cur)
			}
			continue
		}
		next := filepath.Join(cur, c)
		fi, err := os.Lstat(next)
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if links++; links > maxLinks {
			return "", fmt.Errorf("%s: too many levels of symbolic links", p)
		}
		t, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(t) {
			cur = realRoot
			t = relUnder(t, realRoot, absRoot)
		}
		todo = append(splitPath(t), todo...)
	}
	return cur, nil
}

// relUnder returns abs relative to the first of roots it lies under, or abs
// itself (to be taken relative to the root) when it lies under none.
func relUnder(abs string, roots ...string) string {
	for _, r := range roots {
		if rel, err := filepath.Rel(r, abs); err == nil && rel != ".." &&
			!strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return rel
		}
	}
	return abs
}

func splitPath(p string) []string { return strings.Split(filepath.ToSlash(p), "/") }
