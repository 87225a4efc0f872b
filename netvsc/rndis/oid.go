package rndis

import (
	"fmt"

	"github.com/vmbusd/vmbusd/netvsc/nvsp"
	"github.com/vmbusd/vmbusd/netvsc/protoerr"
)

// OIDs name the objects RNDIS QUERY and SET read and write; the NDIS
// objects some of them carry start with an NDIS object header {type u8,
// revision u8, size u16} (docs/protocol/netvsc.md §3.5, §3.6).

// OID is an NDIS object identifier.
type OID uint32

// OIDs (docs/protocol/netvsc.md §3.5; the ones marked "rndis.h" are from DPDK's
// drivers/net/netvsc/rndis.h).
const (
	OIDGenSupportedList               OID = 0x00010101
	OIDGenHardwareStatus              OID = 0x00010102 // rndis.h
	OIDGenMediaSupported              OID = 0x00010103 // rndis.h
	OIDGenMediaInUse                  OID = 0x00010104 // rndis.h
	OIDGenMaximumLookahead            OID = 0x00010105 // rndis.h
	OIDGenMaximumFrameSize            OID = 0x00010106 // u32 = NDIS-config MTU - 14
	OIDGenLinkSpeed                   OID = 0x00010107 // u32, LinkSpeed (100 bps units)
	OIDGenVendorID                    OID = 0x0001010C // u32, 0x155D
	OIDGenVendorDescription           OID = 0x0001010D // rndis.h
	OIDGenCurrentPacketFilter         OID = 0x0001010E // u32, NDISPacketType* bits
	OIDGenCurrentLookahead            OID = 0x0001010F // rndis.h
	OIDGenDriverVersion               OID = 0x00010110 // rndis.h
	OIDGenMaximumTotalSize            OID = 0x00010111 // u32 = MTU incl. Ethernet header
	OIDGenMACOptions                  OID = 0x00010113 // rndis.h
	OIDGenMediaConnectStatus          OID = 0x00010114 // u32, NDISMediaState*
	OIDGenMaximumSendPackets          OID = 0x00010115 // rndis.h
	OIDGenVendorDriverVersion         OID = 0x00010116 // rndis.h
	OIDGenReceiveScaleCapabilities    OID = 0x00010203 // RSSCapabilities
	OIDGenReceiveScaleParameters      OID = 0x00010204 // RSSParameters
	OIDGenRNDISConfigParameter        OID = 0x0001021B
	OIDGenFriendlyName                OID = 0x00020216 // UTF-16, 256 chars
	OID8023PermanentAddress           OID = 0x01010101 // 6 bytes
	OID8023CurrentAddress             OID = 0x01010102 // 6 bytes
	OID8023MulticastList              OID = 0x01010103 // rndis.h
	OID8023MaximumListSize            OID = 0x01010104 // u32, 0 on Hyper-V
	OIDOffloadEncapsulation           OID = 0x0101010A
	OIDTCPOffloadCurrentConfig        OID = 0xFC01020B // Offload
	OIDTCPOffloadParameters           OID = 0xFC01020C // OffloadParameters
	OIDTCPOffloadHardwareCapabilities OID = 0xFC01020D // Offload
)

