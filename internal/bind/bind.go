package bind

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/vmbusd/vmbusd/vmbus"
)

// Errors wrapped by *Error, for errors.Is.
var (
	ErrNotFound   = errors.New("no such device")
	ErrNotVMBus   = errors.New("not a VMBus device")
	ErrNotNIC     = errors.New("not a synthetic NIC")
	ErrNoModule   = errors.New("uio_hv_generic is not available")
	ErrNoOverride = errors.New("no driver_override attribute (kernel too old?)")
	// ErrManagement refuses the interface that carries the default route
	// or the SSH session; Options.Force overrides it.
	ErrManagement = errors.New("interface in use for management (use force to take it anyway)")
	// ErrInUse refuses to unbind a device a process holds open;
	// Options.Force overrides it.
	ErrInUse = errors.New("device node open by a process")
	// ErrOtherDriver refuses to take a device from a driver other than
	// uio_hv_generic on Unbind.
	ErrOtherDriver = errors.New("bound to another driver")
	ErrTimeout     = errors.New("timed out")
)

// Error is a failed step of binding or unbinding one device.
type Error struct {
	Device string // the instance GUID, or the name given when it did not resolve
	Step   string // resolve, check, lock, record, link down, override, unbind, bind, verify, restore link, rollback
	Err    error
}

