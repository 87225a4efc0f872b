package pcapfilter

import "strconv"

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
