package vmbus

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
)

// newTestRing returns zeroed ring memory with a data area of dsize bytes
// and the feature bit set, as a freshly opened channel has.
func newTestRing(t testing.TB, dsize int) []byte {
	t.Helper()
	mem := make([]byte, DataOffset()+dsize)
	if err := InitRingHeader(mem); err != nil {
		t.Fatal(err)
	}
	return mem
}

func newTestPair(t testing.TB, dsize int) (*OutRing, *InRing, []byte) {
	t.Helper()
	mem := newTestRing(t, dsize)
	o, err := NewOutRing(mem)
	if err != nil {
		t.Fatal(err)
	}
	i, err := NewInRing(mem, 0)
	if err != nil {
		t.Fatal(err)
	}
	return o, i, mem
}

func pattern(seq uint64, n int) []byte {
	b := make([]byte, n)
	for k := range b {
		b[k] = byte(seq*31 + uint64(k)*7)
	}
	return b
}

func TestRingRoundTripWraps(t *testing.T) {
	for _, size := range []int{8, 24, 40, 1000, 3000} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			o, in, mem := newTestPair(t, 8192)
			buf := make([]byte, in.MaxPacket())
			ctl := controlOf(mem)
			for seq := uint64(0); seq < 200; seq++ {
				p := pattern(seq, size)
				start := o.next
				if err := o.Write(PacketInband, 0, seq, nil, p); err != nil {
					t.Fatalf("write %d: %v", seq, err)
				}
				// The trailer is the start offset in the high half.
				var tr [8]byte
				o.r.copyOut(tr[:], o.r.advance(start, uint32(align8(16+size))))
				if got := binary.LittleEndian.Uint64(tr[:]); got != uint64(start)<<32 {
					t.Fatalf("trailer %#x, want %#x", got, uint64(start)<<32)
				}
				o.Commit()
				if got := ctl.writeIndex.Load(); got != o.next {
					t.Fatalf("write index %d, want %d", got, o.next)
				}
				pkt, err := in.Read(buf)
				if err != nil {
					t.Fatalf("read %d: %v", seq, err)
				}
				if pkt.Type != PacketInband || pkt.TransID != seq || pkt.Offset8 != 2 {
					t.Fatalf("packet %d: %+v", seq, pkt)
				}
				if !bytes.Equal(pkt.Payload()[:size], p) || len(pkt.Payload()) != align8(size) {
					t.Fatalf("payload %d differs", seq)
				}
				if _, err := in.Read(buf); err != ErrRingEmpty {
					t.Fatalf("second read: %v, want ErrRingEmpty", err)
				}
				in.Commit()
			}
		})
	}
}

