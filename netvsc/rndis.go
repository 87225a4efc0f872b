package netvsc

import (
	"fmt"

	"github.com/vmbusd/vmbusd/netvsc/protoerr"
)

// RNDIS rides inside NVSP SEND_RNDIS_PKT: control messages (INITIALIZE,
// QUERY, SET, ... and their completions, INDICATE_STATUS) and PACKET
// messages carrying Ethernet frames (netvsc.md §3). Every message starts
// with {type u32 @0, MessageLength u32 @4}; MessageLength covers the whole
// message including padding. Offsets inside messages are relative to byte
// 8, the first byte after that header:
//
//	QUERY/SET        info_buf_offset   20 when the data follows the header (data @28)
//	QUERY_CMPLT      info_buf_offset   16 (openvmm)                        (data @24)
//	INDICATE_STATUS  status_buf_offset 12 (openvmm)                        (data @20)
//	PACKET           DataOffset, PerPacketInfoOffset >= 36                 (>= @44)
//
// Several messages may be packed back to back (a send section holding
// aggregated PACKET messages, §3.7): walk them with ParseRNDISHeader,
// stepping by MessageLength.

// RNDISType is the RNDIS message type at offset 0.
type RNDISType uint32

// RNDIS message types (netvsc.md §3.1; DPDK rndis.h REMOTE_NDIS_*_MSG,
// openvmm rndisprot.rs). A completion is the request's type | 0x80000000.
const (
	RNDISMsgPacket          RNDISType = 0x00000001
	RNDISMsgInitialize      RNDISType = 0x00000002
	RNDISMsgHalt            RNDISType = 0x00000003 // no completion
	RNDISMsgQuery           RNDISType = 0x00000004
	RNDISMsgSet             RNDISType = 0x00000005
	RNDISMsgReset           RNDISType = 0x00000006 // openvmm does not implement it
	RNDISMsgIndicateStatus  RNDISType = 0x00000007 // device to host only
	RNDISMsgKeepalive       RNDISType = 0x00000008
	RNDISMsgSetEx           RNDISType = 0x00000009 // openvmm does not implement it
	RNDISMsgInitializeCmplt RNDISType = 0x80000002
	RNDISMsgQueryCmplt      RNDISType = 0x80000004
	RNDISMsgSetCmplt        RNDISType = 0x80000005
	RNDISMsgResetCmplt      RNDISType = 0x80000006
	RNDISMsgKeepaliveCmplt  RNDISType = 0x80000008
	RNDISMsgSetExCmplt      RNDISType = 0x80000009
)

var rndisTypeNames = map[RNDISType]string{
	RNDISMsgPacket:          "PACKET_MSG",
	RNDISMsgInitialize:      "INITIALIZE_MSG",
	RNDISMsgHalt:            "HALT_MSG",
	RNDISMsgQuery:           "QUERY_MSG",
	RNDISMsgSet:             "SET_MSG",
	RNDISMsgReset:           "RESET_MSG",
	RNDISMsgIndicateStatus:  "INDICATE_STATUS_MSG",
	RNDISMsgKeepalive:       "KEEPALIVE_MSG",
	RNDISMsgSetEx:           "SET_EX_MSG",
	RNDISMsgInitializeCmplt: "INITIALIZE_CMPLT",
	RNDISMsgQueryCmplt:      "QUERY_CMPLT",
	RNDISMsgSetCmplt:        "SET_CMPLT",
	RNDISMsgResetCmplt:      "RESET_CMPLT",
	RNDISMsgKeepaliveCmplt:  "KEEPALIVE_CMPLT",
	RNDISMsgSetExCmplt:      "SET_EX_CMPLT",
}

// String returns the spec's name (PACKET_MSG, QUERY_CMPLT, ...).
func (t RNDISType) String() string {
	if name, ok := rndisTypeNames[t]; ok {
		return name
	}
	return fmt.Sprintf("rndis type(%#x)", uint32(t))
}

// RNDISStatus is an RNDIS/NDIS status: the status of a completion, or the
// indication in INDICATE_STATUS.
type RNDISStatus uint32

