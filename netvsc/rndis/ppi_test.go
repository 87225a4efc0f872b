package rndis

import (
	"bytes"
	"testing"

	"github.com/vmbusd/vmbusd/internal/wiretest"
	"github.com/vmbusd/vmbusd/netvsc/protoerr"
)

func TestVLANInfoBitLayout(t *testing.T) {
	v := NewVLANInfo(5, true, 0xabc)
	// bits 0–2 priority, bit 3 CFI, bits 4–15 VLAN id (docs/protocol/netvsc.md §3.4)
	if uint32(v) != 5|1<<3|0xabc<<4 {
		t.Fatalf("VLANInfo = %#x", uint32(v))
	}
	if v.Priority() != 5 || !v.CFI() || v.ID() != 0xabc {
		t.Fatalf("accessors %d %v %#x", v.Priority(), v.CFI(), v.ID())
	}
	// TCI: PCP 13–15, DEI 12, VID 0–11.
	if v.TCI() != 5<<13|1<<12|0xabc {
		t.Fatalf("TCI = %#x", v.TCI())
	}
	for _, tci := range []uint16{0, 1, 0xfff, 0x1000, 0xe000, 0xffff, 0xa064} {
		if got := VLANInfoFromTCI(tci).TCI(); got != tci {
			t.Errorf("TCI %#x round trip = %#x", tci, got)
		}
	}
	if NewVLANInfo(0xff, false, 0xffff) != NewVLANInfo(7, false, 0xfff) {
		t.Fatal("oversized fields not truncated")
	}
}

func TestLSOv2BitLayout(t *testing.T) {
	l := NewLSOv2(1448, 54, true)
	// bits 0–19 MSS, 20–29 TCP header offset, 30 LSOv2, 31 IPv6
	if uint32(l) != 1448|54<<20|1<<30|1<<31 {
		t.Fatalf("LSOInfo = %#x", uint32(l))
	}
	if l.MSS() != 1448 || l.TCPHeaderOffset() != 54 || !l.IsV2() || !l.IPv6() {
		t.Fatal("accessors")
	}
	if l4 := NewLSOv2(0xfffff, 0x3ff, false); l4.MSS() != 0xfffff || l4.TCPHeaderOffset() != 0x3ff || l4.IPv6() {
		t.Fatal("field maxima")
	}
}

func TestChecksumBitLayouts(t *testing.T) {
	c := NewTxChecksum(TxChecksumIPv6|TxChecksumUDP, 54)
	if uint32(c) != 2|8|54<<16 || c.TransportOffset() != 54 {
		t.Fatalf("TxChecksum = %#x", uint32(c))
	}
	if NewTxChecksum(c, 14).TransportOffset() != 14 {
		t.Fatal("re-setting the offset")
	}
	if RxChecksumIPValueInvalid != 0x100 || RxChecksumTCPOK != 0x8 || RxChecksumLoopback != 0x40 {
		t.Fatal("RxChecksum bits")
	}
}

func TestPktInfoIDLayout(t *testing.T) {
	p := NewPktInfoID(PktInfoSubAlloc|PktInfoLastFrag, 0x1234)
	// u8 version, u8 flags, u16 id, little-endian
	b := AppendInfoUint32(nil, uint32(p))
	if !bytes.Equal(b, []byte{1, 5, 0x34, 0x12}) {
		t.Fatalf("wire % x", b)
	}
	if p.Version() != 1 || p.Flags() != 5 || p.ID() != 0x1234 {
		t.Fatal("accessors")
	}
}

func TestPPIGoldenElements(t *testing.T) {
	got := AppendPPIUint32(nil, PPINBLHashValue, 0x01020304)
	wiretest.Golden(t, "u32 element", got, "10000000 08000000 0c000000 04030201")
	// Arbitrary data is padded to a multiple of 4.
	got = AppendPPI(nil, PPIOriginalPktInfo, []byte{9, 8, 7, 6, 5})
	wiretest.Golden(t, "padded element", got, "14000000 07000000 0c000000 09080706 05000000")
	got = AppendPPIUint32(nil, PPIPktInfoID, 0)
	if !bytes.Equal(got[4:8], []byte{1, 0, 0, 0x80}) {
		t.Fatalf("internal bit: % x", got[4:8])
	}
}

