package uio

import (
	"os"
	"testing"

	"github.com/vmbusd/vmbusd/internal/testutil"
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

// residentPages counts the pages of mem that have a page-table entry now.
func residentPages(t *testing.T, mem []byte) int {
	t.Helper()
	n := 0
	for _, p := range testutil.ResidentPages(t, mem) {
		if p {
			n++
		}
	}
	return n
}

// TestOpenPrefaults: the maps Options.Prefault names (a prefix with ":",
// or a whole name) are mapped in full at Open, so their first touch does
// not fault; the others keep the kernel's lazy default.
func TestOpenPrefaults(t *testing.T) {
	for _, tc := range []struct {
		name     string
		prefault []string
		want     map[string]bool // maps mapped in full; the rest not at all
	}{
		{"none", nil, map[string]bool{}},
		{"buffers by prefix", []string{"recv:", "send:"}, map[string]bool{"recv:925201": true, "send:925202": true}},
		{"a whole name", []string{"int_page"}, map[string]bool{"int_page": true}},
		{"a prefix without its colon matches nothing", []string{"recv"}, map[string]bool{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newTestHost(t, nicMaps)
			d, _ := h.open(t, Options{Prefault: tc.prefault})
			for _, m := range d.Info().Maps {
				mem := d.Map(m.Name)
				pages := (len(mem) + os.Getpagesize() - 1) / os.Getpagesize()
				got, want := residentPages(t, mem), 0
				if tc.want[m.Name] {
					want = pages
				}
				if got != want {
					t.Errorf("%s: %d of %d pages mapped after Open, want %d", m.Name, got, pages, want)
				}
			}
		})
	}
}
