package tap

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/vmbusd/vmbusd/frame"
	"github.com/vmbusd/vmbusd/frame/csum"
)

// written is one write gro produced, reassembled as the kernel sees it.
type written struct {
	hdr   vnetHdr
	frame []byte
	n     int // frames it holds
}

// runGRO coalesces pkts and returns the writes.
func runGRO(pkts []*frame.Packet) []written {
	var g gro
	var out []written
	g.burst(pkts, func(w *groWrite) {
		var f []byte
		f = append(f, pkts[w.members[0]].Data()...)
		for _, i := range w.members[1:] {
			f = append(f, pkts[i].Data()[w.payload:]...)
		}
		out = append(out, written{hdr: w.hdr, frame: f, n: len(w.members)})
	})
	return out
}

// complete finishes a NEEDS_CSUM write's checksum as the kernel would,
// so the result can be checked as an ordinary frame.
func complete(w written) []byte {
	f := bytes.Clone(w.frame)
	if w.hdr.flags&vnetNeedsCsum != 0 {
		at := int(w.hdr.csumStart + w.hdr.csumOff)
		binary.BigEndian.PutUint16(f[at:], ^csum.Fold(csum.Add(0, f[w.hdr.csumStart:])))
	}
	return f
}

// stream returns n in-order segments of one flow, each mss bytes.
func stream(v6 bool, seq uint32, n, mss int, opts []byte) [][]byte {
	var out [][]byte
	for i := range n {
		out = append(out, buildTCP(tcpSpec{v6: v6, sport: 40000, seq: seq + uint32(i*mss), ack: 9, flags: 0x10,
			opts: opts, payload: mss, fill: byte(i)}))
	}
	return out
}

