package gso

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/vmbusd/vmbusd/frame/csum"
)

// frame builds an Ethernet frame with an IPv4 or IPv6 header and a TCP
// (with opts) or UDP header followed by n payload bytes (a counting
// pattern). ipLen0 leaves the IP length 0, as Linux does for a large send.
func frame(v6 bool, proto uint8, opts []byte, n int, flags uint8, ipLen0 bool) []byte {
	var f []byte
	f = append(f, 0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2)
	thl := udpLen
	if proto == ProtoTCP {
		thl = tcpMinLen + len(opts)
	}
	if v6 {
		f = binary.BigEndian.AppendUint16(f, 0x86dd)
		h := make([]byte, ipv6Len)
		h[0] = 0x60
		if !ipLen0 {
			binary.BigEndian.PutUint16(h[4:], uint16(thl+n))
		}
		h[6], h[7] = proto, 64
		for i := 8; i < 40; i++ {
			h[i] = byte(i * 7)
		}
		f = append(f, h...)
	} else {
		f = binary.BigEndian.AppendUint16(f, 0x0800)
		h := make([]byte, ipv4MinLen)
		h[0] = 0x45
		if !ipLen0 {
			binary.BigEndian.PutUint16(h[2:], uint16(ipv4MinLen+thl+n))
		}
		binary.BigEndian.PutUint16(h[4:], 0xfff0) // id: wraps during the split
		h[6] = 0x40                               // DF
		h[8], h[9] = 64, proto
		copy(h[12:], []byte{10, 0, 0, 1, 10, 0, 0, 2})
		f = append(f, h...)
	}
	l4 := len(f)
	if proto == ProtoTCP {
		t := make([]byte, tcpMinLen)
		binary.BigEndian.PutUint16(t[0:], 40000)
		binary.BigEndian.PutUint16(t[2:], 5201)
		binary.BigEndian.PutUint32(t[4:], 0xfffff000) // seq: wraps too
		binary.BigEndian.PutUint32(t[8:], 77)
		t[12] = byte(thl/4) << 4
		t[13] = flags
		binary.BigEndian.PutUint16(t[14:], 512)
		f = append(f, t...)
		f = append(f, opts...)
	} else {
		t := make([]byte, udpLen)
		binary.BigEndian.PutUint16(t[0:], 4000)
		binary.BigEndian.PutUint16(t[2:], 4433)
		binary.BigEndian.PutUint16(t[4:], uint16(udpLen+n))
		f = append(f, t...)
	}
	for i := range n {
		f = append(f, byte(i*31+i>>8))
	}
	_ = l4
	return f
}

// verify checks a piece's IP and transport checksums independently of the
// package (RFC 1071 over the pseudo-header and the segment).
func verify(t *testing.T, p []byte, v6 bool, proto uint8) {
	t.Helper()
	l3 := EthHeaderLen
	var l4 int
	var sum uint32
	if v6 {
		l4 = l3 + ipv6Len
		if got := int(binary.BigEndian.Uint16(p[l3+4:])); got != len(p)-l4 {
			t.Fatalf("IPv6 payload length %d, want %d", got, len(p)-l4)
		}
		sum = csum.Add(0, p[l3+8:l3+40])
		n := len(p) - l4
		sum += uint32(n>>16) + uint32(n&0xffff)
	} else {
		l4 = l3 + int(p[l3]&0xf)*4
		if got := int(binary.BigEndian.Uint16(p[l3+2:])); got != len(p)-l3 {
			t.Fatalf("IPv4 total length %d, want %d", got, len(p)-l3)
		}
		if c := csum.Checksum(0, p[l3:l4]); c != 0 {
			t.Fatalf("IPv4 header checksum off by %#x", c)
		}
		sum = csum.Add(0, p[l3+12:l3+20]) + uint32(len(p)-l4)
	}
	sum += uint32(proto)
	if c := csum.Checksum(sum, p[l4:]); c != 0 {
		t.Fatalf("transport checksum off by %#x", c)
	}
}