// RNDIS status codes (netvsc.md §3.2; DPDK rndis.h RNDIS_STATUS_*).
const (
	RNDISStatusSuccess        RNDISStatus = 0x00000000
	RNDISStatusPending        RNDISStatus = 0x00000103
	RNDISStatusBufferOverflow RNDISStatus = 0x80000005
	RNDISStatusFailure        RNDISStatus = 0xC0000001
	// RNDISStatusInvalidParameter is NT STATUS_INVALID_PARAMETER, what an
	// Azure host returned for RSS hash flags it did not accept.
	RNDISStatusInvalidParameter RNDISStatus = 0xC000000D
	RNDISStatusResources        RNDISStatus = 0xC000009A
	RNDISStatusNotSupported     RNDISStatus = 0xC00000BB
	RNDISStatusBadVersion       RNDISStatus = 0xC0010004
	RNDISStatusInvalidData      RNDISStatus = 0xC0010015
	RNDISStatusInvalidOID       RNDISStatus = 0xC0010017
)

// Status indications carried by INDICATE_STATUS (netvsc.md §2.11).
const (
	RNDISStatusMediaConnect    RNDISStatus = 0x4001000B
	RNDISStatusMediaDisconnect RNDISStatus = 0x4001000C
	// RNDISStatusLinkSpeedChange carries the new speed, u32 in 100 bps.
	RNDISStatusLinkSpeedChange RNDISStatus = 0x40010013
	RNDISStatusNetworkChange   RNDISStatus = 0x40010018
	// RNDISStatusTaskOffloadCurrentConfig carries the current NDIS_OFFLOAD.
	RNDISStatusTaskOffloadCurrentConfig RNDISStatus = 0x40020006
)

var rndisStatusNames = map[RNDISStatus]string{
	RNDISStatusSuccess:                  "success",
	RNDISStatusPending:                  "pending",
	RNDISStatusBufferOverflow:           "buffer overflow",
	RNDISStatusFailure:                  "failure",
	RNDISStatusInvalidParameter:         "invalid parameter",
	RNDISStatusResources:                "resources",
	RNDISStatusNotSupported:             "not supported",
	RNDISStatusBadVersion:               "bad version",
	RNDISStatusInvalidData:              "invalid data",
	RNDISStatusInvalidOID:               "invalid oid",
	RNDISStatusMediaConnect:             "media connect",
	RNDISStatusMediaDisconnect:          "media disconnect",
	RNDISStatusLinkSpeedChange:          "link speed change",
	RNDISStatusNetworkChange:            "network change",
	RNDISStatusTaskOffloadCurrentConfig: "task offload current config",
}

func (s RNDISStatus) String() string {
	if name, ok := rndisStatusNames[s]; ok {
		return name
	}
	return fmt.Sprintf("rndis status(%#x)", uint32(s))
}

// RNDIS INITIALIZE values (netvsc.md §3.2; DPDK rndis.h).
const (
	RNDISMajorVersion uint32 = 1
	RNDISMinorVersion uint32 = 0
	// RNDISGuestMaxTransferSize is the max_xfer_size Linux and DPDK send.
	RNDISGuestMaxTransferSize uint32 = 0x4000
	// RNDISDFConnectionless is the device flag hosts return.
	RNDISDFConnectionless uint32 = 1
	// RNDISMedium8023 is the 802.3 medium.
	RNDISMedium8023 uint32 = 0
	// Linux's defaults before the INITIALIZE completion arrives
	// (RNDIS_MAX_PKT_DEFAULT, RNDIS_PKT_ALIGN_DEFAULT).
	RNDISMaxPktDefault   = 8
	RNDISPktAlignDefault = 8
)

// Fixed sizes of the RNDIS messages (netvsc.md §3.2, §3.3).
const (
	RNDISHeaderSize           = 8 // type, MessageLength
	RNDISInitializeSize       = 24
	RNDISInitializeCmpltSize  = 52
	RNDISHaltSize             = 12
	RNDISQuerySize            = 28 // QUERY and SET, without the info buffer
	RNDISQueryCmpltSize       = 24 // without the info buffer
	RNDISSetCmpltSize         = 16
	RNDISResetSize            = 12
	RNDISResetCmpltSize       = 16
	RNDISIndicateStatusSize   = 20 // without the status buffer
	RNDISKeepaliveSize        = 12
	RNDISKeepaliveCmpltSize   = 16
	RNDISPacketHeaderSize     = 44
	rndisQueryInfoOffset      = RNDISQuerySize - RNDISHeaderSize          // 20
	rndisQueryCmpltInfoOffset = RNDISQueryCmpltSize - RNDISHeaderSize     // 16
	rndisStatusBufOffset      = RNDISIndicateStatusSize - RNDISHeaderSize // 12
	// rndisPacketOffsetMin is RNDIS_PACKET_MSG_OFFSET_MIN: the smallest
	// DataOffset or PerPacketInfoOffset, i.e. right after the header.
	rndisPacketOffsetMin = RNDISPacketHeaderSize - RNDISHeaderSize // 36
)

