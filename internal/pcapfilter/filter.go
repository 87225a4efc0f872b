package pcapfilter

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/net/bpf"
)

// LinkType is a pcap link-layer header type (LINKTYPE_*).
type LinkType uint16

// LinkEthernet is LINKTYPE_ETHERNET (DLT_EN10MB): frames start with a
// 14-byte Ethernet II header.
const LinkEthernet LinkType = 1

// DefaultSnaplen is what a matching frame's program returns when Compile
// is given a snaplen of 0 (tcpdump's default).
const DefaultSnaplen = 262144

// Compile compiles a pcap-filter expression into a classic BPF program
// for frames of the given link type. The program returns snaplen (0:
// DefaultSnaplen) for a frame that matches and 0 for one that does not;
// an empty expression matches every frame. Errors are *Error values.
func Compile(expr string, link LinkType, snaplen int) ([]bpf.Instruction, error) {
	raw, err := compileRaw(expr, link, snaplen)
	if err != nil {
		return nil, err
	}
	prog, ok := bpf.Disassemble(raw)
	if !ok {
		return nil, fmt.Errorf("pcapfilter: generated an instruction x/net/bpf cannot represent")
	}
	return prog, nil
}

func compileRaw(expr string, link LinkType, snaplen int) ([]bpf.RawInstruction, error) {
	return compileWith(expr, link, snaplen, true)
}

// compileWith compiles with or without the optimiser (the tests compare
// the two).
func compileWith(expr string, link LinkType, snaplen int, opt bool) ([]bpf.RawInstruction, error) {
	if link != LinkEthernet {
		return nil, &Error{Kind: kindInvalid, Msg: fmt.Sprintf("link type %d is not supported (only Ethernet, 1)", link)}
	}
	if snaplen < 0 {
		return nil, &Error{Kind: kindInvalid, Msg: fmt.Sprintf("snaplen %d is negative", snaplen)}
	}
	if snaplen == 0 {
		snaplen = DefaultSnaplen
	}
	e, err := parse(expr)
	if err != nil {
		return nil, err
	}
	code, err := generate(e, uint32(snaplen))
	if err != nil {
		return nil, err
	}
	if opt {
		if len(code) > 4*MaxInstructions {
			return nil, &Error{Kind: kindInvalid, Msg: fmt.Sprintf("program too long (over %d instructions before optimisation, the limit is %d)", 4*MaxInstructions, MaxInstructions)}
		}
		code = optimize(code)
	}
	raw, err := assemble(code)
	if err != nil {
		return nil, err
	}
	if e != nil && len(raw) == 1 && raw[0] == (bpf.RawInstruction{Op: clsRET | retK}) {
		// As tcpdump does: such a filter is almost certainly a mistake
		// ("tcp and vlan" looks for TCP at the ethertype).
		return nil, &Error{Kind: kindInvalid, Msg: "expression rejects all packets"}
	}
	return raw, nil
}

// Filter is a compiled filter ready to run on frames. It is immutable and
// safe for concurrent use.
type Filter struct {
	expr string
	raw  []bpf.RawInstruction
	prog []insn
}

// insn is a validated instruction in the interpreter's form.
type insn struct {
	op     uint16
	jt, jf uint8
	k      uint32
}

// New compiles expr (see Compile) into a Filter.
func New(expr string, link LinkType, snaplen int) (*Filter, error) {
	raw, err := compileRaw(expr, link, snaplen)
	if err != nil {
		return nil, err
	}
	f, err := FromProgram(raw)
	if err != nil {
		return nil, fmt.Errorf("pcapfilter: generated program rejected: %w", err)
	}
	f.expr = expr
	return f, nil
}

