package netvsc

import (
	"fmt"
	"net/netip"
)

// OIDs name the objects RNDIS QUERY and SET read and write; the NDIS
// objects some of them carry start with an NDIS object header {type u8,
// revision u8, size u16} (netvsc.md §3.5, §3.6).

// OID is an NDIS object identifier.
type OID uint32

// OIDs (netvsc.md §3.5; the ones marked "rndis.h" are from DPDK's
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

// OID_GEN_CURRENT_PACKET_FILTER bits (netvsc.md §3.5; DPDK rndis.h
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

// OID_GEN_MEDIA_CONNECT_STATUS values (netvsc.md §2.11; DPDK ndis.h).
const (
	NDISMediaStateConnected    uint32 = 0
	NDISMediaStateDisconnected uint32 = 1
)

// HyperVVendorID is the OID_GEN_VENDOR_ID answer: Microsoft's Hyper-V MAC
// OUI, as vmswitch returns it (netvsc.md §3.5).
const HyperVVendorID uint32 = 0x0000155D

// LinkSpeed is OID_GEN_LINK_SPEED and the LINK_SPEED_CHANGE payload: a u32
// in units of 100 bps (netvsc.md §2.11).
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
// accepted; shorter are KindShort.
func ParseInfoUint32(info []byte) (uint32, error) {
	if len(info) < 4 {
		return 0, perr("OID info", KindShort, "u32", uint64(len(info)))
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
		return mac, perr("OID info", KindShort, "mac", uint64(len(info)))
	}
	copy(mac[:], info)
	return mac, nil
}

// NDIS object header types (netvsc.md §3.6; DPDK ndis.h NDIS_OBJTYPE_*).
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
		return NDISObjectHeader{}, perr("NDIS object", KindShort, "header", uint64(len(b)))
	}
	return NDISObjectHeader{Type: b[0], Revision: b[1], Size: le.Uint16(b[2:])}, nil
}

// checkObject reads the header of an object of type want whose fixed part
// is at least min bytes, and checks that b holds Size bytes.
func checkObject(b []byte, msg string, want uint8, min int) (NDISObjectHeader, error) {
	h, err := ParseNDISObjectHeader(b)
	if err != nil {
		return h, perr(msg, KindShort, "header", uint64(len(b)))
	}
	switch {
	case h.Type != want:
		return h, perr(msg, KindNDISObject, "type", uint64(h.Type))
	case h.Revision == 0:
		return h, perr(msg, KindNDISObject, "revision", 0)
	case int(h.Size) < min:
		return h, perr(msg, KindNDISObject, "size", uint64(h.Size))
	case int(h.Size) > len(b):
		return h, perr(msg, KindShort, "size", uint64(len(b)))
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

// NDIS_OFFLOAD_PARAMETERS revisions and sizes (netvsc.md §3.6).
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
	if nvspVersion >= NVSPProtocolVersion5 {
		return NDISObjectHeader{NDISObjectTypeDefault, NDISOffloadParametersRevision3, NDISOffloadParametersSizeRev3}
	}
	return NDISObjectHeader{NDISObjectTypeDefault, NDISOffloadParametersRevision2, NDISOffloadParametersSizeRev2}
}

// OffloadParameters is NDIS_OFFLOAD_PARAMETERS, set through
// OID_TCP_OFFLOAD_PARAMETERS (netvsc.md §3.6).
type OffloadParameters struct {
	// Header is written as given; the zero value means
	// OffloadParametersHeader(NVSPProtocolVersion61). Marshal emits
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
		h = OffloadParametersHeader(NVSPProtocolVersion61)
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

// NDIS_OFFLOAD revisions and sizes (netvsc.md §3.6).
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
	case nvspVersion >= NVSPProtocolVersion5:
		return NDISObjectHeader{NDISObjectTypeOffload, NDISOffloadRevision3, NDISOffloadSizeRev3}
	case nvspVersion >= NVSPProtocolVersion4:
		return NDISObjectHeader{NDISObjectTypeOffload, NDISOffloadRevision2, NDISOffloadSizeRev2}
	}
	return NDISObjectHeader{NDISObjectTypeOffload, NDISOffloadRevision1, NDISOffloadSizeRev1}
}

