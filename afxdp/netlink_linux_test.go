//go:build linux

package afxdp

import (
	"encoding/binary"
	"testing"

	"golang.org/x/sys/unix"
)

func nlMsg(typ uint16, family uint8, index int32, extra int) []byte {
	b := make([]byte, unix.SizeofNlMsghdr+unix.SizeofIfInfomsg+extra)
	binary.NativeEndian.PutUint32(b, uint32(len(b)))
	binary.NativeEndian.PutUint16(b[4:], typ)
	b[16] = family
	binary.NativeEndian.PutUint32(b[20:], uint32(index))
	return b
}

func TestLinkDeletedFindsOnlyOurUnregistration(t *testing.T) {
	tests := []struct {
		name string
		msg  []byte
		want bool
	}{
		{"our dellink", nlMsg(unix.RTM_DELLINK, unix.AF_UNSPEC, 7, 0), true},
		{"after a newlink", append(nlMsg(unix.RTM_NEWLINK, 0, 7, 4), nlMsg(unix.RTM_DELLINK, 0, 7, 0)...), true},
		{"another link", nlMsg(unix.RTM_DELLINK, unix.AF_UNSPEC, 8, 0), false},
		{"bridge port removal", nlMsg(unix.RTM_DELLINK, unix.AF_BRIDGE, 7, 0), false},
		{"newlink", nlMsg(unix.RTM_NEWLINK, 0, 7, 0), false},
		{"truncated", nlMsg(unix.RTM_DELLINK, 0, 7, 0)[:20], false},
		{"length past the datagram", func() []byte {
			b := nlMsg(unix.RTM_DELLINK, 0, 7, 0)
			binary.NativeEndian.PutUint32(b, 4096)
			return b
		}(), false},
		{"length below a header", func() []byte {
			b := nlMsg(unix.RTM_DELLINK, 0, 7, 0)
			binary.NativeEndian.PutUint32(b, 3)
			return b
		}(), false},
	}
	for _, tt := range tests {
		if got := linkDeleted(tt.msg, 7); got != tt.want {
			t.Errorf("%s: linkDeleted = %v", tt.name, got)
		}
	}
}

func FuzzLinkDeleted(f *testing.F) {
	f.Add(nlMsg(unix.RTM_DELLINK, 0, 7, 0))
	f.Add(append(nlMsg(unix.RTM_NEWLINK, 0, 7, 1), nlMsg(unix.RTM_DELLINK, 0, 7, 0)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		linkDeleted(b, 7) // must not panic on anything
	})
}
