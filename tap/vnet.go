package tap

import (
	"encoding/binary"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/vmbusd/vmbusd/frame"
	"github.com/vmbusd/vmbusd/frame/gso"
)

// The virtio-net header a TAP created with IFF_VNET_HDR puts in front of
// every frame, both ways (struct virtio_net_hdr, 10 bytes, little-endian
// on every architecture Linux runs TAPs little-endian on;
// include/uapi/linux/virtio_net.h). TUNSETOFFLOAD says what the kernel may
// leave to us: checksums (NEEDS_CSUM: the field at csum_start+csum_offset
// holds the pseudo-header sum) and TCP/UDP super-frames of up to 64 KiB
// (gso_type, gso_size = the MSS); the same header lets us hand it
// coalesced frames back.
//
// The kernel ignores DATA_VALID on a TAP write (Linux 6.18, checked: a
// frame with a wrong checksum and DATA_VALID is dropped), so a checksum
// the host verified is passed on as NEEDS_CSUM with the pseudo-header
// sum, which the kernel takes as verified (CHECKSUM_PARTIAL) and
// completes only if the frame leaves through another device.
const (
	vnetHdrLen    = 10
	vnetNeedsCsum = 1 // VIRTIO_NET_HDR_F_NEEDS_CSUM
	vnetGSONone   = 0
	vnetGSOTCPv4  = 1
	vnetGSOTCPv6  = 4
	vnetGSOUDPL4  = 5
	vnetGSOECN    = 0x80
	ethHeaderLen  = 14
)

// vnetHdr is a decoded virtio-net header.
type vnetHdr struct {
	flags, gsoType                      uint8
	hdrLen, gsoSize, csumStart, csumOff uint16
}

// decode reads a header from the first vnetHdrLen bytes of b; false when
// b is shorter.
func (h *vnetHdr) decode(b []byte) bool {
	if len(b) < vnetHdrLen {
		return false
	}
	h.flags, h.gsoType = b[0], b[1]
	h.hdrLen = binary.LittleEndian.Uint16(b[2:])
	h.gsoSize = binary.LittleEndian.Uint16(b[4:])
	h.csumStart = binary.LittleEndian.Uint16(b[6:])
	h.csumOff = binary.LittleEndian.Uint16(b[8:])
	return true
}

// encode writes the header into the first vnetHdrLen bytes of b.
func (h *vnetHdr) encode(b []byte) {
	_ = b[vnetHdrLen-1]
	b[0], b[1] = h.flags, h.gsoType
	binary.LittleEndian.PutUint16(b[2:], h.hdrLen)
	binary.LittleEndian.PutUint16(b[4:], h.gsoSize)
	binary.LittleEndian.PutUint16(b[6:], h.csumStart)
	binary.LittleEndian.PutUint16(b[8:], h.csumOff)
}

// Offloads are the TUNSETOFFLOAD features a TAP has (TUN_F_*,
// include/uapi/linux/if_tun.h): what the kernel may hand over unfinished.
type Offloads uint32

// The TUN_F_* features.
const (
	OffloadCsum   Offloads = 0x01 // partial checksums
	OffloadTSO4   Offloads = 0x02 // TCP/IPv4 super-frames
	OffloadTSO6   Offloads = 0x04 // TCP/IPv6 super-frames
	OffloadTSOECN Offloads = 0x08 // super-frames with CWR set
	OffloadUSO4   Offloads = 0x20 // UDP/IPv4 super-frames (Linux 6.2)
	OffloadUSO6   Offloads = 0x40 // UDP/IPv6 super-frames (Linux 6.2)
)

