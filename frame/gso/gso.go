package gso

import (
	"encoding/binary"
	"errors"

	"github.com/vmbusd/vmbusd/frame/csum"
)

var be = binary.BigEndian

// Wire constants.
const (
	EthHeaderLen = 14
	ProtoTCP     = 6
	ProtoUDP     = 17
	ipv4MinLen   = 20
	ipv6Len      = 40
	tcpMinLen    = 20
	udpLen       = 8
	// TCP flags.
	FlagFIN = 0x01
	FlagSYN = 0x02
	FlagRST = 0x04
	FlagPSH = 0x08
	FlagACK = 0x10
	FlagURG = 0x20
	FlagECE = 0x40
	FlagCWR = 0x80
)

// Layout is where a frame's headers are.
type Layout struct {
	L3, L4  int   // IP header and transport header offsets
	Payload int   // first byte after the transport header
	End     int   // end of the IP packet (frame padding excluded)
	V6      bool  // IPv6 (else IPv4)
	Proto   uint8 // ProtoTCP or ProtoUDP
}

// HeaderLen is the length of every header, Ethernet to transport.
func (l Layout) HeaderLen() int { return l.Payload }

// CsumOffset is the offset of the transport checksum field from the
// transport header.
func (l Layout) CsumOffset() int {
	if l.Proto == ProtoUDP {
		return 6
	}
	return 16
}

// Errors of Parse and Split.
var (
	ErrNotIP       = errors.New("gso: not an IPv4 or IPv6 frame")
	ErrTransport   = errors.New("gso: not a whole TCP or UDP header")
	ErrFragment    = errors.New("gso: IPv4 fragment")
	ErrIPLength    = errors.New("gso: IP length beyond the frame")
	ErrSegmentSize = errors.New("gso: segment size of 0")
	ErrTooMany     = errors.New("gso: more segments than 65535")
	ErrNoRoom      = errors.New("gso: no room for the next piece")
)

// Parse finds the headers of an untagged Ethernet frame carrying TCP or
// UDP over IPv4 or IPv6 (no IPv6 extension headers). A super-frame's IP
// length may be 0 (Linux leaves it so for a large send): the frame's own
// length is used then, up to 65535.
func Parse(f []byte) (Layout, error) {
	var l Layout
	if len(f) < EthHeaderLen+ipv4MinLen {
		return l, ErrNotIP
	}
	l.L3 = EthHeaderLen
	h := f[EthHeaderLen:]
	var proto uint8
	switch be.Uint16(f[12:]) {
	case 0x0800:
		ihl := int(h[0]&0xf) * 4
		if h[0]>>4 != 4 || ihl < ipv4MinLen || len(h) < ihl {
			return l, ErrNotIP
		}
		if be.Uint16(h[6:])&0x3fff != 0 {
			return l, ErrFragment
		}
		tot := int(be.Uint16(h[2:]))
		switch {
		case tot == 0 && len(h) <= 0xffff:
			tot = len(h)
		case tot < ihl || tot > len(h):
			return l, ErrIPLength
		}
		l.L4, l.End, proto = l.L3+ihl, l.L3+tot, h[9]
	case 0x86dd:
		if len(h) < ipv6Len || h[0]>>4 != 6 {
			return l, ErrNotIP
		}
		pl := int(be.Uint16(h[4:]))
		switch {
		case pl == 0 && len(h)-ipv6Len <= 0xffff:
			pl = len(h) - ipv6Len
		case pl == 0 || pl > len(h)-ipv6Len:
			return l, ErrIPLength
		}
		l.V6, l.L4, l.End, proto = true, l.L3+ipv6Len, l.L3+ipv6Len+pl, h[6]
	default:
		return l, ErrNotIP
	}
	t := f[l.L4:l.End]
	switch {
	case proto == ProtoTCP && len(t) >= tcpMinLen:
		thl := int(t[12]>>4) * 4
		if thl < tcpMinLen || thl > len(t) {
			return l, ErrTransport
		}
		l.Payload = l.L4 + thl
	case proto == ProtoUDP && len(t) >= udpLen:
		l.Payload = l.L4 + udpLen
	default:
		return l, ErrTransport
	}
	l.Proto = proto
	return l, nil
}

// Checksum says what Split leaves in each piece's transport checksum.
type Checksum int

const (
	// Full: the complete checksum.
	Full Checksum = iota
	// Partial: the pseudo-header sum (with the piece's length), for a
	// device that adds the rest (checksum offload).
	Partial
	// LSOSeed: the pseudo-header sum without the length, as Linux hands
	// a large send to Hyper-V (the host recomputes it per segment).
	LSOSeed
)