// ParseRNDISHeader returns the type and MessageLength of the RNDIS message
// at the start of b, checking that MessageLength covers at least the
// header and at most b (protoerr.KindLength). b[:n] is the message; b[n:] the next
// one, if any.
func ParseRNDISHeader(b []byte) (t RNDISType, n int, err error) {
	if len(b) < RNDISHeaderSize {
		return 0, 0, protoerr.New("RNDIS", protoerr.KindShort, "header", uint64(len(b)))
	}
	t = RNDISType(le.Uint32(b))
	ml := le.Uint32(b[4:])
	if ml < RNDISHeaderSize || uint64(ml) > uint64(len(b)) {
		return t, 0, protoerr.New(t.String(), protoerr.KindLength, "message_length", uint64(ml))
	}
	return t, int(ml), nil
}

// RNDISMessageType returns the type of the RNDIS message in b without
// checking the rest of it.
func RNDISMessageType(b []byte) (RNDISType, error) {
	if len(b) < 4 {
		return 0, protoerr.New("RNDIS", protoerr.KindShort, "type", uint64(len(b)))
	}
	return RNDISType(le.Uint32(b)), nil
}

// RNDISCompletionRequestID returns the request id of a completion
// (INITIALIZE, QUERY, SET, KEEPALIVE, SET_EX), so a guest can match it to
// its one outstanding request before decoding it. RESET_CMPLT has no
// request id (protoerr.KindType), nor does any non-completion.
func RNDISCompletionRequestID(b []byte) (RNDISType, uint32, error) {
	t, n, err := ParseRNDISHeader(b)
	if err != nil {
		return t, 0, err
	}
	switch t {
	case RNDISMsgInitializeCmplt, RNDISMsgQueryCmplt, RNDISMsgSetCmplt,
		RNDISMsgKeepaliveCmplt, RNDISMsgSetExCmplt:
	default:
		return t, 0, protoerr.New("RNDIS completion", protoerr.KindType, "type", uint64(t))
	}
	if n < 12 {
		return t, 0, protoerr.New(t.String(), protoerr.KindLength, "message_length", uint64(n))
	}
	return t, le.Uint32(b[8:]), nil
}

// checkRNDIS checks that b holds a message of type want whose
// MessageLength is at least size and fits in b. It returns that length.
func checkRNDIS(b []byte, want RNDISType, size int) (int, error) {
	if len(b) < RNDISHeaderSize {
		return 0, protoerr.New(want.String(), protoerr.KindShort, "header", uint64(len(b)))
	}
	if t := RNDISType(le.Uint32(b)); t != want {
		return 0, protoerr.New(want.String(), protoerr.KindType, "type", uint64(t))
	}
	if len(b) < size {
		return 0, protoerr.New(want.String(), protoerr.KindShort, "length", uint64(len(b)))
	}
	ml := le.Uint32(b[4:])
	if uint64(ml) < uint64(size) || uint64(ml) > uint64(len(b)) {
		return 0, protoerr.New(want.String(), protoerr.KindLength, "message_length", uint64(ml))
	}
	return int(ml), nil
}

// infoBuf returns the buffer of length l at offset off (relative to byte 8)
// in a message of msgLen bytes whose fixed fields after byte 8 take min
// bytes (minOff). A zero-length buffer is empty whatever its offset says, as hosts
// and guests ignore the offset then.
func infoBuf(b []byte, msgLen int, off, l, minOff uint32, msg, field string) ([]byte, error) {
	if l == 0 {
		return nil, nil
	}
	if off < minOff {
		return nil, protoerr.New(msg, protoerr.KindOffset, field+"_offset", uint64(off))
	}
	avail := uint64(msgLen - RNDISHeaderSize)
	if uint64(l) > avail || uint64(off) > avail-uint64(l) {
		return nil, protoerr.New(msg, protoerr.KindRange, field+"_length", uint64(l))
	}
	start := RNDISHeaderSize + int(off)
	return b[start : start+int(l) : start+int(l)], nil
}