// FromProgram makes a Filter from an already compiled program, such as
// the output of "tcpdump -ddd". It checks what the kernel's classic BPF
// checker does: a length of 1 to MaxInstructions, known opcodes, jumps
// that stay inside the program, scratch slots below 16, no division by a
// constant zero, and a return as the last instruction.
func FromProgram(raw []bpf.RawInstruction) (*Filter, error) {
	if len(raw) == 0 || len(raw) > MaxInstructions {
		return nil, fmt.Errorf("pcapfilter: program has %d instructions, want 1 to %d", len(raw), MaxInstructions)
	}
	prog := make([]insn, len(raw))
	for pc, r := range raw {
		if err := validate(r, pc, len(raw)); err != nil {
			return nil, err
		}
		prog[pc] = insn{op: r.Op, jt: r.Jt, jf: r.Jf, k: r.K}
	}
	if raw[len(raw)-1].Op&0x07 != clsRET {
		return nil, fmt.Errorf("pcapfilter: program does not end with a return")
	}
	return &Filter{raw: append([]bpf.RawInstruction(nil), raw...), prog: prog}, nil
}

func validate(r bpf.RawInstruction, pc, n int) error {
	bad := func(why string) error {
		return fmt.Errorf("pcapfilter: instruction %d (%#04x): %s", pc, r.Op, why)
	}
	switch r.Op {
	case clsLD | szW | modeABS, clsLD | szH | modeABS, clsLD | szB | modeABS,
		clsLD | szW | modeIND, clsLD | szH | modeIND, clsLD | szB | modeIND,
		clsLD | modeIMM, clsLD | szW | modeLEN, clsLDX | szW | modeLEN,
		clsLDX | modeIMM, clsLDX | szB | modeMSH,
		clsALU | aluNEG, clsRET | retK, clsRET | retA,
		clsMISC | miscTAX, clsMISC | miscTXA:
		return nil
	case clsLD | modeMEM, clsLDX | modeMEM, clsST, clsSTX:
		if r.K >= scratchSlots {
			return bad("scratch slot out of range")
		}
		return nil
	case clsJMP | jmpJA:
		if uint64(pc)+1+uint64(r.K) >= uint64(n) {
			return bad("jump past the end")
		}
		return nil
	}
	switch r.Op & 0x07 {
	case clsALU:
		if r.Op&^(0xf0|srcX) != clsALU || r.Op&0xf0 > aluXOR {
			return bad("unknown ALU operation")
		}
		if (r.Op&0xf0 == aluDIV || r.Op&0xf0 == aluMOD) && r.Op&srcX == srcK && r.K == 0 {
			return bad("division by zero")
		}
		return nil
	case clsJMP:
		if r.Op&^(0xf0|srcX) != clsJMP || r.Op&0xf0 > jmpJSET || r.Op&0xf0 == jmpJA {
			return bad("unknown jump")
		}
		if pc+1+int(max(r.Jt, r.Jf)) >= n {
			return bad("jump past the end")
		}
		return nil
	}
	return bad("unknown opcode")
}

// String returns the expression the Filter was compiled from ("" for one
// made by FromProgram).
func (f *Filter) String() string { return f.expr }

// Program returns a copy of the compiled program.
func (f *Filter) Program() []bpf.RawInstruction {
	return append([]bpf.RawInstruction(nil), f.raw...)
}

// Match tells whether the frame passes the filter. The frame is the whole
// frame, so "len" is len(frame). A nil *Filter matches every frame, so a
// capture without a filter needs no special case.
func (f *Filter) Match(frame []byte) bool { return f == nil || f.Run(frame) != 0 }

