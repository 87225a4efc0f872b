package tap

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/vmbusd/vmbusd/frame"
	"github.com/vmbusd/vmbusd/frame/csum"
)

func TestVnetHdrRoundTrip(t *testing.T) {
	h := vnetHdr{flags: vnetNeedsCsum, gsoType: vnetGSOTCPv6 | vnetGSOECN, hdrLen: 86, gsoSize: 1428, csumStart: 54, csumOff: 16}
	var b [vnetHdrLen]byte
	h.encode(b[:])
	want := []byte{1, 0x84, 86, 0, 0x94, 0x05, 54, 0, 16, 0} // little-endian fields
	if !bytes.Equal(b[:], want) {
		t.Fatalf("encoded % x, want % x", b, want)
	}
	var got vnetHdr
	if !got.decode(b[:]) || got != h {
		t.Fatalf("decoded %+v, want %+v", got, h)
	}
	if got.decode(b[:9]) {
		t.Fatal("decoded a 9-byte header")
	}
}

// fromTAP returns a packet holding hdr and f as a TAP read them.
func fromTAP(t testing.TB, pool *frame.Pool, h vnetHdr, f []byte) *frame.Packet {
	t.Helper()
	p := pool.Get()
	b := p.SetLen(vnetHdrLen + len(f))
	h.encode(b)
	copy(b[vnetHdrLen:], f)
	return p
}

// partial replaces a frame's TCP checksum with the pseudo-header sum, as
// the kernel hands it over with NEEDS_CSUM.
func partial(f []byte, v6 bool) []byte {
	f = bytes.Clone(f)
	l4 := 34
	if v6 {
		l4 = 54
	}
	binary.BigEndian.PutUint16(f[l4+16:], csum.Fold(pseudo(f, v6, len(f)-l4)))
	return f
}

func TestFromVnet(t *testing.T) {
	pool := testPool(t, 8, 65536+256)
	big4 := partial(buildTCP(tcpSpec{seq: 1, ack: 2, flags: 0x18, opts: tsOp, payload: 30000}), false)
	big6 := partial(buildTCP(tcpSpec{v6: true, seq: 1, ack: 2, flags: 0x10, payload: 20000}), true)
	small := buildTCP(tcpSpec{seq: 1, ack: 2, flags: 0x18, payload: 500})
	smallPartial := partial(small, false)
	all := frame.TxOffloads{TCP4Checksum: true, TCP6Checksum: true, UDP4Checksum: true, UDP6Checksum: true, LSO4: 62780, LSO6: 62780}
	none := frame.TxOffloads{}
	csumTCP := vnetHdr{flags: vnetNeedsCsum, csumStart: 34, csumOff: 16}
	cases := []struct {
		name     string
		h        vnetHdr
		f        []byte
		off      frame.TxOffloads
		want     txAction
		wantMeta frame.Meta
		check    func(t *testing.T, f []byte)
	}{
		{"plain", vnetHdr{}, small, all, txAsIs, frame.Meta{}, nil},
		{"tso4", vnetHdr{flags: vnetNeedsCsum, gsoType: vnetGSOTCPv4, hdrLen: 66, gsoSize: 1448, csumStart: 34, csumOff: 16}, big4, all, txAsIs,
			frame.Meta{Flags: frame.MetaTxLSO | frame.MetaTxTCPChecksum | frame.MetaTxIPv4, MSS: 1448, L3Off: 14, L4Off: 34}, nil},
		{"tso6 without host LSO", vnetHdr{flags: vnetNeedsCsum, gsoType: vnetGSOTCPv6, gsoSize: 1440, csumStart: 54, csumOff: 16}, big6, none, txAsIs,
			frame.Meta{Flags: frame.MetaTxLSO | frame.MetaTxTCPChecksum | frame.MetaTxIPv6, MSS: 1440, L3Off: 14, L4Off: 54}, nil},
		{"partial checksum offloaded", csumTCP, smallPartial, all, txAsIs,
			frame.Meta{Flags: frame.MetaTxTCPChecksum | frame.MetaTxIPv4, L3Off: 14, L4Off: 34},
			func(t *testing.T, f []byte) {
				if !bytes.Equal(f, smallPartial) {
					t.Error("frame changed though the host finishes the checksum")
				}
			}},
		{"partial checksum finished here", csumTCP, smallPartial, none, txAsIs, frame.Meta{},
			func(t *testing.T, f []byte) {
				if !bytes.Equal(f, small) {
					t.Error("checksum not finished")
				}
			}},
		{"gso frame within the MTU", vnetHdr{flags: vnetNeedsCsum, gsoType: vnetGSOTCPv4, gsoSize: 1448, csumStart: 34, csumOff: 16}, smallPartial, none, txAsIs, frame.Meta{},
			func(t *testing.T, f []byte) {
				if !tcpValid(f, false) {
					t.Error("checksum not finished")
				}
			}},
		{"checksum start elsewhere", vnetHdr{flags: vnetNeedsCsum, csumStart: 20, csumOff: 16}, smallPartial, all, txDrop, frame.Meta{}, nil},
		{"gso size 0", vnetHdr{flags: vnetNeedsCsum, gsoType: vnetGSOTCPv4, csumStart: 34, csumOff: 16}, big4, all, txDrop, frame.Meta{}, nil},
		{"gso type for the other family", vnetHdr{flags: vnetNeedsCsum, gsoType: vnetGSOTCPv6, gsoSize: 1448, csumStart: 34, csumOff: 16}, big4, all, txDrop, frame.Meta{}, nil},
		{"unknown gso type", vnetHdr{gsoType: 3, gsoSize: 1448}, big4, all, txDrop, frame.Meta{}, nil},
		{"short", vnetHdr{}, small[:10], all, txDrop, frame.Meta{}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := fromTAP(t, pool, c.h, c.f)
			defer p.Free()
			act, _ := fromVnet(p, 1500, &c.off)
			if act != c.want {
				t.Fatalf("action %d, want %d", act, c.want)
			}
			if act == txDrop {
				return
			}
			if p.Meta != c.wantMeta {
				t.Errorf("meta %+v, want %+v", p.Meta, c.wantMeta)
			}
			if p.Len() != len(c.f) {
				t.Errorf("frame of %d bytes, want %d (header stripped)", p.Len(), len(c.f))
			}
			if c.check != nil {
				c.check(t, p.Data())
			}
		})
	}
}

