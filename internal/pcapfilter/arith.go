package pcapfilter

import (
	"fmt"

	"golang.org/x/net/bpf"
)

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
		// Classic BPF reads an absolute offset at or above 2^31 as
		// ancillary data (SKF_AD_OFF and friends), not frame bytes; no
		// frame is that long, so such an offset ("ether[-10]") is a
		// mistake.
		if uint64(l.off)+uint64(k) >= 1<<31 {
			return nil, invalidErr(proto.col, "offset %d is past the end of any frame", int32(k))
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