func TestRingNeverCompletelyFull(t *testing.T) {
	o, in, _ := newTestPair(t, 4096)
	payload := make([]byte, 40) // 16+40+8 = 64 bytes a packet
	n := 0
	for {
		err := o.Write(PacketInband, 0, uint64(n), nil, payload)
		var full *RingFullError
		if errors.As(err, &full) {
			if full.Need != 64 || full.Free != 64 {
				t.Fatalf("full error %+v, want need 64 free 64", full)
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 4096/64-1 {
		t.Fatalf("wrote %d packets, want %d (one slot always free)", n, 4096/64-1)
	}
	o.Commit()
	if got := in.Available(); got != n*64 {
		t.Fatalf("available %d, want %d", got, n*64)
	}
}

// TestRoomAgreesWithFree: Room(n) is Free() > n as the ring fills and
// the reader frees it, and a read index the writer refuses makes it false.
func TestRoomAgreesWithFree(t *testing.T) {
	o, in, mem := newTestPair(t, 4096)
	buf := make([]byte, in.MaxPacket())
	payload := make([]byte, 40) // 64 bytes a packet
	check := func(step string) {
		t.Helper()
		free := o.Free()
		for _, n := range []int{0, 63, 64, free - 1, free, free + 1, 4096} {
			if got, want := o.Room(n), free > n; got != want {
				t.Fatalf("%s: Room(%d) = %v with Free() = %d", step, n, got, free)
			}
		}
	}
	check("empty")
	for k := 0; o.Write(PacketInband, 0, uint64(k), nil, payload) == nil; k++ {
		if k%7 == 0 {
			check(fmt.Sprintf("after %d writes", k+1))
		}
	}
	o.Commit()
	check("full")
	for k := 0; k < 10; k++ {
		if _, err := in.Read(buf); err != nil {
			t.Fatal(err)
		}
	}
	in.Commit()
	check("after the reader took 10")
	controlOf(mem).readIndex.Store(4) // unaligned: corrupt
	if o.Room(4096) || o.Room(0) {
		t.Fatal("Room true after a corrupt read index")
	}
	if o.Err() == nil {
		t.Fatal("Err() nil after a corrupt read index")
	}
}

func TestCommitWriteSignalsOnlyOnEmptyToNonEmpty(t *testing.T) {
	tests := []struct {
		name       string
		masked     bool
		readerLags bool // the reader has not consumed the previous batch
		want       bool
	}{
		{"empty, unmasked", false, false, true},
		{"empty, masked", true, false, false},
		{"non-empty, unmasked", false, true, false},
		{"non-empty, masked", true, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, in, _ := newTestPair(t, 4096)
			buf := make([]byte, in.MaxPacket())
			o.Write(PacketInband, 0, 1, nil, make([]byte, 8))
			o.Commit()
			if !tc.readerLags {
				if _, err := in.Read(buf); err != nil {
					t.Fatal(err)
				}
				in.Commit()
			}
			in.SetInterruptMask(tc.masked)
			// A batch of three packets gives one answer.
			for k := 0; k < 3; k++ {
				if err := o.Write(PacketInband, 0, 2, nil, make([]byte, 8)); err != nil {
					t.Fatal(err)
				}
			}
			if got := o.Commit(); got != tc.want {
				t.Fatalf("Commit() = %v, want %v", got, tc.want)
			}
			if o.Commit() {
				t.Fatal("empty commit signalled")
			}
		})
	}
}

func TestCommitReadSignalsOnPendingTransition(t *testing.T) {
	const pkt = 64
	tests := []struct {
		name    string
		feature bool
		pending int // writer's pending_send_sz (0 = not blocked)
		fill    int // packets in the ring before reading
		read    int // packets read in the batch
		want    bool
	}{
		{"not blocked", true, 0, 60, 10, false},
		{"blocked, now enough", true, 1024, 60, 20, true},
		{"blocked, still not enough", true, 1024, 63, 2, false},
		{"was already enough", true, 512, 40, 1, false},
		{"no feature bit", false, 1024, 60, 20, false},
		{"exactly enough is not enough", true, 64 * 17, 63, 16, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, in, mem := newTestPair(t, 4096)
			if !tc.feature {
				controlOf(mem).featureBits.Store(0)
			}
			buf := make([]byte, in.MaxPacket())
			for k := 0; k < tc.fill; k++ {
				if err := o.Write(PacketInband, 0, 0, nil, make([]byte, pkt-24)); err != nil {
					t.Fatalf("fill %d: %v", k, err)
				}
			}
			o.Commit()
			controlOf(mem).pendingSendSz.Store(uint32(tc.pending))
			for k := 0; k < tc.read; k++ {
				if _, err := in.Read(buf); err != nil {
					t.Fatal(err)
				}
			}
			if got := in.Commit(); got != tc.want {
				t.Fatalf("Commit() = %v, want %v (free now %d)", got, tc.want, o.Free())
			}
		})
	}
}

func TestSetPendingSendHysteresis(t *testing.T) {
	o, _, mem := newTestPair(t, 64*1024)
	o.SetPendingSend(100)
	if got := controlOf(mem).pendingSendSz.Load(); got != 16*1024 {
		t.Fatalf("pending %d, want a quarter of the ring", got)
	}
	o.SetPendingSend(40*1024 + 3)
	if got := controlOf(mem).pendingSendSz.Load(); got != 40*1024+8 {
		t.Fatalf("pending %d, want 8-aligned need", got)
	}
	o.ClearPendingSend()
	if got := controlOf(mem).pendingSendSz.Load(); got != 0 {
		t.Fatalf("pending %d after clear", got)
	}
}

// rawPacket builds descriptor bytes plus body for malformed-packet tests.
func rawPacket(typ, off8, len8, flags uint16, body []byte) []byte {
	b := make([]byte, 16, 16+len(body))
	binary.LittleEndian.PutUint16(b[0:], typ)
	binary.LittleEndian.PutUint16(b[2:], off8)
	binary.LittleEndian.PutUint16(b[4:], len8)
	binary.LittleEndian.PutUint16(b[6:], flags)
	return append(b, body...)
}

func le32(vs ...uint32) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	return b
}

