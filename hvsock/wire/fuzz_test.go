package wire

import (
	"encoding/binary"
	"testing"
	"unsafe"

	"github.com/vmbusd/vmbusd/internal/wiretest"
)

// FuzzDecodePacket feeds arbitrary packet bodies to the framing parser: it
// must never panic, and what it accepts must be a payload inside the
// packet, after the pipe header, at most MTU bytes, exactly data_size long.
func FuzzDecodePacket(f *testing.F) {
	wiretest.Seed(f, packet(PipeData, []byte("hello")))
	wiretest.Seed(f, packet(PipeData, nil))
	wiretest.Seed(f, packet(PipePartial, make([]byte, 100)))
	f.Add([]byte{6, 0, 2, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 8, 0, 0, 0})
	f.Fuzz(func(t *testing.T, raw []byte) {
		data, err := DecodePacket(raw)
		if err != nil {
			if _, ok := err.(*FrameError); !ok {
				t.Fatalf("error %T %v is not a *FrameError", err, err)
			}
			return
		}
		if len(data) > MTU || len(raw) < HeaderLen {
			t.Fatalf("accepted %d bytes from a %d-byte packet", len(data), len(raw))
		}
		off := int(binary.LittleEndian.Uint16(raw[2:])) * 8
		if int(binary.LittleEndian.Uint32(raw[off+4:])) != len(data) {
			t.Fatalf("payload of %d bytes, data_size says %d", len(data), binary.LittleEndian.Uint32(raw[off+4:]))
		}
		if len(data) > 0 {
			start := uintptr(unsafe.Pointer(&data[0])) - uintptr(unsafe.Pointer(&raw[0]))
			if int(start) != off+PipeHeaderSize || int(start)+len(data) > len(raw) {
				t.Fatalf("payload at %d+%d outside the packet of %d (header at %d)", start, len(data), len(raw), off)
			}
		}
	})
}

// padding is the connect messages' bytes 4..8, which parsers ignore and
// encoders zero.
var padding = wiretest.Span{Off: 4, Len: 4}

// FuzzParseConnectRequest: the host's parser of guest requests never
// panics, and what it accepts encodes back to the same bytes (the padding
// aside, which the parser ignores).
func FuzzParseConnectRequest(f *testing.F) {
	wiretest.Seed(f, ConnectRequest{Endpoint: ServiceID(40000), Service: ServiceID(2761)}.Marshal())
	wiretest.Seed(f, ConnectRequest{Endpoint: ServiceID(1), Service: ServiceID(2), V2: true, Silo: ServiceID(3)}.Marshal())
	f.Add(ConnectResult{Status: StatusConnectionRefused}.Marshal())
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseConnectRequest(b)
		if err != nil {
			return
		}
		wiretest.Reencodes(t, b, r.Marshal(), r, padding)
	})
}

// FuzzParseConnectResult: the guest's parser of host answers never panics,
// and what it accepts round-trips.
func FuzzParseConnectResult(f *testing.F) {
	wiretest.Seed(f, ConnectResult{Endpoint: ServiceID(5), Service: ServiceID(6), Status: StatusConnectionRefused}.Marshal())
	f.Add(ConnectRequest{}.Marshal())
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseConnectResult(b)
		if err != nil {
			return
		}
		wiretest.Reencodes(t, b, r.Marshal(), r, padding)
	})
}

// FuzzDecodeHead: the in-place decoder agrees with DecodePacket on every
// whole packet, and given only the first HeaderLen bytes it either asks
// for the length that holds the pipe header or finds the same payload.
func FuzzDecodeHead(f *testing.F) {
	wiretest.Seed(f, packet(PipeData, []byte("hello")))
	wiretest.Seed(f, packet(PipeData, nil))
	f.Add([]byte{6, 0, 3, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 4, 0, 0, 0, 'd', 'a', 't', 'a', 0, 0, 0, 0}) // pipe header at offset8 3
	f.Fuzz(func(t *testing.T, raw []byte) {
		data, err := DecodePacket(raw)
		if err != nil {
			return
		}
		start, size, need, err := DecodeHead(raw[:HeaderLen])
		if err != nil {
			t.Fatalf("DecodeHead rejects a packet DecodePacket accepts: %v", err)
		}
		if need > 0 {
			if need > len(raw) {
				t.Fatalf("need %d beyond the %d-byte packet", need, len(raw))
			}
			if start, size, need, err = DecodeHead(raw[:need]); err != nil || need != 0 {
				t.Fatalf("with the head it asked for: need %d, %v", need, err)
			}
		}
		if size != len(data) || (size > 0 && &raw[start] != &data[0]) {
			t.Fatalf("DecodeHead: payload at %d+%d, DecodePacket %d bytes", start, size, len(data))
		}
	})
}
