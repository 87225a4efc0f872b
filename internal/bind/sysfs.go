package bind

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vmbusd/vmbusd/vmbus"
)

// Driver names.
const (
	DriverUIO    = "uio_hv_generic"
	DriverNetvsc = "hv_netvsc"
)

// Paths relative to the root.
const (
	busDir      = "sys/bus/vmbus"
	devicesDir  = "sys/bus/vmbus/devices"
	driversDir  = "sys/bus/vmbus/drivers"
	netClassDir = "sys/class/net"
)

// realRoot reports whether root is the running system's "/", where
// netlink, /proc/<pid> and modprobe mean something.
func realRoot(root string) bool { return root == "" || filepath.Clean(root) == "/" }

// Resolve finds the VMBus device named by its instance GUID (canonical or
// braced) or by its kernel interface name (R/sys/class/net/<name>/device,
// DPDK's recipe, docs/protocol/ecosystem.md §1.1). Errors wrap ErrNotFound or
// ErrNotVMBus.
func Resolve(root, nameOrGUID string) (vmbus.Device, error) {
	if root == "" {
		root = "/"
	}
	name := strings.TrimSpace(nameOrGUID)
	if g, err := vmbus.ParseGUID(name); err == nil {
		d, err := vmbus.LookupDevice(root, g)
		if errors.Is(err, fs.ErrNotExist) {
			return vmbus.Device{}, fmt.Errorf("no VMBus device %s: %w", g, ErrNotFound)
		}
		return d, err
	}
	if !validIfName(name) {
		return vmbus.Device{}, fmt.Errorf("%q is neither a device GUID nor an interface name: %w", nameOrGUID, ErrNotFound)
	}
	link := filepath.Join(root, netClassDir, name)
	if _, err := os.Lstat(link); err != nil {
		return vmbus.Device{}, fmt.Errorf("no interface or device %q: %w", name, ErrNotFound)
	}
	devLink := filepath.Join(link, "device")
	dev, err := filepath.EvalSymlinks(devLink)
	if err != nil {
		return vmbus.Device{}, fmt.Errorf("interface %s has no device (virtual?): %w", name, ErrNotVMBus)
	}
	g, err := vmbus.ParseGUID(filepath.Base(dev))
	if err == nil {
		busLink := filepath.Join(root, devicesDir, g.String())
		if bus, e := filepath.EvalSymlinks(busLink); e != nil || bus != dev {
			err = errors.New("not on the vmbus bus")
		}
	}
	if err != nil {
		return vmbus.Device{}, fmt.Errorf("interface %s is not a VMBus device (%s): %w", name, filepath.Base(dev), ErrNotVMBus)
	}
	return vmbus.LookupDevice(root, g)
}

// validIfName is dev_valid_name (1..15 bytes, not . or .., no / : or space).
func validIfName(s string) bool {
	if s == "" || len(s) > 15 || s == "." || s == ".." {
		return false
	}
	return !strings.ContainsAny(s, "/: \t\n\r\v\f")
}

// netdevOf names the kernel netdev of a device (its net/ directory), ""
// when it has none.
func netdevOf(devPath string) string {
	ents, err := os.ReadDir(filepath.Join(devPath, "net"))
	if err != nil || len(ents) == 0 {
		return ""
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), ".") {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	if len(names) == 0 {
		return ""
	}
	return names[0]
}

// netInfo is what sysfs shows of a netdev.
type netInfo struct {
	MAC string
	MTU int
	Up  bool
}

func readNetInfo(root, ifname string) (netInfo, error) {
	dir := filepath.Join(root, netClassDir, ifname)
	var ni netInfo
	mac, err1 := os.ReadFile(filepath.Join(dir, "address"))
	mtu, err2 := os.ReadFile(filepath.Join(dir, "mtu"))
	flags, err3 := os.ReadFile(filepath.Join(dir, "flags"))
	if err := errors.Join(err1, err2, err3); err != nil {
		return ni, err
	}
	ni.MAC = strings.TrimSpace(string(mac))
	ni.MTU, err1 = strconv.Atoi(strings.TrimSpace(string(mtu)))
	f, err2 := strconv.ParseUint(strings.TrimSpace(string(flags)), 0, 32)
	ni.Up = f&0x1 != 0 // IFF_UP
	return ni, errors.Join(err1, err2)
}

