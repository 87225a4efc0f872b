package bus

// The host's watcher of the driver attributes: inotify IN_CLOSE_WRITE on
// R/sys/bus/vmbus/drivers/<driver>/ (bind, unbind, new_id, remove_id),
// R/sys/bus/vmbus/ (drivers_probe) and each device's driver_override. Each
// write is read, the file truncated again, and the write applied by the
// handlers in drivers.go, one at a time in the order the events arrive.
// After an inotify queue overflow every file is read again.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/vmbusd/vmbusd/vmbus"
)

// startDrivers prepares the parts of the tree binding needs and starts the
// watcher, which runs until the host's context ends.
func (h *Host) startDrivers() error {
	root := h.cfg.Root
	if err := initNetTree(root); err != nil {
		return err
	}
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("sim: drivers: inotify: %w", err)
	}
	ds := &driverCore{h: h, ino: os.NewFile(uintptr(fd), "inotify"),
		dynIDs: map[string][]vmbus.GUID{}, watches: map[int]watchTarget{},
		uioUsed: map[int]bool{}, ifUsed: map[string]bool{}, nextIfIndex: 2} // lo is 1
	for _, name := range vmbusDriverNames {
		if _, err := ds.watch(filepath.Join(root, vmbusDrvsDir, name), watchTarget{driver: name}); err != nil {
			ds.ino.Close()
			return err
		}
	}
	if _, err := ds.watch(filepath.Join(root, vmbusBusDir), watchTarget{bus: true}); err != nil {
		ds.ino.Close()
		return err
	}
	if err := ds.renderRoutes(); err != nil {
		ds.ino.Close()
		return err
	}
	h.drv = ds
	h.wg.Add(2)
	go ds.runWatch()
	go func() {
		defer h.wg.Done()
		<-h.ctx.Done()
		ds.ino.Close()
	}()
	return nil
}

// watch adds an IN_CLOSE_WRITE watch on path.
func (ds *driverCore) watch(path string, t watchTarget) (int, error) {
	wd := -1
	rc, err := ds.ino.SyscallConn()
	if err == nil {
		cerr := rc.Control(func(fd uintptr) {
			wd, err = unix.InotifyAddWatch(int(fd), path, unix.IN_CLOSE_WRITE)
		})
		err = errors.Join(err, cerr)
	}
	if err != nil {
		return 0, fmt.Errorf("sim: drivers: watch %s: %w", path, err)
	}
	ds.mu.Lock()
	ds.watches[wd] = t
	ds.mu.Unlock()
	return wd, nil
}

func (ds *driverCore) unwatch(wd int) {
	if wd <= 0 {
		return
	}
	ds.mu.Lock()
	delete(ds.watches, wd)
	ds.mu.Unlock()
	if rc, err := ds.ino.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { unix.InotifyRmWatch(int(fd), uint32(wd)) })
	}
}

// runWatch reads inotify events and applies the writes, one at a time, in
// the order they were made.
func (ds *driverCore) runWatch() {
	defer ds.h.wg.Done()
	log := ds.h.log
	log.Debug("sim: driver watcher start")
	defer log.Debug("sim: driver watcher stop")
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		n, err := ds.ino.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				log.Warn("sim: driver watcher", "err", err)
			}
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			// struct inotify_event: s32 wd, u32 mask, u32 cookie, u32 len, name[len].
			wd := int(int32(binary.NativeEndian.Uint32(buf[off:])))
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			nameLen := int(binary.NativeEndian.Uint32(buf[off+12:]))
			off += unix.SizeofInotifyEvent
			if nameLen > n-off {
				break
			}
			name := strings.TrimRight(string(buf[off:off+nameLen]), "\x00")
			off += nameLen
			ds.event(wd, mask, name)
		}
	}
}

