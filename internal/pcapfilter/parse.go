package pcapfilter

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"net/netip"
	"strconv"
	"strings"

	"golang.org/x/net/bpf"
)

// Qualifier values. A zero qual is libpcap's "qerr": no qualifier in
// force, so a bare value ("tcp and 80") is an error.
const (
	qDefault = iota + 1

	dirSrc
	dirDst
	dirOr
	dirAnd

	addrHost
	addrNet
	addrPort
	addrPortrange
	addrProto
	addrGateway
)

// qual is the protocol, direction and address-type qualifiers in force
// for an identifier. proto is a protocol token kind or qDefault.
type qual struct {
	set   bool
	proto tokKind
	dir   int
	addr  int
}

const maxDepth = 200

type parser struct {
	toks  []token
	pos   int
	depth int

	// Offsets of the ethertype field and of the network header. Every
	// "vlan" moves both by four bytes for everything parsed after it.
	typeOff uint32
	nlOff   uint32
}

func (p *parser) peek() token { return p.toks[p.pos] }
func (p *parser) peekAt(n int) token {
	if p.pos+n < len(p.toks) {
		return p.toks[p.pos+n]
	}
	return p.toks[len(p.toks)-1]
}
func (p *parser) next() token {
	t := p.toks[p.pos]
	if t.kind != tEOF {
		p.pos++
	}
	return t
}

func describe(t token) string {
	if t.kind == tEOF {
		return "end of expression"
	}
	return strconv.Quote(t.text)
}

func (p *parser) expect(k tokKind, what string) (token, error) {
	t := p.peek()
	if t.kind != k {
		return t, syntaxErr(t.col, "expected %s, found %s", what, describe(t))
	}
	return p.next(), nil
}

func (p *parser) enter() error {
	p.depth++
	if p.depth > maxDepth {
		return syntaxErr(p.peek().col, "expression nested too deeply")
	}
	return nil
}

func (p *parser) leave() { p.depth-- }

// parse is prog: an empty expression (nil: accept everything) or expr.
func parse(expr string) (bexpr, error) {
	toks, err := lex(expr)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks, typeOff: 12, nlOff: 14}
	if p.peek().kind == tEOF {
		return nil, nil
	}
	b, _, err := p.expr(qual{})
	if err != nil {
		return nil, err
	}
	if t := p.peek(); t.kind == tUnsupported {
		return nil, unsupportedErr(t)
	} else if t.kind != tEOF {
		return nil, syntaxErr(t.col, "expected 'and', 'or' or end of expression, found %s", describe(t))
	}
	return b, nil
}

// expr is a left-associative chain of terms joined by and/or, which have
// equal precedence. After and/or a bare identifier takes the qualifiers
// of what precedes it: "port 53 or 80" is "port 53 or port 80".
func (p *parser) expr(prev qual) (bexpr, qual, error) {
	if err := p.enter(); err != nil {
		return nil, qual{}, err
	}
	defer p.leave()
	b, q, err := p.term(prev)
	if err != nil {
		return nil, q, err
	}
	for {
		op := p.peek().kind
		if op != tAnd && op != tOr {
			return b, q, nil
		}
		p.next()
		var r bexpr
		if p.idFollows() {
			r, q, err = p.id(q)
		} else {
			r, q, err = p.term(q)
		}
		if err != nil {
			return nil, q, err
		}
		if op == tAnd {
			b = andB{b, r}
		} else {
			b = orB{b, r}
		}
	}
}

// idFollows tells whether the next tokens are an identifier (possibly
// negated or in parentheses) rather than a term.
func (p *parser) idFollows() bool {
	i := 0
	for p.peekAt(i).kind == tNot || p.peekAt(i).kind == tLParen {
		i++
	}
	switch p.peekAt(i).kind {
	case tHID, tHID6, tEID, tID:
		return true
	case tNum:
		return !continuesArith(p.peekAt(i + 1).kind)
	}
	return false
}

