package pcapfilter

// Primitives become packet tests here, at the offsets in force where
// they appear; the load order follows libpcap's, which decides what a
// truncated frame yields.

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
	"strconv"
	"strings"
)

func protoName(k tokKind) string {
	for name, kk := range keywords {
		if kk == k && name != "link" {
			return name
		}
	}
	return "?"
}

// numberID is a bare number: a port, a protocol, or a host or network
// given as one 32-bit number ("net 10" is 10.0.0.0/8).
func (p *parser) numberID(t token, q qual) (bexpr, error) {
	v := t.num
	switch q.addr {
	case addrPort:
		if v > 65535 {
			return nil, invalidErr(t.col, "port %d is greater than 65535", v)
		}
		return p.port(t, q, v, v)
	case addrPortrange:
		if v > 65535 {
			return nil, invalidErr(t.col, "port %d is greater than 65535", v)
		}
		return p.port(t, q, v, v)
	case addrProto:
		return p.protoNumber(t, q.proto, v)
	}
	mask := uint32(0xffffffff)
	if q.addr == addrNet {
		for v != 0 && v&0xff000000 == 0 {
			v <<= 8
			mask <<= 8
		}
	}
	return p.hostV4(t, q, v, mask)
}

func (p *parser) hidID(t token, q qual) (bexpr, error) {
	addr, n, _ := parseHID(t.text)
	mask := ^uint32(0) << (32 - n)
	// "10.0.0.0/8" and "10.0.0.0 mask 255.0.0.0" are networks only.
	switch p.peek().kind {
	case tSlash:
		p.next()
		nt, err := p.expect(tNum, "a prefix length")
		if err != nil {
			return nil, err
		}
		if nt.num > 32 {
			return nil, invalidErr(nt.col, "prefix length %d is greater than 32", nt.num)
		}
		mask = ^uint32(0) << (32 - nt.num)
		if nt.num == 0 {
			mask = 0
		}
		return p.maskedNet(t, q, addr, mask)
	case tMask:
		p.next()
		mt := p.next()
		if mt.kind != tHID {
			return nil, syntaxErr(mt.col, "expected a dotted netmask, found %s", describe(mt))
		}
		m, mbits, _ := parseHID(mt.text)
		if mbits != 32 {
			return nil, invalidErr(mt.col, "netmask %s is not a full dotted quad", mt.text)
		}
		return p.maskedNet(t, q, addr, m)
	}
	if err := noAddrFor(t, q, "IP address"); err != nil {
		return nil, err
	}
	return p.hostV4(t, q, addr, mask)
}

func (p *parser) maskedNet(t token, q qual, addr, mask uint32) (bexpr, error) {
	if err := noAddrFor(t, q, "IP address and prefix"); err != nil {
		return nil, err
	}
	if q.addr != addrNet {
		return nil, invalidErr(t.col, "a netmask or prefix length needs 'net', not 'host'")
	}
	if addr&^mask != 0 {
		return nil, invalidErr(t.col, "non-network bits set in %s/%d", t.text, bits.OnesCount32(mask))
	}
	return p.hostV4(t, q, addr, mask)
}

func noAddrFor(t token, q qual, what string) error {
	switch q.addr {
	case addrPort:
		return invalidErr(t.col, "'port' needs a number, not an %s", what)
	case addrPortrange:
		return invalidErr(t.col, "'portrange' needs a range, not an %s", what)
	case addrProto:
		return invalidErr(t.col, "'proto' needs a protocol, not an %s", what)
	}
	return nil
}

// hostV4 matches an IPv4 address under a mask in IPv4, ARP or RARP
// headers, as the protocol qualifier allows.
func (p *parser) hostV4(t token, q qual, addr, mask uint32) (bexpr, error) {
	nl := p.nlOff
	ipPart := func() bexpr {
		return and(p.ethType(0x0800), dirTest(q.dir, addrV4(nl+12, addr, mask), addrV4(nl+16, addr, mask)))
	}
	arpPart := func(et uint32) bexpr {
		return and(p.ethType(et), dirTest(q.dir, addrV4(nl+14, addr, mask), addrV4(nl+24, addr, mask)))
	}
	switch q.proto {
	case qDefault:
		return or(ipPart(), arpPart(0x0806), arpPart(0x8035)), nil
	case tIP:
		return ipPart(), nil
	case tARP:
		return arpPart(0x0806), nil
	case tRARP:
		return arpPart(0x8035), nil
	case tEther:
		return nil, invalidErr(t.col, "'ether' needs a MAC address, not %s", t.text)
	}
	return nil, invalidErr(t.col, "'%s' cannot qualify an IPv4 host or network", protoName(q.proto))
}

func addrV4(off, addr, mask uint32) bexpr { return maskEq(ld(4, off), mask, addr) }

