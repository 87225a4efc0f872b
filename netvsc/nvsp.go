package netvsc

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// NVSP (Network VSP protocol) is the first layer inside a netvsc VMBus
// packet: a u32 message type at offset 0 followed by fixed fields
// (netvsc.md §2.4; Linux hyperv_net.h packed structs, DPDK hn_nvs.h).
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
// (netvsc.md §2.1, §7 host 1). So every Marshal here emits NVSPMessageSize
// (40) bytes, zero padded — a size every host and guest accepts and a
// multiple of 8, so the VMBus packet needs no extra padding — with two
// exceptions: SEND_RNDIS_PKT_COMPLETE is 8 bytes (header + status, exactly
// what Linux sends for every receive completion, which saves 32 ring bytes
// per completion on the receive hot path), and SEND_INDIRECTION_TABLE is
// 12 + 16×4 bytes. A host that wants openvmm's exact sizes truncates a
// Marshal result to NVSPMessageSizeFor(version). Decoders need only the
// bytes that hold the message's fields and ignore anything after them.

var le = binary.LittleEndian

// NVSP protocol versions (netvsc.md §2.1; Linux NVSP_PROTOCOL_VERSION_*,
// DPDK NVS_VERSION_*, openvmm make_version(major, minor) = major<<16|minor).
const (
	NVSPProtocolVersion1  uint32 = 0x00000002
	NVSPProtocolVersion2  uint32 = 0x00030002
	NVSPProtocolVersion4  uint32 = 0x00040000 // there is no NVSP 3
	NVSPProtocolVersion5  uint32 = 0x00050000
	NVSPProtocolVersion6  uint32 = 0x00060000
	NVSPProtocolVersion61 uint32 = 0x00060001
)

// NVSPVersions returns the versions a guest offers, in the order Linux and
// DPDK try them: highest first, one INIT{min=max=v} per version, stopping
// at the first SUCCESS (netvsc.md §2.5).
func NVSPVersions() []uint32 {
	return []uint32{NVSPProtocolVersion61, NVSPProtocolVersion6, NVSPProtocolVersion5,
		NVSPProtocolVersion4, NVSPProtocolVersion2, NVSPProtocolVersion1}
}

// NDIS versions announced in SEND_NDIS_VER (netvsc.md §2.5 step 3).
const (
	NDISVersion61  uint32 = 0x00060001 // NDIS 6.1, for NVSP <= 4
	NDISVersion630 uint32 = 0x0006001e // NDIS 6.30, for NVSP >= 5
)

// NDISVersionFor returns the NDIS version Linux and DPDK announce once
// nvspVersion has been negotiated: 6.30 above NVSP 4, otherwise 6.1.
func NDISVersionFor(nvspVersion uint32) uint32 {
	if nvspVersion > NVSPProtocolVersion4 {
		return NDISVersion630
	}
	return NDISVersion61
}

// NVSP message sizes (netvsc.md §2.1; openvmm protocol.rs PACKET_SIZE_*).
const (
	// NVSPMessageSize is the size every Marshal pads to: PACKET_SIZE_V61,
	// and Linux's sizeof(struct nvsp_message).
	NVSPMessageSize = 40
	// NVSPMessageSizeV1 is PACKET_SIZE_V1, what openvmm sends below 6.1.
	NVSPMessageSizeV1 = 28
	// NVSPRNDISCompleteSize is the size of SEND_RNDIS_PKT_COMPLETE as
	// Linux sends it and NVSPRNDISComplete.Marshal emits it.
	NVSPRNDISCompleteSize = 8
	// NVSPMaxResponseSize bounds any host message (DPDK NVS_RESPSIZE_MAX;
	// its comment puts the largest at 112 bytes).
	NVSPMaxResponseSize = 256
)

// NVSPMessageSizeFor returns the payload size openvmm uses for messages at
// a negotiated version: 40 at NVSP 6.1, 28 below.
func NVSPMessageSizeFor(version uint32) int {
	if version >= NVSPProtocolVersion61 {
		return NVSPMessageSize
	}
	return NVSPMessageSizeV1
}

// NVSPType is the message type, the u32 at offset 0 of every NVSP message.
type NVSPType uint32

