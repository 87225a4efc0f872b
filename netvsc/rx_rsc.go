package netvsc

// Receive segment coalescing over VMBus (docs/protocol/netvsc.md §3.4),
// when Config.RSC asked for it and the host granted it: a TCP frame the
// host coalesced arrives as fragments, one RNDIS message each, in
// consecutive ranges of one transfer-page packet, each marked with the
// packet-id per-packet info {version 1, SUBALLOC, 1ST_FRAG on the first,
// LAST_FRAG on the last, the frame's id}. The fragments are copied, in
// order, into one packet of the queue's RSC pool (64 KiB buffers, made on
// first use), which RxBurst returns marked MetaRxCoalesced with the first
// fragment's VLAN, hash and checksum metadata.
//
// The host is not trusted: a fragment of another version, one without a
// first fragment, one with another id than the open frame's, a frame
// beyond 64 KiB, and a frame whose last fragment is missing from the
// packet are dropped and counted (rx_queue_N_rsc_dropped), the rest of
// their fragments skipped; nothing is held in the receive buffer.

import (
	"github.com/vmbusd/vmbusd/frame"
	"github.com/vmbusd/vmbusd/frame/csum"
	"github.com/vmbusd/vmbusd/frame/gso"
	"github.com/vmbusd/vmbusd/netvsc/rndis"
)

// MetaRxCoalesced marks a frame RxBurst reassembled from the host's RSC
// fragments: a TCP frame up to 64 KiB, larger than the MTU, whose TCP
// checksum the host verified on the segments it coalesced
// (MetaRxL4ChecksumOK) but did not recompute. Meta.MSS (with L3Off and
// L4Off) is the segment size it stands for: the MTU less its headers.
const MetaRxCoalesced frame.MetaFlags = 1 << 14

const (
	// rscFrameMax is the largest coalesced frame: one IP datagram (64
	// KiB, plus the IPv6 header) behind the Ethernet header.
	rscFrameMax = EthernetHeaderSize + 40 + 65535
	// rscPoolPackets is the size of a queue's RSC pool.
	rscPoolPackets = 128
)

// rscState is a queue's reassembly of one coalesced frame. The queue's
// inMu guards it.
type rscState struct {
	pool *frame.Pool   // made on the first coalesced frame
	pkt  *frame.Packet // the frame being filled; nil when none is open
	n    int           // its bytes so far
	id   uint16        // the open (or skipped) frame's packet id
	skip bool          // the frame with id is being dropped: ignore its fragments
}

// isFragment reports whether f is an RSC fragment the queue reassembles.
func (q *Queue) isFragment(f *rxFrame) bool {
	return f.infoOK && f.info.Has&rndis.InfoPktID != 0 && f.info.PktID.Flags()&rndis.PktInfoSubAlloc != 0 && q.s.off.rsc
}

// rxFragment adds one fragment to the open frame, or opens one. inMu is
// held.
func (q *Queue) rxFragment(f *rxFrame) {
	r, st := &q.rx, &q.rx.rsc
	id := f.info.PktID
	flags := id.Flags()
	if id.Version() != rndis.PktInfoIDVersion1 {
		q.rscDrop()
		return
	}
	if flags&rndis.PktInfo1stFrag != 0 {
		if st.pkt != nil {
			q.rscDrop() // its last fragment never came
		}
		st.id, st.skip = id.ID(), false
		if r.hLen > 0 || r.full() {
			// Frames wait in the receive buffer (they go first) or
			// nothing could take this one: dropped, not held.
			q.c.rxNoMemory.inc()
			st.skip = true
		} else if st.pkt = q.rscPacket(); st.pkt == nil {
			q.c.rxNoMemory.inc()
			st.skip = true
		}
		st.n = 0
	} else if st.skip && id.ID() == st.id {
		if flags&rndis.PktInfoLastFrag != 0 {
			st.skip = false
		}
		return
	} else if st.pkt == nil || id.ID() != st.id {
		if st.pkt != nil {
			q.rscDrop() // the open frame: another frame's fragment came
		}
		q.rscDrop() // a fragment without its first: its frame
		st.id, st.skip = id.ID(), flags&rndis.PktInfoLastFrag == 0
		return
	}
	if st.skip {
		if flags&rndis.PktInfoLastFrag != 0 {
			st.skip = false
		}
		return
	}
	if f.n > st.pkt.Cap()-st.n {
		q.rscDrop()
		st.id, st.skip = id.ID(), flags&rndis.PktInfoLastFrag == 0
		return
	}
	b := st.pkt.SetLen(st.n + f.n)
	copy(b[st.n:], q.s.recv[f.off:f.off+f.n])
	st.n += f.n
	if flags&rndis.PktInfo1stFrag != 0 {
		p := st.pkt
		p.Meta = frame.Meta{}
		if f.infoOK {
			applyRxInfo(&p.Meta, &f.info)
			coalescedChecksum(p, &f.info)
		}
		p.Meta.Flags |= MetaRxCoalesced
	}
	if flags&rndis.PktInfoLastFrag == 0 {
		return
	}
	p := st.pkt
	st.pkt, st.n = nil, 0
	if r.full() {
		q.c.rxNoMemory.inc()
		p.Free()
		return
	}
	q.segmentSize(p)
	q.c.rxRSCFrames.inc()
	r.xferPkts++
	r.xferBytes += uint64(p.Len())
	r.deliver(p)
}

