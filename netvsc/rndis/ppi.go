package rndis

import (
	"fmt"
	"math/bits"

	"github.com/vmbusd/vmbusd/netvsc/protoerr"
)

// Per-packet info (PPI) is the metadata of a PACKET_MSG: a sequence of
// elements, each {size u32, type u32, offset u32, data}, where size covers
// the whole element (a multiple of 4) and offset is where the data starts
// inside it (12) (docs/protocol/netvsc.md §3.3, §3.4). Every type this package reads
// carries a u32, so every element it writes is 16 bytes (Linux
// NDIS_*_PPI_SIZE).

// PPIType is a per-packet-info type. Bit 31 marks Linux's "internal" types
// (rndis_per_packet_info.internal), of which only PPIPktInfoID exists.
type PPIType uint32

// PPI types (docs/protocol/netvsc.md §3.4; Linux ndis_per_pkt_info_type, DPDK
// NDIS_PKTINFO_TYPE_*).
const (
	PPITCPIPChecksum        PPIType = 0 // TCPIP_CHKSUM_PKTINFO: TxChecksum G->H, RxChecksum H->G
	PPIIPsec                PPIType = 1
	PPITCPLargeSend         PPIType = 2 // TCP_LARGESEND_PKTINFO: LSOInfo, G->H
	PPIClassificationHandle PPIType = 3
	PPISGList               PPIType = 5
	PPIIEEE8021Q            PPIType = 6 // IEEE_8021Q_INFO: VLANInfo, both directions
	PPIOriginalPktInfo      PPIType = 7
	// PPINBLHashValue (the PACKET_CANCEL_ID slot) carries a u32 hash: the
	// RSS hash on receive; on transmit Linux sends the skb hash and DPDK the
	// queue id, to steer the TX completion to that channel.
	PPINBLHashValue PPIType = 8
	// PPINBLHashInfo (the ORIGINAL_NET_BUFLIST slot) carries HashInfo
	// flags, host to guest. DPDK trusts a hash only when both 8 and 9 are
	// present.
	PPINBLHashInfo      PPIType = 9
	PPICachedNetBufList PPIType = 10
	PPIShortPktPadInfo  PPIType = 11
	// PPIInternal is bit 31 of the type word.
	PPIInternal PPIType = 1 << 31
	// PPIPktInfoID (internal type 1, RNDIS_PKTINFO_ID) marks RSC fragments.
	PPIPktInfoID = PPIInternal | 1
)

var ppiTypeNames = map[PPIType]string{
	PPITCPIPChecksum:        "TCPIP_CHKSUM_PKTINFO",
	PPIIPsec:                "IPSEC_PKTINFO",
	PPITCPLargeSend:         "TCP_LARGESEND_PKTINFO",
	PPIClassificationHandle: "CLASSIFICATION_HANDLE_PKTINFO",
	PPISGList:               "SG_LIST",
	PPIIEEE8021Q:            "IEEE_8021Q_INFO",
	PPIOriginalPktInfo:      "ORIGINAL_PKTINFO",
	PPINBLHashValue:         "NBL_HASH_VALUE",
	PPINBLHashInfo:          "NBL_HASH_INFO",
	PPICachedNetBufList:     "CACHED_NET_BUFLIST",
	PPIShortPktPadInfo:      "SHORT_PKT_PADINFO",
	PPIPktInfoID:            "RNDIS_PKTINFO_ID",
}

func (t PPIType) String() string {
	if name, ok := ppiTypeNames[t]; ok {
		return name
	}
	return fmt.Sprintf("ppi type(%#x)", uint32(t))
}

const (
	// PPIHeaderSize is the size of an element's {size, type, offset}.
	PPIHeaderSize = 12
	// PPIUint32Size is the size of an element carrying one u32.
	PPIUint32Size = PPIHeaderSize + 4
)

// AppendPPI appends one element of type t carrying data, zero padded to a
// multiple of 4.
func AppendPPI(dst []byte, t PPIType, data []byte) []byte {
	size := (PPIHeaderSize + len(data) + 3) &^ 3
	dst, b := grow(dst, size)
	le.PutUint32(b, uint32(size))
	le.PutUint32(b[4:], uint32(t))
	le.PutUint32(b[8:], PPIHeaderSize)
	copy(b[PPIHeaderSize:], data)
	return dst
}