// NVSP message types (netvsc.md §2.2; Linux anonymous enum, DPDK NVS_TYPE_*
// names in the comments).
const (
	NVSPMsgTypeInit                          NVSPType = 1   // NVS_TYPE_INIT; G->H, RC
	NVSPMsgTypeInitComplete                  NVSPType = 2   // NVS_TYPE_INIT_RESP; H->G completion
	NVSPMsg1TypeSendNDISVer                  NVSPType = 100 // NVS_TYPE_NDIS_INIT; G->H, no response
	NVSPMsg1TypeSendRecvBuf                  NVSPType = 101 // NVS_TYPE_RXBUF_CONN; G->H, RC
	NVSPMsg1TypeSendRecvBufComplete          NVSPType = 102 // NVS_TYPE_RXBUF_CONNRESP; H->G completion
	NVSPMsg1TypeRevokeRecvBuf                NVSPType = 103 // NVS_TYPE_RXBUF_DISCONN; G->H, no response
	NVSPMsg1TypeSendSendBuf                  NVSPType = 104 // NVS_TYPE_CHIM_CONN; G->H, RC
	NVSPMsg1TypeSendSendBufComplete          NVSPType = 105 // NVS_TYPE_CHIM_CONNRESP; H->G completion
	NVSPMsg1TypeRevokeSendBuf                NVSPType = 106 // NVS_TYPE_CHIM_DISCONN; G->H, no response
	NVSPMsg1TypeSendRNDISPkt                 NVSPType = 107 // NVS_TYPE_RNDIS; both directions
	NVSPMsg1TypeSendRNDISPktComplete         NVSPType = 108 // NVS_TYPE_RNDIS_ACK; both, in completions
	NVSPMsg2TypeSendNDISConfig               NVSPType = 125 // NVS_TYPE_NDIS_CONF; G->H, no response
	NVSPMsg2TypeAllocChimneyHandle           NVSPType = 126 // unused
	NVSPMsg2TypeAllocChimneyHandleComp       NVSPType = 127 // unused
	NVSPMsg4TypeSendVFAssociation            NVSPType = 128 // NVS_TYPE_VFASSOC_NOTE; H->G inband
	NVSPMsg4TypeSwitchDataPath               NVSPType = 129 // NVS_TYPE_SET_DATAPATH; G->H, and H->G inband
	NVSPMsg4TypeUplinkConnectStateDeprecated NVSPType = 130 // unused
	NVSPMsg5TypeOIDQueryEx                   NVSPType = 131 // openvmm answers NOT_SUPPORTED
	NVSPMsg5TypeOIDQueryExComp               NVSPType = 132
	NVSPMsg5TypeSubchannel                   NVSPType = 133 // NVS_TYPE_SUBCH_REQ = NVS_TYPE_SUBCH_RESP
	NVSPMsg5TypeSendIndirectionTable         NVSPType = 134 // NVS_TYPE_TXTBL_NOTE; H->G inband, no RC
	NVSPMsg6TypePDAPI                        NVSPType = 135 // PacketDirect; unused
	NVSPMsg6TypePDPostBatch                  NVSPType = 136 // PacketDirect; unused
)

var nvspTypeNames = map[NVSPType]string{
	NVSPMsgTypeInit:                          "INIT",
	NVSPMsgTypeInitComplete:                  "INIT_COMPLETE",
	NVSPMsg1TypeSendNDISVer:                  "SEND_NDIS_VER",
	NVSPMsg1TypeSendRecvBuf:                  "SEND_RECV_BUF",
	NVSPMsg1TypeSendRecvBufComplete:          "SEND_RECV_BUF_COMPLETE",
	NVSPMsg1TypeRevokeRecvBuf:                "REVOKE_RECV_BUF",
	NVSPMsg1TypeSendSendBuf:                  "SEND_SEND_BUF",
	NVSPMsg1TypeSendSendBufComplete:          "SEND_SEND_BUF_COMPLETE",
	NVSPMsg1TypeRevokeSendBuf:                "REVOKE_SEND_BUF",
	NVSPMsg1TypeSendRNDISPkt:                 "SEND_RNDIS_PKT",
	NVSPMsg1TypeSendRNDISPktComplete:         "SEND_RNDIS_PKT_COMPLETE",
	NVSPMsg2TypeSendNDISConfig:               "SEND_NDIS_CONFIG",
	NVSPMsg2TypeAllocChimneyHandle:           "ALLOC_CHIMNEY_HANDLE",
	NVSPMsg2TypeAllocChimneyHandleComp:       "ALLOC_CHIMNEY_HANDLE_COMP",
	NVSPMsg4TypeSendVFAssociation:            "SEND_VF_ASSOCIATION",
	NVSPMsg4TypeSwitchDataPath:               "SWITCH_DATA_PATH",
	NVSPMsg4TypeUplinkConnectStateDeprecated: "UPLINK_CONNECT_STATE_DEPRECATED",
	NVSPMsg5TypeOIDQueryEx:                   "OID_QUERY_EX",
	NVSPMsg5TypeOIDQueryExComp:               "OID_QUERY_EX_COMP",
	NVSPMsg5TypeSubchannel:                   "SUBCHANNEL",
	NVSPMsg5TypeSendIndirectionTable:         "SEND_INDIRECTION_TABLE",
	NVSPMsg6TypePDAPI:                        "PD_API",
	NVSPMsg6TypePDPostBatch:                  "PD_POST_BATCH",
}

