package nvsp

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/vmbusd/vmbusd/netvsc/protoerr"
)

// NVSP (Network VSP protocol) is the first layer inside a netvsc VMBus
// packet: a u32 message type at offset 0 followed by fixed fields
// (docs/protocol/netvsc.md §2.4; Linux hyperv_net.h packed structs, DPDK hn_nvs.h).
//
//	guest                                         host
//	INIT{v,v}                     (RC)  ->
//	                                    <-  COMP INIT_COMPLETE{status}
//	SEND_NDIS_CONFIG{mtu+14,caps}       ->  (v >= 2, no response)
//	SEND_NDIS_VER{6,30|1}               ->  (no response)
//	SEND_RECV_BUF{gpadl,0xCAFE}   (RC)  ->
//	                                    <-  COMP SEND_RECV_BUF_COMPLETE{status,1 section}
//	SEND_SEND_BUF{gpadl,id}       (RC)  ->
//	                                    <-  COMP SEND_SEND_BUF_COMPLETE{status,section size}
//	SEND_RNDIS_PKT{ch,idx,size}   (RC)  ->  RNDIS over a section or GPA ranges
//	                                    <-  COMP SEND_RNDIS_PKT_COMPLETE{status}
//	                                    <-  XFER SEND_RNDIS_PKT{ch,-1,0} + ranges
//	COMP SEND_RNDIS_PKT_COMPLETE        ->
//
// Sizes on the wire. Every field of every message fits in 28 bytes
// (PACKET_SIZE_V1) except the send indirection table. Linux always sends
// sizeof(struct nvsp_message) = 40 bytes and DPDK's request structs are 40
// bytes; openvmm sends 28 below NVSP 6.1 and 40 at 6.1, and accepts either
// (docs/protocol/netvsc.md §2.1, §7 host 1). So every Marshal here emits MessageSize
// (40) bytes, zero padded — a size every host and guest accepts and a
// multiple of 8, so the VMBus packet needs no extra padding — with two
// exceptions: SEND_RNDIS_PKT_COMPLETE is 8 bytes (header + status, exactly
// what Linux sends for every receive completion, which saves 32 ring bytes
// per completion on the receive hot path), and SEND_INDIRECTION_TABLE is
// 12 + 16×4 bytes. A host that wants openvmm's exact sizes truncates a
// Marshal result to MessageSizeFor(version). Decoders need only the
// bytes that hold the message's fields and ignore anything after them.

var le = binary.LittleEndian

// NVSP protocol versions (docs/protocol/netvsc.md §2.1; Linux NVSP_PROTOCOL_VERSION_*,
// DPDK NVS_VERSION_*, openvmm make_version(major, minor) = major<<16|minor).
const (
	Version1  uint32 = 0x00000002
	Version2  uint32 = 0x00030002
	Version4  uint32 = 0x00040000 // there is no NVSP 3
	Version5  uint32 = 0x00050000
	Version6  uint32 = 0x00060000
	Version61 uint32 = 0x00060001
)

// Versions returns the versions a guest offers, in the order Linux and
// DPDK try them: highest first, one INIT{min=max=v} per version, stopping
// at the first SUCCESS (docs/protocol/netvsc.md §2.5).
func Versions() []uint32 {
	return []uint32{Version61, Version6, Version5,
		Version4, Version2, Version1}
}

// NDIS versions announced in SEND_NDIS_VER (docs/protocol/netvsc.md §2.5 step 3).
const (
	NDISVersion61  uint32 = 0x00060001 // NDIS 6.1, for NVSP <= 4
	NDISVersion630 uint32 = 0x0006001e // NDIS 6.30, for NVSP >= 5
)

// NDISVersionFor returns the NDIS version Linux and DPDK announce once
// nvspVersion has been negotiated: 6.30 above NVSP 4, otherwise 6.1.
func NDISVersionFor(nvspVersion uint32) uint32 {
	if nvspVersion > Version4 {
		return NDISVersion630
	}
	return NDISVersion61
}

// NVSP message sizes (docs/protocol/netvsc.md §2.1; openvmm protocol.rs PACKET_SIZE_*).
const (
	// MessageSize is the size every Marshal pads to: PACKET_SIZE_V61,
	// and Linux's sizeof(struct nvsp_message).
	MessageSize = 40
	// MessageSizeV1 is PACKET_SIZE_V1, what openvmm sends below 6.1.
	MessageSizeV1 = 28
	// RNDISCompleteSize is the size of SEND_RNDIS_PKT_COMPLETE as
	// Linux sends it and RNDISComplete.Marshal emits it.
	RNDISCompleteSize = 8
	// MaxResponseSize bounds any host message (DPDK NVS_RESPSIZE_MAX;
	// its comment puts the largest at 112 bytes).
	MaxResponseSize = 256
)

