package pcapfilter

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// tokKind classifies a token. Keywords are their own kinds so the parser
// can switch on them; everything that names a value (number, address,
// identifier) carries its text.
type tokKind int

const (
	tEOF         tokKind = iota
	tNum                 // 53, 0x35, 065 (octal), or a named constant such as tcp-syn
	tHID                 // dotted IPv4, possibly partial: 10, 10.1, 10.1.2.3
	tHID6                // IPv6 address
	tEID                 // MAC address
	tID                  // any other word (port range "1-1024", \name)
	tUnsupported         // a pcap-filter keyword this package does not implement
	tAnd                 // and &&
	tOr                  // or ||
	tNot                 // not !
	tLParen
	tRParen
	tLBrack
	tRBrack
	tColon
	tSlash
	tPlus
	tMinus
	tStar
	tPercent
	tAmp
	tPipe
	tCaret
	tLsh
	tRsh
	tGT
	tGE
	tLT
	tLE
	tEQ
	tNE

	// Keywords.
	tSrc
	tDst
	tHost
	tNet
	tMask
	tPort
	tPortrange
	tProto
	tGateway
	tLess
	tGreater
	tLen
	tBroadcast
	tMulticast
	tVlan
	// Protocol names (pname in the grammar).
	tEther
	tIP
	tIP6
	tARP
	tRARP
	tTCP
	tUDP
	tSCTP
	tICMP
	tICMP6
	tIGMP
	tIGRP
	tPIM
	tVRRP
	tAH
	tESP
)

var keywords = map[string]tokKind{
	"and": tAnd, "or": tOr, "not": tNot,
	"src": tSrc, "dst": tDst, "host": tHost, "net": tNet, "mask": tMask,
	"port": tPort, "portrange": tPortrange, "proto": tProto, "gateway": tGateway,
	"less": tLess, "greater": tGreater, "len": tLen,
	"broadcast": tBroadcast, "multicast": tMulticast, "vlan": tVlan,
	"ether": tEther, "link": tEther, "ip": tIP, "ip6": tIP6, "arp": tARP, "rarp": tRARP,
	"tcp": tTCP, "udp": tUDP, "sctp": tSCTP, "icmp": tICMP, "icmp6": tICMP6,
	"igmp": tIGMP, "igrp": tIGRP, "pim": tPIM, "vrrp": tVRRP, "ah": tAH, "esp": tESP,
}

// unsupported are pcap-filter keywords outside this package's subset,
// named in errors so a user knows the word was understood.
var unsupported = map[string]bool{
	"mpls": true, "pppoed": true, "pppoes": true, "geneve": true, "vxlan": true, "inbound": true,
	"outbound": true, "ifindex": true, "protochain": true, "llc": true, "stp": true, "ipx": true,
	"netbeui": true, "atalk": true, "aarp": true, "decnet": true, "lat": true, "sca": true,
	"moprc": true, "mopdl": true, "iso": true, "esis": true, "es-is": true, "isis": true,
	"is-is": true, "clnp": true, "l1": true, "l2": true, "iih": true, "lsp": true, "snp": true,
	"csnp": true, "psnp": true, "radio": true, "wlan": true, "fddi": true, "tr": true, "ppp": true,
	"slip": true, "carp": true, "batadv": true, "type": true, "subtype": true, "dir": true,
	"addr1": true, "addr2": true, "addr3": true, "addr4": true, "ra": true, "ta": true, "on": true,
	"ifname": true, "rnr": true, "rulenum": true, "reason": true, "rset": true, "ruleset": true,
	"srnr": true, "subrulenum": true, "action": true, "lane": true, "metac": true, "bcc": true,
	"sc": true, "ilmic": true, "oamf4ec": true, "oamf4sc": true, "oam": true, "oamf4": true,
	"connectmsg": true, "metaconnect": true, "vpi": true, "vci": true, "fisu": true, "lssu": true,
	"msu": true, "hfisu": true, "hlssu": true, "hmsu": true, "sio": true, "opc": true, "dpc": true,
	"sls": true, "hsio": true, "hopc": true, "hdpc": true, "hsls": true, "byte": true,
}

