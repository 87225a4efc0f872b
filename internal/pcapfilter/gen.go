package pcapfilter

import (
	"fmt"

	"golang.org/x/net/bpf"
)

// Classic BPF opcode fields (the encoding every BPF implementation shares).
const (
	clsLD   = 0x00
	clsLDX  = 0x01
	clsST   = 0x02
	clsSTX  = 0x03
	clsALU  = 0x04
	clsJMP  = 0x05
	clsRET  = 0x06
	clsMISC = 0x07

	szW = 0x00
	szH = 0x08
	szB = 0x10

	modeIMM = 0x00
	modeABS = 0x20
	modeIND = 0x40
	modeMEM = 0x60
	modeLEN = 0x80
	modeMSH = 0xa0

	aluADD = 0x00
	aluSUB = 0x10
	aluMUL = 0x20
	aluDIV = 0x30
	aluOR  = 0x40
	aluAND = 0x50
	aluLSH = 0x60
	aluRSH = 0x70
	aluNEG = 0x80
	aluMOD = 0x90
	aluXOR = 0xa0

	jmpJA   = 0x00
	jmpJEQ  = 0x10
	jmpJGT  = 0x20
	jmpJGE  = 0x30
	jmpJSET = 0x40

	srcK = 0x00
	srcX = 0x08

	retK = 0x00
	retA = 0x10

	miscTAX = 0x00
	miscTXA = 0x80
)

// MaxInstructions is the longest program Compile produces: the limit
// Linux puts on a classic BPF socket filter.
const MaxInstructions = 4096

// scratchSlots is the number of BPF scratch memory words.
const scratchSlots = 16

// irIns is one instruction before layout. Conditional jumps (and "ja")
// name their targets by label; a label marker (isLabel) takes no space.
type irIns struct {
	op      uint16
	k       uint32
	jt, jf  int
	isLabel bool
	label   int
}

type codegen struct {
	code    []irIns
	labels  int
	scratch int
}

func (g *codegen) newLabel() int { g.labels++; return g.labels - 1 }

func (g *codegen) mark(l int) { g.code = append(g.code, irIns{isLabel: true, label: l}) }

func (g *codegen) emit(op uint16, k uint32) { g.code = append(g.code, irIns{op: op, k: k}) }

func (g *codegen) jump(op uint16, k uint32, t, f int) {
	g.code = append(g.code, irIns{op: op, k: k, jt: t, jf: f})
}

// boolean emits code that jumps to t when e holds and to f when not.
func (g *codegen) boolean(e bexpr, t, f int) error {
	switch e := e.(type) {
	case andB:
		m := g.newLabel()
		if err := g.boolean(e.l, m, f); err != nil {
			return err
		}
		g.mark(m)
		return g.boolean(e.r, t, f)
	case orB:
		m := g.newLabel()
		if err := g.boolean(e.l, t, m); err != nil {
			return err
		}
		g.mark(m)
		return g.boolean(e.r, t, f)
	case notB:
		return g.boolean(e.x, f, t)
	case cmpB:
		return g.compare(e, t, f)
	}
	return fmt.Errorf("pcapfilter: unknown boolean node %T", e)
}

var jmpOps = [...]uint16{relEQ: jmpJEQ, relGT: jmpJGT, relGE: jmpJGE, relSet: jmpJSET}

func (g *codegen) compare(c cmpB, t, f int) error {
	// (x & m) == 0 is a jset with the targets swapped.
	if k, ok := c.rhs.(constA); ok && k == 0 && c.op == relEQ {
		if b, ok := c.lhs.(binA); ok && b.op == bpf.ALUOpAnd {
			if m, ok := b.r.(constA); ok {
				if err := g.arith(b.l); err != nil {
					return err
				}
				g.jump(clsJMP|jmpJSET|srcK, uint32(m), f, t)
				return nil
			}
		}
	}
	if k, ok := c.rhs.(constA); ok {
		if err := g.arith(c.lhs); err != nil {
			return err
		}
		g.jump(clsJMP|jmpOps[c.op]|srcK, uint32(k), t, f)
		return nil
	}
	if err := g.operands(c.lhs, c.rhs); err != nil {
		return err
	}
	g.jump(clsJMP|jmpOps[c.op]|srcX, 0, t, f)
	return nil
}