var oidNames = map[OID]string{
	OIDGenSupportedList:               "OID_GEN_SUPPORTED_LIST",
	OIDGenHardwareStatus:              "OID_GEN_HARDWARE_STATUS",
	OIDGenMediaSupported:              "OID_GEN_MEDIA_SUPPORTED",
	OIDGenMediaInUse:                  "OID_GEN_MEDIA_IN_USE",
	OIDGenMaximumLookahead:            "OID_GEN_MAXIMUM_LOOKAHEAD",
	OIDGenMaximumFrameSize:            "OID_GEN_MAXIMUM_FRAME_SIZE",
	OIDGenLinkSpeed:                   "OID_GEN_LINK_SPEED",
	OIDGenVendorID:                    "OID_GEN_VENDOR_ID",
	OIDGenVendorDescription:           "OID_GEN_VENDOR_DESCRIPTION",
	OIDGenCurrentPacketFilter:         "OID_GEN_CURRENT_PACKET_FILTER",
	OIDGenCurrentLookahead:            "OID_GEN_CURRENT_LOOKAHEAD",
	OIDGenDriverVersion:               "OID_GEN_DRIVER_VERSION",
	OIDGenMaximumTotalSize:            "OID_GEN_MAXIMUM_TOTAL_SIZE",
	OIDGenMACOptions:                  "OID_GEN_MAC_OPTIONS",
	OIDGenMediaConnectStatus:          "OID_GEN_MEDIA_CONNECT_STATUS",
	OIDGenMaximumSendPackets:          "OID_GEN_MAXIMUM_SEND_PACKETS",
	OIDGenVendorDriverVersion:         "OID_GEN_VENDOR_DRIVER_VERSION",
	OIDGenReceiveScaleCapabilities:    "OID_GEN_RECEIVE_SCALE_CAPABILITIES",
	OIDGenReceiveScaleParameters:      "OID_GEN_RECEIVE_SCALE_PARAMETERS",
	OIDGenRNDISConfigParameter:        "OID_GEN_RNDIS_CONFIG_PARAMETER",
	OIDGenFriendlyName:                "OID_GEN_FRIENDLY_NAME",
	OID8023PermanentAddress:           "OID_802_3_PERMANENT_ADDRESS",
	OID8023CurrentAddress:             "OID_802_3_CURRENT_ADDRESS",
	OID8023MulticastList:              "OID_802_3_MULTICAST_LIST",
	OID8023MaximumListSize:            "OID_802_3_MAXIMUM_LIST_SIZE",
	OIDOffloadEncapsulation:           "OID_OFFLOAD_ENCAPSULATION",
	OIDTCPOffloadCurrentConfig:        "OID_TCP_OFFLOAD_CURRENT_CONFIG",
	OIDTCPOffloadParameters:           "OID_TCP_OFFLOAD_PARAMETERS",
	OIDTCPOffloadHardwareCapabilities: "OID_TCP_OFFLOAD_HARDWARE_CAPABILITIES",
}

func (o OID) String() string {
	if name, ok := oidNames[o]; ok {
		return name
	}
	return fmt.Sprintf("oid(%#08x)", uint32(o))
}

// OID_GEN_CURRENT_PACKET_FILTER bits (docs/protocol/netvsc.md §3.5; DPDK rndis.h
// NDIS_PACKET_TYPE_*).
const (
	NDISPacketTypeNone          uint32 = 0x00000000
	NDISPacketTypeDirected      uint32 = 0x00000001
	NDISPacketTypeMulticast     uint32 = 0x00000002
	NDISPacketTypeAllMulticast  uint32 = 0x00000004
	NDISPacketTypeBroadcast     uint32 = 0x00000008
	NDISPacketTypeSourceRouting uint32 = 0x00000010
	NDISPacketTypePromiscuous   uint32 = 0x00000020
	NDISPacketTypeSMT           uint32 = 0x00000040
	NDISPacketTypeAllLocal      uint32 = 0x00000080
	NDISPacketTypeGroup         uint32 = 0x00001000
	NDISPacketTypeAllFunctional uint32 = 0x00002000
	NDISPacketTypeFunctional    uint32 = 0x00004000
	NDISPacketTypeMACFrame      uint32 = 0x00008000
	// NDISPacketFilterDefault is what both guests set when the port
	// starts: DIRECTED | ALL_MULTICAST | BROADCAST (0x0D).
	NDISPacketFilterDefault = NDISPacketTypeDirected | NDISPacketTypeAllMulticast | NDISPacketTypeBroadcast
)

// OID_GEN_MEDIA_CONNECT_STATUS values (docs/protocol/netvsc.md §2.11; DPDK ndis.h).
const (
	NDISMediaStateConnected    uint32 = 0
	NDISMediaStateDisconnected uint32 = 1
)

