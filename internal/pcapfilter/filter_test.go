package pcapfilter

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/net/bpf"

	"github.com/vmbusd/vmbusd/internal/testutil"
)

func frameNamed(tb testing.TB, name string) []byte {
	for _, f := range corpus() {
		if f.name == name {
			return f.b
		}
	}
	tb.Fatalf("no corpus frame %q", name)
	return nil
}

// TestMatchSemantics spells out, frame by frame, what the most used
// primitives mean (the golden and tcpdump tests cover the rest).
func TestMatchSemantics(t *testing.T) {
	tests := []struct {
		expr     string
		match    []string
		nonMatch []string
	}{
		{"udp and port 53",
			[]string{"v4-udp-dns-query", "v4-udp-dns-reply", "v6-udp-dns-query", "v4-udp-frag-first"},
			[]string{"v4-udp-frag-later", "v4-tcp-syn-80", "v6-udp-frag-first", "vlan100-v4-udp-dns", "v4-sctp-9899"}},
		{"port 53", []string{"v4-sctp-9899", "v6-sctp", "v4-udp-dns-query"}, []string{"v4-udp-frag-later", "v4-udp-ntp-123"}},
		{"tcp", []string{"v4-tcp-syn-80", "v6-tcp-syn-80", "v6-tcp-frag-first"}, []string{"v4-udp-dns-query", "vlan100-prio-v4-tcp"}},
		{"tcp[tcpflags] & tcp-syn != 0", []string{"v4-tcp-syn-80", "v4-tcp-synack-80", "v4-tcp-opts-80"}, []string{"v4-tcp-get-80", "v6-tcp-syn-80", "v4-udp-dns-query"}},
		{"not tcp[tcpflags] & tcp-syn != 0", []string{"v4-tcp-get-80", "v6-tcp-syn-80", "arp-request"}, []string{"v4-tcp-syn-80", "v4-tcp-get-80/40"}},
		{"host 10.0.0.1", []string{"v4-tcp-syn-80", "arp-request", "arp-reply"}, []string{"v4-udp-ntp-123", "v6-tcp-syn-80"}},
		{"src host 10.0.0.1 and dst host 10.0.0.2", []string{"v4-tcp-syn-80"}, []string{"v4-tcp-synack-80"}},
		{"net 2001:db8::/32", []string{"v6-tcp-syn-80", "v6-udp-dns-query"}, []string{"v6-icmp6-ns-mcast", "v4-tcp-syn-80"}},
		{"vlan 100 and udp port 53", []string{"vlan100-v4-udp-dns"}, []string{"v4-udp-dns-query", "vlan200-v6-tcp"}},
		{"vlan and vlan 200 and tcp", []string{"qinq300-200-v4-tcp"}, []string{"vlan200-v6-tcp", "vlan100-prio-v4-tcp"}},
		{"vlan 100", []string{"vlan100-v4-udp-dns", "vlan100-prio-v4-tcp"}, []string{"vlan200-v6-tcp"}},
		{"ether broadcast", []string{"arp-request", "v4-udp-dhcp-bcast"}, []string{"v4-udp-mdns-mcast", "arp-reply"}},
		{"ether multicast and not broadcast", []string{"v4-udp-mdns-mcast", "lldp", "v6-icmp6-ns-mcast"}, []string{"arp-request", "v4-tcp-syn-80"}},
		{"ether src 00:15:5d:00:00:01", []string{"v4-tcp-syn-80"}, []string{"v4-tcp-synack-80", "runt-10"}},
		{"ether proto 0x88cc", []string{"lldp"}, []string{"stp-llc"}},
		{`ether proto \stp`, []string{"stp-llc"}, []string{"lldp", "llc-sap-100"}},
		{"icmp[icmptype] = icmp-echo", []string{"v4-icmp-echo"}, []string{"v4-icmp-reply", "v6-icmp6-echo"}},
		{"icmp6 and icmp6[icmp6type] = icmp6-echo", []string{"v6-icmp6-echo"}, []string{"v6-icmp6-ns-mcast", "v4-icmp-echo"}},
		{"portrange 1-1023", []string{"v4-tcp-syn-80", "v4-tcp-fin-8080", "v4-udp-ntp-123"}, []string{"v4-big-udp", "v4-udp-mdns-mcast"}},
		{"len <= 64", []string{"arp-request", "runt-10", "empty"}, []string{"v4-tcp-get-80", "v4-big-udp"}},
		{"greater 1000", []string{"v4-big-udp"}, []string{"v4-tcp-syn-80"}},
		{"tcp or udp and not port 53", []string{"v4-tcp-syn-80", "v4-udp-ntp-123"}, []string{"v4-udp-dns-query", "v4-icmp-echo"}},
		{"host 10.0.0.1 or 10.0.0.3 and port 53", []string{"v4-udp-dns-query"}, []string{"v4-tcp-syn-80", "v4-udp-ntp-123"}},
		{"tcp[((tcp[12:1] & 0xf0) >> 2):4] = 0x47455420", []string{"v4-tcp-get-80"}, []string{"v6-tcp-get-443", "v4-tcp-syn-80"}},
		{"ether[100] = 0 or ip", []string{"v4-big-udp"}, []string{"v4-tcp-syn-80", "arp-request"}},
		{"", []string{"empty", "runt-10", "v4-tcp-syn-80"}, nil},
	}
	for _, tt := range tests {
		f, err := New(tt.expr, LinkEthernet, 0)
		if err != nil {
			t.Errorf("New(%q): %v", tt.expr, err)
			continue
		}
		for _, name := range tt.match {
			if !f.Match(frameNamed(t, name)) {
				t.Errorf("%q does not match %s", tt.expr, name)
			}
		}
		for _, name := range tt.nonMatch {
			if f.Match(frameNamed(t, name)) {
				t.Errorf("%q matches %s", tt.expr, name)
			}
		}
	}
}