// PseudoSum is the transport checksum's pseudo-header sum (unfolded) over
// the addresses of the IP header at f[l.L3:], proto and length n.
func PseudoSum(f []byte, l Layout, n int) uint32 {
	var s uint32
	if l.V6 {
		s = csum.Add(0, f[l.L3+8:l.L3+40])
		s += uint32(n>>16) + uint32(n&0xffff)
	} else {
		s = csum.Add(0, f[l.L3+12:l.L3+20])
		s += uint32(n)
	}
	return s + uint32(l.Proto)
}

// FinishChecksum computes the transport checksum of a frame (f up to
// l.End) in place, complete or partial.
func FinishChecksum(f []byte, l Layout, mode Checksum) {
	t := f[l.L4:l.End]
	at := l.CsumOffset()
	t[at], t[at+1] = 0, 0
	switch mode {
	case Partial:
		be.PutUint16(t[at:], csum.Fold(PseudoSum(f, l, len(t))))
	case LSOSeed:
		be.PutUint16(t[at:], csum.Fold(PseudoSum(f, l, 0)))
	default:
		c := ^csum.Fold(csum.Add(PseudoSum(f, l, len(t)), t))
		if l.Proto == ProtoUDP && c == 0 {
			c = 0xffff // 0 means "no checksum"
		}
		be.PutUint16(t[at:], c)
	}
}

// FixIPv4Checksum recomputes an IPv4 header's checksum in place.
func FixIPv4Checksum(f []byte, l Layout) {
	h := f[l.L3:l.L4]
	h[10], h[11] = 0, 0
	be.PutUint16(h[10:], ^csum.Fold(csum.Add(0, h)))
}

// Segments returns how many segments of size mss the super-frame's
// payload makes.
func Segments(l Layout, mss int) int {
	if mss <= 0 {
		return 0
	}
	return (l.End - l.Payload + mss - 1) / mss
}

// Split cuts the super-frame f (parsed as l) into pieces of at most
// perPiece segments of mss payload bytes each: perPiece 1 is plain
// segmentation; more gives smaller super-frames, each for a device that
// segments them itself (a large send of perPiece*mss). For each piece it
// asks next for a buffer of n bytes, writes the piece there with its own
// IP length, IPv4 id (the first piece keeps the frame's; each one after
// it advances by the segments before it), TCP sequence number and flags
// (FIN and PSH only on the last piece, CWR only on the first) or UDP
// length, and its transport checksum as mode says; the IPv4 header
// checksum is always complete. next returning nil stops the split with
// ErrNoRoom. It returns the number of pieces written.
//
// UDP is cut the way the kernel's UDP segmentation offload cuts it: each
// segment is a datagram of its own (perPiece must be 1).
func Split(f []byte, l Layout, mss, perPiece int, mode Checksum, next func(n int) []byte) (int, error) {
	if mss <= 0 || perPiece <= 0 {
		return 0, ErrSegmentSize
	}
	if l.Proto == ProtoUDP {
		perPiece = 1
	}
	segs := Segments(l, mss)
	if segs > 0xffff {
		return 0, ErrTooMany
	}
	hdr := f[:l.Payload]
	payload := f[l.Payload:l.End]
	var id uint16
	var seq uint32
	var flags uint8
	if !l.V6 {
		id = be.Uint16(f[l.L3+4:])
	}
	if l.Proto == ProtoTCP {
		seq = be.Uint32(f[l.L4+4:])
		flags = f[l.L4+13]
	}
	step := mss * perPiece
	pieces := 0
	for off := 0; off < len(payload) || (off == 0 && len(payload) == 0); off += step {
		n := min(step, len(payload)-off)
		p := next(len(hdr) + n)
		if p == nil {
			return pieces, ErrNoRoom
		}
		p = p[:len(hdr)+n]
		copy(p, hdr)
		copy(p[len(hdr):], payload[off:off+n])
		pl := l
		pl.End = len(p)
		if l.V6 {
			be.PutUint16(p[l.L3+4:], uint16(len(p)-l.L4))
		} else {
			be.PutUint16(p[l.L3+2:], uint16(len(p)-l.L3))
			be.PutUint16(p[l.L3+4:], id+uint16(off/mss))
			FixIPv4Checksum(p, pl)
		}
		last := off+n >= len(payload)
		if l.Proto == ProtoTCP {
			t := p[l.L4:]
			be.PutUint32(t[4:], seq+uint32(off))
			fl := flags
			if !last {
				fl &^= FlagFIN | FlagPSH
			}
			if off > 0 {
				fl &^= FlagCWR
			}
			t[13] = fl
		} else {
			be.PutUint16(p[l.L4+4:], uint16(len(p)-l.L4))
		}
		FinishChecksum(p, pl, mode)
		pieces++
		if len(payload) == 0 {
			break
		}
	}
	return pieces, nil
}