// namedConstants are the field offsets and values pcap-filter lets a
// byte comparison use by name (tcp[tcpflags] & tcp-syn != 0).
var namedConstants = map[string]uint32{
	"icmptype": 0, "icmpcode": 1,
	"icmp-echoreply": 0, "icmp-unreach": 3, "icmp-sourcequench": 4, "icmp-redirect": 5,
	"icmp-echo": 8, "icmp-routeradvert": 9, "icmp-routersolicit": 10, "icmp-timxceed": 11,
	"icmp-paramprob": 12, "icmp-tstamp": 13, "icmp-tstampreply": 14, "icmp-ireq": 15,
	"icmp-ireqreply": 16, "icmp-maskreq": 17, "icmp-maskreply": 18,
	"icmp6type": 0, "icmp6code": 1,
	"icmp6-destinationunreach": 1, "icmp6-packettoobig": 2, "icmp6-timeexceeded": 3,
	"icmp6-parameterproblem": 4, "icmp6-echo": 128, "icmp6-echoreply": 129,
	"icmp6-multicastlistenerquery": 130, "icmp6-multicastlistenerreportv1": 131,
	"icmp6-multicastlistenerdone": 132, "icmp6-routersolicit": 133,
	"icmp6-routeradvert": 134, "icmp6-neighborsolicit": 135, "icmp6-neighboradvert": 136,
	"icmp6-redirect": 137, "icmp6-routerrenum": 138, "icmp6-nodeinformationquery": 139,
	"icmp6-nodeinformationresponse": 140, "icmp6-ineighbordiscoverysolicit": 141,
	"icmp6-ineighbordiscoveryadvert": 142, "icmp6-multicastlistenerreportv2": 143,
	"icmp6-homeagentdiscoveryrequest": 144, "icmp6-homeagentdiscoveryreply": 145,
	"icmp6-mobileprefixsolicit": 146, "icmp6-mobileprefixadvert": 147,
	"icmp6-certpathsolicit": 148, "icmp6-certpathadvert": 149,
	"icmp6-multicastrouteradvert": 151, "icmp6-multicastroutersolicit": 152,
	"icmp6-multicastrouterterm": 153,

	"tcpflags": 13, "tcp-fin": 0x01, "tcp-syn": 0x02, "tcp-rst": 0x04, "tcp-push": 0x08,
	"tcp-ack": 0x10, "tcp-urg": 0x20, "tcp-ece": 0x40, "tcp-cwr": 0x80,
}

type token struct {
	kind tokKind
	text string // source text (without a leading backslash for \name)
	col  int    // 1-based column of the first byte
	num  uint32 // value of tNum
}

// Error is a compile error. Kind is "syntax error" for an expression
// that does not parse and "invalid filter" for one that parses but means
// nothing (a port above 65535, "tcp host"); Col is the 1-based column of
// the offending token, 0 when the problem is the expression as a whole.
type Error struct {
	Kind string
	Col  int
	Msg  string
}

func (e *Error) Error() string {
	if e.Col > 0 {
		return fmt.Sprintf("filter: %s at column %d: %s", e.Kind, e.Col, e.Msg)
	}
	return fmt.Sprintf("filter: %s: %s", e.Kind, e.Msg)
}

const (
	kindSyntax  = "syntax error"
	kindInvalid = "invalid filter"
)

func syntaxErr(col int, format string, args ...any) *Error {
	return &Error{Kind: kindSyntax, Col: col, Msg: fmt.Sprintf(format, args...)}
}

func invalidErr(col int, format string, args ...any) *Error {
	return &Error{Kind: kindInvalid, Col: col, Msg: fmt.Sprintf(format, args...)}
}

func isWordStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func isWordByte(c byte) bool {
	return isWordStart(c) || c == '-' || c == '_' || c == '.'
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// lex splits an expression into tokens. Words follow libpcap's scanner:
// the longest run of letters, digits, '-', '_' and '.' that ends in a
// letter, digit or '.', so "1-1024" is one word (a port range) and so is
// "len-1" (not an arithmetic expression, as in tcpdump).
func lex(s string) ([]token, error) {
	var toks []token
	i := 0
	for i < len(s) {
		c := s[i]
		col := i + 1
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
			continue
		case c == '\\':
			j := i + 1
			for j < len(s) && !strings.ContainsRune(" \t\n\r!()", rune(s[j])) {
				j++
			}
			if j == i+1 {
				return nil, syntaxErr(col, "'\\' must be followed by a name")
			}
			toks = append(toks, token{kind: tID, text: s[i+1 : j], col: col})
			i = j
			continue
		}
		if op, n := operator(s[i:]); n > 0 {
			toks = append(toks, token{kind: op, text: s[i : i+n], col: col})
			i += n
			continue
		}
		if !isWordStart(c) && c != ':' {
			return nil, syntaxErr(col, "unexpected character %q", c)
		}
		// An address with colons (MAC or IPv6) is tried first, as the
		// longest run of address characters; "12:2" inside brackets is
		// neither and falls back to a plain word.
		j := i
		for j < len(s) && (isHex(s[j]) || s[j] == ':' || s[j] == '.') {
			j++
		}
		if w := s[i:j]; strings.Contains(w, ":") && (j == len(s) || !isWordByte(s[j])) {
			if _, ok := parseMAC(w); ok {
				toks = append(toks, token{kind: tEID, text: w, col: col})
				i = j
				continue
			}
			if a, err := netip.ParseAddr(w); err == nil && a.Is6() && a.Zone() == "" {
				toks = append(toks, token{kind: tHID6, text: w, col: col})
				i = j
				continue
			}
		}
		if c == ':' {
			toks = append(toks, token{kind: tColon, text: ":", col: col})
			i++
			continue
		}
		j = i
		for j < len(s) && isWordByte(s[j]) {
			j++
		}
		for j > i+1 && (s[j-1] == '-' || s[j-1] == '_') {
			j--
		}
		toks = append(toks, classify(s[i:j], col))
		i = j
	}
	toks = append(toks, token{kind: tEOF, col: len(s) + 1})
	return toks, nil
}

