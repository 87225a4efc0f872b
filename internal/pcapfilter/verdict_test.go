package pcapfilter

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
)

// expressions is the table every verdict test runs: each is compiled
// here and by tcpdump, and both programs must give the same verdict on
// every corpus frame.
var expressions = []string{
	"",
	"ip", "ip6", "arp", "rarp", "tcp", "udp", "icmp", "icmp6", "sctp", "igmp",
	"vlan", "vlan 100", "vlan and ip", "vlan 100 and udp port 53", "vlan and vlan 200 and tcp",
	"vlan 100 and host 10.0.0.1", "vlan (7) and arp", "vlan and ip6 and tcp port 443",
	"ether host 00:15:5d:00:00:01", "ether src 00:15:5d:00:00:01", "ether dst ff:ff:ff:ff:ff:ff",
	"ether src and dst 00:15:5d:00:00:01", "ether host 00-15-5d-00-00-02",
	"ether broadcast", "ether multicast", "broadcast", "multicast",
	"ether proto 0x88cc", `ether proto \arp`, `ether proto \ip6`, "ether proto 0x42", `ether proto \stp`,
	"ether proto 100", "ether proto 6", "ether proto 0xe0", "ether proto 0x809b", "ether proto 1501",
	"host 10.0.0.1", "src host 10.0.0.1", "dst host 10.0.0.2", "host 2001:db8::1",
	"ip6 src host 2001:db8::1", "host fe80::1", "ip host 10.0.0.1", "arp host 10.0.0.1", "rarp host 0.0.0.0",
	"host 10.0.0.1 and port 53", "src or dst host 10.0.0.1", "src and dst net 10.0.0.0/8",
	"net 10.0.0.0/8", "src net 192.168", "net 10", "host 10.0", "dst net 10.0.0.0 mask 255.255.255.0",
	"net 2001:db8::/32", "net fe80::/10", "ip6 net ::/0", "dst net ff02::/16",
	"port 53", "src port 53", "dst port 80", "tcp port 80", "udp port 53", "sctp port 53",
	"udp dst port 53 or tcp src port 443", "portrange 1-1023", "tcp portrange 8000-8080",
	"udp portrange 5000-5353", "portrange 80-80", "port 53 or 80", "port 53 and (80 or 443)",
	"dst port 53 or 123", "not port 22", "port 0",
	"proto 17", "ip proto 1", "ip6 proto 17", `ip proto \udp`, `proto \tcp`, "ip6 proto 58", "proto 132",
	"len <= 64", "len >= 100", "greater 200", "less 60", "len > 60 and len < 1000", "len = 42", "len != 0",
	"tcp[tcpflags] & tcp-syn != 0", "tcp[tcpflags] & (tcp-syn|tcp-ack) == tcp-syn", "tcp[13] = 0x12",
	"tcp[tcpflags] & (tcp-rst|tcp-fin) != 0",
	"ip[2:2] > 576", "ip[6:2] & 0x1fff != 0", "ip[0] & 0xf != 5", "icmp[icmptype] = icmp-echo",
	"icmp[icmptype] != icmp-echo and icmp[icmptype] != icmp-echoreply",
	"icmp6[icmp6type] = icmp6-echo", "icmp6[0] == 135", "udp[8:2] = 0x1234",
	"tcp[((tcp[12:1] & 0xf0) >> 2):4] = 0x47455420", "ether[0] & 1 = 1", "ether[12:2] = 0x0800",
	"arp[6:2] = 1", "arp[7] = 2", "ip[9] + 1 = 18", "udp[4:2] - 8 = len - 42", "ip[2:2] * 2 >= 100",
	"ip[2:2] / 0x10 > 2", "ether[0] % 3 * 2 = 1", "ether[0] * 2 % 3 = 0", "ether[1] ^ ether[2] = 0",
	"ether[0] << 2 = 0", "ip[8] >> 1 = 32", "-ether[0] = 0", "ip[8] - 1 ^ 3 = 61", "ether[len - 1] = 0",
	"ip[ip[0] & 0xf] = 0", "tcp[tcp[12] >> 4] > 0", "udp[2:2] | 1 = 53", "ip[1] = 0 and ip[4:2] = 0x1234",
	"ether[6:4] = 0x00155d00", "ether[100] = 0", "not ether[100] = 0", "ether[100] = 0 or ip",
	"ip or ether[100] = 0", "1 = 1", "2 > 3", "(ether[0] & 1) = 1", "(tcp[13] & 2 != 0)",
	"! tcp", "not ip and not arp", "tcp or udp and not port 53", "(tcp or udp) && !(port 53)",
	"host 10.0.0.1 or 10.0.0.3 and port 53", "not host 10.0.0.1 and 10.0.0.2", "host 10.0.0.1 and not 10.0.0.2",
	"host 10.0.0.1 and (10.0.0.2 or 8.8.8.8)", "ip broadcast", "ip multicast", "ip6 multicast",
	"icmp or icmp6", "ip and udp[0:2] = 53", "ip6 and tcp port 80", "tcp dst port 80 and tcp[tcpflags] & tcp-push != 0",
	"udp and port 53", "src net 10.0.0.0/24 and not dst net 10.0.0.0/24", "ip[0] = ip6[0]", "tcp and vlan",
	"udp or (vlan and udp)", "ether[12:2] > 1500 || ether[14] = 0x42", "ip && udp || ip6 && tcp",
	"tcp[0:2] > 1023 and tcp[2:2] > 1023",
	// Under "not", a load past the end still rejects: these tell apart
	// the orders in which programs load.
	"not ether src 00:00:5e:00:53:01", "not ether host 00:00:5e:00:53:01", "not host 10.9.9.9",
	"not port 9", "not net fe80::/10", "not host 2001:db8::9", "not vlan 5", "not ether proto 100",
	"not tcp[13] = 0", "not icmp", "not udp portrange 1-10", "not ether broadcast",
	// libpcap's optimiser drops loads that cannot change the verdict, so
	// these accept frames too short for them.
	"ip or not ip", "ether[0] = 1 or ether[0] != 1", "ether[100] = 1 or ether[100] != 1", "tcp or not tcp",
	"ether[0] = 1 or ether[50] = 2 or not ether[0] = 1", "1 = 2 or tcp", "tcp[100] & 0 = 0",
	"0 * ether[100] = 0", "ether[100] * 0 != 0 or udp", "udp or ip and not ip",
}

