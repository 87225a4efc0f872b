package pcapfilter

// The optimiser works on the labelled code as a graph of basic blocks
// whose jumps all go forward. It tracks, along every edge, what the
// registers hold (which load, possibly masked) and what the frame is
// known to contain (a load equals or differs from a constant, the frame
// is at least so long), and then:
//
//   - drops a load whose value every path already left in the register;
//   - threads an edge past a block whose outcome the edge already knows
//     ("udp and port 53" tests the ethertype and protocol once, not
//     three times), or whose two branches go to the same place;
//   - drops loads whose value nothing uses.
//
// libpcap's optimiser does the same kinds of things, and the last two
// change verdicts, not only speed: a skipped load cannot fail on a short
// frame, so "ip or not ip" accepts even an empty frame. Doing them here
// keeps the verdicts equal to tcpdump's.

type loadKey struct {
	op   uint16 // the load opcode (size and mode)
	off  uint32
	xoff uint32 // for an indirect load: the msh offset X was loaded from
}

// aval is what A holds: a load, possibly ANDed with a mask, or a
// constant (key.op is an immediate load, key.off the value).
type aval struct {
	ok     bool
	key    loadKey
	masked bool
	mask   uint32
}

// xval is what X holds: 4*(frame[off]&0xf).
type xval struct {
	ok  bool
	off uint32
}

// maxNe bounds the values a load is remembered to differ from, which
// keeps a long "host a or host b or ..." from costing quadratic time.
const maxNe = 16

type fact struct {
	eq bool
	v  uint32
	ne []uint32
}

type state struct {
	reached bool
	a       aval
	x       xval
	minLen  uint64 // the frame is at least this long
	ind     map[loadKey]bool
	facts   map[aval]fact
}

func (s state) clone() state {
	c := s
	c.ind = make(map[loadKey]bool, len(s.ind))
	for k := range s.ind {
		c.ind[k] = true
	}
	c.facts = make(map[aval]fact, len(s.facts))
	for k, v := range s.facts {
		v.ne = append([]uint32(nil), v.ne...)
		c.facts[k] = v
	}
	return c
}

// meet is what holds on both of two paths.
func meet(a, b state) state {
	if !a.reached {
		return b.clone()
	}
	if !b.reached {
		return a.clone()
	}
	m := state{reached: true, minLen: min(a.minLen, b.minLen), ind: map[loadKey]bool{}, facts: map[aval]fact{}}
	if a.a == b.a {
		m.a = a.a
	}
	if a.x == b.x {
		m.x = a.x
	}
	for k := range a.ind {
		if b.ind[k] {
			m.ind[k] = true
		}
	}
	for k, fa := range a.facts {
		fb, ok := b.facts[k]
		if !ok {
			continue
		}
		switch {
		case fa.eq && fb.eq:
			if fa.v == fb.v {
				m.facts[k] = fa
			}
		case fa.eq:
			m.facts[k] = fact{ne: without(fb.ne, fa.v)}
		case fb.eq:
			m.facts[k] = fact{ne: without(fa.ne, fb.v)}
		default:
			var ne []uint32
			for _, v := range fa.ne {
				if contains(fb.ne, v) {
					ne = append(ne, v)
				}
			}
			m.facts[k] = fact{ne: ne}
		}
	}
	return m
}

func contains(s []uint32, v uint32) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func without(s []uint32, v uint32) []uint32 {
	var out []uint32
	for _, x := range s {
		if x != v {
			out = append(out, x)
		}
	}
	return out
}

func loadSize(op uint16) uint64 {
	switch op & 0x18 {
	case szB:
		return 1
	case szH:
		return 2
	}
	return 4
}

// inBounds tells whether a load is known to succeed in state s.
func (s *state) inBounds(in irIns) bool {
	switch in.op & 0xe0 {
	case modeABS:
		return uint64(in.k)+loadSize(in.op) <= s.minLen
	case modeIND:
		return s.x.ok && s.ind[loadKey{op: in.op, off: in.k, xoff: s.x.off}]
	case modeMSH:
		return uint64(in.k)+1 <= s.minLen
	}
	return false
}

