package netvsc

import (
	"encoding/binary"
	"errors"
	"os"
	"testing"

	"github.com/vmbusd/vmbusd/frame"
	"github.com/vmbusd/vmbusd/frame/csum"
	"github.com/vmbusd/vmbusd/netvsc/nvsp"
	"github.com/vmbusd/vmbusd/netvsc/protoerr"
	"github.com/vmbusd/vmbusd/netvsc/rndis"
	"github.com/vmbusd/vmbusd/vmbus"
)

// recorder is an rxHandler that keeps what the parser found.
type recorder struct {
	slot     rxFrame
	recv     []byte
	frames   [][]byte
	infos    []rndis.PacketInfo
	controls [][]byte
}

func (r *recorder) rxSlot() *rxFrame { return &r.slot }

func (r *recorder) rxData(f *rxFrame) {
	if f.off < 0 || f.n <= 0 || f.off+f.n > len(r.recv) {
		panic("frame outside the receive buffer")
	}
	r.frames = append(r.frames, append([]byte(nil), r.recv[f.off:f.off+f.n]...))
	r.infos = append(r.infos, f.info)
}

func (r *recorder) rxControl(msg []byte) error {
	r.controls = append(r.controls, append([]byte(nil), msg...))
	return nil
}

// ringPair returns the two ends of a heap ring.
func ringPair(t testing.TB, size int) (*vmbus.OutRing, *vmbus.InRing) {
	mem := make([]byte, os.Getpagesize()+size)
	if err := vmbus.InitRingHeader(mem); err != nil {
		t.Fatal(err)
	}
	out, err := vmbus.NewOutRing(mem)
	if err != nil {
		t.Fatal(err)
	}
	in, err := vmbus.NewInRing(mem, 0)
	if err != nil {
		t.Fatal(err)
	}
	return out, in
}

// xferPacket reads a transfer-page packet with the given header (after
// the descriptor) and NVSP payload through a ring, so the ring reader's
// checks apply first.
func xferPacket(t testing.TB, tid uint64, hdr, payload []byte) (vmbus.Packet, error) {
	out, in := ringPair(t, 16<<10)
	for len(hdr)%8 != 0 {
		hdr = append(hdr, 0)
	}
	if err := out.Write(vmbus.PacketTransferPage, vmbus.FlagCompletionRequested, tid, hdr, payload); err != nil {
		return vmbus.Packet{}, err
	}
	out.Commit()
	return in.Read(make([]byte, 16<<10))
}

var nvspData = nvsp.RNDISPacket{ChannelType: nvsp.RMCData, SectionIndex: nvsp.NoSection}.Marshal(nil)

func TestParseXferFramesAndInfo(t *testing.T) {
	recv := make([]byte, 4*2048)
	var info rndis.PacketInfo
	info.SetVLAN(rndis.NewVLANInfo(5, false, 42))
	info.SetHashValue(0xdeadbeef)
	info.SetHashInfo(rndis.NDISHashFunctionToeplitz | rndis.NDISHashTCPIPv4)
	info.SetChecksum(uint32(rndis.RxChecksumTCPOK | rndis.RxChecksumIPOK))
	f1 := []byte("0123456789abcdef0123456789abcdefxyz")
	if _, err := rndis.PutPacketAt(recv[2048:], &info, f1, 256, 2048); err != nil {
		t.Fatal(err)
	}
	n2, _ := rndis.PutPacket(recv[4096:], nil, []byte("second frame......"))
	ctl := rndis.SetComplete{RequestID: 7}.Marshal(nil)
	copy(recv[6144:], ctl)
	hdr := vmbus.TransferPageHeader(nil, nvsp.RecvBufID, 3)
	hdr = vmbus.AppendTransferRange(hdr, 2048, 2048)
	hdr = vmbus.AppendTransferRange(hdr, uint32(n2), 4096)
	hdr = vmbus.AppendTransferRange(hdr, uint32(len(ctl)), 6144)
	p, err := xferPacket(t, 1, hdr, nvspData)
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{recv: recv}
	if err := parseXfer(&p, recv, make([]byte, maxControlMessage), r); err != nil {
		t.Fatal(err)
	}
	if len(r.frames) != 2 || string(r.frames[0]) != string(f1) || string(r.frames[1]) != "second frame......" {
		t.Fatalf("frames %q", r.frames)
	}
	var m frame.Meta
	applyRxInfo(&m, &r.infos[0])
	if m.Flags&frame.MetaVLAN == 0 || m.VLAN != rndis.NewVLANInfo(5, false, 42).TCI() || m.Flags&frame.MetaHash == 0 || m.Hash != 0xdeadbeef ||
		m.Flags&frame.MetaRxL4ChecksumOK == 0 || m.Flags&frame.MetaRxIPChecksumOK == 0 {
		t.Errorf("meta %+v", m)
	}
	// The second frame has no per-packet info: none of the first's may
	// carry over (the parser fills one rxFrame, rxSlot, for every frame).
	if r.infos[1] != (rndis.PacketInfo{}) {
		t.Errorf("second frame's info %+v, want none", r.infos[1])
	}
	if len(r.controls) != 1 || string(r.controls[0]) != string(ctl) {
		t.Errorf("controls %x", r.controls)
	}
}

