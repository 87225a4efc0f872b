package vmbus

import (
	"errors"
	"fmt"
)

// ErrRingEmpty is returned by InRing.Read when no complete packet is
// available. It is flow control, not failure.
var ErrRingEmpty = errors.New("vmbus: ring empty")

// ErrChannelClosed is returned by operations on a closed channel or device.
var ErrChannelClosed = errors.New("vmbus: channel closed")

// RingFullError is returned by OutRing.Write when the packet does not fit
// in the free space. It is flow control, not failure: the caller commits
// what it has written, waits for the reader and retries.
type RingFullError struct {
	Need int // bytes the packet needs, trailer included
	Free int // bytes free in the ring
}

func (e *RingFullError) Error() string {
	return fmt.Sprintf("vmbus: ring full: need %d bytes, %d free", e.Need, e.Free)
}

// CorruptKind names the protocol violation a peer committed in shared
// memory. Each kind has a test that provokes it.
type CorruptKind int

const (
	// CorruptWriteIndex: the peer's write index is past the data area or not
	// a multiple of 8, or it claims more data than the ring can hold.
	CorruptWriteIndex CorruptKind = iota + 1
	// CorruptWriteRewind: the peer's write index moved backwards over data
	// it had already published.
	CorruptWriteRewind
	// CorruptReadIndex: the peer's read index is past the data area, not a
	// multiple of 8, or beyond what we have published.
	CorruptReadIndex
	// CorruptShortPacket: fewer bytes than a minimal packet are available.
	CorruptShortPacket
	// CorruptOffset: offset8 < 2 (or < 3 for transfer-page and GPA-direct).
	CorruptOffset
	// CorruptLength: len8 < offset8, or the packet is longer than the data
	// available, or longer than the channel's maximum packet size.
	CorruptLength
	// CorruptType: a packet type other than inband, transfer-page,
	// GPA-direct or completion.
	CorruptType
	// CorruptFlags: flags other than COMPLETION_REQUESTED.
	CorruptFlags
	// CorruptRanges: a transfer-page or GPA-direct range table that is
	// empty or does not fit in the packet header, or a GPA range with an
	// in-page offset past the page.
	CorruptRanges
	// CorruptCompletion: a completion whose transaction id matches no
	// outstanding request.
	CorruptCompletion
)

var corruptNames = [...]string{
	CorruptWriteIndex:  "write index",
	CorruptWriteRewind: "write index rewind",
	CorruptReadIndex:   "read index",
	CorruptShortPacket: "short packet",
	CorruptOffset:      "offset8",
	CorruptLength:      "len8",
	CorruptType:        "packet type",
	CorruptFlags:       "packet flags",
	CorruptRanges:      "range table",
	CorruptCompletion:  "completion id",
}

// String returns a short name for the kind, used as a metric label.
func (k CorruptKind) String() string {
	if k > 0 && int(k) < len(corruptNames) {
		return corruptNames[k]
	}
	return fmt.Sprintf("corrupt(%d)", int(k))
}

// CorruptKinds lists every kind a reader or writer can return.
func CorruptKinds() []CorruptKind {
	return []CorruptKind{CorruptWriteIndex, CorruptWriteRewind, CorruptReadIndex,
		CorruptShortPacket, CorruptOffset, CorruptLength, CorruptType, CorruptFlags,
		CorruptRanges, CorruptCompletion}
}

// CorruptError reports that the peer broke the ring or packet protocol. The
// ring that returned it is dead: every later call returns the same error.
// Off is the data-area offset where the fault was seen; Val the bad value.
type CorruptError struct {
	Kind CorruptKind
	Off  uint32
	Val  uint64
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("vmbus: corrupt ring: %s (offset %d, value %d)", e.Kind, e.Off, e.Val)
}

// IsCorrupt reports whether err is (or wraps) a *CorruptError and returns it.
func IsCorrupt(err error) (*CorruptError, bool) {
	switch e := err.(type) {
	case nil, *RingFullError:
		return nil, false
	case *CorruptError:
		return e, true
	}
	var ce *CorruptError
	ok := errors.As(err, &ce)
	return ce, ok
}