// String names the features: "csum,tso4,tso6,tso_ecn,uso4,uso6", or
// "none".
func (o Offloads) String() string {
	var names []string
	for _, f := range []struct {
		bit  Offloads
		name string
	}{{OffloadCsum, "csum"}, {OffloadTSO4, "tso4"}, {OffloadTSO6, "tso6"}, {OffloadTSOECN, "tso_ecn"}, {OffloadUSO4, "uso4"}, {OffloadUSO6, "uso6"}} {
		if o&f.bit != 0 {
			names = append(names, f.name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ",")
}

// probeOffloads enables the most the kernel takes; a kernel refuses bits
// it does not know (EINVAL: USO before 6.2), so it steps down.
func probeOffloads(set func(Offloads) error) Offloads {
	for _, o := range []Offloads{
		OffloadCsum | OffloadTSO4 | OffloadTSO6 | OffloadTSOECN | OffloadUSO4 | OffloadUSO6,
		OffloadCsum | OffloadTSO4 | OffloadTSO6 | OffloadTSOECN,
		OffloadCsum | OffloadTSO4 | OffloadTSO6,
		OffloadCsum,
	} {
		if set(o) == nil {
			return o
		}
	}
	set(0)
	return 0
}

func setOffloads(fd int) func(Offloads) error {
	return func(o Offloads) error { return unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, int(o)) }
}

// txAction is what a frame read from the TAP needs before the NIC
// transmits it.
type txAction int

const (
	txAsIs     txAction = iota // complete, or its Meta asks the NIC for the rest
	txSplitUDP                 // a UDP super-frame: cut into datagrams here
	txDrop                     // a header we cannot honour
)

// fromVnet decodes the virtio-net header in front of a frame read from
// the TAP, strips it, and turns it into the packet's Meta for the NIC: a
// TCP super-frame becomes a large send (MetaTxLSO: the host cuts it, or
// the NIC in software), a partial checksum a checksum offload when the
// host took it for that protocol, or is finished here. mtu is the
// interface's; off what the host granted.
func fromVnet(p *frame.Packet, mtu int, off *frame.TxOffloads) (txAction, vnetHdr) {
	var h vnetHdr
	if !h.decode(p.Data()) {
		return txDrop, h
	}
	p.TrimFront(vnetHdrLen)
	f := p.Data()
	if len(f) < ethHeaderLen {
		return txDrop, h
	}
	gsoType := h.gsoType &^ vnetGSOECN
	if gsoType == vnetGSONone && h.flags&vnetNeedsCsum == 0 {
		return txAsIs, h
	}
	l, err := gso.Parse(f)
	if err != nil {
		return txDrop, h
	}
	if h.flags&vnetNeedsCsum != 0 && (int(h.csumStart) != l.L4 || int(h.csumOff) != l.CsumOffset()) {
		return txDrop, h // not the transport checksum of this frame
	}
	switch gsoType {
	case vnetGSONone:
	case vnetGSOTCPv4, vnetGSOTCPv6:
		if l.Proto != gso.ProtoTCP || l.V6 != (gsoType == vnetGSOTCPv6) || h.gsoSize == 0 {
			return txDrop, h
		}
		if len(f) > mtu+ethHeaderLen {
			m := &p.Meta
			m.Flags |= frame.MetaTxLSO | frame.MetaTxTCPChecksum
			if l.V6 {
				m.Flags |= frame.MetaTxIPv6
			} else {
				m.Flags |= frame.MetaTxIPv4
			}
			m.MSS, m.L3Off, m.L4Off = h.gsoSize, uint16(l.L3), uint16(l.L4)
			return txAsIs, h
		}
	case vnetGSOUDPL4:
		if l.Proto != gso.ProtoUDP || h.gsoSize == 0 {
			return txDrop, h
		}
		if len(f) > mtu+ethHeaderLen {
			return txSplitUDP, h
		}
	default:
		return txDrop, h
	}
	if h.flags&vnetNeedsCsum == 0 {
		return txAsIs, h
	}
	// One frame with a partial checksum: the host finishes it if it took
	// that offload, else it is finished here.
	if csumOffloaded(l, off) {
		m := &p.Meta
		if l.V6 {
			m.Flags |= frame.MetaTxIPv6
		} else {
			m.Flags |= frame.MetaTxIPv4
		}
		if l.Proto == gso.ProtoTCP {
			m.Flags |= frame.MetaTxTCPChecksum
		} else {
			m.Flags |= frame.MetaTxUDPChecksum
		}
		m.L3Off, m.L4Off = uint16(l.L3), uint16(l.L4)
		return txAsIs, h
	}
	gso.FinishChecksum(f, l, gso.Full)
	return txAsIs, h
}

// csumOffloaded reports whether the host finishes this frame's transport
// checksum.
func csumOffloaded(l gso.Layout, off *frame.TxOffloads) bool {
	switch {
	case l.Proto == gso.ProtoTCP && !l.V6:
		return off.TCP4Checksum
	case l.Proto == gso.ProtoTCP:
		return off.TCP6Checksum
	case !l.V6:
		return off.UDP4Checksum
	}
	return off.UDP6Checksum
}
