package protoerr

import (
	"errors"
	"fmt"
)

// Kind names the check a peer's message failed. Each kind has a test that
// provokes it.
type Kind uint8

const (
	// KindShort: fewer bytes than the message's or object's fixed layout.
	KindShort Kind = iota + 1
	// KindType: the message type (or NDIS object type) is not the one the
	// decoder was asked for.
	KindType
	// KindLength: an RNDIS MessageLength below the message's fixed size or
	// beyond the bytes available.
	KindLength
	// KindOffset: an offset field points below the fixed header it must
	// follow, or is misaligned.
	KindOffset
	// KindRange: an offset plus length runs past the end of the message.
	KindRange
	// KindDataLength: an RNDIS PACKET message carries no frame
	// (DataLength 0; DPDK hn_rndis_rx_data, openvmm).
	KindDataLength
	// KindUnsupported: an RNDIS PACKET message uses out-of-band data or a
	// VC handle, which Hyper-V rejects (openvmm UnsupportedRndisBehavior).
	KindUnsupported
	// KindPPISize: a per-packet-info element whose size is below its
	// 12-byte header, not a multiple of 4, or past the PPI area.
	KindPPISize
	// KindPPIOffset: a per-packet-info element whose data offset lies
	// inside its header or past the element.
	KindPPIOffset
	// KindPPIData: a known per-packet-info element with less data than
	// its type needs (4 bytes for every type this package reads).
	KindPPIData
	// KindSectionCount: a receive-buffer completion announcing other than
	// exactly one section (docs/protocol/netvsc.md §2.4, §2.5).
	KindSectionCount
	// KindSectionOffset: a receive-buffer section that does not start at
	// offset 0.
	KindSectionOffset
	// KindSectionSize: a receive sub-allocation or send section smaller
	// than 68 bytes, a send section not a multiple of 4, or an RNDIS
	// message claiming more section bytes than a section holds.
	KindSectionSize
	// KindSectionFit: sections that do not fit the buffer the guest
	// registered (count 0, size × count or end offset past the end).
	KindSectionFit
	// KindSectionIndex: an RNDIS message naming a send-buffer section past
	// the last one.
	KindSectionIndex
	// KindTableCount: a send indirection table whose count is not 16.
	KindTableCount
	// KindTableOffset: a send indirection table that does not fit in the
	// message at its offset.
	KindTableOffset
	// KindNDISObject: an NDIS object header with the wrong type, a zero
	// revision, or a size below the object's smallest revision. (A size
	// beyond the buffer is KindShort.)
	KindNDISObject
	// KindRSSTable: RSS parameters whose indirection table is not a whole
	// number of entries, holds more than 128, lies outside the buffer, or
	// is empty when RSS is being enabled.
	KindRSSTable
	// KindRSSKey: RSS parameters whose hash key is longer than 40 bytes,
	// lies outside the buffer, or is not 40 bytes when RSS is being enabled.
	KindRSSKey
	// KindRSSEntry: an indirection-table entry naming a queue the host does
	// not have.
	KindRSSEntry
	// KindDuplicateTID: a transfer-page packet whose transaction id is one
	// the guest has not completed yet on that channel: the host handed out
	// a receive sub-allocation it had not got back (or sent the packet
	// twice). With ids below the sub-allocation count, this is also how a
	// host that floods the guest without reading its completions shows.
	KindDuplicateTID
	kindEnd
)

var kindNames = [...]string{
	KindShort:         "short message",
	KindType:          "wrong type",
	KindLength:        "bad message length",
	KindOffset:        "bad offset",
	KindRange:         "out of range",
	KindDataLength:    "no data",
	KindUnsupported:   "unsupported field",
	KindPPISize:       "bad ppi size",
	KindPPIOffset:     "bad ppi offset",
	KindPPIData:       "short ppi data",
	KindSectionCount:  "section count",
	KindSectionOffset: "section offset",
	KindSectionSize:   "section size",
	KindSectionFit:    "sections do not fit",
	KindSectionIndex:  "section index",
	KindTableCount:    "table count",
	KindTableOffset:   "table offset",
	KindNDISObject:    "bad ndis object header",
	KindRSSTable:      "bad rss indirection table",
	KindRSSKey:        "bad rss key",
	KindRSSEntry:      "bad rss table entry",
	KindDuplicateTID:  "duplicate transaction id",
}

// String returns a short name for the kind, usable as a metric label.
func (k Kind) String() string {
	if k > 0 && k < kindEnd {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Valid reports whether k is one of the listed kinds.
func (k Kind) Valid() bool { return k > 0 && k < kindEnd }

// Kinds lists every kind a decoder or validator can return.
func Kinds() []Kind {
	ks := make([]Kind, 0, kindEnd-1)
	for k := KindShort; k < kindEnd; k++ {
		ks = append(ks, k)
	}
	return ks
}

// Error reports that a peer's message broke the NVSP, RNDIS or NDIS
// rules. Msg names the message or object (the spec's name, e.g.
// "SEND_RECV_BUF_COMPLETE", "PACKET_MSG", "NDIS_OFFLOAD"), Field the field
// that failed and Val its value (for KindShort, the bytes available).
type Error struct {
	Msg   string
	Kind  Kind
	Field string
	Val   uint64
}

func (e *Error) Error() string {
	return fmt.Sprintf("netvsc: %s: %s: %s (value %d)", e.Msg, e.Field, e.Kind, e.Val)
}

// As reports whether err is (or wraps) an *Error and returns it.
func As(err error) (*Error, bool) {
	var pe *Error
	ok := errors.As(err, &pe)
	return pe, ok
}

// New returns an *Error for message msg whose field failed check k with
// value val.
func New(msg string, k Kind, field string, val uint64) error {
	return &Error{Msg: msg, Kind: k, Field: field, Val: val}
}