// AppendPPIUint32 appends one 16-byte element of type t carrying v.
func AppendPPIUint32(dst []byte, t PPIType, v uint32) []byte {
	dst, b := grow(dst, PPIUint32Size)
	putPPIUint32(b, t, v)
	return dst
}

func putPPIUint32(b []byte, t PPIType, v uint32) {
	_ = b[PPIUint32Size-1]
	le.PutUint32(b, PPIUint32Size)
	le.PutUint32(b[4:], uint32(t))
	le.PutUint32(b[8:], PPIHeaderSize)
	le.PutUint32(b[12:], v)
}

// PPI is one per-packet-info element. Data aliases the walked area.
type PPI struct {
	Type PPIType
	Data []byte
}

// Uint32 returns the element's u32 payload, the first 4 data bytes
// (protoerr.KindPPIData when there are fewer).
func (p PPI) Uint32() (uint32, error) {
	if len(p.Data) < 4 {
		return 0, protoerr.New("PPI", protoerr.KindPPIData, p.Type.String(), uint64(len(p.Data)))
	}
	return le.Uint32(p.Data), nil
}

// PPIIter walks a per-packet-info area, validating each element as it goes
// (FreeBSD/DPDK hn_rndis_rxinfo, Linux rndis_get_ppi, openvmm): at least a
// header's worth of bytes left, size >= 12, a multiple of 4 and within the
// area (protoerr.KindPPISize); data offset >= 12 and <= size (protoerr.KindPPIOffset). The
// zero value walks nothing. Not safe for concurrent use.
type PPIIter struct {
	b   []byte
	err error
}

// NewPPIIter returns an iterator over the elements in area.
func NewPPIIter(area []byte) PPIIter { return PPIIter{b: area} }

// Next returns the next element; ok is false at the end of the area or at
// the first malformed element, after which Err reports why.
func (it *PPIIter) Next() (p PPI, ok bool) {
	if it.err != nil || len(it.b) == 0 {
		return PPI{}, false
	}
	if len(it.b) < PPIHeaderSize {
		it.err = protoerr.New("PPI", protoerr.KindPPISize, "size", uint64(len(it.b)))
		return PPI{}, false
	}
	size := le.Uint32(it.b)
	t := PPIType(le.Uint32(it.b[4:]))
	off := le.Uint32(it.b[8:])
	if size < PPIHeaderSize || size%4 != 0 || uint64(size) > uint64(len(it.b)) {
		it.err = protoerr.New("PPI", protoerr.KindPPISize, "size", uint64(size))
		return PPI{}, false
	}
	if off < PPIHeaderSize || off > size {
		it.err = protoerr.New("PPI", protoerr.KindPPIOffset, "offset", uint64(off))
		return PPI{}, false
	}
	p = PPI{Type: t, Data: it.b[off:size:size]}
	it.b = it.b[size:]
	return p, true
}

// Err returns the error that stopped the walk, or nil.
func (it *PPIIter) Err() error { return it.err }

// InfoMask records which PacketInfo fields are present.
type InfoMask uint8

// PacketInfo presence bits.
const (
	InfoChecksum InfoMask = 1 << iota
	InfoLSO
	InfoVLAN
	InfoHashValue
	InfoHashInfo
	InfoPktID
)

// maxPacketInfoPPIs is the number of fields PacketInfo can carry.
const (
	maxPacketInfoPPIs          = 6
	infoAll           InfoMask = 1<<maxPacketInfoPPIs - 1
)

// PacketInfo is the per-packet info of one PACKET_MSG in the form both
// ends use: the guest fills it for a send and reads it on receive, the
// host the reverse. A field counts only when its bit is set in Has; the
// Set methods set both. The zero value carries nothing.
type PacketInfo struct {
	Has       InfoMask
	Checksum  uint32    // PPITCPIPChecksum: a TxChecksum (G->H) or RxChecksum (H->G)
	LSO       LSOInfo   // PPITCPLargeSend
	VLAN      VLANInfo  // PPIIEEE8021Q
	HashValue uint32    // PPINBLHashValue
	HashInfo  HashInfo  // PPINBLHashInfo
	PktID     PktInfoID // PPIPktInfoID
}

// SetChecksum sets the checksum element (a TxChecksum or RxChecksum).
func (pi *PacketInfo) SetChecksum(v uint32) { pi.Checksum = v; pi.Has |= InfoChecksum }

