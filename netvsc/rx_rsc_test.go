package netvsc

import (
	"testing"

	"github.com/vmbusd/vmbusd/frame"
	"github.com/vmbusd/vmbusd/netvsc/nvsp"
	"github.com/vmbusd/vmbusd/netvsc/rndis"
	"github.com/vmbusd/vmbusd/vmbus"
)

// rscQueue is a queue with RSC on over recv, enough for its receive
// path: its session runs, its staging queue takes stage packets.
func rscQueue(t testing.TB, recv []byte, stage int) *Queue {
	s := &session{recv: recv}
	s.running.Store(true)
	s.off.rsc = true
	pool, err := NewPool(64, 1600, nil)
	if err != nil {
		t.Fatal(err)
	}
	q := &Queue{s: s, pool: pool}
	q.rx.init(stage)
	q.rx.initHeld(256)
	return q
}

// rscFrag is one fragment the fuzzer or a test sends: its packet-id
// flags and id, and its data length; its data is its index repeated.
type rscFrag struct {
	version, flags uint8
	id             uint16
	n              int
}

// putFrags writes frags as RNDIS messages of 512-byte sub-allocations into
// recv and returns the transfer-page packet naming them.
func putFrags(t testing.TB, recv []byte, frags []rscFrag) vmbus.Packet {
	hdr := vmbus.TransferPageHeader(nil, nvsp.RecvBufID, len(frags))
	for i, f := range frags {
		var info rndis.PacketInfo
		info.SetPktID(rndis.PktInfoID(f.version) | rndis.PktInfoID(f.flags)<<8 | rndis.PktInfoID(f.id)<<16)
		data := make([]byte, f.n)
		for k := range data {
			data[k] = byte(i)
		}
		off := i * 512
		if _, err := rndis.PutPacketAt(recv[off:off+512], &info, data, rndis.PacketHeaderSize+info.PPILen(), 512); err != nil {
			t.Fatal(err)
		}
		hdr = vmbus.AppendTransferRange(hdr, 512, uint32(off))
	}
	p, err := xferPacket(t, 0, hdr, nvspData)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// checkCoalesced checks that every packet the queue staged is a run of
// consecutive fragments i..j of frags with one id, 1ST_FRAG on i only and
// LAST_FRAG on j, their data in order, and frees them.
func checkCoalesced(t *testing.T, q *Queue, frags []rscFrag) int {
	var one [1]*frame.Packet
	n := 0
	for q.rx.unstage(one[:]) == 1 {
		p := one[0]
		b := p.Data()
		if len(b) == 0 || int(b[0]) >= len(frags) {
			t.Fatalf("packet of %d bytes, meta %#x", len(b), p.Meta.Flags)
		}
		i := int(b[0])
		if p.Meta.Flags&MetaRxCoalesced == 0 {
			// a whole frame: one range without SUBALLOC
			if frags[i].flags&rndis.PktInfoSubAlloc != 0 || frags[i].n != len(b) {
				t.Fatalf("uncoalesced packet of %d bytes from fragment %d (%+v)", len(b), i, frags[i])
			}
			p.Free()
			n++
			continue
		}
		for k := i; len(b) > 0; k++ {
			f := frags[k]
			if f.n > len(b) || (k == i) != (f.flags&rndis.PktInfo1stFrag != 0) || f.id != frags[i].id || f.version != 1 {
				t.Fatalf("fragment %d (%+v) in the frame opened by %d", k, f, i)
			}
			for _, c := range b[:f.n] {
				if c != byte(k) {
					t.Fatalf("fragment %d's bytes out of place", k)
				}
			}
			b = b[f.n:]
			if len(b) == 0 && f.flags&rndis.PktInfoLastFrag == 0 {
				t.Fatalf("frame ends at fragment %d without LAST_FRAG", k)
			}
		}
		p.Free()
		n++
	}
	return n
}

func TestRSCReassemblyRules(t *testing.T) {
	const s, f, l = rndis.PktInfoSubAlloc, rndis.PktInfo1stFrag, rndis.PktInfoLastFrag
	for _, tc := range []struct {
		name          string
		frags         []rscFrag
		frames, drops uint64
	}{
		{"whole", []rscFrag{{1, s | f, 7, 100}, {1, s, 7, 400}, {1, s | l, 7, 50}}, 1, 0},
		{"one fragment", []rscFrag{{1, s | f | l, 7, 100}}, 1, 0},
		{"no start", []rscFrag{{1, s, 7, 100}, {1, s | l, 7, 50}, {1, s | f | l, 8, 10}}, 1, 1},
		{"other id", []rscFrag{{1, s | f, 7, 100}, {1, s | l, 8, 50}}, 0, 2},
		{"restart", []rscFrag{{1, s | f, 7, 100}, {1, s | f, 8, 100}, {1, s | l, 8, 50}}, 1, 1},
		{"no last", []rscFrag{{1, s | f, 7, 100}, {1, s, 7, 400}}, 0, 1},
		{"version", []rscFrag{{2, s | f | l, 7, 100}}, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recv := make([]byte, 512*len(tc.frags))
			q := rscQueue(t, recv, 16)
			p := putFrags(t, recv, tc.frags)
			if err := parseXfer(&p, recv, q.rx.scratch, q); err != nil {
				t.Fatal(err)
			}
			if got := checkCoalesced(t, q, tc.frags); uint64(got) != tc.frames {
				t.Fatalf("%d frames, want %d", got, tc.frames)
			}
			if q.c.rxRSCFrames.load() != tc.frames || q.c.rxRSCDropped.load() != tc.drops {
				t.Fatalf("counted %d frames, %d dropped; want %d, %d", q.c.rxRSCFrames.load(), q.c.rxRSCDropped.load(), tc.frames, tc.drops)
			}
			q.rx.freeAll()
			if q.rx.rsc.pool != nil && q.rx.rsc.pool.Available() != rscPoolPackets {
				t.Fatalf("RSC pool: %d of %d back", q.rx.rsc.pool.Available(), rscPoolPackets)
			}
		})
	}
}

