package bus

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestFileGuestMemoryReadsPagesAndRejectsOutside(t *testing.T) {
	root := t.TempDir()
	if err := EnsureGuestMemFile(root, 16*4096); err != nil {
		t.Fatal(err)
	}
	// A second, smaller request keeps the larger file: it is guest RAM.
	if err := EnsureGuestMemFile(root, 4096); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(root, GuestMemPath)
	if st, _ := os.Stat(p); st.Size() != 16*4096 {
		t.Fatalf("size %d", st.Size())
	}
	f, _ := os.OpenFile(p, os.O_RDWR, 0)
	f.WriteAt([]byte("hello, guest"), 5*4096+100)
	f.Close()
	m, err := OpenFileGuestMemory(root)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	b := make([]byte, 12)
	if err := m.ReadPage(b, 5, 100); err != nil || string(b) != "hello, guest" {
		t.Errorf("read %q %v", b, err)
	}
	if err := m.ReadPage(b, 16, 0); err != errGuestRange {
		t.Errorf("page past the end: %v", err)
	}
	if err := m.ReadPage(make([]byte, 100), 3, 4090); err != errGuestRange {
		t.Errorf("read across the page end: %v", err)
	}
}

func TestProcGuestMemoryReadsAnotherProcessView(t *testing.T) {
	m, err := OpenProcGuestMemory(os.Getpid())
	if err != nil {
		t.Skip(err)
	}
	defer m.Close()
	buf := bytes.Repeat([]byte("0123456789abcdef"), 512)
	a := uintptrOf(buf)
	got := make([]byte, 64)
	pfn, off := uint64(a/4096), uint32(a%4096)
	n := min(64, 4096-int(off))
	if err := m.ReadPage(got[:n], pfn, off); err != nil || !bytes.Equal(got[:n], buf[:n]) {
		t.Errorf("read own memory: %v", err)
	}
	if err := m.ReadPage(got[:8], 1, 0); err != errGuestRange {
		t.Errorf("unmapped page: %v", err)
	}
	if err := m.ReadPage(got[:8], maxUserPFN, 0); err != errGuestRange {
		t.Errorf("pfn beyond user space: %v", err)
	}
}

func TestParseMemoryModel(t *testing.T) {
	for _, m := range []MemoryModel{GuestMemFile, GuestMemProc} {
		if got, err := ParseMemoryModel(m.String()); err != nil || got != m {
			t.Errorf("%v: %v %v", m, got, err)
		}
	}
	if _, err := ParseMemoryModel("dma"); err == nil {
		t.Error("unknown model parsed")
	}
}
