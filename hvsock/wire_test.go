package hvsock

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

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

// TestWritableWorkedExample is hvsock.md §1.7's: an empty default ring
// (20480 data bytes) takes 4088 x 4 + 3928, leaving 40 bytes, writable 0;
// the FIN (32 bytes, strictly less than 40) still fits.
func TestWritableWorkedExample(t *testing.T) {
	free := DefaultRingSize - 4096
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

func TestDecodePacket(t *testing.T) {
	fin := packet(pipeData, nil)
	data := packet(pipeData, []byte("hello"))
	partial := packet(pipePartial, []byte("abc"))
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
			binary.LittleEndian.PutUint32(b[24:], pipeData)
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
	// Every kind has a case above.
	seen := map[FrameKind]bool{}
	for _, tc := range tests {
		seen[tc.kind] = true
	}
	for _, k := range FrameKinds() {
		if !seen[k] {
			t.Errorf("no test for %v", k)
		}
	}
}

// TestEncodeThroughTheRing writes packets as the guest does, through a vmbus
// ring, and decodes what a reader copies out: the two halves agree.
func TestEncodeThroughTheRing(t *testing.T) {
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
	var hdr [PipeHeaderSize]byte
	for _, msg := range []string{"a", "seven b", "exactly8", ""} {
		PutPipeHeader(hdr[:], len(msg))
		if err := out.Write(vmbus.PacketInband, 0, 0, nil, hdr[:], []byte(msg)); err != nil {
			t.Fatal(err)
		}
		if got := out.Pending(); got != PacketLen(len(msg)) {
			t.Fatalf("%q took %d ring bytes, want PacketLen %d", msg, got, PacketLen(len(msg)))
		}
		out.Commit()
		buf := make([]byte, MaxPacketBody)
		p, err := in.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodePacket(p.Raw)
		if err != nil || string(got) != msg {
			t.Fatalf("decoded %q, %v; want %q", got, err, msg)
		}
		in.Commit()
	}
}
