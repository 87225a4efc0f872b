package vmbus

import (
	"encoding/binary"
	"fmt"
)

// PacketType is the vmpacket_descriptor type (include/linux/hyperv.h
// enum vmbus_packet_type; docs/protocol/vmbus-ring.md §2.2).
type PacketType uint16

// Packet types that occur on channels. Any other type read from a ring is a
// protocol violation (CorruptType), as in openvmm's parse_packet.
const (
	PacketInband       PacketType = 0x6 // VM_PKT_DATA_INBAND
	PacketTransferPage PacketType = 0x7 // VM_PKT_DATA_USING_XFER_PAGES
	PacketGPADirect    PacketType = 0x9 // VM_PKT_DATA_USING_GPA_DIRECT
	PacketCompletion   PacketType = 0xb // VM_PKT_COMP
)

func (t PacketType) String() string {
	switch t {
	case PacketInband:
		return "inband"
	case PacketTransferPage:
		return "transfer-page"
	case PacketGPADirect:
		return "gpa-direct"
	case PacketCompletion:
		return "completion"
	}
	return fmt.Sprintf("type(%#x)", uint16(t))
}

func validType(t PacketType) bool {
	return t == PacketInband || t == PacketTransferPage || t == PacketGPADirect || t == PacketCompletion
}

// FlagCompletionRequested asks the receiver to answer with a completion
// packet carrying the same transaction id.
const FlagCompletionRequested uint16 = 1

const (
	descriptorSize = 16 // struct vmpacket_descriptor
	trailerSize    = 8  // u64 (start write index << 32) after each packet
	// MinPacketSize is the smallest packet a ring can carry: a descriptor
	// and its trailer.
	MinPacketSize = descriptorSize + trailerSize
	// xferHeaderSize is struct vmtransfer_page_packet_header without ranges.
	xferHeaderSize = 24
	// gpaHeaderSize is struct vmdata_gpa_direct without ranges.
	gpaHeaderSize = 24
	// HyperVPageSize is the page size of GPA ranges and GPADLs, whatever the
	// guest's own page size.
	HyperVPageSize = 4096
)

// align8 rounds n up to a multiple of 8.
func align8(n int) int { return (n + 7) &^ 7 }

// PacketSize returns the ring bytes a packet with hdrLen bytes of header
// beyond the descriptor and payloadLen bytes of payload occupies, trailer
// included.
func PacketSize(hdrLen, payloadLen int) int {
	return align8(descriptorSize+hdrLen+payloadLen) + trailerSize
}

// Packet is one packet read from a ring. Raw is the caller's buffer holding
// a private copy of the whole packet (descriptor, header, payload, padding;
// no trailer), so the host cannot change it after validation. Raw stays
// valid until the caller reuses its buffer.
type Packet struct {
	Type    PacketType
	Flags   uint16
	TransID uint64
	Offset8 uint16
	Len8    uint16
	Raw     []byte
	// Cookie is the cookie of the request a completion answers
	// (Channel.Recv); 0 otherwise.
	Cookie uint64
}

// Payload returns the bytes after the header: [offset8*8, len8*8). Its length
// is a multiple of 8; protocols above carry exact lengths.
func (p *Packet) Payload() []byte { return p.Raw[int(p.Offset8)*8:] }

// Header returns the type-specific header bytes between the descriptor and
// the payload.
func (p *Packet) Header() []byte { return p.Raw[descriptorSize : int(p.Offset8)*8] }

// CompletionRequested reports whether the sender asked for a completion.
func (p *Packet) CompletionRequested() bool { return p.Flags&FlagCompletionRequested != 0 }

// TransferPageSet returns the transfer-page set id of a transfer-page
// packet (netvsc: the receive buffer id).
func (p *Packet) TransferPageSet() uint16 { return binary.LittleEndian.Uint16(p.Raw[16:]) }

// RangeCount returns the range count of a transfer-page or GPA-direct
// packet. The reader has checked that the table fits in the header.
func (p *Packet) RangeCount() int { return int(binary.LittleEndian.Uint32(p.Raw[20:])) }

// TransferRange returns range i of a transfer-page packet: a byte count and
// byte offset within the transfer-page set. i must be < RangeCount. The
// values come from the host: the caller checks them against its buffer.
func (p *Packet) TransferRange(i int) (count, offset uint32) {
	b := p.Raw[xferHeaderSize+8*i:]
	return binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint32(b[4:])
}

// GPARange is one range of a GPA-direct packet: Count bytes starting Offset
// bytes into the first of the listed 4 KiB guest-physical pages.
type GPARange struct {
	Count  uint32
	Offset uint32
	pfns   []byte // 8 bytes per page frame number, wire order
}

