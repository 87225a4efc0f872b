package rndis

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"

	"github.com/vmbusd/vmbusd/internal/wiretest"
	"github.com/vmbusd/vmbusd/netvsc/nvsp"
	"github.com/vmbusd/vmbusd/netvsc/protoerr"
)

func rndisControlCases() []struct {
	name string
	in   wiretest.Marshaler
	out  wiretest.Unmarshaler
	typ  Type
	size int
} {
	return []struct {
		name string
		in   wiretest.Marshaler
		out  wiretest.Unmarshaler
		typ  Type
		size int
	}{
		{"initialize", Initialize{1, MajorVersion, MinorVersion, GuestMaxTransferSize}, &Initialize{}, TypeInitialize, 24},
		{"initialize cmplt", InitializeComplete{1, StatusSuccess, 1, 0, DFConnectionless, Medium8023, 8, 0xEFFFFFFF, 3, 0, 0}, &InitializeComplete{}, TypeInitializeComplete, 52},
		{"halt", Halt{9}, &Halt{}, TypeHalt, 12},
		{"query", Query{2, OIDGenReceiveScaleCapabilities, RSSCapabilitiesQueryHeader().Marshal(nil), 0}, &Query{}, TypeQuery, 32},
		{"query no info", Query{3, OID8023PermanentAddress, nil, 0}, &Query{}, TypeQuery, 28},
		{"query cmplt", QueryComplete{3, StatusSuccess, []byte{0, 0x15, 0x5d, 1, 2, 3}}, &QueryComplete{}, TypeQueryComplete, 30},
		{"query cmplt fail", QueryComplete{4, StatusNotSupported, nil}, &QueryComplete{}, TypeQueryComplete, 24},
		{"set", Set{5, OIDGenCurrentPacketFilter, AppendInfoUint32(nil, NDISPacketFilterDefault), 0}, &Set{}, TypeSet, 32},
		{"set cmplt", SetComplete{5, StatusInvalidParameter}, &SetComplete{}, TypeSetComplete, 16},
		{"reset", Reset{}, &Reset{}, TypeReset, 12},
		{"reset cmplt", ResetComplete{StatusSuccess, 1}, &ResetComplete{}, TypeResetComplete, 16},
		{"keepalive", Keepalive{6}, &Keepalive{}, TypeKeepalive, 12},
		{"keepalive cmplt", KeepaliveComplete{6, StatusFailure}, &KeepaliveComplete{}, TypeKeepaliveComplete, 16},
		{"indicate", IndicateStatus{StatusMediaConnect, nil}, &IndicateStatus{}, TypeIndicateStatus, 20},
		{"indicate speed", IndicateStatus{StatusLinkSpeedChange, AppendInfoUint32(nil, 100000000)}, &IndicateStatus{}, TypeIndicateStatus, 24},
	}
}

// normalize maps nil and empty slices to nil so DeepEqual compares content.
func normalize(v any) any {
	rv := reflect.ValueOf(&v).Elem().Elem()
	c := reflect.New(rv.Type()).Elem()
	c.Set(rv)
	for i := 0; i < c.NumField(); i++ {
		if f := c.Field(i); f.Kind() == reflect.Slice && f.Len() == 0 {
			f.Set(reflect.Zero(f.Type()))
		}
	}
	return c.Interface()
}

func TestRNDISControlRoundTripEveryMessage(t *testing.T) {
	for _, c := range rndisControlCases() {
		t.Run(c.name, func(t *testing.T) {
			b := wiretest.Append(t, c.in)
			typ, n, err := ParseHeader(b)
			if err != nil || typ != c.typ || n != c.size || len(b) != c.size {
				t.Fatalf("header = %v, %d, %v (len %d); want %v, %d", typ, n, err, len(b), c.typ, c.size)
			}
			if typ2, err := MessageType(b); err != nil || typ2 != c.typ {
				t.Fatalf("MessageType = %v, %v", typ2, err)
			}
			// Trailing bytes past MessageLength (a sub-allocation) are ignored.
			wiretest.DecodesTo(t, append(bytes.Clone(b), 0xaa, 0xbb, 0xcc), c.out, c.in, normalize)
		})
	}
}

