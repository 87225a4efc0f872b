package vswitch

// Frame-level work the simulated vSwitch does for a NIC: 802.1Q tags (the
// vSwitch carries them in the frame; the guest sees them only as a VLAN
// per-packet info), the flow tuple RSS hashes, receive checksum
// verification, transmit checksum offload and LSOv2 segmentation
// (docs/protocol/netvsc.md §2.7, §3.4, §7 host 7–8). Frames are plain Ethernet frames
// without FCS.

import (
	"encoding/binary"
	"errors"
	"net/netip"

	"github.com/vmbusd/vmbusd/frame/csum"
	"github.com/vmbusd/vmbusd/netvsc/rndis"
)

// Ethernet and IP header facts the frame work parses with; the exported
// ones are the NetVSP's too.
const (
	EthHeaderLen  = 14
	EthTypeIPv4   = 0x0800
	EthTypeIPv6   = 0x86dd
	EthTypeVLAN   = 0x8100 // 802.1Q
	ethTypeQinQ   = 0x88a8 // 802.1ad
	VLANTagLen    = 4
	IPProtoTCP    = 6
	IPProtoUDP    = 17
	ipv4MinHeader = 20
	ipv6Header    = 40
	tcpMinHeader  = 20
	udpHeader     = 8
)

var be = binary.BigEndian

// FrameTagged reports whether an Ethernet frame carries an in-frame 802.1Q
// (or 802.1ad) tag, and returns the first tag's TCI.
func FrameTagged(f []byte) (tci uint16, ok bool) {
	if len(f) < EthHeaderLen+VLANTagLen {
		return 0, false
	}
	switch be.Uint16(f[12:]) {
	case EthTypeVLAN, ethTypeQinQ:
		return be.Uint16(f[14:]), true
	}
	return 0, false
}

// StripVLAN writes f without its first tag into dst and returns it.
func StripVLAN(dst, f []byte) []byte {
	dst = append(dst[:0], f[:12]...)
	return append(dst, f[12+VLANTagLen:]...)
}

// InsertVLAN writes f with an 802.1Q tag carrying tci into dst and
// returns it.
func InsertVLAN(dst, f []byte, tci uint16) []byte {
	dst = append(dst[:0], f[:12]...)
	dst = be.AppendUint16(dst, EthTypeVLAN)
	dst = be.AppendUint16(dst, tci)
	return append(dst, f[12:]...)
}

// Flow is what the vSwitch parses out of an untagged frame for RSS and
// checksums. L4 is 0 when the frame is not TCP or UDP over IP, or is an IP
// fragment other than the first.
type Flow struct {
	V6               bool
	IP               bool   // IPv4 or IPv6
	L3, L4Off, L4End int    // IP header start, transport header start, IP payload end
	L4               uint8  // IPProtoTCP, IPProtoUDP or 0
	Frag             bool   // an IPv4 fragment (first or later)
	Src, Dst         []byte // addresses (4 or 16 bytes)
}

// ParseFlow parses an untagged Ethernet frame. It never panics; what it
// cannot parse it leaves as "not IP".
func ParseFlow(f []byte) Flow {
	var fl Flow
	if len(f) < EthHeaderLen {
		return fl
	}
	switch be.Uint16(f[12:]) {
	case EthTypeIPv4:
		h := f[EthHeaderLen:]
		if len(h) < ipv4MinHeader || h[0]>>4 != 4 {
			return fl
		}
		ihl := int(h[0]&0xf) * 4
		tot := int(be.Uint16(h[2:]))
		if ihl < ipv4MinHeader || tot < ihl || tot > len(h) {
			return fl
		}
		fl.IP, fl.L3 = true, EthHeaderLen
		fl.Src, fl.Dst = h[12:16], h[16:20]
		fl.L4Off, fl.L4End = EthHeaderLen+ihl, EthHeaderLen+tot
		fragOff := be.Uint16(h[6:]) & 0x1fff
		more := be.Uint16(h[6:])&0x2000 != 0
		fl.Frag = fragOff != 0 || more
		if fragOff == 0 && !fl.Frag {
			fl.L4 = transport(h[9], f[fl.L4Off:fl.L4End])
		}
	case EthTypeIPv6:
		h := f[EthHeaderLen:]
		if len(h) < ipv6Header || h[0]>>4 != 6 {
			return fl
		}
		pl := int(be.Uint16(h[4:]))
		if pl > len(h)-ipv6Header {
			return fl
		}
		fl.IP, fl.V6, fl.L3 = true, true, EthHeaderLen
		fl.Src, fl.Dst = h[8:24], h[24:40]
		fl.L4Off, fl.L4End = EthHeaderLen+ipv6Header, EthHeaderLen+ipv6Header+pl
		fl.L4 = transport(h[6], f[fl.L4Off:fl.L4End])
	}
	return fl
}

