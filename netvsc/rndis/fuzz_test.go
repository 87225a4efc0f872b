package rndis

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"

	"github.com/vmbusd/vmbusd/internal/wiretest"
)

// FuzzRNDISPacket decodes arbitrary bytes as a PACKET_MSG and walks all of
// its per-packet info. A packet that decodes re-encodes, with the info
// this package understands, to a packet with the same frame and info.
func FuzzRNDISPacket(f *testing.F) {
	var info PacketInfo
	info.SetChecksum(uint32(RxChecksumTCPOK))
	info.SetVLAN(NewVLANInfo(1, true, 42))
	info.SetHashValue(9)
	info.SetHashInfo(NDISHashFunctionToeplitz | NDISHashTCPIPv4)
	info.SetPktID(NewPktInfoID(PktInfoSubAlloc, 3))
	info.SetLSO(NewLSOv2(1400, 34, false))
	buf := make([]byte, 2048)
	n, _ := PutPacket(buf, &info, testFrame(60))
	f.Add(bytes.Clone(buf[:n]))
	n, _ = PutPacket(buf, nil, testFrame(14))
	f.Add(bytes.Clone(buf[:n]))
	n, _ = PutPacketAt(buf, &info, testFrame(100), 256, 400)
	f.Add(bytes.Clone(buf[:n]))
	f.Add(PacketHeader{MessageLength: 50, DataOffset: 37, DataLength: 5}.Marshal(make([]byte, 0, 50)))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParsePacket(data)
		if err != nil {
			wiretest.ProtocolError(t, err)
			return
		}
		if int(p.MessageLength) > len(data) || p.MessageLength < PacketHeaderSize {
			t.Fatalf("MessageLength %d of %d bytes", p.MessageLength, len(data))
		}
		msg := data[:p.MessageLength]
		s := HeaderSize + int(p.DataOffset)
		if len(p.Frame) == 0 || len(p.Frame) != int(p.DataLength) || s+len(p.Frame) > len(msg) || &p.Frame[0] != &msg[s] {
			t.Fatalf("frame outside the message: %+v", p.PacketHeader)
		}
		if len(p.PPI) > 0 && HeaderSize+int(p.PerPacketInfoOffset)+len(p.PPI) > len(msg) {
			t.Fatal("PPI area outside the message")
		}
		if err := p.Unsupported(); err != nil {
			wiretest.ProtocolError(t, err)
		}
		it := p.PPIs()
		walked := 0
		for e, ok := it.Next(); ok; e, ok = it.Next() {
			walked += PPIHeaderSize + len(e.Data)
			if _, err := e.Uint32(); err != nil {
				wiretest.ProtocolError(t, err)
			}
		}
		if walked > len(p.PPI) {
			t.Fatalf("walked %d bytes of a %d-byte area", walked, len(p.PPI))
		}
		got, err := p.Info()
		if err != nil {
			wiretest.ProtocolError(t, err)
			return
		}
		if it.Err() != nil {
			t.Fatalf("Info succeeded where the walk failed: %v", it.Err())
		}
		out := make([]byte, PacketLen(&got, len(p.Frame)))
		if _, err := PutPacket(out, &got, p.Frame); err != nil {
			t.Fatal(err)
		}
		q, err := ParsePacket(out)
		if err != nil {
			t.Fatalf("re-encoded packet rejected: %v", err)
		}
		again, err := q.Info()
		if err != nil || again != got || !bytes.Equal(q.Frame, p.Frame) {
			t.Fatalf("re-encoded packet differs: %v %+v %+v", err, again, got)
		}
	})
}

func rndisControlDecoders() []wiretest.Unmarshaler {
	return []wiretest.Unmarshaler{
		&Initialize{}, &InitializeComplete{}, &Halt{}, &Query{},
		&QueryComplete{}, &Set{}, &SetComplete{}, &Reset{},
		&ResetComplete{}, &Keepalive{}, &KeepaliveComplete{}, &IndicateStatus{},
	}
}

func ndisObjectDecoders() []wiretest.Unmarshaler {
	return []wiretest.Unmarshaler{&OffloadParameters{}, &Offload{}, &RSSCapabilities{}, &RSSParameters{}}
}

// fuzzNDISObjects runs every NDIS object decoder over b.
func fuzzNDISObjects(t *testing.T, b []byte) {
	for _, d := range ndisObjectDecoders() {
		if err := d.Unmarshal(b); err != nil {
			wiretest.ProtocolError(t, err)
			continue
		}
		var norm func(any) any
		if _, ok := d.(*RSSParameters); ok {
			// Marshal always writes revision 2 with the table then the key
			// after the 40-byte object.
			norm = func(v any) any {
				p := v.(RSSParameters)
				p.Header = NDISObjectHeader{}
				return p
			}
			p := d.(*RSSParameters)
			if err := p.Validate(8); err != nil {
				wiretest.ProtocolError(t, err)
			}
			_ = p.Lookup(0x12345678)
		}
		wiretest.RoundTrip(t, reflect.TypeOf(d).Elem().Name(), d, norm)
	}
	if _, err := ParseInfoUint32(b); err != nil {
		wiretest.ProtocolError(t, err)
	}
	if _, err := ParseInfoMAC(b); err != nil {
		wiretest.ProtocolError(t, err)
	}
}

