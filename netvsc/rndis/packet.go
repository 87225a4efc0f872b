package rndis

import "github.com/vmbusd/vmbusd/netvsc/protoerr"

// The RNDIS PACKET_MSG (docs/protocol/netvsc.md §3.3): the data path's message, one per
// frame, with per-packet info between its header and the frame.

// PacketHeader is the 44-byte header of a PACKET_MSG (docs/protocol/netvsc.md
// §3.3). Offsets are relative to byte 8. Both guests lay a message out as
// header | PPIs | frame, with PerPacketInfoOffset 36 and DataOffset 36 +
// PPI length; openvmm's receive layout puts the PPIs at 44 and the frame
// at 256 (DataOffset 248) with MessageLength = the sub-allocation size.
type PacketHeader struct {
	MessageLength       uint32 // @4
	DataOffset          uint32 // @8
	DataLength          uint32 // @12
	OOBDataOffset       uint32 // @16
	OOBDataLength       uint32 // @20
	NumOOBDataElements  uint32 // @24
	PerPacketInfoOffset uint32 // @28
	PerPacketInfoLength uint32 // @32
	VcHandle            uint32 // @36
	Reserved            uint32 // @40
}

// Marshal appends the 44 header bytes, exactly as given, to dst. It is for
// tests and fault injection; PutPacket builds consistent messages.
func (h PacketHeader) Marshal(dst []byte) []byte {
	dst, b := grow(dst, PacketHeaderSize)
	h.put(b)
	return dst
}

func (h *PacketHeader) put(b []byte) {
	_ = b[PacketHeaderSize-1]
	le.PutUint32(b[0:], uint32(TypePacket))
	le.PutUint32(b[4:], h.MessageLength)
	le.PutUint32(b[8:], h.DataOffset)
	le.PutUint32(b[12:], h.DataLength)
	le.PutUint32(b[16:], h.OOBDataOffset)
	le.PutUint32(b[20:], h.OOBDataLength)
	le.PutUint32(b[24:], h.NumOOBDataElements)
	le.PutUint32(b[28:], h.PerPacketInfoOffset)
	le.PutUint32(b[32:], h.PerPacketInfoLength)
	le.PutUint32(b[36:], h.VcHandle)
	le.PutUint32(b[40:], h.Reserved)
}

// Packet is a decoded PACKET_MSG. Frame and PPI alias the decoded
// bytes.
type Packet struct {
	PacketHeader
	Frame []byte // DataLength bytes at DataOffset
	PPI   []byte // the per-packet-info area; walk it with PPIs or Info
}

// PPIs returns an iterator over the packet's per-packet-info elements.
func (p *Packet) PPIs() PPIIter { return NewPPIIter(p.PPI) }

// Info walks the packet's per-packet info and returns the elements this
// package knows (see ParsePacketInfo).
func (p *Packet) Info() (PacketInfo, error) { return ParsePacketInfo(p.PPI) }

// Unsupported reports what Hyper-V rejects in a guest's PACKET_MSG
// although the layout is sound: out-of-band data or a VC handle (openvmm
// handle_rndis_packet_message; protoerr.KindUnsupported). A host calls it; a guest
// has no need to, since hosts never send these.
func (p *Packet) Unsupported() error {
	const msg = "PACKET_MSG"
	switch {
	case p.OOBDataOffset != 0:
		return protoerr.New(msg, protoerr.KindUnsupported, "oob_data_offset", uint64(p.OOBDataOffset))
	case p.OOBDataLength != 0:
		return protoerr.New(msg, protoerr.KindUnsupported, "oob_data_length", uint64(p.OOBDataLength))
	case p.NumOOBDataElements != 0:
		return protoerr.New(msg, protoerr.KindUnsupported, "num_oob_data_elements", uint64(p.NumOOBDataElements))
	case p.VcHandle != 0:
		return protoerr.New(msg, protoerr.KindUnsupported, "vc_handle", uint64(p.VcHandle))
	}
	return nil
}

