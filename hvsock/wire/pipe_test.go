package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"

	"github.com/vmbusd/vmbusd/internal/testutil"
	"github.com/vmbusd/vmbusd/internal/wiretest"
	"github.com/vmbusd/vmbusd/vmbus"
)

// packet builds a packet body as a sender lays it out: descriptor (type,
// offset8 2, len8, flags 0, trans_id 0), pipe header, payload, padding.
func packet(ptype uint32, data []byte) []byte {
	body := align8(HeaderLen + len(data))
	b := make([]byte, body)
	binary.LittleEndian.PutUint16(b[0:], descInband)
	binary.LittleEndian.PutUint16(b[2:], 2)
	binary.LittleEndian.PutUint16(b[4:], uint16(body/8))
	binary.LittleEndian.PutUint32(b[16:], ptype)
	binary.LittleEndian.PutUint32(b[20:], uint32(len(data)))
	copy(b[24:], data)
	return b
}

func TestPacketLenMatchesLinux(t *testing.T) {
	for _, tc := range []struct{ n, want int }{{0, 32}, {1, 40}, {8, 40}, {9, 48}, {4088, 4120}, {16384, 16416}} {
		if got := PacketLen(tc.n); got != tc.want {
			t.Errorf("PacketLen(%d) = %d, want %d (HVS_PKT_LEN)", tc.n, got, tc.want)
		}
	}
	if Reserve != 72 || FINLen != 32 || MaxPacketBody != 16408 || DefaultChunk != 4088 {
		t.Fatalf("constants: reserve %d, fin %d, max body %d, chunk %d", Reserve, FINLen, MaxPacketBody, DefaultChunk)
	}
}

// TestWritableWorkedExample is docs/protocol/hvsock.md §1.7's: an empty
// 24 KiB ring (20480 data bytes) takes 4088 x 4 + 3928, leaving 40 bytes,
// writable 0; the FIN (32 bytes, strictly less than 40) still fits.
func TestWritableWorkedExample(t *testing.T) {
	free := 6*4096 - 4096
	var chunks []int
	for {
		w := Writable(free)
		if w == 0 {
			break
		}
		k := min(w, DefaultChunk)
		chunks = append(chunks, k)
		free -= PacketLen(k)
	}
	want := []int{4088, 4088, 4088, 4088, 3928}
	if len(chunks) != len(want) {
		t.Fatalf("chunks %v, want %v", chunks, want)
	}
	for i := range want {
		if chunks[i] != want[i] {
			t.Fatalf("chunks %v, want %v", chunks, want)
		}
	}
	if free != 40 || FINLen >= free {
		t.Fatalf("left %d free; a FIN of %d must fit (strictly less)", free, FINLen)
	}
	for _, tc := range []struct{ free, want int }{{72, 0}, {0, 0}, {80, 8}, {79, 0}, {20480, 20408}} {
		if got := Writable(tc.free); got != tc.want {
			t.Errorf("Writable(%d) = %d, want %d", tc.free, got, tc.want)
		}
	}
}

func TestPipeHeaderGolden(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want string
	}{
		{0, "01000000" + "00000000"},    // FIN
		{5, "01000000" + "05000000"},    // type DATA, data_size 5
		{4088, "01000000" + "f80f0000"}, // a full Linux chunk
	} {
		var b [PipeHeaderSize]byte
		PutPipeHeader(b[:], tc.n)
		wiretest.Golden(t, fmt.Sprintf("PutPipeHeader(%d)", tc.n), b[:], tc.want)
	}
}