// MessageSizeFor returns the payload size openvmm uses for messages at
// a negotiated version: 40 at NVSP 6.1, 28 below.
func MessageSizeFor(version uint32) int {
	if version >= Version61 {
		return MessageSize
	}
	return MessageSizeV1
}

// Type is the message type, the u32 at offset 0 of every NVSP message.
type Type uint32

// NVSP message types (docs/protocol/netvsc.md §2.2; Linux anonymous enum, DPDK NVS_TYPE_*
// names in the comments).
const (
	TypeInit                         Type = 1   // NVS_TYPE_INIT; G->H, RC
	TypeInitComplete                 Type = 2   // NVS_TYPE_INIT_RESP; H->G completion
	TypeSendNDISVer                  Type = 100 // NVS_TYPE_NDIS_INIT; G->H, no response
	TypeSendRecvBuf                  Type = 101 // NVS_TYPE_RXBUF_CONN; G->H, RC
	TypeSendRecvBufComplete          Type = 102 // NVS_TYPE_RXBUF_CONNRESP; H->G completion
	TypeRevokeRecvBuf                Type = 103 // NVS_TYPE_RXBUF_DISCONN; G->H, no response
	TypeSendSendBuf                  Type = 104 // NVS_TYPE_CHIM_CONN; G->H, RC
	TypeSendSendBufComplete          Type = 105 // NVS_TYPE_CHIM_CONNRESP; H->G completion
	TypeRevokeSendBuf                Type = 106 // NVS_TYPE_CHIM_DISCONN; G->H, no response
	TypeSendRNDISPkt                 Type = 107 // NVS_TYPE_RNDIS; both directions
	TypeSendRNDISPktComplete         Type = 108 // NVS_TYPE_RNDIS_ACK; both, in completions
	TypeSendNDISConfig               Type = 125 // NVS_TYPE_NDIS_CONF; G->H, no response
	TypeAllocChimneyHandle           Type = 126 // unused
	TypeAllocChimneyHandleComp       Type = 127 // unused
	TypeSendVFAssociation            Type = 128 // NVS_TYPE_VFASSOC_NOTE; H->G inband
	TypeSwitchDataPath               Type = 129 // NVS_TYPE_SET_DATAPATH; G->H, and H->G inband
	TypeUplinkConnectStateDeprecated Type = 130 // unused
	TypeOIDQueryEx                   Type = 131 // openvmm answers NOT_SUPPORTED
	TypeOIDQueryExComp               Type = 132
	TypeSubchannel                   Type = 133 // NVS_TYPE_SUBCH_REQ = NVS_TYPE_SUBCH_RESP
	TypeSendIndirectionTable         Type = 134 // NVS_TYPE_TXTBL_NOTE; H->G inband, no RC
	TypePDAPI                        Type = 135 // PacketDirect; unused
	TypePDPostBatch                  Type = 136 // PacketDirect; unused
)

var nvspTypeNames = map[Type]string{
	TypeInit:                         "INIT",
	TypeInitComplete:                 "INIT_COMPLETE",
	TypeSendNDISVer:                  "SEND_NDIS_VER",
	TypeSendRecvBuf:                  "SEND_RECV_BUF",
	TypeSendRecvBufComplete:          "SEND_RECV_BUF_COMPLETE",
	TypeRevokeRecvBuf:                "REVOKE_RECV_BUF",
	TypeSendSendBuf:                  "SEND_SEND_BUF",
	TypeSendSendBufComplete:          "SEND_SEND_BUF_COMPLETE",
	TypeRevokeSendBuf:                "REVOKE_SEND_BUF",
	TypeSendRNDISPkt:                 "SEND_RNDIS_PKT",
	TypeSendRNDISPktComplete:         "SEND_RNDIS_PKT_COMPLETE",
	TypeSendNDISConfig:               "SEND_NDIS_CONFIG",
	TypeAllocChimneyHandle:           "ALLOC_CHIMNEY_HANDLE",
	TypeAllocChimneyHandleComp:       "ALLOC_CHIMNEY_HANDLE_COMP",
	TypeSendVFAssociation:            "SEND_VF_ASSOCIATION",
	TypeSwitchDataPath:               "SWITCH_DATA_PATH",
	TypeUplinkConnectStateDeprecated: "UPLINK_CONNECT_STATE_DEPRECATED",
	TypeOIDQueryEx:                   "OID_QUERY_EX",
	TypeOIDQueryExComp:               "OID_QUERY_EX_COMP",
	TypeSubchannel:                   "SUBCHANNEL",
	TypeSendIndirectionTable:         "SEND_INDIRECTION_TABLE",
	TypePDAPI:                        "PD_API",
	TypePDPostBatch:                  "PD_POST_BATCH",
}

