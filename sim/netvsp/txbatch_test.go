package netvsp

import (
	"bytes"
	"testing"

	"github.com/vmbusd/vmbusd/netvsc/rndis"
	"github.com/vmbusd/vmbusd/sim/vswitch"
)

// TestLargeSendForwardedFromTheGPAReadBuffer: a large send read into the
// batch's GPA buffer goes to an OffloadPort from that buffer, not from a
// copy in the slab; a VLAN tag still finds its headroom; the buffer is
// held until the batch is forwarded and then reused, and one read into a
// grown (reallocated) buffer is copied as before.
func TestLargeSendForwardedFromTheGPAReadBuffer(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		b := newTxBatch()
		const hdr = 64 // an RNDIS header in front of the frame, as in a send
		f := tcpFrame(v6, 20000)
		want := bytes.Clone(f)
		buf := append(append(b.gpaBuf(), make([]byte, hdr)...), f...)
		f = buf[hdr:len(buf):len(buf)] // capped, as rndis.Packet.Frame is
		l4 := vswitch.EthHeaderLen + 20
		if v6 {
			l4 = vswitch.EthHeaderLen + 40
		}
		fl, err := vswitch.CheckLSO(f, rndis.NewLSOv2(1448, l4, v6), rndis.HostLSOv2MaxSize)
		if err != nil {
			t.Fatal(err)
		}
		if !b.addLSOWhole(f, fl, 1448) {
			t.Fatal("no room in an empty batch")
		}
		if b.used != 0 || &b.frames[0][0] != &f[0] {
			t.Fatalf("v6=%v: the large send was copied into the slab (%d bytes used)", v6, b.used)
		}
		// Only the headers the host edits differ from the guest's bytes.
		if !bytes.Equal(b.frames[0][l4+20:], want[l4+20:]) || !bytes.Equal(b.frames[0][:12], want[:12]) {
			t.Fatalf("v6=%v: payload or addresses changed", v6)
		}
		b.tag(0, 0x0064)
		if tf := b.frames[0]; len(tf) != len(want)+vswitch.VLANTagLen || be.Uint16(tf[12:]) != vswitch.EthTypeVLAN ||
			!bytes.Equal(tf[:12], want[:12]) || b.offs[0].CsumStart != uint16(l4+vswitch.VLANTagLen) {
			t.Fatalf("v6=%v: tagged frame wrong: % x", v6, tf[:18])
		}
		b.doneGPA()
		if len(b.held) != 1 || len(b.spare) != 0 {
			t.Fatalf("held %d spare %d after a send kept in place, want 1 and 0", len(b.held), len(b.spare))
		}
		b.reset()
		if len(b.held) != 0 || len(b.spare) != 1 {
			t.Fatalf("held %d spare %d after the batch was forwarded, want 0 and 1", len(b.held), len(b.spare))
		}
		// A buffer that had to grow is no longer the batch's: copied.
		g := append(b.gpaBuf(), make([]byte, maxGPASend+1)...)
		copy(g[hdr:], want)
		if !b.addLSOWhole(g[hdr:hdr+len(want)], fl, 1448) || b.used == 0 {
			t.Fatalf("v6=%v: a frame outside the GPA buffer was not copied", v6)
		}
		b.doneGPA()
		if len(b.held) != 0 || len(b.spare) != 1 {
			t.Fatalf("held %d spare %d after a copied send, want 0 and 1", len(b.held), len(b.spare))
		}
	}
}