// HyperVVendorID is the OID_GEN_VENDOR_ID answer: Microsoft's Hyper-V MAC
// OUI, as vmswitch returns it (docs/protocol/netvsc.md §3.5).
const HyperVVendorID uint32 = 0x0000155D

// LinkSpeed is OID_GEN_LINK_SPEED and the LINK_SPEED_CHANGE payload: a u32
// in units of 100 bps (docs/protocol/netvsc.md §2.11).
type LinkSpeed uint32

// LinkSpeedFromBps converts bits per second, saturating at the largest
// value a u32 holds (about 429 Gbps).
func LinkSpeedFromBps(bps uint64) LinkSpeed {
	v := bps / 100
	if v > uint64(^uint32(0)) {
		return LinkSpeed(^uint32(0))
	}
	return LinkSpeed(v)
}

// Bps returns the speed in bits per second.
func (s LinkSpeed) Bps() uint64 { return uint64(s) * 100 }

// Mbps returns the speed in Mbit/s as Linux and DPDK compute it
// (value / 10000).
func (s LinkSpeed) Mbps() uint32 { return uint32(s) / 10000 }

// ParseInfoUint32 reads the u32 answer of a QUERY (or a u32 SET value, or
// a u32 status buffer such as LINK_SPEED_CHANGE's). Longer buffers are
// accepted; shorter are protoerr.KindShort.
func ParseInfoUint32(info []byte) (uint32, error) {
	if len(info) < 4 {
		return 0, protoerr.New("OID info", protoerr.KindShort, "u32", uint64(len(info)))
	}
	return le.Uint32(info), nil
}

// AppendInfoUint32 appends a u32 info buffer.
func AppendInfoUint32(dst []byte, v uint32) []byte { return le.AppendUint32(dst, v) }

// ParseInfoMAC reads the answer to OID_802_3_PERMANENT_ADDRESS or
// OID_802_3_CURRENT_ADDRESS.
func ParseInfoMAC(info []byte) ([6]byte, error) {
	var mac [6]byte
	if len(info) < 6 {
		return mac, protoerr.New("OID info", protoerr.KindShort, "mac", uint64(len(info)))
	}
	copy(mac[:], info)
	return mac, nil
}

// NDIS object header types (docs/protocol/netvsc.md §3.6; DPDK ndis.h NDIS_OBJTYPE_*).
const (
	NDISObjectTypeDefault         uint8 = 0x80
	NDISObjectTypeRSSCapabilities uint8 = 0x88
	NDISObjectTypeRSSParameters   uint8 = 0x89
	NDISObjectTypeOffload         uint8 = 0xA7
)

// NDISObjectHeader starts every NDIS object: Size covers the object's
// fixed part including the header.
type NDISObjectHeader struct {
	Type     uint8
	Revision uint8
	Size     uint16
}

// NDISObjectHeaderSize is the size of NDISObjectHeader on the wire.
const NDISObjectHeaderSize = 4

// Marshal appends the 4 header bytes.
func (h NDISObjectHeader) Marshal(dst []byte) []byte {
	dst, b := grow(dst, NDISObjectHeaderSize)
	h.put(b)
	return dst
}

func (h NDISObjectHeader) put(b []byte) {
	b[0] = h.Type
	b[1] = h.Revision
	le.PutUint16(b[2:], h.Size)
}

// ParseNDISObjectHeader reads the header at the start of b.
func ParseNDISObjectHeader(b []byte) (NDISObjectHeader, error) {
	if len(b) < NDISObjectHeaderSize {
		return NDISObjectHeader{}, protoerr.New("NDIS object", protoerr.KindShort, "header", uint64(len(b)))
	}
	return NDISObjectHeader{Type: b[0], Revision: b[1], Size: le.Uint16(b[2:])}, nil
}

