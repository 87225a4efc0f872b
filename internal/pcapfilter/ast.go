package pcapfilter

import "golang.org/x/net/bpf"

// The parser turns an expression straight into this tree of packet
// tests, as libpcap's parser does: a primitive such as "port 53" becomes
// the ethertype, protocol, fragment and port comparisons that define it,
// at the offsets in force where it appears (a "vlan" moves the ones after
// it by four bytes).

// bexpr is a boolean expression over one frame.
type bexpr interface{ isBool() }

type andB struct{ l, r bexpr }
type orB struct{ l, r bexpr }
type notB struct{ x bexpr }

// cmpB compares two values. Loads inside it happen unconditionally, so a
// protocol check guarding them is an andB around it.
type cmpB struct {
	op       relOp
	lhs, rhs aexpr
}

func (andB) isBool() {}
func (orB) isBool()  {}
func (notB) isBool() {}
func (cmpB) isBool() {}

// relOp is a classic BPF conditional jump; the others are negations.
type relOp uint8

const (
	relEQ  relOp = iota // lhs == rhs
	relGT               // lhs > rhs
	relGE               // lhs >= rhs
	relSet              // lhs & rhs != 0
)

// aexpr is a 32-bit value computed from the frame.
type aexpr interface{ isArith() }

type constA uint32

// lenA is the frame length.
type lenA struct{}

// loadA reads size bytes (1, 2 or 4, big-endian) at off, plus idx when it
// is set, plus 4*(frame[mshOff]&0xf) (the IPv4 header length) when msh
// is set.
type loadA struct {
	size   uint8
	msh    bool
	mshOff uint32
	off    uint32
	idx    aexpr
}

type binA struct {
	op   bpf.ALUOp
	l, r aexpr
}

type negA struct{ x aexpr }

func (constA) isArith() {}
func (lenA) isArith()   {}
func (loadA) isArith()  {}
func (binA) isArith()   {}
func (negA) isArith()   {}

func and(xs ...bexpr) bexpr {
	var r bexpr
	for _, x := range xs {
		if x == nil {
			continue
		}
		if r == nil {
			r = x
		} else {
			r = andB{r, x}
		}
	}
	return r
}

func or(xs ...bexpr) bexpr {
	var r bexpr
	for _, x := range xs {
		if r == nil {
			r = x
		} else {
			r = orB{r, x}
		}
	}
	return r
}

func ld(size uint8, off uint32) aexpr { return loadA{size: size, off: off} }

func eq(a aexpr, k uint32) bexpr { return cmpB{op: relEQ, lhs: a, rhs: constA(k)} }

// maskEq is (a & mask) == k, without the AND when the mask is all ones.
func maskEq(a aexpr, mask, k uint32) bexpr {
	if mask == 0xffffffff {
		return eq(a, k)
	}
	return eq(binA{op: bpf.ALUOpAnd, l: a, r: constA(mask)}, k)
}
