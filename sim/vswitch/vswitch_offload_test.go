package vswitch

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/vmbusd/vmbusd/frame/csum"
	"github.com/vmbusd/vmbusd/netvsc/rndis"
)

// finish completes a frame's partial checksum as the port's wire would.
func finish(f []byte, o FrameOffload) []byte {
	f = bytes.Clone(f)
	if o.CsumStart != 0 {
		at := int(o.CsumStart + o.CsumOffset)
		binary.BigEndian.PutUint16(f[at:], ^csum.Fold(csum.Add(0, f[o.CsumStart:])))
	}
	return f
}

// vnetFrame puts a virtio-net header in front of f.
func vnetFrame(flags, gsoType uint8, gsoSize, start, off int, f []byte) []byte {
	b := make([]byte, vnetHdrLen, vnetHdrLen+len(f))
	b[0], b[1] = flags, gsoType
	binary.LittleEndian.PutUint16(b[4:], uint16(gsoSize))
	binary.LittleEndian.PutUint16(b[6:], uint16(start))
	binary.LittleEndian.PutUint16(b[8:], uint16(off))
	return append(b, f...)
}

// partialTCP leaves a frame's TCP checksum as the pseudo-header sum, as
// the kernel hands it to a TAP with NEEDS_CSUM.
func partialTCP(f []byte) []byte {
	f = bytes.Clone(f)
	fl := ParseFlow(f)
	seg := f[fl.L4Off:fl.L4End]
	be.PutUint16(seg[16:], csum.Fold(PseudoSum(&fl, IPProtoTCP, len(seg))))
	return f
}

// TestTAPPortCutsKernelSuperFrames: what a TAP with offloads reads from
// the kernel reaches the vSwitch as MTU-sized frames with complete
// checksums; headers it cannot honour are dropped and counted.
func TestTAPPortCutsKernelSuperFrames(t *testing.T) {
	tp := &TAP{vnet: true}
	r := &tapReader{slab: make([]byte, tapSlab), frames: make([][]byte, 0, tapMaxBatch)}
	read := func(b []byte) {
		copy(r.slab[r.pos:], b)
		tp.takeFrame(r, r.slab[r.pos:r.pos+len(b)])
	}
	big := tcpFrame(false, 10000)
	ApplyTxChecksum(big, rndis.NewTxChecksum(rndis.TxChecksumIPv4|rndis.TxChecksumIPHeader, 34))
	read(vnetFrame(vnetNeedsCsum, vnetGSOTCPv4, 1460, 34, 16, partialTCP(big)))
	if len(r.frames) != 7 {
		t.Fatalf("%d frames from a 10000-byte super-frame at MSS 1460", len(r.frames))
	}
	var payload []byte
	for i, s := range r.frames {
		if len(s) > 1514 || RxChecksum(s) != rndis.RxChecksumIPOK|rndis.RxChecksumTCPOK {
			t.Fatalf("segment %d: %d bytes, checksums %#x", i, len(s), RxChecksum(s))
		}
		payload = append(payload, s[54:]...)
	}
	if !bytes.Equal(payload, big[54:]) {
		t.Fatal("segments do not join up to the payload")
	}
	small := tcpFrame(true, 100)
	read(vnetFrame(vnetNeedsCsum, vnetGSONone, 0, 54, 16, partialTCP(small)))
	if n := len(r.frames); n != 8 || RxChecksum(r.frames[7]) != rndis.RxChecksumTCPOK {
		t.Fatalf("partial checksum not finished (%d frames)", n)
	}
	for _, bad := range [][]byte{
		vnetFrame(vnetNeedsCsum, vnetGSONone, 0, 4, 16, small),                  // checksum start inside the Ethernet header
		vnetFrame(vnetNeedsCsum, vnetGSOTCPv4, 0, 34, 16, partialTCP(big)),      // gso size 0
		vnetFrame(vnetNeedsCsum, vnetGSOTCPv4, 1460, 34, 16, partialTCP(small)), // TCPv4 GSO on an IPv6 frame
		{1, 2, 3},
	} {
		read(bad)
	}
	if len(r.frames) != 8 || tp.RxDropped() != 4 {
		t.Fatalf("%d frames, %d dropped; want 8 and 4", len(r.frames), tp.RxDropped())
	}
}