// transport returns proto when p holds a whole TCP or UDP header.
func transport(proto uint8, p []byte) uint8 {
	switch {
	case proto == IPProtoTCP && len(p) >= tcpMinHeader && int(p[12]>>4)*4 >= tcpMinHeader && int(p[12]>>4)*4 <= len(p):
		return IPProtoTCP
	case proto == IPProtoUDP && len(p) >= udpHeader:
		return IPProtoUDP
	}
	return 0
}

// RSSInput hashes a frame's flow the NDIS way for the hash types enabled
// (docs/protocol/netvsc.md §3.6): a 4-tuple when the transport's type is enabled (TCP:
// TCP_IPV4/TCP_IPV6; UDP: UDP_IPV4/UDP_IPV6), otherwise the 2-tuple when
// the IP type is. ok is false when no enabled type applies; typ is the
// type used, for the hash-info per-packet info.
func RSSInput(key []byte, types rndis.HashInfo, f []byte) (hash uint32, typ rndis.HashInfo, ok bool) {
	fl := ParseFlow(f)
	if !fl.IP {
		return 0, 0, false
	}
	var l4Type, ipType rndis.HashInfo
	switch {
	case !fl.V6 && fl.L4 == IPProtoTCP:
		l4Type, ipType = rndis.NDISHashTCPIPv4, rndis.NDISHashIPv4
	case !fl.V6 && fl.L4 == IPProtoUDP:
		l4Type, ipType = rndis.NDISHashUDPIPv4, rndis.NDISHashIPv4
	case !fl.V6:
		ipType = rndis.NDISHashIPv4
	case fl.L4 == IPProtoTCP:
		l4Type, ipType = rndis.NDISHashTCPIPv6, rndis.NDISHashIPv6
	case fl.L4 == IPProtoUDP:
		l4Type, ipType = rndis.NDISHashUDPIPv6, rndis.NDISHashIPv6
	default:
		ipType = rndis.NDISHashIPv6
	}
	src, _ := netip.AddrFromSlice(fl.Src)
	dst, _ := netip.AddrFromSlice(fl.Dst)
	if l4Type != 0 && types&l4Type != 0 {
		p := f[fl.L4Off:]
		return rndis.RSSHash(key, src, dst, be.Uint16(p), be.Uint16(p[2:]), true), l4Type, true
	}
	if types&ipType != 0 {
		return rndis.RSSHash(key, src, dst, 0, 0, false), ipType, true
	}
	return 0, 0, false
}

// PseudoSum is the transport checksum's pseudo-header sum.
func PseudoSum(fl *Flow, proto uint8, l4len int) uint32 {
	s := csum.Add(0, fl.Src)
	s = csum.Add(s, fl.Dst)
	s += uint32(proto)
	if fl.V6 {
		s += uint32(l4len>>16) + uint32(l4len&0xffff)
	} else {
		s += uint32(l4len)
	}
	return s
}

// RxChecksum verifies a frame's checksums as the host does before
// delivery and returns the receive checksum info (docs/protocol/netvsc.md §3.4).
// It parses the frame as ParseFlow does (and so accepts and rejects the
// same frames) without building a Flow: it runs for every frame the host
// delivers.
func RxChecksum(f []byte) rndis.RxChecksum {
	if len(f) < EthHeaderLen {
		return 0
	}
	switch be.Uint16(f[12:]) {
	case EthTypeIPv4:
		return rxChecksum4(f[EthHeaderLen:])
	case EthTypeIPv6:
		return rxChecksum6(f[EthHeaderLen:])
	}
	return 0
}

