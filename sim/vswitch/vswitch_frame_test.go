package vswitch

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/vmbusd/vmbusd/netvsc/rndis"
)

func TestVLANStripAndInsertRoundTrip(t *testing.T) {
	f := udpFrame([6]byte{1, 2, 3, 4, 5, 6}, [6]byte{7, 8, 9, 10, 11, 12}, 1500, 80)
	tagged := InsertVLAN(nil, f, 0xa123)
	tci, ok := FrameTagged(tagged)
	if !ok || tci != 0xa123 || len(tagged) != len(f)+4 {
		t.Fatalf("tag %#x %v", tci, ok)
	}
	if got := StripVLAN(nil, tagged); !bytes.Equal(got, f) {
		t.Fatalf("strip: %x", got)
	}
	if _, ok := FrameTagged(f); ok {
		t.Fatal("untagged frame reported tagged")
	}
}

func TestRxChecksumVerifiesIPTCPAndUDP(t *testing.T) {
	f := tcpFrame(false, 100)
	fl := ParseFlow(f)
	if err := ApplyTxChecksum(f, rndis.NewTxChecksum(rndis.TxChecksumIPv4|rndis.TxChecksumIPHeader|rndis.TxChecksumTCP, fl.L4Off)); err != nil {
		t.Fatal(err)
	}
	if c := RxChecksum(f); c != rndis.RxChecksumIPOK|rndis.RxChecksumTCPOK {
		t.Errorf("good frame: %#x", c)
	}
	f[len(f)-1] ^= 0xff
	if c := RxChecksum(f); c&rndis.RxChecksumTCPFailed == 0 {
		t.Errorf("corrupted payload: %#x", c)
	}
	v6 := tcpFrame(true, 33)
	fl = ParseFlow(v6)
	if err := ApplyTxChecksum(v6, rndis.NewTxChecksum(rndis.TxChecksumIPv6|rndis.TxChecksumTCP, fl.L4Off)); err != nil {
		t.Fatal(err)
	}
	if c := RxChecksum(v6); c != rndis.RxChecksumTCPOK {
		t.Errorf("IPv6: %#x", c)
	}
	// A checksum request whose offset does not match the frame.
	if err := ApplyTxChecksum(f, rndis.NewTxChecksum(rndis.TxChecksumTCP, 10)); err != errOffloadOffset {
		t.Errorf("bad offset: %v", err)
	}
}

func TestRSSInputMatchesNDISHashTypes(t *testing.T) {
	key := rndis.MicrosoftRSSKey()
	// Microsoft's "Verifying the RSS Hash Calculation" vector:
	// 66.9.149.187:2794 -> 161.142.100.80:1766, IPv4 0x323e8fc2, TCP 0x51ccc178.
	f := tcpFrame(false, 0)
	copy(f[26:30], []byte{66, 9, 149, 187})
	copy(f[30:34], []byte{161, 142, 100, 80})
	be.PutUint16(f[34:], 2794)
	be.PutUint16(f[36:], 1766)
	h, typ, ok := RSSInput(key[:], rndis.NDISHashIPv4|rndis.NDISHashTCPIPv4, f)
	if !ok || typ != rndis.NDISHashTCPIPv4 || h != 0x51ccc178 {
		t.Errorf("TCP 4-tuple: %#x %#x %v", h, typ, ok)
	}
	h, typ, ok = RSSInput(key[:], rndis.NDISHashIPv4, f)
	if !ok || typ != rndis.NDISHashIPv4 || h != 0x323e8fc2 {
		t.Errorf("IPv4 2-tuple: %#x %#x %v", h, typ, ok)
	}
	if _, _, ok := RSSInput(key[:], rndis.NDISHashIPv6, f); ok {
		t.Error("IPv4 frame hashed with only IPv6 types")
	}
	src, dst := netip.MustParseAddr("66.9.149.187"), netip.MustParseAddr("161.142.100.80")
	if want := rndis.RSSHash(key[:], src, dst, 0, 0, false); want != 0x323e8fc2 {
		t.Errorf("rndis.RSSHash %#x", want)
	}
}

func TestSegmentLSOProducesValidSegments(t *testing.T) {
	f := tcpFrame(false, 3000)
	var info rndis.PacketInfo
	info.SetLSO(rndis.NewLSOv2(1000, 34, false))
	fl, err := CheckLSO(f, info.LSO, rndis.HostLSOv2MaxSize)
	if err != nil {
		t.Fatal(err)
	}
	var segs [][]byte
	SegmentLSO(f, fl, 1000, func(n int) []byte { s := make([]byte, n); segs = append(segs, s); return s })
	if len(segs) != 3 {
		t.Fatalf("%d segments", len(segs))
	}
	for i, s := range segs {
		if c := RxChecksum(s); c != rndis.RxChecksumIPOK|rndis.RxChecksumTCPOK {
			t.Errorf("segment %d checksums %#x", i, c)
		}
		if id := be.Uint16(s[18:]); id != 77+uint16(i) {
			t.Errorf("segment %d IP id %d", i, id)
		}
	}
	if _, err := CheckLSO(f, info.LSO, 2000); err != errLSOTooBig {
		t.Errorf("over the host maximum: %v", err)
	}
}

func TestPacketFilter(t *testing.T) {
	mac := [6]byte{0, 0x15, 0x5d, 1, 2, 3}
	uni := udpFrame(mac, [6]byte{2}, 1, 64)
	other := udpFrame([6]byte{0, 0x15, 0x5d, 9, 9, 9}, [6]byte{2}, 1, 64)
	bcast := udpFrame([6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, [6]byte{2}, 1, 64)
	mcast := udpFrame([6]byte{0x01, 0, 0x5e, 0, 0, 1}, [6]byte{2}, 1, 64)
	for _, tc := range []struct {
		filter                   uint32
		uni, other, bcast, mcast bool
	}{
		{0, false, false, false, false},
		{rndis.NDISPacketTypeDirected, true, false, false, false},
		{rndis.NDISPacketFilterDefault, true, false, true, true},
		{rndis.NDISPacketTypeDirected | rndis.NDISPacketTypeBroadcast, true, false, true, false},
		{rndis.NDISPacketTypePromiscuous, true, true, true, true},
	} {
		got := [4]bool{FilterAccepts(tc.filter, uni, mac), FilterAccepts(tc.filter, other, mac), FilterAccepts(tc.filter, bcast, mac), FilterAccepts(tc.filter, mcast, mac)}
		if got != [4]bool{tc.uni, tc.other, tc.bcast, tc.mcast} {
			t.Errorf("filter %#x: %v", tc.filter, got)
		}
	}
}