// rndisHeader appends a zeroed message of n bytes with type t and
// MessageLength n.
func rndisHeader(dst []byte, t RNDISType, n int) ([]byte, []byte) {
	dst, b := grow(dst, n)
	le.PutUint32(b, uint32(t))
	le.PutUint32(b[4:], uint32(n))
	return dst, b
}

// RNDISInitialize is INITIALIZE_MSG, the first RNDIS request. Linux and
// DPDK send version 1.0 and MaxTransferSize 0x4000.
type RNDISInitialize struct {
	RequestID       uint32 // @8
	MajorVersion    uint32 // @12
	MinorVersion    uint32 // @16
	MaxTransferSize uint32 // @20
}

// Marshal appends the 24-byte message to dst.
func (m RNDISInitialize) Marshal(dst []byte) []byte {
	dst, b := rndisHeader(dst, RNDISMsgInitialize, RNDISInitializeSize)
	le.PutUint32(b[8:], m.RequestID)
	le.PutUint32(b[12:], m.MajorVersion)
	le.PutUint32(b[16:], m.MinorVersion)
	le.PutUint32(b[20:], m.MaxTransferSize)
	return dst
}

// Unmarshal decodes an INITIALIZE_MSG.
func (m *RNDISInitialize) Unmarshal(b []byte) error {
	if _, err := checkRNDIS(b, RNDISMsgInitialize, RNDISInitializeSize); err != nil {
		return err
	}
	m.RequestID = le.Uint32(b[8:])
	m.MajorVersion = le.Uint32(b[12:])
	m.MinorVersion = le.Uint32(b[16:])
	m.MaxTransferSize = le.Uint32(b[20:])
	return nil
}

// RNDISInitializeCmplt is INITIALIZE_CMPLT. Its packet limits bound TX
// aggregation: at most MaxPacketsPerMessage PACKET messages and
// MaxTransferSize bytes per send, each padded to 1<<PacketAlignmentFactor
// bytes (netvsc.md §3.7). openvmm returns 8, 0xEFFFFFFF and 3.
type RNDISInitializeCmplt struct {
	RequestID             uint32      // @8
	Status                RNDISStatus // @12
	MajorVersion          uint32      // @16
	MinorVersion          uint32      // @20
	DeviceFlags           uint32      // @24: RNDISDFConnectionless
	Medium                uint32      // @28: RNDISMedium8023
	MaxPacketsPerMessage  uint32      // @32
	MaxTransferSize       uint32      // @36
	PacketAlignmentFactor uint32      // @40: log2 of the alignment
	AFListOffset          uint32      // @44
	AFListSize            uint32      // @48
}

// Marshal appends the 52-byte message to dst.
func (m RNDISInitializeCmplt) Marshal(dst []byte) []byte {
	dst, b := rndisHeader(dst, RNDISMsgInitializeCmplt, RNDISInitializeCmpltSize)
	le.PutUint32(b[8:], m.RequestID)
	le.PutUint32(b[12:], uint32(m.Status))
	le.PutUint32(b[16:], m.MajorVersion)
	le.PutUint32(b[20:], m.MinorVersion)
	le.PutUint32(b[24:], m.DeviceFlags)
	le.PutUint32(b[28:], m.Medium)
	le.PutUint32(b[32:], m.MaxPacketsPerMessage)
	le.PutUint32(b[36:], m.MaxTransferSize)
	le.PutUint32(b[40:], m.PacketAlignmentFactor)
	le.PutUint32(b[44:], m.AFListOffset)
	le.PutUint32(b[48:], m.AFListSize)
	return dst
}

// Unmarshal decodes an INITIALIZE_CMPLT of 52 bytes or more (Linux's
// minimum).
func (m *RNDISInitializeCmplt) Unmarshal(b []byte) error {
	if _, err := checkRNDIS(b, RNDISMsgInitializeCmplt, RNDISInitializeCmpltSize); err != nil {
		return err
	}
	m.RequestID = le.Uint32(b[8:])
	m.Status = RNDISStatus(le.Uint32(b[12:]))
	m.MajorVersion = le.Uint32(b[16:])
	m.MinorVersion = le.Uint32(b[20:])
	m.DeviceFlags = le.Uint32(b[24:])
	m.Medium = le.Uint32(b[28:])
	m.MaxPacketsPerMessage = le.Uint32(b[32:])
	m.MaxTransferSize = le.Uint32(b[36:])
	m.PacketAlignmentFactor = le.Uint32(b[40:])
	m.AFListOffset = le.Uint32(b[44:])
	m.AFListSize = le.Uint32(b[48:])
	return nil
}

