package nvsp

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/vmbusd/vmbusd/internal/wiretest"
	"github.com/vmbusd/vmbusd/netvsc/protoerr"
)

// kinds are the kinds this package returns; TestMain checks, after a
// full run, that a test of this package provokes each of them.
var kinds = wiretest.NewKinds(
	protoerr.KindShort,
	protoerr.KindType,
	protoerr.KindSectionCount,
	protoerr.KindSectionOffset,
	protoerr.KindSectionSize,
	protoerr.KindSectionFit,
	protoerr.KindSectionIndex,
	protoerr.KindTableCount,
	protoerr.KindTableOffset,
)

func TestMain(m *testing.M) { os.Exit(kinds.Run(m)) }

// nvspCases is one value of every NVSP message, with a fresh decoder for it.
func nvspCases() []struct {
	name string
	in   wiretest.Marshaler
	out  wiretest.Unmarshaler
	typ  Type
	size int
} {
	var tab IndirectionTable
	for i := range tab.Table {
		tab.Table[i] = uint32(i % 3)
	}
	tab.Offset = 12
	return []struct {
		name string
		in   wiretest.Marshaler
		out  wiretest.Unmarshaler
		typ  Type
		size int
	}{
		{"init", Init{Version61, Version61}, &Init{}, TypeInit, 40},
		{"init complete", InitComplete{0xffffffff, 34, StatusSuccess}, &InitComplete{}, TypeInitComplete, 40},
		{"ndis version", NewNDISVersion(NDISVersion630), &NDISVersion{}, TypeSendNDISVer, 40},
		{"ndis config", NDISConfig{1514, NDISConfigCapIEEE8021Q | NDISConfigCapSRIOV | 1<<40}, &NDISConfig{}, TypeSendNDISConfig, 40},
		{"recv buf", RecvBuf{0x1234, RecvBufID}, &RecvBuf{}, TypeSendRecvBuf, 40},
		{"recv buf complete", RecvBufComplete{StatusSuccess, 1, RecvBufSection{0, 1806, 18000, 1806 * 18000}}, &RecvBufComplete{}, TypeSendRecvBufComplete, 40},
		{"revoke recv buf", RevokeRecvBuf{RecvBufID}, &RevokeRecvBuf{}, TypeRevokeRecvBuf, 40},
		{"send buf", SendBuf{0x5678, SendBufIDDPDK}, &SendBuf{}, TypeSendSendBuf, 40},
		{"send buf complete", SendBufComplete{StatusSuccess, 6144}, &SendBufComplete{}, TypeSendSendBufComplete, 40},
		{"revoke send buf", RevokeSendBuf{SendBufIDDPDK}, &RevokeSendBuf{}, TypeRevokeSendBuf, 40},
		{"rndis packet", RNDISPacket{RMCData, 7, 1558}, &RNDISPacket{}, TypeSendRNDISPkt, 40},
		{"rndis packet gpa", RNDISPacket{RMCControl, NoSection, 0}, &RNDISPacket{}, TypeSendRNDISPkt, 40},
		{"rndis complete", RNDISComplete{StatusFail}, &RNDISComplete{}, TypeSendRNDISPktComplete, 8},
		{"vf association", VFAssociation{1, 0x2a}, &VFAssociation{}, TypeSendVFAssociation, 40},
		{"switch data path", SwitchDataPath{DataPathVF}, &SwitchDataPath{}, TypeSwitchDataPath, 40},
		{"subchannel request", SubchannelRequest{SubchannelAllocate, 7}, &SubchannelRequest{}, TypeSubchannel, 40},
		{"subchannel complete", SubchannelComplete{StatusSuccess, 5}, &SubchannelComplete{}, TypeSubchannel, 40},
		{"indirection table", tab, &IndirectionTable{}, TypeSendIndirectionTable, IndirectionTableSize},
	}
}