func TestRNDISControlDecodersRejectMalformedHeaders(t *testing.T) {
	for _, c := range rndisControlCases() {
		t.Run(c.name, func(t *testing.T) {
			b := c.in.Marshal(nil)
			kinds.Want(t, c.out.Unmarshal(b[:7]), protoerr.KindShort)
			fixed := map[Type]int{
				TypeInitialize: 24, TypeInitializeComplete: 52, TypeHalt: 12,
				TypeQuery: 28, TypeSet: 28, TypeQueryComplete: 24, TypeSetComplete: 16,
				TypeReset: 12, TypeResetComplete: 16, TypeKeepalive: 12,
				TypeKeepaliveComplete: 16, TypeIndicateStatus: 20,
			}[c.typ]
			kinds.Want(t, c.out.Unmarshal(b[:fixed-1]), protoerr.KindShort)

			bad := bytes.Clone(b)
			le.PutUint32(bad, uint32(c.typ)^0x40)
			kinds.Want(t, c.out.Unmarshal(bad), protoerr.KindType)

			bad = bytes.Clone(b)
			le.PutUint32(bad[4:], uint32(fixed-1))
			kinds.Want(t, c.out.Unmarshal(bad), protoerr.KindLength)
			le.PutUint32(bad[4:], uint32(len(b)+1))
			kinds.Want(t, c.out.Unmarshal(bad), protoerr.KindLength)
			le.PutUint32(bad[4:], 0xffffffff)
			kinds.Want(t, c.out.Unmarshal(bad), protoerr.KindLength)
		})
	}
}

func TestRNDISInfoBufferChecks(t *testing.T) {
	info := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	cases := []struct {
		name         string
		msg          []byte
		lenAt, offAt int
		minOff       uint32
		out          wiretest.Unmarshaler
	}{
		{"query", Query{1, OIDGenLinkSpeed, info, 0}.Marshal(nil), 16, 20, 20, &Query{}},
		{"set", Set{1, OIDGenLinkSpeed, info, 0}.Marshal(nil), 16, 20, 20, &Set{}},
		{"query cmplt", QueryComplete{1, 0, info}.Marshal(nil), 16, 20, 16, &QueryComplete{}},
		{"indicate", IndicateStatus{StatusLinkSpeedChange, info}.Marshal(nil), 12, 16, 12, &IndicateStatus{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mut := func(lenV, offV uint32) []byte {
				b := bytes.Clone(c.msg)
				le.PutUint32(b[c.lenAt:], lenV)
				le.PutUint32(b[c.offAt:], offV)
				return b
			}
			kinds.Want(t, c.out.Unmarshal(mut(8, c.minOff-4)), protoerr.KindOffset)
			kinds.Want(t, c.out.Unmarshal(mut(8, 0)), protoerr.KindOffset)
			kinds.Want(t, c.out.Unmarshal(mut(9, c.minOff)), protoerr.KindRange)
			kinds.Want(t, c.out.Unmarshal(mut(8, c.minOff+4)), protoerr.KindRange)
			kinds.Want(t, c.out.Unmarshal(mut(0xffffffff, c.minOff)), protoerr.KindRange)
			kinds.Want(t, c.out.Unmarshal(mut(8, 0xfffffffc)), protoerr.KindRange)
			// A zero-length buffer ignores its offset.
			if err := c.out.Unmarshal(mut(0, 0xdeadbeef)); err != nil {
				t.Fatalf("empty buffer with junk offset: %v", err)
			}
			// A buffer further in (offset 4 bytes later, shorter) is fine.
			if err := c.out.Unmarshal(mut(4, c.minOff+4)); err != nil {
				t.Fatalf("later offset: %v", err)
			}
		})
	}
}