// continuesArith tells whether k after a number makes it part of an
// arithmetic comparison.
func continuesArith(k tokKind) bool {
	switch k {
	case tPlus, tMinus, tStar, tSlash, tPercent, tAmp, tPipe, tCaret, tLsh, tRsh,
		tGT, tGE, tLT, tLE, tEQ, tNE:
		return true
	}
	return false
}

func (p *parser) term(prev qual) (bexpr, qual, error) {
	if p.peek().kind == tNot {
		p.next()
		if err := p.enter(); err != nil {
			return nil, qual{}, err
		}
		defer p.leave()
		b, q, err := p.term(prev)
		if err != nil {
			return nil, q, err
		}
		return notB{b}, q, nil
	}
	return p.rterm(prev)
}

func isPname(k tokKind) bool { return k >= tEther && k <= tESP }

func isHeadStart(k tokKind) bool {
	switch k {
	case tSrc, tDst, tHost, tNet, tPort, tPortrange, tProto, tGateway:
		return true
	}
	return false
}

func (p *parser) rterm(prev qual) (bexpr, qual, error) {
	t := p.peek()
	switch {
	case t.kind == tLParen:
		// "(" opens either an arithmetic operand, "(tcp[13] & 2) != 0",
		// or a group of terms: try the comparison first and keep the
		// error that got further if neither parses.
		start := p.pos
		b, errRel := p.relation()
		if errRel == nil {
			return b, qual{}, nil
		}
		p.pos = start
		p.next()
		b, _, err := p.expr(prev)
		if err == nil {
			_, err = p.expect(tRParen, "')'")
		}
		if err != nil {
			if further(errRel, err) {
				return nil, qual{}, errRel
			}
			return nil, qual{}, err
		}
		return b, prev, nil
	case isPname(t.kind):
		switch n := p.peekAt(1).kind; {
		case n == tLBrack:
			b, err := p.relation()
			return b, qual{}, err
		case isHeadStart(n):
			return p.head()
		case n == tBroadcast || n == tMulticast:
			p.next()
			p.next()
			b, err := p.castPrimitive(t.kind, n, p.peekAt(-1))
			return b, qual{}, err
		}
		p.next()
		b, err := p.protoAbbrev(t)
		return b, qual{}, err
	case isHeadStart(t.kind):
		return p.head()
	case t.kind == tBroadcast || t.kind == tMulticast:
		p.next()
		b, err := p.castPrimitive(qDefault, t.kind, t)
		return b, qual{}, err
	case t.kind == tLess || t.kind == tGreater:
		p.next()
		n, err := p.expect(tNum, "a length")
		if err != nil {
			return nil, qual{}, err
		}
		if t.kind == tLess {
			return notB{cmpB{op: relGT, lhs: lenA{}, rhs: constA(n.num)}}, qual{}, nil
		}
		return cmpB{op: relGE, lhs: lenA{}, rhs: constA(n.num)}, qual{}, nil
	case t.kind == tVlan:
		p.next()
		b, err := p.vlan()
		return b, qual{}, err
	case t.kind == tNum || t.kind == tLen || t.kind == tMinus:
		b, err := p.relation()
		return b, qual{}, err
	case t.kind == tHID || t.kind == tHID6 || t.kind == tEID || t.kind == tID:
		return nil, qual{}, syntaxErr(t.col, "%s needs a qualifier such as 'host', 'net' or 'port' before it", describe(t))
	case t.kind == tUnsupported:
		return nil, qual{}, unsupportedErr(t)
	}
	return nil, qual{}, syntaxErr(t.col, "expected a primitive such as 'host', 'port', 'tcp' or '(', found %s", describe(t))
}

func further(a, b error) bool {
	ea, oka := a.(*Error)
	eb, okb := b.(*Error)
	return oka && okb && ea.Col > eb.Col
}

