package afxdp

import (
	"errors"
	"fmt"
)

var (
	// ErrDeviceGone: the netdev the socket was bound to has been
	// unregistered (hot-removed, or its veth peer deleted). The kernel has
	// unbound the socket; it will never carry traffic again. Close it and
	// open a new one when the device returns.
	ErrDeviceGone = errors.New("afxdp: device gone")

	// ErrDeviceDown: the netdev is administratively down, so the kernel
	// refuses to transmit. It may come back up; the socket stays usable.
	ErrDeviceDown = errors.New("afxdp: device down")

	// ErrClosed is returned by every method of a closed socket or port.
	ErrClosed = errors.New("afxdp: closed")

	// ErrFrameSize: Send was given an empty frame or one larger than a
	// UMEM frame can carry (Socket.MaxFrameLen). The frames before it were
	// sent; the caller drops it and carries on.
	ErrFrameSize = errors.New("afxdp: frame size out of range")
)

// Kind names the check a ring entry or index written by the kernel failed.
// Each kind has a test that provokes it.
type Kind uint8

const (
	// KindProducer: a kernel-written producer index more than a ring's
	// size ahead of our consumer index.
	KindProducer Kind = iota + 1
	// KindConsumer: a kernel-written consumer index behind our producer
	// index by more than a ring's size, or ahead of it.
	KindConsumer
	// KindAddr: a descriptor address outside this socket's part of the
	// UMEM, or outside the part of it that the ring may name (an RX
	// descriptor in a TX frame, a completion for an RX frame).
	KindAddr
	// KindLen: a descriptor length of 0, or one running past the end of
	// its frame.
	KindLen
	// KindOptions: an RX descriptor with option bits set; this socket
	// never asks for multi-buffer frames or metadata.
	KindOptions
	// KindOwner: a descriptor naming a frame the kernel does not hold (a
	// frame returned twice, or one never handed over).
	KindOwner
	// KindTxAddr: a completion address other than the one the frame was
	// sent with.
	KindTxAddr
)

var kindNames = [...]string{
	KindProducer: "producer index",
	KindConsumer: "consumer index",
	KindAddr:     "descriptor address",
	KindLen:      "descriptor length",
	KindOptions:  "descriptor options",
	KindOwner:    "frame ownership",
	KindTxAddr:   "completion address",
}

func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Ring names one of a socket's four rings.
type Ring uint8

const (
	RingRX Ring = iota + 1
	RingTX
	RingFill
	RingCompletion
)

func (r Ring) String() string {
	switch r {
	case RingRX:
		return "rx"
	case RingTX:
		return "tx"
	case RingFill:
		return "fill"
	case RingCompletion:
		return "completion"
	}
	return fmt.Sprintf("ring(%d)", uint8(r))
}

// CorruptError reports a ring entry or index from the kernel that failed
// validation. The socket that saw it is dead from then on: every later
// Recv, Send or Wait returns the same error.
type CorruptError struct {
	Ring  Ring
	Kind  Kind
	Index uint32 // ring index of the entry, or the offending index itself
	Addr  uint64 // descriptor address (0 for index checks)
	Len   uint32 // descriptor length (0 where the ring has none)
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("afxdp: corrupt %s ring: %s (index %d, addr %#x, len %d)",
		e.Ring, e.Kind, e.Index, e.Addr, e.Len)
}