// writeAttr writes v to a sysfs attribute as `echo -n v >` does. On a real
// system the kernel's answer is the write's error (ENODEV: no match,
// EBUSY: bound, ...); a simulated tree always accepts it, so callers verify.
func writeAttr(path, v string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(v)
	return errors.Join(err, f.Close())
}

// pollInterval is how often waitFor looks again: sysfs has no change
// notification for driver links.
const pollInterval = 10 * time.Millisecond

// waitFor polls cond until it holds, fails, or timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %w after %v", what, ErrTimeout, timeout)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-t.C:
		}
	}
}

// driverOf reads the base name of the device's driver link ("" unbound).
func driverOf(devPath string) (string, error) {
	t, err := os.Readlink(filepath.Join(devPath, "driver"))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return filepath.Base(t), nil
}

// readOverride reads driver_override ("" when "(null)"); present is false
// when the attribute does not exist (a kernel without it).
func readOverride(devPath string) (v string, present bool, err error) {
	b, err := os.ReadFile(filepath.Join(devPath, "driver_override"))
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	v = strings.TrimSpace(string(b))
	if v == "(null)" {
		v = ""
	}
	return v, true, nil
}

// uioOf names the device's uio node (uio/uioN), "" when it has none.
func uioOf(devPath string) string {
	ents, err := os.ReadDir(filepath.Join(devPath, "uio"))
	if err != nil {
		return ""
	}
	for _, e := range ents {
		if n, ok := strings.CutPrefix(e.Name(), "uio"); ok {
			if _, err := strconv.ParseUint(n, 10, 31); err == nil {
				return e.Name()
			}
		}
	}
	return ""
}

// Module states of uio_hv_generic.
const (
	ModuleLoaded    = "loaded"
	ModuleBuiltin   = "builtin"
	ModuleAvailable = "available" // on disk, not loaded
	ModuleMissing   = "missing"
)

// moduleState finds uio_hv_generic as dpdk-devbind does (docs/protocol/ecosystem.md
// §1.2, §1.7): /sys/module/<name> or the driver's directory on the bus
// means loaded; modules.builtin lists it; or its .ko is installed.
func moduleState(root, release string) string {
	for _, p := range []string{"sys/module/uio_hv_generic", filepath.Join(driversDir, DriverUIO)} {
		if _, err := os.Stat(filepath.Join(root, p)); err == nil {
			return ModuleLoaded
		}
	}
	if release == "" {
		return ModuleMissing
	}
	modDir := filepath.Join(root, "lib/modules", release)
	if b, err := os.ReadFile(filepath.Join(modDir, "modules.builtin")); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if filepath.Base(strings.TrimSpace(l)) == "uio_hv_generic.ko" {
				return ModuleBuiltin
			}
		}
	}
	if b, err := os.ReadFile(filepath.Join(modDir, "modules.dep")); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			path, _, _ := strings.Cut(l, ":")
			if strings.HasPrefix(filepath.Base(path), "uio_hv_generic.ko") {
				return ModuleAvailable
			}
		}
	}
	return ModuleMissing
}

// kernelRelease reads R/proc/sys/kernel/osrelease.
func kernelRelease(root string) string {
	b, err := os.ReadFile(filepath.Join(root, "proc/sys/kernel/osrelease"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// nodeHolders lists the processes that have path open (real root only:
// /proc/<pid>/fd links).
func nodeHolders(path string) []int {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		fdDir := filepath.Join("/proc", p.Name(), "fd")
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if t, err := os.Readlink(filepath.Join(fdDir, fd.Name())); err == nil && t == path {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}