func TestCompileErrorsNameColumnAndProblem(t *testing.T) {
	tests := []struct {
		expr string
		want string
	}{
		{"udp and port", "filter: syntax error at column 13: expected a port number, found end of expression"},
		{"udp and port 53 53", "filter: syntax error at column 17: expected 'and', 'or' or end of expression"},
		{"port 70000", "filter: invalid filter at column 6: port 70000 is greater than 65535"},
		{"tcp and 80", `filter: syntax error at column 9: "80" needs a qualifier`},
		{"10.0.0.1", `filter: syntax error at column 1: "10.0.0.1" needs a qualifier`},
		{"host foo", `filter: invalid filter at column 6: name "foo" is not supported`},
		{"port domain", `at column 6: port name "domain" is not supported: use a number`},
		{"tcp host 1.2.3.4", "at column 10: 'tcp' cannot qualify an IPv4 host"},
		{"ip6 host 1.2.3.4", "at column 10: 'ip6' cannot qualify an IPv4 host"},
		{"ip host ::1", "at column 9: 'ip' cannot qualify an IPv6 host"},
		{"ether[0:3] = 1", "at column 9: data size must be 1, 2 or 4, not 3"},
		{"(tcp", "at column 5: expected ')', found end of expression"},
		{"tcp)", `at column 4: expected 'and', 'or' or end of expression, found ")"`},
		{"ether[0] / 0 = 1", "at column 10: division by zero"},
		{"ether[0] % 0 = 1", "at column 10: modulus by zero"},
		{"ether[0] << 32 = 1", "at column 10: shift by more than 31 bits"},
		{"vlan 5000", "at column 6: VLAN ID 5000 is greater than 4095"},
		{"net 10.1.2.3/8", "at column 5: non-network bits set in 10.1.2.3/8"},
		{"net 10.0.0.0/33", "at column 14: prefix length 33 is greater than 32"},
		{"host 10.0.0.0/8", "a netmask or prefix length needs 'net'"},
		{"src 00:11:22:33:44:55", "at column 5: a MAC address needs 'ether host'"},
		{"ether host 10.0.0.1", "'ether' needs a MAC address"},
		{"tcp[0] &", "at column 9: expected a number, 'len' or proto[offset], found end of expression"},
		{`ether proto \foo`, `at column 13: unknown ether proto "foo"`},
		{`ip proto \foo`, `at column 10: unknown ip proto "foo"`},
		{"a $ b", "at column 3: unexpected character '$'"},
		{"len", "at column 4: expected a comparison"},
		{"ip6 broadcast", "'ip6 broadcast' is not supported"},
		{"tcp multicast", "'tcp multicast' is not supported"},
		{"portrange 10-x", `port range "10-x" is not of the form low-high`},
		{"portrange 10-70000", `port range "10-70000" goes past 65535`},
		{"ip proto 300", "protocol 300 is greater than 255"},
		{"gateway 10.0.0.1", "'gateway' needs host name lookups"},
		{"ether", `"ether" needs a qualifier after it`},
		{"and", "expected a primitive"},
		{"tcp and", "found end of expression"},
		{"src proto 6", "'proto' cannot follow 'src' or 'dst'"},
		{"ah[0] = 1", "'ah' cannot be indexed"},
		{"ether[-10] = 0", "at column 1: offset -10 is past the end of any frame"},
		{"mpls and tcp", `at column 1: "mpls" is a pcap-filter keyword this compiler does not support`},
		{"tcp and inbound", `at column 9: "inbound" is a pcap-filter keyword`},
		{"ip6 protochain 6", `at column 5: "protochain" is a pcap-filter keyword`},
		{strings.Repeat("(", 300) + "tcp" + strings.Repeat(")", 300), "nested too deeply"},
	}
	for _, tt := range tests {
		_, err := Compile(tt.expr, LinkEthernet, 0)
		if err == nil {
			t.Errorf("Compile(%q) succeeded, want error %q", tt.expr, tt.want)
			continue
		}
		var fe *Error
		if !errors.As(err, &fe) {
			t.Errorf("Compile(%q) error %T is not *Error", tt.expr, err)
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Compile(%q) = %q, want it to contain %q", tt.expr, err, tt.want)
		}
	}
}

