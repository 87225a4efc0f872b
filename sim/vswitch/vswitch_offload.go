package vswitch

// Offloads the vSwitch passes on to its port instead of doing them itself.
// Hyper-V's vSwitch hands a guest's large send (LSOv2) to a physical NIC
// that does large send itself, and its checksum requests to a NIC that
// computes checksums, and cuts the frame or computes the checksums only
// for a port that cannot (docs/protocol/netvsc.md §3.4). A port that can implements
// OffloadPort: a kernel TAP with a virtio-net header does (the kernel
// finishes the checksum and cuts the segments only if the frame leaves
// through a device that needs them). Every check the host makes on a
// large send or a checksum request (docs/protocol/netvsc.md §7 host 8) is made either
// way, before the frame reaches the port.

import (
	"github.com/vmbusd/vmbusd/frame/csum"
	"github.com/vmbusd/vmbusd/netvsc/rndis"
)

// FrameOffload is the work a frame handed to an OffloadPort leaves to the
// port's wire. The zero value is a frame that is complete.
type FrameOffload struct {
	// CsumStart and CsumOffset, when CsumStart is not 0: the transport
	// checksum at CsumStart+CsumOffset (from the frame's first byte)
	// holds the pseudo-header sum; the rest, from CsumStart to the end of
	// the frame, is still to be added (virtio-net's NEEDS_CSUM).
	CsumStart, CsumOffset uint16
	// MSS, when not 0: the frame is a TCP super-frame to cut into
	// segments of MSS payload bytes (IPv6 says the family; CWR set in
	// it is cleared on every segment but the first).
	MSS  uint16
	IPv6 bool
}

// Segments is the number of frames f makes on the wire.
func (o FrameOffload) Segments(f []byte) int {
	if o.MSS == 0 || int(o.CsumStart)+13 > len(f) {
		return 1
	}
	hdr := int(o.CsumStart) + int(f[o.CsumStart+12]>>4)*4
	if hdr >= len(f) {
		return 1
	}
	return (len(f) - hdr + int(o.MSS) - 1) / int(o.MSS)
}

// OffloadPort is a Port whose wire finishes checksums and cuts TCP
// super-frames itself.
type OffloadPort interface {
	Port
	// Offloads reports whether the port takes frames with work left now
	// (a port type may or may not, by configuration).
	Offloads() bool
	// TransmitOffload is Transmit with each frame's remaining work;
	// offs[i] belongs to frames[i]. The frames' IP headers (lengths,
	// IPv4 checksum) are complete.
	TransmitOffload(frames [][]byte, offs []FrameOffload)
}

// FillLSOLength sets a large send's IP length where the guest left it 0
// (Linux does, docs/protocol/netvsc.md §3.4): the host takes the frame's length.
func FillLSOLength(f []byte) {
	if len(f) < EthHeaderLen+ipv6Header {
		return
	}
	switch be.Uint16(f[12:]) {
	case EthTypeIPv4:
		if be.Uint16(f[EthHeaderLen+2:]) == 0 && len(f)-EthHeaderLen <= 0xffff {
			be.PutUint16(f[EthHeaderLen+2:], uint16(len(f)-EthHeaderLen))
		}
	case EthTypeIPv6:
		if be.Uint16(f[EthHeaderLen+4:]) == 0 && len(f)-EthHeaderLen-ipv6Header <= 0xffff {
			be.PutUint16(f[EthHeaderLen+4:], uint16(len(f)-EthHeaderLen-ipv6Header))
		}
	}
}

// PartialTxChecksum does what ApplyTxChecksum does, with the same
// checks, but leaves the transport checksum partial for an OffloadPort
// (the IPv4 header checksum is always computed): it returns the frame's
// offload.
func PartialTxChecksum(f []byte, c rndis.TxChecksum) (FrameOffload, error) {
	fl := ParseFlow(f)
	if !fl.IP {
		return FrameOffload{}, errOffloadNotIP
	}
	if c&rndis.TxChecksumIPHeader != 0 && !fl.V6 {
		h := f[fl.L3:fl.L4Off]
		h[10], h[11] = 0, 0
		be.PutUint16(h[10:], ^csum.Fold(csum.Add(0, h)))
	}
	var proto uint8
	switch {
	case c&rndis.TxChecksumTCP != 0:
		proto = IPProtoTCP
	case c&rndis.TxChecksumUDP != 0:
		proto = IPProtoUDP
	default:
		return FrameOffload{}, nil
	}
	if fl.L4 != proto {
		return FrameOffload{}, errOffloadTransport
	}
	if c.TransportOffset() != fl.L4Off {
		return FrameOffload{}, errOffloadOffset
	}
	at := 16
	if proto == IPProtoUDP {
		at = 6
	}
	seg := f[fl.L4Off:fl.L4End]
	be.PutUint16(seg[at:], csum.Fold(PseudoSum(&fl, proto, len(seg))))
	return FrameOffload{CsumStart: uint16(fl.L4Off), CsumOffset: uint16(at)}, nil
}

