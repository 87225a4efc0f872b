package sim

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/vmbusd/vmbusd/netvsc"
)

func TestVLANStripAndInsertRoundTrip(t *testing.T) {
	f := udpFrame([6]byte{1, 2, 3, 4, 5, 6}, [6]byte{7, 8, 9, 10, 11, 12}, 1500, 80)
	tagged := insertVLAN(nil, f, 0xa123)
	tci, ok := frameTagged(tagged)
	if !ok || tci != 0xa123 || len(tagged) != len(f)+4 {
		t.Fatalf("tag %#x %v", tci, ok)
	}
	if got := stripVLAN(nil, tagged); !bytes.Equal(got, f) {
		t.Fatalf("strip: %x", got)
	}
	if _, ok := frameTagged(f); ok {
		t.Fatal("untagged frame reported tagged")
	}
}

func TestRxChecksumVerifiesIPTCPAndUDP(t *testing.T) {
	f := tcpFrame(false, 100)
	fl := parseFlow(f)
	if err := applyTxChecksum(f, netvsc.NewTxChecksum(netvsc.TxChecksumIPv4|netvsc.TxChecksumIPHeader|netvsc.TxChecksumTCP, fl.l4off)); err != nil {
		t.Fatal(err)
	}
	if c := rxChecksum(f); c != netvsc.RxChecksumIPOK|netvsc.RxChecksumTCPOK {
		t.Errorf("good frame: %#x", c)
	}
	f[len(f)-1] ^= 0xff
	if c := rxChecksum(f); c&netvsc.RxChecksumTCPFailed == 0 {
		t.Errorf("corrupted payload: %#x", c)
	}
	v6 := tcpFrame(true, 33)
	fl = parseFlow(v6)
	if err := applyTxChecksum(v6, netvsc.NewTxChecksum(netvsc.TxChecksumIPv6|netvsc.TxChecksumTCP, fl.l4off)); err != nil {
		t.Fatal(err)
	}
	if c := rxChecksum(v6); c != netvsc.RxChecksumTCPOK {
		t.Errorf("IPv6: %#x", c)
	}
	// A checksum request whose offset does not match the frame.
	if err := applyTxChecksum(f, netvsc.NewTxChecksum(netvsc.TxChecksumTCP, 10)); err != errOffloadOffset {
		t.Errorf("bad offset: %v", err)
	}
}

func TestRSSInputMatchesNDISHashTypes(t *testing.T) {
	key := netvsc.MicrosoftRSSKey()
	// Microsoft's "Verifying the RSS Hash Calculation" vector:
	// 66.9.149.187:2794 -> 161.142.100.80:1766, IPv4 0x323e8fc2, TCP 0x51ccc178.
	f := tcpFrame(false, 0)
	copy(f[26:30], []byte{66, 9, 149, 187})
	copy(f[30:34], []byte{161, 142, 100, 80})
	be.PutUint16(f[34:], 2794)
	be.PutUint16(f[36:], 1766)
	h, typ, ok := rssInput(key[:], netvsc.NDISHashIPv4|netvsc.NDISHashTCPIPv4, f)
	if !ok || typ != netvsc.NDISHashTCPIPv4 || h != 0x51ccc178 {
		t.Errorf("TCP 4-tuple: %#x %#x %v", h, typ, ok)
	}
	h, typ, ok = rssInput(key[:], netvsc.NDISHashIPv4, f)
	if !ok || typ != netvsc.NDISHashIPv4 || h != 0x323e8fc2 {
		t.Errorf("IPv4 2-tuple: %#x %#x %v", h, typ, ok)
	}
	if _, _, ok := rssInput(key[:], netvsc.NDISHashIPv6, f); ok {
		t.Error("IPv4 frame hashed with only IPv6 types")
	}
	src, dst := netip.MustParseAddr("66.9.149.187"), netip.MustParseAddr("161.142.100.80")
	if want := netvsc.RSSHash(key[:], src, dst, 0, 0, false); want != 0x323e8fc2 {
		t.Errorf("netvsc.RSSHash %#x", want)
	}
}

func TestSegmentLSOProducesValidSegments(t *testing.T) {
	f := tcpFrame(false, 3000)
	var info netvsc.PacketInfo
	info.SetLSO(netvsc.NewLSOv2(1000, 34, false))
	fl, err := checkLSO(f, info.LSO, netvsc.HostLSOv2MaxSize)
	if err != nil {
		t.Fatal(err)
	}
	var segs [][]byte
	segmentLSO(f, fl, 1000, func(n int) []byte { s := make([]byte, n); segs = append(segs, s); return s })
	if len(segs) != 3 {
		t.Fatalf("%d segments", len(segs))
	}
	for i, s := range segs {
		if c := rxChecksum(s); c != netvsc.RxChecksumIPOK|netvsc.RxChecksumTCPOK {
			t.Errorf("segment %d checksums %#x", i, c)
		}
		if id := be.Uint16(s[18:]); id != 77+uint16(i) {
			t.Errorf("segment %d IP id %d", i, id)
		}
	}
	if _, err := checkLSO(f, info.LSO, 2000); err != errLSOTooBig {
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
		{netvsc.NDISPacketTypeDirected, true, false, false, false},
		{netvsc.NDISPacketFilterDefault, true, false, true, true},
		{netvsc.NDISPacketTypeDirected | netvsc.NDISPacketTypeBroadcast, true, false, true, false},
		{netvsc.NDISPacketTypePromiscuous, true, true, true, true},
	} {
		got := [4]bool{filterAccepts(tc.filter, uni, mac), filterAccepts(tc.filter, other, mac), filterAccepts(tc.filter, bcast, mac), filterAccepts(tc.filter, mcast, mac)}
		if got != [4]bool{tc.uni, tc.other, tc.bcast, tc.mcast} {
			t.Errorf("filter %#x: %v", tc.filter, got)
		}
	}
}
