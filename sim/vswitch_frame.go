package sim

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

const (
	ethHeaderLen  = 14
	ethTypeIPv4   = 0x0800
	ethTypeIPv6   = 0x86dd
	ethTypeVLAN   = 0x8100 // 802.1Q
	ethTypeQinQ   = 0x88a8 // 802.1ad
	vlanTagLen    = 4
	ipProtoTCP    = 6
	ipProtoUDP    = 17
	ipv4MinHeader = 20
	ipv6Header    = 40
	tcpMinHeader  = 20
	udpHeader     = 8
)

var be = binary.BigEndian

// frameTagged reports whether an Ethernet frame carries an in-frame 802.1Q
// (or 802.1ad) tag, and returns the first tag's TCI.
func frameTagged(f []byte) (tci uint16, ok bool) {
	if len(f) < ethHeaderLen+vlanTagLen {
		return 0, false
	}
	switch be.Uint16(f[12:]) {
	case ethTypeVLAN, ethTypeQinQ:
		return be.Uint16(f[14:]), true
	}
	return 0, false
}

// stripVLAN writes f without its first tag into dst and returns it.
func stripVLAN(dst, f []byte) []byte {
	dst = append(dst[:0], f[:12]...)
	return append(dst, f[12+vlanTagLen:]...)
}

// insertVLAN writes f with an 802.1Q tag carrying tci into dst and
// returns it.
func insertVLAN(dst, f []byte, tci uint16) []byte {
	dst = append(dst[:0], f[:12]...)
	dst = be.AppendUint16(dst, ethTypeVLAN)
	dst = be.AppendUint16(dst, tci)
	return append(dst, f[12:]...)
}

// flow is what the vSwitch parses out of an untagged frame for RSS and
// checksums. l4 is 0 when the frame is not TCP or UDP over IP, or is an IP
// fragment other than the first.
type flow struct {
	v6               bool
	ip               bool   // IPv4 or IPv6
	l3, l4off, l4end int    // IP header start, transport header start, IP payload end
	l4               uint8  // ipProtoTCP, ipProtoUDP or 0
	frag             bool   // an IPv4 fragment (first or later)
	src, dst         []byte // addresses (4 or 16 bytes)
}

// parseFlow parses an untagged Ethernet frame. It never panics; what it
// cannot parse it leaves as "not IP".
func parseFlow(f []byte) flow {
	var fl flow
	if len(f) < ethHeaderLen {
		return fl
	}
	switch be.Uint16(f[12:]) {
	case ethTypeIPv4:
		h := f[ethHeaderLen:]
		if len(h) < ipv4MinHeader || h[0]>>4 != 4 {
			return fl
		}
		ihl := int(h[0]&0xf) * 4
		tot := int(be.Uint16(h[2:]))
		if ihl < ipv4MinHeader || tot < ihl || tot > len(h) {
			return fl
		}
		fl.ip, fl.l3 = true, ethHeaderLen
		fl.src, fl.dst = h[12:16], h[16:20]
		fl.l4off, fl.l4end = ethHeaderLen+ihl, ethHeaderLen+tot
		fragOff := be.Uint16(h[6:]) & 0x1fff
		more := be.Uint16(h[6:])&0x2000 != 0
		fl.frag = fragOff != 0 || more
		if fragOff == 0 && !fl.frag {
			fl.l4 = transport(h[9], f[fl.l4off:fl.l4end])
		}
	case ethTypeIPv6:
		h := f[ethHeaderLen:]
		if len(h) < ipv6Header || h[0]>>4 != 6 {
			return fl
		}
		pl := int(be.Uint16(h[4:]))
		if pl > len(h)-ipv6Header {
			return fl
		}
		fl.ip, fl.v6, fl.l3 = true, true, ethHeaderLen
		fl.src, fl.dst = h[8:24], h[24:40]
		fl.l4off, fl.l4end = ethHeaderLen+ipv6Header, ethHeaderLen+ipv6Header+pl
		fl.l4 = transport(h[6], f[fl.l4off:fl.l4end])
	}
	return fl
}