func TestDecodePacket(t *testing.T) {
	fin := packet(PipeData, nil)
	data := packet(PipeData, []byte("hello"))
	partial := packet(PipePartial, []byte("abc"))
	mut := func(b []byte, f func(b []byte)) []byte {
		c := bytes.Clone(b)
		f(c)
		return c
	}
	tests := []struct {
		name string
		raw  []byte
		want string
		kind FrameKind
	}{
		{"fin", fin, "", 0},
		{"data", data, "hello", 0},
		{"partial type accepted", partial, "abc", 0},
		{"flags and trans_id ignored", mut(data, func(b []byte) { b[6] = 1; b[8] = 9 }), "hello", 0},
		{"larger offset8", func() []byte {
			b := make([]byte, 40)
			binary.LittleEndian.PutUint16(b[0:], descInband)
			binary.LittleEndian.PutUint16(b[2:], 3)
			binary.LittleEndian.PutUint16(b[4:], 5)
			binary.LittleEndian.PutUint32(b[24:], PipeData)
			binary.LittleEndian.PutUint32(b[28:], 2)
			copy(b[32:], "hi")
			return b
		}(), "hi", 0},
		{"short", data[:16], "", FrameShort},
		{"len8 disagrees", mut(data, func(b []byte) { b[4]++ }), "", FrameShort},
		{"not inband", mut(data, func(b []byte) { b[0] = 0xb }), "", FrameType},
		{"offset8 1", mut(data, func(b []byte) { b[2] = 1 }), "", FrameOffset},
		{"offset8 past header", mut(data, func(b []byte) { b[2] = 4 }), "", FrameOffset},
		{"pipe type 0", mut(data, func(b []byte) { b[16] = 0 }), "", FramePipeType},
		{"pipe type 3", mut(data, func(b []byte) { b[16] = 3 }), "", FramePipeType},
		{"size past packet", mut(data, func(b []byte) { b[20] = 9 }), "", FrameSize},
		{"size above mtu", mut(data, func(b []byte) { binary.LittleEndian.PutUint32(b[20:], MTU+1) }), "", FrameMTU},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodePacket(tc.raw)
			if tc.kind != 0 {
				var fe *FrameError
				if !errors.As(err, &fe) || fe.Kind != tc.kind {
					t.Fatalf("DecodePacket = %q, %v; want FrameError %v", got, err, tc.kind)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Fatalf("DecodePacket = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	// Every kind has a case above, and a name.
	seen := map[FrameKind]bool{}
	for _, tc := range tests {
		seen[tc.kind] = true
	}
	for _, k := range FrameKinds() {
		if !seen[k] {
			t.Errorf("no test for %v", k)
		}
		if k.String() == FrameKind(0).String() || len(k.String()) == 0 {
			t.Errorf("kind %d has no name", int(k))
		}
	}
}

// TestPacketsOnTheRingGolden writes packets as the guest does, through a
// vmbus ring, and checks the exact ring bytes (descriptor, pipe header,
// payload, padding, trailer) and that a reader decodes what was written.
func TestPacketsOnTheRingGolden(t *testing.T) {
	mem := make([]byte, 4096+8192)
	if err := vmbus.InitRingHeader(mem); err != nil {
		t.Fatal(err)
	}
	out, err := vmbus.NewOutRing(mem)
	if err != nil {
		t.Fatal(err)
	}
	in, err := vmbus.NewInRing(mem, MaxPacketBody)
	if err != nil {
		t.Fatal(err)
	}
	data := mem[4096:]
	at := 0
	for _, tc := range []struct {
		msg  string
		ring string // the packet as it lies in the ring, trailer included
	}{
		{"a", "0600" + "0200" + "0400" + "0000" + "0000000000000000" + "01000000" + "01000000" +
			"61" + "00000000000000" + "0000000000000000"},
		{"exactly8", "0600" + "0200" + "0400" + "0000" + "0000000000000000" + "01000000" + "08000000" +
			hex.EncodeToString([]byte("exactly8")) + "0000000028000000"},
		{"", "0600" + "0200" + "0300" + "0000" + "0000000000000000" + "01000000" + "00000000" +
			"0000000050000000"}, // the FIN: 32 bytes
	} {
		var hdr [PipeHeaderSize]byte
		PutPipeHeader(hdr[:], len(tc.msg))
		if err := out.Write(vmbus.PacketInband, 0, 0, nil, hdr[:], []byte(tc.msg)); err != nil {
			t.Fatal(err)
		}
		if got := out.Pending(); got != PacketLen(len(tc.msg)) {
			t.Fatalf("%q took %d ring bytes, want PacketLen %d", tc.msg, got, PacketLen(len(tc.msg)))
		}
		out.Commit()
		wiretest.Golden(t, fmt.Sprintf("%q on the ring", tc.msg), data[at:at+PacketLen(len(tc.msg))], tc.ring)
		at += PacketLen(len(tc.msg))
		buf := make([]byte, MaxPacketBody)
		p, err := in.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodePacket(p.Raw)
		if err != nil || string(got) != tc.msg {
			t.Fatalf("decoded %q, %v; want %q", got, err, tc.msg)
		}
		in.Commit()
	}
}

func TestDecodePacketAllocatesNothing(t *testing.T) {
	raw := packet(PipeData, make([]byte, DefaultChunk))
	testutil.AllocBudget(t, 0, 100, func() {
		if _, err := DecodePacket(raw); err != nil {
			t.Fatal(err)
		}
	})
}