func TestParse(t *testing.T) {
	tcpOpts := []byte{1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2} // NOP NOP timestamps
	cases := []struct {
		name    string
		f       []byte
		want    Layout
		wantErr error
	}{
		{"tcp4", frame(false, ProtoTCP, nil, 100, FlagACK, false), Layout{L3: 14, L4: 34, Payload: 54, End: 154, Proto: ProtoTCP}, nil},
		{"tcp4 options", frame(false, ProtoTCP, tcpOpts, 100, FlagACK, false), Layout{L3: 14, L4: 34, Payload: 66, End: 166, Proto: ProtoTCP}, nil},
		{"tcp4 length 0", frame(false, ProtoTCP, nil, 100, FlagACK, true), Layout{L3: 14, L4: 34, Payload: 54, End: 154, Proto: ProtoTCP}, nil},
		{"tcp6", frame(true, ProtoTCP, tcpOpts, 100, FlagACK, false), Layout{L3: 14, L4: 54, Payload: 86, End: 186, V6: true, Proto: ProtoTCP}, nil},
		{"udp6", frame(true, ProtoUDP, nil, 100, 0, false), Layout{L3: 14, L4: 54, Payload: 62, End: 162, V6: true, Proto: ProtoUDP}, nil},
		{"padded", append(frame(false, ProtoUDP, nil, 4, 0, false), 0, 0, 0, 0), Layout{L3: 14, L4: 34, Payload: 42, End: 46, Proto: ProtoUDP}, nil},
		{"arp", append([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 1, 0x08, 0x06}, make([]byte, 28)...), Layout{}, ErrNotIP},
		{"short", frame(false, ProtoTCP, nil, 0, 0, false)[:40], Layout{}, ErrIPLength},
	}
	frag := frame(false, ProtoUDP, nil, 8, 0, false)
	frag[14+6] = 0x20 // more fragments
	cases = append(cases, struct {
		name    string
		f       []byte
		want    Layout
		wantErr error
	}{"fragment", frag, Layout{}, ErrFragment})
	badTHL := frame(false, ProtoTCP, nil, 0, 0, false)
	badTHL[34+12] = 0xf0 // 60-byte header in a 20-byte segment
	cases = append(cases, struct {
		name    string
		f       []byte
		want    Layout
		wantErr error
	}{"tcp header beyond", badTHL, Layout{}, ErrTransport})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Parse(c.f)
			if !errors.Is(err, c.wantErr) {
				t.Fatalf("err %v, want %v", err, c.wantErr)
			}
			if err == nil && got != c.want {
				t.Fatalf("layout %+v, want %+v", got, c.want)
			}
		})
	}
}

// split runs Split into fresh buffers and returns the pieces.
func split(t *testing.T, f []byte, mss, per int, mode Checksum) [][]byte {
	t.Helper()
	l, err := Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	n, err := Split(f, l, mss, per, mode, func(n int) []byte {
		b := make([]byte, n)
		out = append(out, b)
		return b
	})
	if err != nil || n != len(out) {
		t.Fatalf("Split: %d pieces, %v", n, err)
	}
	return out
}

