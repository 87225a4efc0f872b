package uio

import (
	"os"
	"testing"
)

func TestCharMapOffsetIsIndexPages(t *testing.T) {
	page := int64(os.Getpagesize())
	for k := 0; k < 5; k++ {
		if got := charMapOffset(k); got != int64(k)*page {
			t.Errorf("charMapOffset(%d) = %d, want %d", k, got, int64(k)*page)
		}
	}
}

func TestMapLenRoundsUpToPages(t *testing.T) {
	page := os.Getpagesize()
	for _, tc := range []struct {
		size uint64
		want int // 0: error
	}{
		{1, page},
		{uint64(page), page},
		{uint64(page) + 1, 2 * page},
		{31 << 20, 31 << 20},
		{0, 0},
		{^uint64(0), 0},
	} {
		got, err := mapLen(tc.size)
		if (err != nil) != (tc.want == 0) || got != tc.want {
			t.Errorf("mapLen(%d) = %d, %v; want %d", tc.size, got, err, tc.want)
		}
	}
}

// TestMmapSharedAtOffset maps the second page of a regular file the way map
// 1 of /dev/uioN is mapped, and checks that writes go both ways.
func TestMmapSharedAtOffset(t *testing.T) {
	page := os.Getpagesize()
	f, err := os.Create(t.TempDir() + "/mem")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(int64(3 * page)); err != nil {
		t.Fatal(err)
	}
	mem, err := mmapShared(int(f.Fd()), charMapOffset(1), 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(mem) != page {
		t.Errorf("mapping is %d bytes, want one page", len(mem))
	}
	m := trimMap(mem, 100)
	if len(m) != 100 || cap(m) != 100 {
		t.Errorf("trimmed to len %d cap %d, want 100", len(m), cap(m))
	}
	m[7] = 0x5a
	var b [1]byte
	if _, err := f.ReadAt(b[:], int64(page)+7); err != nil || b[0] != 0x5a {
		t.Errorf("file byte = %#x, %v; want 0x5a", b[0], err)
	}
	if _, err := f.WriteAt([]byte{0xa5}, int64(page)+8); err != nil || m[8] != 0xa5 {
		t.Errorf("mapped byte = %#x, %v; want 0xa5", m[8], err)
	}
	if err := munmap(mem); err != nil {
		t.Errorf("munmap: %v", err)
	}
}