func TestParseXferRejects(t *testing.T) {
	recv := make([]byte, 8192)
	good, _ := rndis.PutPacket(recv[0:], nil, make([]byte, 100))
	packet := func(set uint16, ranges ...[2]uint32) []byte {
		h := vmbus.TransferPageHeader(nil, set, len(ranges))
		for _, r := range ranges {
			h = vmbus.AppendTransferRange(h, r[0], r[1])
		}
		return h
	}
	put := func(off int, f func(b []byte)) {
		rndis.PutPacket(recv[off:], nil, make([]byte, 100))
		f(recv[off:])
	}
	put(1024, func(b []byte) { binary.LittleEndian.PutUint32(b[4:], 5000) })                                           // MessageLength past the range
	put(2048, func(b []byte) { binary.LittleEndian.PutUint32(b[8:], 8) })                                              // DataOffset inside the header
	put(3072, func(b []byte) { binary.LittleEndian.PutUint32(b[12:], 0) })                                             // DataLength 0
	put(4096, func(b []byte) { binary.LittleEndian.PutUint32(b[12:], 1000) })                                          // data past MessageLength
	put(5120, func(b []byte) { binary.LittleEndian.PutUint32(b[28:], 38); binary.LittleEndian.PutUint32(b[32:], 16) }) // rndis.PPI offset misaligned
	put(5120+512, func(b []byte) { binary.LittleEndian.PutUint32(b[0:], 0x77) })                                       // unknown type (control path)
	for _, tc := range []struct {
		name    string
		hdr     []byte
		payload []byte
		kind    protoerr.Kind
	}{
		{"pageset", packet(0x1234, [2]uint32{uint32(good), 0}), nvspData, protoerr.KindType},
		{"range-past-end", packet(nvsp.RecvBufID, [2]uint32{200, 8100}), nvspData, protoerr.KindRange},
		{"range-overflow", packet(nvsp.RecvBufID, [2]uint32{0xffffffff, 16}), nvspData, protoerr.KindRange},
		{"short-range", packet(nvsp.RecvBufID, [2]uint32{4, 0}), nvspData, protoerr.KindShort},
		{"nvsp-type", packet(nvsp.RecvBufID, [2]uint32{uint32(good), 0}), nvsp.RNDISComplete{}.Marshal(nil), protoerr.KindType},
		{"message-length", packet(nvsp.RecvBufID, [2]uint32{1000, 1024}), nvspData, protoerr.KindLength},
		{"data-offset", packet(nvsp.RecvBufID, [2]uint32{1000, 2048}), nvspData, protoerr.KindOffset},
		{"data-length", packet(nvsp.RecvBufID, [2]uint32{1000, 3072}), nvspData, protoerr.KindDataLength},
		{"data-range", packet(nvsp.RecvBufID, [2]uint32{1000, 4096}), nvspData, protoerr.KindRange},
		{"ppi-offset", packet(nvsp.RecvBufID, [2]uint32{1000, 5120}), nvspData, protoerr.KindOffset},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := xferPacket(t, 1, tc.hdr, tc.payload)
			if err != nil {
				t.Fatal(err)
			}
			err = parseXfer(&p, recv, make([]byte, maxControlMessage), &recorder{recv: recv})
			var pe *protoerr.Error
			if !errors.As(err, &pe) || pe.Kind != tc.kind {
				t.Fatalf("got %v, want kind %s", err, tc.kind)
			}
		})
	}
}