func TestSplitTCP(t *testing.T) {
	tsOpts := []byte{1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2}
	for _, c := range []struct {
		name      string
		v6        bool
		opts      []byte
		n, mss    int
		flags     uint8
		wantSegs  int
		ipLength0 bool
	}{
		{"v4 exact", false, nil, 4 * 1460, 1460, FlagACK | FlagPSH, 4, false},
		{"v4 short last", false, tsOpts, 64000, 1448, FlagACK | FlagPSH | FlagFIN | FlagCWR, 45, false},
		{"v4 length 0", false, tsOpts, 3000, 1448, FlagACK, 3, true},
		{"v6 options", true, tsOpts, 10000, 1428, FlagACK | FlagPSH | FlagCWR, 8, false},
		{"one segment", false, nil, 100, 1460, FlagACK | FlagPSH, 1, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := frame(c.v6, ProtoTCP, c.opts, c.n, c.flags, c.ipLength0)
			l, _ := Parse(f)
			segs := split(t, f, c.mss, 1, Full)
			if len(segs) != c.wantSegs {
				t.Fatalf("%d segments, want %d", len(segs), c.wantSegs)
			}
			var payload []byte
			seq0 := binary.BigEndian.Uint32(f[l.L4+4:])
			for i, s := range segs {
				verify(t, s, c.v6, ProtoTCP)
				if !bytes.Equal(s[:l.L3], f[:l.L3]) {
					t.Errorf("segment %d: Ethernet header changed", i)
				}
				if len(s)-l.Payload > c.mss {
					t.Errorf("segment %d: %d payload bytes > MSS %d", i, len(s)-l.Payload, c.mss)
				}
				if !bytes.Equal(s[l.L4+20:l.Payload], f[l.L4+20:l.Payload]) {
					t.Errorf("segment %d: TCP options changed", i)
				}
				if got := binary.BigEndian.Uint32(s[l.L4+4:]); got != seq0+uint32(len(payload)) {
					t.Errorf("segment %d: seq %#x, want %#x", i, got, seq0+uint32(len(payload)))
				}
				if !c.v6 {
					if got, want := binary.BigEndian.Uint16(s[l.L3+4:]), uint16(0xfff0+i); got != want {
						t.Errorf("segment %d: IPv4 id %#x, want %#x", i, got, want)
					}
				}
				fl := s[l.L4+13]
				last := i == len(segs)-1
				want := c.flags
				if !last {
					want &^= FlagFIN | FlagPSH
				}
				if i > 0 {
					want &^= FlagCWR
				}
				if fl != want {
					t.Errorf("segment %d (last %v): flags %#x, want %#x", i, last, fl, want)
				}
				payload = append(payload, s[l.Payload:]...)
			}
			if !bytes.Equal(payload, f[l.Payload:]) {
				t.Errorf("payload differs after the split")
			}
		})
	}
}

// TestSplitLSOPieces: pieces of several segments each, as a large send
// that fits a send section, keep the id and sequence arithmetic of the
// segments the device will cut from them.
func TestSplitLSOPieces(t *testing.T) {
	f := frame(false, ProtoTCP, nil, 20000, FlagACK|FlagPSH, true)
	l, _ := Parse(f)
	const mss = 1460
	pieces := split(t, f, mss, 4, LSOSeed)
	if len(pieces) != 4 { // 14 segments: 4+4+4+2
		t.Fatalf("%d pieces", len(pieces))
	}
	segs := 0
	for i, p := range pieces {
		if got, want := binary.BigEndian.Uint16(p[l.L3+4:]), uint16(0xfff0+segs); got != want {
			t.Errorf("piece %d: id %#x, want %#x", i, got, want)
		}
		if c := csum.Checksum(0, p[l.L3:l.L4]); c != 0 {
			t.Errorf("piece %d: IPv4 header checksum", i)
		}
		// The seed is the pseudo-header without length.
		pl := l
		pl.End = len(p)
		if got, want := binary.BigEndian.Uint16(p[l.L4+16:]), csum.Fold(PseudoSum(p, pl, 0)); got != want {
			t.Errorf("piece %d: checksum seed %#x, want %#x", i, got, want)
		}
		segs += Segments(pl, mss)
		// Finishing the piece's checksum gives a valid segment.
		FinishChecksum(p, pl, Full)
		verify(t, p, false, ProtoTCP)
	}
}

func TestSplitUDP(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		f := frame(v6, ProtoUDP, nil, 5000, 0, false)
		l, _ := Parse(f)
		segs := split(t, f, 1200, 8, Full) // perPiece is ignored for UDP
		if len(segs) != 5 {
			t.Fatalf("%d datagrams", len(segs))
		}
		var payload []byte
		for i, s := range segs {
			verify(t, s, v6, ProtoUDP)
			if got := int(binary.BigEndian.Uint16(s[l.L4+4:])); got != len(s)-l.L4 {
				t.Errorf("datagram %d: UDP length %d, want %d", i, got, len(s)-l.L4)
			}
			payload = append(payload, s[l.Payload:]...)
		}
		if !bytes.Equal(payload, f[l.Payload:]) {
			t.Errorf("v6 %v: payload differs", v6)
		}
	}
}