// FuzzRNDISControl feeds arbitrary bytes to every RNDIS control decoder,
// and the info buffers that decode to every NDIS object decoder.
func FuzzRNDISControl(f *testing.F) {
	for _, c := range rndisControlCases() {
		wiretest.Seed(f, c.in.Marshal(nil))
	}
	key := MicrosoftRSSKey()
	table := make([]uint32, 128)
	f.Add(Set{1, OIDGenReceiveScaleParameters, NewRSSParameters(NDISHashFunctionToeplitz, key[:], table).Marshal(nil), 0}.Marshal(nil))
	f.Add(Set{2, OIDTCPOffloadParameters, OffloadParameters{}.Marshal(nil), 0}.Marshal(nil))
	f.Add(QueryComplete{3, 0, Offload{}.Marshal(nil)}.Marshal(nil))
	f.Add(QueryComplete{4, 0, RSSCapabilities{NumReceiveQueues: 4}.Marshal(nil)}.Marshal(nil))
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, n, err := ParseHeader(data); err != nil {
			wiretest.ProtocolError(t, err)
		} else if n < HeaderSize || n > len(data) {
			t.Fatalf("message length %d of %d bytes", n, len(data))
		}
		if _, err := MessageType(data); err != nil {
			wiretest.ProtocolError(t, err)
		}
		if _, _, err := CompletionRequestID(data); err != nil {
			wiretest.ProtocolError(t, err)
		}
		for _, d := range rndisControlDecoders() {
			if err := d.Unmarshal(data); err != nil {
				wiretest.ProtocolError(t, err)
				continue
			}
			wiretest.RoundTrip(t, reflect.TypeOf(d).Elem().Name(), d, normalize)
			switch m := d.(type) {
			case *Query:
				fuzzNDISObjects(t, m.Info)
			case *Set:
				fuzzNDISObjects(t, m.Info)
			case *QueryComplete:
				fuzzNDISObjects(t, m.Info)
			case *IndicateStatus:
				fuzzNDISObjects(t, m.Buf)
			case *InitializeComplete:
				if a := m.PacketAlignment(); a < 4 || a > 4096 || a&(a-1) != 0 {
					t.Fatalf("alignment %d", a)
				}
			}
		}
		fuzzNDISObjects(t, data)
	})
}

// FuzzPPI walks an arbitrary per-packet-info area. ParsePacketInfo, which
// walks the area itself, agrees with a walk by PPIIter (same info, same
// error), and whatever it accepts re-encodes to an area that parses to the
// same info.
func FuzzPPI(f *testing.F) {
	var info PacketInfo
	info.SetChecksum(1)
	info.SetVLAN(2)
	info.SetPktID(3)
	f.Add(info.AppendPPIs(nil))
	f.Add(AppendPPI(AppendPPIUint32(nil, PPINBLHashValue, 5), PPIOriginalPktInfo, []byte{1, 2, 3}))
	f.Add([]byte{0x10, 0, 0, 0, 6, 0, 0, 0, 0x10, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, area []byte) {
		it := NewPPIIter(area)
		total := 0
		for e, ok := it.Next(); ok; e, ok = it.Next() {
			total += PPIHeaderSize + len(e.Data)
			if total > len(area) {
				t.Fatalf("walk ran past the area")
			}
		}
		if err := it.Err(); err != nil {
			wiretest.ProtocolError(t, err)
		}
		pi, err := ParsePacketInfo(area)
		want, wantErr := iterPacketInfo(area)
		if pi != want || fmt.Sprint(err) != fmt.Sprint(wantErr) {
			t.Fatalf("ParsePacketInfo = %+v, %v; the iterator's walk %+v, %v", pi, err, want, wantErr)
		}
		if err != nil {
			wiretest.ProtocolError(t, err)
			return
		}
		again, err := ParsePacketInfo(pi.AppendPPIs(nil))
		if err != nil || again != pi {
			t.Fatalf("re-encoded info: %v %+v != %+v", err, again, pi)
		}
	})
}

// iterPacketInfo is ParsePacketInfo written with PPIIter, the reference
// the fuzzer holds the lean walk to.
func iterPacketInfo(area []byte) (PacketInfo, error) {
	var pi PacketInfo
	it := NewPPIIter(area)
	for p, ok := it.Next(); ok; p, ok = it.Next() {
		known := map[PPIType]InfoMask{PPITCPIPChecksum: InfoChecksum, PPITCPLargeSend: InfoLSO,
			PPIIEEE8021Q: InfoVLAN, PPINBLHashValue: InfoHashValue, PPINBLHashInfo: InfoHashInfo, PPIPktInfoID: InfoPktID}
		bit, ok := known[p.Type]
		if !ok {
			continue
		}
		v, err := p.Uint32()
		if err != nil {
			return pi, err
		}
		pi.set(bit, v)
	}
	return pi, it.Err()
}
