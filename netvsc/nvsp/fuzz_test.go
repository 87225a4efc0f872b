package nvsp

import (
	"reflect"
	"testing"

	"github.com/vmbusd/vmbusd/internal/wiretest"
)

func nvspDecoders() []wiretest.Unmarshaler {
	return []wiretest.Unmarshaler{
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
		wiretest.Seed(f, c.in.Marshal(nil), Version61, uint32(16<<20))
	}
	f.Add(IndirectionTable{Offset: 40}.Marshal(nil), Version6, uint32(0))
	f.Add([]byte{0x66, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}, uint32(0), uint32(0xffffffff))
	f.Fuzz(func(t *testing.T, data []byte, version, bufLen uint32) {
		if _, err := MessageType(data); err != nil {
			wiretest.ProtocolError(t, err)
		}
		for _, d := range nvspDecoders() {
			if err := d.Unmarshal(data); err != nil {
				wiretest.ProtocolError(t, err)
				continue
			}
			var norm func(any) any
			if _, ok := d.(*IndirectionTable); ok {
				norm = func(v any) any { return v.(IndirectionTable).Table }
			}
			wiretest.RoundTrip(t, reflect.TypeOf(d).Elem().Name(), d, norm)
			switch m := d.(type) {
			case *RecvBufComplete:
				if err := m.Validate(int(bufLen)); err != nil {
					wiretest.ProtocolError(t, err)
				} else if uint64(m.Section.SubAllocSize)*uint64(m.Section.NumSubAllocs) > uint64(bufLen) ||
					m.Section.NumSubAllocs == 0 || m.Section.Offset != 0 {
					t.Fatalf("Validate accepted sections that do not fit: %+v in %d", m, bufLen)
				}
			case *SendBufComplete:
				if n, err := m.SectionCount(int(bufLen)); err != nil {
					wiretest.ProtocolError(t, err)
				} else if n < 1 || uint64(n)*uint64(m.SectionSize) > uint64(bufLen) {
					t.Fatalf("SectionCount = %d for %d-byte sections in %d", n, m.SectionSize, bufLen)
				}
			case *RNDISPacket:
				const size, count = 6144, 2730
				off, n, ok, err := m.Section(size, count)
				if err != nil {
					wiretest.ProtocolError(t, err)
				} else if ok && (off < 0 || n <= 0 || off+n > size*count) {
					t.Fatalf("Section = %d+%d outside the buffer", off, n)
				}
			case *IndirectionTable:
				var v IndirectionTable
				if err := v.UnmarshalVersion(data, version); err != nil {
					wiretest.ProtocolError(t, err)
				} else if uint64(v.Offset)+4*VRSSSendTabSize > uint64(len(data)) {
					t.Fatalf("table at %d outside %d bytes", v.Offset, len(data))
				}
			}
		}
	})
}