func TestPutVnetHdr(t *testing.T) {
	f := tcpFrame(false, 5000)
	f[47] |= 0x80 // CWR
	var h [vnetHdrLen]byte
	putVnetHdr(&h, f, FrameOffload{CsumStart: 34, CsumOffset: 16, MSS: 1448})
	want := []byte{vnetNeedsCsum, vnetGSOTCPv4 | vnetGSOECN, 54, 0, 0xa8, 0x05, 34, 0, 16, 0}
	if !bytes.Equal(h[:], want) {
		t.Fatalf("header % x, want % x", h, want)
	}
	h = [vnetHdrLen]byte{}
	putVnetHdr(&h, f, FrameOffload{})
	if h != ([vnetHdrLen]byte{}) {
		t.Fatalf("complete frame: header % x", h)
	}
}

func TestTUNOffloadsString(t *testing.T) {
	if s := (tunFCsum | tunFTSO4 | tunFTSO6 | tunFUSO4 | tunFUSO6).String(); s != "csum,tso4,tso6,uso4,uso6" {
		t.Errorf("%q", s)
	}
	if s := tunOffloads(0).String(); s != "none" {
		t.Errorf("%q", s)
	}
}

// piece is a large send as addLSOWhole hands it to an OffloadPort:
// IPv4, seq, flags, IP length and header checksum set, the TCP checksum
// partial.
func piece(seq uint32, flags uint8, payload int) []byte {
	f := tcpFrame(false, payload)
	be.PutUint32(f[38:], seq)
	f[47] = flags
	for i := 54; i < len(f); i++ {
		f[i] = byte(seq) + byte(i)
	}
	ApplyTxChecksum(f, rndis.NewTxChecksum(rndis.TxChecksumIPv4|rndis.TxChecksumIPHeader, 34))
	return partialTCP(f)
}

func TestTAPPortMergesALargeSendsPieces(t *testing.T) {
	const mss = 1448
	lso := FrameOffload{CsumStart: 34, CsumOffset: 16, MSS: mss}
	one := FrameOffload{CsumStart: 34, CsumOffset: 16}
	type in struct {
		f []byte
		o FrameOffload
	}
	seq := uint32(5000)
	run := func(k int, flags uint8) in { // a piece of k segments
		p := in{piece(seq, flags, k*mss), lso}
		seq += uint32(k * mss)
		return p
	}
	tail := func(n int, flags uint8) in {
		p := in{piece(seq, flags, n), one}
		seq += uint32(n)
		return p
	}
	cases := []struct {
		name string
		ins  func() []in
		want []int // frames per write
	}{
		{"pieces and a short tail", func() []in { return []in{run(4, 0x10), run(4, 0x10), run(4, 0x10), tail(500, 0x18)} }, []int{4}},
		{"PSH closes the run", func() []in { return []in{run(4, 0x10), run(4, 0x18), run(4, 0x10)} }, []int{2, 1}},
		{"gap", func() []in { a := run(4, 0x10); seq += 10; return []in{a, run(4, 0x10)} }, []int{1, 1}},
		{"64 KiB", func() []in {
			var r []in
			for range 12 {
				r = append(r, run(4, 0x10))
			}
			return r
		}, []int{11, 1}},
		{"plain frame does not start a run", func() []in { return []in{tail(500, 0x10), run(4, 0x10)} }, []int{1, 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			seq = 5000
			ins := c.ins()
			var frames [][]byte
			var offs []FrameOffload
			var payload []byte
			for _, x := range ins {
				frames = append(frames, x.f)
				offs = append(offs, x.o)
				payload = append(payload, x.f[54:]...)
			}
			w := &tapWriter{parts: make([][]byte, 0, tapMaxMerge)}
			var got []int
			var joined []byte
			for i := 0; i < len(frames); {
				w.parts = append(w.parts[:0], frames[i])
				w.hdr = [vnetHdrLen]byte{}
				j := mergeRun(frames, offs, i, w)
				if j == i+1 {
					putVnetHdr(&w.hdr, frames[i], offs[i])
				}
				got = append(got, j-i)
				f := bytes.Join(w.parts, nil)
				if len(f)-14 > 0xffff {
					t.Fatalf("write of %d IP bytes", len(f)-14)
				}
				var h [vnetHdrLen]byte
				copy(h[:], w.hdr[:])
				o := FrameOffload{CsumStart: binary.LittleEndian.Uint16(h[6:]), CsumOffset: binary.LittleEndian.Uint16(h[8:]), MSS: binary.LittleEndian.Uint16(h[4:])}
				if c := RxChecksum(finish(f, o)); c != rndis.RxChecksumIPOK|rndis.RxChecksumTCPOK {
					t.Fatalf("write %d: checksums %#x", len(got), c)
				}
				if j-i > 1 && (h[1] != vnetGSOTCPv4 || o.MSS != mss) {
					t.Fatalf("merged write: header % x", h)
				}
				joined = append(joined, f[54:]...)
				i = j
			}
			if !bytes.Equal(joined, payload) {
				t.Fatal("payload changed")
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