// NDIS_OFFLOAD checksum capability bits, for the ChecksumOffload flag
// fields (netvsc.md §3.6; DPDK ndis.h NDIS_TXCSUM_CAP_*/NDIS_RXCSUM_CAP_*).
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

// openvmm's LSOv2 limits, which a host simulator advertises (netvsc.md
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
// payload of TASK_OFFLOAD_CURRENT_CONFIG) (netvsc.md §3.6).
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

// HashInfo is an NDIS hash function and set of hash types: the
// hash_information of RSSParameters and the NBL_HASH_INFO PPI (netvsc.md
// §3.4, §3.6; DPDK ndis.h NDIS_HASH_*).
type HashInfo uint32

// HashInfo values.
const (
	NDISHashFunctionToeplitz HashInfo = 0x00000001
	NDISHashFunctionMask     HashInfo = 0x000000FF
	NDISHashTypeMask         HashInfo = 0x00FFFF00
	NDISHashIPv4             HashInfo = 0x00000100
	NDISHashTCPIPv4          HashInfo = 0x00000200
	NDISHashIPv6             HashInfo = 0x00000400
	NDISHashIPv6Ex           HashInfo = 0x00000800
	NDISHashTCPIPv6          HashInfo = 0x00001000
	NDISHashTCPIPv6Ex        HashInfo = 0x00002000
	NDISHashUDPIPv4          HashInfo = 0x00004000
	NDISHashUDPIPv6          HashInfo = 0x00008000
	NDISHashUDPIPv6Ex        HashInfo = 0x00010000
)

// Function returns the hash function bits.
func (h HashInfo) Function() HashInfo { return h & NDISHashFunctionMask }

// Types returns the hash type bits.
func (h HashInfo) Types() HashInfo { return h & NDISHashTypeMask }

// RSS capability flags, RSSCapabilities.Flags (netvsc.md §3.6; DPDK ndis.h
// NDIS_RSS_CAP_*). The hash-type bits here are not HashInfo's.
const (
	NDISRSSCapsHashToeplitz              uint32 = 0x00000001
	NDISRSSCapsHashTypeTCPIPv4           uint32 = 0x00000100
	NDISRSSCapsHashTypeTCPIPv6           uint32 = 0x00000200
	NDISRSSCapsHashTypeTCPIPv6Ex         uint32 = 0x00000400
	NDISRSSCapsMessageSignaledInterrupts uint32 = 0x01000000
	NDISRSSCapsClassificationAtISR       uint32 = 0x02000000
	NDISRSSCapsClassificationAtDPC       uint32 = 0x04000000
	NDISRSSCapsUsingMSIX                 uint32 = 0x08000000
)

// RSS capability revisions and sizes (DPDK ndis.h NDIS_RSS_CAPS_*).
const (
	NDISRSSCapsRevision1 = 1  // NDIS 6.0–6.20
	NDISRSSCapsRevision2 = 2  // NDIS 6.30
	NDISRSSCapsSizeRev1  = 16 // without NumIndirectionEntries
	NDISRSSCapsSizeRev2  = 18
)

// RSSCapabilitiesQueryHeader is the header a guest puts in the input
// buffer of an OID_GEN_RECEIVE_SCALE_CAPABILITIES query.
func RSSCapabilitiesQueryHeader() NDISObjectHeader {
	return NDISObjectHeader{NDISObjectTypeRSSCapabilities, NDISRSSCapsRevision2, NDISRSSCapsSizeRev2}
}

// RSSCapabilities is NDIS_RECEIVE_SCALE_CAPABILITIES (packed, 18 bytes at
// revision 2). openvmm answers Toeplitz|TCP_IPV4|TCP_IPV6, 1 interrupt
// message, NumReceiveQueues = max queues and 128 entries even with one
// queue; DPDK requires entries <= 128.
type RSSCapabilities struct {
	// Header is written as given; the zero value means revision 2, 18
	// bytes. Marshal emits Header.Size bytes.
	Header                NDISObjectHeader
	Flags                 uint32 // @4: NDISRSSCaps*
	NumInterruptMessages  uint32 // @8
	NumReceiveQueues      uint32 // @12
	NumIndirectionEntries uint16 // @16 (rev 2)
}