// step applies one instruction to s. It reports whether the instruction
// is redundant: a load of what the register already holds.
func (s *state) step(in irIns) (redundant bool) {
	switch {
	case in.op&0x07 == clsLD && (in.op&0xe0 == modeABS || in.op&0xe0 == modeIND):
		var key loadKey
		if in.op&0xe0 == modeABS {
			key = loadKey{op: in.op, off: in.k}
		} else {
			if !s.x.ok {
				s.a = aval{}
				return false
			}
			key = loadKey{op: in.op, off: in.k, xoff: s.x.off}
		}
		v := aval{ok: true, key: key}
		if s.a == v {
			return true
		}
		s.a = v
		if in.op&0xe0 == modeABS {
			s.minLen = max(s.minLen, uint64(in.k)+loadSize(in.op))
		} else {
			s.ind[key] = true
		}
	case in.op == clsLDX|szB|modeMSH:
		v := xval{ok: true, off: in.k}
		if s.x == v {
			return true
		}
		s.x = v
		s.minLen = max(s.minLen, uint64(in.k)+1)
	case in.op == clsLD|modeIMM:
		s.a = aval{ok: true, key: loadKey{op: in.op, off: in.k}}
	case in.op == clsALU|aluAND|srcK:
		if s.a.ok && !s.a.masked {
			s.a.masked, s.a.mask = true, in.k
		} else {
			s.a = aval{}
		}
	case in.op&0x07 == clsST || in.op&0x07 == clsSTX:
	case in.op == clsMISC|miscTAX, in.op&0x07 == clsLDX:
		s.x = xval{}
	default:
		s.a = aval{}
	}
	return false
}

// value returns A's value if the facts pin it down.
func (s *state) value() (uint32, bool) {
	if !s.a.ok {
		return 0, false
	}
	if s.a.key.op == clsLD|modeIMM {
		v := s.a.key.off
		if s.a.masked {
			v &= s.a.mask
		}
		return v, true
	}
	if f, ok := s.facts[s.a]; ok && f.eq {
		return f.v, true
	}
	if s.a.masked {
		base := aval{ok: true, key: s.a.key}
		if f, ok := s.facts[base]; ok && f.eq {
			return f.v & s.a.mask, true
		}
	}
	return 0, false
}

// decide returns the outcome of a conditional jump on K in state s.
func (s *state) decide(in irIns) (taken, known bool) {
	if in.op&srcX != 0 {
		return false, false
	}
	if v, ok := s.value(); ok {
		switch in.op & 0xf0 {
		case jmpJEQ:
			return v == in.k, true
		case jmpJGT:
			return v > in.k, true
		case jmpJGE:
			return v >= in.k, true
		case jmpJSET:
			return v&in.k != 0, true
		}
	}
	if in.op&0xf0 == jmpJEQ && s.a.ok && contains(s.facts[s.a].ne, in.k) {
		return false, true
	}
	return false, false
}

// learn records what taking (or not) a conditional jump on K tells.
func (s *state) learn(in irIns, taken bool) {
	if in.op&srcX != 0 || in.op&0xf0 != jmpJEQ || !s.a.ok {
		return
	}
	f := s.facts[s.a]
	if taken {
		s.facts[s.a] = fact{eq: true, v: in.k}
	} else if !f.eq && !contains(f.ne, in.k) && len(f.ne) < maxNe {
		s.facts[s.a] = fact{ne: append(append([]uint32(nil), f.ne...), in.k)}
	}
}

type term uint8

const (
	termFall term = iota
	termJA
	termCond
	termRet
)

type block struct {
	labels []int
	body   []irIns
	kind   term
	jump   irIns // the terminator for termCond, termJA, termRet
	t, f   int   // successor blocks (t for fall and ja)
}

// blocks splits labelled code into basic blocks.
func blocks(code []irIns) []*block {
	var bs []*block
	cur := &block{}
	closed := false
	start := func() {
		cur = &block{}
		bs = append(bs, cur)
		closed = false
	}
	bs = append(bs, cur)
	for _, in := range code {
		switch {
		case in.isLabel:
			if closed || len(cur.body) > 0 {
				start()
			}
			cur.labels = append(cur.labels, in.label)
		case closed:
			// Unreachable code after a jump or return.
		case in.op&0x07 == clsJMP:
			cur.jump = in
			cur.kind = termCond
			if in.op&0xf0 == jmpJA {
				cur.kind = termJA
			}
			closed = true
		case in.op&0x07 == clsRET:
			cur.jump, cur.kind = in, termRet
			closed = true
		default:
			cur.body = append(cur.body, in)
		}
	}
	at := map[int]int{}
	for i, b := range bs {
		for _, l := range b.labels {
			at[l] = i
		}
	}
	for i, b := range bs {
		switch b.kind {
		case termFall:
			b.t = i + 1
		case termJA:
			b.t = at[b.jump.jt]
		case termCond:
			b.t, b.f = at[b.jump.jt], at[b.jump.jf]
		}
	}
	return bs
}