// String returns the spec's name without the NVSP_MSGn_TYPE_ prefix.
func (t Type) String() string {
	if name, ok := nvspTypeNames[t]; ok {
		return name
	}
	return fmt.Sprintf("nvsp type(%d)", uint32(t))
}

// TypeAllowed reports whether a host accepts message type t from the
// guest at negotiated version v, as openvmm's parse_packet gates it
// (docs/protocol/netvsc.md §2.2): INIT always; 100–108 from NVSP 1; 125 from 2; 129 from
// 4; 131 and 133 from 5. Every other type from a guest is an error there.
func TypeAllowed(t Type, v uint32) bool {
	switch {
	case t == TypeInit:
		return true
	case t >= TypeSendNDISVer && t <= TypeSendRNDISPktComplete:
		return v >= Version1
	case t == TypeSendNDISConfig:
		return v >= Version2
	case t == TypeSwitchDataPath:
		return v >= Version4
	case t == TypeOIDQueryEx || t == TypeSubchannel:
		return v >= Version5
	}
	return false
}

// Status is an NVSP completion status (docs/protocol/netvsc.md §2.3). Linux and DPDK
// treat anything but StatusSuccess as failure.
type Status uint32

// NVSP status codes (Linux NVSP_STAT_*, openvmm Status).
const (
	StatusNone                Status = 0
	StatusSuccess             Status = 1
	StatusFail                Status = 2
	StatusProtocolTooNew      Status = 3
	StatusProtocolTooOld      Status = 4
	StatusInvalidRNDISPkt     Status = 5
	StatusBusy                Status = 6
	StatusProtocolUnsupported Status = 7 // openvmm: "not actually used"
)

var nvspStatusNames = map[Status]string{
	StatusNone:                "none",
	StatusSuccess:             "success",
	StatusFail:                "fail",
	StatusProtocolTooNew:      "protocol too new",
	StatusProtocolTooOld:      "protocol too old",
	StatusInvalidRNDISPkt:     "invalid rndis packet",
	StatusBusy:                "busy",
	StatusProtocolUnsupported: "protocol unsupported",
}

func (s Status) String() string {
	if name, ok := nvspStatusNames[s]; ok {
		return name
	}
	return fmt.Sprintf("nvsp status(%d)", uint32(s))
}

// Buffer ids and the invalid section index (docs/protocol/netvsc.md §2.4, §2.6).
const (
	// RecvBufID is the receive-buffer id both guests register (Linux
	// NETVSC_RECEIVE_BUFFER_ID, DPDK NVS_RXBUF_SIG). Transfer-page packets
	// carry it as their xfer_pageset_id.
	RecvBufID uint16 = 0xcafe
	// SendBufIDDPDK is DPDK's send-buffer id (NVS_CHIM_SIG).
	SendBufIDDPDK uint16 = 0xface
	// SendBufIDLinux is Linux's send-buffer id (NETVSC_SEND_BUFFER_ID).
	SendBufIDLinux uint16 = 0
	// NoSection in SEND_RNDIS_PKT means "no send-buffer section":
	// the RNDIS message is in GPA ranges or transfer pages (DPDK
	// NVS_CHIM_IDX_INVALID, Linux NETVSC_INVALID_INDEX).
	NoSection uint32 = 0xffffffff
)

// RNDIS channel types in SEND_RNDIS_PKT (docs/protocol/netvsc.md §2.4; RMC_DATA,
// RMC_CONTROL).
const (
	RMCData    uint32 = 0
	RMCControl uint32 = 1
)

// SEND_NDIS_CONFIG capability bits (docs/protocol/netvsc.md §2.5; Linux
// nvsp_2_vsc_capability, openvmm NdisConfigCapabilities).
const (
	NDISConfigCapVMQ             uint64 = 0x01
	NDISConfigCapChimney         uint64 = 0x02
	NDISConfigCapSRIOV           uint64 = 0x04
	NDISConfigCapIEEE8021Q       uint64 = 0x08
	NDISConfigCapCorrelationID   uint64 = 0x10
	NDISConfigCapTeaming         uint64 = 0x20
	NDISConfigCapVirtualSubnetID uint64 = 0x40
	NDISConfigCapRSCOverVMBus    uint64 = 0x80
)

