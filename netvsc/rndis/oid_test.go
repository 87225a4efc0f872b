package rndis

import (
	"bytes"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/vmbusd/vmbusd/internal/wiretest"
	"github.com/vmbusd/vmbusd/netvsc/nvsp"
	"github.com/vmbusd/vmbusd/netvsc/protoerr"
)

func TestOffloadParametersGoldenLayouts(t *testing.T) {
	p := OffloadParameters{
		IPv4Checksum:    NDISOffloadParametersTxRxDisabled,
		TCPIPv4Checksum: NDISOffloadParametersTxRxEnabled, UDPIPv4Checksum: NDISOffloadParametersTxRxEnabled,
		TCPIPv6Checksum: NDISOffloadParametersTxRxEnabled, UDPIPv6Checksum: NDISOffloadParametersTxRxEnabled,
		LSOv2IPv4: NDISOffloadParametersEnabled, LSOv2IPv6: NDISOffloadParametersEnabled,
		RSCIPv4: NDISOffloadParametersDisabled, RSCIPv6: NDISOffloadParametersDisabled,
	}
	p.Header = OffloadParametersHeader(nvsp.Version5)
	got := p.Marshal(nil)
	// header; ip4, tcp4, udp4, tcp6 csum; udp6, lsov1, ipsecv1, lsov2_ip4;
	// lsov2_ip6, tcp_conn x2, pad; flags @16; ipsecv2 x2, rsc_ip4 @22, rsc_ip6; encap
	wiretest.Golden(t, "rev 3", got, "80031c00 01040404 04000002 02000000 00000000 00000101 00000000")
	p.Header = OffloadParametersHeader(nvsp.Version4)
	got = p.Marshal(nil)
	wiretest.Golden(t, "rev 2", got, "80021600 01040404 04000002 02000000 00000000 0000")
	var back OffloadParameters
	if err := back.Unmarshal(got); err != nil {
		t.Fatal(err)
	}
	q := p
	q.RSCIPv4, q.RSCIPv6 = 0, 0 // not in a 22-byte object
	if back != q {
		t.Fatalf("rev 2 round trip %+v", back)
	}
	// Linux below NVSP 5 sends revision 3 with size 22: accepted, RSC absent.
	linux := bytes.Clone(got)
	linux[1] = 3
	if err := back.Unmarshal(linux); err != nil || back.RSCIPv4 != 0 || back.Header.Revision != 3 {
		t.Fatalf("Linux rev3/22: %v %+v", err, back)
	}
	// The zero header means revision 3.
	if z := (OffloadParameters{}).Marshal(nil); len(z) != 28 || z[0] != 0x80 || z[1] != 3 {
		t.Fatalf("default header % x", z)
	}
}

