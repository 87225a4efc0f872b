package bind

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vmbusd/vmbusd/vmbus"
)

// RecordVersion is the version of the record format.
const RecordVersion = 1

// Record is what a device looked like before it was bound, kept in the
// state directory as bind-<instance>.json until the device is given back.
// The scripts write and read the same file, so its layout is fixed: one
// top-level key per line, as json.MarshalIndent with two spaces writes it
// (scripts/vmbus-lib.sh parses the scalar lines).
type Record struct {
	Version int        `json:"version"`
	Device  vmbus.GUID `json:"device"` // instance
	Class   vmbus.GUID `json:"class"`
	Root    string     `json:"root"`
	By      string     `json:"by"` // who bound it: "vmbusd", "vmbus-bind"
	Time    time.Time  `json:"time"`
	// OriginalDriver is the driver the device had ("" when unbound); Unbind
	// gives it back to that driver.
	OriginalDriver string `json:"original_driver"`
	// OriginalOverride is its driver_override ("" when unset).
	OriginalOverride string `json:"original_override"`
	// The kernel netdev, when it had one: name, address, MTU, whether it
	// was up, and its addresses in CIDR form (real root only; empty in a
	// simulated tree).
	Interface string   `json:"interface"`
	MAC       string   `json:"mac"`
	MTU       int      `json:"mtu"`
	Up        bool     `json:"up"`
	Addresses []string `json:"addresses"`
}

const recordPrefix, recordSuffix = "bind-", ".json"

// RecordPath is the record file of a device in stateDir.
func RecordPath(stateDir string, dev vmbus.GUID) string {
	return filepath.Join(stateDir, recordPrefix+dev.String()+recordSuffix)
}

// ReadRecord reads a device's record; a missing one is an error wrapping
// fs.ErrNotExist.
func ReadRecord(stateDir string, dev vmbus.GUID) (Record, error) {
	return readRecordFile(RecordPath(stateDir, dev))
}

func readRecordFile(path string) (Record, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Record{}, err
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return Record{}, fmt.Errorf("bind: record %s: %w", path, err)
	}
	if r.Version != RecordVersion {
		return Record{}, fmt.Errorf("bind: record %s: version %d, want %d", path, r.Version, RecordVersion)
	}
	if r.Device.IsZero() {
		return Record{}, fmt.Errorf("bind: record %s: no device", path)
	}
	if want := recordPrefix + r.Device.String() + recordSuffix; filepath.Base(path) != want {
		return Record{}, fmt.Errorf("bind: record %s: for device %s", path, r.Device)
	}
	return r, nil
}

// Records reads every record in stateDir, sorted by device. A missing
// directory has none. Unreadable records are reported in the error, which
// comes with the records that could be read.
func Records(stateDir string) ([]Record, error) {
	ents, err := os.ReadDir(stateDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("bind: %w", err)
	}
	var recs []Record
	var errs []error
	for _, e := range ents {
		n := e.Name()
		if !strings.HasPrefix(n, recordPrefix) || !strings.HasSuffix(n, recordSuffix) {
			continue
		}
		r, err := readRecordFile(filepath.Join(stateDir, n))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		recs = append(recs, r)
	}
	slices.SortFunc(recs, func(a, b Record) int { return strings.Compare(a.Device.String(), b.Device.String()) })
	return recs, errors.Join(errs...)
}

// writeRecord writes r atomically: a temporary file in the same directory,
// synced, renamed over the record, and the directory synced.
func writeRecord(stateDir string, r Record) error {
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(stateDir, ".bind-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(append(b, '\n'))
	err = errors.Join(err, f.Chmod(0o644), f.Sync(), f.Close())
	if err == nil {
		err = os.Rename(tmp, RecordPath(stateDir, r.Device))
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(stateDir)
}

func removeRecord(stateDir string, dev vmbus.GUID) error {
	if err := os.Remove(RecordPath(stateDir, dev)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return syncDir(stateDir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// lockState takes the state directory's lock (flock on bind.lock, shared
// with the scripts' `flock`), waiting up to timeout. Binding steps of two
// processes never interleave.
func lockState(stateDir string, timeout time.Duration) (unlock func(), err error) {
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(stateDir, "bind.lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(timeout)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, err
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("%s held by another process for %v", f.Name(), timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