func (b *block) toJA(t int) {
	b.kind, b.t, b.jump = termJA, t, irIns{op: clsJMP | jmpJA}
}

func (b *block) succs() []int {
	switch b.kind {
	case termFall, termJA:
		return []int{b.t}
	case termCond:
		return []int{b.t, b.f}
	}
	return nil
}

// uses reports how an instruction reads and writes A and X.
func regs(in irIns) (useA, useX, defA, defX bool) {
	switch in.op & 0x07 {
	case clsLD:
		return false, in.op&0xe0 == modeIND, true, false
	case clsLDX:
		return false, false, false, true
	case clsST:
		return true, false, false, false
	case clsSTX:
		return false, true, false, false
	case clsALU:
		return true, in.op&srcX != 0 && in.op&0xf0 != aluNEG, true, false
	case clsJMP:
		return in.op&0xf0 != jmpJA, in.op&srcX != 0 && in.op&0xf0 != jmpJA, false, false
	case clsRET:
		return in.op&0x18 == retA, false, false, false
	case clsMISC:
		if in.op&0xf8 == miscTXA {
			return false, true, true, false
		}
		return true, false, false, true
	}
	return true, true, true, true
}

// kills tells whether a block sets A (X) before any use of it, so a path
// into it need not carry a value there.
func (b *block) kills() (a, x bool) {
	doneA, doneX := false, false
	code := b.body[:len(b.body):len(b.body)]
	if b.kind != termFall {
		code = append(code, b.jump)
	}
	for _, in := range code {
		useA, useX, defA, defX := regs(in)
		if !doneA {
			if useA {
				doneA = true
			} else if defA {
				a, doneA = true, true
			}
		}
		if !doneX {
			if useX {
				doneX = true
			} else if defX {
				x, doneX = true, true
			}
		}
	}
	if b.kind == termRet {
		// A return of a constant reads neither.
		a, x = a || !doneA, x || !doneX
	}
	return a, x
}

// optimize rewrites labelled code; see the comment at the top of the file.
func optimize(code []irIns) []irIns {
	bs := blocks(code)
	for round := 0; round < 50; round++ {
		if !optimizeRound(bs) {
			break
		}
	}
	deadLoads(bs)
	return linearize(bs)
}

func optimizeRound(bs []*block) (changed bool) {
	n := len(bs)
	in := make([]state, n)
	reach := make([]bool, n)
	reach[0] = true
	in[0] = state{reached: true, ind: map[loadKey]bool{}, facts: map[aval]fact{}}
	// Edge states, indexed by source block: the state on b.t and b.f.
	outT := make([]state, n)
	outF := make([]state, n)
	for i, b := range bs {
		if !reach[i] {
			continue
		}
		s := in[i].clone()
		body := b.body[:0:0]
		for _, ins := range b.body {
			if s.step(ins) {
				changed = true
				continue
			}
			body = append(body, ins)
		}
		b.body = body
		switch b.kind {
		case termFall, termJA:
			outT[i] = s
		case termCond:
			if taken, ok := s.decide(b.jump); ok {
				if taken {
					b.toJA(b.t)
				} else {
					b.toJA(b.f)
				}
				changed = true
				outT[i] = s
				break
			}
			t, f := s.clone(), s.clone()
			t.learn(b.jump, true)
			f.learn(b.jump, false)
			outT[i], outF[i] = t, f
		}
		for k, succ := range b.succs() {
			out := outT[i]
			if k == 1 {
				out = outF[i]
			}
			in[succ] = meet(in[succ], out)
			reach[succ] = true
		}
	}
	for i, b := range bs {
		if !reach[i] {
			continue
		}
		if b.kind == termFall || b.kind == termJA {
			if t, ok := thread(bs, b.t, outT[i]); ok {
				b.toJA(t)
				changed = true
			}
		}
		if b.kind == termCond {
			if t, ok := thread(bs, b.t, outT[i]); ok {
				b.t, changed = t, true
			}
			if f, ok := thread(bs, b.f, outF[i]); ok {
				b.f, changed = f, true
			}
			if b.t == b.f {
				b.toJA(b.t)
				changed = true
			}
		}
	}
	return changed
}

