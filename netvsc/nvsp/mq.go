package nvsp

import "github.com/vmbusd/vmbusd/netvsc/protoerr"

// NVSP messages of NVSP 4 and later for accelerated networking and
// multi-queue (docs/protocol/netvsc.md §2.8, §2.9): VF association, data-path switch,
// sub-channels, the send indirection table.

// VFAssociation is SEND_VF_ASSOCIATION (128), host to guest: Allocated
// is 1 when a VF is present and Serial (its PCI slot name in the guest) is
// valid, 0 when it was removed (docs/protocol/netvsc.md §2.9).
type VFAssociation struct {
	Allocated uint32 // @4
	Serial    uint32 // @8
}

// Marshal appends the 40-byte message to dst.
func (m VFAssociation) Marshal(dst []byte) []byte {
	dst, b := nvspHeader(dst, TypeSendVFAssociation, MessageSize)
	le.PutUint32(b[4:], m.Allocated)
	le.PutUint32(b[8:], m.Serial)
	return dst
}

// Unmarshal decodes a SEND_VF_ASSOCIATION message.
func (m *VFAssociation) Unmarshal(b []byte) error {
	if err := checkNVSP(b, TypeSendVFAssociation, nvspVFAssociationLen); err != nil {
		return err
	}
	m.Allocated = le.Uint32(b[4:])
	m.Serial = le.Uint32(b[8:])
	return nil
}

// SwitchDataPath is SWITCH_DATA_PATH (129): guest to host to move
// traffic, host to guest to report that it moved back to synthetic. Its
// completion carries no payload at all (docs/protocol/netvsc.md §2.9).
type SwitchDataPath struct {
	ActiveDataPath uint32 // @4: DataPathSynthetic or DataPathVF
}

// Marshal appends the 40-byte message to dst.
func (m SwitchDataPath) Marshal(dst []byte) []byte {
	dst, b := nvspHeader(dst, TypeSwitchDataPath, MessageSize)
	le.PutUint32(b[4:], m.ActiveDataPath)
	return dst
}

// Unmarshal decodes a SWITCH_DATA_PATH message.
func (m *SwitchDataPath) Unmarshal(b []byte) error {
	if err := checkNVSP(b, TypeSwitchDataPath, nvspSwitchDataPathLen); err != nil {
		return err
	}
	m.ActiveDataPath = le.Uint32(b[4:])
	return nil
}

// SubchannelRequest is SUBCHANNEL (133) from the guest: allocate Count
// sub-channels (queues - 1), with completion requested (docs/protocol/netvsc.md §2.8).
type SubchannelRequest struct {
	Op    uint32 // @4: SubchannelAllocate
	Count uint32 // @8
}

// Marshal appends the 40-byte message to dst.
func (m SubchannelRequest) Marshal(dst []byte) []byte {
	dst, b := nvspHeader(dst, TypeSubchannel, MessageSize)
	le.PutUint32(b[4:], m.Op)
	le.PutUint32(b[8:], m.Count)
	return dst
}

// Unmarshal decodes a SUBCHANNEL request.
func (m *SubchannelRequest) Unmarshal(b []byte) error {
	if err := checkNVSP(b, TypeSubchannel, nvspSubchannelLen); err != nil {
		return err
	}
	m.Op = le.Uint32(b[4:])
	m.Count = le.Uint32(b[8:])
	return nil
}

// SubchannelComplete is the host's completion of SUBCHANNEL, which
// reuses type 133: Count is the number actually allocated. Linux fails if
// it exceeds the request; DPDK uses it (docs/protocol/netvsc.md §2.8).
type SubchannelComplete struct {
	Status Status // @4
	Count  uint32 // @8
}

// Marshal appends the 40-byte message to dst.
func (m SubchannelComplete) Marshal(dst []byte) []byte {
	dst, b := nvspHeader(dst, TypeSubchannel, MessageSize)
	le.PutUint32(b[4:], uint32(m.Status))
	le.PutUint32(b[8:], m.Count)
	return dst
}

// Unmarshal decodes a SUBCHANNEL completion.
func (m *SubchannelComplete) Unmarshal(b []byte) error {
	if err := checkNVSP(b, TypeSubchannel, nvspSubchannelLen); err != nil {
		return err
	}
	m.Status = Status(le.Uint32(b[4:]))
	m.Count = le.Uint32(b[8:])
	return nil
}

// IndirectionTable is SEND_INDIRECTION_TABLE (134), host to guest once
// all sub-channels are open: TX queue for a flow = Table[hash & 15]
// (docs/protocol/netvsc.md §2.8). Entries are sub-channel indices as the host sent them;
// the guest checks them against its channel count before use.
type IndirectionTable struct {
	// Offset is where the table starts, from the start of the message (@8).
	// Marshal writes the table there; 0 means 12, right after the header,
	// as openvmm does. Unmarshal sets it to the offset it read from.
	Offset uint32
	Table  [VRSSSendTabSize]uint32
}

// Marshal appends the message to dst: 12 + 16×4 bytes with the default
// offset, more (zero filled up to the table) with a larger one. An Offset
// below 12 is written as 12.
func (m IndirectionTable) Marshal(dst []byte) []byte {
	off := int(m.Offset)
	if off < nvspTableHeaderLen || uint64(m.Offset) > MaxResponseSize {
		off = nvspTableHeaderLen
	}
	dst, b := nvspHeader(dst, TypeSendIndirectionTable, off+4*VRSSSendTabSize)
	le.PutUint32(b[4:], VRSSSendTabSize)
	le.PutUint32(b[8:], uint32(off))
	for i, v := range m.Table {
		le.PutUint32(b[off+4*i:], v)
	}
	return dst
}

// Unmarshal decodes a SEND_INDIRECTION_TABLE message using the offset it
// carries: the count must be 16 (protoerr.KindTableCount) and the table must lie
// inside b (protoerr.KindTableOffset).
func (m *IndirectionTable) Unmarshal(b []byte) error {
	return m.unmarshal(b, false)
}

// UnmarshalVersion is Unmarshal with Linux's workaround for a host bug
// (docs/protocol/netvsc.md §2.8, L-n netvsc_send_table): at NVSP 6 and below the offset
// may be wrong, so when b is long enough to hold the table at offset 40
// (4 + sizeof(union nvsp_6_message_uber)) the table is read there instead.
func (m *IndirectionTable) UnmarshalVersion(b []byte, version uint32) error {
	return m.unmarshal(b, version <= Version6)
}

const buggyTableOffset = 40

func (m *IndirectionTable) unmarshal(b []byte, hostBug bool) error {
	const msg = "SEND_INDIRECTION_TABLE"
	if err := checkNVSP(b, TypeSendIndirectionTable, nvspTableHeaderLen); err != nil {
		return err
	}
	count := le.Uint32(b[4:])
	if count != VRSSSendTabSize {
		return protoerr.New(msg, protoerr.KindTableCount, "count", uint64(count))
	}
	off := uint64(le.Uint32(b[8:]))
	const tabLen = 4 * VRSSSendTabSize
	if hostBug && len(b) >= buggyTableOffset+tabLen {
		off = buggyTableOffset
	}
	if len(b) < tabLen || off > uint64(len(b)-tabLen) {
		return protoerr.New(msg, protoerr.KindTableOffset, "offset", off)
	}
	m.Offset = uint32(off)
	for i := range m.Table {
		m.Table[i] = le.Uint32(b[int(off)+4*i:])
	}
	return nil
}
