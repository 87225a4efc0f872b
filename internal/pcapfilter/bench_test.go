package pcapfilter

import (
	"testing"

	"golang.org/x/net/bpf"
)

// benchCases are filters a capture is run with, each on a frame it
// matches and one it does not (a filter mostly runs on frames it drops).
var benchCases = []struct {
	name, expr, match, miss string
}{
	{"udp-port-53", "udp and port 53", "v4-udp-dns-query", "v6-tcp-syn-80"},
	{"tcp-syn", "tcp[tcpflags] & tcp-syn != 0", "v4-tcp-syn-80", "v4-udp-dns-query"},
	{"host-and-port", "host 10.0.0.1 and port 53", "v4-udp-dns-query", "v4-tcp-rst-22"},
	{"vlan-udp-port", "vlan 100 and udp port 53", "vlan100-v4-udp-dns", "v4-udp-dns-query"},
	{"ip6-net", "net 2001:db8::/32 and tcp", "v6-tcp-syn-80", "v4-tcp-syn-80"},
}

// BenchmarkMatch measures a compiled filter per frame, in this package's
// interpreter and, side by side, in x/net/bpf's VM.
func BenchmarkMatch(b *testing.B) {
	for _, bc := range benchCases {
		f, err := New(bc.expr, LinkEthernet, 0)
		if err != nil {
			b.Fatal(err)
		}
		prog, err := Compile(bc.expr, LinkEthernet, 0)
		if err != nil {
			b.Fatal(err)
		}
		vm, err := bpf.NewVM(prog)
		if err != nil {
			b.Fatal(err)
		}
		for _, side := range []struct {
			name  string
			frame string
			want  bool
		}{{"match", bc.match, true}, {"miss", bc.miss, false}} {
			fr := frameNamed(b, side.frame)
			if f.Match(fr) != side.want {
				b.Fatalf("%q on %s: want %v", bc.expr, side.frame, side.want)
			}
			b.Run(bc.name+"/"+side.name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(fr)))
				for b.Loop() {
					f.Match(fr)
				}
			})
			b.Run(bc.name+"/"+side.name+"/xnetbpf", func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(fr)))
				for b.Loop() {
					if _, err := vm.Run(fr); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func BenchmarkCompile(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := New("vlan 100 and udp port 53 or tcp[tcpflags] & tcp-syn != 0", LinkEthernet, 0); err != nil {
			b.Fatal(err)
		}
	}
}