// segmentSize records in a coalesced TCP frame's Meta the segment size
// it stands for, which the host does not send: the MTU less the frame's
// IP and TCP headers (Meta.MSS, with L3Off and L4Off), so that a
// consumer can hand it on as one super-frame (a TAP's GSO).
func (q *Queue) segmentSize(p *frame.Packet) {
	l, err := gso.Parse(p.Data())
	if err != nil || l.Proto != gso.ProtoTCP || l.End != p.Len() {
		return
	}
	mss := q.s.mtu - (l.Payload - l.L3)
	if mss <= 0 || mss > 0xffff {
		return
	}
	p.Meta.MSS, p.Meta.L3Off, p.Meta.L4Off = uint16(mss), uint16(l.L3), uint16(l.L4)
}

// rscDrop drops the open frame, if any, and counts a dropped frame.
func (q *Queue) rscDrop() {
	st := &q.rx.rsc
	if st.pkt != nil {
		st.pkt.Free()
		st.pkt, st.n = nil, 0
	}
	st.skip = false
	q.c.rxRSCDropped.inc()
}

// rscInterrupted is called for a whole frame between fragments: the
// open frame's fragments must be consecutive, so it is dropped (Linux
// resets its accumulator there too).
func (q *Queue) rscInterrupted() {
	st := &q.rx.rsc
	if st.pkt != nil {
		q.rscDrop()
	}
	st.skip = false
}

// rxXferEnd is called once a transfer-page packet is parsed: a frame
// still open lost its last fragment (the fragments of one frame are all
// in one packet).
func (q *Queue) rxXferEnd() {
	st := &q.rx.rsc
	if st.pkt != nil {
		q.rscDrop()
	}
	st.skip = false
}

// rscPacket takes a packet from the queue's RSC pool, making the pool on
// first use.
func (q *Queue) rscPacket() *frame.Packet {
	st := &q.rx.rsc
	if st.pool == nil {
		p, err := NewPool(rscPoolPackets, rscFrameMax, nil)
		if err != nil {
			return nil
		}
		st.pool = p
	}
	return st.pool.Get()
}

// coalescedChecksum applies the checksum rule for a coalesced frame
// (docs/protocol/netvsc.md §3.4): with IP ok and IP value invalid the
// host did not recompute the IPv4 header checksum, so it is recomputed
// here (as Linux does) and the header marked good.
func coalescedChecksum(p *frame.Packet, pi *rndis.PacketInfo) {
	if pi.Has&rndis.InfoChecksum == 0 {
		return
	}
	c := rndis.RxChecksum(pi.Checksum)
	const want = rndis.RxChecksumIPOK | rndis.RxChecksumIPValueInvalid
	if c&want != want || c&(rndis.RxChecksumTCPFailed|rndis.RxChecksumUDPFailed|rndis.RxChecksumIPFailed) != 0 {
		return
	}
	b := p.Data()
	if len(b) < EthernetHeaderSize+20 || le.Uint16(b[12:]) != 0x0008 || b[EthernetHeaderSize]>>4 != 4 {
		return // not IPv4 (ethertype 0x0800, read little-endian)
	}
	ihl := int(b[EthernetHeaderSize]&0xf) * 4
	if ihl < 20 || EthernetHeaderSize+ihl > len(b) {
		return
	}
	h := b[EthernetHeaderSize : EthernetHeaderSize+ihl]
	h[10], h[11] = 0, 0
	c16 := ^csum.Fold(csum.Add(0, h))
	h[10], h[11] = byte(c16>>8), byte(c16)
	p.Meta.Flags |= frame.MetaRxIPChecksumOK
}

// RSC reports whether the host granted receive segment coalescing
// (Config.RSC): RxBurst may then return coalesced frames larger than the
// MTU, marked MetaRxCoalesced.
func (n *NIC) RSC() bool { return n.session().off.rsc }
