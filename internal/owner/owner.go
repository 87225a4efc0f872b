package owner

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// ErrBusy is what a *BusyError is (errors.Is): another live process owns
// the state directory.
var ErrBusy = errors.New("busy: owned by a live vmbusd")

// Commands an owner can be.
const (
	CommandRun     = "run"
	CommandRestore = "restore"
	CommandBind    = "bind"
	CommandUnbind  = "unbind"
)

// Info describes an owner.
type Info struct {
	PID     int       `json:"pid"`
	Command string    `json:"command"`
	Started time.Time `json:"started"`
	// Control is the daemon's control socket, removed by the next owner
	// when the daemon died without removing it.
	Control string `json:"control,omitempty"`
	// Devices are the instance GUIDs the owner drives; `bind` and `unbind`
	// of one of them is refused while the owner lives.
	Devices []string `json:"devices,omitempty"`
}

// Owns reports whether the owner drives the device (an instance GUID).
func (i Info) Owns(instance string) bool {
	return slices.ContainsFunc(i.Devices, func(d string) bool { return strings.EqualFold(d, instance) })
}

func (i Info) String() string {
	if i.PID == 0 {
		return "another process (its owner.json is unreadable)"
	}
	s := fmt.Sprintf("`vmbusd %s` (pid %d", i.Command, i.PID)
	if !i.Started.IsZero() {
		s += ", since " + i.Started.Format(time.RFC3339)
	}
	return s + ")"
}

// BusyError says who owns the state directory.
type BusyError struct {
	Dir   string
	Owner Info
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("busy: %s owns %s", e.Owner, e.Dir)
}

// Is makes errors.Is(err, ErrBusy) hold.
func (e *BusyError) Is(target error) bool { return target == ErrBusy }

const (
	lockName = "vmbusd.lock"
	infoName = "owner.json"
	// retry is how often a waiting Acquire tries again: flock has no
	// timeout, and a blocking one could not be given up.
	retry = 20 * time.Millisecond
)

// Lock is held ownership. Safe for concurrent use.
type Lock struct {
	dir  string
	f    *os.File
	prev Info

	mu   sync.Mutex
	info Info
}

// Acquire takes ownership of dir (created if missing) for info, waiting up
// to wait while another command holds it. A live daemon (command run) is
// not waited for: Acquire returns a *BusyError at once.
func Acquire(dir string, info Info, wait time.Duration) (*Lock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("owner: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("owner: %w", err)
	}
	deadline := time.Now().Add(wait)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, fmt.Errorf("owner: lock %s: %w", f.Name(), err)
		}
		cur, _ := readInfo(dir)
		// A daemon holds on for good; its owner.json is trusted only
		// while its pid lives (the holder may be a newer owner that has
		// not written its own yet).
		if (cur.Command == CommandRun && alive(cur.PID)) || !time.Now().Before(deadline) {
			f.Close()
			return nil, &BusyError{Dir: dir, Owner: cur}
		}
		time.Sleep(retry)
	}
	l := &Lock{dir: dir, f: f}
	l.prev, _ = readInfo(dir)
	if info.PID == 0 {
		info.PID = os.Getpid()
	}
	if info.Started.IsZero() {
		info.Started = time.Now().UTC().Truncate(time.Second)
	}
	if err := l.write(info); err != nil {
		f.Close()
		return nil, err
	}
	return l, nil
}

// Previous returns what the last owner wrote about itself, zero when
// nothing was left (it released cleanly).
func (l *Lock) Previous() Info { return l.prev }

// Info returns what the owner wrote about itself.
func (l *Lock) Info() Info {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.info
}

// SetDevices records the devices the owner drives.
func (l *Lock) SetDevices(devices []string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	info := l.info
	info.Devices = slices.Clone(devices)
	slices.Sort(info.Devices)
	return l.writeLocked(info)
}

func (l *Lock) write(info Info) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.writeLocked(info)
}

// writeLocked replaces owner.json atomically; l.mu is held.
func (l *Lock) writeLocked(info Info) error {
	b, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(l.dir, ".owner-*")
	if err != nil {
		return fmt.Errorf("owner: %w", err)
	}
	_, err = tmp.Write(append(b, '\n'))
	err = errors.Join(err, tmp.Chmod(0o644), tmp.Close())
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(l.dir, infoName))
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("owner: %w", err)
	}
	l.info = info
	return nil
}

// Release gives ownership up: owner.json goes (nothing is left to clean
// up), then the lock.
func (l *Lock) Release() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := os.Remove(filepath.Join(l.dir, infoName))
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	err = errors.Join(err, l.f.Close())
	l.f = nil
	return err
}

func readInfo(dir string) (Info, error) {
	var i Info
	b, err := os.ReadFile(filepath.Join(dir, infoName))
	if err != nil {
		return i, err
	}
	if len(b) > 1<<20 {
		return Info{}, errors.New("owner: owner.json too large")
	}
	err = json.Unmarshal(b, &i)
	return i, err
}

// alive reports whether a process with this pid exists.
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}
