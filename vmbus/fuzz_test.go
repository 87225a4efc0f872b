package vmbus

import (
	"encoding/binary"
	"errors"
	"testing"
)

// checkPacketInvariants asserts what every packet Read returns guarantees,
// and walks its range tables the way a driver would.
func checkPacketInvariants(t *testing.T, p *Packet, maxPkt int) {
	if p.Offset8 < 2 || p.Len8 < p.Offset8 || int(p.Len8)*8 > maxPkt || len(p.Raw) != int(p.Len8)*8 {
		t.Fatalf("invalid packet returned: %+v", p)
	}
	if !validType(p.Type) || p.Flags&^FlagCompletionRequested != 0 {
		t.Fatalf("invalid type/flags returned: %+v", p)
	}
	_ = p.Payload()
	_ = p.Header()
	switch p.Type {
	case PacketTransferPage:
		for k := 0; k < p.RangeCount(); k++ {
			p.TransferRange(k)
		}
	case PacketGPADirect:
		it := p.GPARanges()
		n := 0
		for r, ok := it.Next(); ok; r, ok = it.Next() {
			for k := 0; k < r.Pages(); k++ {
				r.PFN(k)
			}
			n++
		}
		if n != p.RangeCount() {
			t.Fatalf("walked %d of %d gpa ranges", n, p.RangeCount())
		}
	}
}

// FuzzRingReader puts arbitrary bytes in the data area and an arbitrary
// write index in the header, as a hostile host could, and reads until the
// ring is empty or dead. The reader must never panic or return a packet
// that breaks its guarantees.
func FuzzRingReader(f *testing.F) {
	valid := make([]byte, 4096)
	binary.LittleEndian.PutUint16(valid[0:], 6)
	binary.LittleEndian.PutUint16(valid[2:], 2)
	binary.LittleEndian.PutUint16(valid[4:], 3)
	f.Add(valid, uint32(32), uint16(0))
	f.Add(valid, uint32(4088), uint16(64))
	f.Add([]byte{9, 0, 3, 0, 4, 0, 1, 0}, uint32(40), uint16(0))
	f.Fuzz(func(t *testing.T, data []byte, w uint32, maxPkt uint16) {
		mem := newTestRing(t, 4096)
		copy(mem[DataOffset():], data)
		controlOf(mem).writeIndex.Store(w)
		in, err := NewInRing(mem, int(maxPkt))
		if err != nil {
			if _, ok := IsCorrupt(err); !ok {
				t.Fatalf("NewInRing: %v", err)
			}
			return
		}
		buf := make([]byte, in.MaxPacket())
		for n := 0; n < 1000; n++ {
			p, err := in.Read(buf)
			if err != nil {
				if err != ErrRingEmpty {
					if _, ok := IsCorrupt(err); !ok {
						t.Fatalf("non-corrupt error %v", err)
					}
				}
				break
			}
			checkPacketInvariants(t, &p, in.MaxPacket())
			in.Commit()
		}
	})
}

// FuzzPacketParse feeds one arbitrary packet (descriptor included) through a
// correct ring, so the fuzzer explores descriptor and range-table parsing.
func FuzzPacketParse(f *testing.F) {
	f.Add([]byte{6, 0, 2, 0, 3, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 'h', 'e', 'l', 'l', 'o', 0, 0, 0})
	xfer := rawPacket(7, 4, 5, 1, append(le32(0xcafe, 1, 100, 0), make([]byte, 8)...))
	f.Add(xfer)
	gpa := rawPacket(9, 5, 6, 1, append(le32(0, 1, 5000, 100, 1, 0, 2, 0), make([]byte, 8)...))
	f.Add(gpa)
	f.Fuzz(func(t *testing.T, pkt []byte) {
		if len(pkt) < 16 || len(pkt) > 8192 {
			return
		}
		pkt = append(pkt, make([]byte, align8(len(pkt))-len(pkt))...)
		mem := newTestRing(t, 16384)
		o, _ := NewOutRing(mem)
		in, _ := NewInRing(mem, 0)
		if err := o.WriteRaw(pkt); err != nil {
			return
		}
		o.Commit()
		p, err := in.Read(make([]byte, in.MaxPacket()))
		if err != nil {
			var ce *CorruptError
			if !errors.As(err, &ce) {
				t.Fatalf("non-corrupt error %v", err)
			}
			return
		}
		checkPacketInvariants(t, &p, in.MaxPacket())
	})
}