func TestSplitUDPSuperFrame(t *testing.T) {
	big := testPool(t, 4, 65536+256)
	small := testPool(t, 64, 2048)
	// A UDP/IPv4 super-frame: 20 datagrams of 1000 bytes.
	f := buildTCP(tcpSpec{payload: 20000})
	f[23] = 17
	binary.BigEndian.PutUint16(f[38:], uint16(8+20000))
	u := append(bytes.Clone(f[:42]), f[54:]...)
	binary.BigEndian.PutUint16(u[16:], uint16(len(u)-14))
	u[24], u[25] = 0, 0
	binary.BigEndian.PutUint16(u[24:], csum.Checksum(0, u[14:34]))
	binary.BigEndian.PutUint16(u[40:], csum.Fold(csum.Add(0, u[26:34])+17+uint32(len(u)-34)))
	for _, c := range []struct {
		name string
		off  frame.TxOffloads
	}{{"checksum offloaded", frame.TxOffloads{UDP4Checksum: true}}, {"checksum here", frame.TxOffloads{}}} {
		t.Run(c.name, func(t *testing.T) {
			d := &Device{vnet: true, mtu: 1500}
			q := &Queue{d: d}
			q.SetNIC(c.off, small)
			p := fromTAP(t, big, vnetHdr{flags: vnetNeedsCsum, gsoType: vnetGSOUDPL4, gsoSize: 1000, csumStart: 34, csumOff: 6}, u)
			q.took(p)
			if q.ready.size != 20 || q.RxSplit.Load() != 1 {
				t.Fatalf("%d datagrams ready, %d split", q.ready.size, q.RxSplit.Load())
			}
			var payload []byte
			for q.ready.size > 0 {
				s := q.ready.pop()
				g := s.Data()
				if len(g) != 1042 || int(binary.BigEndian.Uint16(g[38:])) != 1008 {
					t.Fatalf("datagram of %d bytes, UDP length %d", len(g), binary.BigEndian.Uint16(g[38:]))
				}
				sum := csum.Add(0, g[26:34]) + 17 + 1008
				if c.off.UDP4Checksum {
					if s.Meta.Flags != frame.MetaTxUDPChecksum|frame.MetaTxIPv4 || s.Meta.L4Off != 34 ||
						binary.BigEndian.Uint16(g[40:]) != csum.Fold(sum) {
						t.Fatalf("offloaded datagram: meta %+v", s.Meta)
					}
				} else if csum.Checksum(sum, g[34:]) != 0 {
					t.Fatal("datagram checksum invalid")
				}
				if csum.Checksum(0, g[14:34]) != 0 {
					t.Fatal("IPv4 header checksum invalid")
				}
				payload = append(payload, g[42:]...)
				s.Free()
			}
			if !bytes.Equal(payload, u[42:]) {
				t.Error("datagrams do not join up to the payload")
			}
			if big.Available() != big.Size() || small.Available() != small.Size() {
				t.Error("packets leaked")
			}
		})
	}
}

