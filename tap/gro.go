package tap

import (
	"bytes"
	"encoding/binary"

	"github.com/vmbusd/vmbusd/frame"
	"github.com/vmbusd/vmbusd/frame/csum"
	"github.com/vmbusd/vmbusd/frame/gso"
)

// Receive coalescing (GRO) for the frames a NIC queue hands the TAP: the
// in-order TCP segments of one flow in a burst go to the kernel as one
// super-frame with a virtio-net GSO header, one write instead of dozens,
// and one pass through the kernel's TCP receive path. The rules are the
// kernel's own GRO rules (tcp_gro_receive), kept conservative:
//
//   - candidates: TCP over IPv4 without options or fragments, or over IPv6
//     without extension headers; flags ACK or ACK|PSH only; some payload;
//     checksums the host verified (a segment it did not is written alone,
//     for the kernel to check); no VLAN tag to restore.
//   - same flow (addresses, ports), same IP header fields (TOS, TTL, DF;
//     traffic class, flow label, hop limit), same TCP header length,
//     options, acknowledgment number and window.
//   - contiguous sequence numbers, every segment the size of the first
//     except the last, which may be shorter and ends the run; PSH ends it
//     too (and is set on the super-frame); 64 KiB at most.
//
// A frame of the same flow that cannot join writes the run out first, so a
// flow's frames keep their order; frames of different flows may be
// reordered against each other, as kernel GRO reorders them. Checksums are
// passed on as verified: NEEDS_CSUM with the pseudo-header sum (the kernel
// ignores DATA_VALID on a TAP write, vnet.go).

const (
	groMaxRuns = 8  // flows open at once in a burst
	groMaxSegs = 64 // segments in one super-frame (the iovec count)
	groMaxIP   = 0xffff
)

// groFlow identifies a run: the flow and what must match to join it.
type groFlow struct {
	addrs [32]byte // source, destination (IPv4: the first 8 bytes)
	ports uint32
	v6    bool
}

// groRun is an open run of segments.
type groRun struct {
	flow    groFlow
	n       int
	members [groMaxSegs]int16 // indices into the burst; [0] is the head
	l4      int
	payload int // header length: where every member's payload starts
	mss     int
	total   int // payload bytes
	nextSeq uint32
	closed  bool // PSH or a short segment: nothing may follow
	psh     bool
}

// groWrite is one write to the TAP: a frame (n == 1) or a super-frame.
type groWrite struct {
	hdr     vnetHdr
	members []int16 // into the burst; [0] is the head (with the headers)
	payload int     // offset of each later member's payload
}

// gro coalesces bursts. Not safe for concurrent use; its zero value works.
type gro struct {
	runs  [groMaxRuns]groRun
	nruns int
	one   [1]int16
	w     groWrite
}

// segment is what gro parses out of a candidate frame.
type segment struct {
	flow     groFlow
	l4, pl   int // transport header, payload
	seq      uint32
	flags    uint8
	len      int // payload bytes
	ok       bool
	tcpOrUDP bool // flow is meaningful even when ok is false
}

// parse reads a frame's TCP segment for coalescing.
func (s *segment) parse(p *frame.Packet) {
	*s = segment{}
	f := p.Data()
	if len(f) < ethHeaderLen+20 {
		return
	}
	var proto uint8
	var end int
	var options bool
	switch binary.BigEndian.Uint16(f[12:]) {
	case 0x0800:
		h := f[ethHeaderLen:]
		ihl := int(h[0]&0xf) * 4
		if h[0]>>4 != 4 || ihl < 20 || binary.BigEndian.Uint16(h[6:])&0x3fff != 0 {
			return // not IPv4, or a fragment
		}
		proto, end = h[9], ethHeaderLen+int(binary.BigEndian.Uint16(h[2:]))
		s.l4 = ethHeaderLen + ihl
		copy(s.flow.addrs[:8], h[12:20])
		options = ihl > 20
	case 0x86dd:
		if len(f) < ethHeaderLen+40 || f[ethHeaderLen]>>4 != 6 {
			return
		}
		h := f[ethHeaderLen:]
		proto, end = h[6], ethHeaderLen+40+int(binary.BigEndian.Uint16(h[4:]))
		s.l4 = ethHeaderLen + 40
		copy(s.flow.addrs[:], h[8:40])
		s.flow.v6 = true
	default:
		return
	}
	if end > len(f) || end < s.l4+8 || (proto != gso.ProtoTCP && proto != gso.ProtoUDP) {
		return
	}
	s.flow.ports = binary.BigEndian.Uint32(f[s.l4:])
	s.tcpOrUDP = true
	m := p.Meta.Flags
	if proto != gso.ProtoTCP || options || end != len(f) || end < s.l4+20 || m&frame.MetaVLAN != 0 ||
		m&frame.MetaRxL4ChecksumOK == 0 || (!s.flow.v6 && m&frame.MetaRxIPChecksumOK == 0) {
		return
	}
	t := f[s.l4:]
	thl := int(t[12]>>4) * 4
	s.flags = t[13]
	if thl < 20 || s.l4+thl >= end || (s.flags != gso.FlagACK && s.flags != gso.FlagACK|gso.FlagPSH) {
		return
	}
	s.pl = s.l4 + thl
	s.len = end - s.pl
	s.seq = binary.BigEndian.Uint32(t[4:])
	s.ok = true
}