func TestOffloadCapabilitiesRoundTripAtEveryRevision(t *testing.T) {
	o := Offload{
		Checksum: ChecksumOffload{
			IPv4TxEncapsulation: NDISOffloadEncap8023, IPv4TxFlags: NDISChecksumCapTCP | NDISChecksumCapTCPOptions | NDISChecksumCapIP4,
			IPv4RxEncapsulation: NDISOffloadEncap8023, IPv4RxFlags: NDISChecksumCapUDP,
			IPv6TxEncapsulation: NDISOffloadEncap8023, IPv6TxFlags: NDISChecksumCapTCP | NDISChecksumCapIPOptions,
			IPv6RxEncapsulation: 1, IPv6RxFlags: 2,
		},
		LSOv1:   LSOv1Offload{3, 4, 5, 6},
		LSOv2:   LSOv2Offload{NDISOffloadEncap8023, HostLSOv2MaxSize, HostLSOv2MinSegments, NDISOffloadEncap8023, HostLSOv2MaxSize, 2, NDISLSOv2CapIP6Ext | NDISLSOv2CapTCP6Opt},
		Flags:   0x77,
		RSCIPv4: 1, RSCIPv6: 1, EncapGREFlags: 9, EncapGREMaxHeader: 10,
	}
	for i := range o.IPsecV1 {
		o.IPsecV1[i] = uint32(100 + i)
	}
	for i := range o.IPsecV2 {
		o.IPsecV2[i] = byte(i)
	}
	for _, v := range []uint32{nvsp.Version2, nvsp.Version4, nvsp.Version61} {
		in := o
		in.Header = OffloadQueryHeader(v)
		b := in.Marshal(nil)
		if len(b) != int(in.Header.Size) {
			t.Fatalf("size %d, header says %d", len(b), in.Header.Size)
		}
		// Golden offsets from docs/protocol/netvsc.md §3.6.
		if le.Uint32(b[8:]) != in.Checksum.IPv4TxFlags || le.Uint32(b[84:]) != HostLSOv2MaxSize || le.Uint32(b[108:]) != 0x77 {
			t.Fatalf("rev %d: field offsets", in.Header.Revision)
		}
		var back Offload
		if err := back.Unmarshal(b); err != nil {
			t.Fatal(err)
		}
		want := in
		switch in.Header.Size {
		case NDISOffloadSizeRev1:
			want.IPsecV2 = [32]byte{}
			fallthrough
		case NDISOffloadSizeRev2:
			want.RSCIPv4, want.RSCIPv6, want.EncapGREFlags, want.EncapGREMaxHeader = 0, 0, 0, 0
		case NDISOffloadSizeRev3:
			if b[144] != 1 || le.Uint32(b[152:]) != 10 {
				t.Fatal("rev 3 offsets")
			}
		}
		if back != want {
			t.Fatalf("rev %d round trip:\n got %+v\nwant %+v", in.Header.Revision, back, want)
		}
	}
	if h := OffloadQueryHeader(nvsp.Version1); h.Size != 112 || h.Revision != 1 || h.Type != 0xa7 {
		t.Fatalf("query header %+v", h)
	}
}

func TestRSSCapabilitiesGoldenLayout(t *testing.T) {
	c := RSSCapabilities{
		Flags:                NDISRSSCapsHashToeplitz | NDISRSSCapsHashTypeTCPIPv4 | NDISRSSCapsHashTypeTCPIPv6,
		NumInterruptMessages: 1, NumReceiveQueues: 8, NumIndirectionEntries: 128,
	}
	got := c.Marshal(nil)
	wiretest.Golden(t, "RSS capabilities", got, "88021200 01030000 01000000 08000000 8000")
	var back RSSCapabilities
	if err := back.Unmarshal(got); err != nil {
		t.Fatal(err)
	}
	c.Header = RSSCapabilitiesQueryHeader()
	if back != c {
		t.Fatalf("round trip %+v", back)
	}
	// Revision 1 (16 bytes) has no entry count.
	rev1 := RSSCapabilities{Header: NDISObjectHeader{0x88, 1, 16}, NumReceiveQueues: 4, NumIndirectionEntries: 99}.Marshal(nil)
	if len(rev1) != 16 {
		t.Fatalf("rev 1 len %d", len(rev1))
	}
	if err := back.Unmarshal(rev1); err != nil || back.NumIndirectionEntries != 0 || back.NumReceiveQueues != 4 {
		t.Fatalf("rev 1: %v %+v", err, back)
	}
}

func TestRSSParametersGoldenLayout(t *testing.T) {
	key := MicrosoftRSSKey()
	var table [128]uint32
	for i := range table {
		table[i] = uint32(i % 4)
	}
	hash := NDISHashFunctionToeplitz | NDISHashIPv4 | NDISHashTCPIPv4 | NDISHashIPv6 | NDISHashTCPIPv6
	p := NewRSSParameters(hash, key[:], table[:])
	b := p.Marshal(nil)
	if RSSParametersSize != 592 || len(b) != 592 || p.Size() != 592 {
		t.Fatalf("size %d", len(b))
	}
	wiretest.Golden(t, "fixed part", b[:40], ""+
		"89022800 "+ // type 0x89, revision 2, size 40
		"00000000 "+ // flags, base cpu
		"01170000 "+ // hash info @8
		"00020000 "+ // table size 512 @12
		"28000000 "+ // table offset 40 @16
		"28000000 "+ // key size 40 @20
		"28020000 "+ // key offset 552 @24
		"00000000 00000000 00000000") // processor masks
	if le.Uint32(b[40+4*5:]) != 1 || !bytes.Equal(b[552:], key[:]) {
		t.Fatal("table or key misplaced")
	}
	var back RSSParameters
	if err := back.Unmarshal(b); err != nil {
		t.Fatal(err)
	}
	p.Header = NDISObjectHeader{0x89, 2, 40}
	if back != p {
		t.Fatal("round trip differs")
	}
	if err := back.Validate(4); err != nil {
		t.Fatal(err)
	}
	if back.Lookup(0x51ccc178) != table[0x78] {
		t.Fatal("Lookup")
	}

	// Disable: the DISABLE flag, as both guests send first.
	d := p
	d.Flags = NDISRSSParamFlagDisableRSS
	if !d.Disabled() || d.Validate(1) != nil {
		t.Fatal("disable must always validate")
	}
}