// head is [proto] [src|dst|src or dst|src and dst] [host|net|port|portrange]
// or [proto] proto, followed by an identifier.
func (p *parser) head() (bexpr, qual, error) {
	q := qual{set: true, proto: qDefault, dir: qDefault, addr: qDefault}
	if isPname(p.peek().kind) {
		q.proto = p.next().kind
	}
	switch p.peek().kind {
	case tSrc, tDst:
		first := p.next().kind
		q.dir = dirSrc
		if first == tDst {
			q.dir = dirDst
		}
		if c := p.peek().kind; (c == tOr || c == tAnd) && (p.peekAt(1).kind == tSrc || p.peekAt(1).kind == tDst) && p.peekAt(1).kind != first {
			p.next()
			p.next()
			q.dir = dirOr
			if c == tAnd {
				q.dir = dirAnd
			}
		}
	}
	switch p.peek().kind {
	case tHost:
		q.addr = addrHost
	case tNet:
		q.addr = addrNet
	case tPort:
		q.addr = addrPort
	case tPortrange:
		q.addr = addrPortrange
	case tProto:
		if q.dir != qDefault {
			t := p.peek()
			return nil, q, syntaxErr(t.col, "'proto' cannot follow 'src' or 'dst'")
		}
		q.addr = addrProto
	case tGateway:
		return nil, q, invalidErr(p.peek().col, "'gateway' needs host name lookups, which are not supported")
	}
	if q.addr != qDefault {
		p.next()
	} else if q.dir == qDefault {
		t := p.peek()
		return nil, q, syntaxErr(t.col, "expected 'src', 'dst', 'host', 'net', 'port', 'portrange' or 'proto', found %s", describe(t))
	}
	return p.id(q)
}

// id is a value under the qualifiers q: a number, address or name, its
// negation, or a parenthesised list of them joined by and/or.
func (p *parser) id(q qual) (bexpr, qual, error) {
	if err := p.enter(); err != nil {
		return nil, q, err
	}
	defer p.leave()
	t := p.peek()
	switch t.kind {
	case tNot:
		p.next()
		b, q, err := p.id(q)
		if err != nil {
			return nil, q, err
		}
		return notB{b}, q, nil
	case tLParen:
		p.next()
		b, _, err := p.id(q)
		if err != nil {
			return nil, q, err
		}
		for k := p.peek().kind; k == tAnd || k == tOr; k = p.peek().kind {
			p.next()
			r, _, err := p.id(q)
			if err != nil {
				return nil, q, err
			}
			if k == tAnd {
				b = andB{b, r}
			} else {
				b = orB{b, r}
			}
		}
		if _, err := p.expect(tRParen, "')'"); err != nil {
			return nil, q, err
		}
		return b, q, nil
	}
	if !q.set {
		return nil, q, syntaxErr(t.col, "%s needs a qualifier such as 'host', 'net' or 'port' before it", describe(t))
	}
	p.next()
	var b bexpr
	var err error
	switch t.kind {
	case tNum:
		b, err = p.numberID(t, q)
	case tHID:
		b, err = p.hidID(t, q)
	case tHID6:
		b, err = p.hid6ID(t, q)
	case tEID:
		b, err = p.eid(t, q)
	case tID:
		b, err = p.nameID(t, q)
	case tUnsupported:
		err = unsupportedErr(t)
	default:
		err = syntaxErr(t.col, "expected %s, found %s", valueWanted(q), describe(t))
	}
	return b, q, err
}

func unsupportedErr(t token) error {
	return invalidErr(t.col, "%q is a pcap-filter keyword this compiler does not support", t.text)
}

func valueWanted(q qual) string {
	switch q.addr {
	case addrPort:
		return "a port number"
	case addrPortrange:
		return "a port range such as 1-1024"
	case addrProto:
		return "a protocol number or \\name"
	case addrNet:
		return "a network such as 10.0.0.0/8"
	}
	if q.proto == tEther {
		return "a MAC address"
	}
	return "an address"
}

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