// PacketAlignment returns the TX packet alignment in bytes,
// 1<<PacketAlignmentFactor, clamped to [4, 4096]: DPDK uses at least 4,
// and a factor past 12 would make every packet a page.
func (m *RNDISInitializeCmplt) PacketAlignment() int {
	f := m.PacketAlignmentFactor
	if f < 2 {
		f = 2
	}
	if f > 12 {
		f = 12
	}
	return 1 << f
}

// RNDISHalt is HALT_MSG; the host sends no completion.
type RNDISHalt struct {
	RequestID uint32 // @8
}

// Marshal appends the 12-byte message to dst.
func (m RNDISHalt) Marshal(dst []byte) []byte {
	dst, b := rndisHeader(dst, RNDISMsgHalt, RNDISHaltSize)
	le.PutUint32(b[8:], m.RequestID)
	return dst
}

// Unmarshal decodes a HALT_MSG.
func (m *RNDISHalt) Unmarshal(b []byte) error {
	if _, err := checkRNDIS(b, RNDISMsgHalt, RNDISHaltSize); err != nil {
		return err
	}
	m.RequestID = le.Uint32(b[8:])
	return nil
}

// RNDISQuery is QUERY_MSG. Info is the input buffer (empty for most OIDs;
// an NDIS object header for OID_TCP_OFFLOAD_HARDWARE_CAPABILITIES and
// OID_GEN_RECEIVE_SCALE_CAPABILITIES). Marshal writes info_buf_offset 20
// (relative to byte 8), so Info starts at byte 28. After Unmarshal, Info
// aliases the decoded bytes.
type RNDISQuery struct {
	RequestID      uint32 // @8
	OID            OID    // @12
	Info           []byte // length @16, offset @20
	DeviceVcHandle uint32 // @24, 0
}

// Marshal appends the message (28 bytes + len(Info)) to dst.
func (m RNDISQuery) Marshal(dst []byte) []byte {
	return marshalQuerySet(dst, RNDISMsgQuery, m.RequestID, m.OID, m.Info, m.DeviceVcHandle)
}

// Unmarshal decodes a QUERY_MSG, checking that the info buffer lies after
// the fixed fields and inside MessageLength.
func (m *RNDISQuery) Unmarshal(b []byte) error {
	var err error
	m.RequestID, m.OID, m.Info, m.DeviceVcHandle, err = unmarshalQuerySet(b, RNDISMsgQuery)
	return err
}

// RNDISSet is SET_MSG; the layout is QUERY_MSG's, with Info holding the
// value to set.
type RNDISSet struct {
	RequestID      uint32 // @8
	OID            OID    // @12
	Info           []byte // length @16, offset @20
	DeviceVcHandle uint32 // @24, 0
}

// Marshal appends the message (28 bytes + len(Info)) to dst.
func (m RNDISSet) Marshal(dst []byte) []byte {
	return marshalQuerySet(dst, RNDISMsgSet, m.RequestID, m.OID, m.Info, m.DeviceVcHandle)
}

// Unmarshal decodes a SET_MSG.
func (m *RNDISSet) Unmarshal(b []byte) error {
	var err error
	m.RequestID, m.OID, m.Info, m.DeviceVcHandle, err = unmarshalQuerySet(b, RNDISMsgSet)
	return err
}

func marshalQuerySet(dst []byte, t RNDISType, id uint32, oid OID, info []byte, vc uint32) []byte {
	dst, b := rndisHeader(dst, t, RNDISQuerySize+len(info))
	le.PutUint32(b[8:], id)
	le.PutUint32(b[12:], uint32(oid))
	le.PutUint32(b[16:], uint32(len(info)))
	le.PutUint32(b[20:], rndisQueryInfoOffset)
	le.PutUint32(b[24:], vc)
	copy(b[RNDISQuerySize:], info)
	return dst
}