// Marshal appends the object (Header.Size bytes) to dst.
func (c RSSCapabilities) Marshal(dst []byte) []byte {
	h := c.Header
	if h == (NDISObjectHeader{}) {
		h = RSSCapabilitiesQueryHeader()
	}
	var b [NDISRSSCapsSizeRev2]byte
	h.put(b[:])
	le.PutUint32(b[4:], c.Flags)
	le.PutUint32(b[8:], c.NumInterruptMessages)
	le.PutUint32(b[12:], c.NumReceiveQueues)
	le.PutUint16(b[16:], c.NumIndirectionEntries)
	return appendObject(dst, b[:], int(h.Size))
}

// Unmarshal decodes the object at the start of b: type RSS_CAPABILITIES,
// revision from 1, Size >= 16 and within b. NumIndirectionEntries is 0
// when Size is below 18.
func (c *RSSCapabilities) Unmarshal(b []byte) error {
	h, err := checkObject(b, "NDIS_RECEIVE_SCALE_CAPABILITIES", NDISObjectTypeRSSCapabilities, NDISRSSCapsSizeRev1)
	if err != nil {
		return err
	}
	*c = RSSCapabilities{
		Header:               h,
		Flags:                le.Uint32(b[4:]),
		NumInterruptMessages: le.Uint32(b[8:]),
		NumReceiveQueues:     le.Uint32(b[12:]),
	}
	if h.Size >= NDISRSSCapsSizeRev2 {
		c.NumIndirectionEntries = le.Uint16(b[16:])
	}
	return nil
}

// RSS parameter flags, RSSParameters.Flags (netvsc.md §3.6).
const (
	NDISRSSParamFlagBaseCPUUnchanged  uint16 = 0x0001
	NDISRSSParamFlagHashInfoUnchanged uint16 = 0x0002
	NDISRSSParamFlagITableUnchanged   uint16 = 0x0004
	NDISRSSParamFlagHashKeyUnchanged  uint16 = 0x0008
	NDISRSSParamFlagDisableRSS        uint16 = 0x0010
)

// RSS parameter revisions, sizes and table limits (netvsc.md §3.6; DPDK
// ndis.h).
const (
	NDISRSSParamsRevision1 = 1
	NDISRSSParamsRevision2 = 2
	NDISRSSParamsSizeRev1  = 28 // without the processor-mask fields
	NDISRSSParamsSizeRev2  = 40
	// RSSIndirectionTableEntries is the table size both guests send
	// (ITAB_NUM, NDIS_HASH_INDCNT) and the most this package decodes.
	RSSIndirectionTableEntries = 128
	// RSSHashKeySize is the Toeplitz key size (NDIS_HASH_KEYSIZE_TOEPLITZ).
	RSSHashKeySize = 40
	// RSSParametersSize is the info buffer both guests send: the 40-byte
	// object, 128 table entries, then the key (592 bytes).
	RSSParametersSize = NDISRSSParamsSizeRev2 + 4*RSSIndirectionTableEntries + RSSHashKeySize
)

// RSSParameters is NDIS_RECEIVE_SCALE_PARAMETERS with its indirection
// table and hash key, set through OID_GEN_RECEIVE_SCALE_PARAMETERS. Table
// entries are channel (queue) indices. The zero value disables nothing
// and enables nothing; see NewRSSParameters.
type RSSParameters struct {
	// Header is as decoded; Marshal always writes the revision-2 header
	// {0x89, 2, 40}, the only form guests send.
	Header        NDISObjectHeader
	Flags         uint16   // @4: NDISRSSParamFlag*
	BaseCPUNumber uint16   // @6
	HashInfo      HashInfo // @8
	// TableLen entries of Table are used (table size @12 is 4×TableLen,
	// its offset @16 is 40 when encoded).
	TableLen int
	Table    [RSSIndirectionTableEntries]uint32
	// KeyLen bytes of Key are used (key size @20, offset @24 right after
	// the table when encoded).
	KeyLen                  int
	Key                     [RSSHashKeySize]byte
	ProcessorMasksOffset    uint32 // @28 (rev 2)
	NumProcessorMasks       uint32 // @32 (rev 2)
	ProcessorMasksEntrySize uint32 // @36 (rev 2)
}

// NewRSSParameters returns parameters enabling hash over table and key;
// entries past 128 and key bytes past 40 are dropped.
func NewRSSParameters(hash HashInfo, key []byte, table []uint32) RSSParameters {
	p := RSSParameters{HashInfo: hash}
	p.TableLen = copy(p.Table[:], table)
	p.KeyLen = copy(p.Key[:], key)
	return p
}

