package netvsc

import (
	"github.com/vmbusd/vmbusd/frame"
	"github.com/vmbusd/vmbusd/frame/gso"
	"github.com/vmbusd/vmbusd/netvsc/rndis"
)

// Large sends (docs/protocol/netvsc.md §3.4 TCP_LARGESEND_PKTINFO, §4): a TCP
// super-frame marked MetaTxLSO goes to the host whole with the LSOv2
// per-packet info when it fits a send section (as Linux copies any send
// smaller than a section) or can go GPA-direct; otherwise it is cut into
// smaller large sends that each fill a section, so the host still does the
// segmentation and the checksums; only when the host granted no LSO is it
// segmented here (segment.go).

// TxOffloads are the transmit offloads the host accepted for this
// configuration (OID_TCP_OFFLOAD_PARAMETERS): what a frame's Meta may ask
// for. Without one, the sender finishes the checksums itself.
// TxOffloads returns the transmit offloads the host granted.
func (n *NIC) TxOffloads() frame.TxOffloads {
	o := n.session().off
	return frame.TxOffloads{IPv4Checksum: o.ip4, TCP4Checksum: o.tcp4, TCP6Checksum: o.tcp6,
		UDP4Checksum: o.udp4, UDP6Checksum: o.udp6, LSO4: o.lso4, LSO6: o.lso6}
}

// sendLSOPieces sends a large send that neither fits a section nor can go
// GPA-direct as pieces of whole segments, each a large send of its own
// that fills a section (the last, when it is a single segment, a plain
// frame with the checksum offload or a checksum computed here). The
// pieces are written straight into the sections. False means not enough
// sections or ring now (the packet stays the caller's).
func (q *Queue) sendLSOPieces(p *frame.Packet, info *rndis.PacketInfo) bool {
	s := q.s
	data := p.Data()
	mss := int(p.Meta.MSS)
	l, err := gso.Parse(data)
	v6 := p.Meta.Flags&frame.MetaTxIPv6 != 0
	if err != nil || l.Proto != gso.ProtoTCP || l.V6 != v6 || mss <= 0 || l.Payload+mss > s.mtu+EthernetHeaderSize {
		return q.segment(p, info) // the software path decides (and drops what it cannot cut)
	}
	var lsoInfo, oneInfo rndis.PacketInfo // every piece carries the hash and VLAN
	lsoInfo.Has = info.Has & (rndis.InfoHashValue | rndis.InfoVLAN)
	lsoInfo.HashValue, lsoInfo.VLAN = info.HashValue, info.VLAN
	oneInfo = lsoInfo
	lsoInfo.SetLSO(rndis.NewLSOv2(mss, l.L4, v6))
	limit := s.off.lso4
	ipFlag, csFlag := rndis.TxChecksumIPv4, frame.MetaTxIPv4|frame.MetaTxTCPChecksum
	if v6 {
		limit, ipFlag, csFlag = s.off.lso6, rndis.TxChecksumIPv6, frame.MetaTxIPv6|frame.MetaTxTCPChecksum
	}
	oneMode := gso.Full
	if s.off.csum(csFlag) {
		oneInfo.SetChecksum(uint32(rndis.NewTxChecksum(ipFlag|rndis.TxChecksumTCP, l.L4)))
		oneMode = gso.Partial
	}
	per := min(s.aggMax-rndis.PacketHeaderSize-lsoInfo.PPILen(), limit) - l.Payload
	per /= mss
	if per < 2 {
		return q.segment(p, info)
	}
	segs := gso.Segments(l, mss)
	if !q.reserve((segs + per - 1) / per) {
		return false
	}
	var single []byte // a last piece of one segment: not a large send
	lso := 0
	next := func(n int) []byte {
		pi := &lsoInfo
		if n-l.Payload <= mss {
			pi = &oneInfo
		}
		dst, r := q.allocFrame(n, pi)
		if r != copyOK {
			return nil // cannot happen after reserve
		}
		if pi == &oneInfo {
			single = dst
		} else {
			lso++
		}
		return dst
	}
	if _, err := gso.Split(data, l, mss, per, gso.LSOSeed, next); err != nil {
		q.c.txNoSpace.inc() // cannot happen after reserve
	}
	if single != nil {
		sl := l
		sl.End = len(single)
		gso.FinishChecksum(single, sl, oneMode)
	}
	q.c.txLSO.add(uint64(lso))
	q.tx.consumed(p)
	return true
}