// Pages returns how many page frame numbers the range lists.
func (r GPARange) Pages() int { return len(r.pfns) / 8 }

// PFN returns page frame number i.
func (r GPARange) PFN(i int) uint64 { return binary.LittleEndian.Uint64(r.pfns[8*i:]) }

// GPARanges iterates the ranges of a validated GPA-direct packet.
type GPARanges struct {
	b []byte
	n int
}

// GPARanges returns an iterator over the packet's GPA ranges.
func (p *Packet) GPARanges() GPARanges {
	return GPARanges{b: p.Raw[gpaHeaderSize : int(p.Offset8)*8], n: p.RangeCount()}
}

// Next returns the next range; ok is false after the last one.
func (it *GPARanges) Next() (r GPARange, ok bool) {
	if it.n == 0 || len(it.b) < 8 {
		return GPARange{}, false
	}
	r.Count = binary.LittleEndian.Uint32(it.b)
	r.Offset = binary.LittleEndian.Uint32(it.b[4:])
	np := gpaPages(r.Offset, r.Count)
	end := 8 + 8*np
	if end > len(it.b) { // cannot happen after validation
		return GPARange{}, false
	}
	r.pfns = it.b[8:end]
	it.b = it.b[end:]
	it.n--
	return r, true
}

// gpaPages is the number of 4 KiB pages spanned by count bytes starting
// offset bytes into the first page.
func gpaPages(offset, count uint32) int {
	return int((uint64(offset) + uint64(count) + HyperVPageSize - 1) / HyperVPageSize)
}

// GPARangeSize returns the header bytes one GPA range of pages PFNs takes.
func GPARangeSize(pages int) int { return 8 + 8*pages }

// AppendGPARange appends the wire form of one GPA range to dst. len(pfns)
// must equal the pages spanned by offset and count.
func AppendGPARange(dst []byte, count, offset uint32, pfns []uint64) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, count)
	dst = binary.LittleEndian.AppendUint32(dst, offset)
	for _, pfn := range pfns {
		dst = binary.LittleEndian.AppendUint64(dst, pfn)
	}
	return dst
}

// GPAHeader returns the 8 header bytes of a GPA-direct packet that precede
// its range table (reserved u32, range count u32); the caller appends the
// ranges with AppendGPARange and passes the result as the packet header.
func GPAHeader(dst []byte, ranges int) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, 0)
	return binary.LittleEndian.AppendUint32(dst, uint32(ranges))
}

// TransferPageHeader appends the 8 header bytes of a transfer-page packet
// (set id, sender-owns flag, reserved, range count); ranges follow as pairs
// of u32 byte count, u32 byte offset (AppendTransferRange).
func TransferPageHeader(dst []byte, setID uint16, ranges int) []byte {
	dst = binary.LittleEndian.AppendUint16(dst, setID)
	dst = append(dst, 0, 0)
	return binary.LittleEndian.AppendUint32(dst, uint32(ranges))
}

// AppendTransferRange appends one transfer-page range.
func AppendTransferRange(dst []byte, count, offset uint32) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, count)
	return binary.LittleEndian.AppendUint32(dst, offset)
}

// checkHeader validates the type-specific header of a copied packet
// (docs/protocol/vmbus-ring.md §2.5: openvmm parse_packet and Linux netvsc hardening).
func checkHeader(p *Packet) *CorruptError {
	switch p.Type {
	case PacketTransferPage:
		if p.Offset8 < 3 {
			return &CorruptError{Kind: CorruptOffset, Val: uint64(p.Offset8)}
		}
		n := uint64(p.RangeCount())
		if n > uint64(int(p.Offset8)*8-xferHeaderSize)/8 {
			return &CorruptError{Kind: CorruptRanges, Val: n}
		}
	case PacketGPADirect:
		if p.Offset8 < 3 {
			return &CorruptError{Kind: CorruptOffset, Val: uint64(p.Offset8)}
		}
		n := p.RangeCount()
		if n == 0 {
			return &CorruptError{Kind: CorruptRanges, Val: 0}
		}
		b := p.Raw[gpaHeaderSize : int(p.Offset8)*8]
		for i := 0; i < n; i++ {
			if len(b) < 8 {
				return &CorruptError{Kind: CorruptRanges, Val: uint64(n)}
			}
			count := binary.LittleEndian.Uint32(b)
			off := binary.LittleEndian.Uint32(b[4:])
			if off >= HyperVPageSize {
				return &CorruptError{Kind: CorruptRanges, Val: uint64(off)}
			}
			np := uint64(gpaPages(off, count))
			if np > uint64(len(b)-8)/8 {
				return &CorruptError{Kind: CorruptRanges, Val: np}
			}
			b = b[8+8*np:]
		}
	}
	return nil
}