func unmarshalQuerySet(b []byte, t RNDISType) (id uint32, oid OID, info []byte, vc uint32, err error) {
	n, err := checkRNDIS(b, t, RNDISQuerySize)
	if err != nil {
		return 0, 0, nil, 0, err
	}
	info, err = infoBuf(b, n, le.Uint32(b[20:]), le.Uint32(b[16:]), rndisQueryInfoOffset, t.String(), "info_buf")
	if err != nil {
		return 0, 0, nil, 0, err
	}
	return le.Uint32(b[8:]), OID(le.Uint32(b[12:])), info, le.Uint32(b[24:]), nil
}

// RNDISQueryCmplt is QUERY_CMPLT. Marshal writes info_buf_offset 16
// (relative to byte 8, openvmm's value), so Info starts at byte 24. After
// Unmarshal, Info aliases the decoded bytes.
type RNDISQueryCmplt struct {
	RequestID uint32      // @8
	Status    RNDISStatus // @12
	Info      []byte      // length @16, offset @20
}

// Marshal appends the message (24 bytes + len(Info)) to dst.
func (m RNDISQueryCmplt) Marshal(dst []byte) []byte {
	dst, b := rndisHeader(dst, RNDISMsgQueryCmplt, RNDISQueryCmpltSize+len(m.Info))
	le.PutUint32(b[8:], m.RequestID)
	le.PutUint32(b[12:], uint32(m.Status))
	le.PutUint32(b[16:], uint32(len(m.Info)))
	le.PutUint32(b[20:], rndisQueryCmpltInfoOffset)
	copy(b[RNDISQueryCmpltSize:], m.Info)
	return dst
}

// Unmarshal decodes a QUERY_CMPLT, checking that the info buffer lies
// after the fixed fields (offset >= 16, Linux's check) and inside
// MessageLength.
func (m *RNDISQueryCmplt) Unmarshal(b []byte) error {
	n, err := checkRNDIS(b, RNDISMsgQueryCmplt, RNDISQueryCmpltSize)
	if err != nil {
		return err
	}
	info, err := infoBuf(b, n, le.Uint32(b[20:]), le.Uint32(b[16:]), rndisQueryCmpltInfoOffset, "QUERY_CMPLT", "info_buf")
	if err != nil {
		return err
	}
	m.RequestID = le.Uint32(b[8:])
	m.Status = RNDISStatus(le.Uint32(b[12:]))
	m.Info = info
	return nil
}

// RNDISSetCmplt is SET_CMPLT.
type RNDISSetCmplt struct {
	RequestID uint32      // @8
	Status    RNDISStatus // @12
}

// Marshal appends the 16-byte message to dst.
func (m RNDISSetCmplt) Marshal(dst []byte) []byte {
	dst, b := rndisHeader(dst, RNDISMsgSetCmplt, RNDISSetCmpltSize)
	le.PutUint32(b[8:], m.RequestID)
	le.PutUint32(b[12:], uint32(m.Status))
	return dst
}

// Unmarshal decodes a SET_CMPLT.
func (m *RNDISSetCmplt) Unmarshal(b []byte) error {
	if _, err := checkRNDIS(b, RNDISMsgSetCmplt, RNDISSetCmpltSize); err != nil {
		return err
	}
	m.RequestID = le.Uint32(b[8:])
	m.Status = RNDISStatus(le.Uint32(b[12:]))
	return nil
}

// RNDISReset is RESET_MSG. It has no request id (a reserved u32 @8).
type RNDISReset struct {
	Reserved uint32 // @8
}

// Marshal appends the 12-byte message to dst.
func (m RNDISReset) Marshal(dst []byte) []byte {
	dst, b := rndisHeader(dst, RNDISMsgReset, RNDISResetSize)
	le.PutUint32(b[8:], m.Reserved)
	return dst
}

// Unmarshal decodes a RESET_MSG.
func (m *RNDISReset) Unmarshal(b []byte) error {
	if _, err := checkRNDIS(b, RNDISMsgReset, RNDISResetSize); err != nil {
		return err
	}
	m.Reserved = le.Uint32(b[8:])
	return nil
}

// RNDISResetCmplt is RESET_CMPLT: status @8, no request id.
type RNDISResetCmplt struct {
	Status          RNDISStatus // @8
	AddressingReset uint32      // @12
}