// String returns the spec's name without the NVSP_MSGn_TYPE_ prefix.
func (t NVSPType) String() string {
	if name, ok := nvspTypeNames[t]; ok {
		return name
	}
	return fmt.Sprintf("nvsp type(%d)", uint32(t))
}

// NVSPTypeAllowed reports whether a host accepts message type t from the
// guest at negotiated version v, as openvmm's parse_packet gates it
// (netvsc.md §2.2): INIT always; 100–108 from NVSP 1; 125 from 2; 129 from
// 4; 131 and 133 from 5. Every other type from a guest is an error there.
func NVSPTypeAllowed(t NVSPType, v uint32) bool {
	switch {
	case t == NVSPMsgTypeInit:
		return true
	case t >= NVSPMsg1TypeSendNDISVer && t <= NVSPMsg1TypeSendRNDISPktComplete:
		return v >= NVSPProtocolVersion1
	case t == NVSPMsg2TypeSendNDISConfig:
		return v >= NVSPProtocolVersion2
	case t == NVSPMsg4TypeSwitchDataPath:
		return v >= NVSPProtocolVersion4
	case t == NVSPMsg5TypeOIDQueryEx || t == NVSPMsg5TypeSubchannel:
		return v >= NVSPProtocolVersion5
	}
	return false
}

// NVSPStatus is an NVSP completion status (netvsc.md §2.3). Linux and DPDK
// treat anything but NVSPStatSuccess as failure.
type NVSPStatus uint32

// NVSP status codes (Linux NVSP_STAT_*, openvmm Status).
const (
	NVSPStatNone                NVSPStatus = 0
	NVSPStatSuccess             NVSPStatus = 1
	NVSPStatFail                NVSPStatus = 2
	NVSPStatProtocolTooNew      NVSPStatus = 3
	NVSPStatProtocolTooOld      NVSPStatus = 4
	NVSPStatInvalidRNDISPkt     NVSPStatus = 5
	NVSPStatBusy                NVSPStatus = 6
	NVSPStatProtocolUnsupported NVSPStatus = 7 // openvmm: "not actually used"
)

var nvspStatusNames = map[NVSPStatus]string{
	NVSPStatNone:                "none",
	NVSPStatSuccess:             "success",
	NVSPStatFail:                "fail",
	NVSPStatProtocolTooNew:      "protocol too new",
	NVSPStatProtocolTooOld:      "protocol too old",
	NVSPStatInvalidRNDISPkt:     "invalid rndis packet",
	NVSPStatBusy:                "busy",
	NVSPStatProtocolUnsupported: "protocol unsupported",
}

func (s NVSPStatus) String() string {
	if name, ok := nvspStatusNames[s]; ok {
		return name
	}
	return fmt.Sprintf("nvsp status(%d)", uint32(s))
}

// Buffer ids and the invalid section index (netvsc.md §2.4, §2.6).
const (
	// NVSRxBufSig is the receive-buffer id both guests register (Linux
	// NETVSC_RECEIVE_BUFFER_ID, DPDK NVS_RXBUF_SIG). Transfer-page packets
	// carry it as their xfer_pageset_id.
	NVSRxBufSig uint16 = 0xcafe
	// NVSChimSig is DPDK's send-buffer id (NVS_CHIM_SIG).
	NVSChimSig uint16 = 0xface
	// NetvscSendBufferID is Linux's send-buffer id (NETVSC_SEND_BUFFER_ID).
	NetvscSendBufferID uint16 = 0
	// NVSChimIdxInvalid in SEND_RNDIS_PKT means "no send-buffer section":
	// the RNDIS message is in GPA ranges or transfer pages (DPDK
	// NVS_CHIM_IDX_INVALID, Linux NETVSC_INVALID_INDEX).
	NVSChimIdxInvalid uint32 = 0xffffffff
)