// operands leaves l in A and r in X. When computing l needs X, one of
// them waits in scratch memory while the other is computed: the one
// that needs fewer slots itself, so a long chain ("a + b + c + ...")
// needs one slot, not one per term.
func (g *codegen) operands(l, r aexpr) error {
	if !usesX(l) {
		if err := g.arith(r); err != nil {
			return err
		}
		g.emit(clsMISC|miscTAX, 0)
		return g.arith(l)
	}
	if g.scratch == scratchSlots {
		return &Error{Kind: kindInvalid, Msg: "arithmetic too deeply nested (more than 16 intermediate values)"}
	}
	slot := uint32(g.scratch)
	if slots(l) >= slots(r) {
		if err := g.arith(l); err != nil {
			return err
		}
		g.emit(clsST, slot)
		g.scratch++
		err := g.arith(r)
		g.scratch--
		if err != nil {
			return err
		}
		g.emit(clsMISC|miscTAX, 0)
		g.emit(clsLD|modeMEM, slot)
		return nil
	}
	if err := g.arith(r); err != nil {
		return err
	}
	g.emit(clsST, slot)
	g.scratch++
	err := g.arith(l)
	g.scratch--
	if err != nil {
		return err
	}
	g.emit(clsLDX|modeMEM, slot)
	return nil
}

// slots is how many scratch words computing a needs.
func slots(a aexpr) int {
	switch a := a.(type) {
	case loadA:
		if a.idx != nil {
			return slots(a.idx)
		}
	case negA:
		return slots(a.x)
	case binA:
		if _, ok := a.r.(constA); ok {
			return slots(a.l)
		}
		if !usesX(a.l) {
			return max(slots(a.l), slots(a.r))
		}
		sl, sr := slots(a.l), slots(a.r)
		return min(max(sl, sr+1), max(sr, sl+1))
	}
	return 0
}

func usesX(a aexpr) bool {
	switch a := a.(type) {
	case loadA:
		return a.msh || a.idx != nil
	case binA:
		_, rConst := a.r.(constA)
		return !rConst || usesX(a.l)
	case negA:
		return usesX(a.x)
	}
	return false
}

var sizeBits = [...]uint16{1: szB, 2: szH, 4: szW}

var aluOps = map[bpf.ALUOp]uint16{
	bpf.ALUOpAdd: aluADD, bpf.ALUOpSub: aluSUB, bpf.ALUOpMul: aluMUL, bpf.ALUOpDiv: aluDIV,
	bpf.ALUOpOr: aluOR, bpf.ALUOpAnd: aluAND, bpf.ALUOpShiftLeft: aluLSH,
	bpf.ALUOpShiftRight: aluRSH, bpf.ALUOpMod: aluMOD, bpf.ALUOpXor: aluXOR,
}

// arith emits code that leaves a in A.
func (g *codegen) arith(a aexpr) error {
	switch a := a.(type) {
	case constA:
		g.emit(clsLD|modeIMM, uint32(a))
	case lenA:
		g.emit(clsLD|szW|modeLEN, 0)
	case loadA:
		sz := sizeBits[a.size]
		switch {
		case a.idx != nil:
			if err := g.arith(a.idx); err != nil {
				return err
			}
			if a.msh {
				g.emit(clsLDX|szB|modeMSH, a.mshOff)
				g.emit(clsALU|aluADD|srcX, 0)
			}
			g.emit(clsMISC|miscTAX, 0)
			g.emit(clsLD|sz|modeIND, a.off)
		case a.msh:
			g.emit(clsLDX|szB|modeMSH, a.mshOff)
			g.emit(clsLD|sz|modeIND, a.off)
		default:
			g.emit(clsLD|sz|modeABS, a.off)
		}
	case negA:
		if err := g.arith(a.x); err != nil {
			return err
		}
		g.emit(clsALU|aluNEG, 0)
	case binA:
		if k, ok := a.r.(constA); ok {
			if err := g.arith(a.l); err != nil {
				return err
			}
			g.emit(clsALU|aluOps[a.op]|srcK, uint32(k))
			return nil
		}
		if err := g.operands(a.l, a.r); err != nil {
			return err
		}
		g.emit(clsALU|aluOps[a.op]|srcX, 0)
	default:
		return fmt.Errorf("pcapfilter: unknown arithmetic node %T", a)
	}
	return nil
}

