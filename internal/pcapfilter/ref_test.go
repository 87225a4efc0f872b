package pcapfilter

import (
	"encoding/binary"

	"golang.org/x/net/bpf"
)

// refRun is a slow, plain reference interpreter for differential tests.
// aborted reports a load past the end or a division by zero.
func refRun(prog []bpf.RawInstruction, pkt []byte) (ret uint32, aborted bool) {
	ret, aborted, _ = refRunCount(prog, pkt)
	return ret, aborted
}

// refRunCount is refRun that also counts the instructions it executes.
func refRunCount(prog []bpf.RawInstruction, pkt []byte) (ret uint32, aborted bool, steps int) {
	var a, x uint32
	var mem [16]uint32
	load := func(off uint64, size uint64) (uint32, bool) {
		if off+size > uint64(len(pkt)) {
			return 0, false
		}
		switch size {
		case 1:
			return uint32(pkt[off]), true
		case 2:
			return uint32(binary.BigEndian.Uint16(pkt[off:])), true
		}
		return binary.BigEndian.Uint32(pkt[off:]), true
	}
	for pc := 0; pc < len(prog); pc++ {
		steps++
		in := prog[pc]
		cls, k := in.Op&7, in.K
		switch cls {
		case clsLD, clsLDX:
			var v uint32
			switch mode := in.Op & 0xe0; mode {
			case modeIMM:
				v = k
			case modeLEN:
				v = uint32(len(pkt))
			case modeMEM:
				v = mem[k]
			case modeABS, modeIND:
				off := uint64(k)
				if mode == modeIND {
					off += uint64(x)
				}
				var ok bool
				if v, ok = load(off, loadSize(in.Op)); !ok {
					return 0, true, steps
				}
			case modeMSH:
				b, ok := load(uint64(k), 1)
				if !ok {
					return 0, true, steps
				}
				v = (b & 0xf) * 4
			}
			if cls == clsLD {
				a = v
			} else {
				x = v
			}
		case clsST:
			mem[k] = a
		case clsSTX:
			mem[k] = x
		case clsALU:
			if in.Op&0xf0 == aluNEG {
				a = -a
				break
			}
			var ok bool
			if a, ok = alu(in.Op, a, x, k); !ok {
				return 0, true, steps
			}
		case clsJMP:
			if in.Op&0xf0 == jmpJA {
				pc += int(k)
				break
			}
			v := k
			if in.Op&srcX != 0 {
				v = x
			}
			var cond bool
			switch in.Op & 0xf0 {
			case jmpJEQ:
				cond = a == v
			case jmpJGT:
				cond = a > v
			case jmpJGE:
				cond = a >= v
			case jmpJSET:
				cond = a&v != 0
			}
			if cond {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		case clsRET:
			if in.Op&0x18 == retA {
				return a, false, steps
			}
			return k, false, steps
		case clsMISC:
			if in.Op&0xf8 == miscTXA {
				a = x
			} else {
				x = a
			}
		}
	}
	return 0, true, steps
}
