package netvsc

import (
	"bytes"
	"testing"

	"github.com/vmbusd/vmbusd/netvsc/rndis"
)

// TestHeaderTemplateMatchesRNDIS: the header a template patches is the
// one rndis.PutPacketHeader builds, for every info the transmit path
// sends, when the info changes between frames and when it repeats.
func TestHeaderTemplateMatchesRNDIS(t *testing.T) {
	var (
		none  rndis.PacketInfo
		hash  rndis.PacketInfo
		vlan  rndis.PacketInfo
		csum  rndis.PacketInfo
		every rndis.PacketInfo
	)
	hash.SetHashValue(3)
	vlan.SetHashValue(3)
	vlan.SetVLAN(rndis.VLANInfoFromTCI(0x2005))
	csum.SetChecksum(uint32(rndis.NewTxChecksum(rndis.TxChecksumIPv4|rndis.TxChecksumTCP, 34)))
	every.SetChecksum(uint32(rndis.NewTxChecksum(rndis.TxChecksumIPv6|rndis.TxChecksumUDP, 54)))
	every.SetLSO(rndis.NewLSOv2(1448, 54, true))
	every.SetVLAN(rndis.VLANInfoFromTCI(7))
	every.SetHashValue(1)
	seq := []struct {
		name string
		info rndis.PacketInfo
		n    int
	}{
		{"none", none, 60},
		{"none again", none, 1514},
		{"hash", hash, 64},
		{"hash again", hash, 0},
		{"vlan", vlan, 128},
		{"checksum", csum, 9000},
		{"checksum again", csum, 1},
		{"every element", every, 64000},
		{"every element again", every, 65535},
		{"back to none", none, 42},
	}
	var h hdrTemplate
	for _, tc := range seq {
		want := bytes.Repeat([]byte{0xa5}, 256)
		k, err := rndis.PutPacketHeader(want, &tc.info, tc.n)
		if err != nil {
			t.Fatalf("%s: PutPacketHeader: %v", tc.name, err)
		}
		got := bytes.Repeat([]byte{0xa5}, 256)
		h.put(got, &tc.info, tc.n)
		if !bytes.Equal(got, want) {
			t.Errorf("%s: template wrote\n%x\nwant (%d header bytes)\n%x", tc.name, got[:k+8], k, want[:k+8])
		}
	}
}

// takenTxPath returns a txPath of the send sections [lo, hi), 1500-byte
// frames, with every section taken.
func takenTxPath(t *testing.T, lo, hi int) *txPath {
	t.Helper()
	p := new(txPath)
	p.init(1500)
	p.assign(lo, hi)
	for range hi - lo {
		if _, ok := p.takeSection(); !ok {
			t.Fatalf("takeSection: a fresh run of %d ran out", hi-lo)
		}
	}
	if _, ok := p.takeSection(); ok {
		t.Fatalf("takeSection found a section beyond the run of %d", hi-lo)
	}
	return p
}

// TestTxReadyWantsWhatStopped: with every section in flight, a free GPA
// slot is room only for a burst that stopped for one (or for either);
// a burst of frames that can only be copied waits for a section, and a
// burst that stopped for a GPA slot waits for one.
func TestTxReadyWantsWhatStopped(t *testing.T) {
	p := takenTxPath(t, 1, 3)
	gpaAll := make([]uint32, 0, gpaSlots)
	tests := []struct {
		name     string
		want     int32
		need     int32 // sections the burst needs (0: one)
		sections int   // sections the host completed, on the free ring
		stashed  bool  // a section taken and parked again (untakeSection)
		gpaFree  bool
		ready    bool
	}{
		{"any, GPA slots free", wantAny, 0, 0, false, true, true},
		{"section, only GPA slots free", wantSection, 0, 0, false, true, false},
		{"section, a section completed", wantSection, 0, 1, false, true, true},
		{"section, a section on the stash", wantSection, 0, 0, true, false, true},
		{"GPA, slots free", wantGPA, 0, 0, false, true, true},
		{"GPA, no slot free, a section completed", wantGPA, 0, 1, false, false, false},
		{"GPA, no slot free, a section on the stash", wantGPA, 0, 0, true, false, false},
		{"any, nothing free", wantAny, 0, 0, false, false, false},
		{"any, a section on the stash", wantAny, 0, 0, true, false, true},
		// A large send copied in pieces needs several sections at once.
		{"two sections, one completed", wantSection, 2, 1, false, true, false},
		{"two sections, one completed, one on the stash", wantSection, 2, 1, true, false, true},
		{"two sections, two completed", wantSection, 2, 2, false, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var secs []uint32
			for range tc.sections {
				p.sec.put(1)
				secs = append(secs, 1)
			}
			if tc.stashed {
				p.untakeSection(2)
			}
			if !tc.gpaFree {
				for {
					s, ok := p.gpa.take()
					if !ok {
						break
					}
					gpaAll = append(gpaAll, s)
				}
			}
			p.stopped(tc.want, max(tc.need, 1))
			if got := p.ready(); got != tc.ready {
				t.Errorf("ready() = %v, want %v", got, tc.ready)
			}
			for range secs {
				p.sec.take()
			}
			if tc.stashed {
				if v, ok := p.takeSection(); !ok || v != 2 {
					t.Fatalf("takeSection = %d, %v; want the stashed 2", v, ok)
				}
			}
			for _, s := range gpaAll {
				p.gpa.put(s)
			}
			gpaAll = gpaAll[:0]
		})
	}
}