// dirTest combines the source and destination tests for a direction.
func dirTest(dir int, src, dst bexpr) bexpr {
	switch dir {
	case dirSrc:
		return src
	case dirDst:
		return dst
	case dirAnd:
		return and(src, dst)
	}
	return or(src, dst)
}

func (p *parser) hid6ID(t token, q qual) (bexpr, error) {
	a := netip.MustParseAddr(t.text)
	n := 128
	if p.peek().kind == tSlash {
		p.next()
		nt, err := p.expect(tNum, "a prefix length")
		if err != nil {
			return nil, err
		}
		if nt.num > 128 {
			return nil, invalidErr(nt.col, "prefix length %d is greater than 128", nt.num)
		}
		n = int(nt.num)
		if err := noAddrFor(t, q, "IPv6 address and prefix"); err != nil {
			return nil, err
		}
		if pfx, _ := a.Prefix(n); pfx.Addr() != a {
			return nil, invalidErr(t.col, "non-network bits set in %s/%d", t.text, n)
		}
	} else if err := noAddrFor(t, q, "IPv6 address"); err != nil {
		return nil, err
	}
	if q.proto != qDefault && q.proto != tIP6 {
		return nil, invalidErr(t.col, "'%s' cannot qualify an IPv6 host or network", protoName(q.proto))
	}
	b := a.As16()
	nl := p.nlOff
	side := func(off uint32) bexpr {
		var tests []bexpr
		for w := 0; w < 4; w++ {
			bitsHere := min(max(n-32*w, 0), 32)
			if bitsHere == 0 {
				continue
			}
			mask := ^uint32(0) << (32 - bitsHere)
			tests = append(tests, maskEq(ld(4, off+uint32(4*w)), mask, binary.BigEndian.Uint32(b[4*w:])))
		}
		return and(tests...)
	}
	src, dst := side(nl+8), side(nl+24)
	if src == nil {
		// ::/0 matches every IPv6 packet.
		return p.ethType(0x86dd), nil
	}
	return and(p.ethType(0x86dd), dirTest(q.dir, src, dst)), nil
}

func (p *parser) eid(t token, q qual) (bexpr, error) {
	if q.proto != tEther || (q.addr != qDefault && q.addr != addrHost) {
		return nil, invalidErr(t.col, "a MAC address needs 'ether host', 'ether src' or 'ether dst'")
	}
	mac, _ := parseMAC(t.text)
	return dirTest(q.dir, macTest(6, mac), macTest(0, mac)), nil
}

// macTest compares six bytes at off, the last four first, as libpcap does
// (which decides what a truncated frame yields).
func macTest(off uint32, mac [6]byte) bexpr {
	return and(eq(ld(4, off+2), binary.BigEndian.Uint32(mac[2:])), eq(ld(2, off), uint32(binary.BigEndian.Uint16(mac[:]))))
}

// nameID is a word: a port range "lo-hi" or a protocol name after
// "proto". Host, network and service names would need lookups.
func (p *parser) nameID(t token, q qual) (bexpr, error) {
	switch q.addr {
	case addrPortrange:
		lo, hi, ok := strings.Cut(t.text, "-")
		l, okl := parseDecimal(lo)
		h, okh := parseDecimal(hi)
		if !ok || !okl || !okh {
			return nil, invalidErr(t.col, "port range %q is not of the form low-high", t.text)
		}
		if l > 65535 || h > 65535 {
			return nil, invalidErr(t.col, "port range %q goes past 65535", t.text)
		}
		if l > h {
			l, h = h, l
		}
		return p.port(t, q, l, h)
	case addrProto:
		if q.proto == tEther {
			if v, ok := etherProtoNames[t.text]; ok {
				return p.protoNumber(t, q.proto, v)
			}
			return nil, invalidErr(t.col, "unknown ether proto %q", t.text)
		}
		if v, ok := ipProtoNames[t.text]; ok {
			return p.protoNumber(t, q.proto, v)
		}
		return nil, invalidErr(t.col, "unknown ip proto %q", t.text)
	case addrPort:
		return nil, invalidErr(t.col, "port name %q is not supported: use a number", t.text)
	}
	return nil, invalidErr(t.col, "name %q is not supported (no host or network name lookups): use an address", t.text)
}

// parseDecimal reads a port of a range, which tcpdump takes in decimal.
func parseDecimal(s string) (uint32, bool) {
	if s == "" || len(s) > 5 || strings.Trim(s, "0123456789") != "" {
		return 0, false
	}
	v, _ := strconv.Atoi(s)
	return uint32(v), true
}

