package netvsc

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// kindsSeen records every kind a test provoked through wantKind.
var kindsSeen sync.Map

// TestMain checks, after a full run, that every listed Kind was provoked
// by some test (the house rule: "a test for each kind").
func TestMain(m *testing.M) {
	code := m.Run()
	full := flag.Lookup("test.run").Value.String() == "" && flag.Lookup("test.fuzz").Value.String() == ""
	if code == 0 && full {
		for _, k := range Kinds() {
			if _, ok := kindsSeen.Load(k); !ok {
				fmt.Fprintf(os.Stderr, "no test provokes Kind %q\n", k)
				code = 1
			}
		}
	}
	os.Exit(code)
}

// wantKind fails unless err is a *ProtocolError of kind k.
func wantKind(t *testing.T, err error, k Kind) {
	t.Helper()
	kindsSeen.Store(k, true)
	pe, ok := IsProtocolError(err)
	if !ok {
		t.Fatalf("got error %v, want a *ProtocolError of kind %q", err, k)
	}
	if pe.Kind != k {
		t.Fatalf("got kind %q (%v), want %q", pe.Kind, err, k)
	}
	if !strings.HasPrefix(err.Error(), "netvsc: ") {
		t.Fatalf("error %q lacks the package prefix", err)
	}
}

// hexBytes parses space-separated hex bytes, for golden layouts written as
// one u32 (4 bytes) per group.
func hexBytes(t testing.TB, s string) []byte {
	t.Helper()
	var out []byte
	for _, f := range strings.Fields(s) {
		if len(f)%2 != 0 {
			t.Fatalf("odd hex group %q", f)
		}
		for i := 0; i < len(f); i += 2 {
			var v byte
			for _, c := range f[i : i+2] {
				v <<= 4
				switch {
				case c >= '0' && c <= '9':
					v |= byte(c - '0')
				case c >= 'a' && c <= 'f':
					v |= byte(c - 'a' + 10)
				default:
					t.Fatalf("bad hex %q", f)
				}
			}
			out = append(out, v)
		}
	}
	return out
}

type marshaler interface{ Marshal([]byte) []byte }
type unmarshaler interface{ Unmarshal([]byte) error }

