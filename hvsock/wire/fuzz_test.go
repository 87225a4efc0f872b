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