// SetLSO sets the large-send element.
func (pi *PacketInfo) SetLSO(v LSOInfo) { pi.LSO = v; pi.Has |= InfoLSO }

// SetVLAN sets the 802.1Q element.
func (pi *PacketInfo) SetVLAN(v VLANInfo) { pi.VLAN = v; pi.Has |= InfoVLAN }

// SetHashValue sets the hash-value element.
func (pi *PacketInfo) SetHashValue(v uint32) { pi.HashValue = v; pi.Has |= InfoHashValue }

// SetHashInfo sets the hash-info element.
func (pi *PacketInfo) SetHashInfo(v HashInfo) { pi.HashInfo = v; pi.Has |= InfoHashInfo }

// SetPktID sets the RSC packet-id element.
func (pi *PacketInfo) SetPktID(v PktInfoID) { pi.PktID = v; pi.Has |= InfoPktID }

// PPILen returns the bytes of per-packet info pi encodes to: 16 per
// present field. A nil pi encodes to nothing.
func (pi *PacketInfo) PPILen() int {
	if pi == nil {
		return 0
	}
	return bits.OnesCount8(uint8(pi.Has&infoAll)) * PPIUint32Size
}

// AppendPPIs appends pi's elements to dst (see put for the order).
func (pi *PacketInfo) AppendPPIs(dst []byte) []byte {
	dst, b := grow(dst, pi.PPILen())
	pi.put(b)
	return dst
}

// put writes pi's elements into b, which holds exactly PPILen bytes, in
// type order: checksum, LSO, 802.1Q, hash value, hash info, then the
// internal packet id. Receivers do not depend on the order.
func (pi *PacketInfo) put(b []byte) {
	if pi == nil {
		return
	}
	if pi.Has&InfoChecksum != 0 {
		putPPIUint32(b, PPITCPIPChecksum, pi.Checksum)
		b = b[PPIUint32Size:]
	}
	if pi.Has&InfoLSO != 0 {
		putPPIUint32(b, PPITCPLargeSend, uint32(pi.LSO))
		b = b[PPIUint32Size:]
	}
	if pi.Has&InfoVLAN != 0 {
		putPPIUint32(b, PPIIEEE8021Q, uint32(pi.VLAN))
		b = b[PPIUint32Size:]
	}
	if pi.Has&InfoHashValue != 0 {
		putPPIUint32(b, PPINBLHashValue, pi.HashValue)
		b = b[PPIUint32Size:]
	}
	if pi.Has&InfoHashInfo != 0 {
		putPPIUint32(b, PPINBLHashInfo, uint32(pi.HashInfo))
		b = b[PPIUint32Size:]
	}
	if pi.Has&InfoPktID != 0 {
		putPPIUint32(b, PPIPktInfoID, uint32(pi.PktID))
	}
}

// ParsePacketInfo walks a per-packet-info area and collects the elements
// PacketInfo holds. Elements of other types are skipped; a repeated type
// keeps its last value. A known element with less than 4 data bytes is
// protoerr.KindPPIData; a malformed element stops the walk with its PPIIter error.
func ParsePacketInfo(area []byte) (PacketInfo, error) {
	var pi PacketInfo
	err := pi.Parse(area)
	return pi, err
}

// Parse is ParsePacketInfo into pi, which it first resets; on an error pi
// holds the elements before the bad one.
//
// It runs once per received frame, so it walks the area itself, with
// exactly PPIIter's checks and errors, rather than through PPI values,
// and fills pi in place: a receiver that then reads pi field by field
// does not wait, as it would on a copy of a PacketInfo returned by value
// (built by narrow stores, copied by wide loads, which the CPU cannot
// serve from those stores).
func (pi *PacketInfo) Parse(area []byte) error {
	*pi = PacketInfo{}
	b := area
	for len(b) > 0 {
		if len(b) < PPIHeaderSize {
			return protoerr.New("PPI", protoerr.KindPPISize, "size", uint64(len(b)))
		}
		size := le.Uint32(b)
		t := PPIType(le.Uint32(b[4:]))
		off := le.Uint32(b[8:])
		if size < PPIHeaderSize || size%4 != 0 || uint64(size) > uint64(len(b)) {
			return protoerr.New("PPI", protoerr.KindPPISize, "size", uint64(size))
		}
		if off < PPIHeaderSize || off > size {
			return protoerr.New("PPI", protoerr.KindPPIOffset, "offset", uint64(off))
		}
		data := b[off:size]
		b = b[size:]
		var bit InfoMask
		switch t {
		case PPITCPIPChecksum:
			bit = InfoChecksum
		case PPITCPLargeSend:
			bit = InfoLSO
		case PPIIEEE8021Q:
			bit = InfoVLAN
		case PPINBLHashValue:
			bit = InfoHashValue
		case PPINBLHashInfo:
			bit = InfoHashInfo
		case PPIPktInfoID:
			bit = InfoPktID
		default:
			continue
		}
		if len(data) < 4 {
			return protoerr.New("PPI", protoerr.KindPPIData, t.String(), uint64(len(data)))
		}
		v := le.Uint32(data)
		pi.set(bit, v)
	}
	return nil
}

