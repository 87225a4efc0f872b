package netvsc_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/frame"
	"github.com/vmbusd/vmbusd/frame/csum"
	"github.com/vmbusd/vmbusd/netvsc"
	"github.com/vmbusd/vmbusd/sim"
)

// tcpSuperFrame is a TCP/IPv4 super-frame of payload bytes for dst as a
// kernel TAP hands it over (IPv4 header complete, TCP checksum partial),
// with the offload that says so.
func tcpSuperFrame(dst []byte, payload int, seq uint32) ([]byte, sim.FrameOffload) {
	f := make([]byte, 14+20+20+payload)
	copy(f, dst)
	copy(f[6:], []byte{2, 0, 0, 0, 0, 9})
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	ip := f[14:34]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(len(f)-14))
	ip[8], ip[9] = 64, 6
	copy(ip[12:], []byte{198, 18, 0, 9, 198, 18, 0, 2})
	binary.BigEndian.PutUint16(ip[10:], ^csum.Fold(csum.Add(0, ip)))
	tcp := f[34:]
	binary.BigEndian.PutUint16(tcp[0:], 5001)
	binary.BigEndian.PutUint16(tcp[2:], 40000)
	binary.BigEndian.PutUint32(tcp[4:], seq)
	tcp[12], tcp[13] = 5<<4, 0x10
	for i := 54; i < len(f); i++ {
		f[i] = byte(i*7) ^ byte(seq)
	}
	return f, sim.FrameOffload{CsumStart: 34, CsumOffset: 16, MSS: 1460}
}

// rscRecv collects n frames from the NIC's queues.
func rscRecv(t *testing.T, n *netvsc.NIC, want int) []*frame.Packet {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []*frame.Packet
	rx := make([]*frame.Packet, 64)
	for len(out) < want {
		if ctx.Err() != nil {
			t.Fatalf("got %d frames of %d; stats %+v", len(out), want, n.Stats().Queues)
		}
		for _, q := range n.Queues() {
			k := q.RxBurst(rx)
			out = append(out, rx[:k]...)
		}
		if len(out) < want {
			wctx, wc := context.WithTimeout(ctx, 2*time.Millisecond)
			n.Queues()[0].Wait(wctx)
			wc()
		}
	}
	return out
}

// TestRSCReassemblesCoalescedFrames: a guest with Config.RSC gets each
// TCP super-frame the host coalesced as one packet, byte for byte, marked
// coalesced with the TCP checksum good and the IPv4 header checksum
// recomputed; a guest without it gets MTU-sized frames.
func TestRSCReassemblesCoalescedFrames(t *testing.T) {
	for _, rsc := range []bool{true, false} {
		_, sn, n := newNIC(t, sim.NICConfig{}, nil, netvsc.Config{RSC: rsc})
		if n.RSC() != rsc {
			t.Fatalf("RSC granted %v, asked %v", n.RSC(), rsc)
		}
		var frames [][]byte
		var offs []sim.FrameOffload
		for i := range 3 {
			f, o := tcpSuperFrame(n.MAC(), 30000+i*1000, uint32(i)*100000)
			frames, offs = append(frames, f), append(offs, o)
		}
		sn.DeliverOffload(frames, offs)
		if rsc {
			got := rscRecv(t, n, 3)
			for i, p := range got {
				if !bytes.Equal(p.Data(), frames[i]) {
					t.Fatalf("frame %d: %d bytes, want the %d-byte super-frame", i, p.Len(), len(frames[i]))
				}
				want := netvsc.MetaRxCoalesced | frame.MetaRxL4ChecksumOK | frame.MetaRxIPChecksumOK
				if p.Meta.Flags&want != want || p.Meta.MSS != 1460 || p.Meta.L4Off != 34 {
					t.Fatalf("frame %d: meta %+v, want flags %#x and MSS 1460", i, p.Meta, want)
				}
				if ^csum.Fold(csum.Add(0, p.Data()[14:34])) != 0 {
					t.Fatalf("frame %d: IPv4 header checksum does not verify", i)
				}
				p.Free()
			}
			q := n.Stats().Queues[0]
			if q.RxRSCFrames != 3 || q.RxRSCDropped != 0 {
				t.Fatalf("rsc frames %d dropped %d", q.RxRSCFrames, q.RxRSCDropped)
			}
			continue
		}
		segs := 0
		for _, f := range frames {
			segs += (len(f) - 54 + 1459) / 1460
		}
		for _, p := range rscRecv(t, n, segs) {
			if p.Len() > 1514 || p.Meta.Flags&netvsc.MetaRxCoalesced != 0 {
				t.Fatalf("a %d-byte frame (meta %#x) for a guest without RSC", p.Len(), p.Meta.Flags)
			}
			p.Free()
		}
	}
}