// Marshal appends the 16-byte message to dst.
func (m RNDISResetCmplt) Marshal(dst []byte) []byte {
	dst, b := rndisHeader(dst, RNDISMsgResetCmplt, RNDISResetCmpltSize)
	le.PutUint32(b[8:], uint32(m.Status))
	le.PutUint32(b[12:], m.AddressingReset)
	return dst
}

// Unmarshal decodes a RESET_CMPLT.
func (m *RNDISResetCmplt) Unmarshal(b []byte) error {
	if _, err := checkRNDIS(b, RNDISMsgResetCmplt, RNDISResetCmpltSize); err != nil {
		return err
	}
	m.Status = RNDISStatus(le.Uint32(b[8:]))
	m.AddressingReset = le.Uint32(b[12:])
	return nil
}

// RNDISKeepalive is KEEPALIVE_MSG. Neither guest handles one from the host
// (Linux completes it with FAIL), and openvmm never sends it.
type RNDISKeepalive struct {
	RequestID uint32 // @8
}

// Marshal appends the 12-byte message to dst.
func (m RNDISKeepalive) Marshal(dst []byte) []byte {
	dst, b := rndisHeader(dst, RNDISMsgKeepalive, RNDISKeepaliveSize)
	le.PutUint32(b[8:], m.RequestID)
	return dst
}

// Unmarshal decodes a KEEPALIVE_MSG.
func (m *RNDISKeepalive) Unmarshal(b []byte) error {
	if _, err := checkRNDIS(b, RNDISMsgKeepalive, RNDISKeepaliveSize); err != nil {
		return err
	}
	m.RequestID = le.Uint32(b[8:])
	return nil
}

// RNDISKeepaliveCmplt is KEEPALIVE_CMPLT.
type RNDISKeepaliveCmplt struct {
	RequestID uint32      // @8
	Status    RNDISStatus // @12
}

// Marshal appends the 16-byte message to dst.
func (m RNDISKeepaliveCmplt) Marshal(dst []byte) []byte {
	dst, b := rndisHeader(dst, RNDISMsgKeepaliveCmplt, RNDISKeepaliveCmpltSize)
	le.PutUint32(b[8:], m.RequestID)
	le.PutUint32(b[12:], uint32(m.Status))
	return dst
}

// Unmarshal decodes a KEEPALIVE_CMPLT.
func (m *RNDISKeepaliveCmplt) Unmarshal(b []byte) error {
	if _, err := checkRNDIS(b, RNDISMsgKeepaliveCmplt, RNDISKeepaliveCmpltSize); err != nil {
		return err
	}
	m.RequestID = le.Uint32(b[8:])
	m.Status = RNDISStatus(le.Uint32(b[12:]))
	return nil
}

// RNDISIndicateStatus is INDICATE_STATUS_MSG, host to guest: Status is the
// indication (RNDISStatusMediaConnect, ...), Buf its payload (the new link
// speed for LINK_SPEED_CHANGE). Marshal writes status_buf_offset 12
// (relative to byte 8), so Buf starts at byte 20. After Unmarshal, Buf
// aliases the decoded bytes.
type RNDISIndicateStatus struct {
	Status RNDISStatus // @8
	Buf    []byte      // length @12, offset @16
}

// Marshal appends the message (20 bytes + len(Buf)) to dst.
func (m RNDISIndicateStatus) Marshal(dst []byte) []byte {
	dst, b := rndisHeader(dst, RNDISMsgIndicateStatus, RNDISIndicateStatusSize+len(m.Buf))
	le.PutUint32(b[8:], uint32(m.Status))
	le.PutUint32(b[12:], uint32(len(m.Buf)))
	le.PutUint32(b[16:], rndisStatusBufOffset)
	copy(b[RNDISIndicateStatusSize:], m.Buf)
	return dst
}

// Unmarshal decodes an INDICATE_STATUS_MSG, checking that the status
// buffer lies after the fixed fields and inside MessageLength.
func (m *RNDISIndicateStatus) Unmarshal(b []byte) error {
	n, err := checkRNDIS(b, RNDISMsgIndicateStatus, RNDISIndicateStatusSize)
	if err != nil {
		return err
	}
	buf, err := infoBuf(b, n, le.Uint32(b[16:]), le.Uint32(b[12:]), rndisStatusBufOffset, "INDICATE_STATUS_MSG", "status_buf")
	if err != nil {
		return err
	}
	m.Status = RNDISStatus(le.Uint32(b[8:]))
	m.Buf = buf
	return nil
}
