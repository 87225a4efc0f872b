package netvsc

import (
	"encoding/binary"

	"github.com/vmbusd/vmbusd/frame"
	"github.com/vmbusd/vmbusd/frame/csum"
	"github.com/vmbusd/vmbusd/netvsc/rndis"
)

// Software segmentation of TSO super-frames (TCP frames the sender marked
// MetaTxLSO) when the host cannot do LSO for them: no GPA pool to send them
// from, or LSO not offered (docs/protocol/netvsc.md §4). The TCP payload is cut into
// segments of at most the sender's MSS that fit a send section, each a
// legal TCP segment with its headers and checksums rewritten here, copied
// into send sections like any small frame. This is what the sender asked
// for, so it is done; nothing else is ever cut up (tx.go).

const (
	etherTypeIPv4 = 0x0800
	etherTypeIPv6 = 0x86dd
	protoTCP      = 6
)

// segment sends a TSO super-frame in segments; false means not enough
// free sections or ring now (the packet stays the caller's). A frame that
// is not a well-formed TCP/IP frame is dropped (tx_too_big).
func (q *Queue) segment(p *frame.Packet, info *rndis.PacketInfo) bool {
	s := q.s
	data := p.Data()
	// A segment must be a legal frame and fit a send section with its
	// header and per-packet info.
	maxFrame := min(s.mtu+EthernetHeaderSize, s.aggMax-rndis.PacketHeaderSize-2*rndis.PPIUint32Size)
	drop := func() bool { return q.drop(p, &q.c.txTooBig) }
	if len(data) < EthernetHeaderSize+20 {
		return drop()
	}
	var sub rndis.PacketInfo // what every segment carries: hash and VLAN
	sub.Has = info.Has & (rndis.InfoHashValue | rndis.InfoVLAN)
	sub.HashValue, sub.VLAN = info.HashValue, info.VLAN
	et := binary.BigEndian.Uint16(data[12:])
	l3 := EthernetHeaderSize
	var l4, proto int
	switch et {
	case etherTypeIPv4:
		ihl := int(data[l3]&0xf) * 4
		if data[l3]>>4 != 4 || ihl < 20 || l3+ihl > len(data) {
			return drop()
		}
		l4, proto = l3+ihl, int(data[l3+9])
	case etherTypeIPv6:
		if len(data) < l3+40 {
			return drop()
		}
		l4, proto = l3+40, int(data[l3+6])
	default:
		return drop()
	}
	if proto != protoTCP || len(data) < l4+20 {
		return drop()
	}
	thl := int(data[l4+12]>>4) * 4
	hdr := l4 + thl
	if thl < 20 || hdr >= len(data) {
		return drop()
	}
	mss := maxFrame - hdr
	if p.Meta.MSS > 0 {
		mss = min(mss, int(p.Meta.MSS))
	}
	if mss <= 0 {
		return drop()
	}
	k := (len(data) - hdr + mss - 1) / mss
	if !q.reserve(k) {
		return false
	}
	q.c.txSegmented.inc()
	for i, off := 0, hdr; off < len(data); i, off = i+1, off+mss {
		n := min(mss, len(data)-off)
		seg := q.tx.segBuf[:hdr+n]
		copy(seg, data[:hdr])
		copy(seg[hdr:], data[off:off+n])
		fixTCPSegment(seg, et, l3, l4, uint32(off-hdr), i, off+n == len(data), off == hdr)
		q.copyPiece(seg, &sub)
	}
	q.tx.consumed(p)
	return true
}

// reserve reports whether k pieces surely fit: a section each (the worst
// case) and ring room for their sends.
func (q *Queue) reserve(k int) bool {
	if q.tx.sections() < k+1 {
		q.c.txNoSpace.inc()
		// Only sections will do, and this many (all of the queue's when
		// it has fewer: the retry then fails as it would have).
		q.tx.stop, q.tx.stopNeed = wantSection, int32(min(k+1, len(q.tx.secFrames)))
		return false
	}
	if q.ch.Out().Free() <= (k+2)*nvspSendSize {
		q.c.txBusy.inc()
		return false
	}
	return true
}

func (q *Queue) copyPiece(seg []byte, info *rndis.PacketInfo) {
	if q.copyFrame(seg, info) == copyOK {
		q.c.txSegments.inc()
	} else {
		q.c.txNoSpace.inc() // cannot happen after reserve
	}
}

// fixTCPSegment rewrites the headers of one segment: IP length (and IPv4
// id, +1 per segment, and checksum), TCP sequence number, flags (FIN and PSH only on the
// last, CWR only on the first), and the TCP checksum.
func fixTCPSegment(seg []byte, et uint16, l3, l4 int, delta uint32, idx int, last, first bool) {
	if et == etherTypeIPv4 {
		ip := seg[l3:l4]
		binary.BigEndian.PutUint16(ip[2:], uint16(len(seg)-l3))
		binary.BigEndian.PutUint16(ip[4:], binary.BigEndian.Uint16(ip[4:])+uint16(idx))
		binary.BigEndian.PutUint16(ip[10:], 0)
		binary.BigEndian.PutUint16(ip[10:], ^csum.Fold(csum.Add(0, ip)))
	} else {
		binary.BigEndian.PutUint16(seg[l3+4:], uint16(len(seg)-l4))
	}
	tcp := seg[l4:]
	binary.BigEndian.PutUint32(tcp[4:], binary.BigEndian.Uint32(tcp[4:])+delta)
	if !last {
		tcp[13] &^= 0x09 // FIN, PSH
	}
	if !first {
		tcp[13] &^= 0x80 // CWR
	}
	binary.BigEndian.PutUint16(tcp[16:], 0)
	var sum uint32
	if et == etherTypeIPv4 {
		sum = csum.Add(sum, seg[l3+12:l3+20])
	} else {
		sum = csum.Add(sum, seg[l3+8:l3+40])
	}
	sum += protoTCP + uint32(len(tcp))
	sum = csum.Add(sum, tcp)
	binary.BigEndian.PutUint16(tcp[16:], ^csum.Fold(sum))
}