// checkObject reads the header of an object of type want whose fixed part
// is at least min bytes, and checks that b holds Size bytes.
func checkObject(b []byte, msg string, want uint8, min int) (NDISObjectHeader, error) {
	h, err := ParseNDISObjectHeader(b)
	if err != nil {
		return h, protoerr.New(msg, protoerr.KindShort, "header", uint64(len(b)))
	}
	switch {
	case h.Type != want:
		return h, protoerr.New(msg, protoerr.KindNDISObject, "type", uint64(h.Type))
	case h.Revision == 0:
		return h, protoerr.New(msg, protoerr.KindNDISObject, "revision", 0)
	case int(h.Size) < min:
		return h, protoerr.New(msg, protoerr.KindNDISObject, "size", uint64(h.Size))
	case int(h.Size) > len(b):
		return h, protoerr.New(msg, protoerr.KindShort, "size", uint64(len(b)))
	}
	return h, nil
}

// appendObject appends the first size bytes of the fixed-layout object
// full (zero padded when size exceeds it; at least the header).
func appendObject(dst []byte, full []byte, size int) []byte {
	if size < NDISObjectHeaderSize {
		size = NDISObjectHeaderSize
	}
	dst, b := grow(dst, size)
	copy(b, full)
	return dst
}

// NDIS_OFFLOAD_PARAMETERS revisions and sizes (docs/protocol/netvsc.md §3.6).
const (
	NDISOffloadParametersRevision1 = 1
	NDISOffloadParametersRevision2 = 2
	NDISOffloadParametersRevision3 = 3
	NDISOffloadParametersSizeRev1  = 20 // NDIS 6.0
	NDISOffloadParametersSizeRev2  = 22 // NDIS 6.1, Linux VERSION_4_OFFLOAD_SIZE
	NDISOffloadParametersSizeRev3  = 28 // NDIS 6.30
)

// NDIS_OFFLOAD_PARAMETERS values. Checksum fields take NoChange..TxRxEnabled;
// LSOv1, LSOv2 and RSC fields take NoChange, Disabled or Enabled.
const (
	NDISOffloadParametersNoChange            uint8 = 0
	NDISOffloadParametersTxRxDisabled        uint8 = 1
	NDISOffloadParametersTxEnabledRxDisabled uint8 = 2
	NDISOffloadParametersRxEnabledTxDisabled uint8 = 3
	NDISOffloadParametersTxRxEnabled         uint8 = 4
	NDISOffloadParametersDisabled            uint8 = 1 // LSOv1, LSOv2, RSC
	NDISOffloadParametersEnabled             uint8 = 2 // LSOv1 (openvmm rejects), LSOv2, RSC
)

// OffloadParametersHeader returns the header a guest sends with
// OID_TCP_OFFLOAD_PARAMETERS at a negotiated NVSP version: revision 3 and
// 28 bytes from NVSP 5 (NDIS 6.30), revision 2 and 22 bytes below (NDIS
// 6.1), as DPDK does. (Linux sends revision 3 with size 22 below NVSP 5,
// and clears the UDP checksum fields; Unmarshal accepts that too.)
func OffloadParametersHeader(nvspVersion uint32) NDISObjectHeader {
	if nvspVersion >= nvsp.Version5 {
		return NDISObjectHeader{NDISObjectTypeDefault, NDISOffloadParametersRevision3, NDISOffloadParametersSizeRev3}
	}
	return NDISObjectHeader{NDISObjectTypeDefault, NDISOffloadParametersRevision2, NDISOffloadParametersSizeRev2}
}