func TestReadRejectsMalformedPackets(t *testing.T) {
	gpa := func(ranges uint32, tail ...uint32) []byte { return le32(append([]uint32{0, ranges}, tail...)...) }
	tests := []struct {
		name string
		pkt  []byte
		max  int
		want CorruptKind
	}{
		{"offset8 below 2", rawPacket(6, 1, 2, 0, make([]byte, 16)), 0, CorruptOffset},
		{"len8 below offset8", rawPacket(6, 3, 2, 0, make([]byte, 16)), 0, CorruptLength},
		{"len8 past data", rawPacket(6, 2, 40, 0, make([]byte, 16)), 0, CorruptLength},
		{"len8 past channel maximum", rawPacket(6, 2, 6, 0, make([]byte, 32)), 40, CorruptLength},
		{"unknown type", rawPacket(8, 2, 3, 0, make([]byte, 8)), 0, CorruptType},
		{"zero type", rawPacket(0, 2, 3, 0, make([]byte, 8)), 0, CorruptType},
		{"unknown flag", rawPacket(6, 2, 3, 2, make([]byte, 8)), 0, CorruptFlags},
		{"xfer offset8 below 3", rawPacket(7, 2, 3, 1, make([]byte, 8)), 0, CorruptOffset},
		{"xfer ranges past header", rawPacket(7, 4, 4, 1, append(le32(0xcafe, 2), make([]byte, 8)...)), 0, CorruptRanges},
		{"gpa offset8 below 3", rawPacket(9, 2, 3, 1, make([]byte, 8)), 0, CorruptOffset},
		{"gpa zero ranges", rawPacket(9, 3, 3, 1, gpa(0)), 0, CorruptRanges},
		{"gpa range past header", rawPacket(9, 4, 4, 1, gpa(1, 100, 0)), 0, CorruptRanges},
		{"gpa pfns past header", rawPacket(9, 5, 5, 1, gpa(1, 8192, 0, 1, 0)), 0, CorruptRanges},
		{"gpa page offset past page", rawPacket(9, 5, 5, 1, gpa(1, 8, 4096, 1, 0)), 0, CorruptRanges},
		{"gpa second range missing", rawPacket(9, 5, 5, 1, gpa(2, 8, 0, 7, 0)), 0, CorruptRanges},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mem := newTestRing(t, 4096)
			o, _ := NewOutRing(mem)
			in, _ := NewInRing(mem, tc.max)
			if err := o.WriteRaw(tc.pkt); err != nil {
				t.Fatal(err)
			}
			o.Commit()
			_, err := in.Read(make([]byte, 4096))
			ce, ok := IsCorrupt(err)
			if !ok || ce.Kind != tc.want {
				t.Fatalf("Read error %v, want corrupt %s", err, tc.want)
			}
			// The ring stays dead.
			if _, err2 := in.Read(make([]byte, 4096)); err2 != err {
				t.Fatalf("second read %v, want the same error", err2)
			}
		})
	}
}