func TestGROCoalescesInOrderSegments(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		pool := testPool(t, 64, 2048)
		segs := stream(v6, 1000, 10, 1448, tsOp)
		segs[9] = buildTCP(tcpSpec{v6: v6, sport: 40000, seq: 1000 + 9*1448, ack: 9, flags: 0x18, opts: tsOp, payload: 1448, fill: 9})
		l4 := 34 + boolInt(v6)*20
		w := runGRO(received(t, pool, segs...))
		if len(w) != 1 || w[0].n != 10 {
			t.Fatalf("v6 %v: %d writes (%+v)", v6, len(w), w)
		}
		h := w[0].hdr
		wantType := uint8(vnetGSOTCPv4)
		if v6 {
			wantType = vnetGSOTCPv6
		}
		if h.flags != vnetNeedsCsum || h.gsoType != wantType || h.gsoSize != 1448 || int(h.csumStart) != l4 || h.csumOff != 16 || int(h.hdrLen) != l4+32 {
			t.Errorf("v6 %v: header %+v", v6, h)
		}
		f := complete(w[0])
		if !tcpValid(f, v6) {
			t.Errorf("v6 %v: super-frame checksums invalid", v6)
		}
		if f[l4+13] != 0x18 {
			t.Errorf("v6 %v: flags %#x, want ACK|PSH", v6, f[l4+13])
		}
		var want []byte
		for _, s := range segs {
			want = append(want, s[l4+32:]...)
		}
		if !bytes.Equal(f[l4+32:], want) || binary.BigEndian.Uint32(f[l4+4:]) != 1000 {
			t.Errorf("v6 %v: payload or sequence number wrong", v6)
		}
		if v6 && int(binary.BigEndian.Uint16(f[18:])) != len(f)-54 || !v6 && int(binary.BigEndian.Uint16(f[16:])) != len(f)-14 {
			t.Errorf("v6 %v: IP length not the super-frame's", v6)
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestGRORules(t *testing.T) {
	seg := func(seq uint32, flags uint8, payload int, mod func(s *tcpSpec)) []byte {
		s := tcpSpec{sport: 40000, seq: seq, ack: 9, flags: flags, opts: tsOp, payload: payload}
		if mod != nil {
			mod(&s)
		}
		return buildTCP(s)
	}
	const ack, psh = 0x10, 0x18
	cases := []struct {
		name   string
		frames [][]byte
		want   []int // frames per write, in write order
	}{
		{"gap", [][]byte{seg(0, ack, 100, nil), seg(100, ack, 100, nil), seg(300, ack, 100, nil)}, []int{2, 1}},
		{"out of order", [][]byte{seg(100, ack, 100, nil), seg(0, ack, 100, nil)}, []int{1, 1}},
		{"PSH ends a run", [][]byte{seg(0, psh, 100, nil), seg(100, ack, 100, nil), seg(200, ack, 100, nil)}, []int{1, 2}},
		{"short segment ends a run", [][]byte{seg(0, ack, 100, nil), seg(100, ack, 50, nil), seg(150, ack, 100, nil)}, []int{2, 1}},
		{"larger segment cannot follow", [][]byte{seg(0, ack, 100, nil), seg(100, ack, 200, nil)}, []int{1, 1}},
		{"FIN not coalesced", [][]byte{seg(0, ack, 100, nil), seg(100, ack|0x01, 100, nil)}, []int{1, 1}},
		{"pure ACK flushes its flow first", [][]byte{seg(0, ack, 100, nil), seg(100, ack, 100, nil), seg(200, ack, 0, nil), seg(200, ack, 100, nil)}, []int{2, 1, 1}},
		{"different ack", [][]byte{seg(0, ack, 100, nil), seg(100, ack, 100, func(s *tcpSpec) { s.ack = 10 })}, []int{1, 1}},
		{"different options", [][]byte{seg(0, ack, 100, nil), seg(100, ack, 100, func(s *tcpSpec) { s.opts = []byte{1, 1, 8, 10, 0, 0, 0, 9, 0, 0, 0, 2} })}, []int{1, 1}},
		{"two flows interleaved", [][]byte{seg(0, ack, 100, nil), seg(5000, ack, 100, func(s *tcpSpec) { s.sport = 40001 }),
			seg(100, ack, 100, nil), seg(5100, ack, 100, func(s *tcpSpec) { s.sport = 40001 })}, []int{2, 2}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pool := testPool(t, 64, 2048)
			w := runGRO(received(t, pool, c.frames...))
			var got []int
			for _, x := range w {
				got = append(got, x.n)
				if !tcpValid(complete(x), false) {
					t.Errorf("write of %d frames: checksums invalid", x.n)
				}
			}
			if len(got) != len(c.want) {
				t.Fatalf("writes %v, want %v", got, c.want)
			}
			for i := range got {
				if got[i] != c.want[i] {
					t.Fatalf("writes %v, want %v", got, c.want)
				}
			}
		})
	}
}

// TestGROKeepsFlowOrder: the frames of each flow reach the kernel in the
// order they arrived, whatever is coalesced.
func TestGROKeepsFlowOrder(t *testing.T) {
	pool := testPool(t, 64, 2048)
	var frames [][]byte
	seqs := map[uint16]uint32{}
	for i := range 40 {
		sport := uint16(40000 + i%3)
		payload := 100
		if i%7 == 6 {
			payload = 0 // a pure ACK now and then
		}
		frames = append(frames, buildTCP(tcpSpec{sport: sport, seq: seqs[sport], ack: 9, flags: 0x10, payload: payload}))
		seqs[sport] += uint32(payload)
	}
	next := map[uint16]uint32{}
	for _, w := range runGRO(received(t, pool, frames...)) {
		sport := binary.BigEndian.Uint16(w.frame[34:])
		seq := binary.BigEndian.Uint32(w.frame[38:])
		if seq != next[sport] {
			t.Fatalf("flow %d: write starts at %d, want %d", sport, seq, next[sport])
		}
		next[sport] = seq + uint32(len(w.frame)-54)
	}
	for sport, seq := range seqs {
		if next[sport] != seq {
			t.Errorf("flow %d: %d bytes written, want %d", sport, next[sport], seq)
		}
	}
}

func TestGROLimits(t *testing.T) {
	pool := testPool(t, 128, 2048)
	// 64 KiB: 50 segments of 1448 would exceed it.
	w := runGRO(received(t, pool, stream(false, 0, 50, 1448, tsOp)...))
	for _, x := range w {
		if len(x.frame)-14 > 0xffff {
			t.Fatalf("super-frame of %d IP bytes", len(x.frame)-14)
		}
	}
	if len(w) != 2 || w[0].n != 45 {
		t.Fatalf("%d writes, first of %d frames; want 45 + 5", len(w), w[0].n)
	}
	// groMaxSegs: tiny segments stop at the iovec limit.
	pool = testPool(t, 128, 2048)
	w = runGRO(received(t, pool, stream(false, 0, 100, 10, nil)...))
	if len(w) != 2 || w[0].n != groMaxSegs {
		t.Fatalf("%d writes, first of %d frames; want %d + rest", len(w), w[0].n, groMaxSegs)
	}
}

func TestGROLeavesUnverifiedFramesAlone(t *testing.T) {
	pool := testPool(t, 64, 2048)
	segs := stream(false, 0, 4, 500, nil)
	pkts := received(t, pool, segs...)
	pkts[1].Meta.Flags &^= frame.MetaRxL4ChecksumOK // the host did not verify it
	corrupt := bytes.Clone(pkts[1].Data())
	w := runGRO(pkts)
	if len(w) != 3 || w[0].n != 1 || w[1].n != 1 || w[2].n != 2 {
		t.Fatalf("writes %+v", w)
	}
	if w[1].hdr != (vnetHdr{}) || !bytes.Equal(w[1].frame, corrupt) {
		t.Errorf("unverified frame changed or marked: %+v", w[1].hdr)
	}
	// A single verified frame goes on as NEEDS_CSUM with a valid result.
	if w[0].hdr.flags != vnetNeedsCsum || !tcpValid(complete(w[0]), false) {
		t.Errorf("verified single frame: header %+v", w[0].hdr)
	}
}

func TestGROAllocatesNothing(t *testing.T) {
	pool := testPool(t, 64, 2048)
	frames := stream(false, 0, 40, 1448, tsOp)
	pkts := received(t, pool, frames...)
	var g gro
	n := 0
	write := func(w *groWrite) { n += len(w.members) }
	if a := testing.AllocsPerRun(100, func() {
		for i, p := range pkts {
			copy(p.SetLen(len(frames[i])), frames[i]) // undo the header fix-ups
		}
		g.burst(pkts, write)
	}); a != 0 {
		t.Fatalf("%v allocations per burst", a)
	}
}

func BenchmarkGRO(b *testing.B) {
	pool := testPool(b, 64, 2048)
	frames := stream(false, 0, 64, 1448, tsOp)
	pkts := received(b, pool, frames...)
	var g gro
	write := func(w *groWrite) {}
	b.ReportAllocs()
	b.SetBytes(int64(64 * 1448))
	for b.Loop() {
		for i, p := range pkts {
			copy(p.SetLen(len(frames[i])), frames[i])
		}
		g.burst(pkts, write)
	}
}

// TestGROWritesCoalescedFramesAsSuperFrames: a frame the NIC already
// coalesced (Meta.MSS with the checksum verified) goes to the kernel as
// one GSO super-frame with that MSS, after the segments of its flow
// before it; one that does not qualify (no more than one MSS of payload,
// an unverified IPv4 header) goes as an ordinary frame.
func TestGROWritesCoalescedFramesAsSuperFrames(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		pool := testPool(t, 8, 70000)
		l4 := 34 + boolInt(v6)*20
		before := buildTCP(tcpSpec{v6: v6, sport: 40000, seq: 1000, ack: 9, flags: 0x10, opts: tsOp, payload: 1448})
		big := buildTCP(tcpSpec{v6: v6, sport: 40000, seq: 2448, ack: 9, flags: 0x98, opts: tsOp, payload: 40000, fill: 3})
		small := buildTCP(tcpSpec{v6: v6, sport: 40001, seq: 5, ack: 9, flags: 0x10, opts: tsOp, payload: 1000})
		pkts := received(t, pool, before, big, small)
		for _, p := range pkts[1:] {
			p.Meta.MSS = 1448
		}
		w := runGRO(pkts)
		if len(w) != 3 || !bytes.Equal(complete(w[0]), before) {
			t.Fatalf("v6 %v: %d writes, or the flow's earlier segment not first", v6, len(w))
		}
		h := w[1].hdr
		wantType := uint8(vnetGSOTCPv4 | vnetGSOECN) // CWR set
		if v6 {
			wantType = vnetGSOTCPv6 | vnetGSOECN
		}
		if h.flags != vnetNeedsCsum || h.gsoType != wantType || h.gsoSize != 1448 || int(h.csumStart) != l4 || h.csumOff != 16 || int(h.hdrLen) != l4+32 {
			t.Fatalf("v6 %v: header %+v", v6, h)
		}
		if f := complete(w[1]); !tcpValid(f, v6) || !bytes.Equal(f, big) {
			t.Fatalf("v6 %v: super-frame changed or its checksum invalid", v6)
		}
		if w[2].hdr.gsoType != vnetGSONone || !bytes.Equal(complete(w[2]), small) {
			t.Fatalf("v6 %v: a coalesced frame of one MSS went as %+v", v6, w[2].hdr)
		}
		frame.PutBurst(pkts)
	}
	// An IPv4 header the NIC did not verify is not vouched for.
	pool := testPool(t, 2, 70000)
	pkts := received(t, pool, buildTCP(tcpSpec{sport: 1, seq: 1, ack: 9, flags: 0x10, payload: 5000}))
	pkts[0].Meta.MSS, pkts[0].Meta.Flags = 1460, frame.MetaRxL4ChecksumOK
	if w := runGRO(pkts); len(w) != 1 || w[0].hdr.gsoType != vnetGSONone {
		t.Fatalf("unverified IPv4 header: %+v", w)
	}
	frame.PutBurst(pkts)
}