// joins reports whether segment s of frame f may follow run r, whose
// head frame is h.
func (r *groRun) joins(s *segment, f, h []byte) bool {
	if r.closed || r.n == groMaxSegs || s.seq != r.nextSeq || s.pl != r.payload || s.len > r.mss ||
		r.payload-ethHeaderLen+r.total+s.len > groMaxIP {
		return false
	}
	// TCP: acknowledgment, header length/flags (PSH aside), window; then
	// the options.
	if !bytes.Equal(f[r.l4+8:r.l4+13], h[r.l4+8:r.l4+13]) || (f[r.l4+13]|gso.FlagPSH) != (h[r.l4+13]|gso.FlagPSH) ||
		!bytes.Equal(f[r.l4+14:r.l4+16], h[r.l4+14:r.l4+16]) || !bytes.Equal(f[r.l4+20:r.payload], h[r.l4+20:r.payload]) {
		return false
	}
	ip, hip := f[ethHeaderLen:], h[ethHeaderLen:]
	if r.flow.v6 {
		// Version, traffic class, flow label; hop limit.
		return bytes.Equal(ip[0:4], hip[0:4]) && ip[7] == hip[7]
	}
	// TOS; DF (no fragments reach here); TTL.
	return ip[1] == hip[1] && ip[6]&0x40 == hip[6]&0x40 && ip[8] == hip[8]
}

// burst coalesces pkts and calls write for each resulting write, in an
// order that keeps every flow's frames in sequence. write may modify the
// frames it is given (the head's headers are already fixed up).
func (g *gro) burst(pkts []*frame.Packet, write func(w *groWrite)) {
	g.nruns = 0
	var s segment
	for i, p := range pkts {
		s.parse(p)
		r := g.find(&s.flow, s.tcpOrUDP)
		if rxSuperFrame(p) {
			// Coalesced already (the NIC's RSC): after its flow's run,
			// as one super-frame of its own.
			if r != nil {
				g.flush(r, pkts, write)
			}
			g.super(i, pkts, write)
			continue
		}
		if !s.ok {
			if r != nil {
				g.flush(r, pkts, write)
			}
			g.single(i, pkts, write)
			continue
		}
		if r != nil {
			if r.joins(&s, p.Data(), pkts[r.members[0]].Data()) {
				r.members[r.n] = int16(i)
				r.n++
				r.total += s.len
				r.nextSeq += uint32(s.len)
				if s.flags&gso.FlagPSH != 0 {
					r.closed, r.psh = true, true
				}
				if s.len < r.mss {
					r.closed = true
				}
				continue
			}
			g.flush(r, pkts, write)
		}
		if g.nruns == groMaxRuns {
			g.flush(&g.runs[0], pkts, write)
		}
		r = &g.runs[g.nruns]
		g.nruns++
		*r = groRun{flow: s.flow, n: 1, l4: s.l4, payload: s.pl, mss: s.len, total: s.len,
			nextSeq: s.seq + uint32(s.len), psh: s.flags&gso.FlagPSH != 0}
		r.closed = r.psh
		r.members[0] = int16(i)
	}
	for g.nruns > 0 {
		g.flush(&g.runs[0], pkts, write)
	}
}

func (g *gro) find(f *groFlow, valid bool) *groRun {
	if !valid {
		return nil
	}
	for i := range g.nruns {
		if g.runs[i].flow == *f {
			return &g.runs[i]
		}
	}
	return nil
}