func TestCompileRefusesOtherLinkTypesAndNegativeSnaplen(t *testing.T) {
	if _, err := Compile("tcp", 113, 0); err == nil || !strings.Contains(err.Error(), "link type 113 is not supported") {
		t.Errorf("link type 113: %v", err)
	}
	if _, err := Compile("tcp", LinkEthernet, -1); err == nil {
		t.Error("negative snaplen accepted")
	}
}

func TestProgramReturnsSnaplenOnMatch(t *testing.T) {
	for _, snap := range []int{0, 96, 65535} {
		f, err := New("ip", LinkEthernet, snap)
		if err != nil {
			t.Fatal(err)
		}
		want := uint32(snap)
		if snap == 0 {
			want = DefaultSnaplen
		}
		if got := f.Run(frameNamed(t, "v4-tcp-syn-80")); got != want {
			t.Errorf("snaplen %d: Run = %d, want %d", snap, got, want)
		}
		if got := f.Run(frameNamed(t, "arp-request")); got != 0 {
			t.Errorf("snaplen %d: Run on ARP = %d, want 0", snap, got)
		}
	}
}

// TestCompiledProgramsPassValidation checks every table expression's
// program against x/net/bpf's checks and this package's kernel-style ones.
func TestCompiledProgramsPassValidation(t *testing.T) {
	for _, expr := range expressions {
		prog, err := Compile(expr, LinkEthernet, 0)
		if isRejectsAll(err) {
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", expr, err)
		}
		raw, err := bpf.Assemble(prog)
		if err != nil {
			t.Fatalf("%q: assemble: %v", expr, err)
		}
		if _, err := FromProgram(raw); err != nil {
			t.Errorf("%q: %v", expr, err)
		}
		if !hasNeg(raw) {
			if _, err := bpf.NewVM(prog); err != nil {
				t.Errorf("%q: x/net/bpf: %v", expr, err)
			}
		}
	}
}