// rxChecksum4 is RxChecksum for the IPv4 packet h.
func rxChecksum4(h []byte) rndis.RxChecksum {
	if len(h) < ipv4MinHeader || h[0]>>4 != 4 {
		return 0
	}
	ihl := int(h[0]&0xf) * 4
	tot := int(be.Uint16(h[2:]))
	if ihl < ipv4MinHeader || tot < ihl || tot > len(h) {
		return 0
	}
	c := rndis.RxChecksumIPFailed
	if ipv4HeaderOK(h[:ihl]) {
		c = rndis.RxChecksumIPOK
	}
	if be.Uint16(h[6:])&0x3fff != 0 {
		return c // a fragment (offset or more fragments): no transport check
	}
	seg := h[ihl:tot]
	proto := transport(h[9], seg)
	if proto == 0 {
		return c
	}
	if proto == IPProtoUDP && be.Uint16(seg[6:]) == 0 {
		return c | rndis.RxChecksumUDPOK // no checksum (IPv4 only)
	}
	// The pseudo-header: the addresses (adjacent in the header), the
	// protocol and the transport length.
	sum := csum.Add(0, h[12:20]) + uint32(proto) + uint32(len(seg))
	return c | l4Result(proto, ^csum.Fold(csum.Add(sum, seg)) == 0)
}

// ipv4HeaderOK reports whether an IPv4 header (a multiple of 4 bytes)
// sums to all ones in one's complement, as ^csum.Fold(csum.Add(0, h)) == 0
// does: the 16-bit one's complement sum is the sum of the header's 32-bit
// words modulo 0xffff (whichever their byte order), and all ones is a
// sum that is 0 modulo 0xffff without being 0.
func ipv4HeaderOK(h []byte) bool {
	var s uint64
	for ; len(h) >= 4; h = h[4:] {
		s += uint64(binary.LittleEndian.Uint32(h))
	}
	return s != 0 && s%0xffff == 0
}

// rxChecksum6 is RxChecksum for the IPv6 packet h (no header checksum).
func rxChecksum6(h []byte) rndis.RxChecksum {
	if len(h) < ipv6Header || h[0]>>4 != 6 {
		return 0
	}
	pl := int(be.Uint16(h[4:]))
	if pl > len(h)-ipv6Header {
		return 0
	}
	seg := h[ipv6Header : ipv6Header+pl]
	proto := transport(h[6], seg)
	if proto == 0 {
		return 0
	}
	sum := csum.Add(0, h[8:40]) + uint32(proto) + uint32(len(seg)>>16) + uint32(len(seg)&0xffff)
	return l4Result(proto, ^csum.Fold(csum.Add(sum, seg)) == 0)
}

// l4Result is the transport half of a receive checksum info.
func l4Result(proto uint8, ok bool) rndis.RxChecksum {
	switch {
	case proto == IPProtoTCP && ok:
		return rndis.RxChecksumTCPOK
	case proto == IPProtoTCP:
		return rndis.RxChecksumTCPFailed
	case ok:
		return rndis.RxChecksumUDPOK
	}
	return rndis.RxChecksumUDPFailed
}

// Errors of the transmit offloads: the guest asked for something its
// frame does not support.
var (
	errOffloadNotIP     = errors.New("offload on a frame that is not IPv4 or IPv6")
	errOffloadTransport = errors.New("offload on a frame without the TCP or UDP header it names")
	errOffloadOffset    = errors.New("offload transport header offset does not match the frame")
	errLSOMSS           = errors.New("LSO with an MSS of 0 or beyond the payload limit")
	errLSOTooBig        = errors.New("LSO payload beyond the host's maximum offload size")
	errLSOFamily        = errors.New("LSO IPv6 bit does not match the frame")
	errLSOVersion       = errors.New("LSO request is not LSOv2")
	errLSOEmpty         = errors.New("LSO frame without TCP payload")
)

// ApplyTxChecksum computes the checksums a guest's checksum per-packet
// info asks for, in place.
func ApplyTxChecksum(f []byte, c rndis.TxChecksum) error {
	fl := ParseFlow(f)
	if !fl.IP {
		return errOffloadNotIP
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
		return nil
	}
	if fl.L4 != proto {
		return errOffloadTransport
	}
	if c.TransportOffset() != fl.L4Off {
		return errOffloadOffset
	}
	seg := f[fl.L4Off:fl.L4End]
	at := 16 // TCP checksum
	if proto == IPProtoUDP {
		at = 6
	}
	seg[at], seg[at+1] = 0, 0
	sum := ^csum.Fold(csum.Add(PseudoSum(&fl, proto, len(seg)), seg))
	if proto == IPProtoUDP && sum == 0 {
		sum = 0xffff
	}
	be.PutUint16(seg[at:], sum)
	return nil
}