func TestRSSParametersValidate(t *testing.T) {
	key := MicrosoftRSSKey()
	good := NewRSSParameters(NDISHashFunctionToeplitz|NDISHashTCPIPv4, key[:], []uint32{0, 1, 2, 3})
	if err := good.Validate(4); err != nil {
		t.Fatal(err)
	}
	noHash := good
	noHash.HashInfo = NDISHashTCPIPv4 // function 0 means disable (openvmm)
	if !noHash.Disabled() || noHash.Validate(0) != nil {
		t.Fatal("no hash function should disable")
	}
	cases := []struct {
		name   string
		mut    func(*RSSParameters)
		queues int
		kind   protoerr.Kind
	}{
		{"short key", func(p *RSSParameters) { p.KeyLen = 16 }, 4, protoerr.KindRSSKey},
		{"no key", func(p *RSSParameters) { p.KeyLen = 0 }, 4, protoerr.KindRSSKey},
		{"empty table", func(p *RSSParameters) { p.TableLen = 0 }, 4, protoerr.KindRSSTable},
		{"entry past queues", func(p *RSSParameters) {}, 3, protoerr.KindRSSEntry},
		{"no queues", func(p *RSSParameters) {}, 0, protoerr.KindRSSEntry},
	}
	for _, c := range cases {
		p := good
		c.mut(&p)
		kinds.Want(t, p.Validate(c.queues), c.kind)
	}
}

func TestNDISObjectDecodersRejectMalformedHeaders(t *testing.T) {
	key := MicrosoftRSSKey()
	cases := []struct {
		name string
		b    []byte
		min  int
		out  wiretest.Unmarshaler
	}{
		{"offload parameters", OffloadParameters{}.Marshal(nil), 20, &OffloadParameters{}},
		{"offload", Offload{}.Marshal(nil), 112, &Offload{}},
		{"rss capabilities", RSSCapabilities{}.Marshal(nil), 16, &RSSCapabilities{}},
		{"rss parameters", NewRSSParameters(1, key[:], []uint32{0}).Marshal(nil), 28, &RSSParameters{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := c.out.Unmarshal(c.b); err != nil {
				t.Fatal(err)
			}
			kinds.Want(t, c.out.Unmarshal(c.b[:3]), protoerr.KindShort)
			bad := bytes.Clone(c.b)
			bad[0] ^= 0x01
			kinds.Want(t, c.out.Unmarshal(bad), protoerr.KindNDISObject)
			bad = bytes.Clone(c.b)
			bad[1] = 0
			kinds.Want(t, c.out.Unmarshal(bad), protoerr.KindNDISObject)
			bad = bytes.Clone(c.b)
			le.PutUint16(bad[2:], uint16(c.min-1))
			kinds.Want(t, c.out.Unmarshal(bad), protoerr.KindNDISObject)
			le.PutUint16(bad[2:], 0xffff)
			kinds.Want(t, c.out.Unmarshal(bad), protoerr.KindShort)
		})
	}
}

