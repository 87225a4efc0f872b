package vswitch

import (
	"bytes"
	"net"
	"net/netip"
	"testing"
)

// TestGeneratorTemplateFillMatchesFrame: the frames runSend builds from
// its templates are the frames Frame builds, whatever the buffer held.
func TestGeneratorTemplateFillMatchesFrame(t *testing.T) {
	g := NewGenerator(GeneratorConfig{Sizes: []int{60, 64, 65, 128, 1514, 9014},
		SrcIP: netip.MustParseAddr("10.1.2.3"), DstIP: netip.MustParseAddr("10.9.8.7")})
	mac := net.HardwareAddr{0x02, 0xaa, 0, 0, 0, 7}
	tmpl := g.templates(mac)
	for k, size := range g.cfg.Sizes {
		for _, flow := range []int{0, 1, 63, 1000} {
			for _, seq := range []uint64{0, 1, 0x0102030405060708, ^uint64(0)} {
				want := make([]byte, size)
				got := make([]byte, size)
				for i := range want {
					want[i], got[i] = byte(i*7), byte(i*7) // the same stale bytes
				}
				g.Frame(want, mac, flow, seq)
				fill(got, &tmpl[k], flow, seq)
				if !bytes.Equal(got, want) {
					t.Fatalf("size %d flow %d seq %#x:\n got %x\nwant %x", size, flow, seq, got[:64], want[:64])
				}
			}
		}
	}
}