func TestRNDISControlGoldenLayouts(t *testing.T) {
	cases := []struct {
		name string
		got  []byte
		want string
	}{
		{"INITIALIZE", Initialize{1, 1, 0, 0x4000}.Marshal(nil),
			"02000000 18000000 01000000 01000000 00000000 00400000"},
		{"INITIALIZE_CMPLT openvmm", InitializeComplete{1, 0, 1, 0, 1, 0, 8, 0xEFFFFFFF, 3, 0, 0}.Marshal(nil),
			"02000080 34000000 01000000 00000000 01000000 00000000 01000000 00000000 08000000 ffffffef 03000000 00000000 00000000"},
		// info_buf_offset 20 is relative to byte 8: the info starts at 28.
		{"QUERY with input", Query{7, OIDGenReceiveScaleCapabilities, []byte{0x88, 0x02, 0x12, 0x00}, 0}.Marshal(nil),
			"04000000 20000000 07000000 03020100 04000000 14000000 00000000 88021200"},
		{"SET packet filter", Set{8, OIDGenCurrentPacketFilter, AppendInfoUint32(nil, 0x0d), 0}.Marshal(nil),
			"05000000 20000000 08000000 0e010100 04000000 14000000 00000000 0d000000"},
		// openvmm's info_buf_offset 16: the data starts at 24.
		{"QUERY_CMPLT", QueryComplete{7, StatusSuccess, []byte{0x78, 0x56, 0x34, 0x12}}.Marshal(nil),
			"04000080 1c000000 07000000 00000000 04000000 10000000 78563412"},
		{"SET_CMPLT", SetComplete{8, StatusInvalidParameter}.Marshal(nil),
			"05000080 10000000 08000000 0d0000c0"},
		// status_buf_offset 12: the payload starts at 20.
		{"INDICATE_STATUS link speed", IndicateStatus{StatusLinkSpeedChange, AppendInfoUint32(nil, 100000)}.Marshal(nil),
			"07000000 18000000 13000140 04000000 0c000000 a0860100"},
		{"HALT", Halt{3}.Marshal(nil), "03000000 0c000000 03000000"},
		{"RESET_CMPLT", ResetComplete{StatusSuccess, 1}.Marshal(nil), "06000080 10000000 00000000 01000000"},
		{"KEEPALIVE_CMPLT", KeepaliveComplete{4, StatusSuccess}.Marshal(nil), "08000080 10000000 04000000 00000000"},
	}
	for _, c := range cases {
		wiretest.Golden(t, c.name, c.got, c.want)
	}
}

func TestRNDISDecodeReadsInfoAtItsOffset(t *testing.T) {
	// A host may put the data elsewhere than right after the header; the
	// offset (relative to byte 8) decides.
	b := wiretest.Hex(t, "04000080 24000000 07000000 00000000 04000000 18000000 ffffffff ffffffff 0a0b0c0d")
	var m QueryComplete
	if err := m.Unmarshal(b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m.Info, []byte{0x0a, 0x0b, 0x0c, 0x0d}) || m.RequestID != 7 {
		t.Fatalf("info % x id %d", m.Info, m.RequestID)
	}
}

func TestRNDISCompletionRequestID(t *testing.T) {
	for _, c := range []struct {
		b  []byte
		id uint32
	}{
		{InitializeComplete{RequestID: 11}.Marshal(nil), 11},
		{QueryComplete{RequestID: 12}.Marshal(nil), 12},
		{SetComplete{RequestID: 13}.Marshal(nil), 13},
		{KeepaliveComplete{RequestID: 14}.Marshal(nil), 14},
	} {
		_, id, err := CompletionRequestID(c.b)
		if err != nil || id != c.id {
			t.Fatalf("id = %d, %v; want %d", id, err, c.id)
		}
	}
	_, _, err := CompletionRequestID(ResetComplete{}.Marshal(nil))
	kinds.Want(t, err, protoerr.KindType)
	_, _, err = CompletionRequestID(IndicateStatus{}.Marshal(nil))
	kinds.Want(t, err, protoerr.KindType)
	_, _, err = CompletionRequestID(wiretest.Hex(t, "05000080 08000000"))
	kinds.Want(t, err, protoerr.KindLength)
	_, _, err = CompletionRequestID([]byte{1, 2})
	kinds.Want(t, err, protoerr.KindShort)
	_, _, err = ParseHeader(wiretest.Hex(t, "01000000 04000000"))
	kinds.Want(t, err, protoerr.KindLength)
	_, err = MessageType([]byte{1})
	kinds.Want(t, err, protoerr.KindShort)
}

