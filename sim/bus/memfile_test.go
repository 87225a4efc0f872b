package bus

import (
	"testing"

	"golang.org/x/sys/unix"
)

func TestNewMemFileSharesMemoryWithItsFile(t *testing.T) {
	f, mem, err := newMemFile("test", 3*4096, false)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if len(mem) != 3*4096 {
		t.Fatalf("len(mem) = %d", len(mem))
	}
	st, err := f.Stat()
	if err != nil || st.Size() != 3*4096 {
		t.Fatalf("file size %v, %v", st, err)
	}
	for _, b := range mem {
		if b != 0 {
			t.Fatal("new memory not zeroed")
		}
	}
	mem[100] = 5
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, 100); err != nil || b[0] != 5 {
		t.Errorf("file reads %v, %v; want 5", b, err)
	}
	// A second mapping of the descriptor, as the guest makes.
	other, err := unix.Mmap(int(f.Fd()), 0, 3*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	other[8191] = 9
	if mem[8191] != 9 {
		t.Error("second mapping not shared")
	}
	if err := unix.Munmap(other); err != nil {
		t.Fatal(err)
	}
	if err := unmapMem(mem); err != nil {
		t.Fatal(err)
	}
	if err := unmapMem(nil); err != nil {
		t.Errorf("unmapMem(nil): %v", err)
	}
	if flags, err := unix.FcntlInt(f.Fd(), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Errorf("memfd not close-on-exec: %#x, %v", flags, err)
	}
}

func TestNewMemFileRejectsEmpty(t *testing.T) {
	if _, _, err := newMemFile("empty", 0, true); err == nil {
		t.Error("size 0 accepted")
	}
}