func FuzzFromVnet(f *testing.F) {
	big := partial(buildTCP(tcpSpec{seq: 1, ack: 2, flags: 0x10, opts: tsOp, payload: 3000}), false)
	var h [vnetHdrLen]byte
	(&vnetHdr{flags: vnetNeedsCsum, gsoType: vnetGSOTCPv4, gsoSize: 1448, csumStart: 34, csumOff: 16}).encode(h[:])
	f.Add(append(h[:], big...), true)
	(&vnetHdr{flags: vnetNeedsCsum, csumStart: 54, csumOff: 16}).encode(h[:])
	f.Add(append(h[:], partial(buildTCP(tcpSpec{v6: true, payload: 100}), true)...), false)
	pool := testPool(f, 1, 65536+256)
	f.Fuzz(func(t *testing.T, b []byte, offloads bool) {
		if len(b) > 65536 {
			return
		}
		p := pool.Get()
		defer p.Free()
		copy(p.SetLen(len(b)), b)
		off := frame.TxOffloads{}
		if offloads {
			off = frame.TxOffloads{TCP4Checksum: true, TCP6Checksum: true, UDP4Checksum: true, UDP6Checksum: true, LSO4: 62780, LSO6: 62780}
		}
		act, h := fromVnet(p, 1500, &off)
		if act == txDrop {
			return
		}
		m := p.Meta
		if m.Flags&frame.MetaTxLSO != 0 {
			if m.MSS == 0 || p.Len() <= 1514 || int(m.L4Off)+20 > p.Len() {
				t.Fatalf("large send with meta %+v on a %d-byte frame", m, p.Len())
			}
		}
		if act == txSplitUDP && h.gsoSize == 0 {
			t.Fatal("UDP split with segment size 0")
		}
	})
}

func FuzzGRO(f *testing.F) {
	var seed []byte
	for _, s := range stream(false, 0, 4, 100, tsOp) {
		seed = binary.BigEndian.AppendUint16(seed, uint16(len(s)))
		seed = append(seed, s...)
	}
	f.Add(seed)
	pool := testPool(f, 32, 2048)
	f.Fuzz(func(t *testing.T, b []byte) {
		// b is a list of length-prefixed frames.
		var frames [][]byte
		for len(b) >= 2 && len(frames) < 32 {
			n := int(binary.BigEndian.Uint16(b))
			b = b[2:]
			if n > len(b) || n > 2000 {
				break
			}
			frames = append(frames, b[:n])
			b = b[n:]
		}
		pkts := received(t, pool, frames...)
		defer frame.PutBurst(pkts)
		seen := make([]int, len(pkts))
		var g gro
		g.burst(pkts, func(w *groWrite) {
			if len(w.members) == 0 || len(w.members) > groMaxSegs {
				t.Fatalf("write of %d frames", len(w.members))
			}
			size := pkts[w.members[0]].Len()
			for _, i := range w.members {
				seen[i]++
				if i != w.members[0] {
					size += pkts[i].Len() - w.payload
				}
			}
			if len(w.members) > 1 && size-ethHeaderLen > groMaxIP {
				t.Fatalf("super-frame of %d IP bytes", size-ethHeaderLen)
			}
		})
		for i, n := range seen {
			if n != 1 {
				t.Fatalf("frame %d written %d times", i, n)
			}
		}
	})
}