func TestRSSParametersDecoderChecksTableAndKey(t *testing.T) {
	key := MicrosoftRSSKey()
	good := NewRSSParameters(NDISHashFunctionToeplitz, key[:], []uint32{0, 1}).Marshal(nil) // 40 + 8 + 40
	mut := func(off int, v uint32, size16 bool) []byte {
		b := bytes.Clone(good)
		if size16 {
			le.PutUint16(b[off:], uint16(v))
		} else {
			le.PutUint32(b[off:], v)
		}
		return b
	}
	var p RSSParameters
	for _, c := range []struct {
		name string
		b    []byte
		kind protoerr.Kind
	}{
		{"table size unaligned", mut(12, 6, true), protoerr.KindRSSTable},
		{"table too big", mut(12, 4*129, true), protoerr.KindRSSTable},
		{"table past buffer", mut(16, 84, false), protoerr.KindRSSTable},
		{"table offset huge", mut(16, 0xfffffffc, false), protoerr.KindRSSTable},
		{"key too long", mut(20, 41, true), protoerr.KindRSSKey},
		{"key past buffer", mut(24, 49, false), protoerr.KindRSSKey},
		{"key offset huge", mut(24, 0xffffffff, false), protoerr.KindRSSKey},
	} {
		t.Run(c.name, func(t *testing.T) { kinds.Want(t, p.Unmarshal(c.b), c.kind) })
	}
	// Empty table and key (a disable with *_UNCHANGED flags) decode.
	b := mut(12, 0, true)
	le.PutUint16(b[20:], 0)
	le.PutUint32(b[16:], 0xdeadbeef)
	if err := p.Unmarshal(b); err != nil || p.TableLen != 0 || p.KeyLen != 0 {
		t.Fatalf("empty table and key: %v", err)
	}
	// Revision 1: 28-byte fixed part, no processor masks.
	r1 := bytes.Clone(good)
	r1[1], r1[2] = 1, 28
	if err := p.Unmarshal(r1); err != nil || p.Header.Size != 28 || p.TableLen != 2 {
		t.Fatalf("rev 1: %v", err)
	}
}

func TestNDISObjectHeader(t *testing.T) {
	h := NDISObjectHeader{0xa7, 3, 156}
	b := h.Marshal(nil)
	if !bytes.Equal(b, []byte{0xa7, 3, 156, 0}) {
		t.Fatalf("% x", b)
	}
	got, err := ParseNDISObjectHeader(b)
	if err != nil || got != h {
		t.Fatal(err)
	}
	_, err = ParseNDISObjectHeader(b[:2])
	kinds.Want(t, err, protoerr.KindShort)
}

// The Microsoft "Verifying the RSS Hash Calculation" vectors.
func TestToeplitzMicrosoftVectors(t *testing.T) {
	key := MicrosoftRSSKey()
	v4 := []struct {
		dst, src        string
		dport, sport    uint16
		ipOnly, withTCP uint32
	}{
		{"161.142.100.80", "66.9.149.187", 1766, 2794, 0x323e8fc2, 0x51ccc178},
		{"65.69.140.83", "199.92.111.2", 4739, 14230, 0xd718262a, 0xc626b0ea},
		{"12.22.207.184", "24.19.198.95", 38024, 12898, 0xd2d0a5de, 0x5c2b394a},
		{"209.142.163.6", "38.27.205.30", 2217, 48228, 0x82989176, 0xafc7327f},
		{"202.188.127.2", "153.39.163.191", 1303, 44251, 0x5d1809c5, 0x10e828a2},
	}
	for _, v := range v4 {
		src, dst := netip.MustParseAddr(v.src), netip.MustParseAddr(v.dst)
		if got := RSSHash(key[:], src, dst, v.sport, v.dport, false); got != v.ipOnly {
			t.Errorf("%s -> %s: %#x, want %#x", v.src, v.dst, got, v.ipOnly)
		}
		if got := RSSHash(key[:], src, dst, v.sport, v.dport, true); got != v.withTCP {
			t.Errorf("%s:%d -> %s:%d: %#x, want %#x", v.src, v.sport, v.dst, v.dport, got, v.withTCP)
		}
		// IPv4-mapped IPv6 addresses hash as IPv4.
		m := netip.AddrFrom16(src.As16())
		if got := RSSHash(key[:], m, dst, v.sport, v.dport, true); got != v.withTCP {
			t.Errorf("mapped: %#x", got)
		}
	}
	v6 := []struct {
		src, dst     string
		sport, dport uint16
		withTCP      uint32
	}{
		{"3ffe:2501:200:1fff::7", "3ffe:2501:200:3::1", 2794, 1766, 0x40207d3d},
		{"3ffe:501:8::260:97ff:fe40:efab", "ff02::1", 14230, 4739, 0xdde51bbf},
		{"3ffe:1900:4545:3:200:f8ff:fe21:67cf", "fe80::200:f8ff:fe21:67cf", 44251, 38024, 0x02d1feef},
	}
	for _, v := range v6 {
		src, dst := netip.MustParseAddr(v.src), netip.MustParseAddr(v.dst)
		if got := RSSHash(key[:], src, dst, v.sport, v.dport, true); got != v.withTCP {
			t.Errorf("%s -> %s: %#x, want %#x", v.src, v.dst, got, v.withTCP)
		}
	}
	if got := RSSHash(key[:], netip.MustParseAddr(v6[0].src), netip.MustParseAddr(v6[0].dst), 0, 0, false); got != 0x2cc18cd5 {
		t.Errorf("IPv6 only: %#x, want 0x2cc18cd5", got)
	}
}

