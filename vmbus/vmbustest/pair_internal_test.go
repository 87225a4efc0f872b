package vmbustest

import (
	"testing"

	"github.com/vmbusd/vmbusd/vmbus"
)

func TestNewChecksRingSizes(t *testing.T) {
	page := vmbus.DataOffset()
	tests := []struct {
		name    string
		out, in int
		ok      bool
	}{
		{"defaults", 0, 0, true},
		{"smallest", page + 8, page + 8, true},
		{"hv_sock's sizes", 6 * 4096, 64 * 4096, true},
		{"no data area", page, 0, false},
		{"data area not a multiple of 8", 0, page + 12, false},
		{"negative", -page, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := newPair(Options{OutRingSize: tc.out, InRingSize: tc.in})
			if (err == nil) != tc.ok {
				t.Fatalf("newPair = %v, want ok %v", err, tc.ok)
			}
			if err != nil {
				return
			}
			defer p.Close()
			want := [2]int{tc.out, tc.in}
			for i := range want {
				if want[i] == 0 {
					want[i] = DefaultRingSize
				}
			}
			got := [2]int{len(p.out()), len(p.in())}
			if got != want {
				t.Fatalf("rings of %v bytes, want %v", got, want)
			}
			if d := p.Guest.Out().DataSize(); d != want[0]-page {
				t.Fatalf("guest outbound data area %d, want %d", d, want[0]-page)
			}
			if d := p.Host.In().DataSize(); d != want[0]-page {
				t.Fatalf("host inbound data area %d, want %d: the ends disagree", d, want[0]-page)
			}
		})
	}
}
