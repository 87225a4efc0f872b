package pcapfilter

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// The frame corpus the verdict tests run every expression over: crafted
// frames of each kind a filter distinguishes, plus truncated copies of
// some (every length up to the transport header and a little past it).

type frame struct {
	name string
	b    []byte
}

var (
	macA     = [6]byte{0x00, 0x15, 0x5d, 0x00, 0x00, 0x01}
	macB     = [6]byte{0x00, 0x15, 0x5d, 0x00, 0x00, 0x02}
	macBcast = [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	macMDNS  = [6]byte{0x01, 0x00, 0x5e, 0x00, 0x00, 0xfb}
	macLLDP  = [6]byte{0x01, 0x80, 0xc2, 0x00, 0x00, 0x0e}
	macSTP   = [6]byte{0x01, 0x80, 0xc2, 0x00, 0x00, 0x00}
	macV6MC  = [6]byte{0x33, 0x33, 0xff, 0x00, 0x00, 0x01}
)

func v4(s string) [4]byte  { return netip.MustParseAddr(s).As4() }
func v6(s string) [16]byte { return netip.MustParseAddr(s).As16() }

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

func be16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }

// eth builds an Ethernet II header; tags are (TPID, TCI) pairs.
func eth(dst, src [6]byte, etype uint16, tags ...[2]uint16) []byte {
	b := cat(dst[:], src[:])
	for _, t := range tags {
		b = append(b, be16(t[0])...)
		b = append(b, be16(t[1])...)
	}
	return append(b, be16(etype)...)
}

type ip4 struct {
	src, dst  [4]byte
	proto     uint8
	flagsFrag uint16 // flags and fragment offset field
	optionLen int    // bytes of options (multiple of 4)
	ttl       uint8
}

func (h ip4) build(payload []byte) []byte {
	ihl := 5 + h.optionLen/4
	b := make([]byte, 4*ihl)
	b[0] = 0x40 | byte(ihl)
	total := 4*ihl + len(payload)
	binary.BigEndian.PutUint16(b[2:], uint16(total))
	binary.BigEndian.PutUint16(b[4:], 0x1234)
	binary.BigEndian.PutUint16(b[6:], h.flagsFrag)
	b[8] = h.ttl
	if b[8] == 0 {
		b[8] = 64
	}
	b[9] = h.proto
	copy(b[12:], h.src[:])
	copy(b[16:], h.dst[:])
	for i := 20; i < 4*ihl; i++ {
		b[i] = 1 // NOP options
	}
	return append(b, payload...)
}

func ip6hdr(src, dst [16]byte, nh uint8, payload []byte) []byte {
	b := make([]byte, 40)
	b[0] = 0x60
	binary.BigEndian.PutUint16(b[4:], uint16(len(payload)))
	b[6] = nh
	b[7] = 64
	copy(b[8:], src[:])
	copy(b[24:], dst[:])
	return append(b, payload...)
}

func fragHdr6(nh uint8, offset uint16, more bool) []byte {
	b := []byte{nh, 0, 0, 0, 0, 0, 0, 7}
	v := offset << 3
	if more {
		v |= 1
	}
	binary.BigEndian.PutUint16(b[2:], v)
	return b
}

func tcpSeg(sport, dport uint16, flags uint8, payload []byte) []byte {
	b := make([]byte, 20)
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	binary.BigEndian.PutUint32(b[4:], 1000)
	b[12] = 5 << 4
	b[13] = flags
	binary.BigEndian.PutUint16(b[14:], 65535)
	return append(b, payload...)
}

func udpDgram(sport, dport uint16, payload []byte) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	binary.BigEndian.PutUint16(b[4:], uint16(8+len(payload)))
	return append(b, payload...)
}

func icmpMsg(typ, code uint8) []byte {
	return []byte{typ, code, 0, 0, 0, 1, 0, 1, 'p', 'i', 'n', 'g'}
}

func arpMsg(op uint16, sha [6]byte, spa [4]byte, tha [6]byte, tpa [4]byte) []byte {
	b := []byte{0, 1, 8, 0, 6, 4}
	b = append(b, be16(op)...)
	return cat(b, sha[:], spa[:], tha[:], tpa[:])
}

var dnsQuery = []byte{0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 3, 'w', 'w', 'w', 0, 0, 1, 0, 1}

const (
	fin = 0x01
	syn = 0x02
	rst = 0x04
	psh = 0x08
	ack = 0x10
)

