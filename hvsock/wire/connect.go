package wire

import (
	"encoding/binary"
	"fmt"

	"github.com/vmbusd/vmbusd/vmbus"
)

// The guest half of a guest-initiated connect is one VMBus control message,
// CHANNELMSG_TL_CONNECT_REQUEST; a host that refuses answers with
// CHANNELMSG_TL_CONNECT_RESULT, and one that accepts offers a channel
// instead (docs/protocol/hvsock.md §1.2 "TL connect messages"). On Linux
// only the kernel can post it; the simulated host takes it on
// R/dev/vmbus-tl (ConnectNode; docs/uio-contract.md §7.2).
//
//	request (40 bytes)                      result (44 bytes)
//	0  u32 msgtype = 21                     0  u32 msgtype = 23
//	4  u32 padding                          4  u32 padding
//	8  guest endpoint GUID (wire order)     8  endpoint GUID
//	24 host service GUID                    24 service GUID
//	[40 silo GUID: the 56-byte v2 form]     40 i32 status (< 0: refused)

// Message types and sizes (include/linux/hyperv.h; OpenVMM vmbus_core).
const (
	MsgConnectRequest   = 21 // CHANNELMSG_TL_CONNECT_REQUEST
	MsgConnectResult    = 23 // CHANNELMSG_TL_CONNECT_RESULT
	ConnectRequestLen   = 40
	ConnectRequestV2Len = 56 // TlConnectRequest2, with a silo id (Win10 RS5+)
	ConnectResultLen    = 44
	// StatusConnectionRefused is the NTSTATUS a host refuses with
	// (STATUS_CONNECTION_REFUSED; "Windows guests care about the error code").
	StatusConnectionRefused = int32(-0x3ffffdca) // 0xC0000236
)

// ConnectNode is where, under the root R, the simulated host takes connect
// requests: a SOCK_SEQPACKET socket, one message per request
// (docs/uio-contract.md §7.2).
const ConnectNode = "dev/vmbus-tl"

// ConnectRequest asks the host to connect guest endpoint Endpoint
// (ServiceID of the guest's local port) to host service Service.
type ConnectRequest struct {
	Endpoint vmbus.GUID
	Service  vmbus.GUID
	// Silo is only carried by the 56-byte v2 form; zero otherwise.
	Silo vmbus.GUID
	V2   bool
}

// Marshal returns the message: 40 bytes, or 56 for the v2 form.
func (r ConnectRequest) Marshal() []byte {
	n := ConnectRequestLen
	if r.V2 {
		n = ConnectRequestV2Len
	}
	b := make([]byte, n)
	binary.LittleEndian.PutUint32(b[0:], MsgConnectRequest)
	r.Endpoint.PutWire(b[8:])
	r.Service.PutWire(b[24:])
	if r.V2 {
		r.Silo.PutWire(b[40:])
	}
	return b
}

// ParseConnectRequest decodes a 40- or 56-byte request (OpenVMM accepts
// either: "some clients send the old message even for newer protocols").
func ParseConnectRequest(b []byte) (ConnectRequest, error) {
	if len(b) != ConnectRequestLen && len(b) != ConnectRequestV2Len {
		return ConnectRequest{}, fmt.Errorf("hvsock/wire: tl connect request of %d bytes, want %d or %d", len(b), ConnectRequestLen, ConnectRequestV2Len)
	}
	if t := binary.LittleEndian.Uint32(b); t != MsgConnectRequest {
		return ConnectRequest{}, fmt.Errorf("hvsock/wire: message type %d, want %d (tl connect request)", t, MsgConnectRequest)
	}
	r := ConnectRequest{Endpoint: vmbus.GUIDFromWire(b[8:]), Service: vmbus.GUIDFromWire(b[24:])}
	if len(b) == ConnectRequestV2Len {
		r.V2, r.Silo = true, vmbus.GUIDFromWire(b[40:])
	}
	return r, nil
}

// ConnectResult is the host's answer to a request it refused; success is
// never answered by a result, only by the offer.
type ConnectResult struct {
	Endpoint vmbus.GUID
	Service  vmbus.GUID
	Status   int32
}

// Marshal returns the 44-byte message.
func (r ConnectResult) Marshal() []byte {
	b := make([]byte, ConnectResultLen)
	binary.LittleEndian.PutUint32(b[0:], MsgConnectResult)
	r.Endpoint.PutWire(b[8:])
	r.Service.PutWire(b[24:])
	binary.LittleEndian.PutUint32(b[40:], uint32(r.Status))
	return b
}

// ParseConnectResult decodes a 44-byte result.
func ParseConnectResult(b []byte) (ConnectResult, error) {
	if len(b) != ConnectResultLen {
		return ConnectResult{}, fmt.Errorf("hvsock/wire: tl connect result of %d bytes, want %d", len(b), ConnectResultLen)
	}
	if t := binary.LittleEndian.Uint32(b); t != MsgConnectResult {
		return ConnectResult{}, fmt.Errorf("hvsock/wire: message type %d, want %d (tl connect result)", t, MsgConnectResult)
	}
	return ConnectResult{
		Endpoint: vmbus.GUIDFromWire(b[8:]),
		Service:  vmbus.GUIDFromWire(b[24:]),
		Status:   int32(binary.LittleEndian.Uint32(b[40:])),
	}, nil
}