func TestReadAcceptsValidRangeTables(t *testing.T) {
	mem := newTestRing(t, 8192)
	o, _ := NewOutRing(mem)
	in, _ := NewInRing(mem, 0)
	hdr := TransferPageHeader(nil, 0xcafe, 2)
	hdr = AppendTransferRange(hdr, 100, 0)
	hdr = AppendTransferRange(hdr, 200, 4096)
	if err := o.Write(PacketTransferPage, FlagCompletionRequested, 7, hdr, []byte("rndis...")); err != nil {
		t.Fatal(err)
	}
	g := GPAHeader(nil, 2)
	g = AppendGPARange(g, 5000, 100, []uint64{10, 11})
	g = AppendGPARange(g, 64, 4050, []uint64{12, 13})
	if err := o.Write(PacketGPADirect, FlagCompletionRequested, 8, g, []byte("nvspmsg!")); err != nil {
		t.Fatal(err)
	}
	o.Commit()
	buf := make([]byte, in.MaxPacket())
	p, err := in.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	if p.TransferPageSet() != 0xcafe || p.RangeCount() != 2 || string(p.Payload()) != "rndis..." {
		t.Fatalf("xfer packet %+v", p)
	}
	if c, off := p.TransferRange(1); c != 200 || off != 4096 {
		t.Fatalf("range 1 = %d,%d", c, off)
	}
	p, err = in.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	it := p.GPARanges()
	var got []string
	for r, ok := it.Next(); ok; r, ok = it.Next() {
		s := fmt.Sprintf("%d@%d:", r.Count, r.Offset)
		for k := 0; k < r.Pages(); k++ {
			s += fmt.Sprint(r.PFN(k), ",")
		}
		got = append(got, s)
	}
	if fmt.Sprint(got) != "[5000@100:10,11, 64@4050:12,13,]" {
		t.Fatalf("gpa ranges %v", got)
	}
}

func TestReaderRejectsBadWriteIndex(t *testing.T) {
	tests := []struct {
		name string
		w    uint32
		want CorruptKind
	}{
		{"past data area", 4096, CorruptWriteIndex},
		{"unaligned", 68, CorruptWriteIndex},
		{"rewinds over published data", 64, CorruptWriteRewind},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mem := newTestRing(t, 4096)
			o, _ := NewOutRing(mem)
			in, _ := NewInRing(mem, 0)
			buf := make([]byte, 4096)
			o.Write(PacketInband, 0, 0, nil, make([]byte, 40))
			o.Write(PacketInband, 0, 0, nil, make([]byte, 40))
			o.Commit() // write index 128
			for k := 0; k < 2; k++ {
				if _, err := in.Read(buf); err != nil {
					t.Fatal(err)
				}
			}
			controlOf(mem).writeIndex.Store(tc.w)
			_, err := in.Read(buf)
			if ce, ok := IsCorrupt(err); !ok || ce.Kind != tc.want {
				t.Fatalf("Read error %v, want corrupt %s", err, tc.want)
			}
		})
	}
}

func TestWriterRejectsBadReadIndex(t *testing.T) {
	for _, tc := range []struct {
		name string
		rd   uint32
	}{
		{"past data area", 8192},
		{"unaligned", 4},
		{"beyond what was published", 128},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := newTestRing(t, 4096)
			o, _ := NewOutRing(mem)
			o.Write(PacketInband, 0, 0, nil, make([]byte, 40)) // 64 bytes
			o.Commit()
			controlOf(mem).readIndex.Store(tc.rd)
			for o.Write(PacketInband, 0, 0, nil, make([]byte, 40)) == nil {
			}
			if ce, ok := IsCorrupt(o.Err()); !ok || ce.Kind != CorruptReadIndex {
				t.Fatalf("Err() = %v, want corrupt read index", o.Err())
			}
		})
	}
}

func TestShortPacketIsCorrupt(t *testing.T) {
	mem := newTestRing(t, 4096)
	in, _ := NewInRing(mem, 0)
	controlOf(mem).writeIndex.Store(16) // less than descriptor + trailer
	_, err := in.Read(make([]byte, 4096))
	if ce, ok := IsCorrupt(err); !ok || ce.Kind != CorruptShortPacket {
		t.Fatalf("Read error %v, want short packet", err)
	}
}

func TestCorruptKindsHaveNames(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range CorruptKinds() {
		s := k.String()
		if s == "" || seen[s] {
			t.Fatalf("kind %d has name %q", k, s)
		}
		seen[s] = true
	}
}