func TestNVSPRoundTripEveryMessage(t *testing.T) {
	for _, c := range nvspCases() {
		t.Run(c.name, func(t *testing.T) {
			b := wiretest.Append(t, c.in)
			if len(b) != c.size {
				t.Fatalf("Marshal emitted %d bytes, want %d", len(b), c.size)
			}
			typ, err := MessageType(b)
			if err != nil || typ != c.typ {
				t.Fatalf("MessageType = %v, %v; want %v", typ, err, c.typ)
			}
			wiretest.DecodesTo(t, b, c.out, c.in, nil)
		})
	}
}

func TestNVSPDecodersRejectShortAndWrongType(t *testing.T) {
	for _, c := range nvspCases() {
		t.Run(c.name, func(t *testing.T) {
			b := c.in.Marshal(nil)
			// Truncated to 3 bytes (no type), then to just below the fields.
			kinds.Want(t, c.out.Unmarshal(b[:3]), protoerr.KindShort)
			need := map[Type]int{
				TypeInit: 12, TypeInitComplete: 16, TypeSendNDISVer: 12,
				TypeSendNDISConfig: 20, TypeSendRecvBuf: 10,
				TypeSendRecvBufComplete: 28, TypeRevokeRecvBuf: 6,
				TypeSendSendBuf: 10, TypeSendSendBufComplete: 12,
				TypeRevokeSendBuf: 6, TypeSendRNDISPkt: 16,
				TypeSendRNDISPktComplete: 8, TypeSendVFAssociation: 12,
				TypeSwitchDataPath: 8, TypeSubchannel: 12,
				TypeSendIndirectionTable: 12,
			}[c.typ]
			kinds.Want(t, c.out.Unmarshal(b[:need-1]), protoerr.KindShort)
			// Exactly the field extent decodes (28-byte and 8-byte senders).
			if c.typ != TypeSendIndirectionTable {
				if err := c.out.Unmarshal(b[:need]); err != nil {
					t.Fatalf("field-extent message: %v", err)
				}
			}
			bad := bytes.Clone(b)
			le.PutUint32(bad, uint32(c.typ)+1000)
			kinds.Want(t, c.out.Unmarshal(bad), protoerr.KindType)
		})
	}
	_, err := MessageType([]byte{1, 0})
	kinds.Want(t, err, protoerr.KindShort)
}