// RNDIS channel types in SEND_RNDIS_PKT (netvsc.md §2.4; RMC_DATA,
// RMC_CONTROL).
const (
	RMCData    uint32 = 0
	RMCControl uint32 = 1
)

// SEND_NDIS_CONFIG capability bits (netvsc.md §2.5; Linux
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

// Data paths in SWITCH_DATA_PATH (netvsc.md §2.4).
const (
	DataPathSynthetic uint32 = 0
	DataPathVF        uint32 = 1
)

// NVSPSubchannelAllocate is the only SUBCHANNEL operation (netvsc.md §2.4).
const NVSPSubchannelAllocate uint32 = 1

// Limits from netvsc.md §2.5, §2.6, §2.8.
const (
	// MinSectionSize is the smallest receive sub-allocation or send section
	// Linux accepts (NETVSC_MTU_MIN = ETH_MIN_MTU, 68).
	MinSectionSize = 68
	// VRSSSendTabSize is the number of send indirection table entries.
	VRSSSendTabSize = 16
	// NVSPMaxPacketsPerReceive is the most ranges in one transfer-page
	// packet (NVSP_MAX_PACKETS_PER_RECEIVE, openvmm RX_BATCH_SIZE).
	NVSPMaxPacketsPerReceive = 375
	// NVSPRSCMax is the most ranges with RSC (NVSP_RSC_MAX).
	NVSPRSCMax = 562
	// MaxSubchannels is the host's sub-channel limit per vNIC
	// (NETVSP_MAX_SUBCHANNELS_PER_VNIC).
	MaxSubchannels = 64
)

// Transaction ids openvmm uses for host-initiated inband packets that set
// completion-requested (netvsc.md §2.2, §2.9).
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
	// NVSPIndirectionTableSize is the size SEND_INDIRECTION_TABLE has with
	// its table right after the header (openvmm's layout).
	NVSPIndirectionTableSize = nvspTableHeaderLen + 4*VRSSSendTabSize
)

// NVSPMessageType returns the type of the NVSP message in b without
// checking the rest of it.
func NVSPMessageType(b []byte) (NVSPType, error) {
	if len(b) < 4 {
		return 0, perr("NVSP", KindShort, "type", uint64(len(b)))
	}
	return NVSPType(le.Uint32(b)), nil
}