// Data paths in SWITCH_DATA_PATH (docs/protocol/netvsc.md §2.4).
const (
	DataPathSynthetic uint32 = 0
	DataPathVF        uint32 = 1
)

// SubchannelAllocate is the only SUBCHANNEL operation (docs/protocol/netvsc.md §2.4).
const SubchannelAllocate uint32 = 1

// Limits from docs/protocol/netvsc.md §2.5, §2.6, §2.8.
const (
	// MinSectionSize is the smallest receive sub-allocation or send section
	// Linux accepts (NETVSC_MTU_MIN = ETH_MIN_MTU, 68).
	MinSectionSize = 68
	// VRSSSendTabSize is the number of send indirection table entries.
	VRSSSendTabSize = 16
	// MaxPacketsPerReceive is the most ranges in one transfer-page
	// packet (NVSP_MAX_PACKETS_PER_RECEIVE, openvmm RX_BATCH_SIZE).
	MaxPacketsPerReceive = 375
	// RSCMax is the most ranges with RSC (NVSP_RSC_MAX).
	RSCMax = 562
	// MaxSubchannels is the host's sub-channel limit per vNIC
	// (NETVSP_MAX_SUBCHANNELS_PER_VNIC).
	MaxSubchannels = 64
)

// Transaction ids openvmm uses for host-initiated inband packets that set
// completion-requested (docs/protocol/netvsc.md §2.2, §2.9).
const (
	VFAssociationTransactionID  uint64 = 0x8000000000000000
	SwitchDataPathTransactionID uint64 = 0x8000000000000001
)

// Field extents: the bytes each message's fields occupy, which is all a
// decoder requires.
const (
	nvspInitLen            = 12
	nvspInitCompleteLen    = 16
	nvspNDISVersionLen     = 12
	nvspNDISConfigLen      = 20
	nvspSendBufLen         = 10
	nvspRecvBufCompleteLen = 28
	nvspRevokeLen          = 6
	nvspSendBufCompleteLen = 12
	nvspRNDISPacketLen     = 16
	nvspRNDISCompleteLen   = 8
	nvspVFAssociationLen   = 12
	nvspSwitchDataPathLen  = 8
	nvspSubchannelLen      = 12
	nvspTableHeaderLen     = 12
	// IndirectionTableSize is the size SEND_INDIRECTION_TABLE has with
	// its table right after the header (openvmm's layout).
	IndirectionTableSize = nvspTableHeaderLen + 4*VRSSSendTabSize
)

// MessageType returns the type of the NVSP message in b without
// checking the rest of it.
func MessageType(b []byte) (Type, error) {
	if len(b) < 4 {
		return 0, protoerr.New("NVSP", protoerr.KindShort, "type", uint64(len(b)))
	}
	return Type(le.Uint32(b)), nil
}

// checkNVSP checks that b is a message of type want holding at least n
// bytes.
func checkNVSP(b []byte, want Type, n int) error {
	if len(b) < 4 {
		return protoerr.New(want.String(), protoerr.KindShort, "type", uint64(len(b)))
	}
	if t := Type(le.Uint32(b)); t != want {
		return protoerr.New(want.String(), protoerr.KindType, "type", uint64(t))
	}
	if len(b) < n {
		return protoerr.New(want.String(), protoerr.KindShort, "length", uint64(len(b)))
	}
	return nil
}

// grow extends dst by n zero bytes and returns the result and the new
// bytes. It allocates only when dst lacks the capacity.
func grow(dst []byte, n int) ([]byte, []byte) {
	l := len(dst)
	dst = slices.Grow(dst, n)[:l+n]
	b := dst[l:]
	clear(b)
	return dst, b
}

// nvspHeader appends a zeroed message of size n with type t.
func nvspHeader(dst []byte, t Type, n int) ([]byte, []byte) {
	dst, b := grow(dst, n)
	le.PutUint32(b, uint32(t))
	return dst, b
}

// Init is INIT (1): the guest offers a protocol range. Linux and DPDK
// set Min = Max = the candidate version; openvmm accepts only when Min
// exactly equals a version it supports (docs/protocol/netvsc.md §2.5).
type Init struct {
	MinVersion uint32 // @4
	MaxVersion uint32 // @8
}