// nvspCases is one value of every NVSP message, with a fresh decoder for it.
func nvspCases() []struct {
	name string
	in   marshaler
	out  unmarshaler
	typ  NVSPType
	size int
} {
	var tab NVSPIndirectionTable
	for i := range tab.Table {
		tab.Table[i] = uint32(i % 3)
	}
	tab.Offset = 12
	return []struct {
		name string
		in   marshaler
		out  unmarshaler
		typ  NVSPType
		size int
	}{
		{"init", NVSPInit{NVSPProtocolVersion61, NVSPProtocolVersion61}, &NVSPInit{}, NVSPMsgTypeInit, 40},
		{"init complete", NVSPInitComplete{0xffffffff, 34, NVSPStatSuccess}, &NVSPInitComplete{}, NVSPMsgTypeInitComplete, 40},
		{"ndis version", NewNVSPNDISVersion(NDISVersion630), &NVSPNDISVersion{}, NVSPMsg1TypeSendNDISVer, 40},
		{"ndis config", NVSPNDISConfig{1514, NDISConfigCapIEEE8021Q | NDISConfigCapSRIOV | 1<<40}, &NVSPNDISConfig{}, NVSPMsg2TypeSendNDISConfig, 40},
		{"recv buf", NVSPRecvBuf{0x1234, NVSRxBufSig}, &NVSPRecvBuf{}, NVSPMsg1TypeSendRecvBuf, 40},
		{"recv buf complete", NVSPRecvBufComplete{NVSPStatSuccess, 1, NVSPRecvBufSection{0, 1806, 18000, 1806 * 18000}}, &NVSPRecvBufComplete{}, NVSPMsg1TypeSendRecvBufComplete, 40},
		{"revoke recv buf", NVSPRevokeRecvBuf{NVSRxBufSig}, &NVSPRevokeRecvBuf{}, NVSPMsg1TypeRevokeRecvBuf, 40},
		{"send buf", NVSPSendBuf{0x5678, NVSChimSig}, &NVSPSendBuf{}, NVSPMsg1TypeSendSendBuf, 40},
		{"send buf complete", NVSPSendBufComplete{NVSPStatSuccess, 6144}, &NVSPSendBufComplete{}, NVSPMsg1TypeSendSendBufComplete, 40},
		{"revoke send buf", NVSPRevokeSendBuf{NVSChimSig}, &NVSPRevokeSendBuf{}, NVSPMsg1TypeRevokeSendBuf, 40},
		{"rndis packet", NVSPRNDISPacket{RMCData, 7, 1558}, &NVSPRNDISPacket{}, NVSPMsg1TypeSendRNDISPkt, 40},
		{"rndis packet gpa", NVSPRNDISPacket{RMCControl, NVSChimIdxInvalid, 0}, &NVSPRNDISPacket{}, NVSPMsg1TypeSendRNDISPkt, 40},
		{"rndis complete", NVSPRNDISComplete{NVSPStatFail}, &NVSPRNDISComplete{}, NVSPMsg1TypeSendRNDISPktComplete, 8},
		{"vf association", NVSPVFAssociation{1, 0x2a}, &NVSPVFAssociation{}, NVSPMsg4TypeSendVFAssociation, 40},
		{"switch data path", NVSPSwitchDataPath{DataPathVF}, &NVSPSwitchDataPath{}, NVSPMsg4TypeSwitchDataPath, 40},
		{"subchannel request", NVSPSubchannelRequest{NVSPSubchannelAllocate, 7}, &NVSPSubchannelRequest{}, NVSPMsg5TypeSubchannel, 40},
		{"subchannel complete", NVSPSubchannelComplete{NVSPStatSuccess, 5}, &NVSPSubchannelComplete{}, NVSPMsg5TypeSubchannel, 40},
		{"indirection table", tab, &NVSPIndirectionTable{}, NVSPMsg5TypeSendIndirectionTable, NVSPIndirectionTableSize},
	}
}

func TestNVSPRoundTripEveryMessage(t *testing.T) {
	for _, c := range nvspCases() {
		t.Run(c.name, func(t *testing.T) {
			prefix := []byte{0xee}
			b := c.in.Marshal(prefix)
			if !bytes.Equal(b[:1], prefix) {
				t.Fatal("Marshal clobbered dst")
			}
			b = b[1:]
			if len(b) != c.size {
				t.Fatalf("Marshal emitted %d bytes, want %d", len(b), c.size)
			}
			typ, err := NVSPMessageType(b)
			if err != nil || typ != c.typ {
				t.Fatalf("NVSPMessageType = %v, %v; want %v", typ, err, c.typ)
			}
			if err := c.out.Unmarshal(b); err != nil {
				t.Fatalf("Unmarshal: %v", err)
			}
			got := reflect.ValueOf(c.out).Elem().Interface()
			if !reflect.DeepEqual(got, c.in) {
				t.Fatalf("round trip: got %+v, want %+v", got, c.in)
			}
		})
	}
}