func TestInitializeCmpltPacketAlignment(t *testing.T) {
	for f, want := range map[uint32]int{0: 4, 2: 4, 3: 8, 12: 4096, 31: 4096, 0xffffffff: 4096} {
		m := InitializeComplete{PacketAlignmentFactor: f}
		if got := m.PacketAlignment(); got != want {
			t.Errorf("factor %d: %d, want %d", f, got, want)
		}
	}
}

func testFrame(n int) []byte {
	f := make([]byte, n)
	for i := range f {
		f[i] = byte(i*7 + 3)
	}
	return f
}

func TestRNDISPacketGoldenLayout(t *testing.T) {
	var info PacketInfo
	info.SetChecksum(uint32(NewTxChecksum(TxChecksumIPv4|TxChecksumTCP, 34)))
	info.SetVLAN(NewVLANInfo(5, false, 100))
	dst := make([]byte, 128)
	n, err := PutPacket(dst, &info, []byte{0xaa, 0xbb, 0xcc, 0xdd})
	if err != nil {
		t.Fatal(err)
	}
	wiretest.Golden(t, "PACKET_MSG", dst[:n], ""+
		// type, MessageLength 80, DataOffset 36+32, DataLength 4, no OOB,
		// PPI offset 36, PPI length 32, VcHandle, Reserved
		"01000000 50000000 44000000 04000000 00000000 00000000 00000000 24000000 20000000 00000000 00000000 "+
		// checksum PPI: size 16, type 0, offset 12, IPv4|TCP, transport @34
		"10000000 00000000 0c000000 05002200 "+
		// 802.1Q PPI: size 16, type 6, offset 12, prio 5 | id 100 << 4
		"10000000 06000000 0c000000 45060000 "+
		"aabbccdd")
	if n != PacketLen(&info, 4) {
		t.Fatalf("PacketLen = %d, want %d", PacketLen(&info, 4), n)
	}
}

func TestRNDISPacketRoundTrip(t *testing.T) {
	infos := []*PacketInfo{nil, {}, {Has: InfoHashValue, HashValue: 3}}
	full := &PacketInfo{}
	full.SetChecksum(uint32(RxChecksumTCPOK | RxChecksumIPOK))
	full.SetLSO(NewLSOv2(1448, 34, true))
	full.SetVLAN(VLANInfoFromTCI(0xa00c))
	full.SetHashValue(0xdeadbeef)
	full.SetHashInfo(NDISHashFunctionToeplitz | NDISHashTCPIPv4)
	full.SetPktID(NewPktInfoID(PktInfoSubAlloc|PktInfo1stFrag, 77))
	infos = append(infos, full)
	for i, info := range infos {
		for _, size := range []int{1, 60, 1514, 9000} {
			t.Run(fmt.Sprintf("info%d/%dB", i, size), func(t *testing.T) {
				frame := testFrame(size)
				dst := make([]byte, MaxPacketHeaderLen+size+16)
				n, err := PutPacket(dst, info, frame)
				if err != nil {
					t.Fatal(err)
				}
				p, err := ParsePacket(dst) // all of dst is available
				if err != nil {
					t.Fatal(err)
				}
				if int(p.MessageLength) != n || !bytes.Equal(p.Frame, frame) {
					t.Fatalf("MessageLength %d (want %d), frame ok %v", p.MessageLength, n, bytes.Equal(p.Frame, frame))
				}
				if err := p.Unsupported(); err != nil {
					t.Fatal(err)
				}
				got, err := p.Info()
				if err != nil {
					t.Fatal(err)
				}
				var want PacketInfo
				if info != nil {
					want = *info
				}
				if got != want {
					t.Fatalf("info: got %+v, want %+v", got, want)
				}
			})
		}
	}
}