// Marshal appends the 40-byte message to dst.
func (m Init) Marshal(dst []byte) []byte {
	dst, b := nvspHeader(dst, TypeInit, MessageSize)
	le.PutUint32(b[4:], m.MinVersion)
	le.PutUint32(b[8:], m.MaxVersion)
	return dst
}

// Unmarshal decodes an INIT message.
func (m *Init) Unmarshal(b []byte) error {
	if err := checkNVSP(b, TypeInit, nvspInitLen); err != nil {
		return err
	}
	m.MinVersion = le.Uint32(b[4:])
	m.MaxVersion = le.Uint32(b[8:])
	return nil
}

// InitComplete is INIT_COMPLETE (2), the host's answer to INIT.
// openvmm sends NegotiatedVersion 0xFFFFFFFF (2 when V1 is chosen) and
// MaxMDLChainLen 34 (docs/protocol/netvsc.md §2.4).
type InitComplete struct {
	NegotiatedVersion uint32 // @4, deprecated
	MaxMDLChainLen    uint32 // @8
	Status            Status // @12
}

// Marshal appends the 40-byte message to dst.
func (m InitComplete) Marshal(dst []byte) []byte {
	dst, b := nvspHeader(dst, TypeInitComplete, MessageSize)
	le.PutUint32(b[4:], m.NegotiatedVersion)
	le.PutUint32(b[8:], m.MaxMDLChainLen)
	le.PutUint32(b[12:], uint32(m.Status))
	return dst
}

// Unmarshal decodes an INIT_COMPLETE message.
func (m *InitComplete) Unmarshal(b []byte) error {
	if err := checkNVSP(b, TypeInitComplete, nvspInitCompleteLen); err != nil {
		return err
	}
	m.NegotiatedVersion = le.Uint32(b[4:])
	m.MaxMDLChainLen = le.Uint32(b[8:])
	m.Status = Status(le.Uint32(b[12:]))
	return nil
}

// NDISVersion is SEND_NDIS_VER (100): the NDIS version the guest
// speaks, split into major and minor (see NDISVersionFor).
type NDISVersion struct {
	Major uint32 // @4
	Minor uint32 // @8
}

// NewNDISVersion splits an NDIS version such as NDISVersion630.
func NewNDISVersion(v uint32) NDISVersion {
	return NDISVersion{Major: v >> 16, Minor: v & 0xffff}
}

// Version joins Major and Minor.
func (m NDISVersion) Version() uint32 { return m.Major<<16 | m.Minor&0xffff }

// Marshal appends the 40-byte message to dst.
func (m NDISVersion) Marshal(dst []byte) []byte {
	dst, b := nvspHeader(dst, TypeSendNDISVer, MessageSize)
	le.PutUint32(b[4:], m.Major)
	le.PutUint32(b[8:], m.Minor)
	return dst
}

// Unmarshal decodes a SEND_NDIS_VER message.
func (m *NDISVersion) Unmarshal(b []byte) error {
	if err := checkNVSP(b, TypeSendNDISVer, nvspNDISVersionLen); err != nil {
		return err
	}
	m.Major = le.Uint32(b[4:])
	m.Minor = le.Uint32(b[8:])
	return nil
}

// NDISConfig is SEND_NDIS_CONFIG (125). MTU includes the 14-byte
// Ethernet header (Linux ndev->mtu + ETH_HLEN); Capabilities holds
// NDISConfigCap* bits. openvmm replaces an MTU outside 1514..9216 with
// 1514 (docs/protocol/netvsc.md §2.4, §2.5).
type NDISConfig struct {
	MTU          uint32 // @4
	Capabilities uint64 // @12 (a reserved u32 sits at @8)
}

// Marshal appends the 40-byte message to dst.
func (m NDISConfig) Marshal(dst []byte) []byte {
	dst, b := nvspHeader(dst, TypeSendNDISConfig, MessageSize)
	le.PutUint32(b[4:], m.MTU)
	le.PutUint64(b[12:], m.Capabilities)
	return dst
}

// Unmarshal decodes a SEND_NDIS_CONFIG message.
func (m *NDISConfig) Unmarshal(b []byte) error {
	if err := checkNVSP(b, TypeSendNDISConfig, nvspNDISConfigLen); err != nil {
		return err
	}
	m.MTU = le.Uint32(b[4:])
	m.Capabilities = le.Uint64(b[12:])
	return nil
}