// Arithmetic binding powers: '|' < '&' < shifts < '+' '-' < '*' '/' <
// unary minus. '%' and '^' have no precedence in libpcap's grammar, so
// its parser always shifts them: they bind tightest on the left and
// loosest on the right ("a * b % c" is "a * (b % c)").
func binaryOp(k tokKind) (op bpf.ALUOp, lbp, rbp int, ok bool) {
	switch k {
	case tPipe:
		return bpf.ALUOpOr, 1, 1, true
	case tAmp:
		return bpf.ALUOpAnd, 2, 2, true
	case tLsh:
		return bpf.ALUOpShiftLeft, 3, 3, true
	case tRsh:
		return bpf.ALUOpShiftRight, 3, 3, true
	case tPlus:
		return bpf.ALUOpAdd, 4, 4, true
	case tMinus:
		return bpf.ALUOpSub, 4, 4, true
	case tStar:
		return bpf.ALUOpMul, 5, 5, true
	case tSlash:
		return bpf.ALUOpDiv, 5, 5, true
	case tPercent:
		return bpf.ALUOpMod, 100, 0, true
	case tCaret:
		return bpf.ALUOpXor, 100, 0, true
	}
	return 0, 0, 0, false
}

const unaryBP = 6

// relation is arith relop arith. The protocol checks of every load in it
// (ip[..] needs an IPv4 packet, tcp[..] an unfragmented IPv4 TCP one)
// guard the comparison, so a failed check makes the relation false even
// under "!=" or "not".
func (p *parser) relation() (bexpr, error) {
	var checks []bexpr
	lhs, err := p.arith(0, &checks)
	if err != nil {
		return nil, err
	}
	opTok := p.next()
	var rel relOp
	negate := false
	switch opTok.kind {
	case tGT:
		rel = relGT
	case tGE:
		rel = relGE
	case tEQ:
		rel = relEQ
	case tLE:
		rel, negate = relGT, true
	case tLT:
		rel, negate = relGE, true
	case tNE:
		rel, negate = relEQ, true
	default:
		return nil, syntaxErr(opTok.col, "expected a comparison (=, !=, <, <=, >, >=), found %s", describe(opTok))
	}
	rhs, err := p.arith(0, &checks)
	if err != nil {
		return nil, err
	}
	var cmp bexpr = cmpB{op: rel, lhs: lhs, rhs: rhs}
	if negate {
		cmp = notB{cmp}
	}
	return and(append(dedupe(checks), cmp)...), nil
}

func dedupe(bs []bexpr) []bexpr {
	seen := map[string]bool{}
	var out []bexpr
	for _, b := range bs {
		k := fmt.Sprintf("%#v", b)
		if !seen[k] {
			seen[k] = true
			out = append(out, b)
		}
	}
	return out
}

func (p *parser) arith(minBP int, checks *[]bexpr) (aexpr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	left, err := p.operand(checks)
	if err != nil {
		return nil, err
	}
	for {
		t := p.peek()
		op, lbp, rbp, ok := binaryOp(t.kind)
		if !ok || lbp <= minBP {
			return left, nil
		}
		p.next()
		right, err := p.arith(rbp, checks)
		if err != nil {
			return nil, err
		}
		if k, isConst := right.(constA); isConst {
			switch {
			case op == bpf.ALUOpDiv && k == 0:
				return nil, invalidErr(t.col, "division by zero")
			case op == bpf.ALUOpMod && k == 0:
				return nil, invalidErr(t.col, "modulus by zero")
			case (op == bpf.ALUOpShiftLeft || op == bpf.ALUOpShiftRight) && k > 31:
				return nil, invalidErr(t.col, "shift by more than 31 bits")
			}
		}
		left = fold(op, left, right)
	}
}