// TxChecksum is the TCPIP_CHKSUM_PKTINFO a guest sends: which checksums
// the host should compute, and where the transport header starts
// (docs/protocol/netvsc.md §3.4; DPDK NDIS_TXCSUM_INFO_*).
type TxChecksum uint32

// TxChecksum flags.
const (
	TxChecksumIPv4     TxChecksum = 1 << 0 // is_ipv4
	TxChecksumIPv6     TxChecksum = 1 << 1 // is_ipv6
	TxChecksumTCP      TxChecksum = 1 << 2 // tcp_csum
	TxChecksumUDP      TxChecksum = 1 << 3 // udp_csum
	TxChecksumIPHeader TxChecksum = 1 << 4 // ip_hdr_csum
	// txChecksumOffsetMask covers bits 16–25: the transport header offset
	// from the start of the frame.
	txChecksumOffsetMask TxChecksum = 0x3ff << 16
)

// NewTxChecksum returns flags with the transport header at
// transportOffset bytes into the frame (10 bits; larger values are
// truncated).
func NewTxChecksum(flags TxChecksum, transportOffset int) TxChecksum {
	return flags&^txChecksumOffsetMask | TxChecksum(transportOffset&0x3ff)<<16
}

// TransportOffset returns the transport header offset.
func (c TxChecksum) TransportOffset() int { return int(c&txChecksumOffsetMask) >> 16 }

// RxChecksum is the TCPIP_CHKSUM_PKTINFO a host sends with a received
// frame: what it verified (docs/protocol/netvsc.md §3.4; DPDK NDIS_RXCSUM_INFO_*).
type RxChecksum uint32

// RxChecksum flags.
const (
	RxChecksumTCPFailed       RxChecksum = 1 << 0
	RxChecksumUDPFailed       RxChecksum = 1 << 1
	RxChecksumIPFailed        RxChecksum = 1 << 2
	RxChecksumTCPOK           RxChecksum = 1 << 3
	RxChecksumUDPOK           RxChecksum = 1 << 4
	RxChecksumIPOK            RxChecksum = 1 << 5
	RxChecksumLoopback        RxChecksum = 1 << 6
	RxChecksumTCPValueInvalid RxChecksum = 1 << 7
	// RxChecksumIPValueInvalid with RxChecksumIPOK marks a coalesced frame
	// whose IPv4 header checksum Linux recomputes.
	RxChecksumIPValueInvalid RxChecksum = 1 << 8
)

// LSOInfo is the TCP_LARGESEND_PKTINFO a guest sends: bits 0–19 MSS, bits
// 20–29 TCP header offset from the frame start, bit 30 type (1 = LSOv2),
// bit 31 IPv6 (docs/protocol/netvsc.md §3.4; DPDK NDIS_LSO2_INFO_*).
type LSOInfo uint32

const (
	lsoMSSMask  = 0x000fffff
	lsoIsV2     = 1 << 30
	lsoIPv6     = 1 << 31
	lsoTHOShift = 20
)

// NewLSOv2 returns an LSOv2 request for segments of mss payload bytes
// with the TCP header tcpHeaderOffset bytes into the frame. Values wider
// than their fields (20 and 10 bits) are truncated.
func NewLSOv2(mss, tcpHeaderOffset int, ipv6 bool) LSOInfo {
	v := LSOInfo(mss&lsoMSSMask) | LSOInfo(tcpHeaderOffset&0x3ff)<<lsoTHOShift | lsoIsV2
	if ipv6 {
		v |= lsoIPv6
	}
	return v
}