func baseFrames() []frame {
	a1, a2, a3 := v4("10.0.0.1"), v4("10.0.0.2"), v4("10.0.0.3")
	lan, dns8 := v4("192.168.1.10"), v4("8.8.8.8")
	g1, g2 := v6("2001:db8::1"), v6("2001:db8::2")
	ll1, mcNS := v6("fe80::1"), v6("ff02::1:ff00:1")
	fs := []frame{
		{"empty", nil},
		{"eth-only-ipv4", eth(macB, macA, 0x0800)},
		{"v4-tcp-syn-80", cat(eth(macB, macA, 0x0800), ip4{src: a1, dst: a2, proto: 6}.build(tcpSeg(40000, 80, syn, nil)))},
		{"v4-tcp-synack-80", cat(eth(macA, macB, 0x0800), ip4{src: a2, dst: a1, proto: 6}.build(tcpSeg(80, 40000, syn|ack, nil)))},
		{"v4-tcp-get-80", cat(eth(macB, macA, 0x0800), ip4{src: a1, dst: a2, proto: 6}.build(tcpSeg(40000, 80, psh|ack, []byte("GET / HTTP/1.1\r\n"))))},
		{"v4-tcp-ack-443", cat(eth(macB, macA, 0x0800), ip4{src: a1, dst: dns8, proto: 6}.build(tcpSeg(50000, 443, ack, nil)))},
		{"v4-tcp-rst-22", cat(eth(macA, macB, 0x0800), ip4{src: lan, dst: a1, proto: 6}.build(tcpSeg(22, 51000, rst|ack, nil)))},
		{"v4-tcp-fin-8080", cat(eth(macB, macA, 0x0800), ip4{src: a3, dst: lan, proto: 6}.build(tcpSeg(8080, 1023, fin|ack, nil)))},
		{"v4-tcp-opts-80", cat(eth(macB, macA, 0x0800), ip4{src: a1, dst: a2, proto: 6, optionLen: 8}.build(tcpSeg(40001, 80, syn, nil)))},
		{"v4-udp-dns-query", cat(eth(macB, macA, 0x0800), ip4{src: a1, dst: dns8, proto: 17}.build(udpDgram(33000, 53, dnsQuery)))},
		{"v4-udp-dns-reply", cat(eth(macA, macB, 0x0800), ip4{src: dns8, dst: a1, proto: 17}.build(udpDgram(53, 33000, dnsQuery)))},
		{"v4-udp-ntp-123", cat(eth(macB, macA, 0x0800), ip4{src: a3, dst: a2, proto: 17}.build(udpDgram(123, 123, make([]byte, 48))))},
		{"v4-udp-dhcp-bcast", cat(eth(macBcast, macA, 0x0800), ip4{src: v4("0.0.0.0"), dst: v4("255.255.255.255"), proto: 17}.build(udpDgram(68, 67, make([]byte, 300))))},
		{"v4-udp-mdns-mcast", cat(eth(macMDNS, macA, 0x0800), ip4{src: lan, dst: v4("224.0.0.251"), proto: 17, ttl: 255}.build(udpDgram(5353, 5353, dnsQuery)))},
		{"v4-udp-frag-first", cat(eth(macB, macA, 0x0800), ip4{src: a1, dst: a2, proto: 17, flagsFrag: 0x2000}.build(udpDgram(33001, 53, make([]byte, 64))))},
		// A later fragment whose payload would read as ports 53 -> 53.
		{"v4-udp-frag-later", cat(eth(macB, macA, 0x0800), ip4{src: a1, dst: a2, proto: 17, flagsFrag: 0x0009}.build(cat(be16(53), be16(53), make([]byte, 60))))},
		{"v4-sctp-9899", cat(eth(macB, macA, 0x0800), ip4{src: a1, dst: a2, proto: 132}.build(cat(be16(9899), be16(53), make([]byte, 28))))},
		{"v4-icmp-echo", cat(eth(macB, macA, 0x0800), ip4{src: a1, dst: dns8, proto: 1}.build(icmpMsg(8, 0)))},
		{"v4-icmp-reply", cat(eth(macA, macB, 0x0800), ip4{src: dns8, dst: a1, proto: 1}.build(icmpMsg(0, 0)))},
		{"v4-icmp-unreach", cat(eth(macA, macB, 0x0800), ip4{src: lan, dst: a1, proto: 1}.build(icmpMsg(3, 3)))},
		{"v4-igmp", cat(eth(macMDNS, macA, 0x0800), ip4{src: lan, dst: v4("224.0.0.1"), proto: 2, optionLen: 4}.build([]byte{0x11, 0x64, 0, 0, 0, 0, 0, 0}))},
		{"v4-big-udp", cat(eth(macB, macA, 0x0800), ip4{src: lan, dst: a2, proto: 17}.build(udpDgram(40000, 9000, make([]byte, 1400))))},
		{"v6-tcp-syn-80", cat(eth(macB, macA, 0x86dd), ip6hdr(g1, g2, 6, tcpSeg(40000, 80, syn, nil)))},
		{"v6-tcp-get-443", cat(eth(macB, macA, 0x86dd), ip6hdr(g2, g1, 6, tcpSeg(443, 40000, psh|ack, []byte("GET / HTTP/1.1\r\n"))))},
		{"v6-udp-dns-query", cat(eth(macB, macA, 0x86dd), ip6hdr(g1, g2, 17, udpDgram(33000, 53, dnsQuery)))},
		{"v6-udp-frag-first", cat(eth(macB, macA, 0x86dd), ip6hdr(g1, g2, 44, cat(fragHdr6(17, 0, true), udpDgram(33002, 53, make([]byte, 40)))))},
		{"v6-udp-frag-later", cat(eth(macB, macA, 0x86dd), ip6hdr(g1, g2, 44, cat(fragHdr6(17, 8, false), make([]byte, 40))))},
		{"v6-tcp-frag-first", cat(eth(macB, macA, 0x86dd), ip6hdr(g2, g1, 44, cat(fragHdr6(6, 0, true), tcpSeg(80, 40002, ack, nil))))},
		{"v6-icmp6-echo", cat(eth(macB, macA, 0x86dd), ip6hdr(ll1, g1, 58, icmpMsg(128, 0)))},
		{"v6-icmp6-ns-mcast", cat(eth(macV6MC, macA, 0x86dd), ip6hdr(ll1, mcNS, 58, icmpMsg(135, 0)))},
		{"v6-sctp", cat(eth(macB, macA, 0x86dd), ip6hdr(g1, g2, 132, cat(be16(53), be16(9899), make([]byte, 28))))},
		{"arp-request", cat(eth(macBcast, macA, 0x0806), arpMsg(1, macA, a1, [6]byte{}, a2), make([]byte, 18))},
		{"arp-reply", cat(eth(macA, macB, 0x0806), arpMsg(2, macB, a2, macA, a1), make([]byte, 18))},
		{"arp-gratuitous-lan", cat(eth(macBcast, macB, 0x0806), arpMsg(1, macB, lan, macBcast, lan), make([]byte, 18))},
		{"rarp-request", cat(eth(macBcast, macA, 0x8035), arpMsg(3, macA, [4]byte{}, macA, [4]byte{}), make([]byte, 18))},
		{"vlan100-v4-udp-dns", cat(eth(macB, macA, 0x0800, [2]uint16{0x8100, 100}), ip4{src: a1, dst: dns8, proto: 17}.build(udpDgram(33000, 53, dnsQuery)))},
		{"vlan100-prio-v4-tcp", cat(eth(macB, macA, 0x0800, [2]uint16{0x8100, 0xa064}), ip4{src: a2, dst: a1, proto: 6}.build(tcpSeg(80, 40000, syn|ack, nil)))},
		{"vlan200-v6-tcp", cat(eth(macB, macA, 0x86dd, [2]uint16{0x8100, 200}), ip6hdr(g1, g2, 6, tcpSeg(40000, 443, syn, nil)))},
		{"qinq300-200-v4-tcp", cat(eth(macB, macA, 0x0800, [2]uint16{0x88a8, 300}, [2]uint16{0x8100, 200}), ip4{src: a1, dst: a2, proto: 6}.build(tcpSeg(40000, 80, syn, nil)))},
		{"vlan9100-arp", cat(eth(macBcast, macA, 0x0806, [2]uint16{0x9100, 7}), arpMsg(1, macA, a1, [6]byte{}, a3))},
		{"lldp", cat(eth(macLLDP, macA, 0x88cc), make([]byte, 46))},
		{"stp-llc", cat(eth(macSTP, macA, 38), []byte{0x42, 0x42, 0x03}, make([]byte, 35))},
		{"llc-sap-100", cat(eth(macB, macA, 46), []byte{100, 100, 0x03}, make([]byte, 43))},
		{"llc-ip-sap", cat(eth(macB, macA, 46), []byte{0x06, 0x06, 0x03}, make([]byte, 43))},
		{"snap-atalk", cat(eth(macB, macA, 46), []byte{0xaa, 0xaa, 0x03, 0x08, 0x00, 0x07, 0x80, 0x9b}, make([]byte, 38))},
		{"ipx-raw", cat(eth(macB, macA, 46), []byte{0xff, 0xff}, make([]byte, 44))},
		{"unknown-etype", cat(eth(macB, macA, 0x9000), make([]byte, 46))},
		{"runt-10", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0x15, 0x5d, 0}},
	}
	return fs
}

// corpus is the base frames plus truncated copies of a representative
// few, at every length up to 80 bytes.
func corpus() []frame {
	base := baseFrames()
	out := append([]frame(nil), base...)
	truncate := map[string]bool{
		"v4-tcp-get-80": true, "v4-tcp-opts-80": true, "v4-udp-dns-query": true, "v4-icmp-echo": true,
		"v6-udp-frag-first": true, "v6-tcp-syn-80": true, "arp-request": true,
		"vlan100-v4-udp-dns": true, "qinq300-200-v4-tcp": true, "v6-icmp6-echo": true,
	}
	for _, f := range base {
		if !truncate[f.name] {
			continue
		}
		for n := 0; n < len(f.b) && n <= 80; n++ {
			out = append(out, frame{fmt.Sprintf("%s/%d", f.name, n), f.b[:n]})
		}
	}
	return out
}