// thread returns where an edge carrying state s into block i can go
// instead: past i, when i only loads and tests and s tells which way it
// goes (or both ways are the same), and the target does not need the
// registers i would have set.
func thread(bs []*block, i int, s state) (int, bool) {
	b := bs[i]
	if b.kind == termRet {
		return 0, false
	}
	st := s.clone()
	known := true
	for _, in := range b.body {
		pure := in.op&0x07 == clsLD && (in.op&0xe0 == modeABS || in.op&0xe0 == modeIND) ||
			in.op == clsLDX|szB|modeMSH || in.op == clsALU|aluAND|srcK
		if !pure {
			return 0, false
		}
		if in.op&0x07 != clsALU && !st.inBounds(in) {
			known = false
		}
		st.step(in)
	}
	var next int
	switch b.kind {
	case termFall, termJA:
		next = b.t
	case termCond:
		if b.t == b.f {
			next = b.t
			break
		}
		taken, ok := st.decide(b.jump)
		if !ok || !known {
			return 0, false
		}
		next = b.f
		if taken {
			next = b.t
		}
	}
	if next == i {
		return 0, false
	}
	killA, killX := bs[next].kills()
	if (st.a != s.a && !killA) || (st.x != s.x && !killX) {
		return 0, false
	}
	return next, true
}

// deadLoads removes loads and ALU steps whose result nothing reads.
func deadLoads(bs []*block) {
	n := len(bs)
	liveA := make([]bool, n)
	liveX := make([]bool, n)
	for i := n - 1; i >= 0; i-- {
		b := bs[i]
		a, x := false, false
		for _, s := range b.succs() {
			a = a || liveA[s]
			x = x || liveX[s]
		}
		useA, useX, _, _ := regs(b.jump)
		if b.kind == termFall {
			useA, useX = false, false
		}
		a, x = a || useA, x || useX
		var keep []irIns
		for j := len(b.body) - 1; j >= 0; j-- {
			in := b.body[j]
			uA, uX, dA, dX := regs(in)
			pure := in.op&0x07 == clsLD || in.op&0x07 == clsLDX || in.op&0x07 == clsALU || in.op&0x07 == clsMISC
			if pure && !(dA && a) && !(dX && x) {
				continue
			}
			if dA {
				a = false
			}
			if dX {
				x = false
			}
			a, x = a || uA, x || uX
			keep = append(keep, in)
		}
		for l, r := 0, len(keep)-1; l < r; l, r = l+1, r-1 {
			keep[l], keep[r] = keep[r], keep[l]
		}
		b.body = keep
		liveA[i], liveX[i] = a, x
	}
}

// linearize turns blocks back into labelled code, dropping unreachable
// ones and jumps to the next block.
func linearize(bs []*block) []irIns {
	reach := make([]bool, len(bs))
	reach[0] = true
	for i, b := range bs {
		if reach[i] {
			for _, s := range b.succs() {
				reach[s] = true
			}
		}
	}
	label := func(i int) int { return -1 - i }
	var code []irIns
	for i, b := range bs {
		if !reach[i] {
			continue
		}
		code = append(code, irIns{isLabel: true, label: label(i)})
		code = append(code, b.body...)
		switch b.kind {
		case termFall, termJA:
			code = append(code, irIns{op: clsJMP | jmpJA, jt: label(b.t)})
		case termCond:
			j := b.jump
			j.jt, j.jf = label(b.t), label(b.f)
			code = append(code, j)
		case termRet:
			code = append(code, b.jump)
		}
	}
	return dropJumpsToNext(code)
}

// dropJumpsToNext removes a "ja" to the instruction right after it.
func dropJumpsToNext(code []irIns) []irIns {
	var out []irIns
	for i, in := range code {
		if !in.isLabel && in.op == clsJMP|jmpJA {
			next := i + 1
			skip := false
			for ; next < len(code) && code[next].isLabel; next++ {
				if code[next].label == in.jt {
					skip = true
				}
			}
			if skip {
				continue
			}
		}
		out = append(out, in)
	}
	return out
}