func (ds *driverCore) event(wd int, mask uint32, name string) {
	if mask&unix.IN_Q_OVERFLOW != 0 {
		ds.rescan()
		return
	}
	ds.mu.Lock()
	t, ok := ds.watches[wd]
	if mask&unix.IN_IGNORED != 0 {
		delete(ds.watches, wd)
	}
	ds.mu.Unlock()
	if !ok || mask&unix.IN_CLOSE_WRITE == 0 {
		return
	}
	switch {
	case t.dev != nil:
		ds.overrideWritten(t.dev)
	case t.bus && name == "drivers_probe":
		ds.applyFile(filepath.Join(vmbusBusDir, name), ds.probeWritten)
	case t.driver != "":
		drv := t.driver
		switch name {
		case "bind":
			ds.applyFile(filepath.Join(vmbusDrvsDir, drv, name), func(v string) error { return ds.bindWritten(drv, v) })
		case "unbind":
			ds.applyFile(filepath.Join(vmbusDrvsDir, drv, name), func(v string) error { return ds.unbindWritten(drv, v) })
		case "new_id":
			ds.applyFile(filepath.Join(vmbusDrvsDir, drv, name), func(v string) error { return ds.newIDWritten(drv, v) })
		case "remove_id":
			ds.applyFile(filepath.Join(vmbusDrvsDir, drv, name), func(v string) error { return ds.removeIDWritten(drv, v) })
		}
	}
}

// rescan handles everything after an inotify queue overflow: every driver
// file and every override is read again.
func (ds *driverCore) rescan() {
	ds.h.log.Warn("sim: driver watcher: inotify queue overflow, rescanning")
	ds.applyFile(filepath.Join(vmbusBusDir, "drivers_probe"), ds.probeWritten)
	for _, drv := range vmbusDriverNames {
		ds.applyFile(filepath.Join(vmbusDrvsDir, drv, "new_id"), func(v string) error { return ds.newIDWritten(drv, v) })
		ds.applyFile(filepath.Join(vmbusDrvsDir, drv, "remove_id"), func(v string) error { return ds.removeIDWritten(drv, v) })
		ds.applyFile(filepath.Join(vmbusDrvsDir, drv, "unbind"), func(v string) error { return ds.unbindWritten(drv, v) })
		ds.applyFile(filepath.Join(vmbusDrvsDir, drv, "bind"), func(v string) error { return ds.bindWritten(drv, v) })
	}
	for _, d := range ds.h.Devices() {
		ds.overrideWritten(d)
	}
}

// applyFile takes what was written to the write-only attribute rel (under
// the root), truncates it again, and applies it. Empty content (the
// truncation's own trace, or a write already taken) is nothing.
func (ds *driverCore) applyFile(rel string, apply func(v string) error) {
	path := filepath.Join(ds.h.cfg.Root, rel)
	b, err := readWriteOnly(path)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			ds.h.log.Warn("sim: sysfs write", "file", rel, "err", err)
		}
		return
	}
	if len(b) == 0 {
		return
	}
	// truncate(2), not open(O_TRUNC): no IN_CLOSE_WRITE of our own.
	if err := os.Truncate(path, 0); err != nil {
		ds.h.log.Warn("sim: sysfs write", "file", rel, "err", err)
	}
	v := string(b)
	if err := apply(v); err != nil {
		ds.h.log.Warn("sim: sysfs write refused (the kernel would fail the write)",
			"file", rel, "value", strings.TrimSpace(v), "err", err)
	} else {
		ds.h.log.Info("sim: sysfs write", "file", rel, "value", strings.TrimSpace(v))
	}
	ds.writes.Add(1)
}

// readWriteOnly reads a file of mode 0200, as root does a sysfs attribute;
// an unprivileged host lends itself read permission for the moment.
func readWriteOnly(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrPermission) {
		if cerr := os.Chmod(path, 0o600); cerr == nil {
			b, err = os.ReadFile(path)
			os.Chmod(path, 0o200)
		}
	}
	return b, err
}
