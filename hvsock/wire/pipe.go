package wire

import (
	"encoding/binary"
	"fmt"
)

// The hv_sock stream on a VMBus channel (docs/protocol/hvsock.md §1.6;
// Linux hyperv_transport.c, which OpenVMM's pipe and FreeBSD's hv_sock.c
// also speak). Every piece of data is one inband packet whose payload
// starts with the 8-byte vmpipe_proto_header:
//
//	 0      2        4      6       8          16         20          24           24+N  align8  +8
//	+------+--------+------+-------+----------+----------+-----------+------------+-----+-------+
//	| type | offset8| len8 | flags | trans_id | pkt_type | data_size | payload N  | pad | trail |
//	|  6   |   2    |      |   0   |    0     |    1     |     N     |            |  0  |       |
//	+------+--------+------+-------+----------+----------+-----------+------------+-----+-------+
//	'------ vmpacket_descriptor (vmbus) ------'-- vmpipe_proto_header --'
//
// A packet with data_size 0 is the sender's FIN (shutdown of its write
// side); 32 bytes on the ring. Payloads are at most MTU bytes; Linux sends
// at most DefaultChunk. The descriptor and the trailer are the ring's
// business (package vmbus): a writer hands it the pipe header and the
// payload, a reader gets the packet body back and calls DecodePacket.

// Wire constants, named as in hyperv_transport.c.
const (
	// PipeHeaderSize is sizeof(struct vmpipe_proto_header).
	PipeHeaderSize = 8
	// HeaderLen is HVS_HEADER_LEN: the 16-byte descriptor and the pipe
	// header before the payload.
	HeaderLen = 16 + PipeHeaderSize
	// MTU is HVS_MTU_SIZE: the largest payload of one packet "per the host
	// side's design" (also MAX_PIPE_DATA_PAYLOAD and OpenVMM's
	// MAXIMUM_PIPE_PACKET_SIZE).
	MTU = 16384
	// DefaultChunk is HVS_SEND_BUF_SIZE, the most payload Linux puts in one
	// packet: a 4 KiB page less the pipe header. Smaller packets let the
	// host start on data sooner ("one VMBus packet is the smallest
	// processing unit").
	DefaultChunk = 4096 - PipeHeaderSize
	// FINLen is HVS_PKT_LEN(0): a FIN's ring bytes, trailer included.
	FINLen = HeaderLen + trailerLen
	// Reserve is HVS_PKT_LEN(1) + HVS_PKT_LEN(0) = 72: what a writer always
	// leaves free so that a FIN can be queued whatever happened before
	// (hvs_channel_writable_bytes; docs/protocol/hvsock.md §1.7).
	Reserve = 40 + FINLen
	// MaxPacketBody is the largest packet body a reader accepts:
	// HVS_MAX_PKT_SIZE (HVS_PKT_LEN(MTU) = 16416) less the trailer.
	MaxPacketBody = HeaderLen + MTU
)

// Pipe packet types (vmpipe_proto_header.pkt_type).
const (
	// PipeData is VMPIPE_PKT_TYPE_DATA, the only type a writer sends.
	PipeData = 1
	// PipePartial is what OpenVMM's reader writes back into its own ring
	// for a packet it read in part; a reader accepts it like PipeData.
	PipePartial = 2
)

const (
	trailerLen   = 8
	descInband   = 6 // VM_PKT_DATA_INBAND
	descOffset8  = 2 // the descriptor alone: Linux's receiver assumes it
	minPacketLen = HeaderLen
)

// PacketLen is HVS_PKT_LEN(n): the ring bytes of a packet carrying n bytes
// of payload, trailer included.
func PacketLen(n int) int { return HeaderLen + align8(n) + trailerLen }

// Writable is hvs_channel_writable_bytes: the most payload a writer may put
// on a ring with free bytes free, rounded down to 8, keeping Reserve free
// so that a FIN always fits. 0 when free <= Reserve.
func Writable(free int) int {
	if free <= Reserve {
		return 0
	}
	return (free - Reserve) &^ 7
}

func align8(n int) int { return (n + 7) &^ 7 }

// PutPipeHeader writes the vmpipe_proto_header of a DATA packet carrying n
// bytes (n == 0: a FIN) into b[:PipeHeaderSize].
func PutPipeHeader(b []byte, n int) {
	binary.LittleEndian.PutUint32(b[0:], PipeData)
	binary.LittleEndian.PutUint32(b[4:], uint32(n))
}

// FrameKind names how an hv_sock packet broke the framing rules.
type FrameKind int