// fold simplifies constant arithmetic as libpcap's optimiser does, which
// matters beyond speed: an operand multiplied or ANDed by zero is never
// loaded, so a frame too short for it is not rejected ("tcp[100] & 0 = 0"
// holds for any unfragmented TCP packet).
func fold(op bpf.ALUOp, l, r aexpr) aexpr {
	lc, lConst := l.(constA)
	rc, rConst := r.(constA)
	switch {
	case lConst && rConst:
		v, _ := alu(aluOps[op], uint32(lc), 0, uint32(rc))
		return constA(v)
	case rConst && rc == 0:
		switch op {
		case bpf.ALUOpMul, bpf.ALUOpAnd:
			return constA(0)
		case bpf.ALUOpAdd, bpf.ALUOpSub, bpf.ALUOpOr, bpf.ALUOpXor, bpf.ALUOpShiftLeft, bpf.ALUOpShiftRight:
			return l
		}
	case lConst && lc == 0:
		switch op {
		case bpf.ALUOpAdd, bpf.ALUOpOr, bpf.ALUOpXor:
			return r
		case bpf.ALUOpMul, bpf.ALUOpDiv, bpf.ALUOpMod, bpf.ALUOpAnd, bpf.ALUOpShiftLeft, bpf.ALUOpShiftRight:
			return constA(0)
		}
	}
	return binA{op: op, l: l, r: r}
}

func (p *parser) operand(checks *[]bexpr) (aexpr, error) {
	t := p.next()
	switch {
	case t.kind == tNum:
		return constA(t.num), nil
	case t.kind == tLen:
		return lenA{}, nil
	case t.kind == tMinus:
		x, err := p.arith(unaryBP, checks)
		if err != nil {
			return nil, err
		}
		if k, ok := x.(constA); ok {
			return -k, nil
		}
		return negA{x}, nil
	case t.kind == tLParen:
		x, err := p.arith(0, checks)
		if err != nil {
			return nil, err
		}
		if _, err := p.expect(tRParen, "')'"); err != nil {
			return nil, err
		}
		return x, nil
	case isPname(t.kind) && p.peek().kind == tLBrack:
		p.next()
		return p.load(t, checks)
	}
	return nil, syntaxErr(t.col, "expected a number, 'len' or proto[offset], found %s", describe(t))
}

// load is proto[index] or proto[index:size], relative to the start of
// that protocol's header.
func (p *parser) load(proto token, checks *[]bexpr) (aexpr, error) {
	idx, err := p.arith(0, checks)
	if err != nil {
		return nil, err
	}
	size := uint32(1)
	if p.peek().kind == tColon {
		p.next()
		st, err := p.expect(tNum, "a size of 1, 2 or 4")
		if err != nil {
			return nil, err
		}
		if st.num != 1 && st.num != 2 && st.num != 4 {
			return nil, invalidErr(st.col, "data size must be 1, 2 or 4, not %d", st.num)
		}
		size = st.num
	}
	if _, err := p.expect(tRBrack, "']'"); err != nil {
		return nil, err
	}
	nl := p.nlOff
	l := loadA{size: uint8(size)}
	var check bexpr
	switch proto.kind {
	case tEther:
	case tIP:
		l.off, check = nl, p.ethType(0x0800)
	case tIP6:
		l.off, check = nl, p.ethType(0x86dd)
	case tARP:
		l.off, check = nl, p.ethType(0x0806)
	case tRARP:
		l.off, check = nl, p.ethType(0x8035)
	case tTCP, tUDP, tSCTP, tICMP, tIGMP, tIGRP, tPIM, tVRRP:
		// Relative to the transport header of an IPv4 packet, past its
		// variable-length header, and only in a packet that has one.
		pr := map[tokKind]uint32{tTCP: 6, tUDP: 17, tSCTP: 132, tICMP: 1, tIGMP: 2, tIGRP: 9, tPIM: 103, tVRRP: 112}[proto.kind]
		l.off, l.msh, l.mshOff = nl, true, nl
		check = and(p.ipProto(pr), p.notFragment())
	case tICMP6:
		l.off = nl + 40
		check = and(p.ethType(0x86dd), eq(ld(1, nl+6), 58))
	default:
		return nil, invalidErr(proto.col, "'%s' cannot be indexed", proto.text)
	}
	if k, ok := idx.(constA); ok {
		if uint64(l.off)+uint64(k) > 0xffffffff-4 {
			return nil, invalidErr(proto.col, "offset %d is too large", uint32(k))
		}
		l.off += uint32(k)
	} else {
		l.idx = idx
	}
	if check != nil {
		*checks = append(*checks, check)
	}
	return l, nil
}