func TestRNDISPacketOpenvmmReceiveLayout(t *testing.T) {
	// openvmm: PPIs at 44, frame at 256 (DataOffset 248), MessageLength =
	// sub-allocation size, range length = sub-allocation size (docs/protocol/netvsc.md §2.6).
	const subAlloc = 256 + 1514 + 36
	sub := bytes.Repeat([]byte{0x5a}, subAlloc)
	var info PacketInfo
	info.SetChecksum(uint32(RxChecksumIPOK | RxChecksumUDPOK))
	frame := testFrame(1514)
	n, err := PutPacketAt(sub, &info, frame, 256, subAlloc)
	if err != nil || n != subAlloc {
		t.Fatalf("PutPacketAt = %d, %v", n, err)
	}
	p, err := ParsePacket(sub)
	if err != nil {
		t.Fatal(err)
	}
	if p.DataOffset != 248 || p.PerPacketInfoOffset != 36 || p.MessageLength != subAlloc || !bytes.Equal(p.Frame, frame) {
		t.Fatalf("layout %+v", p.PacketHeader)
	}
	if !bytes.Equal(sub[PacketHeaderSize+16:256], make([]byte, 256-60)) {
		t.Fatal("gap between PPIs and frame not zeroed")
	}
	if sub[256+1514] != 0x5a {
		t.Fatal("bytes after the frame were written")
	}
	for _, bad := range [][2]int{{59, subAlloc}, {256, 1000}, {256, subAlloc + 1}} {
		if _, err := PutPacketAt(sub, &info, frame, bad[0], bad[1]); err != ErrBufferTooSmall {
			t.Fatalf("PutPacketAt(%v) = %v", bad, err)
		}
	}
}

func TestRNDISPacketUnalignedDataOffsetIsAccepted(t *testing.T) {
	// "Hyper-V does not meet data offset alignment requirement" (DPDK).
	b := PacketHeader{MessageLength: 44 + 1 + 20, DataOffset: 37, DataLength: 20}.Marshal(nil)
	b = append(b, 0)
	b = append(b, testFrame(20)...)
	p, err := ParsePacket(b)
	if err != nil || !bytes.Equal(p.Frame, testFrame(20)) {
		t.Fatalf("unaligned data offset: %v", err)
	}
}

func TestRNDISPacketDecoderRejectsEachViolation(t *testing.T) {
	var info PacketInfo
	info.SetVLAN(NewVLANInfo(0, false, 7))
	good := make([]byte, 200)
	n, _ := PutPacket(good, &info, testFrame(60))
	good = good[:n] // 44 + 16 + 60 = 120
	field := map[string]int{"len": 4, "doff": 8, "dlen": 12, "ooff": 16, "olen": 20, "onum": 24, "poff": 28, "plen": 32, "vc": 36}
	cases := []struct {
		name  string
		field string
		val   uint32
		trunc int
		kind  protoerr.Kind
	}{
		{"no header", "", 0, 7, protoerr.KindShort},
		{"short header", "", 0, 43, protoerr.KindShort},
		{"message length below header", "len", 43, 0, protoerr.KindLength},
		{"message length past bytes", "len", 121, 0, protoerr.KindLength},
		{"message length huge", "len", 0xffffffff, 0, protoerr.KindLength},
		{"data offset inside header", "doff", 35, 0, protoerr.KindOffset},
		{"data offset zero", "doff", 0, 0, protoerr.KindOffset},
		{"no data", "dlen", 0, 0, protoerr.KindDataLength},
		{"data past message", "dlen", 61, 0, protoerr.KindRange},
		{"data length wraps", "dlen", 0xffffffff, 0, protoerr.KindRange},
		{"data offset wraps", "doff", 0xfffffff0, 0, protoerr.KindRange},
		{"ppi offset inside header", "poff", 32, 0, protoerr.KindOffset},
		{"ppi offset zero", "poff", 0, 0, protoerr.KindOffset},
		{"ppi offset unaligned", "poff", 38, 0, protoerr.KindOffset},
		{"ppi past message", "plen", 200, 0, protoerr.KindRange},
		{"ppi offset wraps", "poff", 0xfffffffc, 0, protoerr.KindRange},
		{"oob past message", "olen", 0x100, 0, protoerr.KindRange},
		{"oob length wraps", "olen", 0xffffffff, 0, protoerr.KindRange},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := bytes.Clone(good)
			if c.field != "" {
				le.PutUint32(b[field[c.field]:], c.val)
			}
			if c.trunc > 0 {
				b = b[:c.trunc]
			}
			_, err := ParsePacket(b)
			kinds.Want(t, err, c.kind)
		})
	}
	bad := bytes.Clone(good)
	le.PutUint32(bad, uint32(TypeQuery))
	_, err := ParsePacket(bad)
	kinds.Want(t, err, protoerr.KindType)
}