func TestNVSPGoldenLayouts(t *testing.T) {
	cases := []struct {
		name string
		got  []byte
		want string
	}{
		{"INIT 6.1", Init{Version61, Version61}.Marshal(nil),
			"01000000 01000600 01000600 00000000 00000000 00000000 00000000 00000000 00000000 00000000"},
		{"SEND_NDIS_CONFIG", NDISConfig{1514, NDISConfigCapIEEE8021Q | NDISConfigCapSRIOV}.Marshal(nil),
			"7d000000 ea050000 00000000 0c000000 00000000 00000000 00000000 00000000 00000000 00000000"},
		{"SEND_NDIS_VER 6.30", NewNDISVersion(NDISVersion630).Marshal(nil),
			"64000000 06000000 1e000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000"},
		{"SEND_RECV_BUF", RecvBuf{0x01020304, RecvBufID}.Marshal(nil),
			"65000000 04030201 feca0000 00000000 00000000 00000000 00000000 00000000 00000000 00000000"},
		{"SEND_RECV_BUF_COMPLETE", RecvBufComplete{StatusSuccess, 1, RecvBufSection{0, 1806, 100, 180600}}.Marshal(nil),
			"66000000 01000000 01000000 00000000 0e070000 64000000 78c10200 00000000 00000000 00000000"},
		{"SEND_SEND_BUF", SendBuf{7, SendBufIDDPDK}.Marshal(nil),
			"68000000 07000000 cefa0000 00000000 00000000 00000000 00000000 00000000 00000000 00000000"},
		{"SEND_SEND_BUF_COMPLETE", SendBufComplete{StatusSuccess, 6144}.Marshal(nil),
			"69000000 01000000 00180000 00000000 00000000 00000000 00000000 00000000 00000000 00000000"},
		{"SEND_RNDIS_PKT section", RNDISPacket{RMCData, 5, 1500}.Marshal(nil),
			"6b000000 00000000 05000000 dc050000 00000000 00000000 00000000 00000000 00000000 00000000"},
		{"SEND_RNDIS_PKT rx", RNDISPacket{RMCControl, NoSection, 0}.Marshal(nil),
			"6b000000 01000000 ffffffff 00000000 00000000 00000000 00000000 00000000 00000000 00000000"},
		{"SEND_RNDIS_PKT_COMPLETE", RNDISComplete{StatusSuccess}.Marshal(nil),
			"6c000000 01000000"},
		{"SUBCHANNEL", SubchannelRequest{SubchannelAllocate, 3}.Marshal(nil),
			"85000000 01000000 03000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000"},
		{"SWITCH_DATA_PATH", SwitchDataPath{DataPathVF}.Marshal(nil),
			"81000000 01000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000"},
		{"SEND_VF_ASSOCIATION", VFAssociation{1, 9}.Marshal(nil),
			"80000000 01000000 09000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000"},
		{"SEND_INDIRECTION_TABLE", IndirectionTable{Table: [16]uint32{0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3}}.Marshal(nil),
			"86000000 10000000 0c000000 " + strings.Repeat("00000000 01000000 02000000 03000000 ", 4)},
	}
	for _, c := range cases {
		wiretest.Golden(t, c.name, c.got, c.want)
	}
}