// operator matches punctuation at the start of s, longest first.
func operator(s string) (tokKind, int) {
	if len(s) >= 2 {
		switch s[:2] {
		case "&&":
			return tAnd, 2
		case "||":
			return tOr, 2
		case ">=":
			return tGE, 2
		case "<=":
			return tLE, 2
		case "!=":
			return tNE, 2
		case "==":
			return tEQ, 2
		case "<<":
			return tLsh, 2
		case ">>":
			return tRsh, 2
		}
	}
	switch s[0] {
	case '!':
		return tNot, 1
	case '(':
		return tLParen, 1
	case ')':
		return tRParen, 1
	case '[':
		return tLBrack, 1
	case ']':
		return tRBrack, 1
	case '/':
		return tSlash, 1
	case '+':
		return tPlus, 1
	case '-':
		return tMinus, 1
	case '*':
		return tStar, 1
	case '%':
		return tPercent, 1
	case '&':
		return tAmp, 1
	case '|':
		return tPipe, 1
	case '^':
		return tCaret, 1
	case '>':
		return tGT, 1
	case '<':
		return tLT, 1
	case '=':
		return tEQ, 1
	}
	return 0, 0
}

func classify(w string, col int) token {
	if k, ok := keywords[w]; ok {
		return token{kind: k, text: w, col: col}
	}
	if unsupported[w] {
		return token{kind: tUnsupported, text: w, col: col}
	}
	if v, ok := namedConstants[w]; ok {
		return token{kind: tNum, text: w, col: col, num: v}
	}
	if v, ok := parseNum(w); ok {
		return token{kind: tNum, text: w, col: col, num: v}
	}
	if _, _, ok := parseHID(w); ok {
		return token{kind: tHID, text: w, col: col}
	}
	if _, ok := parseMAC(w); ok {
		return token{kind: tEID, text: w, col: col}
	}
	return token{kind: tID, text: w, col: col}
}

// parseNum reads a decimal, 0x hexadecimal or 0-prefixed octal number that
// fits in 32 bits.
func parseNum(w string) (uint32, bool) {
	base := 10
	digits := w
	switch {
	case len(w) > 2 && (w[:2] == "0x" || w[:2] == "0X"):
		base, digits = 16, w[2:]
	case len(w) > 1 && w[0] == '0':
		base, digits = 8, w[1:]
	}
	for i := 0; i < len(digits); i++ {
		if !isHex(digits[i]) {
			return 0, false
		}
	}
	v, err := strconv.ParseUint(digits, base, 32)
	if err != nil {
		return 0, false
	}
	return uint32(v), true
}

// parseHID reads a dotted IPv4 address of one to four parts (10, 10.1,
// 10.1.2, 10.1.2.3) and returns it left-aligned with the number of
// significant bits. Only dotted forms count: a bare number is a tNum.
func parseHID(w string) (addr uint32, bits int, ok bool) {
	parts := strings.Split(w, ".")
	if len(parts) < 2 || len(parts) > 4 {
		return 0, 0, false
	}
	for _, p := range parts {
		if p == "" || len(p) > 3 {
			return 0, 0, false
		}
		for i := 0; i < len(p); i++ {
			if p[i] < '0' || p[i] > '9' {
				return 0, 0, false
			}
		}
		v, _ := strconv.Atoi(p)
		if v > 255 {
			return 0, 0, false
		}
		addr = addr<<8 | uint32(v)
	}
	bits = 8 * len(parts)
	return addr << (32 - bits), bits, true
}

// parseMAC reads xx:xx:xx:xx:xx:xx (also with '-' or '.' between the six
// groups of one or two hex digits) or xxxx.xxxx.xxxx.
func parseMAC(w string) ([6]byte, bool) {
	var mac [6]byte
	for _, sep := range []string{":", "-", "."} {
		parts := strings.Split(w, sep)
		if len(parts) != 6 {
			continue
		}
		ok := true
		for i, p := range parts {
			v, err := strconv.ParseUint(p, 16, 8)
			if len(p) == 0 || len(p) > 2 || err != nil {
				ok = false
				break
			}
			mac[i] = byte(v)
		}
		if ok {
			return mac, true
		}
	}
	parts := strings.Split(w, ".")
	if len(parts) == 3 {
		for i, p := range parts {
			v, err := strconv.ParseUint(p, 16, 16)
			if len(p) != 4 || err != nil {
				return mac, false
			}
			mac[2*i], mac[2*i+1] = byte(v>>8), byte(v)
		}
		return mac, true
	}
	return mac, false
}