func TestRNDISPacketUnsupportedFields(t *testing.T) {
	for _, off := range []int{16, 20, 24, 36} {
		b := make([]byte, 128)
		n, _ := PutPacket(b, nil, testFrame(60))
		b = b[:n]
		v := uint32(1)
		if off == 16 {
			v = 36 // an OOB offset with no OOB data
		}
		if off == 20 {
			le.PutUint32(b[16:], 36)
			v = 4
		}
		le.PutUint32(b[off:], v)
		p, err := ParsePacket(b)
		if err != nil {
			t.Fatalf("@%d: structurally valid packet rejected: %v", off, err)
		}
		kinds.Want(t, p.Unsupported(), protoerr.KindUnsupported)
	}
}

func TestRNDISPacketAggregationInOneSection(t *testing.T) {
	// DPDK: pad the previous packet's MessageLength to the alignment and
	// zero the padding before appending the next (docs/protocol/netvsc.md §3.7). The host
	// walks messages by MessageLength.
	section := bytes.Repeat([]byte{0xff}, 6144)
	frames := [][]byte{testFrame(61), testFrame(1514), testFrame(99)}
	var info PacketInfo
	info.SetHashValue(2)
	used, last := 0, -1
	for _, f := range frames {
		if last >= 0 {
			m, err := PadMessage(section[last:], 8)
			if err != nil {
				t.Fatal(err)
			}
			used = last + m
		}
		n, err := PutPacket(section[used:], &info, f)
		if err != nil {
			t.Fatal(err)
		}
		last, used = used, used+n
	}
	if used%8 == 0 {
		t.Fatal("test wants an unpadded final packet")
	}
	msgs := section[:used]
	for i := 0; len(msgs) > 0; i++ {
		typ, n, err := ParseHeader(msgs)
		if err != nil || typ != TypePacket {
			t.Fatalf("message %d: %v %v", i, typ, err)
		}
		if i < len(frames)-1 && n%8 != 0 {
			t.Fatalf("message %d length %d not padded", i, n)
		}
		p, err := ParsePacket(msgs[:n])
		if err != nil || !bytes.Equal(p.Frame, frames[i]) {
			t.Fatalf("message %d: %v", i, err)
		}
		if pad := msgs[PacketLen(&info, len(frames[i])):n]; !bytes.Equal(pad, make([]byte, len(pad))) {
			t.Fatalf("message %d padding not zeroed: % x", i, pad)
		}
		msgs = msgs[n:]
	}
	if _, err := PadMessage(section[last:last+PacketLen(&info, 99)], 8); err != ErrBufferTooSmall {
		t.Fatalf("padding past the buffer: %v", err)
	}
	if _, err := PadMessage([]byte{1, 0, 0, 0, 3, 0, 0, 0, 0}, 4); err != ErrBufferTooSmall {
		t.Fatalf("bad message length: %v", err)
	}
}

func TestRNDISPacketHeaderForGPADirect(t *testing.T) {
	var info PacketInfo
	info.SetLSO(NewLSOv2(1460, 34, false))
	hdr := make([]byte, MaxPacketHeaderLen)
	frame := testFrame(62000)
	n, err := PutPacketHeader(hdr, &info, len(frame))
	if err != nil || n != 60 {
		t.Fatalf("PutPacketHeader = %d, %v", n, err)
	}
	msg := append(bytes.Clone(hdr[:n]), frame...)
	p, err := ParsePacket(msg)
	if err != nil || !bytes.Equal(p.Frame, frame) {
		t.Fatalf("GPA-direct message: %v", err)
	}
	got, _ := p.Info()
	if got.LSO.MSS() != 1460 || got.LSO.TCPHeaderOffset() != 34 || !got.LSO.IsV2() || got.LSO.IPv6() {
		t.Fatalf("LSO %+v", got.LSO)
	}
	if _, err := PutPacketHeader(hdr[:59], &info, 10); err != ErrBufferTooSmall {
		t.Fatal("short header buffer accepted")
	}
	if _, err := PutPacketHeader(hdr, &info, -1); err != ErrBufferTooSmall {
		t.Fatal("negative frame length accepted")
	}
	if _, err := PutPacket(hdr[:70], &info, testFrame(11)); err != ErrBufferTooSmall {
		t.Fatal("short frame buffer accepted")
	}
}

