package bus

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vmbusd/vmbusd/internal/testutil"
	"github.com/vmbusd/vmbusd/vmbus"
)

// skipWithoutPopulate skips on a kernel that refuses MADV_POPULATE_* (before
// 5.14), where populate leaves the pages lazy by design.
func skipWithoutPopulate(t *testing.T) {
	t.Helper()
	mem, err := unix.Mmap(-1, 0, os.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	if err := unix.Madvise(mem, unix.MADV_POPULATE_WRITE); err != nil {
		t.Skipf("MADV_POPULATE_WRITE: %v", err)
	}
}

// TestSharedMemoryIsMappedAtCreation: the buffers and rings the host shares
// with the guest are mapped in full when the host creates them, as a real
// host's view of memory the guest has backed and pinned: its first touch
// of a page does not fault.
func TestSharedMemoryIsMappedAtCreation(t *testing.T) {
	skipWithoutPopulate(t)
	for _, tc := range []struct {
		name   string
		create func(t *testing.T) []byte
	}{
		{"memfile", func(t *testing.T) []byte {
			f, mem, err := newMemFile("send", 64*4096, true)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			return mem
		}},
		{"ring file", func(t *testing.T) []byte {
			f, mem, err := createRingFile(subchannelTestDir(t), 31, 2*0x5000, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			return mem
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := tc.create(t)
			defer unmapMem(mem)
			for i, ok := range testutil.ResidentPages(t, mem) {
				if !ok {
					t.Fatalf("page %d of %d not mapped after creation", i, len(mem)/os.Getpagesize())
				}
			}
		})
	}
}

// TestFileGuestMemoryMapsWrittenPagesAtOpen: a session's view of
// R/dev/guestmem maps the pages the guest has written at open; the sparse
// rest stays a hole (populating it would allocate it on tmpfs).
func TestFileGuestMemoryMapsWrittenPagesAtOpen(t *testing.T) {
	skipWithoutPopulate(t)
	const pages = 16
	root := t.TempDir()
	if err := EnsureGuestMemFile(root, pages*4096); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(root, GuestMemPath), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	written := map[int]bool{5: true, 9: true, 10: true}
	for p := range written {
		if _, err := f.WriteAt([]byte("guest data"), int64(p)*4096+100); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	m, err := OpenFileGuestMemory(root)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	mem := m.(*fileGuestMemory).mem
	if os.Getpagesize() != 4096 {
		t.Skipf("page size %d", os.Getpagesize())
	}
	for i, ok := range testutil.ResidentPages(t, mem) {
		if ok != written[i] {
			t.Errorf("page %d mapped %v after open, want %v", i, ok, written[i])
		}
	}
}

// TestDeviceBuffersMappedAtOfferOnlyForTheNIC: a NIC's receive and send
// buffers, which its host uses on the data path, are mapped in full when
// the device is offered; the buffers every bound device has on kernels
// before 6.10 stay lazy on the others, whose protocols never use them.
func TestDeviceBuffersMappedAtOfferOnlyForTheNIC(t *testing.T) {
	skipWithoutPopulate(t)
	for _, tc := range []struct {
		name   string
		class  vmbus.GUID
		mapped bool
	}{
		{"nic", vmbus.ClassNetwork, true},
		{"other device", vmbus.ClassTest, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := New(Config{Root: t.TempDir(), Profile: ProfileLegacy})
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			const size = 64 * 4096
			d, err := h.AddDevice(DeviceConfig{Class: tc.class, RecvBuffer: size, SendBuffer: size})
			if err != nil {
				t.Fatal(err)
			}
			recv, send, _, _ := d.Buffers()
			for name, mem := range map[string][]byte{"recv": recv, "send": send} {
				if len(mem) != size {
					t.Fatalf("%s: %d bytes, want %d", name, len(mem), size)
				}
				mapped := 0
				for _, ok := range testutil.ResidentPages(t, mem) {
					if ok {
						mapped++
					}
				}
				if want := map[bool]int{true: size / os.Getpagesize()}[tc.mapped]; mapped != want {
					t.Errorf("%s: %d of %d pages mapped after offer, want %d", name, mapped, size/os.Getpagesize(), want)
				}
			}
		})
	}
}