func TestNVSPMarshalAppendsWithoutAllocating(t *testing.T) {
	buf := make([]byte, 0, 64)
	allocs := testing.AllocsPerRun(100, func() {
		b := RNDISPacket{RMCData, 3, 100}.Marshal(buf[:0])
		b = RNDISComplete{StatusSuccess}.Marshal(b)
		if len(b) != 48 {
			panic("size")
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocs per run, want 0", allocs)
	}
}

func TestNVSPDataPathDecodeDoesNotAllocate(t *testing.T) {
	pkt := RNDISPacket{RMCData, NoSection, 0}.Marshal(nil)
	comp := RNDISComplete{StatusSuccess}.Marshal(nil)
	var p RNDISPacket
	var c RNDISComplete
	allocs := testing.AllocsPerRun(100, func() {
		if typ, err := MessageType(pkt); err != nil || typ != TypeSendRNDISPkt {
			panic("type")
		}
		if p.Unmarshal(pkt) != nil || c.Unmarshal(comp) != nil {
			panic("decode")
		}
		if _, _, _, err := p.Section(6144, 10); err != nil {
			panic(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocs per run, want 0", allocs)
	}
}

func TestRecvBufCompleteValidate(t *testing.T) {
	good := RecvBufComplete{StatusSuccess, 1, RecvBufSection{0, 1806, 100, 180600}}
	if err := good.Validate(180600); err != nil {
		t.Fatalf("exact fit: %v", err)
	}
	if err := good.Validate(31 << 20); err != nil {
		t.Fatalf("roomy buffer: %v", err)
	}
	cases := []struct {
		name   string
		mut    func(*RecvBufComplete)
		bufLen int
		kind   protoerr.Kind
	}{
		{"no sections", func(m *RecvBufComplete) { m.NumSections = 0 }, 1 << 20, protoerr.KindSectionCount},
		{"two sections", func(m *RecvBufComplete) { m.NumSections = 2 }, 1 << 20, protoerr.KindSectionCount},
		{"offset", func(m *RecvBufComplete) { m.Section.Offset = 4096 }, 1 << 20, protoerr.KindSectionOffset},
		{"tiny sub-allocation", func(m *RecvBufComplete) { m.Section.SubAllocSize = 67 }, 1 << 20, protoerr.KindSectionSize},
		{"zero count", func(m *RecvBufComplete) { m.Section.NumSubAllocs = 0 }, 1 << 20, protoerr.KindSectionFit},
		{"one too many", func(m *RecvBufComplete) {}, 180599, protoerr.KindSectionFit},
		{"product overflows 32 bits", func(m *RecvBufComplete) {
			m.Section.SubAllocSize, m.Section.NumSubAllocs = 0x10000, 0x10001
		}, 1 << 20, protoerr.KindSectionFit},
		{"max values", func(m *RecvBufComplete) {
			m.Section.SubAllocSize, m.Section.NumSubAllocs = 0xffffffff, 0xffffffff
		}, 31 << 20, protoerr.KindSectionFit},
		{"end offset past buffer", func(m *RecvBufComplete) { m.Section.EndOffset = 1<<20 + 1 }, 1 << 20, protoerr.KindSectionFit},
		{"negative buffer", func(m *RecvBufComplete) {}, -1, protoerr.KindSectionFit},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := good
			c.mut(&m)
			kinds.Want(t, m.Validate(c.bufLen), c.kind)
		})
	}
}

func TestSendBufCompleteSectionCount(t *testing.T) {
	m := SendBufComplete{StatusSuccess, 6144}
	n, err := m.SectionCount(16 << 20)
	if err != nil || n != 2730 {
		t.Fatalf("16 MiB / 6144 = %d, %v; want 2730 (docs/protocol/netvsc.md §2.5)", n, err)
	}
	for _, c := range []struct {
		size   uint32
		bufLen int
		kind   protoerr.Kind
	}{
		{0, 1 << 20, protoerr.KindSectionSize},
		{64, 1 << 20, protoerr.KindSectionSize},
		{6146, 1 << 20, protoerr.KindSectionSize},
		{6144, 6143, protoerr.KindSectionFit},
		{6144, -5, protoerr.KindSectionFit},
	} {
		m := SendBufComplete{StatusSuccess, c.size}
		_, err := m.SectionCount(c.bufLen)
		kinds.Want(t, err, c.kind)
	}
}

func TestRNDISPacketSection(t *testing.T) {
	m := RNDISPacket{RMCData, 9, 1000}
	off, n, ok, err := m.Section(6144, 10)
	if err != nil || !ok || off != 9*6144 || n != 1000 {
		t.Fatalf("Section = %d, %d, %v, %v", off, n, ok, err)
	}
	m = RNDISPacket{RMCData, NoSection, 0}
	if _, _, ok, err := m.Section(6144, 10); ok || err != nil {
		t.Fatalf("invalid index: ok=%v err=%v, want GPA-only", ok, err)
	}
	for _, c := range []struct {
		m    RNDISPacket
		kind protoerr.Kind
	}{
		{RNDISPacket{RMCData, 10, 100}, protoerr.KindSectionIndex},
		{RNDISPacket{RMCData, 0xfffffffe, 100}, protoerr.KindSectionIndex},
		{RNDISPacket{RMCData, 1, 6145}, protoerr.KindSectionSize},
		{RNDISPacket{RMCData, 1, 0}, protoerr.KindSectionSize},
	} {
		_, _, _, err := c.m.Section(6144, 10)
		kinds.Want(t, err, c.kind)
	}
}

func TestIndirectionTableOffsets(t *testing.T) {
	var tab IndirectionTable
	for i := range tab.Table {
		tab.Table[i] = uint32(15 - i)
	}
	// Written at offset 40, as a buggy host places it, with a wrong offset.
	tab.Offset = 40
	b := tab.Marshal(nil)
	if len(b) != 40+64 {
		t.Fatalf("len %d", len(b))
	}
	le.PutUint32(b[8:], 12) // the host reports 12 but wrote at 40
	var got IndirectionTable
	if err := got.UnmarshalVersion(b, Version6); err != nil {
		t.Fatal(err)
	}
	if got.Offset != 40 || got.Table != tab.Table {
		t.Fatalf("NVSP 6 fix: offset %d table %v", got.Offset, got.Table)
	}
	// At 6.1 the reported offset is trusted.
	if err := got.UnmarshalVersion(b, Version61); err != nil {
		t.Fatal(err)
	}
	if got.Offset != 12 || got.Table == tab.Table {
		t.Fatalf("NVSP 6.1 should read at 12: offset %d", got.Offset)
	}
	// openvmm's 76-byte message is too short for the fix at any version.
	tab.Offset = 0
	b = tab.Marshal(nil)
	if err := got.UnmarshalVersion(b, Version5); err != nil || got.Offset != 12 || got.Table != tab.Table {
		t.Fatalf("short message: %v offset %d", err, got.Offset)
	}

	bad := bytes.Clone(b)
	le.PutUint32(bad[4:], 8)
	kinds.Want(t, got.Unmarshal(bad), protoerr.KindTableCount)
	bad = bytes.Clone(b)
	le.PutUint32(bad[8:], 13)
	kinds.Want(t, got.Unmarshal(bad), protoerr.KindTableOffset)
	le.PutUint32(bad[8:], 0xfffffff0)
	kinds.Want(t, got.Unmarshal(bad), protoerr.KindTableOffset)
	kinds.Want(t, got.Unmarshal(b[:40]), protoerr.KindTableOffset)
}

func TestNVSPTypeAllowedFollowsOpenvmmGating(t *testing.T) {
	cases := []struct {
		t    Type
		v    uint32
		want bool
	}{
		{TypeInit, 0, true},
		{TypeSendRNDISPkt, Version1, true},
		{TypeSendNDISConfig, Version1, false},
		{TypeSendNDISConfig, Version2, true},
		{TypeSwitchDataPath, Version2, false},
		{TypeSwitchDataPath, Version4, true},
		{TypeSubchannel, Version4, false},
		{TypeSubchannel, Version61, true},
		{TypeSendVFAssociation, Version61, false},
		{TypeInitComplete, Version61, false},
	}
	for _, c := range cases {
		if got := TypeAllowed(c.t, c.v); got != c.want {
			t.Errorf("TypeAllowed(%v, %#x) = %v", c.t, c.v, got)
		}
	}
}

func TestVersionHelpers(t *testing.T) {
	vs := Versions()
	if vs[0] != 0x60001 || vs[len(vs)-1] != 2 || len(vs) != 6 {
		t.Fatalf("Versions = %#x", vs)
	}
	if NDISVersionFor(Version4) != 0x00060001 || NDISVersionFor(Version5) != 0x0006001e {
		t.Fatal("NDISVersionFor")
	}
	if v := NewNDISVersion(NDISVersion630); v.Major != 6 || v.Minor != 30 || v.Version() != NDISVersion630 {
		t.Fatalf("NDIS version split %+v", v)
	}
	if MessageSizeFor(Version6) != 28 || MessageSizeFor(Version61) != 40 {
		t.Fatal("MessageSizeFor")
	}
	// Every message but the table fits in openvmm's 28-byte form.
	for _, c := range nvspCases() {
		if c.typ == TypeSendIndirectionTable {
			continue
		}
		b := c.in.Marshal(nil)
		if err := c.out.Unmarshal(b[:min(len(b), MessageSizeV1)]); err != nil {
			t.Errorf("%s truncated to 28: %v", c.name, err)
		}
	}
	if TypeSendRNDISPkt.String() != "SEND_RNDIS_PKT" || Type(999).String() != "nvsp type(999)" {
		t.Fatal("Type.String")
	}
	if StatusSuccess.String() != "success" || Status(99).String() != "nvsp status(99)" {
		t.Fatal("Status.String")
	}
}