var etherProtoNames = map[string]uint32{
	"ip": 0x0800, "ip6": 0x86dd, "arp": 0x0806, "rarp": 0x8035, "atalk": 0x809b,
	"aarp": 0x80f3, "decnet": 0x6003, "sca": 0x6007, "lat": 0x6004, "mopdl": 0x6001,
	"moprc": 0x6002, "iso": 0xfe, "stp": 0x42, "ipx": 0x8137, "netbeui": 0xf0,
}

var ipProtoNames = map[string]uint32{
	"icmp": 1, "igmp": 2, "tcp": 6, "egp": 8, "igp": 9, "udp": 17, "ipv6": 41,
	"rsvp": 46, "gre": 47, "esp": 50, "ah": 51, "ipv6-icmp": 58, "ospf": 89,
	"pim": 103, "vrrp": 112, "sctp": 132,
}

func (p *parser) ethType(t uint32) bexpr { return eq(ld(2, p.typeOff), t) }

// ipProto is "ip proto v": an IPv4 packet whose protocol field is v.
func (p *parser) ipProto(v uint32) bexpr {
	return and(p.ethType(0x0800), eq(ld(1, p.nlOff+9), v))
}

// ip6Proto is "ip6 proto v": the next-header field is v, or it is a
// fragment header (44) whose next header is v.
func (p *parser) ip6Proto(v uint32) bexpr {
	nh := ld(1, p.nlOff+6)
	return and(p.ethType(0x86dd), or(eq(nh, v), and(eq(nh, 44), eq(ld(1, p.nlOff+40), v))))
}

// notFragment is true for an unfragmented IPv4 packet or the first
// fragment, the only ones that carry transport ports.
func (p *parser) notFragment() bexpr {
	return notB{cmpB{op: relSet, lhs: ld(2, p.nlOff+6), rhs: constA(0x1fff)}}
}

func (p *parser) protoNumber(t token, proto tokKind, v uint32) (bexpr, error) {
	switch proto {
	case qDefault:
		if v > 255 {
			return nil, invalidErr(t.col, "protocol %d is greater than 255", v)
		}
		return or(p.ipProto(v), p.ip6Proto(v)), nil
	case tIP:
		if v > 255 {
			return nil, invalidErr(t.col, "protocol %d is greater than 255", v)
		}
		return p.ipProto(v), nil
	case tIP6:
		if v > 255 {
			return nil, invalidErr(t.col, "protocol %d is greater than 255", v)
		}
		return p.ip6Proto(v), nil
	case tEther:
		if v > 65535 {
			return nil, invalidErr(t.col, "ether proto %d is greater than 65535", v)
		}
		return p.etherProto(v), nil
	}
	return nil, invalidErr(t.col, "'%s proto' is not supported", protoName(proto))
}

// etherProto follows 802.3 framing: a type field above 1500 is an
// ethertype; at or below it is a length, and the protocol is in the LLC
// header after it.
func (p *parser) etherProto(v uint32) bexpr {
	typ := ld(2, p.typeOff)
	isLen := notB{cmpB{op: relGT, lhs: typ, rhs: constA(1500)}}
	llc := p.typeOff + 2
	switch v {
	case 0x06, 0xf0, 0xfe: // IP, NetBEUI, ISO SAPs: DSAP and SSAP both set
		return and(isLen, eq(ld(2, llc), v<<8|v))
	case 0xe0: // IPX: Ethernet II, SNAP, 802.2, or raw 802.3
		return or(eq(typ, 0x8137), and(isLen, or(and(eq(ld(4, llc+4), 0x8137), eq(ld(4, llc), 0xaaaa0300)), eq(ld(1, llc), 0xe0), eq(ld(2, llc), 0xffff))))
	case 0x809b: // AppleTalk: Ethernet II or SNAP with the Apple OUI
		return or(eq(typ, v), and(isLen, and(eq(ld(4, llc+4), 0x0007809b), eq(ld(4, llc), 0xaaaa0308))))
	case 0x80f3: // AARP: Ethernet II or SNAP with a zero OUI
		return or(eq(typ, v), and(isLen, and(eq(ld(4, llc+4), 0x80f3), eq(ld(4, llc), 0xaaaa0300))))
	}
	if v <= 1500 {
		return and(isLen, eq(ld(1, llc), v))
	}
	return eq(typ, v)
}