// OffloadParameters is NDIS_OFFLOAD_PARAMETERS, set through
// OID_TCP_OFFLOAD_PARAMETERS (docs/protocol/netvsc.md §3.6).
type OffloadParameters struct {
	// Header is written as given; the zero value means
	// OffloadParametersHeader(nvsp.Version61). Marshal emits
	// Header.Size bytes: fields past that size are left out.
	Header                        NDISObjectHeader
	IPv4Checksum                  uint8  // @4; Linux always 1 (off)
	TCPIPv4Checksum               uint8  // @5
	UDPIPv4Checksum               uint8  // @6
	TCPIPv6Checksum               uint8  // @7
	UDPIPv6Checksum               uint8  // @8
	LSOv1                         uint8  // @9
	IPsecV1                       uint8  // @10
	LSOv2IPv4                     uint8  // @11
	LSOv2IPv6                     uint8  // @12
	TCPConnectionIPv4             uint8  // @13
	TCPConnectionIPv6             uint8  // @14
	Flags                         uint32 // @16
	IPsecV2                       uint8  // @20 (rev 2)
	IPsecV2IPv4                   uint8  // @21 (rev 2)
	RSCIPv4                       uint8  // @22 (rev 3)
	RSCIPv6                       uint8  // @23 (rev 3)
	EncapsulatedPacketTaskOffload uint8  // @24 (rev 3)
	EncapsulationTypes            uint8  // @25 (rev 3)
}

// Marshal appends the object (Header.Size bytes) to dst.
func (p OffloadParameters) Marshal(dst []byte) []byte {
	h := p.Header
	if h == (NDISObjectHeader{}) {
		h = OffloadParametersHeader(nvsp.Version61)
	}
	var b [NDISOffloadParametersSizeRev3]byte
	h.put(b[:])
	b[4], b[5], b[6], b[7], b[8] = p.IPv4Checksum, p.TCPIPv4Checksum, p.UDPIPv4Checksum, p.TCPIPv6Checksum, p.UDPIPv6Checksum
	b[9], b[10], b[11], b[12] = p.LSOv1, p.IPsecV1, p.LSOv2IPv4, p.LSOv2IPv6
	b[13], b[14] = p.TCPConnectionIPv4, p.TCPConnectionIPv6
	le.PutUint32(b[16:], p.Flags)
	b[20], b[21], b[22], b[23] = p.IPsecV2, p.IPsecV2IPv4, p.RSCIPv4, p.RSCIPv6
	b[24], b[25] = p.EncapsulatedPacketTaskOffload, p.EncapsulationTypes
	return appendObject(dst, b[:], int(h.Size))
}

// Unmarshal decodes the object at the start of b, the way openvmm accepts
// it: type DEFAULT, any revision from 1, Size >= 20 and within b. Fields
// past Size read as 0 (no change).
func (p *OffloadParameters) Unmarshal(b []byte) error {
	h, err := checkObject(b, "NDIS_OFFLOAD_PARAMETERS", NDISObjectTypeDefault, NDISOffloadParametersSizeRev1)
	if err != nil {
		return err
	}
	var f [NDISOffloadParametersSizeRev3]byte
	copy(f[:], b[:h.Size])
	*p = OffloadParameters{
		Header:          h,
		IPv4Checksum:    f[4],
		TCPIPv4Checksum: f[5], UDPIPv4Checksum: f[6], TCPIPv6Checksum: f[7], UDPIPv6Checksum: f[8],
		LSOv1: f[9], IPsecV1: f[10], LSOv2IPv4: f[11], LSOv2IPv6: f[12],
		TCPConnectionIPv4: f[13], TCPConnectionIPv6: f[14],
		Flags:   le.Uint32(f[16:]),
		IPsecV2: f[20], IPsecV2IPv4: f[21], RSCIPv4: f[22], RSCIPv6: f[23],
		EncapsulatedPacketTaskOffload: f[24], EncapsulationTypes: f[25],
	}
	return nil
}

// NDIS_OFFLOAD revisions and sizes (docs/protocol/netvsc.md §3.6).
const (
	NDISOffloadRevision1 = 1
	NDISOffloadRevision2 = 2
	NDISOffloadRevision3 = 3
	NDISOffloadSizeRev1  = 112 // NDIS 6.0
	NDISOffloadSizeRev2  = 144 // NDIS 6.1
	NDISOffloadSizeRev3  = 156 // NDIS 6.30
)