// Run executes the program on frame and returns what it returns: 0 to
// drop, otherwise the number of bytes to capture. A load past the end of
// the frame or a division by zero returns 0, as in the kernel.
func (f *Filter) Run(frame []byte) uint32 {
	var a, x uint32
	var mem [scratchSlots]uint32
	n := uint64(len(frame))
	prog := f.prog
	for pc := 0; pc < len(prog); pc++ {
		in := &prog[pc]
		switch in.op {
		case clsLD | szW | modeABS:
			k := uint64(in.k)
			if k+4 > n {
				return 0
			}
			a = binary.BigEndian.Uint32(frame[k:])
		case clsLD | szH | modeABS:
			k := uint64(in.k)
			if k+2 > n {
				return 0
			}
			a = uint32(binary.BigEndian.Uint16(frame[k:]))
		case clsLD | szB | modeABS:
			k := uint64(in.k)
			if k >= n {
				return 0
			}
			a = uint32(frame[k])
		case clsLD | szW | modeIND:
			k := uint64(in.k) + uint64(x)
			if k+4 > n {
				return 0
			}
			a = binary.BigEndian.Uint32(frame[k:])
		case clsLD | szH | modeIND:
			k := uint64(in.k) + uint64(x)
			if k+2 > n {
				return 0
			}
			a = uint32(binary.BigEndian.Uint16(frame[k:]))
		case clsLD | szB | modeIND:
			k := uint64(in.k) + uint64(x)
			if k >= n {
				return 0
			}
			a = uint32(frame[k])
		case clsLD | modeIMM:
			a = in.k
		case clsLD | szW | modeLEN:
			a = uint32(n)
		case clsLD | modeMEM:
			a = mem[in.k&(scratchSlots-1)]
		case clsLDX | modeIMM:
			x = in.k
		case clsLDX | szW | modeLEN:
			x = uint32(n)
		case clsLDX | modeMEM:
			x = mem[in.k&(scratchSlots-1)]
		case clsLDX | szB | modeMSH:
			k := uint64(in.k)
			if k >= n {
				return 0
			}
			x = uint32(frame[k]&0xf) << 2
		case clsST:
			mem[in.k&(scratchSlots-1)] = a
		case clsSTX:
			mem[in.k&(scratchSlots-1)] = x
		case clsJMP | jmpJA:
			pc += int(in.k)
		case clsJMP | jmpJEQ | srcK:
			pc += branch(a == in.k, in)
		case clsJMP | jmpJGT | srcK:
			pc += branch(a > in.k, in)
		case clsJMP | jmpJGE | srcK:
			pc += branch(a >= in.k, in)
		case clsJMP | jmpJSET | srcK:
			pc += branch(a&in.k != 0, in)
		case clsJMP | jmpJEQ | srcX:
			pc += branch(a == x, in)
		case clsJMP | jmpJGT | srcX:
			pc += branch(a > x, in)
		case clsJMP | jmpJGE | srcX:
			pc += branch(a >= x, in)
		case clsJMP | jmpJSET | srcX:
			pc += branch(a&x != 0, in)
		case clsRET | retK:
			return in.k
		case clsRET | retA:
			return a
		case clsMISC | miscTAX:
			x = a
		case clsMISC | miscTXA:
			a = x
		case clsALU | aluNEG:
			a = -a
		default:
			var ok bool
			if a, ok = alu(in.op, a, x, in.k); !ok {
				return 0
			}
		}
	}
	return 0
}

func branch(cond bool, in *insn) int {
	if cond {
		return int(in.jt)
	}
	return int(in.jf)
}

// alu runs an arithmetic instruction; ok is false for a division by zero.
// Shifts of 32 or more give 0 (Go's rule, and x/net/bpf's).
func alu(op uint16, a, x, k uint32) (uint32, bool) {
	v := k
	if op&srcX != 0 {
		v = x
	}
	switch op & 0xf0 {
	case aluADD:
		return a + v, true
	case aluSUB:
		return a - v, true
	case aluMUL:
		return a * v, true
	case aluDIV:
		if v == 0 {
			return 0, false
		}
		return a / v, true
	case aluMOD:
		if v == 0 {
			return 0, false
		}
		return a % v, true
	case aluOR:
		return a | v, true
	case aluAND:
		return a & v, true
	case aluXOR:
		return a ^ v, true
	case aluLSH:
		return a << v, true
	case aluRSH:
		return a >> v, true
	}
	return 0, false
}