// port matches a TCP, UDP or SCTP port in [lo, hi] over IPv4 (not in a
// non-first fragment) and IPv6 (a transport header right after the fixed
// header).
func (p *parser) port(t token, q qual, lo, hi uint32) (bexpr, error) {
	var protos []uint32
	switch q.proto {
	case qDefault:
		protos = []uint32{132, 6, 17}
	case tTCP:
		protos = []uint32{6}
	case tUDP:
		protos = []uint32{17}
	case tSCTP:
		protos = []uint32{132}
	default:
		return nil, invalidErr(t.col, "'%s' cannot qualify a port", protoName(q.proto))
	}
	in := func(a aexpr) bexpr {
		var tests []bexpr
		for _, v := range protos {
			tests = append(tests, eq(a, v))
		}
		return or(tests...)
	}
	portTest := func(a aexpr) bexpr {
		if lo == hi {
			return eq(a, lo)
		}
		return and(cmpB{op: relGE, lhs: a, rhs: constA(lo)}, notB{cmpB{op: relGT, lhs: a, rhs: constA(hi)}})
	}
	nl := p.nlOff
	tp := func(off uint32) aexpr { return loadA{size: 2, msh: true, mshOff: nl, off: nl + off} }
	v4 := and(p.ethType(0x0800), in(ld(1, nl+9)), p.notFragment(), dirTest(q.dir, portTest(tp(0)), portTest(tp(2))))
	v6 := and(p.ethType(0x86dd), in(ld(1, nl+6)), dirTest(q.dir, portTest(ld(2, nl+40)), portTest(ld(2, nl+42))))
	return or(v4, v6), nil
}

// protoAbbrev is a protocol name on its own: "tcp", "ip6", "arp".
func (p *parser) protoAbbrev(t token) (bexpr, error) {
	switch t.kind {
	case tIP:
		return p.ethType(0x0800), nil
	case tIP6:
		return p.ethType(0x86dd), nil
	case tARP:
		return p.ethType(0x0806), nil
	case tRARP:
		return p.ethType(0x8035), nil
	case tTCP:
		return or(p.ipProto(6), p.ip6Proto(6)), nil
	case tUDP:
		return or(p.ipProto(17), p.ip6Proto(17)), nil
	case tSCTP:
		return or(p.ipProto(132), p.ip6Proto(132)), nil
	case tICMP:
		return p.ipProto(1), nil
	case tICMP6:
		return p.ip6Proto(58), nil
	case tIGMP:
		return p.ipProto(2), nil
	case tIGRP:
		return p.ipProto(9), nil
	case tPIM:
		return or(p.ipProto(103), p.ip6Proto(103)), nil
	case tVRRP:
		return p.ipProto(112), nil
	case tAH:
		return or(p.ipProto(51), p.ip6Proto(51)), nil
	case tESP:
		return or(p.ipProto(50), p.ip6Proto(50)), nil
	}
	return nil, invalidErr(t.col, "%s needs a qualifier after it, such as 'host', 'proto' or '['", describe(t))
}

// castPrimitive is [ether|ip|ip6] broadcast|multicast.
func (p *parser) castPrimitive(proto tokKind, kind tokKind, t token) (bexpr, error) {
	if kind == tBroadcast {
		switch proto {
		case qDefault, tEther:
			return macTest(0, [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}), nil
		case tIP:
			// Without a netmask only the all-zeros and all-ones
			// destinations are known to be broadcasts.
			dst := ld(4, p.nlOff+16)
			return and(p.ethType(0x0800), or(eq(dst, 0), eq(dst, 0xffffffff))), nil
		}
		return nil, invalidErr(t.col, "'%s broadcast' is not supported: use 'ether broadcast' or 'ip broadcast'", protoName(proto))
	}
	switch proto {
	case qDefault, tEther:
		return cmpB{op: relSet, lhs: ld(1, 0), rhs: constA(1)}, nil
	case tIP:
		return and(p.ethType(0x0800), cmpB{op: relGE, lhs: ld(1, p.nlOff+16), rhs: constA(224)}), nil
	case tIP6:
		return and(p.ethType(0x86dd), eq(ld(1, p.nlOff+24), 0xff)), nil
	}
	return nil, invalidErr(t.col, "'%s multicast' is not supported: use 'ether', 'ip' or 'ip6 multicast'", protoName(proto))
}

// vlan is "vlan [id]": an 802.1Q, 802.1ad or old QinQ tag at the current
// ethertype offset, whose VLAN ID is id when given. Everything after it
// looks four bytes further in.
func (p *parser) vlan() (bexpr, error) {
	typ := ld(2, p.typeOff)
	b := or(eq(typ, 0x8100), eq(typ, 0x88a8), eq(typ, 0x9100))
	// The id is a number, possibly in parentheses: "vlan (100)".
	i := 0
	for p.peekAt(i).kind == tLParen {
		i++
	}
	if p.peekAt(i).kind == tNum {
		for j := 0; j < i; j++ {
			p.next()
		}
		id := p.next()
		for j := 0; j < i; j++ {
			if _, err := p.expect(tRParen, "')'"); err != nil {
				return nil, err
			}
		}
		if id.num > 4095 {
			return nil, invalidErr(id.col, "VLAN ID %d is greater than 4095", id.num)
		}
		b = and(b, maskEq(ld(2, p.typeOff+2), 0x0fff, id.num))
	}
	p.typeOff += 4
	p.nlOff += 4
	return b, nil
}