func TestPPIWalkSkipsUnknownAndKeepsLast(t *testing.T) {
	var area []byte
	area = AppendPPI(area, PPIOriginalPktInfo, make([]byte, 13))
	area = AppendPPIUint32(area, PPIIEEE8021Q, uint32(NewVLANInfo(0, false, 1)))
	area = AppendPPIUint32(area, PPIIEEE8021Q, uint32(NewVLANInfo(0, false, 2)))
	// An element whose data does not start right after its header.
	area = append(area, wiretest.Hex(t, "18000000 08000000 14000000 ffffffff ffffffff 44332211")...)
	// A zero-length element (offset == size) of an unknown type.
	area = append(area, wiretest.Hex(t, "0c000000 63000000 0c000000")...)

	it := NewPPIIter(area)
	var types []PPIType
	for p, ok := it.Next(); ok; p, ok = it.Next() {
		types = append(types, p.Type)
	}
	if it.Err() != nil || len(types) != 5 || types[3] != PPINBLHashValue {
		t.Fatalf("walk: %v %v", types, it.Err())
	}
	pi, err := ParsePacketInfo(area)
	if err != nil {
		t.Fatal(err)
	}
	if pi.Has != InfoVLAN|InfoHashValue || pi.VLAN.ID() != 2 || pi.HashValue != 0x11223344 {
		t.Fatalf("info %+v", pi)
	}
	var empty PPIIter
	if _, ok := empty.Next(); ok || empty.Err() != nil {
		t.Fatal("zero PPIIter should walk nothing")
	}
}

func TestPPIWalkerRejectsEachViolation(t *testing.T) {
	good := AppendPPIUint32(nil, PPITCPIPChecksum, 1)
	cases := []struct {
		name string
		area []byte
		kind protoerr.Kind
	}{
		{"partial header", good[:11], protoerr.KindPPISize},
		{"trailing bytes", append(bytes.Clone(good), 0, 0, 0, 0), protoerr.KindPPISize},
		{"size zero", wiretest.Hex(t, "00000000 00000000 0c000000 00000000"), protoerr.KindPPISize},
		{"size below header", wiretest.Hex(t, "08000000 00000000 0c000000 00000000"), protoerr.KindPPISize},
		{"size unaligned", wiretest.Hex(t, "0e000000 00000000 0c000000 00000000"), protoerr.KindPPISize},
		{"size past area", wiretest.Hex(t, "14000000 00000000 0c000000 00000000"), protoerr.KindPPISize},
		{"size huge", wiretest.Hex(t, "fcffffff 00000000 0c000000 00000000"), protoerr.KindPPISize},
		{"offset inside header", wiretest.Hex(t, "10000000 00000000 08000000 00000000"), protoerr.KindPPIOffset},
		{"offset past element", wiretest.Hex(t, "10000000 00000000 14000000 00000000"), protoerr.KindPPIOffset},
		{"offset huge", wiretest.Hex(t, "10000000 00000000 ffffffff 00000000"), protoerr.KindPPIOffset},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			it := NewPPIIter(c.area)
			for _, ok := it.Next(); ok; _, ok = it.Next() {
			}
			kinds.Want(t, it.Err(), c.kind)
			if _, ok := it.Next(); ok {
				t.Fatal("iterator continued after an error")
			}
			_, err := ParsePacketInfo(c.area)
			kinds.Want(t, err, c.kind)
		})
	}
}

func TestPacketInfoRejectsShortKnownData(t *testing.T) {
	for _, typ := range []PPIType{PPITCPIPChecksum, PPITCPLargeSend, PPIIEEE8021Q, PPINBLHashValue, PPINBLHashInfo, PPIPktInfoID} {
		area := AppendPPI(nil, typ, nil) // 12-byte element, no data
		_, err := ParsePacketInfo(area)
		kinds.Want(t, err, protoerr.KindPPIData)
	}
	// Unknown types may be empty.
	if _, err := ParsePacketInfo(AppendPPI(nil, PPISGList, nil)); err != nil {
		t.Fatal(err)
	}
	_, err := PPI{Type: PPINBLHashValue, Data: []byte{1, 2}}.Uint32()
	kinds.Want(t, err, protoerr.KindPPIData)
}