// slowToeplitz is the definition, bit by bit, for differential testing.
func slowToeplitz(key, input []byte) uint32 {
	keyBit := func(i int) uint32 {
		if i/8 >= len(key) {
			return 0
		}
		return uint32(key[i/8]>>(7-i%8)) & 1
	}
	var h uint32
	for i := 0; i < 8*len(input); i++ {
		if input[i/8]>>(7-i%8)&1 == 0 {
			continue
		}
		var w uint32
		for j := 0; j < 32; j++ {
			w = w<<1 | keyBit(i+j)
		}
		h ^= w
	}
	return h
}

func TestToeplitzMatchesSlowReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 2000; i++ {
		key := make([]byte, r.IntN(48))
		in := make([]byte, r.IntN(48))
		for j := range key {
			key[j] = byte(r.Uint32())
		}
		for j := range in {
			in[j] = byte(r.Uint32())
		}
		if got, want := Toeplitz(key, in), slowToeplitz(key, in); got != want {
			t.Fatalf("key % x input % x: %#x, want %#x", key, in, got, want)
		}
	}
}

func TestIndirectionLookup(t *testing.T) {
	table := make([]uint32, 128)
	for i := range table {
		table[i] = uint32(i % 3)
	}
	for _, h := range []uint32{0, 1, 127, 128, 0x51ccc178, 0xffffffff} {
		if got := IndirectionLookup(table, h); got != table[h&127] {
			t.Fatalf("hash %#x: %d", h, got)
		}
	}
	send := []uint32{0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3}
	if IndirectionLookup(send, 0x13) != send[3] {
		t.Fatal("send table")
	}
	if IndirectionLookup(nil, 5) != 0 || IndirectionLookup([]uint32{7, 8, 9}, 4) != 8 {
		t.Fatal("empty or odd-sized table")
	}
	if testing.AllocsPerRun(100, func() {
		k := MicrosoftRSSKey()
		_ = IndirectionLookup(table, RSSHash(k[:], netip.AddrFrom4([4]byte{1, 2, 3, 4}), netip.AddrFrom4([4]byte{5, 6, 7, 8}), 1, 2, true))
	}) != 0 {
		t.Fatal("hashing allocates")
	}
}

func TestLinkSpeedAndInfoHelpers(t *testing.T) {
	s := LinkSpeedFromBps(10_000_000_000)
	if s != 100_000_000 || s.Mbps() != 10000 || s.Bps() != 10_000_000_000 {
		t.Fatalf("10G = %d", s)
	}
	if LinkSpeedFromBps(1<<62) != 0xffffffff {
		t.Fatal("saturation")
	}
	v, err := ParseInfoUint32(AppendInfoUint32(nil, NDISMediaStateDisconnected))
	if err != nil || v != 1 {
		t.Fatal(err)
	}
	_, err = ParseInfoUint32([]byte{1, 2, 3})
	kinds.Want(t, err, protoerr.KindShort)
	mac, err := ParseInfoMAC([]byte{0x00, 0x0d, 0x3a, 0x31, 0xb5, 0x38})
	if err != nil || mac != [6]byte{0x00, 0x0d, 0x3a, 0x31, 0xb5, 0x38} {
		t.Fatal(err)
	}
	_, err = ParseInfoMAC([]byte{1, 2, 3, 4, 5})
	kinds.Want(t, err, protoerr.KindShort)
	if NDISPacketFilterDefault != 0x0d {
		t.Fatal("default filter")
	}
	if h := NDISHashFunctionToeplitz | NDISHashUDPIPv4; h.Function() != 1 || h.Types() != 0x4000 {
		t.Fatal("HashInfo accessors")
	}
}