// ParsePacket decodes the PACKET_MSG at the start of b, where b holds
// every byte available for it (a receive range, or the rest of a send
// section). It checks, without overflow:
//
//   - MessageLength covers the header and fits in b (protoerr.KindLength);
//   - DataOffset >= 36 (protoerr.KindOffset) — not its alignment, which Hyper-V
//     does not honour (DPDK hn_rndis_rx_data);
//   - DataLength > 0 (protoerr.KindDataLength) and the frame inside MessageLength
//     (protoerr.KindRange);
//   - when there is per-packet info: PerPacketInfoOffset >= 36 and a
//     multiple of 4 (protoerr.KindOffset), the area inside MessageLength (protoerr.KindRange);
//   - when there is OOB data: the area inside MessageLength (protoerr.KindRange).
//
// The PPI elements themselves are checked as they are walked. The message
// occupies b[:MessageLength]; the next aggregated message, if any, follows.
func ParsePacket(b []byte) (Packet, error) {
	const msg = "PACKET_MSG"
	var p Packet
	n, err := checkRNDIS(b, TypePacket, PacketHeaderSize)
	if err != nil {
		return p, err
	}
	h := &p.PacketHeader
	h.MessageLength = uint32(n)
	h.DataOffset = le.Uint32(b[8:])
	h.DataLength = le.Uint32(b[12:])
	h.OOBDataOffset = le.Uint32(b[16:])
	h.OOBDataLength = le.Uint32(b[20:])
	h.NumOOBDataElements = le.Uint32(b[24:])
	h.PerPacketInfoOffset = le.Uint32(b[28:])
	h.PerPacketInfoLength = le.Uint32(b[32:])
	h.VcHandle = le.Uint32(b[36:])
	h.Reserved = le.Uint32(b[40:])

	avail := uint64(n - HeaderSize) // bytes after byte 8
	if h.DataOffset < PacketOffsetMin {
		return p, protoerr.New(msg, protoerr.KindOffset, "data_offset", uint64(h.DataOffset))
	}
	if h.DataLength == 0 {
		return p, protoerr.New(msg, protoerr.KindDataLength, "data_length", 0)
	}
	if uint64(h.DataLength) > avail || uint64(h.DataOffset) > avail-uint64(h.DataLength) {
		return p, protoerr.New(msg, protoerr.KindRange, "data_length", uint64(h.DataLength))
	}
	if h.PerPacketInfoLength != 0 {
		if h.PerPacketInfoOffset < PacketOffsetMin || h.PerPacketInfoOffset%4 != 0 {
			return p, protoerr.New(msg, protoerr.KindOffset, "per_packet_info_offset", uint64(h.PerPacketInfoOffset))
		}
		if uint64(h.PerPacketInfoLength) > avail || uint64(h.PerPacketInfoOffset) > avail-uint64(h.PerPacketInfoLength) {
			return p, protoerr.New(msg, protoerr.KindRange, "per_packet_info_length", uint64(h.PerPacketInfoLength))
		}
		s := HeaderSize + int(h.PerPacketInfoOffset)
		e := s + int(h.PerPacketInfoLength)
		p.PPI = b[s:e:e]
	}
	if h.OOBDataLength != 0 {
		if uint64(h.OOBDataLength) > avail || uint64(h.OOBDataOffset) > avail-uint64(h.OOBDataLength) {
			return p, protoerr.New(msg, protoerr.KindRange, "oob_data_length", uint64(h.OOBDataLength))
		}
	}
	s := HeaderSize + int(h.DataOffset)
	e := s + int(h.DataLength)
	p.Frame = b[s:e:e]
	return p, nil
}

// PacketLen returns the MessageLength PutPacket produces for a
// frame of frameLen bytes with info's per-packet info.
func PacketLen(info *PacketInfo, frameLen int) int {
	return PacketHeaderSize + info.PPILen() + frameLen
}

// MaxPacketHeaderLen is the most bytes PutPacketHeader writes:
// the header and one 16-byte PPI for every PacketInfo field.
const MaxPacketHeaderLen = PacketHeaderSize + maxPacketInfoPPIs*PPIUint32Size