func TestNVSPDecodersRejectShortAndWrongType(t *testing.T) {
	for _, c := range nvspCases() {
		t.Run(c.name, func(t *testing.T) {
			b := c.in.Marshal(nil)
			// Truncated to 3 bytes (no type), then to just below the fields.
			wantKind(t, c.out.Unmarshal(b[:3]), KindShort)
			need := map[NVSPType]int{
				NVSPMsgTypeInit: 12, NVSPMsgTypeInitComplete: 16, NVSPMsg1TypeSendNDISVer: 12,
				NVSPMsg2TypeSendNDISConfig: 20, NVSPMsg1TypeSendRecvBuf: 10,
				NVSPMsg1TypeSendRecvBufComplete: 28, NVSPMsg1TypeRevokeRecvBuf: 6,
				NVSPMsg1TypeSendSendBuf: 10, NVSPMsg1TypeSendSendBufComplete: 12,
				NVSPMsg1TypeRevokeSendBuf: 6, NVSPMsg1TypeSendRNDISPkt: 16,
				NVSPMsg1TypeSendRNDISPktComplete: 8, NVSPMsg4TypeSendVFAssociation: 12,
				NVSPMsg4TypeSwitchDataPath: 8, NVSPMsg5TypeSubchannel: 12,
				NVSPMsg5TypeSendIndirectionTable: 12,
			}[c.typ]
			wantKind(t, c.out.Unmarshal(b[:need-1]), KindShort)
			// Exactly the field extent decodes (28-byte and 8-byte senders).
			if c.typ != NVSPMsg5TypeSendIndirectionTable {
				if err := c.out.Unmarshal(b[:need]); err != nil {
					t.Fatalf("field-extent message: %v", err)
				}
			}
			bad := bytes.Clone(b)
			le.PutUint32(bad, uint32(c.typ)+1000)
			wantKind(t, c.out.Unmarshal(bad), KindType)
		})
	}
	_, err := NVSPMessageType([]byte{1, 0})
	wantKind(t, err, KindShort)
}

func TestNVSPGoldenLayouts(t *testing.T) {
	cases := []struct {
		name string
		got  []byte
		want string
	}{
		{"INIT 6.1", NVSPInit{NVSPProtocolVersion61, NVSPProtocolVersion61}.Marshal(nil),
			"01000000 01000600 01000600 00000000 00000000 00000000 00000000 00000000 00000000 00000000"},
		{"SEND_NDIS_CONFIG", NVSPNDISConfig{1514, NDISConfigCapIEEE8021Q | NDISConfigCapSRIOV}.Marshal(nil),
			"7d000000 ea050000 00000000 0c000000 00000000 00000000 00000000 00000000 00000000 00000000"},
		{"SEND_NDIS_VER 6.30", NewNVSPNDISVersion(NDISVersion630).Marshal(nil),
			"64000000 06000000 1e000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000"},
		{"SEND_RECV_BUF", NVSPRecvBuf{0x01020304, NVSRxBufSig}.Marshal(nil),
			"65000000 04030201 feca0000 00000000 00000000 00000000 00000000 00000000 00000000 00000000"},
		{"SEND_RECV_BUF_COMPLETE", NVSPRecvBufComplete{NVSPStatSuccess, 1, NVSPRecvBufSection{0, 1806, 100, 180600}}.Marshal(nil),
			"66000000 01000000 01000000 00000000 0e070000 64000000 78c10200 00000000 00000000 00000000"},
		{"SEND_SEND_BUF", NVSPSendBuf{7, NVSChimSig}.Marshal(nil),
			"68000000 07000000 cefa0000 00000000 00000000 00000000 00000000 00000000 00000000 00000000"},
		{"SEND_SEND_BUF_COMPLETE", NVSPSendBufComplete{NVSPStatSuccess, 6144}.Marshal(nil),
			"69000000 01000000 00180000 00000000 00000000 00000000 00000000 00000000 00000000 00000000"},
		{"SEND_RNDIS_PKT section", NVSPRNDISPacket{RMCData, 5, 1500}.Marshal(nil),
			"6b000000 00000000 05000000 dc050000 00000000 00000000 00000000 00000000 00000000 00000000"},
		{"SEND_RNDIS_PKT rx", NVSPRNDISPacket{RMCControl, NVSChimIdxInvalid, 0}.Marshal(nil),
			"6b000000 01000000 ffffffff 00000000 00000000 00000000 00000000 00000000 00000000 00000000"},
		{"SEND_RNDIS_PKT_COMPLETE", NVSPRNDISComplete{NVSPStatSuccess}.Marshal(nil),
			"6c000000 01000000"},
		{"SUBCHANNEL", NVSPSubchannelRequest{NVSPSubchannelAllocate, 3}.Marshal(nil),
			"85000000 01000000 03000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000"},
		{"SWITCH_DATA_PATH", NVSPSwitchDataPath{DataPathVF}.Marshal(nil),
			"81000000 01000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000"},
		{"SEND_VF_ASSOCIATION", NVSPVFAssociation{1, 9}.Marshal(nil),
			"80000000 01000000 09000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000"},
		{"SEND_INDIRECTION_TABLE", NVSPIndirectionTable{Table: [16]uint32{0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3}}.Marshal(nil),
			"86000000 10000000 0c000000 " + strings.Repeat("00000000 01000000 02000000 03000000 ", 4)},
	}
	for _, c := range cases {
		if want := hexBytes(t, c.want); !bytes.Equal(c.got, want) {
			t.Errorf("%s:\n got % x\nwant % x", c.name, c.got, want)
		}
	}
}