// flush writes run r out and removes it (the runs after it move up, so
// the oldest stays first).
func (g *gro) flush(r *groRun, pkts []*frame.Packet, write func(w *groWrite)) {
	if r.n == 1 {
		g.single(int(r.members[0]), pkts, write)
	} else {
		h := pkts[r.members[0]].Data()
		end := r.payload + r.total
		l := gso.Layout{L3: ethHeaderLen, L4: r.l4, Payload: r.payload, End: end, V6: r.flow.v6, Proto: gso.ProtoTCP}
		if r.flow.v6 {
			binary.BigEndian.PutUint16(h[ethHeaderLen+4:], uint16(end-r.l4))
		} else {
			binary.BigEndian.PutUint16(h[ethHeaderLen+2:], uint16(end-ethHeaderLen))
			gso.FixIPv4Checksum(h, l)
		}
		if r.psh {
			h[r.l4+13] |= gso.FlagPSH
		}
		binary.BigEndian.PutUint16(h[r.l4+16:], csum.Fold(gso.PseudoSum(h, l, end-r.l4)))
		g.w.hdr = vnetHdr{flags: vnetNeedsCsum, gsoType: vnetGSOTCPv4, hdrLen: uint16(r.payload),
			gsoSize: uint16(r.mss), csumStart: uint16(r.l4), csumOff: 16}
		if r.flow.v6 {
			g.w.hdr.gsoType = vnetGSOTCPv6
		}
		g.w.members, g.w.payload = r.members[:r.n], r.payload
		write(&g.w)
	}
	k := 0
	for i := range g.nruns {
		if &g.runs[i] != r {
			if k != i {
				g.runs[k] = g.runs[i]
			}
			k++
		}
	}
	g.nruns = k
}

// single writes one frame: a TCP or UDP checksum the host verified goes
// on as NEEDS_CSUM (the kernel then skips checking it), anything else
// with an empty header.
func (g *gro) single(i int, pkts []*frame.Packet, write func(w *groWrite)) {
	g.w.hdr = vnetHdr{}
	p := pkts[i]
	if m := p.Meta.Flags; m&frame.MetaRxL4ChecksumOK != 0 && m&frame.MetaVLAN == 0 {
		f := p.Data()
		if l, err := gso.Parse(f); err == nil && l.End == len(f) &&
			(l.Proto == gso.ProtoTCP || binary.BigEndian.Uint16(f[l.L4+6:]) != 0) { // UDP: 0 is "no checksum"
			gso.FinishChecksum(f, l, gso.Partial)
			g.w.hdr = vnetHdr{flags: vnetNeedsCsum, csumStart: uint16(l.L4), csumOff: uint16(l.CsumOffset())}
		}
	}
	g.one[0] = int16(i)
	g.w.members, g.w.payload = g.one[:], 0
	write(&g.w)
}

// rxSuperFrame reports whether a received frame is a TCP super-frame a
// NIC coalesced (receive segment coalescing): its Meta carries the MSS
// of the segments it stands for, derived from the NIC's MTU, and the
// checksum the NIC verified; it is no transmit request (MetaTxLSO).
func rxSuperFrame(p *frame.Packet) bool {
	m := &p.Meta
	return m.MSS != 0 && m.Flags&frame.MetaRxL4ChecksumOK != 0 && m.Flags&(frame.MetaTxLSO|frame.MetaVLAN) == 0
}

// superLayout checks a coalesced frame for writing as one GSO
// super-frame: TCP, no padding, more than one MSS of payload, within one
// IP datagram, and for IPv4 a header checksum the NIC verified.
func superLayout(p *frame.Packet) (gso.Layout, bool) {
	f := p.Data()
	l, err := gso.Parse(f)
	if err != nil || l.Proto != gso.ProtoTCP || l.End != len(f) || l.End-l.Payload <= int(p.Meta.MSS) ||
		l.Payload-l.L3+int(p.Meta.MSS) > groMaxIP || (!l.V6 && p.Meta.Flags&frame.MetaRxIPChecksumOK == 0) {
		return l, false
	}
	return l, true
}

// super writes a coalesced frame as one super-frame: GSO TCP with the
// frame's MSS, its checksum passed on as verified (NEEDS_CSUM with the
// pseudo-header sum, as flush does); a frame that does not qualify goes
// as single does.
func (g *gro) super(i int, pkts []*frame.Packet, write func(w *groWrite)) {
	p := pkts[i]
	l, ok := superLayout(p)
	if !ok {
		g.single(i, pkts, write)
		return
	}
	f := p.Data()
	gso.FinishChecksum(f, l, gso.Partial)
	g.w.hdr = vnetHdr{flags: vnetNeedsCsum, gsoType: vnetGSOTCPv4, hdrLen: uint16(l.Payload),
		gsoSize: p.Meta.MSS, csumStart: uint16(l.L4), csumOff: 16}
	if l.V6 {
		g.w.hdr.gsoType = vnetGSOTCPv6
	}
	if f[l.L4+13]&gso.FlagCWR != 0 {
		g.w.hdr.gsoType |= vnetGSOECN
	}
	g.one[0] = int16(i)
	g.w.members, g.w.payload = g.one[:], 0
	write(&g.w)
}
