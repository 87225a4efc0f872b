package nvsp

import (
	"reflect"
	"testing"

	"github.com/vmbusd/vmbusd/netvsc/protoerr"
)

// mustBeProtocolError fails unless err is a *protoerr.Error with a listed
// kind: decoders report nothing else.
func mustBeProtocolError(t *testing.T, err error) {
	t.Helper()
	pe, ok := protoerr.As(err)
	if !ok || !pe.Kind.Valid() {
		t.Fatalf("decoder returned %v (%T), want a *protoerr.Error with a listed kind", err, err)
	}
	_ = err.Error()
}

// roundTrip re-encodes a decoded value and decodes it again; the result
// must equal the first decode (after norm, when given).
func roundTrip(t *testing.T, name string, got unmarshaler, norm func(any) any) {
	t.Helper()
	b := got.(marshaler).Marshal(nil) // *T has T's value-receiver Marshal
	again := reflect.New(reflect.TypeOf(got).Elem()).Interface().(unmarshaler)
	if err := again.Unmarshal(b); err != nil {
		t.Fatalf("%s: re-decoding its own encoding: %v\n% x", name, err, b)
	}
	a, c := reflect.ValueOf(got).Elem().Interface(), reflect.ValueOf(again).Elem().Interface()
	if norm != nil {
		a, c = norm(a), norm(c)
	}
	if !reflect.DeepEqual(a, c) {
		t.Fatalf("%s: round trip\n got %+v\nwant %+v", name, c, a)
	}
}

func nvspDecoders() []unmarshaler {
	return []unmarshaler{
		&Init{}, &InitComplete{}, &NDISVersion{}, &NDISConfig{},
		&RecvBuf{}, &RecvBufComplete{}, &RevokeRecvBuf{},
		&SendBuf{}, &SendBufComplete{}, &RevokeSendBuf{},
		&RNDISPacket{}, &RNDISComplete{}, &VFAssociation{},
		&SwitchDataPath{}, &SubchannelRequest{}, &SubchannelComplete{},
		&IndirectionTable{},
	}
}

// FuzzNVSP feeds arbitrary bytes, as a hostile peer could send them, to
// every NVSP decoder and validator. Nothing may panic; every error is a
// *protoerr.Error; everything decoded re-encodes to the same value.
func FuzzNVSP(f *testing.F) {
	for _, c := range nvspCases() {
		f.Add(c.in.Marshal(nil), Version61, uint32(16<<20))
	}
	f.Add(IndirectionTable{Offset: 40}.Marshal(nil), Version6, uint32(0))
	f.Add([]byte{0x66, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}, uint32(0), uint32(0xffffffff))
	f.Fuzz(func(t *testing.T, data []byte, version, bufLen uint32) {
		if _, err := MessageType(data); err != nil {
			mustBeProtocolError(t, err)
		}
		for _, d := range nvspDecoders() {
			if err := d.Unmarshal(data); err != nil {
				mustBeProtocolError(t, err)
				continue
			}
			var norm func(any) any
			if _, ok := d.(*IndirectionTable); ok {
				norm = func(v any) any { return v.(IndirectionTable).Table }
			}
			roundTrip(t, reflect.TypeOf(d).Elem().Name(), d, norm)
			switch m := d.(type) {
			case *RecvBufComplete:
				if err := m.Validate(int(bufLen)); err != nil {
					mustBeProtocolError(t, err)
				} else if uint64(m.Section.SubAllocSize)*uint64(m.Section.NumSubAllocs) > uint64(bufLen) ||
					m.Section.NumSubAllocs == 0 || m.Section.Offset != 0 {
					t.Fatalf("Validate accepted sections that do not fit: %+v in %d", m, bufLen)
				}
			case *SendBufComplete:
				if n, err := m.SectionCount(int(bufLen)); err != nil {
					mustBeProtocolError(t, err)
				} else if n < 1 || uint64(n)*uint64(m.SectionSize) > uint64(bufLen) {
					t.Fatalf("SectionCount = %d for %d-byte sections in %d", n, m.SectionSize, bufLen)
				}
			case *RNDISPacket:
				const size, count = 6144, 2730
				off, n, ok, err := m.Section(size, count)
				if err != nil {
					mustBeProtocolError(t, err)
				} else if ok && (off < 0 || n <= 0 || off+n > size*count) {
					t.Fatalf("Section = %d+%d outside the buffer", off, n)
				}
			case *IndirectionTable:
				var v IndirectionTable
				if err := v.UnmarshalVersion(data, version); err != nil {
					mustBeProtocolError(t, err)
				} else if uint64(v.Offset)+4*VRSSSendTabSize > uint64(len(data)) {
					t.Fatalf("table at %d outside %d bytes", v.Offset, len(data))
				}
			}
		}
	})
}