func TestNVSPMarshalAppendsWithoutAllocating(t *testing.T) {
	buf := make([]byte, 0, 64)
	allocs := testing.AllocsPerRun(100, func() {
		b := NVSPRNDISPacket{RMCData, 3, 100}.Marshal(buf[:0])
		b = NVSPRNDISComplete{NVSPStatSuccess}.Marshal(b)
		if len(b) != 48 {
			panic("size")
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocs per run, want 0", allocs)
	}
}

func TestNVSPDataPathDecodeDoesNotAllocate(t *testing.T) {
	pkt := NVSPRNDISPacket{RMCData, NVSChimIdxInvalid, 0}.Marshal(nil)
	comp := NVSPRNDISComplete{NVSPStatSuccess}.Marshal(nil)
	var p NVSPRNDISPacket
	var c NVSPRNDISComplete
	allocs := testing.AllocsPerRun(100, func() {
		if typ, err := NVSPMessageType(pkt); err != nil || typ != NVSPMsg1TypeSendRNDISPkt {
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
	good := NVSPRecvBufComplete{NVSPStatSuccess, 1, NVSPRecvBufSection{0, 1806, 100, 180600}}
	if err := good.Validate(180600); err != nil {
		t.Fatalf("exact fit: %v", err)
	}
	if err := good.Validate(31 << 20); err != nil {
		t.Fatalf("roomy buffer: %v", err)
	}
	cases := []struct {
		name   string
		mut    func(*NVSPRecvBufComplete)
		bufLen int
		kind   Kind
	}{
		{"no sections", func(m *NVSPRecvBufComplete) { m.NumSections = 0 }, 1 << 20, KindSectionCount},
		{"two sections", func(m *NVSPRecvBufComplete) { m.NumSections = 2 }, 1 << 20, KindSectionCount},
		{"offset", func(m *NVSPRecvBufComplete) { m.Section.Offset = 4096 }, 1 << 20, KindSectionOffset},
		{"tiny sub-allocation", func(m *NVSPRecvBufComplete) { m.Section.SubAllocSize = 67 }, 1 << 20, KindSectionSize},
		{"zero count", func(m *NVSPRecvBufComplete) { m.Section.NumSubAllocs = 0 }, 1 << 20, KindSectionFit},
		{"one too many", func(m *NVSPRecvBufComplete) {}, 180599, KindSectionFit},
		{"product overflows 32 bits", func(m *NVSPRecvBufComplete) {
			m.Section.SubAllocSize, m.Section.NumSubAllocs = 0x10000, 0x10001
		}, 1 << 20, KindSectionFit},
		{"max values", func(m *NVSPRecvBufComplete) {
			m.Section.SubAllocSize, m.Section.NumSubAllocs = 0xffffffff, 0xffffffff
		}, 31 << 20, KindSectionFit},
		{"end offset past buffer", func(m *NVSPRecvBufComplete) { m.Section.EndOffset = 1<<20 + 1 }, 1 << 20, KindSectionFit},
		{"negative buffer", func(m *NVSPRecvBufComplete) {}, -1, KindSectionFit},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := good
			c.mut(&m)
			wantKind(t, m.Validate(c.bufLen), c.kind)
		})
	}
}

func TestSendBufCompleteSectionCount(t *testing.T) {
	m := NVSPSendBufComplete{NVSPStatSuccess, 6144}
	n, err := m.SectionCount(16 << 20)
	if err != nil || n != 2730 {
		t.Fatalf("16 MiB / 6144 = %d, %v; want 2730 (netvsc.md §2.5)", n, err)
	}
	for _, c := range []struct {
		size   uint32
		bufLen int
		kind   Kind
	}{
		{0, 1 << 20, KindSectionSize},
		{64, 1 << 20, KindSectionSize},
		{6146, 1 << 20, KindSectionSize},
		{6144, 6143, KindSectionFit},
		{6144, -5, KindSectionFit},
	} {
		m := NVSPSendBufComplete{NVSPStatSuccess, c.size}
		_, err := m.SectionCount(c.bufLen)
		wantKind(t, err, c.kind)
	}
}

func TestRNDISPacketSection(t *testing.T) {
	m := NVSPRNDISPacket{RMCData, 9, 1000}
	off, n, ok, err := m.Section(6144, 10)
	if err != nil || !ok || off != 9*6144 || n != 1000 {
		t.Fatalf("Section = %d, %d, %v, %v", off, n, ok, err)
	}
	m = NVSPRNDISPacket{RMCData, NVSChimIdxInvalid, 0}
	if _, _, ok, err := m.Section(6144, 10); ok || err != nil {
		t.Fatalf("invalid index: ok=%v err=%v, want GPA-only", ok, err)
	}
	for _, c := range []struct {
		m    NVSPRNDISPacket
		kind Kind
	}{
		{NVSPRNDISPacket{RMCData, 10, 100}, KindSectionIndex},
		{NVSPRNDISPacket{RMCData, 0xfffffffe, 100}, KindSectionIndex},
		{NVSPRNDISPacket{RMCData, 1, 6145}, KindSectionSize},
		{NVSPRNDISPacket{RMCData, 1, 0}, KindSectionSize},
	} {
		_, _, _, err := c.m.Section(6144, 10)
		wantKind(t, err, c.kind)
	}
}

func TestIndirectionTableOffsets(t *testing.T) {
	var tab NVSPIndirectionTable
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
	var got NVSPIndirectionTable
	if err := got.UnmarshalVersion(b, NVSPProtocolVersion6); err != nil {
		t.Fatal(err)
	}
	if got.Offset != 40 || got.Table != tab.Table {
		t.Fatalf("NVSP 6 fix: offset %d table %v", got.Offset, got.Table)
	}
	// At 6.1 the reported offset is trusted.
	if err := got.UnmarshalVersion(b, NVSPProtocolVersion61); err != nil {
		t.Fatal(err)
	}
	if got.Offset != 12 || got.Table == tab.Table {
		t.Fatalf("NVSP 6.1 should read at 12: offset %d", got.Offset)
	}
	// openvmm's 76-byte message is too short for the fix at any version.
	tab.Offset = 0
	b = tab.Marshal(nil)
	if err := got.UnmarshalVersion(b, NVSPProtocolVersion5); err != nil || got.Offset != 12 || got.Table != tab.Table {
		t.Fatalf("short message: %v offset %d", err, got.Offset)
	}

	bad := bytes.Clone(b)
	le.PutUint32(bad[4:], 8)
	wantKind(t, got.Unmarshal(bad), KindTableCount)
	bad = bytes.Clone(b)
	le.PutUint32(bad[8:], 13)
	wantKind(t, got.Unmarshal(bad), KindTableOffset)
	le.PutUint32(bad[8:], 0xfffffff0)
	wantKind(t, got.Unmarshal(bad), KindTableOffset)
	wantKind(t, got.Unmarshal(b[:40]), KindTableOffset)
}

func TestNVSPTypeAllowedFollowsOpenvmmGating(t *testing.T) {
	cases := []struct {
		t    NVSPType
		v    uint32
		want bool
	}{
		{NVSPMsgTypeInit, 0, true},
		{NVSPMsg1TypeSendRNDISPkt, NVSPProtocolVersion1, true},
		{NVSPMsg2TypeSendNDISConfig, NVSPProtocolVersion1, false},
		{NVSPMsg2TypeSendNDISConfig, NVSPProtocolVersion2, true},
		{NVSPMsg4TypeSwitchDataPath, NVSPProtocolVersion2, false},
		{NVSPMsg4TypeSwitchDataPath, NVSPProtocolVersion4, true},
		{NVSPMsg5TypeSubchannel, NVSPProtocolVersion4, false},
		{NVSPMsg5TypeSubchannel, NVSPProtocolVersion61, true},
		{NVSPMsg4TypeSendVFAssociation, NVSPProtocolVersion61, false},
		{NVSPMsgTypeInitComplete, NVSPProtocolVersion61, false},
	}
	for _, c := range cases {
		if got := NVSPTypeAllowed(c.t, c.v); got != c.want {
			t.Errorf("NVSPTypeAllowed(%v, %#x) = %v", c.t, c.v, got)
		}
	}
}

func TestVersionHelpers(t *testing.T) {
	vs := NVSPVersions()
	if vs[0] != 0x60001 || vs[len(vs)-1] != 2 || len(vs) != 6 {
		t.Fatalf("NVSPVersions = %#x", vs)
	}
	if NDISVersionFor(NVSPProtocolVersion4) != 0x00060001 || NDISVersionFor(NVSPProtocolVersion5) != 0x0006001e {
		t.Fatal("NDISVersionFor")
	}
	if v := NewNVSPNDISVersion(NDISVersion630); v.Major != 6 || v.Minor != 30 || v.Version() != NDISVersion630 {
		t.Fatalf("NDIS version split %+v", v)
	}
	if NVSPMessageSizeFor(NVSPProtocolVersion6) != 28 || NVSPMessageSizeFor(NVSPProtocolVersion61) != 40 {
		t.Fatal("NVSPMessageSizeFor")
	}
	// Every message but the table fits in openvmm's 28-byte form.
	for _, c := range nvspCases() {
		if c.typ == NVSPMsg5TypeSendIndirectionTable {
			continue
		}
		b := c.in.Marshal(nil)
		if err := c.out.Unmarshal(b[:min(len(b), NVSPMessageSizeV1)]); err != nil {
			t.Errorf("%s truncated to 28: %v", c.name, err)
		}
	}
	if NVSPMsg1TypeSendRNDISPkt.String() != "SEND_RNDIS_PKT" || NVSPType(999).String() != "nvsp type(999)" {
		t.Fatal("NVSPType.String")
	}
	if NVSPStatSuccess.String() != "success" || NVSPStatus(99).String() != "nvsp status(99)" {
		t.Fatal("NVSPStatus.String")
	}
}

func TestKindsAreListedAndNamed(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range Kinds() {
		s := k.String()
		if s == "" || strings.HasPrefix(s, "kind(") || seen[s] {
			t.Fatalf("kind %d has name %q", k, s)
		}
		seen[s] = true
	}
	if len(Kinds()) != int(kindEnd-1) {
		t.Fatal("Kinds incomplete")
	}
	if Kind(0).String() != "kind(0)" {
		t.Fatal("unknown kind name")
	}
}