// FuzzRSCReassembly feeds arbitrary fragment sequences (packet-id
// version, flags, id, length) through the receive path of a queue with
// RSC on, split over two transfer pages: it must never panic, every frame
// it delivers must be a run of fragments that the rules allow, byte for
// byte, and no packet may leak.
func FuzzRSCReassembly(f *testing.F) {
	f.Add([]byte{1, 3, 0, 100, 1, 1, 0, 200, 1, 5, 0, 50}, uint8(3))
	f.Add([]byte{1, 1, 0, 100, 1, 7, 1, 20, 1, 5, 0, 50}, uint8(1))
	f.Add([]byte{1, 3, 2, 100, 1, 1, 2, 200}, uint8(1))
	f.Fuzz(func(t *testing.T, in []byte, split uint8) {
		var frags []rscFrag
		for ; len(in) >= 4 && len(frags) < 64; in = in[4:] {
			frags = append(frags, rscFrag{version: in[0] % 3, flags: in[1] & 7, id: uint16(in[2] % 4), n: 1 + int(in[3])%400})
		}
		if len(frags) == 0 {
			return
		}
		cut := int(split) % (len(frags) + 1)
		recv := make([]byte, 512*len(frags))
		q := rscQueue(t, recv, 8)
		for _, part := range [][]rscFrag{frags[:cut], frags[cut:]} {
			if len(part) == 0 {
				continue
			}
			r := make([]byte, 512*len(part))
			p := putFrags(t, r, part)
			q.s.recv = r
			if err := parseXfer(&p, r, q.rx.scratch, q); err != nil {
				t.Fatal(err)
			}
			checkCoalesced(t, q, part)
		}
		q.rx.freeAll()
		if q.rx.rsc.pool != nil && q.rx.rsc.pool.Available() != rscPoolPackets {
			t.Fatalf("RSC pool: %d of %d back", q.rx.rsc.pool.Available(), rscPoolPackets)
		}
	})
}

// BenchmarkRSCReceive measures the guest's RSC receive path: a transfer
// page of 1500-byte fragments of one 64 KiB coalesced frame parsed,
// reassembled into one packet, and handed out.
func BenchmarkRSCReceive(b *testing.B) {
	const fragLen = 1500 - rndis.PacketHeaderSize - 2*rndis.PPIUint32Size
	var frags []rscFrag
	for left := 65000; left > 0; left -= fragLen {
		fl := uint8(rndis.PktInfoSubAlloc)
		if len(frags) == 0 {
			fl |= rndis.PktInfo1stFrag
		}
		if left <= fragLen {
			fl |= rndis.PktInfoLastFrag
		}
		frags = append(frags, rscFrag{1, fl, 1, min(left, fragLen)})
	}
	recv := make([]byte, 2048*len(frags)) // 2 KiB sub-allocations
	hdr := vmbus.TransferPageHeader(nil, nvsp.RecvBufID, len(frags))
	for i, f := range frags {
		var info rndis.PacketInfo
		info.SetPktID(rndis.NewPktInfoID(f.flags, f.id))
		off := i * 2048
		rndis.PutPacketAt(recv[off:off+2048], &info, make([]byte, f.n), rndis.PacketHeaderSize+info.PPILen(), 2048)
		hdr = vmbus.AppendTransferRange(hdr, 2048, uint32(off))
	}
	p, err := xferPacket(b, 0, hdr, nvspData)
	if err != nil {
		b.Fatal(err)
	}
	q := rscQueue(b, recv, 16)
	var one [1]*frame.Packet
	b.SetBytes(65000)
	b.ReportAllocs()
	// warm: the RSC pool is made on first use
	parseXfer(&p, recv, q.rx.scratch, q)
	q.rx.unstage(one[:])
	one[0].Free()
	b.ResetTimer()
	for range b.N {
		if err := parseXfer(&p, recv, q.rx.scratch, q); err != nil {
			b.Fatal(err)
		}
		if q.rx.unstage(one[:]) != 1 || one[0].Len() != 65000 {
			b.Fatal("no coalesced frame")
		}
		one[0].Free()
	}
}