// Disabled reports whether the parameters turn RSS off: the DISABLE flag,
// or no hash function (openvmm).
func (p *RSSParameters) Disabled() bool {
	return p.Flags&NDISRSSParamFlagDisableRSS != 0 || p.HashInfo.Function() == 0
}

// Lookup returns the queue for a hash (IndirectionLookup over the table).
func (p *RSSParameters) Lookup(hash uint32) uint32 {
	return IndirectionLookup(p.Table[:p.tableLen()], hash)
}

func (p *RSSParameters) tableLen() int { return min(max(p.TableLen, 0), RSSIndirectionTableEntries) }
func (p *RSSParameters) keyLen() int   { return min(max(p.KeyLen, 0), RSSHashKeySize) }

// Size returns the encoded size: 40 + 4×TableLen + KeyLen.
func (p *RSSParameters) Size() int { return NDISRSSParamsSizeRev2 + 4*p.tableLen() + p.keyLen() }

// Marshal appends the object, table and key (Size bytes) to dst.
func (p RSSParameters) Marshal(dst []byte) []byte {
	n, k := p.tableLen(), p.keyLen()
	dst, b := grow(dst, p.Size())
	NDISObjectHeader{NDISObjectTypeRSSParameters, NDISRSSParamsRevision2, NDISRSSParamsSizeRev2}.put(b)
	le.PutUint16(b[4:], p.Flags)
	le.PutUint16(b[6:], p.BaseCPUNumber)
	le.PutUint32(b[8:], uint32(p.HashInfo))
	le.PutUint16(b[12:], uint16(4*n))
	le.PutUint32(b[16:], NDISRSSParamsSizeRev2)
	le.PutUint16(b[20:], uint16(k))
	le.PutUint32(b[24:], uint32(NDISRSSParamsSizeRev2+4*n))
	le.PutUint32(b[28:], p.ProcessorMasksOffset)
	le.PutUint32(b[32:], p.NumProcessorMasks)
	le.PutUint32(b[36:], p.ProcessorMasksEntrySize)
	for i, v := range p.Table[:n] {
		le.PutUint32(b[NDISRSSParamsSizeRev2+4*i:], v)
	}
	copy(b[NDISRSSParamsSizeRev2+4*n:], p.Key[:k])
	return dst
}

// Unmarshal decodes the object at the start of b, where b is the whole
// info buffer (table and key offsets are relative to the object's start):
// type RSS_PARAMETERS, revision from 1, Size >= 28 and within b; a
// non-empty table must be whole u32 entries, at most 128, inside b
// (KindRSSTable); a non-empty key at most 40 bytes, inside b (KindRSSKey).
// Whether the values are acceptable is Validate's business.
func (p *RSSParameters) Unmarshal(b []byte) error {
	const msg = "NDIS_RECEIVE_SCALE_PARAMETERS"
	h, err := checkObject(b, msg, NDISObjectTypeRSSParameters, NDISRSSParamsSizeRev1)
	if err != nil {
		return err
	}
	var q RSSParameters
	q.Header = h
	q.Flags = le.Uint16(b[4:])
	q.BaseCPUNumber = le.Uint16(b[6:])
	q.HashInfo = HashInfo(le.Uint32(b[8:]))
	tsize, toff := le.Uint16(b[12:]), le.Uint32(b[16:])
	ksize, koff := le.Uint16(b[20:]), le.Uint32(b[24:])
	if h.Size >= NDISRSSParamsSizeRev2 {
		q.ProcessorMasksOffset = le.Uint32(b[28:])
		q.NumProcessorMasks = le.Uint32(b[32:])
		q.ProcessorMasksEntrySize = le.Uint32(b[36:])
	}
	if tsize%4 != 0 || int(tsize)/4 > RSSIndirectionTableEntries {
		return perr(msg, KindRSSTable, "indirection_table_size", uint64(tsize))
	}
	if tsize > 0 {
		if uint64(tsize) > uint64(len(b)) || uint64(toff) > uint64(len(b))-uint64(tsize) {
			return perr(msg, KindRSSTable, "indirection_table_offset", uint64(toff))
		}
		q.TableLen = int(tsize) / 4
		for i := range q.TableLen {
			q.Table[i] = le.Uint32(b[int(toff)+4*i:])
		}
	}
	if ksize > RSSHashKeySize {
		return perr(msg, KindRSSKey, "hash_key_size", uint64(ksize))
	}
	if ksize > 0 {
		if uint64(ksize) > uint64(len(b)) || uint64(koff) > uint64(len(b))-uint64(ksize) {
			return perr(msg, KindRSSKey, "hash_key_offset", uint64(koff))
		}
		q.KeyLen = copy(q.Key[:], b[koff:uint64(koff)+uint64(ksize)])
	}
	*p = q
	return nil
}