// OffloadQueryHeader returns the NDIS_OFFLOAD header a guest puts in the
// input buffer of an OID_TCP_OFFLOAD_HARDWARE_CAPABILITIES query, by
// negotiated NVSP version as Linux picks it: revision 3 (156 bytes) from
// NVSP 5, revision 2 (144) at NVSP 4, revision 1 (112) below.
func OffloadQueryHeader(nvspVersion uint32) NDISObjectHeader {
	switch {
	case nvspVersion >= nvsp.Version5:
		return NDISObjectHeader{NDISObjectTypeOffload, NDISOffloadRevision3, NDISOffloadSizeRev3}
	case nvspVersion >= nvsp.Version4:
		return NDISObjectHeader{NDISObjectTypeOffload, NDISOffloadRevision2, NDISOffloadSizeRev2}
	}
	return NDISObjectHeader{NDISObjectTypeOffload, NDISOffloadRevision1, NDISOffloadSizeRev1}
}

// NDIS_OFFLOAD checksum capability bits, for the ChecksumOffload flag
// fields (docs/protocol/netvsc.md §3.6; DPDK ndis.h NDIS_TXCSUM_CAP_*/NDIS_RXCSUM_CAP_*).
// Linux enables TX checksum only when TCP and TCPOptions are both set.
const (
	NDISChecksumCapIPOptions  uint32 = 0x001 // IP4OPT for IPv4, IP6EXT for IPv6
	NDISChecksumCapTCPOptions uint32 = 0x004
	NDISChecksumCapTCP        uint32 = 0x010
	NDISChecksumCapUDP        uint32 = 0x040
	NDISChecksumCapIP4        uint32 = 0x100 // IPv4 header checksum
)

// LSOv2Offload.IPv6Options bits. Linux enables IPv6 LSO only when both
// are set.
const (
	NDISLSOv2CapIP6Ext  uint32 = 0x1
	NDISLSOv2CapTCP6Opt uint32 = 0x4
)

// Encapsulation values of the *Encapsulation fields (DPDK ndis.h
// NDIS_OFFLOAD_ENCAP_*; openvmm sends 802.3).
const (
	NDISOffloadEncapNone      uint32 = 0x00
	NDISOffloadEncapNull      uint32 = 0x01
	NDISOffloadEncap8023      uint32 = 0x02
	NDISOffloadEncap8023PQ    uint32 = 0x04
	NDISOffloadEncap8023PQOOB uint32 = 0x08
	NDISOffloadEncapRFC1483   uint32 = 0x10
)

// openvmm's LSOv2 limits, which a host simulator advertises (docs/protocol/netvsc.md
// §3.6).
const (
	HostLSOv2MaxSize     = 0xF53C // 62780 bytes
	HostLSOv2MinSegments = 2
)

// ChecksumOffload is NDIS_OFFLOAD's checksum block (@4, 8 × u32).
type ChecksumOffload struct {
	IPv4TxEncapsulation uint32
	IPv4TxFlags         uint32 // NDISChecksumCap*
	IPv4RxEncapsulation uint32
	IPv4RxFlags         uint32
	IPv6TxEncapsulation uint32
	IPv6TxFlags         uint32
	IPv6RxEncapsulation uint32
	IPv6RxFlags         uint32
}

// LSOv1Offload is NDIS_OFFLOAD's LSOv1 block (@36, 4 × u32).
type LSOv1Offload struct {
	Encapsulation   uint32
	MaxOffloadSize  uint32
	MinSegmentCount uint32
	Options         uint32
}

// LSOv2Offload is NDIS_OFFLOAD's LSOv2 block (@80, 7 × u32). Linux takes
// its TSO maximum from IPv4MaxSize/IPv6MaxSize.
type LSOv2Offload struct {
	IPv4Encapsulation uint32
	IPv4MaxSize       uint32
	IPv4MinSegments   uint32
	IPv6Encapsulation uint32
	IPv6MaxSize       uint32
	IPv6MinSegments   uint32
	IPv6Options       uint32 // NDISLSOv2Cap*
}