// RecvBuf is SEND_RECV_BUF (101): the guest registers its receive
// buffer's GPADL under ID (RecvBufID).
type RecvBuf struct {
	GPADLHandle uint32 // @4
	ID          uint16 // @8
}

// Marshal appends the 40-byte message to dst.
func (m RecvBuf) Marshal(dst []byte) []byte {
	dst, b := nvspHeader(dst, TypeSendRecvBuf, MessageSize)
	le.PutUint32(b[4:], m.GPADLHandle)
	le.PutUint16(b[8:], m.ID)
	return dst
}

// Unmarshal decodes a SEND_RECV_BUF message.
func (m *RecvBuf) Unmarshal(b []byte) error {
	if err := checkNVSP(b, TypeSendRecvBuf, nvspSendBufLen); err != nil {
		return err
	}
	m.GPADLHandle = le.Uint32(b[4:])
	m.ID = le.Uint16(b[8:])
	return nil
}

// RecvBufSection is the one receive-buffer section the host announces:
// the buffer holds NumSubAllocs sub-allocations of SubAllocSize bytes from
// Offset. EndOffset is informational (openvmm: Offset + size × count).
type RecvBufSection struct {
	Offset       uint32 // @12
	SubAllocSize uint32 // @16
	NumSubAllocs uint32 // @20
	EndOffset    uint32 // @24
}

// RecvBufComplete is SEND_RECV_BUF_COMPLETE (102). Only one section
// fits in the message; guests require NumSections == 1 (docs/protocol/netvsc.md §2.4).
type RecvBufComplete struct {
	Status      Status // @4
	NumSections uint32 // @8
	Section     RecvBufSection
}

// Marshal appends the 40-byte message to dst.
func (m RecvBufComplete) Marshal(dst []byte) []byte {
	dst, b := nvspHeader(dst, TypeSendRecvBufComplete, MessageSize)
	le.PutUint32(b[4:], uint32(m.Status))
	le.PutUint32(b[8:], m.NumSections)
	le.PutUint32(b[12:], m.Section.Offset)
	le.PutUint32(b[16:], m.Section.SubAllocSize)
	le.PutUint32(b[20:], m.Section.NumSubAllocs)
	le.PutUint32(b[24:], m.Section.EndOffset)
	return dst
}

// Unmarshal decodes a SEND_RECV_BUF_COMPLETE message. It checks the layout
// only; call Validate once Status is SUCCESS.
func (m *RecvBufComplete) Unmarshal(b []byte) error {
	if err := checkNVSP(b, TypeSendRecvBufComplete, nvspRecvBufCompleteLen); err != nil {
		return err
	}
	m.Status = Status(le.Uint32(b[4:]))
	m.NumSections = le.Uint32(b[8:])
	m.Section.Offset = le.Uint32(b[12:])
	m.Section.SubAllocSize = le.Uint32(b[16:])
	m.Section.NumSubAllocs = le.Uint32(b[20:])
	m.Section.EndOffset = le.Uint32(b[24:])
	return nil
}

// Validate checks the announced section against a receive buffer of
// bufLen bytes, with the union of Linux's and DPDK's rules (docs/protocol/netvsc.md §2.5
// step 4, §7 guest 3): exactly one section (protoerr.KindSectionCount), at offset 0
// (protoerr.KindSectionOffset), sub-allocations of at least MinSectionSize bytes
// (protoerr.KindSectionSize), and at least one of them, all inside the buffer, with
// the end offset inside it too (protoerr.KindSectionFit). The arithmetic cannot
// overflow. After it succeeds, sub-allocation i is the bytes
// [i×SubAllocSize, (i+1)×SubAllocSize) and a transfer-page transaction id
// is valid below NumSubAllocs.
func (m *RecvBufComplete) Validate(bufLen int) error {
	const msg = "SEND_RECV_BUF_COMPLETE"
	if m.NumSections != 1 {
		return protoerr.New(msg, protoerr.KindSectionCount, "num_sections", uint64(m.NumSections))
	}
	s := m.Section
	if s.Offset != 0 {
		return protoerr.New(msg, protoerr.KindSectionOffset, "offset", uint64(s.Offset))
	}
	if s.SubAllocSize < MinSectionSize {
		return protoerr.New(msg, protoerr.KindSectionSize, "sub_alloc_size", uint64(s.SubAllocSize))
	}
	if bufLen < 0 {
		bufLen = 0
	}
	if s.NumSubAllocs == 0 {
		return protoerr.New(msg, protoerr.KindSectionFit, "num_sub_allocs", 0)
	}
	// Both factors are below 2^32, so the product fits in a uint64.
	if total := uint64(s.SubAllocSize) * uint64(s.NumSubAllocs); total > uint64(bufLen) {
		return protoerr.New(msg, protoerr.KindSectionFit, "num_sub_allocs", uint64(s.NumSubAllocs))
	}
	if uint64(s.EndOffset) > uint64(bufLen) {
		return protoerr.New(msg, protoerr.KindSectionFit, "end_offset", uint64(s.EndOffset))
	}
	return nil
}