func TestSplitPartialChecksum(t *testing.T) {
	f := frame(true, ProtoTCP, nil, 3000, FlagACK, false)
	l, _ := Parse(f)
	for _, s := range split(t, f, 1000, 1, Partial) {
		pl := l
		pl.End = len(s)
		if got, want := binary.BigEndian.Uint16(s[l.L4+16:]), csum.Fold(PseudoSum(s, pl, len(s)-l.L4)); got != want {
			t.Fatalf("partial checksum %#x, want %#x", got, want)
		}
	}
}

func TestSplitStopsWhenOutOfRoom(t *testing.T) {
	f := frame(false, ProtoTCP, nil, 5000, FlagACK, false)
	l, _ := Parse(f)
	k := 0
	n, err := Split(f, l, 1000, 1, Full, func(n int) []byte {
		if k == 2 {
			return nil
		}
		k++
		return make([]byte, n)
	})
	if n != 2 || !errors.Is(err, ErrNoRoom) {
		t.Fatalf("%d pieces, %v", n, err)
	}
	if _, err := Split(f, l, 0, 1, Full, nil); !errors.Is(err, ErrSegmentSize) {
		t.Fatalf("mss 0: %v", err)
	}
}

func TestSplitAllocatesNothing(t *testing.T) {
	f := frame(false, ProtoTCP, nil, 64000, FlagACK, false)
	l, _ := Parse(f)
	buf := make([]byte, 2048)
	next := func(n int) []byte { return buf[:n] }
	if a := testing.AllocsPerRun(50, func() { Split(f, l, 1448, 1, Full, next) }); a != 0 {
		t.Fatalf("%v allocs per split", a)
	}
}

func BenchmarkSplit(b *testing.B) {
	f := frame(false, ProtoTCP, []byte{1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2}, 64000, FlagACK, false)
	l, _ := Parse(f)
	buf := make([]byte, 8192)
	next := func(n int) []byte { return buf[:n] }
	for _, c := range []struct {
		name string
		per  int
		mode Checksum
	}{{"segments/full", 1, Full}, {"segments/partial", 1, Partial}, {"lso4/seed", 4, LSOSeed}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(f)))
			for b.Loop() {
				Split(f, l, 1448, c.per, c.mode, next)
			}
		})
	}
}

func FuzzSplit(f *testing.F) {
	f.Add(frame(false, ProtoTCP, nil, 3000, FlagACK|FlagPSH, false), uint16(1000), uint8(1))
	f.Add(frame(true, ProtoTCP, []byte{1, 1, 1, 1}, 3000, FlagACK, true), uint16(536), uint8(3))
	f.Add(frame(true, ProtoUDP, nil, 3000, 0, false), uint16(1200), uint8(1))
	f.Fuzz(func(t *testing.T, b []byte, mss uint16, per uint8) {
		l, err := Parse(b)
		if err != nil {
			return
		}
		if l.L4 >= l.Payload || l.Payload > l.End || l.End > len(b) {
			t.Fatalf("layout %+v out of a %d-byte frame", l, len(b))
		}
		if mss == 0 || per == 0 || int(mss)*int(per) > 1<<16 || Segments(l, int(mss)) > 4096 {
			return
		}
		var pieces [][]byte
		orig := append([]byte(nil), b...)
		_, err = Split(b, l, int(mss), int(per), Full, func(n int) []byte {
			if n < l.Payload || n > l.Payload+int(mss)*int(per) {
				t.Fatalf("piece of %d bytes (headers %d, mss %d x %d)", n, l.Payload, mss, per)
			}
			pieces = append(pieces, make([]byte, n))
			return pieces[len(pieces)-1]
		})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, orig) {
			t.Fatal("Split modified its input")
		}
		var payload []byte
		for _, p := range pieces {
			verify(t, p, l.V6, l.Proto)
			payload = append(payload, p[l.Payload:]...)
		}
		if !bytes.Equal(payload, b[l.Payload:l.End]) {
			t.Fatal("payload differs after the split")
		}
	})
}