const (
	// FrameShort: the packet is too short for a descriptor and a pipe
	// header, or its len8 does not match its length.
	FrameShort FrameKind = iota + 1
	// FrameType: the descriptor type is not inband.
	FrameType
	// FrameOffset: offset8 is below 2 or leaves no room for the pipe header.
	FrameOffset
	// FramePipeType: the pipe header's type is neither DATA nor PARTIAL.
	FramePipeType
	// FrameSize: data_size runs past the end of the packet.
	FrameSize
	// FrameMTU: data_size exceeds MTU.
	FrameMTU
)

var frameNames = [...]string{
	FrameShort:    "short packet",
	FrameType:     "descriptor type",
	FrameOffset:   "offset8",
	FramePipeType: "pipe packet type",
	FrameSize:     "data size",
	FrameMTU:      "data size above mtu",
}

func (k FrameKind) String() string {
	if k > 0 && int(k) < len(frameNames) {
		return frameNames[k]
	}
	return fmt.Sprintf("frame(%d)", int(k))
}

// FrameKinds lists every kind DecodePacket returns.
func FrameKinds() []FrameKind {
	return []FrameKind{FrameShort, FrameType, FrameOffset, FramePipeType, FrameSize, FrameMTU}
}

// FrameError reports a packet that breaks the hv_sock framing. The peer
// sent it; the connection is dead (Linux returns -EIO, OpenVMM errors).
type FrameError struct {
	Kind FrameKind
	Val  uint64
}

func (e *FrameError) Error() string {
	return fmt.Sprintf("hvsock/wire: malformed packet: %s (value %d)", e.Kind, e.Val)
}

// DecodePacket parses one hv_sock packet as copied out of the ring: raw is
// the packet body, descriptor to padding (vmbus.Packet.Raw, len8*8 bytes).
// It returns the payload, a sub-slice of raw; an empty payload is the
// peer's FIN. The checks are Linux's hvs_update_recv_data (data_size within
// the packet and at most MTU) plus OpenVMM's pipe type check. Flags and
// the transaction id are ignored, as both of them do.
func DecodePacket(raw []byte) ([]byte, error) {
	if len(raw) >= minPacketLen {
		if body := int(binary.LittleEndian.Uint16(raw[4:])) * 8; body != len(raw) {
			return nil, &FrameError{Kind: FrameShort, Val: uint64(body)}
		}
	}
	start, size, _, err := DecodeHead(raw)
	if err != nil {
		return nil, err
	}
	return raw[start : start+size : start+size], nil
}

// DecodeHead is DecodePacket for a reader that leaves the packet in the
// ring and copies its payload straight to its destination
// (vmbus.InRing.Peek, as OpenVMM's pipe reader does): head is the start of
// the packet body, at least HeaderLen bytes of it (or all of a shorter
// packet), and the body's length is the descriptor's len8*8. It returns
// where the payload starts in the body and its size, after the same checks
// as DecodePacket. When head stops before the pipe header (a sender that
// put it past offset8 2, which no known one does), it returns need, the
// head length that holds it, and no error: peek again with that much.
func DecodeHead(head []byte) (start, size, need int, err error) {
	if len(head) < minPacketLen {
		return 0, 0, 0, &FrameError{Kind: FrameShort, Val: uint64(len(head))}
	}
	typ := binary.LittleEndian.Uint16(head[0:])
	off := int(binary.LittleEndian.Uint16(head[2:])) * 8
	body := int(binary.LittleEndian.Uint16(head[4:])) * 8
	switch {
	case body < minPacketLen:
		return 0, 0, 0, &FrameError{Kind: FrameShort, Val: uint64(body)}
	case typ != descInband:
		return 0, 0, 0, &FrameError{Kind: FrameType, Val: uint64(typ)}
	case off < descOffset8*8 || off > body-PipeHeaderSize:
		return 0, 0, 0, &FrameError{Kind: FrameOffset, Val: uint64(off / 8)}
	case off+PipeHeaderSize > len(head):
		return 0, 0, off + PipeHeaderSize, nil
	}
	ptype := binary.LittleEndian.Uint32(head[off:])
	sz := binary.LittleEndian.Uint32(head[off+4:])
	room := body - off - PipeHeaderSize
	switch {
	case ptype != PipeData && ptype != PipePartial:
		return 0, 0, 0, &FrameError{Kind: FramePipeType, Val: uint64(ptype)}
	case sz > MTU:
		return 0, 0, 0, &FrameError{Kind: FrameMTU, Val: uint64(sz)}
	case int(sz) > room:
		return 0, 0, 0, &FrameError{Kind: FrameSize, Val: uint64(sz)}
	}
	return off + PipeHeaderSize, int(sz), 0, nil
}
