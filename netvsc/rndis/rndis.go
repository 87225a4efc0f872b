package rndis

import (
	"fmt"

	"github.com/vmbusd/vmbusd/netvsc/protoerr"
)

// RNDIS rides inside NVSP SEND_RNDIS_PKT: control messages (INITIALIZE,
// QUERY, SET, ... and their completions, INDICATE_STATUS) and PACKET
// messages carrying Ethernet frames (docs/protocol/netvsc.md §3). Every message starts
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
// aggregated PACKET messages, §3.7): walk them with ParseHeader,
// stepping by MessageLength.

// Type is the RNDIS message type at offset 0.
type Type uint32

// RNDIS message types (docs/protocol/netvsc.md §3.1; DPDK rndis.h REMOTE_NDIS_*_MSG,
// openvmm rndisprot.rs). A completion is the request's type | 0x80000000.
const (
	TypePacket             Type = 0x00000001
	TypeInitialize         Type = 0x00000002
	TypeHalt               Type = 0x00000003 // no completion
	TypeQuery              Type = 0x00000004
	TypeSet                Type = 0x00000005
	TypeReset              Type = 0x00000006 // openvmm does not implement it
	TypeIndicateStatus     Type = 0x00000007 // device to host only
	TypeKeepalive          Type = 0x00000008
	TypeSetEx              Type = 0x00000009 // openvmm does not implement it
	TypeInitializeComplete Type = 0x80000002
	TypeQueryComplete      Type = 0x80000004
	TypeSetComplete        Type = 0x80000005
	TypeResetComplete      Type = 0x80000006
	TypeKeepaliveComplete  Type = 0x80000008
	TypeSetExComplete      Type = 0x80000009
)

var rndisTypeNames = map[Type]string{
	TypePacket:             "PACKET_MSG",
	TypeInitialize:         "INITIALIZE_MSG",
	TypeHalt:               "HALT_MSG",
	TypeQuery:              "QUERY_MSG",
	TypeSet:                "SET_MSG",
	TypeReset:              "RESET_MSG",
	TypeIndicateStatus:     "INDICATE_STATUS_MSG",
	TypeKeepalive:          "KEEPALIVE_MSG",
	TypeSetEx:              "SET_EX_MSG",
	TypeInitializeComplete: "INITIALIZE_CMPLT",
	TypeQueryComplete:      "QUERY_CMPLT",
	TypeSetComplete:        "SET_CMPLT",
	TypeResetComplete:      "RESET_CMPLT",
	TypeKeepaliveComplete:  "KEEPALIVE_CMPLT",
	TypeSetExComplete:      "SET_EX_CMPLT",
}

// String returns the spec's name (PACKET_MSG, QUERY_CMPLT, ...).
func (t Type) String() string {
	if name, ok := rndisTypeNames[t]; ok {
		return name
	}
	return fmt.Sprintf("rndis type(%#x)", uint32(t))
}

// Status is an RNDIS/NDIS status: the status of a completion, or the
// indication in INDICATE_STATUS.
type Status uint32

// RNDIS status codes (docs/protocol/netvsc.md §3.2; DPDK rndis.h RNDIS_STATUS_*).
const (
	StatusSuccess        Status = 0x00000000
	StatusPending        Status = 0x00000103
	StatusBufferOverflow Status = 0x80000005
	StatusFailure        Status = 0xC0000001
	// StatusInvalidParameter is NT STATUS_INVALID_PARAMETER, what an
	// Azure host returned for RSS hash flags it did not accept.
	StatusInvalidParameter Status = 0xC000000D
	StatusResources        Status = 0xC000009A
	StatusNotSupported     Status = 0xC00000BB
	StatusBadVersion       Status = 0xC0010004
	StatusInvalidData      Status = 0xC0010015
	StatusInvalidOID       Status = 0xC0010017
)