func TestRNDISPacketDataPathDoesNotAllocate(t *testing.T) {
	var info PacketInfo
	info.SetChecksum(uint32(NewTxChecksum(TxChecksumIPv4|TxChecksumTCP, 34)))
	info.SetVLAN(NewVLANInfo(1, false, 10))
	info.SetHashValue(5)
	frame := testFrame(1514)
	dst := make([]byte, 2048)
	var sink uint32
	allocs := testing.AllocsPerRun(200, func() {
		n, err := PutPacket(dst, &info, frame)
		if err != nil {
			panic(err)
		}
		p, err := ParsePacket(dst[:n])
		if err != nil {
			panic(err)
		}
		it := p.PPIs()
		for e, ok := it.Next(); ok; e, ok = it.Next() {
			v, _ := e.Uint32()
			sink += v
		}
		got, err := p.Info()
		if err != nil || it.Err() != nil {
			panic(err)
		}
		sink += got.HashValue + uint32(len(p.Frame))
	})
	if allocs != 0 {
		t.Fatalf("%v allocs per run, want 0", allocs)
	}
	_ = sink
}

func TestRNDISStringers(t *testing.T) {
	if TypeQueryComplete.String() != "QUERY_CMPLT" || Type(0x55).String() != "rndis type(0x55)" {
		t.Fatal("Type.String")
	}
	if StatusInvalidParameter.String() != "invalid parameter" || Status(0x1234).String() != "rndis status(0x1234)" {
		t.Fatal("Status.String")
	}
	if OIDGenLinkSpeed.String() != "OID_GEN_LINK_SPEED" || OID(1).String() != "oid(0x00000001)" {
		t.Fatalf("OID.String %q %q", OIDGenLinkSpeed, OID(1))
	}
}

var benchSizes = []int{64, 1514}

func BenchmarkRNDISPacketEncode(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			var info PacketInfo
			info.SetChecksum(uint32(NewTxChecksum(TxChecksumIPv4|TxChecksumTCP, 34)))
			info.SetHashValue(3)
			frame := testFrame(size)
			section := make([]byte, 6144)
			msg := make([]byte, 0, nvsp.MessageSize)
			b.ReportAllocs()
			b.SetBytes(int64(size))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				n, err := PutPacket(section, &info, frame)
				if err != nil {
					b.Fatal(err)
				}
				msg = nvsp.RNDISPacket{ChannelType: nvsp.RMCData, SectionIndex: uint32(i & 1023), SectionSize: uint32(n)}.Marshal(msg[:0])
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pkts/s")
		})
	}
}

func BenchmarkRNDISPacketDecode(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			// openvmm's receive layout with a checksum PPI, plus hash PPIs.
			var info PacketInfo
			info.SetChecksum(uint32(RxChecksumTCPOK | RxChecksumIPOK))
			info.SetHashValue(0x51ccc178)
			info.SetHashInfo(NDISHashFunctionToeplitz | NDISHashTCPIPv4)
			sub := make([]byte, 256+size+36)
			if _, err := PutPacketAt(sub, &info, testFrame(size), 256, len(sub)); err != nil {
				b.Fatal(err)
			}
			msg := nvsp.RNDISPacket{ChannelType: nvsp.RMCData, SectionIndex: nvsp.NoSection}.Marshal(nil)
			var m nvsp.RNDISPacket
			var sink int
			b.ReportAllocs()
			b.SetBytes(int64(size))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := m.Unmarshal(msg); err != nil {
					b.Fatal(err)
				}
				p, err := ParsePacket(sub)
				if err != nil {
					b.Fatal(err)
				}
				pi, err := p.Info()
				if err != nil {
					b.Fatal(err)
				}
				sink += len(p.Frame) + int(pi.HashValue&1)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pkts/s")
			_ = sink
		})
	}
}