func TestPacketInfoEncodingOrderAndLength(t *testing.T) {
	var pi PacketInfo
	if pi.PPILen() != 0 || len(pi.AppendPPIs(nil)) != 0 {
		t.Fatal("empty info encodes to nothing")
	}
	var nilInfo *PacketInfo
	if nilInfo.PPILen() != 0 {
		t.Fatal("nil info")
	}
	pi.SetPktID(NewPktInfoID(0, 1))
	pi.SetHashInfo(NDISHashFunctionToeplitz)
	pi.SetHashValue(1)
	pi.SetVLAN(1)
	pi.SetLSO(1)
	pi.SetChecksum(1)
	pi.Has |= 0xc0 // bits with no field are ignored
	b := pi.AppendPPIs(nil)
	if len(b) != 6*16 || pi.PPILen() != 96 || MaxPacketHeaderLen != 44+96 {
		t.Fatalf("len %d", len(b))
	}
	it := NewPPIIter(b)
	var types []PPIType
	for p, ok := it.Next(); ok; p, ok = it.Next() {
		types = append(types, p.Type)
	}
	want := []PPIType{PPITCPIPChecksum, PPITCPLargeSend, PPIIEEE8021Q, PPINBLHashValue, PPINBLHashInfo, PPIPktInfoID}
	for i := range want {
		if types[i] != want[i] {
			t.Fatalf("order %v", types)
		}
	}
}

func TestPPIWalkDoesNotAllocate(t *testing.T) {
	var pi PacketInfo
	pi.SetChecksum(8)
	pi.SetVLAN(NewVLANInfo(1, false, 5))
	pi.SetHashValue(7)
	pi.SetHashInfo(NDISHashFunctionToeplitz | NDISHashTCPIPv4)
	area := pi.AppendPPIs(nil)
	var sink uint32
	allocs := testing.AllocsPerRun(200, func() {
		it := NewPPIIter(area)
		for p, ok := it.Next(); ok; p, ok = it.Next() {
			v, _ := p.Uint32()
			sink += v
		}
		got, err := ParsePacketInfo(area)
		if err != nil || got != pi {
			panic("walk")
		}
		buf := [64]byte{}
		pi.put(buf[:pi.PPILen()])
	})
	if allocs != 0 {
		t.Fatalf("%v allocs per run, want 0", allocs)
	}
	_ = sink
}

func TestPPITypeNames(t *testing.T) {
	if PPIIEEE8021Q.String() != "IEEE_8021Q_INFO" || PPIPktInfoID.String() != "RNDIS_PKTINFO_ID" || PPIType(0x40).String() != "ppi type(0x40)" {
		t.Fatal("PPIType.String")
	}
}

// Parse reuses a PacketInfo frame after frame: what an earlier area set
// must not survive into the next one's result, on success or error.
func TestPacketInfoParseResets(t *testing.T) {
	var full PacketInfo
	full.SetChecksum(1)
	full.SetLSO(2)
	full.SetVLAN(3)
	full.SetHashValue(4)
	full.SetHashInfo(5)
	full.SetPktID(6)
	var hashOnly PacketInfo
	hashOnly.SetHashValue(7)
	for _, tc := range []struct {
		name    string
		area    []byte
		want    PacketInfo
		wantErr bool
	}{
		{"empty", nil, PacketInfo{}, false},
		{"one element", hashOnly.AppendPPIs(nil), hashOnly, false},
		{"malformed first element", []byte{1, 2, 3}, PacketInfo{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pi := full
			err := pi.Parse(tc.area)
			if (err != nil) != tc.wantErr || pi != tc.want {
				t.Errorf("Parse = %+v, %v; want %+v, error %v", pi, err, tc.want, tc.wantErr)
			}
		})
	}
}