// Validate applies openvmm's acceptance rules for an RSS set against a
// host with queues channels (netvsc.md §3.6): turning RSS off is always
// accepted; otherwise the key must be 40 bytes (KindRSSKey), the table
// non-empty (KindRSSTable) and every entry below queues (KindRSSEntry).
// Which hash types a host accepts (an Azure host refused UDP-only with
// RNDISStatusInvalidParameter) is the host's own policy.
func (p *RSSParameters) Validate(queues int) error {
	const msg = "NDIS_RECEIVE_SCALE_PARAMETERS"
	if p.Disabled() {
		return nil
	}
	if p.KeyLen != RSSHashKeySize {
		return perr(msg, KindRSSKey, "hash_key_size", uint64(max(p.KeyLen, 0)))
	}
	n := p.tableLen()
	if n == 0 {
		return perr(msg, KindRSSTable, "indirection_table_size", 0)
	}
	for _, e := range p.Table[:n] {
		if queues <= 0 || uint64(e) >= uint64(queues) {
			return perr(msg, KindRSSEntry, "indirection_table", uint64(e))
		}
	}
	return nil
}

// MicrosoftRSSKey returns Microsoft's default 40-byte Toeplitz key (the
// "Verifying the RSS Hash Calculation" key), which Linux netvsc uses.
func MicrosoftRSSKey() [RSSHashKeySize]byte {
	return [RSSHashKeySize]byte{
		0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2,
		0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
		0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4,
		0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
		0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
	}
}

// Toeplitz returns the Toeplitz hash of input under key: for every set bit
// of input (most significant bit of each byte first), XOR in the 32 key
// bits starting at that bit position. Key bits past the end of key count
// as 0; a full hash needs len(key) >= len(input)+4 (40 bytes covers a TCP
// over IPv6 tuple).
func Toeplitz(key, input []byte) uint32 {
	var w uint32 // the 32-bit key window at the current input bit
	for i := range 4 {
		w <<= 8
		if i < len(key) {
			w |= uint32(key[i])
		}
	}
	var h uint32
	for i, c := range input {
		var next byte
		if i+4 < len(key) {
			next = key[i+4]
		}
		for bit := 7; bit >= 0; bit-- {
			if c>>bit&1 != 0 {
				h ^= w
			}
			w = w<<1 | uint32(next>>bit&1)
		}
	}
	return h
}

// RSSHash hashes a flow the way NDIS RSS does: the input is the source
// address, the destination address and, with ports, the source and
// destination ports, all in network byte order. Two IPv4 (or IPv4-mapped)
// addresses hash as 4 bytes each, anything else as 16.
func RSSHash(key []byte, src, dst netip.Addr, srcPort, dstPort uint16, ports bool) uint32 {
	var in [36]byte
	n := 0
	if src.Unmap().Is4() && dst.Unmap().Is4() {
		s, d := src.Unmap().As4(), dst.Unmap().As4()
		n += copy(in[n:], s[:])
		n += copy(in[n:], d[:])
	} else {
		s, d := src.As16(), dst.As16()
		n += copy(in[n:], s[:])
		n += copy(in[n:], d[:])
	}
	if ports {
		in[n], in[n+1], in[n+2], in[n+3] = byte(srcPort>>8), byte(srcPort), byte(dstPort>>8), byte(dstPort)
		n += 4
	}
	return Toeplitz(key, in[:n])
}

// IndirectionLookup returns the entry a hash selects: table[hash mod
// len(table)], which for the power-of-two sizes NDIS uses (128 for RSS, 16
// for the send table) is the low-order bits of the hash. An empty table
// selects 0.
func IndirectionLookup(table []uint32, hash uint32) uint32 {
	if len(table) == 0 {
		return 0
	}
	return table[uint64(hash)%uint64(len(table))]
}
