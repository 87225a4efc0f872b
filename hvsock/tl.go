package hvsock

import (
	"encoding/binary"
	"fmt"

	"github.com/vmbusd/vmbusd/vmbus"
)

// The guest half of a guest-initiated connect is one VMBus control message,
// CHANNELMSG_TL_CONNECT_REQUEST; a host that refuses answers with
// CHANNELMSG_TL_CONNECT_RESULT, and one that accepts offers a channel
// instead (hvsock.md §1.2 "TL connect messages"). On Linux only the kernel
// can post it; the simulated host takes it on R/dev/vmbus-tl (DESIGN.md), the
// one simulator-only piece of the user-space transport.
//
//	request (40 bytes)                      result (44 bytes)
//	0  u32 msgtype = 21                     0  u32 msgtype = 23
//	4  u32 padding                          4  u32 padding
//	8  guest endpoint GUID (wire order)     8  endpoint GUID
//	24 host service GUID                    24 service GUID
//	[40 silo GUID: the 56-byte v2 form]     40 i32 status (< 0: refused)

// Message types and sizes (include/linux/hyperv.h; OpenVMM vmbus_core).
const (
	MsgTLConnectRequest   = 21 // CHANNELMSG_TL_CONNECT_REQUEST
	MsgTLConnectResult    = 23 // CHANNELMSG_TL_CONNECT_RESULT
	TLConnectRequestLen   = 40
	TLConnectRequestV2Len = 56 // TlConnectRequest2, with a silo id (Win10 RS5+)
	TLConnectResultLen    = 44
	// StatusConnectionRefused is the NTSTATUS a host refuses with
	// (STATUS_CONNECTION_REFUSED; "Windows guests care about the error code").
	StatusConnectionRefused = int32(-0x3ffffdca) // 0xC0000236
)

// TLConnectRequest asks the host to connect guest endpoint Endpoint
// (template GUID of the guest's local port) to host service Service.
type TLConnectRequest struct {
	Endpoint vmbus.GUID
	Service  vmbus.GUID
	// Silo is only carried by the 56-byte v2 form; zero otherwise.
	Silo vmbus.GUID
	V2   bool
}

// Marshal returns the message: 40 bytes, or 56 for the v2 form.
func (r TLConnectRequest) Marshal() []byte {
	n := TLConnectRequestLen
	if r.V2 {
		n = TLConnectRequestV2Len
	}
	b := make([]byte, n)
	binary.LittleEndian.PutUint32(b[0:], MsgTLConnectRequest)
	r.Endpoint.PutWire(b[8:])
	r.Service.PutWire(b[24:])
	if r.V2 {
		r.Silo.PutWire(b[40:])
	}
	return b
}

// ParseTLConnectRequest decodes a 40- or 56-byte request (OpenVMM accepts
// either: "some clients send the old message even for newer protocols").
func ParseTLConnectRequest(b []byte) (TLConnectRequest, error) {
	if len(b) != TLConnectRequestLen && len(b) != TLConnectRequestV2Len {
		return TLConnectRequest{}, fmt.Errorf("hvsock: tl connect request of %d bytes, want %d or %d", len(b), TLConnectRequestLen, TLConnectRequestV2Len)
	}
	if t := binary.LittleEndian.Uint32(b); t != MsgTLConnectRequest {
		return TLConnectRequest{}, fmt.Errorf("hvsock: message type %d, want %d (tl connect request)", t, MsgTLConnectRequest)
	}
	r := TLConnectRequest{Endpoint: vmbus.GUIDFromWire(b[8:]), Service: vmbus.GUIDFromWire(b[24:])}
	if len(b) == TLConnectRequestV2Len {
		r.V2, r.Silo = true, vmbus.GUIDFromWire(b[40:])
	}
	return r, nil
}

// TLConnectResult is the host's answer to a request it refused; success is
// never answered by a result, only by the offer.
type TLConnectResult struct {
	Endpoint vmbus.GUID
	Service  vmbus.GUID
	Status   int32
}

// Marshal returns the 44-byte message.
func (r TLConnectResult) Marshal() []byte {
	b := make([]byte, TLConnectResultLen)
	binary.LittleEndian.PutUint32(b[0:], MsgTLConnectResult)
	r.Endpoint.PutWire(b[8:])
	r.Service.PutWire(b[24:])
	binary.LittleEndian.PutUint32(b[40:], uint32(r.Status))
	return b
}

// ParseTLConnectResult decodes a 44-byte result.
func ParseTLConnectResult(b []byte) (TLConnectResult, error) {
	if len(b) != TLConnectResultLen {
		return TLConnectResult{}, fmt.Errorf("hvsock: tl connect result of %d bytes, want %d", len(b), TLConnectResultLen)
	}
	if t := binary.LittleEndian.Uint32(b); t != MsgTLConnectResult {
		return TLConnectResult{}, fmt.Errorf("hvsock: message type %d, want %d (tl connect result)", t, MsgTLConnectResult)
	}
	return TLConnectResult{
		Endpoint: vmbus.GUIDFromWire(b[8:]),
		Service:  vmbus.GUIDFromWire(b[24:]),
		Status:   int32(binary.LittleEndian.Uint32(b[40:])),
	}, nil
}