func TestFromProgramRejectsUnsafePrograms(t *testing.T) {
	ret := bpf.RawInstruction{Op: clsRET | retK, K: 1}
	tests := []struct {
		name string
		prog []bpf.RawInstruction
		want string
	}{
		{"empty", nil, "0 instructions"},
		{"no return at end", []bpf.RawInstruction{{Op: clsLD | modeIMM}}, "does not end with a return"},
		{"jump past end", []bpf.RawInstruction{{Op: clsJMP | jmpJEQ, Jt: 1}, ret}, "jump past the end"},
		{"ja past end", []bpf.RawInstruction{{Op: clsJMP | jmpJA, K: 0xffffffff}, ret}, "jump past the end"},
		{"scratch slot 16", []bpf.RawInstruction{{Op: clsST, K: 16}, ret}, "scratch slot"},
		{"division by constant zero", []bpf.RawInstruction{{Op: clsALU | aluDIV}, ret}, "division by zero"},
		{"unknown opcode", []bpf.RawInstruction{{Op: 0xffff}, ret}, "unknown"},
		{"ja with X", []bpf.RawInstruction{{Op: clsJMP | jmpJA | srcX}, ret}, "unknown jump"},
		{"ret X", []bpf.RawInstruction{{Op: clsRET | 0x08}}, "unknown opcode"},
		{"too long", make([]bpf.RawInstruction, MaxInstructions+1), "4097 instructions"},
	}
	for _, tt := range tests {
		if _, err := FromProgram(tt.prog); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want %q", tt.name, err, tt.want)
		}
	}
}

// TestLongProgramsUseTrampolines compiles an expression whose program
// needs conditional jumps farther than 255 instructions.
func TestLongProgramsUseTrampolines(t *testing.T) {
	var parts []string
	for i := 0; i < 120; i++ {
		parts = append(parts, "host 10.0.0."+strconv.Itoa(i))
	}
	expr := "(" + strings.Join(parts, " or ") + ") and port 53"
	f, err := New(expr, LinkEthernet, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(f.Program()); n < 300 {
		t.Fatalf("program has %d instructions, want > 255 to exercise long jumps", n)
	}
	if !f.Match(frameNamed(t, "v4-udp-dns-query")) || f.Match(frameNamed(t, "v4-tcp-syn-80")) || f.Match(frameNamed(t, "v4-udp-ntp-123")) {
		t.Error("wrong verdicts through trampolines")
	}
	parts = parts[:0]
	for i := 0; i < 2000; i++ {
		parts = append(parts, "10.0."+strconv.Itoa(i/256)+"."+strconv.Itoa(i%256))
	}
	many := "host " + strings.Join(parts, " or ")
	if _, err := Compile(many, LinkEthernet, 0); err == nil || !strings.Contains(err.Error(), "program too long") {
		t.Errorf("2000 hosts: %v, want program too long", err)
	}
}

func TestNilFilterMatchesEverything(t *testing.T) {
	var f *Filter
	if !f.Match(nil) || !f.Match(frameNamed(t, "arp-request")) {
		t.Error("nil Filter does not match")
	}
}

func TestMatchDoesNotAllocate(t *testing.T) {
	f, err := New("vlan 100 and udp port 53 or tcp[13] & 2 != 0 and ip[2:2] * 2 > len", LinkEthernet, 0)
	if err != nil {
		t.Fatal(err)
	}
	fr := frameNamed(t, "vlan100-v4-udp-dns")
	testutil.AllocBudget(t, 0, 100, func() { f.Match(fr) })
}