// transport returns proto when p holds a whole TCP or UDP header.
func transport(proto uint8, p []byte) uint8 {
	switch {
	case proto == ipProtoTCP && len(p) >= tcpMinHeader && int(p[12]>>4)*4 >= tcpMinHeader && int(p[12]>>4)*4 <= len(p):
		return ipProtoTCP
	case proto == ipProtoUDP && len(p) >= udpHeader:
		return ipProtoUDP
	}
	return 0
}

// rssInput hashes a frame's flow the NDIS way for the hash types enabled
// (docs/protocol/netvsc.md §3.6): a 4-tuple when the transport's type is enabled (TCP:
// TCP_IPV4/TCP_IPV6; UDP: UDP_IPV4/UDP_IPV6), otherwise the 2-tuple when
// the IP type is. ok is false when no enabled type applies; typ is the
// type used, for the hash-info per-packet info.
func rssInput(key []byte, types rndis.HashInfo, f []byte) (hash uint32, typ rndis.HashInfo, ok bool) {
	fl := parseFlow(f)
	if !fl.ip {
		return 0, 0, false
	}
	var l4Type, ipType rndis.HashInfo
	switch {
	case !fl.v6 && fl.l4 == ipProtoTCP:
		l4Type, ipType = rndis.NDISHashTCPIPv4, rndis.NDISHashIPv4
	case !fl.v6 && fl.l4 == ipProtoUDP:
		l4Type, ipType = rndis.NDISHashUDPIPv4, rndis.NDISHashIPv4
	case !fl.v6:
		ipType = rndis.NDISHashIPv4
	case fl.l4 == ipProtoTCP:
		l4Type, ipType = rndis.NDISHashTCPIPv6, rndis.NDISHashIPv6
	case fl.l4 == ipProtoUDP:
		l4Type, ipType = rndis.NDISHashUDPIPv6, rndis.NDISHashIPv6
	default:
		ipType = rndis.NDISHashIPv6
	}
	src, _ := netip.AddrFromSlice(fl.src)
	dst, _ := netip.AddrFromSlice(fl.dst)
	if l4Type != 0 && types&l4Type != 0 {
		p := f[fl.l4off:]
		return rndis.RSSHash(key, src, dst, be.Uint16(p), be.Uint16(p[2:]), true), l4Type, true
	}
	if types&ipType != 0 {
		return rndis.RSSHash(key, src, dst, 0, 0, false), ipType, true
	}
	return 0, 0, false
}

// pseudoSum is the transport checksum's pseudo-header sum.
func pseudoSum(fl *flow, proto uint8, l4len int) uint32 {
	s := csum.Add(0, fl.src)
	s = csum.Add(s, fl.dst)
	s += uint32(proto)
	if fl.v6 {
		s += uint32(l4len>>16) + uint32(l4len&0xffff)
	} else {
		s += uint32(l4len)
	}
	return s
}