func TestIdxRingIsFIFOAndBounded(t *testing.T) {
	r := newIdxRing(5)
	for i := range 5 {
		r.put(uint32(i))
	}
	if r.len() != 5 {
		t.Fatal(r.len())
	}
	for i := range 5 {
		v, ok := r.take()
		if !ok || v != uint32(i) {
			t.Fatalf("take %d: %d %v", i, v, ok)
		}
	}
	if _, ok := r.take(); ok {
		t.Fatal("took from an empty ring")
	}
}

func TestSegmentChecksums(t *testing.T) {
	// fixTCPSegment's checksum must verify (a sum over pseudo-header and
	// segment folding to 0xffff).
	seg := make([]byte, 54+100)
	binary.BigEndian.PutUint16(seg[12:], etherTypeIPv4)
	seg[14] = 0x45
	seg[23] = protoTCP
	copy(seg[26:], []byte{10, 0, 0, 1, 10, 0, 0, 2})
	seg[46] = 0x50
	for i := 54; i < len(seg); i++ {
		seg[i] = byte(i)
	}
	fixTCPSegment(seg, etherTypeIPv4, 14, 34, 1448, 1, true, false)
	if csum.Fold(csum.Add(0, seg[14:34])) != 0xffff {
		t.Errorf("IPv4 header checksum does not verify")
	}
	sum := csum.Add(0, seg[26:34]) + protoTCP + uint32(len(seg)-34)
	if csum.Fold(csum.Add(sum, seg[34:])) != 0xffff {
		t.Errorf("TCP checksum does not verify")
	}
	if binary.BigEndian.Uint32(seg[38:]) != 1448 {
		t.Errorf("sequence not advanced")
	}
}

// FuzzRxTransferPage feeds arbitrary transfer-page headers, NVSP payloads
// and receive-buffer contents through the ring reader and the receive
// parser: it must never panic, and every frame it reports must lie inside
// the receive buffer.
func FuzzRxTransferPage(f *testing.F) {
	recv := make([]byte, 4096)
	n, _ := rndis.PutPacket(recv[512:], nil, []byte("seed frame with some bytes"))
	hdr := vmbus.TransferPageHeader(nil, nvsp.RecvBufID, 2)
	hdr = vmbus.AppendTransferRange(hdr, uint32(n), 512)
	hdr = vmbus.AppendTransferRange(hdr, 100, 4000)
	f.Add(hdr, nvspData, recv)
	var info rndis.PacketInfo
	info.SetVLAN(3)
	info.SetChecksum(1)
	rndis.PutPacketAt(recv[1024:], &info, []byte("ppi frame"), 256, 1024)
	hdr2 := vmbus.AppendTransferRange(vmbus.TransferPageHeader(nil, nvsp.RecvBufID, 1), 1024, 1024)
	f.Add(hdr2, nvspData, recv)
	f.Fuzz(func(t *testing.T, hdr, payload, recv []byte) {
		if len(hdr) > 4096 || len(payload) > 4096 || len(recv) > 1<<20 {
			return
		}
		p, err := xferPacket(t, 3, hdr, payload)
		if err != nil || p.Type != vmbus.PacketTransferPage {
			return
		}
		r := &recorder{recv: recv}
		parseXfer(&p, recv, make([]byte, maxControlMessage), r)
		for _, ctl := range r.controls {
			if len(ctl) > maxControlMessage {
				t.Fatalf("control message of %d bytes", len(ctl))
			}
		}
	})
}