// CheckLSO validates a guest's LSOv2 request against its frame the way
// the host does before segmenting it (docs/protocol/netvsc.md §7 host 8).
func CheckLSO(f []byte, l rndis.LSOInfo, maxPayload int) (Flow, error) {
	fl := ParseFlow(f)
	switch {
	case !l.IsV2():
		return fl, errLSOVersion
	case !fl.IP:
		return fl, errOffloadNotIP
	case l.IPv6() != fl.V6:
		return fl, errLSOFamily
	case fl.L4 != IPProtoTCP:
		return fl, errOffloadTransport
	case l.TCPHeaderOffset() != fl.L4Off:
		return fl, errOffloadOffset
	}
	hdr := fl.L4Off + int(f[fl.L4Off+12]>>4)*4
	payload := fl.L4End - hdr
	switch {
	case l.MSS() == 0:
		return fl, errLSOMSS
	case payload <= 0:
		return fl, errLSOEmpty
	case payload > maxPayload:
		return fl, errLSOTooBig
	}
	return fl, nil
}

// SegmentLSO cuts a validated LSO frame into MSS-sized TCP segments with
// their own IP lengths, IPv4 ids, sequence numbers, flags and checksums,
// appending each to out via add (which returns the buffer to write the
// next segment into, or nil to stop). Whatever pseudo-header seed or IP
// length the guest left in the frame (Linux and DPDK differ, docs/protocol/netvsc.md §8
// question 7) is recomputed.
func SegmentLSO(f []byte, fl Flow, mss int, add func(n int) []byte) {
	thl := int(f[fl.L4Off+12]>>4) * 4
	hdrLen := fl.L4Off + thl
	payload := f[hdrLen:fl.L4End]
	seq := be.Uint32(f[fl.L4Off+4:])
	flags := f[fl.L4Off+13]
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
		last := off+n >= len(payload)
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
		t := seg[fl.L4Off:]
		be.PutUint32(t[4:], seq+uint32(off))
		fl2 := flags
		if !last {
			fl2 &^= 0x01 | 0x08 // FIN, PSH only on the last segment
		}
		if i > 0 {
			fl2 &^= 0x80 // CWR only on the first
		}
		t[13] = fl2
		t[16], t[17] = 0, 0
		be.PutUint16(t[16:], ^csum.Fold(csum.Add(PseudoSum(&s, IPProtoTCP, len(t)), t)))
		off += n
	}
}

// ParseFlowAt returns fl with its address slices pointing into seg (same
// layout as the frame fl was parsed from).
func ParseFlowAt(seg []byte, fl Flow) Flow {
	s := fl
	if fl.V6 {
		s.Src, s.Dst = seg[fl.L3+8:fl.L3+24], seg[fl.L3+24:fl.L3+40]
	} else {
		s.Src, s.Dst = seg[fl.L3+12:fl.L3+16], seg[fl.L3+16:fl.L3+20]
	}
	return s
}

// macFilterBit classifies a frame's destination for the packet filter.
func macFilterBit(f []byte, mac [6]byte) uint32 {
	d := f[:6]
	switch {
	case d[0] == 0xff && d[1] == 0xff && d[2] == 0xff && d[3] == 0xff && d[4] == 0xff && d[5] == 0xff:
		return rndis.NDISPacketTypeBroadcast
	case d[0]&1 != 0:
		return rndis.NDISPacketTypeMulticast | rndis.NDISPacketTypeAllMulticast
	case [6]byte(d) == mac:
		return rndis.NDISPacketTypeDirected
	}
	return 0
}

// FilterAccepts applies the guest's packet filter (OID_GEN_CURRENT_PACKET_FILTER)
// to a frame's destination, as the vSwitch port does: nothing while the
// filter is 0, everything when promiscuous.
func FilterAccepts(filter uint32, f []byte, mac [6]byte) bool {
	if filter == 0 || len(f) < EthHeaderLen {
		return false
	}
	if filter&rndis.NDISPacketTypePromiscuous != 0 {
		return true
	}
	return filter&macFilterBit(f, mac) != 0
}