// generate compiles e (nil: everything) into labelled code that returns
// snaplen for a match and 0 otherwise.
func generate(e bexpr, snaplen uint32) ([]irIns, error) {
	g := &codegen{}
	if e == nil {
		g.emit(clsRET|retK, snaplen)
		return g.code, nil
	}
	t, f := g.newLabel(), g.newLabel()
	if err := g.boolean(e, t, f); err != nil {
		return nil, err
	}
	g.mark(t)
	g.emit(clsRET|retK, snaplen)
	g.mark(f)
	g.emit(clsRET|retK, 0)
	return g.code, nil
}

// assemble lays out labelled code. A conditional jump reaches at most 255
// instructions ahead; a farther target gets a "ja" trampoline right after
// the jump (which never falls through), repeated until every jump fits.
func assemble(code []irIns) ([]bpf.RawInstruction, error) {
	next := 0
	for _, in := range code {
		if in.isLabel && in.label >= next {
			next = in.label + 1
		}
		if !in.isLabel && in.op&0x07 == clsJMP && max(in.jt, in.jf) >= next {
			next = max(in.jt, in.jf) + 1
		}
	}
	for {
		pos := make(map[int]int)
		n := 0
		for _, in := range code {
			if in.isLabel {
				pos[in.label] = n
			} else {
				n++
			}
		}
		if n > MaxInstructions {
			return nil, &Error{Kind: kindInvalid, Msg: fmt.Sprintf("program too long (%d instructions, the limit is %d)", n, MaxInstructions)}
		}
		var out []irIns
		changed := false
		i := 0
		for _, in := range code {
			if in.isLabel {
				out = append(out, in)
				continue
			}
			i++
			if in.op&0x07 != clsJMP || in.op&0xf0 == jmpJA {
				out = append(out, in)
				continue
			}
			farT := pos[in.jt]-i > 255
			farF := pos[in.jf]-i > 255
			if !farT && !farF {
				out = append(out, in)
				continue
			}
			changed = true
			var tramp []irIns
			if farT {
				l := next
				next++
				tramp = append(tramp, irIns{isLabel: true, label: l}, irIns{op: clsJMP | jmpJA, jt: in.jt})
				in.jt = l
			}
			if farF {
				l := next
				next++
				tramp = append(tramp, irIns{isLabel: true, label: l}, irIns{op: clsJMP | jmpJA, jt: in.jf})
				in.jf = l
			}
			out = append(out, in)
			out = append(out, tramp...)
		}
		code = out
		if !changed {
			break
		}
	}
	pos := make(map[int]int)
	n := 0
	for _, in := range code {
		if in.isLabel {
			pos[in.label] = n
		} else {
			n++
		}
	}
	raw := make([]bpf.RawInstruction, 0, n)
	for _, in := range code {
		if in.isLabel {
			continue
		}
		r := bpf.RawInstruction{Op: in.op, K: in.k}
		here := len(raw) + 1
		if in.op&0x07 == clsJMP {
			dt := pos[in.jt] - here
			if dt < 0 {
				return nil, fmt.Errorf("pcapfilter: backward jump in generated code")
			}
			if in.op&0xf0 == jmpJA {
				r.K = uint32(dt)
			} else {
				df := pos[in.jf] - here
				if df < 0 {
					return nil, fmt.Errorf("pcapfilter: backward jump in generated code")
				}
				r.Jt, r.Jf = uint8(dt), uint8(df)
			}
		}
		raw = append(raw, r)
	}
	return raw, nil
}