// Status indications carried by INDICATE_STATUS (docs/protocol/netvsc.md §2.11).
const (
	StatusMediaConnect    Status = 0x4001000B
	StatusMediaDisconnect Status = 0x4001000C
	// StatusLinkSpeedChange carries the new speed, u32 in 100 bps.
	StatusLinkSpeedChange Status = 0x40010013
	StatusNetworkChange   Status = 0x40010018
	// StatusTaskOffloadCurrentConfig carries the current NDIS_OFFLOAD.
	StatusTaskOffloadCurrentConfig Status = 0x40020006
)

var rndisStatusNames = map[Status]string{
	StatusSuccess:                  "success",
	StatusPending:                  "pending",
	StatusBufferOverflow:           "buffer overflow",
	StatusFailure:                  "failure",
	StatusInvalidParameter:         "invalid parameter",
	StatusResources:                "resources",
	StatusNotSupported:             "not supported",
	StatusBadVersion:               "bad version",
	StatusInvalidData:              "invalid data",
	StatusInvalidOID:               "invalid oid",
	StatusMediaConnect:             "media connect",
	StatusMediaDisconnect:          "media disconnect",
	StatusLinkSpeedChange:          "link speed change",
	StatusNetworkChange:            "network change",
	StatusTaskOffloadCurrentConfig: "task offload current config",
}

func (s Status) String() string {
	if name, ok := rndisStatusNames[s]; ok {
		return name
	}
	return fmt.Sprintf("rndis status(%#x)", uint32(s))
}

// RNDIS INITIALIZE values (docs/protocol/netvsc.md §3.2; DPDK rndis.h).
const (
	MajorVersion uint32 = 1
	MinorVersion uint32 = 0
	// GuestMaxTransferSize is the max_xfer_size Linux and DPDK send.
	GuestMaxTransferSize uint32 = 0x4000
	// DFConnectionless is the device flag hosts return.
	DFConnectionless uint32 = 1
	// Medium8023 is the 802.3 medium.
	Medium8023 uint32 = 0
	// Linux's defaults before the INITIALIZE completion arrives
	// (RNDIS_MAX_PKT_DEFAULT, RNDIS_PKT_ALIGN_DEFAULT).
	MaxPktDefault   = 8
	PktAlignDefault = 8
)

// Fixed sizes of the RNDIS messages (docs/protocol/netvsc.md §3.2, §3.3).
const (
	HeaderSize                = 8 // type, MessageLength
	InitializeSize            = 24
	InitializeCompleteSize    = 52
	HaltSize                  = 12
	QuerySize                 = 28 // QUERY and SET, without the info buffer
	QueryCompleteSize         = 24 // without the info buffer
	SetCompleteSize           = 16
	ResetSize                 = 12
	ResetCompleteSize         = 16
	IndicateStatusSize        = 20 // without the status buffer
	KeepaliveSize             = 12
	KeepaliveCompleteSize     = 16
	PacketHeaderSize          = 44
	rndisQueryInfoOffset      = QuerySize - HeaderSize          // 20
	rndisQueryCmpltInfoOffset = QueryCompleteSize - HeaderSize  // 16
	rndisStatusBufOffset      = IndicateStatusSize - HeaderSize // 12
	// PacketOffsetMin is RNDIS_PACKET_MSG_OFFSET_MIN: the smallest
	// DataOffset or PerPacketInfoOffset, i.e. right after the header.
	PacketOffsetMin = PacketHeaderSize - HeaderSize // 36
)

// ParseHeader returns the type and MessageLength of the RNDIS message
// at the start of b, checking that MessageLength covers at least the
// header and at most b (protoerr.KindLength). b[:n] is the message; b[n:] the next
// one, if any.
func ParseHeader(b []byte) (t Type, n int, err error) {
	if len(b) < HeaderSize {
		return 0, 0, protoerr.New("RNDIS", protoerr.KindShort, "header", uint64(len(b)))
	}
	t = Type(le.Uint32(b))
	ml := le.Uint32(b[4:])
	if ml < HeaderSize || uint64(ml) > uint64(len(b)) {
		return t, 0, protoerr.New(t.String(), protoerr.KindLength, "message_length", uint64(ml))
	}
	return t, int(ml), nil
}