// PutPacketHeader writes the header and per-packet info of a
// PACKET_MSG whose frameLen-byte frame follows immediately but is not
// written here: the GPA-direct path sends these bytes from a header buffer
// and the frame from its own pages (docs/protocol/netvsc.md §2.7). It returns the bytes
// written; the message's MessageLength is that plus frameLen. dst must
// hold the header (ErrBufferTooSmall). info may be nil.
func PutPacketHeader(dst []byte, info *PacketInfo, frameLen int) (int, error) {
	ppiLen := info.PPILen()
	hdr := PacketHeaderSize + ppiLen
	if len(dst) < hdr || frameLen < 0 || uint64(frameLen) > uint64(^uint32(0))-uint64(hdr) {
		return 0, ErrBufferTooSmall
	}
	h := PacketHeader{
		MessageLength: uint32(hdr + frameLen),
		DataOffset:    uint32(hdr - HeaderSize),
		DataLength:    uint32(frameLen),
	}
	if ppiLen > 0 {
		h.PerPacketInfoOffset = PacketOffsetMin
		h.PerPacketInfoLength = uint32(ppiLen)
	}
	h.put(dst)
	info.put(dst[PacketHeaderSize:hdr])
	return hdr, nil
}

// PutPacket writes a complete PACKET_MSG — header, per-packet info,
// frame — into dst, the layout both guests send (the guest writes it
// straight into a send-buffer section). It returns the MessageLength.
// info may be nil.
func PutPacket(dst []byte, info *PacketInfo, frame []byte) (int, error) {
	hdr, err := PutPacketHeader(dst, info, len(frame))
	if err != nil {
		return 0, err
	}
	if len(dst)-hdr < len(frame) {
		return 0, ErrBufferTooSmall
	}
	copy(dst[hdr:], frame)
	return hdr + len(frame), nil
}

// PutPacketAt writes a PACKET_MSG with the frame at byte frameOff of
// the message and MessageLength msgLen, openvmm's receive layout (frame at
// 256, MessageLength = the sub-allocation size; docs/protocol/netvsc.md §2.6). frameOff
// must leave room for the header and PPIs, and msgLen for the frame; the
// bytes between the PPIs and the frame are zeroed, those after the frame
// are left as they are. It returns msgLen.
func PutPacketAt(dst []byte, info *PacketInfo, frame []byte, frameOff, msgLen int) (int, error) {
	ppiLen := info.PPILen()
	hdr := PacketHeaderSize + ppiLen
	if frameOff < hdr || msgLen < frameOff || msgLen-frameOff < len(frame) ||
		len(dst) < msgLen || uint64(msgLen) > uint64(^uint32(0)) {
		return 0, ErrBufferTooSmall
	}
	h := PacketHeader{
		MessageLength: uint32(msgLen),
		DataOffset:    uint32(frameOff - HeaderSize),
		DataLength:    uint32(len(frame)),
	}
	if ppiLen > 0 {
		h.PerPacketInfoOffset = PacketOffsetMin
		h.PerPacketInfoLength = uint32(ppiLen)
	}
	h.put(dst)
	info.put(dst[PacketHeaderSize:hdr])
	clear(dst[hdr:frameOff])
	copy(dst[frameOff:], frame)
	return msgLen, nil
}

// PadMessage pads the RNDIS message at the start of b to a multiple
// of align bytes before another message is appended after it, as DPDK
// does when aggregating packets in a send section (docs/protocol/netvsc.md §3.7): it
// zeroes the padding and rewrites MessageLength. b must extend at least to
// the padded end (ErrBufferTooSmall). It returns the new MessageLength.
func PadMessage(b []byte, align int) (int, error) {
	if len(b) < HeaderSize || align <= 0 {
		return 0, ErrBufferTooSmall
	}
	n := uint64(le.Uint32(b[4:]))
	m := (n + uint64(align) - 1) / uint64(align) * uint64(align)
	if n < HeaderSize || m > uint64(len(b)) {
		return 0, ErrBufferTooSmall
	}
	clear(b[n:m])
	le.PutUint32(b[4:], uint32(m))
	return int(m), nil
}
