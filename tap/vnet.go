package tap

import (
	"encoding/binary"

	"github.com/vmbusd/vmbusd/netvsc"
)

// The virtio-net header a TAP created with IFF_VNET_HDR puts in front of
// every frame (struct virtio_net_hdr, 10 bytes, little-endian on x86;
// include/uapi/linux/virtio_net.h). With TUNSETOFFLOAD(TUN_F_CSUM|TSO4|TSO6)
// the kernel hands us frames whose checksum is left to us (NEEDS_CSUM) and
// TCP super-frames up to 64 KiB (GSO), which the NIC's transmit path cuts
// (netvsc segment.go) or hands to the host with LSOv2.
const (
	vnetHdrLen     = 10
	vnetNeedsCsum  = 1 // VIRTIO_NET_HDR_F_NEEDS_CSUM
	vnetDataValid  = 2 // VIRTIO_NET_HDR_F_DATA_VALID
	vnetGSONone    = 0
	vnetGSOTCPv4   = 1
	vnetGSOTCPv6   = 4
	vnetGSOECN     = 0x80
	tunFCsum       = 0x01
	tunFTSO4       = 0x02
	tunFTSO6       = 0x04
	gsoPoolFrame   = 65536 + 128
	gsoPoolPackets = 256
	ethHeaderLen   = 14
)

// fromVnet turns a frame read with its virtio-net header into packet
// metadata: a partial checksum is finished here for frames the NIC sends
// as they are; a GSO super-frame is marked for LSO (the NIC's segmenter
// computes every segment's checksums). It returns false for a frame to
// drop (a header it cannot honour).
func fromVnet(p *netvsc.Packet, mtu int) bool {
	d := p.Data()
	if len(d) < vnetHdrLen+ethHeaderLen {
		return false
	}
	flags, gso := d[0], d[1]
	gsoSize := binary.LittleEndian.Uint16(d[4:])
	start := int(binary.LittleEndian.Uint16(d[6:]))
	off := int(binary.LittleEndian.Uint16(d[8:]))
	p.TrimFront(vnetHdrLen)
	f := p.Data()
	switch gso &^ vnetGSOECN {
	case vnetGSONone:
	case vnetGSOTCPv4, vnetGSOTCPv6:
		if len(f) > mtu+ethHeaderLen {
			p.Meta.Flags |= netvsc.MetaTxLSO | netvsc.MetaTxTCPChecksum
			if gso&^vnetGSOECN == vnetGSOTCPv4 {
				p.Meta.Flags |= netvsc.MetaTxIPv4
			} else {
				p.Meta.Flags |= netvsc.MetaTxIPv6
			}
			p.Meta.MSS, p.Meta.L3Off, p.Meta.L4Off = gsoSize, ethHeaderLen, uint16(start)
			return true
		}
	default:
		return false
	}
	if flags&vnetNeedsCsum != 0 {
		if start < ethHeaderLen || start+off+2 > len(f) {
			return false
		}
		// The field holds the pseudo-header sum: fold the rest in.
		var sum uint32
		b := f[start:]
		for len(b) >= 2 {
			sum += uint32(b[0])<<8 | uint32(b[1])
			b = b[2:]
		}
		if len(b) == 1 {
			sum += uint32(b[0]) << 8
		}
		for sum>>16 != 0 {
			sum = sum&0xffff + sum>>16
		}
		c := ^uint16(sum)
		if c == 0 && f[23] == 17 { // UDP over IPv4: 0 means "no checksum"
			c = 0xffff
		}
		binary.BigEndian.PutUint16(f[start+off:], c)
	}
	return true
}

// toVnet puts a virtio-net header in front of a received frame: checksums
// the host verified are reported as valid.
func toVnet(p *netvsc.Packet) []byte {
	b := p.Prepend(vnetHdrLen)
	clear(b[:vnetHdrLen])
	if p.Meta.Flags&netvsc.MetaRxL4ChecksumOK != 0 {
		b[0] = vnetDataValid
	}
	return b
}
