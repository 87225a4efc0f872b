package sim

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

// offloadPort returns the NIC's port when it takes offloads.
func (n *NIC) offloadPort() OffloadPort {
	p := n.port.Load()
	if p == nil {
		return nil
	}
	if op, ok := (*p).(OffloadPort); ok && op.Offloads() {
		return op
	}
	return nil
}

// fillLSOLength sets a large send's IP length where the guest left it 0
// (Linux does, docs/protocol/netvsc.md §3.4): the host takes the frame's length.
func fillLSOLength(f []byte) {
	if len(f) < ethHeaderLen+ipv6Header {
		return
	}
	switch be.Uint16(f[12:]) {
	case ethTypeIPv4:
		if be.Uint16(f[ethHeaderLen+2:]) == 0 && len(f)-ethHeaderLen <= 0xffff {
			be.PutUint16(f[ethHeaderLen+2:], uint16(len(f)-ethHeaderLen))
		}
	case ethTypeIPv6:
		if be.Uint16(f[ethHeaderLen+4:]) == 0 && len(f)-ethHeaderLen-ipv6Header <= 0xffff {
			be.PutUint16(f[ethHeaderLen+4:], uint16(len(f)-ethHeaderLen-ipv6Header))
		}
	}
}

// addLSOWhole adds a validated large send to the batch whole, for an
// OffloadPort: IP length and IPv4 header checksum set, the TCP checksum
// left as the pseudo-header sum. False when the batch has no room.
func (b *txBatch) addLSOWhole(f []byte, fl flow, mss int) bool {
	n := fl.l4end
	o := b.alloc(n)
	if o == nil {
		return false
	}
	copy(o, f[:n])
	s := parseFlowAt(o, fl)
	if !fl.v6 {
		h := o[fl.l3:fl.l4off]
		be.PutUint16(h[2:], uint16(n-fl.l3))
		h[10], h[11] = 0, 0
		be.PutUint16(h[10:], ^csum.Fold(csum.Add(0, h)))
	} else {
		be.PutUint16(o[fl.l3+4:], uint16(n-fl.l4off))
	}
	t := o[fl.l4off:]
	be.PutUint16(t[16:], csum.Fold(pseudoSum(&s, ipProtoTCP, len(t))))
	b.offs[len(b.offs)-1] = FrameOffload{CsumStart: uint16(fl.l4off), CsumOffset: 16, MSS: uint16(mss), IPv6: fl.v6}
	b.work = true
	return true
}

// partialTxChecksum does what applyTxChecksum does, with the same
// checks, but leaves the transport checksum partial for an OffloadPort
// (the IPv4 header checksum is always computed): it returns the frame's
// offload.
func partialTxChecksum(f []byte, c rndis.TxChecksum) (FrameOffload, error) {
	fl := parseFlow(f)
	if !fl.ip {
		return FrameOffload{}, errOffloadNotIP
	}
	if c&rndis.TxChecksumIPHeader != 0 && !fl.v6 {
		h := f[fl.l3:fl.l4off]
		h[10], h[11] = 0, 0
		be.PutUint16(h[10:], ^csum.Fold(csum.Add(0, h)))
	}
	var proto uint8
	switch {
	case c&rndis.TxChecksumTCP != 0:
		proto = ipProtoTCP
	case c&rndis.TxChecksumUDP != 0:
		proto = ipProtoUDP
	default:
		return FrameOffload{}, nil
	}
	if fl.l4 != proto {
		return FrameOffload{}, errOffloadTransport
	}
	if c.TransportOffset() != fl.l4off {
		return FrameOffload{}, errOffloadOffset
	}
	at := 16
	if proto == ipProtoUDP {
		at = 6
	}
	seg := f[fl.l4off:fl.l4end]
	be.PutUint16(seg[at:], csum.Fold(pseudoSum(&fl, proto, len(seg))))
	return FrameOffload{CsumStart: uint16(fl.l4off), CsumOffset: uint16(at)}, nil
}

// segmentUDP cuts a UDP super-frame (the kernel's UDP segmentation
// offload) into datagrams of mss payload bytes, each with its own IP
// length and IPv4 id, UDP length and checksum, appending each via add
// (nil stops it).
func segmentUDP(f []byte, fl flow, mss int, add func(n int) []byte) {
	hdrLen := fl.l4off + udpHeader
	payload := f[hdrLen:fl.l4end]
	var id uint16
	if !fl.v6 {
		id = be.Uint16(f[fl.l3+4:])
	}
	for i, off := 0, 0; off < len(payload); i++ {
		n := min(mss, len(payload)-off)
		seg := add(hdrLen + n)
		if seg == nil {
			return
		}
		copy(seg, f[:hdrLen])
		copy(seg[hdrLen:], payload[off:off+n])
		s := parseFlowAt(seg, fl)
		if !fl.v6 {
			h := seg[fl.l3:fl.l4off]
			be.PutUint16(h[2:], uint16(len(seg)-fl.l3))
			be.PutUint16(h[4:], id+uint16(i))
			h[10], h[11] = 0, 0
			be.PutUint16(h[10:], ^csum.Fold(csum.Add(0, h)))
		} else {
			be.PutUint16(seg[fl.l3+4:], uint16(len(seg)-fl.l4off))
		}
		u := seg[fl.l4off:]
		be.PutUint16(u[4:], uint16(len(u)))
		u[6], u[7] = 0, 0
		c := ^csum.Fold(csum.Add(pseudoSum(&s, ipProtoUDP, len(u)), u))
		if c == 0 {
			c = 0xffff
		}
		be.PutUint16(u[6:], c)
		off += n
	}
}