// MessageType returns the type of the RNDIS message in b without
// checking the rest of it.
func MessageType(b []byte) (Type, error) {
	if len(b) < 4 {
		return 0, protoerr.New("RNDIS", protoerr.KindShort, "type", uint64(len(b)))
	}
	return Type(le.Uint32(b)), nil
}

// CompletionRequestID returns the request id of a completion
// (INITIALIZE, QUERY, SET, KEEPALIVE, SET_EX), so a guest can match it to
// its one outstanding request before decoding it. RESET_CMPLT has no
// request id (protoerr.KindType), nor does any non-completion.
func CompletionRequestID(b []byte) (Type, uint32, error) {
	t, n, err := ParseHeader(b)
	if err != nil {
		return t, 0, err
	}
	switch t {
	case TypeInitializeComplete, TypeQueryComplete, TypeSetComplete,
		TypeKeepaliveComplete, TypeSetExComplete:
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
func checkRNDIS(b []byte, want Type, size int) (int, error) {
	if len(b) < HeaderSize {
		return 0, protoerr.New(want.String(), protoerr.KindShort, "header", uint64(len(b)))
	}
	if t := Type(le.Uint32(b)); t != want {
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
	avail := uint64(msgLen - HeaderSize)
	if uint64(l) > avail || uint64(off) > avail-uint64(l) {
		return nil, protoerr.New(msg, protoerr.KindRange, field+"_length", uint64(l))
	}
	start := HeaderSize + int(off)
	return b[start : start+int(l) : start+int(l)], nil
}

// rndisHeader appends a zeroed message of n bytes with type t and
// MessageLength n.
func rndisHeader(dst []byte, t Type, n int) ([]byte, []byte) {
	dst, b := grow(dst, n)
	le.PutUint32(b, uint32(t))
	le.PutUint32(b[4:], uint32(n))
	return dst, b
}

// Initialize is INITIALIZE_MSG, the first RNDIS request. Linux and
// DPDK send version 1.0 and MaxTransferSize 0x4000.
type Initialize struct {
	RequestID       uint32 // @8
	MajorVersion    uint32 // @12
	MinorVersion    uint32 // @16
	MaxTransferSize uint32 // @20
}

// Marshal appends the 24-byte message to dst.
func (m Initialize) Marshal(dst []byte) []byte {
	dst, b := rndisHeader(dst, TypeInitialize, InitializeSize)
	le.PutUint32(b[8:], m.RequestID)
	le.PutUint32(b[12:], m.MajorVersion)
	le.PutUint32(b[16:], m.MinorVersion)
	le.PutUint32(b[20:], m.MaxTransferSize)
	return dst
}

// Unmarshal decodes an INITIALIZE_MSG.
func (m *Initialize) Unmarshal(b []byte) error {
	if _, err := checkRNDIS(b, TypeInitialize, InitializeSize); err != nil {
		return err
	}
	m.RequestID = le.Uint32(b[8:])
	m.MajorVersion = le.Uint32(b[12:])
	m.MinorVersion = le.Uint32(b[16:])
	m.MaxTransferSize = le.Uint32(b[20:])
	return nil
}

// InitializeComplete is INITIALIZE_CMPLT. Its packet limits bound TX
// aggregation: at most MaxPacketsPerMessage PACKET messages and
// MaxTransferSize bytes per send, each padded to 1<<PacketAlignmentFactor
// bytes (docs/protocol/netvsc.md §3.7). openvmm returns 8, 0xEFFFFFFF and 3.
type InitializeComplete struct {
	RequestID             uint32 // @8
	Status                Status // @12
	MajorVersion          uint32 // @16
	MinorVersion          uint32 // @20
	DeviceFlags           uint32 // @24: DFConnectionless
	Medium                uint32 // @28: Medium8023
	MaxPacketsPerMessage  uint32 // @32
	MaxTransferSize       uint32 // @36
	PacketAlignmentFactor uint32 // @40: log2 of the alignment
	AFListOffset          uint32 // @44
	AFListSize            uint32 // @48
}

// Marshal appends the 52-byte message to dst.
func (m InitializeComplete) Marshal(dst []byte) []byte {
	dst, b := rndisHeader(dst, TypeInitializeComplete, InitializeCompleteSize)
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
func (m *InitializeComplete) Unmarshal(b []byte) error {
	if _, err := checkRNDIS(b, TypeInitializeComplete, InitializeCompleteSize); err != nil {
		return err
	}
	m.RequestID = le.Uint32(b[8:])
	m.Status = Status(le.Uint32(b[12:]))
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
func (m *InitializeComplete) PacketAlignment() int {
	f := m.PacketAlignmentFactor
	if f < 2 {
		f = 2
	}
	if f > 12 {
		f = 12
	}
	return 1 << f
}

// Halt is HALT_MSG; the host sends no completion.
type Halt struct {
	RequestID uint32 // @8
}

// Marshal appends the 12-byte message to dst.
func (m Halt) Marshal(dst []byte) []byte {
	dst, b := rndisHeader(dst, TypeHalt, HaltSize)
	le.PutUint32(b[8:], m.RequestID)
	return dst
}

// Unmarshal decodes a HALT_MSG.
func (m *Halt) Unmarshal(b []byte) error {
	if _, err := checkRNDIS(b, TypeHalt, HaltSize); err != nil {
		return err
	}
	m.RequestID = le.Uint32(b[8:])
	return nil
}

// Query is QUERY_MSG. Info is the input buffer (empty for most OIDs;
// an NDIS object header for OID_TCP_OFFLOAD_HARDWARE_CAPABILITIES and
// OID_GEN_RECEIVE_SCALE_CAPABILITIES). Marshal writes info_buf_offset 20
// (relative to byte 8), so Info starts at byte 28. After Unmarshal, Info
// aliases the decoded bytes.
type Query struct {
	RequestID      uint32 // @8
	OID            OID    // @12
	Info           []byte // length @16, offset @20
	DeviceVcHandle uint32 // @24, 0
}

// Marshal appends the message (28 bytes + len(Info)) to dst.
func (m Query) Marshal(dst []byte) []byte {
	return marshalQuerySet(dst, TypeQuery, m.RequestID, m.OID, m.Info, m.DeviceVcHandle)
}

// Unmarshal decodes a QUERY_MSG, checking that the info buffer lies after
// the fixed fields and inside MessageLength.
func (m *Query) Unmarshal(b []byte) error {
	var err error
	m.RequestID, m.OID, m.Info, m.DeviceVcHandle, err = unmarshalQuerySet(b, TypeQuery)
	return err
}

// Set is SET_MSG; the layout is QUERY_MSG's, with Info holding the
// value to set.
type Set struct {
	RequestID      uint32 // @8
	OID            OID    // @12
	Info           []byte // length @16, offset @20
	DeviceVcHandle uint32 // @24, 0
}

// Marshal appends the message (28 bytes + len(Info)) to dst.
func (m Set) Marshal(dst []byte) []byte {
	return marshalQuerySet(dst, TypeSet, m.RequestID, m.OID, m.Info, m.DeviceVcHandle)
}

// Unmarshal decodes a SET_MSG.
func (m *Set) Unmarshal(b []byte) error {
	var err error
	m.RequestID, m.OID, m.Info, m.DeviceVcHandle, err = unmarshalQuerySet(b, TypeSet)
	return err
}

func marshalQuerySet(dst []byte, t Type, id uint32, oid OID, info []byte, vc uint32) []byte {
	dst, b := rndisHeader(dst, t, QuerySize+len(info))
	le.PutUint32(b[8:], id)
	le.PutUint32(b[12:], uint32(oid))
	le.PutUint32(b[16:], uint32(len(info)))
	le.PutUint32(b[20:], rndisQueryInfoOffset)
	le.PutUint32(b[24:], vc)
	copy(b[QuerySize:], info)
	return dst
}

func unmarshalQuerySet(b []byte, t Type) (id uint32, oid OID, info []byte, vc uint32, err error) {
	n, err := checkRNDIS(b, t, QuerySize)
	if err != nil {
		return 0, 0, nil, 0, err
	}
	info, err = infoBuf(b, n, le.Uint32(b[20:]), le.Uint32(b[16:]), rndisQueryInfoOffset, t.String(), "info_buf")
	if err != nil {
		return 0, 0, nil, 0, err
	}
	return le.Uint32(b[8:]), OID(le.Uint32(b[12:])), info, le.Uint32(b[24:]), nil
}

// QueryComplete is QUERY_CMPLT. Marshal writes info_buf_offset 16
// (relative to byte 8, openvmm's value), so Info starts at byte 24. After
// Unmarshal, Info aliases the decoded bytes.
type QueryComplete struct {
	RequestID uint32 // @8
	Status    Status // @12
	Info      []byte // length @16, offset @20
}

// Marshal appends the message (24 bytes + len(Info)) to dst.
func (m QueryComplete) Marshal(dst []byte) []byte {
	dst, b := rndisHeader(dst, TypeQueryComplete, QueryCompleteSize+len(m.Info))
	le.PutUint32(b[8:], m.RequestID)
	le.PutUint32(b[12:], uint32(m.Status))
	le.PutUint32(b[16:], uint32(len(m.Info)))
	le.PutUint32(b[20:], rndisQueryCmpltInfoOffset)
	copy(b[QueryCompleteSize:], m.Info)
	return dst
}

// Unmarshal decodes a QUERY_CMPLT, checking that the info buffer lies
// after the fixed fields (offset >= 16, Linux's check) and inside
// MessageLength.
func (m *QueryComplete) Unmarshal(b []byte) error {
	n, err := checkRNDIS(b, TypeQueryComplete, QueryCompleteSize)
	if err != nil {
		return err
	}
	info, err := infoBuf(b, n, le.Uint32(b[20:]), le.Uint32(b[16:]), rndisQueryCmpltInfoOffset, "QUERY_CMPLT", "info_buf")
	if err != nil {
		return err
	}
	m.RequestID = le.Uint32(b[8:])
	m.Status = Status(le.Uint32(b[12:]))
	m.Info = info
	return nil
}

// SetComplete is SET_CMPLT.
type SetComplete struct {
	RequestID uint32 // @8
	Status    Status // @12
}

// Marshal appends the 16-byte message to dst.
func (m SetComplete) Marshal(dst []byte) []byte {
	dst, b := rndisHeader(dst, TypeSetComplete, SetCompleteSize)
	le.PutUint32(b[8:], m.RequestID)
	le.PutUint32(b[12:], uint32(m.Status))
	return dst
}

// Unmarshal decodes a SET_CMPLT.
func (m *SetComplete) Unmarshal(b []byte) error {
	if _, err := checkRNDIS(b, TypeSetComplete, SetCompleteSize); err != nil {
		return err
	}
	m.RequestID = le.Uint32(b[8:])
	m.Status = Status(le.Uint32(b[12:]))
	return nil
}

// Reset is RESET_MSG. It has no request id (a reserved u32 @8).
type Reset struct {
	Reserved uint32 // @8
}

// Marshal appends the 12-byte message to dst.
func (m Reset) Marshal(dst []byte) []byte {
	dst, b := rndisHeader(dst, TypeReset, ResetSize)
	le.PutUint32(b[8:], m.Reserved)
	return dst
}

// Unmarshal decodes a RESET_MSG.
func (m *Reset) Unmarshal(b []byte) error {
	if _, err := checkRNDIS(b, TypeReset, ResetSize); err != nil {
		return err
	}
	m.Reserved = le.Uint32(b[8:])
	return nil
}

// ResetComplete is RESET_CMPLT: status @8, no request id.
type ResetComplete struct {
	Status          Status // @8
	AddressingReset uint32 // @12
}

// Marshal appends the 16-byte message to dst.
func (m ResetComplete) Marshal(dst []byte) []byte {
	dst, b := rndisHeader(dst, TypeResetComplete, ResetCompleteSize)
	le.PutUint32(b[8:], uint32(m.Status))
	le.PutUint32(b[12:], m.AddressingReset)
	return dst
}

// Unmarshal decodes a RESET_CMPLT.
func (m *ResetComplete) Unmarshal(b []byte) error {
	if _, err := checkRNDIS(b, TypeResetComplete, ResetCompleteSize); err != nil {
		return err
	}
	m.Status = Status(le.Uint32(b[8:]))
	m.AddressingReset = le.Uint32(b[12:])
	return nil
}

// Keepalive is KEEPALIVE_MSG. Neither guest handles one from the host
// (Linux completes it with FAIL), and openvmm never sends it.
type Keepalive struct {
	RequestID uint32 // @8
}

// Marshal appends the 12-byte message to dst.
func (m Keepalive) Marshal(dst []byte) []byte {
	dst, b := rndisHeader(dst, TypeKeepalive, KeepaliveSize)
	le.PutUint32(b[8:], m.RequestID)
	return dst
}

// Unmarshal decodes a KEEPALIVE_MSG.
func (m *Keepalive) Unmarshal(b []byte) error {
	if _, err := checkRNDIS(b, TypeKeepalive, KeepaliveSize); err != nil {
		return err
	}
	m.RequestID = le.Uint32(b[8:])
	return nil
}

// KeepaliveComplete is KEEPALIVE_CMPLT.
type KeepaliveComplete struct {
	RequestID uint32 // @8
	Status    Status // @12
}

// Marshal appends the 16-byte message to dst.
func (m KeepaliveComplete) Marshal(dst []byte) []byte {
	dst, b := rndisHeader(dst, TypeKeepaliveComplete, KeepaliveCompleteSize)
	le.PutUint32(b[8:], m.RequestID)
	le.PutUint32(b[12:], uint32(m.Status))
	return dst
}

// Unmarshal decodes a KEEPALIVE_CMPLT.
func (m *KeepaliveComplete) Unmarshal(b []byte) error {
	if _, err := checkRNDIS(b, TypeKeepaliveComplete, KeepaliveCompleteSize); err != nil {
		return err
	}
	m.RequestID = le.Uint32(b[8:])
	m.Status = Status(le.Uint32(b[12:]))
	return nil
}

// IndicateStatus is INDICATE_STATUS_MSG, host to guest: Status is the
// indication (StatusMediaConnect, ...), Buf its payload (the new link
// speed for LINK_SPEED_CHANGE). Marshal writes status_buf_offset 12
// (relative to byte 8), so Buf starts at byte 20. After Unmarshal, Buf
// aliases the decoded bytes.
type IndicateStatus struct {
	Status Status // @8
	Buf    []byte // length @12, offset @16
}

// Marshal appends the message (20 bytes + len(Buf)) to dst.
func (m IndicateStatus) Marshal(dst []byte) []byte {
	dst, b := rndisHeader(dst, TypeIndicateStatus, IndicateStatusSize+len(m.Buf))
	le.PutUint32(b[8:], uint32(m.Status))
	le.PutUint32(b[12:], uint32(len(m.Buf)))
	le.PutUint32(b[16:], rndisStatusBufOffset)
	copy(b[IndicateStatusSize:], m.Buf)
	return dst
}

// Unmarshal decodes an INDICATE_STATUS_MSG, checking that the status
// buffer lies after the fixed fields and inside MessageLength.
func (m *IndicateStatus) Unmarshal(b []byte) error {
	n, err := checkRNDIS(b, TypeIndicateStatus, IndicateStatusSize)
	if err != nil {
		return err
	}
	buf, err := infoBuf(b, n, le.Uint32(b[16:]), le.Uint32(b[12:]), rndisStatusBufOffset, "INDICATE_STATUS_MSG", "status_buf")
	if err != nil {
		return err
	}
	m.Status = Status(le.Uint32(b[8:]))
	m.Buf = buf
	return nil
}