// MSS returns the maximum segment size.
func (l LSOInfo) MSS() int { return int(l & lsoMSSMask) }

// TCPHeaderOffset returns the TCP header offset from the frame start.
func (l LSOInfo) TCPHeaderOffset() int { return int(l>>lsoTHOShift) & 0x3ff }

// IsV2 reports the LSOv2 type bit.
func (l LSOInfo) IsV2() bool { return l&lsoIsV2 != 0 }

// IPv6 reports the IPv6 bit.
func (l LSOInfo) IPv6() bool { return l&lsoIPv6 != 0 }

// VLANInfo is IEEE_8021Q_INFO: bits 0–2 priority, bit 3 CFI/DEI, bits
// 4–15 VLAN id (docs/protocol/netvsc.md §3.4; DPDK NDIS_VLAN_INFO_*). This is not the
// order of an 802.1Q TCI (PCP 13–15, DEI 12, VID 0–11); convert with TCI
// and VLANInfoFromTCI. Hyper-V drops frames with an in-frame tag, so the
// tag always travels here (docs/protocol/netvsc.md §2.7).
type VLANInfo uint32

// NewVLANInfo packs a priority (3 bits), CFI and a 12-bit VLAN id.
func NewVLANInfo(priority uint8, cfi bool, id uint16) VLANInfo {
	v := VLANInfo(priority&7) | VLANInfo(id&0xfff)<<4
	if cfi {
		v |= 1 << 3
	}
	return v
}

// VLANInfoFromTCI converts an 802.1Q tag control word.
func VLANInfoFromTCI(tci uint16) VLANInfo {
	return NewVLANInfo(uint8(tci>>13), tci&0x1000 != 0, tci&0xfff)
}

// Priority returns the 802.1p priority.
func (v VLANInfo) Priority() uint8 { return uint8(v & 7) }

// CFI returns the CFI/DEI bit.
func (v VLANInfo) CFI() bool { return v&(1<<3) != 0 }

// ID returns the VLAN id.
func (v VLANInfo) ID() uint16 { return uint16(v>>4) & 0xfff }

// TCI returns the 802.1Q tag control word.
func (v VLANInfo) TCI() uint16 {
	t := uint16(v.Priority())<<13 | v.ID()
	if v.CFI() {
		t |= 0x1000
	}
	return t
}

// PktInfoID is RNDIS_PKTINFO_ID, which marks RSC fragments: u8 version
// (1), u8 flags, u16 packet id, little-endian (docs/protocol/netvsc.md §3.4).
type PktInfoID uint32

// PktInfoID version and flags (Linux RNDIS_PKTINFO_*).
const (
	PktInfoIDVersion1 = 1
	PktInfoSubAlloc   = 1 << 0 // the frame is an RSC fragment
	PktInfo1stFrag    = 1 << 1 // first fragment: reset the accumulator
	PktInfoLastFrag   = 1 << 2 // last fragment: the frame is complete
)

// NewPktInfoID returns a version-1 packet id with flags.
func NewPktInfoID(flags uint8, id uint16) PktInfoID {
	return PktInfoID(PktInfoIDVersion1) | PktInfoID(flags)<<8 | PktInfoID(id)<<16
}

// Version returns the version byte.
func (p PktInfoID) Version() uint8 { return uint8(p) }

// Flags returns the PktInfo* flags.
func (p PktInfoID) Flags() uint8 { return uint8(p >> 8) }

// ID returns the packet id.
func (p PktInfoID) ID() uint16 { return uint16(p >> 16) }

// set records v, the first 4 bytes of a PPI's data, as the element bit
// stands for.
func (pi *PacketInfo) set(bit InfoMask, v uint32) {
	switch bit {
	case InfoChecksum:
		pi.Checksum = v
	case InfoLSO:
		pi.LSO = LSOInfo(v)
	case InfoVLAN:
		pi.VLAN = VLANInfo(v)
	case InfoHashValue:
		pi.HashValue = v
	case InfoHashInfo:
		pi.HashInfo = HashInfo(v)
	case InfoPktID:
		pi.PktID = PktInfoID(v)
	}
	pi.Has |= bit
}