// segmentUDP cuts a UDP super-frame (the kernel's UDP segmentation
// offload) into datagrams of mss payload bytes, each with its own IP
// length and IPv4 id, UDP length and checksum, appending each via add
// (nil stops it).
func segmentUDP(f []byte, fl Flow, mss int, add func(n int) []byte) {
	hdrLen := fl.L4Off + udpHeader
	payload := f[hdrLen:fl.L4End]
	var id uint16
	if !fl.V6 {
		id = be.Uint16(f[fl.L3+4:])
	}
	for i, off := 0, 0; off < len(payload); i++ {
		n := min(mss, len(payload)-off)
		seg := add(hdrLen + n)
		if seg == nil {
			return
		}
		copy(seg, f[:hdrLen])
		copy(seg[hdrLen:], payload[off:off+n])
		s := ParseFlowAt(seg, fl)
		if !fl.V6 {
			h := seg[fl.L3:fl.L4Off]
			be.PutUint16(h[2:], uint16(len(seg)-fl.L3))
			be.PutUint16(h[4:], id+uint16(i))
			h[10], h[11] = 0, 0
			be.PutUint16(h[10:], ^csum.Fold(csum.Add(0, h)))
		} else {
			be.PutUint16(seg[fl.L3+4:], uint16(len(seg)-fl.L4Off))
		}
		u := seg[fl.L4Off:]
		be.PutUint16(u[4:], uint16(len(u)))
		u[6], u[7] = 0, 0
		c := ^csum.Fold(csum.Add(PseudoSum(&s, IPProtoUDP, len(u)), u))
		if c == 0 {
			c = 0xffff
		}
		be.PutUint16(u[6:], c)
		off += n
	}
}

// OffloadUplink is an Uplink that also takes TCP super-frames whole, as
// a NIC with receive segment coalescing does: the Hyper-V vSwitch hands
// a guest that enabled RSC over VMBus one coalesced frame where a guest
// without it gets MTU-sized segments (docs/protocol/netvsc.md §3.4). Whoever
// delivers a super-frame to a guest that cannot take it cuts it
// (CutSuperFrame).
type OffloadUplink interface {
	Uplink
	// DeliverOffload is Deliver with each frame's offload metadata:
	// offs[i] belongs to frames[i]. A frame with an MSS is a TCP
	// super-frame whose TCP checksum is partial (CsumStart, CsumOffset),
	// as a kernel TAP's virtio-net header describes it; a frame with the
	// zero FrameOffload is complete.
	DeliverOffload(frames [][]byte, offs []FrameOffload) int
}

// CheckSuperFrame reports whether f with offload o is a TCP super-frame a
// receiver can take whole or cut: an untagged, unfragmented IPv4 or IPv6
// TCP frame of the family o names, whose transport header starts at
// CsumStart with the checksum at offset 16, whose IP datagram is at most
// 64 KiB (plus the IPv6 header).
func CheckSuperFrame(f []byte, o FrameOffload) (Flow, bool) {
	fl := ParseFlow(f)
	if o.MSS == 0 || !fl.IP || fl.Frag || fl.L4 != IPProtoTCP || fl.V6 != o.IPv6 ||
		int(o.CsumStart) != fl.L4Off || o.CsumOffset != 16 || fl.L4End != len(f) {
		return fl, false
	}
	return fl, len(f)-fl.L3 <= 0xffff+ipv6Header
}

// CutSuperFrame cuts a TCP super-frame that CheckSuperFrame accepted
// into MSS-sized segments with complete checksums, appending each via
// add (nil stops it).
func CutSuperFrame(f []byte, fl Flow, o FrameOffload, add func(n int) []byte) {
	SegmentLSO(f, fl, int(o.MSS), add)
}