func (e *Error) Error() string {
	return fmt.Sprintf("bind: device %s: %s: %v", e.Device, e.Step, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// DefaultTimeout bounds each wait for the kernel (an unbind to finish, a
// driver to claim the device).
const DefaultTimeout = 10 * time.Second

// Options configure Bind, Unbind and Restore. The zero value works.
type Options struct {
	// Force takes the management interface (default route, SSH session)
	// and unbinds a device a process holds open.
	Force bool
	// StateDir holds the records; default R/run/vmbusd (/run/vmbusd on a
	// real system, which is the unit's RuntimeDirectory).
	StateDir string
	// Timeout bounds each wait; default DefaultTimeout.
	Timeout time.Duration
	// Logger receives progress; nil discards it.
	Logger *slog.Logger
	// Getenv reads SSH_CONNECTION; nil means os.Getenv.
	Getenv func(string) string
}

func (o Options) fill(root string) (string, Options) {
	if root == "" {
		root = "/"
	}
	root = filepath.Clean(root)
	if o.StateDir == "" {
		o.StateDir = filepath.Join(root, "run/vmbusd")
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	return root, o
}

// Bind hands a synthetic NIC, named by instance GUID or interface name, to
// uio_hv_generic with driver_override, after the checks; it records the
// device's state first and rolls back if a step fails. A device already
// bound to uio_hv_generic is left as it is: its record is returned, or,
// when it was not bound by vmbusd, a record with OriginalDriver
// uio_hv_generic that is not stored (there is nothing to give back).
func Bind(ctx context.Context, root, nameOrGUID string, opts Options) (Record, error) {
	root, opts = opts.fill(root)
	log := opts.Logger
	dev, err := Resolve(root, nameOrGUID)
	if err != nil {
		return Record{}, &Error{Device: nameOrGUID, Step: "resolve", Err: err}
	}
	id := dev.Instance.String()
	fail := func(step string, err error) (Record, error) {
		return Record{}, &Error{Device: id, Step: step, Err: err}
	}
	if dev.Class != vmbus.ClassNetwork {
		return fail("check", fmt.Errorf("class_id %s (%s): %w", dev.Class.Braced(), dev.ClassName(), ErrNotNIC))
	}
	unlock, err := lockState(opts.StateDir, opts.Timeout)
	if err != nil {
		return fail("lock", err)
	}
	defer unlock()
	if dev, err = vmbus.LookupDevice(root, dev.Instance); err != nil { // again, under the lock
		return fail("resolve", err)
	}
	rec := Record{Version: RecordVersion, Device: dev.Instance, Class: dev.Class, Root: root, By: "vmbusd",
		Time: time.Now().UTC().Truncate(time.Second), OriginalDriver: dev.Driver, OriginalOverride: dev.DriverOverride}
	if dev.Driver == DriverUIO {
		if r, err := ReadRecord(opts.StateDir, dev.Instance); err == nil {
			log.Info("bind: already bound", "device", id, "uio", dev.UIO)
			return r, nil
		}
		log.Info("bind: already bound to uio_hv_generic, not by vmbusd: nothing to record", "device", id, "uio", dev.UIO)
		return rec, nil
	}
	if err := checkModule(root, log); err != nil {
		return fail("check", err)
	}
	if _, present, err := readOverride(dev.Path); err != nil || !present {
		return fail("check", errors.Join(err, ErrNoOverride))
	}
	rec.Interface = netdevOf(dev.Path)
	if rec.Interface != "" {
		why, err := managementReason(root, rec.Interface, opts.Getenv)
		if err != nil {
			return fail("check", err)
		}
		if why != "" && !opts.Force {
			return fail("check", fmt.Errorf("interface %s: %s: %w", rec.Interface, why, ErrManagement))
		}
		if why != "" {
			log.Warn("bind: taking the management interface (forced)", "device", id, "interface", rec.Interface, "why", why)
		}
		ni, err := readNetInfo(root, rec.Interface)
		if err != nil {
			return fail("check", fmt.Errorf("interface %s: %w", rec.Interface, err))
		}
		rec.MAC, rec.MTU, rec.Up = ni.MAC, ni.MTU, ni.Up
		if realRoot(root) {
			if rec.Addresses, err = linkAddrs(rec.Interface); err != nil {
				log.Warn("bind: cannot read addresses; they will not be restored", "interface", rec.Interface, "err", err)
			}
		}
	}
	if err := writeRecord(opts.StateDir, rec); err != nil {
		return fail("record", err)
	}
	log.Info("bind: binding to uio_hv_generic", "device", id, "from", rec.OriginalDriver, "interface", rec.Interface)
	if err := bindSteps(ctx, root, dev, rec, opts); err != nil {
		log.Warn("bind: failed, rolling back", "device", id, "err", err)
		// Roll back even when ctx is what ended the bind (each wait is
		// still bounded by opts.Timeout).
		if rbErr := giveBack(context.WithoutCancel(ctx), root, dev, rec, opts); rbErr != nil {
			log.Error("bind: rollback failed; the record stays for vmbusd restore", "device", id, "err", rbErr)
			return Record{}, errors.Join(err, &Error{Device: id, Step: "rollback", Err: rbErr})
		}
		if rmErr := removeRecord(opts.StateDir, dev.Instance); rmErr != nil {
			err = errors.Join(err, &Error{Device: id, Step: "record", Err: rmErr})
		}
		return Record{}, err
	}
	dev, _ = vmbus.LookupDevice(root, dev.Instance)
	log.Info("bind: bound", "device", id, "uio", dev.UIO)
	return rec, nil
}

// bindSteps moves the device to uio_hv_generic and verifies it.
func bindSteps(ctx context.Context, root string, dev vmbus.Device, rec Record, opts Options) error {
	id := dev.Instance.String()
	step := func(s string, err error) error {
		if err == nil {
			return nil
		}
		return &Error{Device: id, Step: s, Err: err}
	}
	if realRoot(root) && rec.Interface != "" {
		if err := setLinkDown(rec.Interface); err != nil {
			return step("link down", fmt.Errorf("interface %s: %w", rec.Interface, err))
		}
	}
	if err := writeAttr(filepath.Join(dev.Path, "driver_override"), DriverUIO); err != nil {
		return step("override", err)
	}
	if err := unbindFrom(ctx, root, dev, opts); err != nil {
		return step("unbind", err)
	}
	if err := bindTo(ctx, root, dev, DriverUIO, opts); err != nil {
		return step("bind", err)
	}
	err := waitFor(ctx, opts.Timeout, "the uio node", func() (bool, error) {
		n := uioOf(dev.Path)
		if n == "" {
			return false, nil
		}
		_, err := os.Stat(filepath.Join(root, "dev", n))
		return err == nil, nil
	})
	return step("verify", err)
}

// unbindFrom unbinds the device from its current driver, if any, and waits
// until the driver link is gone (binding right after an unbind can fail
// with EBUSY; docs/protocol/ecosystem.md §1.7).
func unbindFrom(ctx context.Context, root string, dev vmbus.Device, opts Options) error {
	cur, err := driverOf(dev.Path)
	if err != nil || cur == "" {
		return err
	}
	id := dev.Instance.String()
	if err := writeAttr(filepath.Join(root, driversDir, cur, "unbind"), id); err != nil {
		// ENODEV: it is no longer bound to cur (raced); the wait decides.
		opts.Logger.Debug("bind: unbind write", "device", id, "driver", cur, "err", err)
	}
	return waitFor(ctx, opts.Timeout, cur+" to release it", func() (bool, error) {
		d, err := driverOf(dev.Path)
		return d == "", err
	})
}

// bindTo asks drv to take the unbound device (drivers/<drv>/bind, with
// drivers_probe as fallback when the kernel refuses the write) and waits
// until it has. A freshly offered device can be claimed by its default
// driver's own probe while this runs (the probe started before the
// override was written): such a driver is unbound again and drv asked
// once more, every retryBind.
func bindTo(ctx context.Context, root string, dev vmbus.Device, drv string, opts Options) error {
	id := dev.Instance.String()
	ask := func() error {
		if err := writeAttr(filepath.Join(root, driversDir, drv, "bind"), id); err != nil {
			opts.Logger.Debug("bind: bind write refused, probing", "device", id, "driver", drv, "err", err)
			if err := writeAttr(filepath.Join(root, busDir, "drivers_probe"), id); err != nil {
				return fmt.Errorf("%s/bind and drivers_probe refused: %w", drv, err)
			}
		}
		return nil
	}
	if err := ask(); err != nil {
		return err
	}
	last := time.Now()
	return waitFor(ctx, opts.Timeout, drv+" to claim it", func() (bool, error) {
		d, err := driverOf(dev.Path)
		if err != nil || d == drv {
			return d == drv, err
		}
		if time.Since(last) >= retryBind {
			last = time.Now()
			if d != "" {
				opts.Logger.Info("bind: another driver took the device meanwhile; taking it back", "device", id, "driver", d)
				writeAttr(filepath.Join(root, driversDir, d, "unbind"), id)
			}
			ask()
		}
		return false, nil
	})
}

// retryBind is how long bindTo waits for the driver before asking again.
const retryBind = 200 * time.Millisecond

// giveBack returns the device to the state of rec: unbound from whatever
// has it (unless that is the original driver), the override as it was,
// bound to the original driver and, for hv_netvsc, the netdev back; on a
// real root the link is restored too.
func giveBack(ctx context.Context, root string, dev vmbus.Device, rec Record, opts Options) error {
	id := dev.Instance.String()
	step := func(s string, err error) error {
		if err == nil {
			return nil
		}
		return &Error{Device: id, Step: s, Err: err}
	}
	cur, err := driverOf(dev.Path)
	if err != nil {
		return step("check", err)
	}
	if cur != "" && cur != rec.OriginalDriver {
		if err := unbindFrom(ctx, root, dev, opts); err != nil {
			return step("unbind", err)
		}
		cur = ""
	}
	ov, _, err := readOverride(dev.Path)
	if err != nil {
		return step("override", err)
	}
	if ov != rec.OriginalOverride {
		v := rec.OriginalOverride
		if v == "" {
			v = "\n" // clears it
		}
		if err := writeAttr(filepath.Join(dev.Path, "driver_override"), v); err != nil {
			return step("override", err)
		}
	}
	if rec.OriginalDriver != "" && cur != rec.OriginalDriver {
		if err := bindTo(ctx, root, dev, rec.OriginalDriver, opts); err != nil {
			return step("bind", err)
		}
	}
	if rec.OriginalDriver != DriverNetvsc {
		return nil
	}
	var ifname string
	err = waitFor(ctx, opts.Timeout, "the netdev to come back", func() (bool, error) {
		ifname = netdevOf(dev.Path)
		return ifname != "", nil
	})
	if err != nil {
		return step("verify", err)
	}
	if realRoot(root) && rec.Interface != "" {
		name, err := restoreLink(ifname, rec)
		if err != nil {
			return step("restore link", fmt.Errorf("interface %s: %w", name, err))
		}
		ifname = name
	}
	opts.Logger.Info("bind: given back", "device", id, "driver", rec.OriginalDriver, "interface", ifname)
	return nil
}

// Unbind gives a device back: to the driver its record names (restoring
// the override and, on a real root, the interface's name, MTU, addresses
// and up state), or, without a record, to its default driver (hv_netvsc
// for a NIC; none otherwise). The device is named by instance GUID, by its
// interface name, or by the interface name its record kept. It refuses a
// device bound to a driver other than uio_hv_generic, and one whose
// R/dev/uioN a process holds open (real root; unless Force). The record is
// deleted once the driver has the device back.
func Unbind(ctx context.Context, root, nameOrGUID string, opts Options) (Record, error) {
	root, opts = opts.fill(root)
	log := opts.Logger
	dev, err := Resolve(root, nameOrGUID)
	if err != nil {
		if rec, ok := recordByInterface(opts.StateDir, nameOrGUID); ok {
			dev, err = vmbus.LookupDevice(root, rec.Device)
		}
		if err != nil {
			return Record{}, &Error{Device: nameOrGUID, Step: "resolve", Err: err}
		}
	}
	id := dev.Instance.String()
	fail := func(step string, err error) (Record, error) {
		return Record{}, &Error{Device: id, Step: step, Err: err}
	}
	unlock, err := lockState(opts.StateDir, opts.Timeout)
	if err != nil {
		return fail("lock", err)
	}
	defer unlock()
	if dev, err = vmbus.LookupDevice(root, dev.Instance); err != nil {
		return fail("resolve", err)
	}
	rec, err := ReadRecord(opts.StateDir, dev.Instance)
	switch {
	case err == nil:
	case errors.Is(err, fs.ErrNotExist):
		rec = Record{Version: RecordVersion, Device: dev.Instance, Class: dev.Class, Root: root}
		if dev.Class == vmbus.ClassNetwork {
			rec.OriginalDriver = DriverNetvsc
		}
		log.Info("unbind: no record; giving the device to its default driver", "device", id, "driver", rec.OriginalDriver)
	default:
		return fail("record", err)
	}
	switch dev.Driver {
	case DriverUIO:
		if realRoot(root) && !opts.Force && dev.UIO != "" {
			if pids := nodeHolders(filepath.Join("/dev", dev.UIO)); len(pids) > 0 {
				return fail("check", fmt.Errorf("/dev/%s held by pid %v: %w", dev.UIO, pids, ErrInUse))
			}
		}
	case "", rec.OriginalDriver:
		// Unbound, or given back already: settle the override (and the
		// link) all the same.
	default:
		return fail("check", fmt.Errorf("%s, not %s: %w", dev.Driver, DriverUIO, ErrOtherDriver))
	}
	log.Info("unbind: giving back", "device", id, "to", rec.OriginalDriver, "interface", rec.Interface)
	if err := giveBack(ctx, root, dev, rec, opts); err != nil {
		var be *Error
		if errors.As(err, &be) && be.Step == "restore link" {
			// The driver has it back; only the link settings are off.
			return rec, errors.Join(err, removeRecord(opts.StateDir, dev.Instance))
		}
		return Record{}, err
	}
	if err := removeRecord(opts.StateDir, dev.Instance); err != nil {
		return rec, &Error{Device: id, Step: "record", Err: err}
	}
	return rec, nil
}

// recordByInterface finds the record of the device whose interface was
// name (its netdev is gone while uio_hv_generic has it).
func recordByInterface(stateDir, name string) (Record, bool) {
	recs, _ := Records(stateDir)
	for _, r := range recs {
		if r.Interface != "" && r.Interface == name {
			return r, true
		}
	}
	return Record{}, false
}

// Restore gives back every device that has a record in the state directory
// (left by a crash, or by vmbus-bind): `vmbusd restore`, the unit's
// ExecStopPost, and the daemon's first step. A record of a device that no
// longer exists is dropped. It returns the records it settled; the error
// joins every device's failure.
func Restore(ctx context.Context, root string, opts Options) ([]Record, error) {
	root, opts = opts.fill(root)
	recs, err := Records(opts.StateDir)
	errs := []error{err}
	var done []Record
	for _, rec := range recs {
		if rec.Root != "" && filepath.Clean(rec.Root) != root {
			errs = append(errs, &Error{Device: rec.Device.String(), Step: "check",
				Err: fmt.Errorf("record is for root %s, not %s", rec.Root, root)})
			continue
		}
		if _, err := vmbus.LookupDevice(root, rec.Device); errors.Is(err, fs.ErrNotExist) {
			opts.Logger.Info("restore: device gone; dropping its record", "device", rec.Device.String())
			errs = append(errs, removeRecord(opts.StateDir, rec.Device))
			done = append(done, rec)
			continue
		}
		r, err := Unbind(ctx, root, rec.Device.String(), opts)
		if err != nil {
			errs = append(errs, err)
		}
		if err == nil || r.Device == rec.Device {
			done = append(done, rec)
		}
	}
	return done, errors.Join(errs...)
}

// checkModule requires uio_hv_generic, loading it on a real root.
func checkModule(root string, log *slog.Logger) error {
	rel := kernelRelease(root)
	switch st := moduleState(root, rel); st {
	case ModuleLoaded, ModuleBuiltin:
		return nil
	case ModuleAvailable:
		if realRoot(root) {
			log.Info("bind: loading uio_hv_generic")
			if err := modprobe(); err != nil {
				return fmt.Errorf("%w: %v", ErrNoModule, err)
			}
			if moduleState(root, rel) == ModuleLoaded {
				return nil
			}
		}
		return fmt.Errorf("%w: installed but not loaded (modprobe uio_hv_generic)", ErrNoModule)
	default:
		return fmt.Errorf("%w (kernel %s without CONFIG_UIO_HV_GENERIC?)", ErrNoModule, rel)
	}
}

// managementReason says why an interface must not be taken from the
// kernel, "" when nothing does: it carries a default route (IPv4 or IPv6,
// R/proc/net/route and ipv6_route), or the current SSH session
// (SSH_CONNECTION): the route to the client runs over it, or, on a real
// root, it holds the server address (netlink). A simulated tree has routes
// but no addresses, so there only the route rules apply.
func managementReason(root, ifname string, getenv func(string) string) (string, error) {
	rs, err := readRoutes(root)
	if err != nil {
		return "", err
	}
	var why []string
	if slices.Contains(defaultRouteIfaces(rs), ifname) {
		why = append(why, "it carries the default route")
	}
	if client, server, ok := sshEndpoints(getenv("SSH_CONNECTION")); ok {
		if routeIface(rs, client) == ifname {
			why = append(why, fmt.Sprintf("the SSH session from %s runs over it", client))
		} else if realRoot(root) && addrOnLink(ifname, server) {
			why = append(why, fmt.Sprintf("it holds %s, the SSH session's server address", server))
		}
	}
	return strings.Join(why, "; "), nil
}

// Identify returns the instance GUID of a device named by GUID, by
// interface name, or by the interface name its record kept (a NIC bound to
// uio_hv_generic has no netdev). It reads sysfs and the records only.
func Identify(root, stateDir, nameOrGUID string) (vmbus.GUID, error) {
	root, opts := Options{StateDir: stateDir}.fill(root)
	dev, err := Resolve(root, nameOrGUID)
	if err == nil {
		return dev.Instance, nil
	}
	if rec, ok := recordByInterface(opts.StateDir, nameOrGUID); ok {
		return rec.Device, nil
	}
	return vmbus.GUID{}, err
}