var update = flag.Bool("update", false, "rewrite testdata/verdicts.golden from tcpdump's verdicts")

const goldenPath = "testdata/verdicts.golden"

// corpusDigest names the corpus a golden file was made from, so that a
// changed corpus asks for regeneration instead of failing obscurely.
func corpusDigest(frames []frame) string {
	h := sha256.New()
	for _, f := range frames {
		fmt.Fprintf(h, "%s:%x\n", f.name, f.b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

func bitsHex(v []bool) string {
	b := make([]byte, (len(v)+7)/8)
	for i, ok := range v {
		if ok {
			b[i/8] |= 1 << (i % 8)
		}
	}
	return hex.EncodeToString(b)
}

func diffVerdicts(frames []frame, got, want []bool) string {
	var extra, missing []string
	for i := range frames {
		switch {
		case got[i] && !want[i]:
			extra = append(extra, frames[i].name)
		case !got[i] && want[i]:
			missing = append(missing, frames[i].name)
		}
	}
	return fmt.Sprintf("matches that should not: %v; misses: %v", extra, missing)
}

func isRejectsAll(err error) bool {
	var fe *Error
	return errors.As(err, &fe) && fe.Msg == "expression rejects all packets"
}

func ourVerdicts(t *testing.T, expr string, frames []frame) []bool {
	t.Helper()
	raw, err := compileRaw(expr, LinkEthernet, 0)
	if isRejectsAll(err) {
		return make([]bool, len(frames))
	}
	if err != nil {
		t.Fatalf("compile %q: %v", expr, err)
	}
	return verdicts(t, fmt.Sprintf("ours(%q)", expr), raw, frames)
}

// TestVerdictsMatchTcpdump compiles every expression with tcpdump and
// here, and requires the same verdict on every frame of the corpus.
func TestVerdictsMatchTcpdump(t *testing.T) {
	path := needTcpdump(t)
	frames := corpus()
	progs, errs := tcpdumpCompileAll(path, expressions)
	var golden []string
	for i, expr := range expressions {
		raw, err := progs[i], errs[i]
		var want []bool
		switch {
		case errors.Is(err, errRejectsAll):
			want = make([]bool, len(frames))
		case err != nil:
			t.Errorf("%v", err)
			continue
		default:
			want = verdicts(t, fmt.Sprintf("tcpdump(%q)", expr), raw, frames)
		}
		got := ourVerdicts(t, expr, frames)
		if bitsHex(got) != bitsHex(want) {
			t.Errorf("%q: %s", expr, diffVerdicts(frames, got, want))
		}
		golden = append(golden, bitsHex(want)+" "+expr)
	}
	if *update {
		body := "# verdicts of tcpdump -ddd -y EN10MB over the test corpus, one expression a line\n" +
			"corpus " + corpusDigest(frames) + "\n" + strings.Join(golden, "\n") + "\n"
		if err := os.WriteFile(goldenPath, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestVerdictsMatchGolden checks the same table against tcpdump's
// recorded verdicts, so it runs where tcpdump is not installed.
func TestVerdictsMatchGolden(t *testing.T) {
	frames := corpus()
	fh, err := os.Open(goldenPath)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	want := map[string]string{}
	sc := bufio.NewScanner(fh)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		if d, ok := strings.CutPrefix(line, "corpus "); ok {
			if d != corpusDigest(frames) {
				t.Fatalf("%s was made from another corpus: run go test -run TestVerdictsMatchTcpdump -update with tcpdump installed", goldenPath)
			}
			continue
		}
		bits, expr, _ := strings.Cut(line, " ")
		want[expr] = bits
	}
	if len(want) < 60 {
		t.Fatalf("%s has %d expressions, want at least 60", goldenPath, len(want))
	}
	for _, expr := range expressions {
		w, ok := want[expr]
		if !ok {
			t.Errorf("%q has no golden verdicts: run with -update", expr)
			continue
		}
		got := ourVerdicts(t, expr, frames)
		if g := bitsHex(got); g != w {
			wb, _ := hex.DecodeString(w)
			wv := make([]bool, len(frames))
			for i := range wv {
				wv[i] = i/8 < len(wb) && wb[i/8]&(1<<(i%8)) != 0
			}
			t.Errorf("%q: %s", expr, diffVerdicts(frames, got, wv))
		}
	}
}
