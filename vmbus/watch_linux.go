package vmbus

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// waitDir calls scan until it reports done, ctx ends or it fails, calling
// it again whenever inotify reports a change under dir (or one level
// below) and at least every 20 ms in case inotify misses one (sysfs does not
// always generate events).
func waitDir(ctx context.Context, dir string, scan func() (bool, error)) error {
	const fallback = 20 * time.Millisecond
	var f *os.File
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err == nil {
		f = os.NewFile(uintptr(fd), "inotify")
		defer f.Close()
	}
	const mask = unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_ATTRIB | unix.IN_CLOSE_WRITE
	watch := func() {
		if f == nil {
			return
		}
		unix.InotifyAddWatch(fd, dir, mask)
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			unix.InotifyAddWatch(fd, filepath.Join(dir, e.Name()), mask)
		}
	}
	var buf [4096]byte
	for {
		watch()
		done, err := scan()
		if err != nil || done {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		deadline := time.Now().Add(fallback)
		if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
			deadline = d
		}
		if f == nil {
			time.Sleep(time.Until(deadline))
			continue
		}
		f.SetReadDeadline(deadline)
		if _, err := f.Read(buf[:]); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			time.Sleep(fallback)
		}
	}
}
