package vmbus

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

// TestPeekCopiesBodyInPlace: Peek validates a packet and copies only its
// head; CopyBody reads the rest straight from the ring in any pieces,
// across the wrap; Peek again returns the same packet; Skip moves past it
// and Commit then releases it, as Read and Commit would.
func TestPeekCopiesBodyInPlace(t *testing.T) {
	for _, size := range []int{8, 100, 3000} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			o, in, mem := newTestPair(t, 8192)
			ctl := controlOf(mem)
			head := make([]byte, 24)
			for seq := uint64(0); seq < 100; seq++ {
				want := pattern(seq, size)
				if err := o.Write(PacketInband, 0, seq, nil, want); err != nil {
					t.Fatalf("write %d: %v", seq, err)
				}
				o.Commit()
				p, err := in.Peek(head)
				if err != nil {
					t.Fatalf("peek %d: %v", seq, err)
				}
				if p.TransID != seq || int(p.Len8)*8 != align8(16+size) || len(p.Raw) != min(24, int(p.Len8)*8) {
					t.Fatalf("peek %d: id %d len8 %d raw %d", seq, p.TransID, p.Len8, len(p.Raw))
				}
				if again, err := in.Peek(head); err != nil || again.TransID != seq {
					t.Fatalf("second peek %d: %v, id %d", seq, err, again.TransID)
				}
				// The payload in pieces of 7, straight from the ring.
				got := make([]byte, 0, size)
				var piece [7]byte
				for off := 16; ; {
					k := in.CopyBody(piece[:], off)
					if k == 0 {
						break
					}
					got = append(got, piece[:k]...)
					off += k
				}
				if !bytes.Equal(got[:size], want) {
					t.Fatalf("packet %d: payload differs", seq)
				}
				if ctl.readIndex.Load() != in.committed {
					t.Fatal("Peek or CopyBody published the read index")
				}
				in.Skip()
				in.Skip() // nothing held: no effect
				in.Commit()
				if ctl.readIndex.Load() != ctl.writeIndex.Load() {
					t.Fatalf("packet %d: read %d, write %d after Skip and Commit", seq, ctl.readIndex.Load(), ctl.writeIndex.Load())
				}
			}
			if _, err := in.Peek(head); err != ErrRingEmpty {
				t.Fatalf("peek of an empty ring: %v", err)
			}
			if k := in.CopyBody(head, 0); k != 0 {
				t.Fatalf("CopyBody with no packet held copied %d", k)
			}
		})
	}
}

// TestPeekValidatesLikeRead: Peek rejects every malformed packet Read
// rejects, with the same kind, and needs a head that holds the packet's
// range table.
func TestPeekValidatesLikeRead(t *testing.T) {
	for _, tc := range []struct {
		name string
		pkt  []byte
		kind CorruptKind
	}{
		{"offset", rawPacket(6, 1, 2, 0, nil), CorruptOffset},
		{"len below offset", rawPacket(6, 3, 2, 0, make([]byte, 8)), CorruptLength},
		{"type", rawPacket(0x42, 2, 3, 0, make([]byte, 8)), CorruptType},
		{"flags", rawPacket(6, 2, 3, 4, make([]byte, 8)), CorruptFlags},
		{"gpa no ranges", rawPacket(9, 3, 3, 0, le32(0, 0)), CorruptRanges},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, in, _ := newTestPair(t, 4096)
			if err := o.WriteRaw(tc.pkt); err != nil {
				t.Fatal(err)
			}
			o.Commit()
			_, err := in.Peek(make([]byte, 64))
			var ce *CorruptError
			if !errors.As(err, &ce) || ce.Kind != tc.kind {
				t.Fatalf("Peek = %v, want %v", err, tc.kind)
			}
		})
	}
	o, in, _ := newTestPair(t, 4096)
	g := GPAHeader(nil, 1)
	g = AppendGPARange(g, 100, 0, []uint64{10})
	if err := o.Write(PacketGPADirect, 0, 1, g, []byte("payload!")); err != nil {
		t.Fatal(err)
	}
	o.Commit()
	hl := descriptorSize + len(g)
	if _, err := in.Peek(make([]byte, hl-8)); err == nil {
		t.Fatal("Peek with a head shorter than the range table succeeded")
	}
	p, err := in.Peek(make([]byte, hl))
	if err != nil {
		t.Fatalf("Peek with the range table's head: %v", err)
	}
	var pl [8]byte
	if k := in.CopyBody(pl[:], hl); k != 8 || string(pl[:]) != "payload!" || p.RangeCount() != 1 {
		t.Fatalf("CopyBody %d %q, ranges %d", k, pl, p.RangeCount())
	}
}
