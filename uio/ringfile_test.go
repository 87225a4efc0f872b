//go:build linux

package uio

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ringDir is a tmpfs directory when one is available, as the simulator's
// ring files are.
func ringDir(t *testing.T) string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		dir, err := os.MkdirTemp("/dev/shm", "uio-ring")
		if err == nil {
			t.Cleanup(func() { os.RemoveAll(dir) })
			return dir
		}
	}
	return t.TempDir()
}

func TestOpenRingFileMapsTheWholeFileShared(t *testing.T) {
	page := os.Getpagesize()
	path := filepath.Join(ringDir(t), "ring")
	size := 2 * 4 * page
	if err := os.WriteFile(path, make([]byte, size), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := OpenRingFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Mem) != size || r.Path != path {
		t.Fatalf("Mem is %d bytes, want %d", len(r.Mem), size)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// The inbound ring starts at half the file.
	f.WriteAt([]byte{0x42}, int64(size/2))
	if r.Mem[size/2] != 0x42 {
		t.Error("mapping does not see the file write")
	}
	r.Mem[size-1] = 0x24
	var b [1]byte
	if f.ReadAt(b[:], int64(size-1)); b[0] != 0x24 {
		t.Error("file does not see the mapping write")
	}
	if err := r.Close(); err != nil || r.Mem != nil {
		t.Errorf("Close = %v, Mem %d bytes", err, len(r.Mem))
	}
	if err := r.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
}

func TestOpenRingFileRefusesBadFiles(t *testing.T) {
	page := os.Getpagesize()
	dir := ringDir(t)
	for _, tc := range []struct {
		name string
		size int
		want string
	}{
		{"empty", 0, "not a non-zero multiple"},
		{"one page", page, "not a non-zero multiple"},
		{"three pages", 3 * page, "not a non-zero multiple"},
		{"odd", 2*page + 1, "not a non-zero multiple"},
	} {
		path := filepath.Join(dir, tc.name)
		os.WriteFile(path, make([]byte, tc.size), 0o600)
		if r, err := OpenRingFile(path); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: OpenRingFile = %v, want error containing %q", tc.name, err, tc.want)
			if r != nil {
				r.Close()
			}
		}
	}
	if _, err := OpenRingFile(filepath.Join(dir, "absent")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("absent: OpenRingFile = %v, want ErrNotExist", err)
	}
}
