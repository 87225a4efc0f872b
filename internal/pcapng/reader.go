package pcapng

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

// Block types a Reader tells apart.
const (
	BlockSectionHeader   = blockSHB
	BlockInterface       = blockIDB
	BlockEnhancedPacket  = blockEPB
	BlockInterfaceStats  = blockISB
	maxBlockLen          = 16 << 20
	byteOrderMagicLittle = 0x1A2B3C4D
)

// Reader splits a little-endian pcapng stream, as Writer produces it, into
// blocks, so that a client can pass a capture on block by block while it
// counts packets and keeps the statistics. Every length is checked; a
// stream in the other byte order, or a block longer than 16 MiB, is an
// error.
type Reader struct {
	r   io.Reader
	buf []byte
}

// NewReader reads blocks from r.
func NewReader(r io.Reader) *Reader { return &Reader{r: r} }

// Block is one block: its type and its bytes, both length words
// included. Raw is valid until the next call to Next.
type Block struct {
	Type uint32
	Raw  []byte
}

// Next returns the next block; io.EOF at the end of the stream between
// blocks, io.ErrUnexpectedEOF inside one.
func (r *Reader) Next() (Block, error) {
	var hdr [8]byte
	if _, err := io.ReadFull(r.r, hdr[:]); err != nil {
		return Block{}, err
	}
	typ, n := binary.LittleEndian.Uint32(hdr[:]), binary.LittleEndian.Uint32(hdr[4:])
	if n < 12 || n%4 != 0 || n > maxBlockLen {
		return Block{}, fmt.Errorf("pcapng: block type %#x: bad length %d", typ, n)
	}
	if cap(r.buf) < int(n) {
		r.buf = make([]byte, n)
	}
	b := r.buf[:n]
	copy(b, hdr[:])
	if _, err := io.ReadFull(r.r, b[8:]); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return Block{}, err
	}
	if binary.LittleEndian.Uint32(b[n-4:]) != n {
		return Block{}, fmt.Errorf("pcapng: block type %#x: trailing length %d, leading %d", typ, binary.LittleEndian.Uint32(b[n-4:]), n)
	}
	if typ == blockSHB && (n < 28 || binary.LittleEndian.Uint32(b[8:]) != byteOrderMagicLittle) {
		return Block{}, errors.New("pcapng: section header is not little-endian pcapng")
	}
	return Block{Type: typ, Raw: b}, nil
}

// Packet is an enhanced packet block's content.
type Packet struct {
	Interface int
	Time      time.Time
	Data      []byte // aliases the block's bytes
	OrigLen   int
	Dir       Direction
	Queue     int // -1 when the block has none
}

// Packet decodes an enhanced packet block (nanosecond timestamps, as
// Writer declares its interfaces).
func (b Block) Packet() (Packet, error) {
	raw := b.Raw
	if b.Type != blockEPB || len(raw) < 32 {
		return Packet{}, fmt.Errorf("pcapng: not an enhanced packet block (type %#x, %d bytes)", b.Type, len(raw))
	}
	capLen := int(binary.LittleEndian.Uint32(raw[20:]))
	body := raw[28 : len(raw)-4]
	if capLen > len(body) {
		return Packet{}, fmt.Errorf("pcapng: captured length %d in a %d-byte block", capLen, len(raw))
	}
	ns := uint64(binary.LittleEndian.Uint32(raw[12:]))<<32 | uint64(binary.LittleEndian.Uint32(raw[16:]))
	p := Packet{Interface: int(binary.LittleEndian.Uint32(raw[8:])), Time: time.Unix(0, int64(ns)),
		Data: body[:capLen], OrigLen: int(binary.LittleEndian.Uint32(raw[24:])), Queue: -1}
	err := eachOpt(body[(capLen+3)&^3:], func(code uint16, v []byte) {
		switch {
		case code == optEpbFlags && len(v) == 4:
			p.Dir = Direction(binary.LittleEndian.Uint32(v) & 3)
		case code == optEpbQueue && len(v) == 4:
			p.Queue = int(binary.LittleEndian.Uint32(v))
		}
	})
	return p, err
}

// Stats decodes an interface statistics block: the interface and its
// counters (a counter the block lacks is 0).
func (b Block) Stats() (iface int, st Stats, err error) {
	raw := b.Raw
	if b.Type != blockISB || len(raw) < 24 {
		return 0, Stats{}, fmt.Errorf("pcapng: not an interface statistics block (type %#x, %d bytes)", b.Type, len(raw))
	}
	err = eachOpt(raw[20:len(raw)-4], func(code uint16, v []byte) {
		if len(v) != 8 {
			return
		}
		switch x := binary.LittleEndian.Uint64(v); code {
		case optIsbIfRecv:
			st.Received = x
		case optIsbFilterAccept:
			st.Accepted = x
		case optIsbIfDrop:
			st.Dropped = x
		}
	})
	return int(binary.LittleEndian.Uint32(raw[8:])), st, err
}

// eachOpt calls f for each option up to opt_endofopt or the end.
func eachOpt(o []byte, f func(code uint16, v []byte)) error {
	for len(o) >= 4 {
		code, n := binary.LittleEndian.Uint16(o), int(binary.LittleEndian.Uint16(o[2:]))
		if code == optEnd {
			return nil
		}
		if 4+n > len(o) {
			return fmt.Errorf("pcapng: option %d of %d bytes overruns its block", code, n)
		}
		f(code, o[4:4+n])
		o = o[min(len(o), 4+(n+3)&^3):]
	}
	return nil
}

// InterfaceName decodes an interface description block's if_name ("" if
// it has none).
func (b Block) InterfaceName() (string, error) {
	if b.Type != blockIDB || len(b.Raw) < 20 {
		return "", fmt.Errorf("pcapng: not an interface description block (type %#x, %d bytes)", b.Type, len(b.Raw))
	}
	var name string
	err := eachOpt(b.Raw[16:len(b.Raw)-4], func(code uint16, v []byte) {
		if code == optIfName {
			name = string(v)
		}
	})
	return name, err
}
