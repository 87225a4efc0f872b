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
	{"ip6-net-tcp", "net 2001:db8::/32 and tcp", "v6-tcp-syn-80", "v4-tcp-syn-80"},
}

// BenchmarkMatch measures a filter per frame, side by side: impl=opt is
// what New builds, impl=plain the same expression without the optimiser,
// impl=xnetbpf the optimised program in x/net/bpf's VM. Compare with
// benchstat -col /impl.
func BenchmarkMatch(b *testing.B) {
	for _, bc := range benchCases {
		optRaw, err := compileWith(bc.expr, LinkEthernet, 0, true)
		if err != nil {
			b.Fatal(err)
		}
		plainRaw, err := compileWith(bc.expr, LinkEthernet, 0, false)
		if err != nil {
			b.Fatal(err)
		}
		opt, err := FromProgram(optRaw)
		if err != nil {
			b.Fatal(err)
		}
		plain, err := FromProgram(plainRaw)
		if err != nil {
			b.Fatal(err)
		}
		ins, _ := bpf.Disassemble(optRaw)
		vm, err := bpf.NewVM(ins)
		if err != nil {
			b.Fatal(err)
		}
		for _, side := range []struct {
			name  string
			frame string
			want  bool
		}{{"match", bc.match, true}, {"miss", bc.miss, false}} {
			fr := frameNamed(b, side.frame)
			if opt.Match(fr) != side.want || plain.Match(fr) != side.want {
				b.Fatalf("%q on %s: want %v", bc.expr, side.frame, side.want)
			}
			prefix := "expr=" + bc.name + "/frame=" + side.name + "/impl="
			_, _, optSteps := refRunCount(optRaw, fr)
			_, _, plainSteps := refRunCount(plainRaw, fr)
			for _, impl := range []struct {
				name  string
				run   func([]byte) bool
				steps int
			}{
				{"opt", opt.Match, optSteps},
				{"plain", plain.Match, plainSteps},
				{"xnetbpf", func(p []byte) bool { n, _ := vm.Run(p); return n != 0 }, optSteps},
			} {
				b.Run(prefix+impl.name, func(b *testing.B) {
					b.ReportAllocs()
					b.SetBytes(int64(len(fr)))
					for b.Loop() {
						impl.run(fr)
					}
					// Instructions executed per frame: the noise-free
					// measure of what the optimiser saves.
					b.ReportMetric(float64(impl.steps), "insns/frame")
				})
			}
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