// RevokeRecvBuf is REVOKE_RECV_BUF (103); no response.
type RevokeRecvBuf struct {
	ID uint16 // @4
}

// Marshal appends the 40-byte message to dst.
func (m RevokeRecvBuf) Marshal(dst []byte) []byte {
	dst, b := nvspHeader(dst, TypeRevokeRecvBuf, MessageSize)
	le.PutUint16(b[4:], m.ID)
	return dst
}

// Unmarshal decodes a REVOKE_RECV_BUF message.
func (m *RevokeRecvBuf) Unmarshal(b []byte) error {
	if err := checkNVSP(b, TypeRevokeRecvBuf, nvspRevokeLen); err != nil {
		return err
	}
	m.ID = le.Uint16(b[4:])
	return nil
}

// SendBuf is SEND_SEND_BUF (104): the guest registers its send
// buffer's GPADL under ID (Linux 0, DPDK SendBufIDDPDK).
type SendBuf struct {
	GPADLHandle uint32 // @4
	ID          uint16 // @8
}

// Marshal appends the 40-byte message to dst.
func (m SendBuf) Marshal(dst []byte) []byte {
	dst, b := nvspHeader(dst, TypeSendSendBuf, MessageSize)
	le.PutUint32(b[4:], m.GPADLHandle)
	le.PutUint16(b[8:], m.ID)
	return dst
}

// Unmarshal decodes a SEND_SEND_BUF message.
func (m *SendBuf) Unmarshal(b []byte) error {
	if err := checkNVSP(b, TypeSendSendBuf, nvspSendBufLen); err != nil {
		return err
	}
	m.GPADLHandle = le.Uint32(b[4:])
	m.ID = le.Uint16(b[8:])
	return nil
}

// SendBufComplete is SEND_SEND_BUF_COMPLETE (105): the host chooses
// the section size (openvmm and Azure: 6144).
type SendBufComplete struct {
	Status      Status // @4
	SectionSize uint32 // @8
}

// Marshal appends the 40-byte message to dst.
func (m SendBufComplete) Marshal(dst []byte) []byte {
	dst, b := nvspHeader(dst, TypeSendSendBufComplete, MessageSize)
	le.PutUint32(b[4:], uint32(m.Status))
	le.PutUint32(b[8:], m.SectionSize)
	return dst
}

// Unmarshal decodes a SEND_SEND_BUF_COMPLETE message.
func (m *SendBufComplete) Unmarshal(b []byte) error {
	if err := checkNVSP(b, TypeSendSendBufComplete, nvspSendBufCompleteLen); err != nil {
		return err
	}
	m.Status = Status(le.Uint32(b[4:]))
	m.SectionSize = le.Uint32(b[8:])
	return nil
}

// SectionCount checks the section size against a send buffer of bufLen
// bytes and returns how many sections it holds (docs/protocol/netvsc.md §2.5: Linux
// requires >= 68, DPDK a non-zero multiple of 4; protoerr.KindSectionSize) — at
// least one (protoerr.KindSectionFit).
func (m *SendBufComplete) SectionCount(bufLen int) (int, error) {
	const msg = "SEND_SEND_BUF_COMPLETE"
	if m.SectionSize < MinSectionSize || m.SectionSize%4 != 0 {
		return 0, protoerr.New(msg, protoerr.KindSectionSize, "section_size", uint64(m.SectionSize))
	}
	if bufLen < 0 || uint64(m.SectionSize) > uint64(bufLen) {
		return 0, protoerr.New(msg, protoerr.KindSectionFit, "section_size", uint64(m.SectionSize))
	}
	return int(uint64(bufLen) / uint64(m.SectionSize)), nil
}

// RevokeSendBuf is REVOKE_SEND_BUF (106); no response.
type RevokeSendBuf struct {
	ID uint16 // @4
}