// checkNVSP checks that b is a message of type want holding at least n
// bytes.
func checkNVSP(b []byte, want NVSPType, n int) error {
	if len(b) < 4 {
		return perr(want.String(), KindShort, "type", uint64(len(b)))
	}
	if t := NVSPType(le.Uint32(b)); t != want {
		return perr(want.String(), KindType, "type", uint64(t))
	}
	if len(b) < n {
		return perr(want.String(), KindShort, "length", uint64(len(b)))
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
func nvspHeader(dst []byte, t NVSPType, n int) ([]byte, []byte) {
	dst, b := grow(dst, n)
	le.PutUint32(b, uint32(t))
	return dst, b
}

// NVSPInit is INIT (1): the guest offers a protocol range. Linux and DPDK
// set Min = Max = the candidate version; openvmm accepts only when Min
// exactly equals a version it supports (netvsc.md §2.5).
type NVSPInit struct {
	MinVersion uint32 // @4
	MaxVersion uint32 // @8
}

// Marshal appends the 40-byte message to dst.
func (m NVSPInit) Marshal(dst []byte) []byte {
	dst, b := nvspHeader(dst, NVSPMsgTypeInit, NVSPMessageSize)
	le.PutUint32(b[4:], m.MinVersion)
	le.PutUint32(b[8:], m.MaxVersion)
	return dst
}

// Unmarshal decodes an INIT message.
func (m *NVSPInit) Unmarshal(b []byte) error {
	if err := checkNVSP(b, NVSPMsgTypeInit, nvspInitLen); err != nil {
		return err
	}
	m.MinVersion = le.Uint32(b[4:])
	m.MaxVersion = le.Uint32(b[8:])
	return nil
}

// NVSPInitComplete is INIT_COMPLETE (2), the host's answer to INIT.
// openvmm sends NegotiatedVersion 0xFFFFFFFF (2 when V1 is chosen) and
// MaxMDLChainLen 34 (netvsc.md §2.4).
type NVSPInitComplete struct {
	NegotiatedVersion uint32     // @4, deprecated
	MaxMDLChainLen    uint32     // @8
	Status            NVSPStatus // @12
}

// Marshal appends the 40-byte message to dst.
func (m NVSPInitComplete) Marshal(dst []byte) []byte {
	dst, b := nvspHeader(dst, NVSPMsgTypeInitComplete, NVSPMessageSize)
	le.PutUint32(b[4:], m.NegotiatedVersion)
	le.PutUint32(b[8:], m.MaxMDLChainLen)
	le.PutUint32(b[12:], uint32(m.Status))
	return dst
}

// Unmarshal decodes an INIT_COMPLETE message.
func (m *NVSPInitComplete) Unmarshal(b []byte) error {
	if err := checkNVSP(b, NVSPMsgTypeInitComplete, nvspInitCompleteLen); err != nil {
		return err
	}
	m.NegotiatedVersion = le.Uint32(b[4:])
	m.MaxMDLChainLen = le.Uint32(b[8:])
	m.Status = NVSPStatus(le.Uint32(b[12:]))
	return nil
}

// NVSPNDISVersion is SEND_NDIS_VER (100): the NDIS version the guest
// speaks, split into major and minor (see NDISVersionFor).
type NVSPNDISVersion struct {
	Major uint32 // @4
	Minor uint32 // @8
}

// NewNVSPNDISVersion splits an NDIS version such as NDISVersion630.
func NewNVSPNDISVersion(v uint32) NVSPNDISVersion {
	return NVSPNDISVersion{Major: v >> 16, Minor: v & 0xffff}
}

// Version joins Major and Minor.
func (m NVSPNDISVersion) Version() uint32 { return m.Major<<16 | m.Minor&0xffff }

// Marshal appends the 40-byte message to dst.
func (m NVSPNDISVersion) Marshal(dst []byte) []byte {
	dst, b := nvspHeader(dst, NVSPMsg1TypeSendNDISVer, NVSPMessageSize)
	le.PutUint32(b[4:], m.Major)
	le.PutUint32(b[8:], m.Minor)
	return dst
}

// Unmarshal decodes a SEND_NDIS_VER message.
func (m *NVSPNDISVersion) Unmarshal(b []byte) error {
	if err := checkNVSP(b, NVSPMsg1TypeSendNDISVer, nvspNDISVersionLen); err != nil {
		return err
	}
	m.Major = le.Uint32(b[4:])
	m.Minor = le.Uint32(b[8:])
	return nil
}

// NVSPNDISConfig is SEND_NDIS_CONFIG (125). MTU includes the 14-byte
// Ethernet header (Linux ndev->mtu + ETH_HLEN); Capabilities holds
// NDISConfigCap* bits. openvmm replaces an MTU outside 1514..9216 with
// 1514 (netvsc.md §2.4, §2.5).
type NVSPNDISConfig struct {
	MTU          uint32 // @4
	Capabilities uint64 // @12 (a reserved u32 sits at @8)
}

// Marshal appends the 40-byte message to dst.
func (m NVSPNDISConfig) Marshal(dst []byte) []byte {
	dst, b := nvspHeader(dst, NVSPMsg2TypeSendNDISConfig, NVSPMessageSize)
	le.PutUint32(b[4:], m.MTU)
	le.PutUint64(b[12:], m.Capabilities)
	return dst
}

// Unmarshal decodes a SEND_NDIS_CONFIG message.
func (m *NVSPNDISConfig) Unmarshal(b []byte) error {
	if err := checkNVSP(b, NVSPMsg2TypeSendNDISConfig, nvspNDISConfigLen); err != nil {
		return err
	}
	m.MTU = le.Uint32(b[4:])
	m.Capabilities = le.Uint64(b[12:])
	return nil
}

// NVSPRecvBuf is SEND_RECV_BUF (101): the guest registers its receive
// buffer's GPADL under ID (NVSRxBufSig).
type NVSPRecvBuf struct {
	GPADLHandle uint32 // @4
	ID          uint16 // @8
}

// Marshal appends the 40-byte message to dst.
func (m NVSPRecvBuf) Marshal(dst []byte) []byte {
	dst, b := nvspHeader(dst, NVSPMsg1TypeSendRecvBuf, NVSPMessageSize)
	le.PutUint32(b[4:], m.GPADLHandle)
	le.PutUint16(b[8:], m.ID)
	return dst
}

// Unmarshal decodes a SEND_RECV_BUF message.
func (m *NVSPRecvBuf) Unmarshal(b []byte) error {
	if err := checkNVSP(b, NVSPMsg1TypeSendRecvBuf, nvspSendBufLen); err != nil {
		return err
	}
	m.GPADLHandle = le.Uint32(b[4:])
	m.ID = le.Uint16(b[8:])
	return nil
}

// NVSPRecvBufSection is the one receive-buffer section the host announces:
// the buffer holds NumSubAllocs sub-allocations of SubAllocSize bytes from
// Offset. EndOffset is informational (openvmm: Offset + size × count).
type NVSPRecvBufSection struct {
	Offset       uint32 // @12
	SubAllocSize uint32 // @16
	NumSubAllocs uint32 // @20
	EndOffset    uint32 // @24
}

// NVSPRecvBufComplete is SEND_RECV_BUF_COMPLETE (102). Only one section
// fits in the message; guests require NumSections == 1 (netvsc.md §2.4).
type NVSPRecvBufComplete struct {
	Status      NVSPStatus // @4
	NumSections uint32     // @8
	Section     NVSPRecvBufSection
}

// Marshal appends the 40-byte message to dst.
func (m NVSPRecvBufComplete) Marshal(dst []byte) []byte {
	dst, b := nvspHeader(dst, NVSPMsg1TypeSendRecvBufComplete, NVSPMessageSize)
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
func (m *NVSPRecvBufComplete) Unmarshal(b []byte) error {
	if err := checkNVSP(b, NVSPMsg1TypeSendRecvBufComplete, nvspRecvBufCompleteLen); err != nil {
		return err
	}
	m.Status = NVSPStatus(le.Uint32(b[4:]))
	m.NumSections = le.Uint32(b[8:])
	m.Section.Offset = le.Uint32(b[12:])
	m.Section.SubAllocSize = le.Uint32(b[16:])
	m.Section.NumSubAllocs = le.Uint32(b[20:])
	m.Section.EndOffset = le.Uint32(b[24:])
	return nil
}

// Validate checks the announced section against a receive buffer of
// bufLen bytes, with the union of Linux's and DPDK's rules (netvsc.md §2.5
// step 4, §7 guest 3): exactly one section (KindSectionCount), at offset 0
// (KindSectionOffset), sub-allocations of at least MinSectionSize bytes
// (KindSectionSize), and at least one of them, all inside the buffer, with
// the end offset inside it too (KindSectionFit). The arithmetic cannot
// overflow. After it succeeds, sub-allocation i is the bytes
// [i×SubAllocSize, (i+1)×SubAllocSize) and a transfer-page transaction id
// is valid below NumSubAllocs.
func (m *NVSPRecvBufComplete) Validate(bufLen int) error {
	const msg = "SEND_RECV_BUF_COMPLETE"
	if m.NumSections != 1 {
		return perr(msg, KindSectionCount, "num_sections", uint64(m.NumSections))
	}
	s := m.Section
	if s.Offset != 0 {
		return perr(msg, KindSectionOffset, "offset", uint64(s.Offset))
	}
	if s.SubAllocSize < MinSectionSize {
		return perr(msg, KindSectionSize, "sub_alloc_size", uint64(s.SubAllocSize))
	}
	if bufLen < 0 {
		bufLen = 0
	}
	if s.NumSubAllocs == 0 {
		return perr(msg, KindSectionFit, "num_sub_allocs", 0)
	}
	// Both factors are below 2^32, so the product fits in a uint64.
	if total := uint64(s.SubAllocSize) * uint64(s.NumSubAllocs); total > uint64(bufLen) {
		return perr(msg, KindSectionFit, "num_sub_allocs", uint64(s.NumSubAllocs))
	}
	if uint64(s.EndOffset) > uint64(bufLen) {
		return perr(msg, KindSectionFit, "end_offset", uint64(s.EndOffset))
	}
	return nil
}

// NVSPRevokeRecvBuf is REVOKE_RECV_BUF (103); no response.
type NVSPRevokeRecvBuf struct {
	ID uint16 // @4
}

// Marshal appends the 40-byte message to dst.
func (m NVSPRevokeRecvBuf) Marshal(dst []byte) []byte {
	dst, b := nvspHeader(dst, NVSPMsg1TypeRevokeRecvBuf, NVSPMessageSize)
	le.PutUint16(b[4:], m.ID)
	return dst
}

// Unmarshal decodes a REVOKE_RECV_BUF message.
func (m *NVSPRevokeRecvBuf) Unmarshal(b []byte) error {
	if err := checkNVSP(b, NVSPMsg1TypeRevokeRecvBuf, nvspRevokeLen); err != nil {
		return err
	}
	m.ID = le.Uint16(b[4:])
	return nil
}

// NVSPSendBuf is SEND_SEND_BUF (104): the guest registers its send
// buffer's GPADL under ID (Linux 0, DPDK NVSChimSig).
type NVSPSendBuf struct {
	GPADLHandle uint32 // @4
	ID          uint16 // @8
}

// Marshal appends the 40-byte message to dst.
func (m NVSPSendBuf) Marshal(dst []byte) []byte {
	dst, b := nvspHeader(dst, NVSPMsg1TypeSendSendBuf, NVSPMessageSize)
	le.PutUint32(b[4:], m.GPADLHandle)
	le.PutUint16(b[8:], m.ID)
	return dst
}

// Unmarshal decodes a SEND_SEND_BUF message.
func (m *NVSPSendBuf) Unmarshal(b []byte) error {
	if err := checkNVSP(b, NVSPMsg1TypeSendSendBuf, nvspSendBufLen); err != nil {
		return err
	}
	m.GPADLHandle = le.Uint32(b[4:])
	m.ID = le.Uint16(b[8:])
	return nil
}

// NVSPSendBufComplete is SEND_SEND_BUF_COMPLETE (105): the host chooses
// the section size (openvmm and Azure: 6144).
type NVSPSendBufComplete struct {
	Status      NVSPStatus // @4
	SectionSize uint32     // @8
}

// Marshal appends the 40-byte message to dst.
func (m NVSPSendBufComplete) Marshal(dst []byte) []byte {
	dst, b := nvspHeader(dst, NVSPMsg1TypeSendSendBufComplete, NVSPMessageSize)
	le.PutUint32(b[4:], uint32(m.Status))
	le.PutUint32(b[8:], m.SectionSize)
	return dst
}

// Unmarshal decodes a SEND_SEND_BUF_COMPLETE message.
func (m *NVSPSendBufComplete) Unmarshal(b []byte) error {
	if err := checkNVSP(b, NVSPMsg1TypeSendSendBufComplete, nvspSendBufCompleteLen); err != nil {
		return err
	}
	m.Status = NVSPStatus(le.Uint32(b[4:]))
	m.SectionSize = le.Uint32(b[8:])
	return nil
}

// SectionCount checks the section size against a send buffer of bufLen
// bytes and returns how many sections it holds (netvsc.md §2.5: Linux
// requires >= 68, DPDK a non-zero multiple of 4; KindSectionSize) — at
// least one (KindSectionFit).
func (m *NVSPSendBufComplete) SectionCount(bufLen int) (int, error) {
	const msg = "SEND_SEND_BUF_COMPLETE"
	if m.SectionSize < MinSectionSize || m.SectionSize%4 != 0 {
		return 0, perr(msg, KindSectionSize, "section_size", uint64(m.SectionSize))
	}
	if bufLen < 0 || uint64(m.SectionSize) > uint64(bufLen) {
		return 0, perr(msg, KindSectionFit, "section_size", uint64(m.SectionSize))
	}
	return int(uint64(bufLen) / uint64(m.SectionSize)), nil
}

// NVSPRevokeSendBuf is REVOKE_SEND_BUF (106); no response.
type NVSPRevokeSendBuf struct {
	ID uint16 // @4
}

// Marshal appends the 40-byte message to dst.
func (m NVSPRevokeSendBuf) Marshal(dst []byte) []byte {
	dst, b := nvspHeader(dst, NVSPMsg1TypeRevokeSendBuf, NVSPMessageSize)
	le.PutUint16(b[4:], m.ID)
	return dst
}

// Unmarshal decodes a REVOKE_SEND_BUF message.
func (m *NVSPRevokeSendBuf) Unmarshal(b []byte) error {
	if err := checkNVSP(b, NVSPMsg1TypeRevokeSendBuf, nvspRevokeLen); err != nil {
		return err
	}
	m.ID = le.Uint16(b[4:])
	return nil
}

// NVSPRNDISPacket is SEND_RNDIS_PKT (107), which carries RNDIS messages in
// both directions (netvsc.md §2.6, §2.7). Guest to host: SectionIndex is
// the send-buffer section holding the RNDIS bytes and SectionSize the bytes
// used in it, or NVSChimIdxInvalid and 0 when they travel in GPA ranges.
// Host to guest (in a transfer-page packet): NVSChimIdxInvalid and 0.
type NVSPRNDISPacket struct {
	ChannelType  uint32 // @4: RMCData or RMCControl
	SectionIndex uint32 // @8
	SectionSize  uint32 // @12
}

// Marshal appends the 40-byte message to dst.
func (m NVSPRNDISPacket) Marshal(dst []byte) []byte {
	dst, b := nvspHeader(dst, NVSPMsg1TypeSendRNDISPkt, NVSPMessageSize)
	le.PutUint32(b[4:], m.ChannelType)
	le.PutUint32(b[8:], m.SectionIndex)
	le.PutUint32(b[12:], m.SectionSize)
	return dst
}

// Unmarshal decodes a SEND_RNDIS_PKT message. ChannelType is returned as
// read: guests and hosts dispatch on the RNDIS message type.
func (m *NVSPRNDISPacket) Unmarshal(b []byte) error {
	if err := checkNVSP(b, NVSPMsg1TypeSendRNDISPkt, nvspRNDISPacketLen); err != nil {
		return err
	}
	m.ChannelType = le.Uint32(b[4:])
	m.SectionIndex = le.Uint32(b[8:])
	m.SectionSize = le.Uint32(b[12:])
	return nil
}

// Section resolves the send-buffer bytes a guest's message names, for a
// host whose send buffer has count sections of sectionSize bytes. ok is
// false when SectionIndex is NVSChimIdxInvalid (the RNDIS bytes are all in
// GPA ranges). Otherwise the bytes are [off, off+n) of the send buffer; an
// index past the last section is KindSectionIndex and a size of 0 or more
// than a section is KindSectionSize. A mixed ("cp_partial") packet names
// a section and carries GPA ranges too: the host joins the section bytes
// and the ranges, in that order (netvsc.md §2.7).
func (m *NVSPRNDISPacket) Section(sectionSize, count uint32) (off, n int, ok bool, err error) {
	const msg = "SEND_RNDIS_PKT"
	if m.SectionIndex == NVSChimIdxInvalid {
		return 0, 0, false, nil
	}
	if m.SectionIndex >= count {
		return 0, 0, false, perr(msg, KindSectionIndex, "send_buf_section_index", uint64(m.SectionIndex))
	}
	if m.SectionSize == 0 || m.SectionSize > sectionSize {
		return 0, 0, false, perr(msg, KindSectionSize, "send_buf_section_size", uint64(m.SectionSize))
	}
	return int(uint64(m.SectionIndex) * uint64(sectionSize)), int(m.SectionSize), true, nil
}

// NVSPRNDISComplete is SEND_RNDIS_PKT_COMPLETE (108), sent in a completion
// packet with the transaction id of the SEND_RNDIS_PKT it answers: by the
// guest for every transfer-page packet (data and control), by the host for
// every guest send (netvsc.md §2.6, §2.7).
type NVSPRNDISComplete struct {
	Status NVSPStatus // @4
}

// Marshal appends the 8-byte message (NVSPRNDISCompleteSize) to dst.
func (m NVSPRNDISComplete) Marshal(dst []byte) []byte {
	dst, b := nvspHeader(dst, NVSPMsg1TypeSendRNDISPktComplete, NVSPRNDISCompleteSize)
	le.PutUint32(b[4:], uint32(m.Status))
	return dst
}

// Unmarshal decodes a SEND_RNDIS_PKT_COMPLETE message of 8 bytes or more.
func (m *NVSPRNDISComplete) Unmarshal(b []byte) error {
	if err := checkNVSP(b, NVSPMsg1TypeSendRNDISPktComplete, nvspRNDISCompleteLen); err != nil {
		return err
	}
	m.Status = NVSPStatus(le.Uint32(b[4:]))
	return nil
}
