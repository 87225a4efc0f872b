package netvsp

// Receive segment coalescing over VMBus (docs/protocol/netvsc.md §3.4): a
// TCP super-frame from a port that reads them (a kernel TAP with a
// virtio-net header) reaches a guest that enabled RSC as one coalesced
// frame, written as fragments across consecutive receive sub-allocations
// of one transfer-page packet:
//
//	range i   RNDIS PACKET_MSG, one sub-allocation
//	  PPIs    first fragment: checksum (TCP ok and TCP value invalid; for
//	          IPv4 also IP ok and IP value invalid: the headers were not
//	          recomputed for the coalesced frame), hash value and hash info
//	          when RSS is on; every fragment: the packet-id PPI
//	          {version 1, SUBALLOC | 1ST_FRAG on the first | LAST_FRAG on
//	          the last, the frame's packet id}
//	  data    the next piece of the frame
//
// A guest without RSC for the frame's family (DPDK, an older guest), and
// the VF path, get the super-frame cut into MTU-sized frames with complete
// checksums, exactly as before.

import (
	"github.com/vmbusd/vmbusd/netvsc/nvsp"
	"github.com/vmbusd/vmbusd/netvsc/rndis"
	"github.com/vmbusd/vmbusd/sim/vswitch"
	"github.com/vmbusd/vmbusd/vmbus"
)

// rscMinSubAlloc is the smallest sub-allocation the host coalesces into:
// below it the fragments' headers would outweigh their data.
const rscMinSubAlloc = 256

// rscHeaders returns the RNDIS header and per-packet info bytes of a
// coalesced frame's first and later fragments.
func rscHeaders(hashed bool) (first, rest int) {
	ppis := 2 // checksum, packet id
	if hashed {
		ppis += 2 // hash value, hash info
	}
	return rndis.PacketHeaderSize + ppis*rndis.PPIUint32Size, rndis.PacketHeaderSize + rndis.PPIUint32Size
}

// rscFragments returns how many sub-allocations of sub bytes a frame of
// n bytes takes coalesced.
func rscFragments(n, sub int, hashed bool) int {
	h1, h2 := rscHeaders(hashed)
	if n <= sub-h1 {
		return 1
	}
	d := sub - h2
	return 1 + (n-(sub-h1)+d-1)/d
}

// putFragments writes queued coalesced frame s as fragments into the
// sub-allocations from cur on and appends their ranges.
func (ch *nicChan) putFragments(ranges []byte, s *rxSlot, cur, sub int) []byte {
	ss := ch.ss
	fr := s.frame()
	c := rndis.RxChecksumTCPOK | rndis.RxChecksumTCPValueInvalid
	if len(fr) > vswitch.EthHeaderLen && be.Uint16(fr[12:]) == vswitch.EthTypeIPv4 {
		c |= rndis.RxChecksumIPOK | rndis.RxChecksumIPValueInvalid
	}
	id := ch.rscID
	ch.rscID++
	h1, h2 := rscHeaders(s.typ != 0)
	for off, first := 0, true; off < len(fr); first = false {
		var info rndis.PacketInfo
		hdr := h2
		flags := uint8(rndis.PktInfoSubAlloc)
		if first {
			hdr = h1
			flags |= rndis.PktInfo1stFrag
			info.SetChecksum(uint32(c))
			if s.typ != 0 {
				info.SetHashValue(s.hash)
				info.SetHashInfo(s.typ)
			}
		}
		n := min(sub-hdr, len(fr)-off)
		if off+n == len(fr) {
			flags |= rndis.PktInfoLastFrag
		}
		info.SetPktID(rndis.NewPktInfoID(flags, id))
		at := cur * sub
		dst := ss.recv[at : at+sub]
		rndis.PutPacketAt(dst, &info, fr[off:off+n], hdr, sub)
		ch.corruptRx(dst, &info)
		roff := uint32(at)
		if ss.n.faults.take(NICFaultRangeOutsideBuffer) {
			roff = uint32(len(ss.recv)) - 8
		}
		ranges = vmbus.AppendTransferRange(ranges, uint32(sub), roff)
		off += n
		cur++
	}
	ch.ss.n.st.rxCoalesced.Add(1)
	return ranges
}

// DeliverOffload implements vswitch.OffloadUplink: frames without an MSS
// go as Deliver sends them; a TCP super-frame goes coalesced to a guest
// with RSC for its family, and cut into MTU-sized frames to any other.
func (n *NIC) DeliverOffload(frames [][]byte, offs []vswitch.FrameOffload) int {
	ss := n.sess.Load()
	if ss == nil {
		n.st.rxNoGuest.Add(uint64(len(frames)))
		return 0
	}
	queued, run := 0, 0
	for i, f := range frames {
		if i >= len(offs) || offs[i].MSS == 0 {
			continue
		}
		if run < i {
			queued += n.deliverWith(ss, frames[run:i])
		}
		run = i + 1
		queued += n.deliverSuper(ss, f, offs[i])
	}
	if run < len(frames) {
		queued += n.deliverWith(ss, frames[run:])
	}
	return queued
}

func (n *NIC) deliverWith(ss *nicSession, frames [][]byte) int {
	if n.vf != nil {
		return n.vf.deliver(ss, frames)
	}
	return ss.deliver(frames)
}

// deliverSuper delivers one TCP super-frame.
func (n *NIC) deliverSuper(ss *nicSession, f []byte, o vswitch.FrameOffload) int {
	fl, ok := vswitch.CheckSuperFrame(f, o)
	if !ok {
		n.st.rxDropped.Add(1)
		return 0
	}
	cfg := ss.cfg.Load()
	if cfg.rscOn(fl.V6) && o.Segments(f) > 1 && (n.vf == nil || !n.vf.steering(cfg)) &&
		cfg.subSize >= rscMinSubAlloc && cfg.perQueue > 0 {
		k := rscFragments(len(f), int(cfg.subSize), cfg.rss != nil)
		if k <= nvsp.RSCMax && uint32(k) <= cfg.perQueue {
			chans := ss.channels()
			q := 0
			if ss.enqueue(cfg, chans, f, o.Segments(f), nil) {
				q = 1
			}
			ss.pokeAll(chans)
			return q
		}
	}
	c, _ := n.cuts.Get().(*cutBuf)
	if c == nil {
		c = &cutBuf{slab: make([]byte, cutSlab), frames: make([][]byte, 0, cutMaxFrames)}
	}
	c.pos, c.frames = 0, c.frames[:0]
	vswitch.CutSuperFrame(f, fl, o, c.add)
	if segs := o.Segments(f); len(c.frames) < segs {
		n.st.rxDropped.Add(uint64(segs - len(c.frames))) // an MSS too small for the scratch
	}
	n.st.rxCut.Add(1)
	q := n.deliverWith(ss, c.frames)
	clear(c.frames)
	n.cuts.Put(c)
	return q
}

// A cutBuf is scratch for cutting one super-frame: its segments follow
// each other in slab.
type cutBuf struct {
	slab   []byte
	pos    int
	frames [][]byte
}

const (
	cutSlab      = 256 << 10
	cutMaxFrames = 1024
)

func (c *cutBuf) add(n int) []byte {
	if c.pos+n > len(c.slab) || len(c.frames) == cap(c.frames) {
		return nil
	}
	b := c.slab[c.pos : c.pos+n : c.pos+n]
	c.pos = (c.pos + n + 7) &^ 7
	c.frames = append(c.frames, b)
	return b
}