// Marshal appends the 40-byte message to dst.
func (m RevokeSendBuf) Marshal(dst []byte) []byte {
	dst, b := nvspHeader(dst, TypeRevokeSendBuf, MessageSize)
	le.PutUint16(b[4:], m.ID)
	return dst
}

// Unmarshal decodes a REVOKE_SEND_BUF message.
func (m *RevokeSendBuf) Unmarshal(b []byte) error {
	if err := checkNVSP(b, TypeRevokeSendBuf, nvspRevokeLen); err != nil {
		return err
	}
	m.ID = le.Uint16(b[4:])
	return nil
}

// RNDISPacket is SEND_RNDIS_PKT (107), which carries RNDIS messages in
// both directions (docs/protocol/netvsc.md §2.6, §2.7). Guest to host: SectionIndex is
// the send-buffer section holding the RNDIS bytes and SectionSize the bytes
// used in it, or NoSection and 0 when they travel in GPA ranges.
// Host to guest (in a transfer-page packet): NoSection and 0.
type RNDISPacket struct {
	ChannelType  uint32 // @4: RMCData or RMCControl
	SectionIndex uint32 // @8
	SectionSize  uint32 // @12
}

// Marshal appends the 40-byte message to dst.
func (m RNDISPacket) Marshal(dst []byte) []byte {
	dst, b := nvspHeader(dst, TypeSendRNDISPkt, MessageSize)
	le.PutUint32(b[4:], m.ChannelType)
	le.PutUint32(b[8:], m.SectionIndex)
	le.PutUint32(b[12:], m.SectionSize)
	return dst
}

// Unmarshal decodes a SEND_RNDIS_PKT message. ChannelType is returned as
// read: guests and hosts dispatch on the RNDIS message type.
func (m *RNDISPacket) Unmarshal(b []byte) error {
	if err := checkNVSP(b, TypeSendRNDISPkt, nvspRNDISPacketLen); err != nil {
		return err
	}
	m.ChannelType = le.Uint32(b[4:])
	m.SectionIndex = le.Uint32(b[8:])
	m.SectionSize = le.Uint32(b[12:])
	return nil
}

// Section resolves the send-buffer bytes a guest's message names, for a
// host whose send buffer has count sections of sectionSize bytes. ok is
// false when SectionIndex is NoSection (the RNDIS bytes are all in
// GPA ranges). Otherwise the bytes are [off, off+n) of the send buffer; an
// index past the last section is protoerr.KindSectionIndex and a size of 0 or more
// than a section is protoerr.KindSectionSize. A mixed ("cp_partial") packet names
// a section and carries GPA ranges too: the host joins the section bytes
// and the ranges, in that order (docs/protocol/netvsc.md §2.7).
func (m *RNDISPacket) Section(sectionSize, count uint32) (off, n int, ok bool, err error) {
	const msg = "SEND_RNDIS_PKT"
	if m.SectionIndex == NoSection {
		return 0, 0, false, nil
	}
	if m.SectionIndex >= count {
		return 0, 0, false, protoerr.New(msg, protoerr.KindSectionIndex, "send_buf_section_index", uint64(m.SectionIndex))
	}
	if m.SectionSize == 0 || m.SectionSize > sectionSize {
		return 0, 0, false, protoerr.New(msg, protoerr.KindSectionSize, "send_buf_section_size", uint64(m.SectionSize))
	}
	return int(uint64(m.SectionIndex) * uint64(sectionSize)), int(m.SectionSize), true, nil
}

// RNDISComplete is SEND_RNDIS_PKT_COMPLETE (108), sent in a completion
// packet with the transaction id of the SEND_RNDIS_PKT it answers: by the
// guest for every transfer-page packet (data and control), by the host for
// every guest send (docs/protocol/netvsc.md §2.6, §2.7).
type RNDISComplete struct {
	Status Status // @4
}

// Marshal appends the 8-byte message (RNDISCompleteSize) to dst.
func (m RNDISComplete) Marshal(dst []byte) []byte {
	dst, b := nvspHeader(dst, TypeSendRNDISPktComplete, RNDISCompleteSize)
	le.PutUint32(b[4:], uint32(m.Status))
	return dst
}

// Unmarshal decodes a SEND_RNDIS_PKT_COMPLETE message of 8 bytes or more.
func (m *RNDISComplete) Unmarshal(b []byte) error {
	if err := checkNVSP(b, TypeSendRNDISPktComplete, nvspRNDISCompleteLen); err != nil {
		return err
	}
	m.Status = Status(le.Uint32(b[4:]))
	return nil
}