// rxChecksum verifies a frame's checksums as the host does before
// delivery and returns the receive checksum info (docs/protocol/netvsc.md §3.4).
func rxChecksum(f []byte) rndis.RxChecksum {
	fl := parseFlow(f)
	if !fl.ip {
		return 0
	}
	var c rndis.RxChecksum
	if !fl.v6 {
		if ^csum.Fold(csum.Add(0, f[fl.l3:fl.l4off])) == 0 {
			c |= rndis.RxChecksumIPOK
		} else {
			c |= rndis.RxChecksumIPFailed
		}
	}
	seg := f[fl.l4off:fl.l4end]
	switch fl.l4 {
	case ipProtoTCP:
		if ^csum.Fold(csum.Add(pseudoSum(&fl, ipProtoTCP, len(seg)), seg)) == 0 {
			c |= rndis.RxChecksumTCPOK
		} else {
			c |= rndis.RxChecksumTCPFailed
		}
	case ipProtoUDP:
		switch {
		case !fl.v6 && be.Uint16(seg[6:]) == 0: // no checksum (IPv4 only)
			c |= rndis.RxChecksumUDPOK
		case ^csum.Fold(csum.Add(pseudoSum(&fl, ipProtoUDP, len(seg)), seg)) == 0:
			c |= rndis.RxChecksumUDPOK
		default:
			c |= rndis.RxChecksumUDPFailed
		}
	}
	return c
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

// applyTxChecksum computes the checksums a guest's checksum per-packet
// info asks for, in place.
func applyTxChecksum(f []byte, c rndis.TxChecksum) error {
	fl := parseFlow(f)
	if !fl.ip {
		return errOffloadNotIP
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
		return nil
	}
	if fl.l4 != proto {
		return errOffloadTransport
	}
	if c.TransportOffset() != fl.l4off {
		return errOffloadOffset
	}
	seg := f[fl.l4off:fl.l4end]
	at := 16 // TCP checksum
	if proto == ipProtoUDP {
		at = 6
	}
	seg[at], seg[at+1] = 0, 0
	sum := ^csum.Fold(csum.Add(pseudoSum(&fl, proto, len(seg)), seg))
	if proto == ipProtoUDP && sum == 0 {
		sum = 0xffff
	}
	be.PutUint16(seg[at:], sum)
	return nil
}

// checkLSO validates a guest's LSOv2 request against its frame the way
// the host does before segmenting it (docs/protocol/netvsc.md §7 host 8).
func checkLSO(f []byte, l rndis.LSOInfo, maxPayload int) (flow, error) {
	fl := parseFlow(f)
	switch {
	case !l.IsV2():
		return fl, errLSOVersion
	case !fl.ip:
		return fl, errOffloadNotIP
	case l.IPv6() != fl.v6:
		return fl, errLSOFamily
	case fl.l4 != ipProtoTCP:
		return fl, errOffloadTransport
	case l.TCPHeaderOffset() != fl.l4off:
		return fl, errOffloadOffset
	}
	hdr := fl.l4off + int(f[fl.l4off+12]>>4)*4
	payload := fl.l4end - hdr
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

// segmentLSO cuts a validated LSO frame into MSS-sized TCP segments with
// their own IP lengths, IPv4 ids, sequence numbers, flags and checksums,
// appending each to out via add (which returns the buffer to write the
// next segment into, or nil to stop). Whatever pseudo-header seed or IP
// length the guest left in the frame (Linux and DPDK differ, docs/protocol/netvsc.md §8
// question 7) is recomputed.
func segmentLSO(f []byte, fl flow, mss int, add func(n int) []byte) {
	thl := int(f[fl.l4off+12]>>4) * 4
	hdrLen := fl.l4off + thl
	payload := f[hdrLen:fl.l4end]
	seq := be.Uint32(f[fl.l4off+4:])
	flags := f[fl.l4off+13]
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
		last := off+n >= len(payload)
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
		t := seg[fl.l4off:]
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
		be.PutUint16(t[16:], ^csum.Fold(csum.Add(pseudoSum(&s, ipProtoTCP, len(t)), t)))
		off += n
	}
}

// parseFlowAt returns fl with its address slices pointing into seg (same
// layout as the frame fl was parsed from).
func parseFlowAt(seg []byte, fl flow) flow {
	s := fl
	if fl.v6 {
		s.src, s.dst = seg[fl.l3+8:fl.l3+24], seg[fl.l3+24:fl.l3+40]
	} else {
		s.src, s.dst = seg[fl.l3+12:fl.l3+16], seg[fl.l3+16:fl.l3+20]
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

// filterAccepts applies the guest's packet filter (OID_GEN_CURRENT_PACKET_FILTER)
// to a frame's destination, as the vSwitch port does: nothing while the
// filter is 0, everything when promiscuous.
func filterAccepts(filter uint32, f []byte, mac [6]byte) bool {
	if filter == 0 || len(f) < ethHeaderLen {
		return false
	}
	if filter&rndis.NDISPacketTypePromiscuous != 0 {
		return true
	}
	return filter&macFilterBit(f, mac) != 0
}
