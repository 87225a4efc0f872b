package daemon

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// devWatch tells the NIC supervisors waiting for a device (a rescinded NIC
// waiting for its re-offer) that R/sys/bus/vmbus/devices may have changed,
// so that they look again at once instead of polling on a fixed delay.
// Events come from inotify on the devices directory (a simulated tree on
// tmpfs raises them) and, on a real root, from the kernel's uevents for
// the vmbus subsystem (a real sysfs raises no inotify events for devices
// the kernel adds or removes). Waiters still rescan now and then in case
// neither source is available (Options.RescanInterval).
//
// Safe for concurrent use; close it once.
type devWatch struct {
	log  *slog.Logger
	mu   sync.Mutex
	ch   chan struct{} // closed and replaced at each event
	fds  []*os.File
	done sync.WaitGroup
}

func newDevWatch(root string, log *slog.Logger) *devWatch {
	w := &devWatch{log: log, ch: make(chan struct{})}
	dir := filepath.Join(root, "sys/bus/vmbus/devices")
	if fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC); err == nil {
		if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CREATE|unix.IN_DELETE|unix.IN_MOVED_TO|unix.IN_MOVED_FROM); err != nil {
			unix.Close(fd)
			log.Debug("no inotify on the devices directory; rescanning only", "dir", dir, "err", err)
		} else {
			w.follow(os.NewFile(uintptr(fd), "inotify"), nil)
		}
	}
	if filepath.Clean(root) == "/" {
		// NETLINK_KOBJECT_UEVENT group 1: the kernel's own uevents
		// (what udev reads); no privilege needed to listen.
		fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.NETLINK_KOBJECT_UEVENT)
		if err == nil {
			if err = unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1}); err != nil {
				unix.Close(fd)
			} else {
				w.follow(os.NewFile(uintptr(fd), "uevent"), []byte("SUBSYSTEM=vmbus\x00"))
			}
		}
		if err != nil {
			log.Debug("no kernel uevents; rescanning only", "err", err)
		}
	}
	return w
}

// follow reads events from f until it is closed, and wakes the waiters
// for each read that contains match (every read when match is nil).
func (w *devWatch) follow(f *os.File, match []byte) {
	w.fds = append(w.fds, f)
	w.done.Add(1)
	go func() {
		defer w.done.Done()
		buf := make([]byte, 8192)
		for {
			n, err := f.Read(buf)
			if err != nil {
				if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) || errors.Is(err, unix.ENOBUFS) {
					continue
				}
				return // closed
			}
			if match == nil || bytes.Contains(buf[:n], match) {
				w.wake()
			}
		}
	}()
}

func (w *devWatch) wake() {
	w.mu.Lock()
	close(w.ch)
	w.ch = make(chan struct{})
	w.mu.Unlock()
}

// changed returns a channel closed at the next event. Take it before
// looking at sysfs, so that an event in between is not missed.
func (w *devWatch) changed() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ch
}

func (w *devWatch) close() {
	for _, f := range w.fds {
		f.Close()
	}
	w.done.Wait()
}
