package netvsp

import (
	"testing"
	"unsafe"

	"github.com/vmbusd/vmbusd/internal/testutil"
)

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// waitFor is testutil.WaitFor with its default deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.WaitFor(t, 0, cond, what)
}