// Offload is NDIS_OFFLOAD, the answer to
// OID_TCP_OFFLOAD_HARDWARE_CAPABILITIES (and CURRENT_CONFIG, and the
// payload of TASK_OFFLOAD_CURRENT_CONFIG) (docs/protocol/netvsc.md §3.6).
type Offload struct {
	// Header is written as given; the zero value means revision 3, 156
	// bytes. Marshal emits Header.Size bytes.
	Header            NDISObjectHeader
	Checksum          ChecksumOffload // @4
	LSOv1             LSOv1Offload    // @36
	IPsecV1           [7]uint32       // @52, not interpreted
	LSOv2             LSOv2Offload    // @80
	Flags             uint32          // @108
	IPsecV2           [32]byte        // @112 (rev 2), not interpreted
	RSCIPv4           uint8           // @144 (rev 3)
	RSCIPv6           uint8           // @145 (rev 3)
	EncapGREFlags     uint32          // @148 (rev 3)
	EncapGREMaxHeader uint32          // @152 (rev 3)
}

// Marshal appends the object (Header.Size bytes) to dst.
func (o Offload) Marshal(dst []byte) []byte {
	h := o.Header
	if h == (NDISObjectHeader{}) {
		h = NDISObjectHeader{NDISObjectTypeOffload, NDISOffloadRevision3, NDISOffloadSizeRev3}
	}
	var b [NDISOffloadSizeRev3]byte
	h.put(b[:])
	c := o.Checksum
	for i, v := range [8]uint32{c.IPv4TxEncapsulation, c.IPv4TxFlags, c.IPv4RxEncapsulation, c.IPv4RxFlags,
		c.IPv6TxEncapsulation, c.IPv6TxFlags, c.IPv6RxEncapsulation, c.IPv6RxFlags} {
		le.PutUint32(b[4+4*i:], v)
	}
	l1 := o.LSOv1
	for i, v := range [4]uint32{l1.Encapsulation, l1.MaxOffloadSize, l1.MinSegmentCount, l1.Options} {
		le.PutUint32(b[36+4*i:], v)
	}
	for i, v := range o.IPsecV1 {
		le.PutUint32(b[52+4*i:], v)
	}
	l2 := o.LSOv2
	for i, v := range [7]uint32{l2.IPv4Encapsulation, l2.IPv4MaxSize, l2.IPv4MinSegments,
		l2.IPv6Encapsulation, l2.IPv6MaxSize, l2.IPv6MinSegments, l2.IPv6Options} {
		le.PutUint32(b[80+4*i:], v)
	}
	le.PutUint32(b[108:], o.Flags)
	copy(b[112:144], o.IPsecV2[:])
	b[144], b[145] = o.RSCIPv4, o.RSCIPv6
	le.PutUint32(b[148:], o.EncapGREFlags)
	le.PutUint32(b[152:], o.EncapGREMaxHeader)
	return appendObject(dst, b[:], int(h.Size))
}

// Unmarshal decodes the object at the start of b: type OFFLOAD, revision
// from 1, Size >= 112 and within b. Fields past Size read as 0.
func (o *Offload) Unmarshal(b []byte) error {
	h, err := checkObject(b, "NDIS_OFFLOAD", NDISObjectTypeOffload, NDISOffloadSizeRev1)
	if err != nil {
		return err
	}
	var f [NDISOffloadSizeRev3]byte
	copy(f[:], b[:h.Size])
	u := func(off int) uint32 { return le.Uint32(f[off:]) }
	*o = Offload{
		Header:   h,
		Checksum: ChecksumOffload{u(4), u(8), u(12), u(16), u(20), u(24), u(28), u(32)},
		LSOv1:    LSOv1Offload{u(36), u(40), u(44), u(48)},
		LSOv2:    LSOv2Offload{u(80), u(84), u(88), u(92), u(96), u(100), u(104)},
		Flags:    u(108),
		RSCIPv4:  f[144], RSCIPv6: f[145],
		EncapGREFlags: u(148), EncapGREMaxHeader: u(152),
	}
	for i := range o.IPsecV1 {
		o.IPsecV1[i] = u(52 + 4*i)
	}
	copy(o.IPsecV2[:], f[112:144])
	return nil
}
