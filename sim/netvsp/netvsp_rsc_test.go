package netvsp

import (
	"bytes"
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/netvsc/nvsp"
	"github.com/vmbusd/vmbusd/netvsc/rndis"
	"github.com/vmbusd/vmbusd/sim/bus"
	"github.com/vmbusd/vmbusd/sim/vswitch"
	"github.com/vmbusd/vmbusd/vmbus"
)

// superFrame is a TCP super-frame for the guest as a kernel TAP hands it
// over: headers for the whole frame, the TCP checksum partial, the MSS in
// its offload.
func superFrame(g *tguest, v6 bool, payload int) ([]byte, vswitch.FrameOffload) {
	f := tcpFrame(v6, payload)
	copy(f, g.nic.MAC())
	fl := vswitch.ParseFlow(f)
	if !v6 {
		h := f[fl.L3:fl.L4Off]
		be.PutUint16(h[10:], 0)
		be.PutUint16(h[10:], ^foldSum(h))
	}
	be.PutUint16(f[fl.L4Off+16:], uint16(vswitch.PseudoSum(&fl, vswitch.IPProtoTCP, fl.L4End-fl.L4Off)))
	mss := 1500 - (fl.L4Off - fl.L3) - 20 // a full MTU per segment
	return f, vswitch.FrameOffload{CsumStart: uint16(fl.L4Off), CsumOffset: 16, MSS: uint16(mss), IPv6: v6}
}

func foldSum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(be.Uint16(b[i:]))
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

func setRSC(t *testing.T, g *tguest, v4, v6 uint8) {
	t.Helper()
	p := rndis.OffloadParameters{Header: rndis.OffloadParametersHeader(g.version), RSCIPv4: v4, RSCIPv6: v6}
	if st := g.set(rndis.OIDTCPOffloadParameters, p.Marshal(nil)); st != rndis.StatusSuccess {
		t.Fatalf("offload parameters: %v", st)
	}
}

// TestRSCDeliversSuperFramesAsFragments: a guest at NVSP 6.1 with the RSC
// capability that turned RSC on gets a TCP super-frame as fragments, one
// RNDIS message per sub-allocation in one transfer-page packet, marked
// with the packet-id PPI (SUBALLOC; 1ST_FRAG on the first, LAST_FRAG on
// the last; one id), the checksum PPI on the first only (TCP ok and value
// invalid, and for IPv4 IP ok and value invalid), the frame's bytes in
// order; a plain frame after it arrives as before.
func TestRSCDeliversSuperFramesAsFragments(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		g := newTGuest(t, tguestOpts{})
		g.handshakeCaps(nvsp.Version61, nvsp.NDISConfigCapRSCOverVMBus)
		g.setFilter(rndis.NDISPacketFilterDefault)
		caps := g.query(rndis.OIDTCPOffloadHardwareCapabilities, rndis.OffloadQueryHeader(g.version).Marshal(nil))
		var o rndis.Offload
		if err := o.Unmarshal(caps.Info); err != nil || o.RSCIPv4 != 1 || o.RSCIPv6 != 1 {
			t.Fatalf("hardware capabilities: RSC %d/%d (%v), want 1/1", o.RSCIPv4, o.RSCIPv6, err)
		}
		setRSC(t, g, rndis.NDISOffloadParametersEnabled, rndis.NDISOffloadParametersEnabled)
		if st := g.nic.Stats(); !st.RSCIPv4 || !st.RSCIPv6 {
			t.Fatalf("RSC not on: %+v", st)
		}
		f, off := superFrame(g, v6, 20000)
		plain := udpFrame([6]byte(g.nic.MAC()), [6]byte{2}, 1234, 200)
		if n := g.nic.DeliverOffload([][]byte{f, plain}, []vswitch.FrameOffload{off, {}}); n != 2 {
			t.Fatalf("DeliverOffload queued %d, want 2", n)
		}
		var got []rxFrame
		for len(got) == 0 || got[len(got)-1].info.Has&rndis.InfoPktID != 0 {
			p := g.data(0)
			fr := g.frames(&p)
			if len(got) == 0 && fr[0].info.PktID.Flags()&rndis.PktInfoLastFrag == 0 {
				// every fragment must be in the first packet
				if n := rscFragments(len(f), int(g.subSize), false); len(fr) < n {
					t.Fatalf("v6 %v: %d ranges in the first packet, want the %d fragments", v6, len(fr), n)
				}
			}
			got = append(got, fr...)
			g.ack(&p)
		}
		var whole []byte
		frags := 0
		want := rndis.RxChecksumTCPOK | rndis.RxChecksumTCPValueInvalid
		if !v6 {
			want |= rndis.RxChecksumIPOK | rndis.RxChecksumIPValueInvalid
		}
		for i, r := range got {
			if r.info.Has&rndis.InfoPktID == 0 {
				break
			}
			frags++
			id := r.info.PktID
			flags := uint8(rndis.PktInfoSubAlloc)
			if i == 0 {
				flags |= rndis.PktInfo1stFrag
			}
			if i+1 < len(got) && got[i+1].info.Has&rndis.InfoPktID == 0 {
				flags |= rndis.PktInfoLastFrag
			}
			if id.Version() != rndis.PktInfoIDVersion1 || id.Flags() != flags || id.ID() != got[0].info.PktID.ID() {
				t.Fatalf("v6 %v: fragment %d: packet id %#x, want flags %#x", v6, i, uint32(id), flags)
			}
			if i == 0 && (r.info.Has&rndis.InfoChecksum == 0 || rndis.RxChecksum(r.info.Checksum) != want) {
				t.Fatalf("v6 %v: first fragment checksum %#x, want %#x", v6, r.info.Checksum, want)
			}
			if i > 0 && r.info.Has != rndis.InfoPktID {
				t.Fatalf("v6 %v: fragment %d carries PPIs %#x, want only the packet id", v6, i, r.info.Has)
			}
			whole = append(whole, r.frame...)
		}
		if frags < 2 || !bytes.Equal(whole, f) {
			t.Fatalf("v6 %v: %d fragments, reassembled %d bytes, want the %d-byte frame", v6, frags, len(whole), len(f))
		}
		last := got[len(got)-1]
		if frags != len(got)-1 || !bytes.Equal(last.frame, plain) || last.info.Has&rndis.InfoPktID != 0 {
			t.Fatalf("v6 %v: the plain frame after the coalesced one: %d frames, %d fragments", v6, len(got), frags)
		}
		if st := g.nic.Stats(); st.RxCoalesced != 1 || st.RxCut != 0 {
			t.Fatalf("v6 %v: coalesced %d, cut %d", v6, st.RxCoalesced, st.RxCut)
		}
		g.noViolations()
	}
}

// TestRSCOnlyWhenTheDocsSaySo: without NVSP 6.1, the capability bit, or
// RSC on for the frame's family in the offload parameters, the guest gets
// the super-frame cut into MTU-sized frames with complete checksums and
// no packet-id PPI, as before RSC.
func TestRSCOnlyWhenTheDocsSaySo(t *testing.T) {
	for _, c := range []struct {
		name    string
		version uint32
		caps    uint64
		v4, v6  uint8
		frameV6 bool
	}{
		{"NVSP 6", nvsp.Version6, nvsp.NDISConfigCapRSCOverVMBus, 2, 2, false},
		{"no capability", nvsp.Version61, 0, 2, 2, false},
		{"not set", nvsp.Version61, nvsp.NDISConfigCapRSCOverVMBus, 0, 0, false},
		{"turned off", nvsp.Version61, nvsp.NDISConfigCapRSCOverVMBus, 1, 1, true},
		{"other family", nvsp.Version61, nvsp.NDISConfigCapRSCOverVMBus, 2, 1, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := newTGuest(t, tguestOpts{})
			g.handshakeCaps(c.version, c.caps)
			g.setFilter(rndis.NDISPacketFilterDefault)
			if c.name == "turned off" {
				setRSC(t, g, 2, 2)
			}
			setRSC(t, g, c.v4, c.v6)
			f, off := superFrame(g, c.frameV6, 5000)
			if n := g.nic.DeliverOffload([][]byte{f}, []vswitch.FrameOffload{off}); n != 4 {
				t.Fatalf("DeliverOffload queued %d, want the 4 segments", n)
			}
			fl := vswitch.ParseFlow(f)
			hdr := fl.L4Off + 20
			var payload []byte
			for i, r := range g.recvFrames(0, 4) {
				ok := rndis.RxChecksumTCPOK
				if !c.frameV6 {
					ok |= rndis.RxChecksumIPOK
				}
				if vswitch.RxChecksum(r.frame) != ok || rndis.RxChecksum(r.info.Checksum) != ok || r.info.Has&rndis.InfoPktID != 0 {
					t.Fatalf("segment %d: checksums %#x, PPI %#x, PPIs %#x", i, vswitch.RxChecksum(r.frame), r.info.Checksum, r.info.Has)
				}
				if len(r.frame)-vswitch.EthHeaderLen > 1500 {
					t.Fatalf("segment %d: %d bytes", i, len(r.frame))
				}
				payload = append(payload, r.frame[hdr:]...)
			}
			if !bytes.Equal(payload, f[hdr:]) {
				t.Fatal("payload not the super-frame's")
			}
			if st := g.nic.Stats(); st.RxCut != 1 || st.RxCoalesced != 0 || st.RSCIPv6 {
				t.Fatalf("cut %d, coalesced %d, RSC for IPv6 %v", st.RxCut, st.RxCoalesced, st.RSCIPv6)
			}
			g.noViolations()
		})
	}
}

// TestRSCQueueCountsSegments: a super-frame queued whole takes as much of
// its channel's queue as the wire frames it stands for, and its buffer
// comes back when it leaves.
func TestRSCQueueCountsSegments(t *testing.T) {
	q := newFrameQueue(10)
	big := make([]byte, 20000)
	for i := range 2 {
		if !q.push(big, 0, 0, true, 4) {
			t.Fatalf("super-frame %d of 4 segments refused by a queue of 10", i)
		}
	}
	if q.push(big, 0, 0, true, 4) {
		t.Fatal("a third super-frame of 4 segments fit a queue of 10")
	}
	plain := 0
	for q.push(make([]byte, 60), 0, 0, false, 1) {
		plain++
	}
	if plain != 2 {
		t.Fatalf("%d plain frames fit after the super-frames, want 2", plain)
	}
	if got := q.at(0).frame(); len(got) != len(big) {
		t.Fatalf("queued super-frame of %d bytes", len(got))
	}
	q.release(1)
	if len(q.bigFree) != 1 || !q.push(big, 0, 0, true, 4) {
		t.Fatalf("after release: %d free buffers", len(q.bigFree))
	}
	if n := q.drain(); n != 4 || q.weightLocked() != 0 || len(q.bigFree) != 2 {
		t.Fatalf("drained %d, weight %d, %d buffers free", n, q.weightLocked(), len(q.bigFree))
	}
}

// BenchmarkNetVSPHostToGuestSuperFrames measures the host's receive path
// for 64 KiB TCP super-frames from an offload port: coalesced for a guest
// with RSC, cut into MTU frames with their checksums for one without.
func BenchmarkNetVSPHostToGuestSuperFrames(b *testing.B) {
	for _, rsc := range []bool{true, false} {
		name := "cut"
		if rsc {
			name = "rsc"
		}
		b.Run(name, func(b *testing.B) {
			g := newTGuest(b, tguestOpts{nic: NICConfig{RecvBuffer: bus.DefaultRecvBuffer, SendBuffer: bus.DefaultSendBuffer,
				RingSize: bus.DefaultRingSize, SubchannelRingSize: bus.DefaultRingSize, MaxQueues: 1}})
			g.handshakeCaps(nvsp.Version61, nvsp.NDISConfigCapRSCOverVMBus)
			g.setFilter(rndis.NDISPacketFilterDefault)
			if rsc {
				p := rndis.OffloadParameters{Header: rndis.OffloadParametersHeader(g.version),
					RSCIPv4: rndis.NDISOffloadParametersEnabled, RSCIPv6: rndis.NDISOffloadParametersEnabled}
				if st := g.set(rndis.OIDTCPOffloadParameters, p.Marshal(nil)); st != rndis.StatusSuccess {
					b.Fatal(st)
				}
			}
			f, off := superFrame(g, false, 65000)
			c := g.chs[0]
			ack := nvsp.RNDISComplete{Status: nvsp.StatusSuccess}.Marshal(nil)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			want := uint64(b.N) * uint64(len(f))
			start := g.nic.Stats().RxBytes
			b.SetBytes(int64(len(f)))
			b.ReportAllocs()
			b.ResetTimer()
			// The feeder runs until the guest has taken the bytes: a cut
			// super-frame may be queued only in part (DeliverOffload counts
			// frames), so counting calls could leave the reader short.
			fed := make(chan struct{})
			go func() {
				defer close(fed)
				frames, offs := [][]byte{f}, []vswitch.FrameOffload{off}
				for ctx.Err() == nil {
					if g.nic.DeliverOffload(frames, offs) == 0 {
						runtime.Gosched() // the queue is full: the guest catches up
					}
				}
			}()
			for g.nic.Stats().RxBytes-start < want {
				p, err := c.Recv()
				if err == vmbus.ErrRingEmpty {
					c.CommitRecv()
					c.Flush()
					wctx, wc := context.WithTimeout(ctx, time.Millisecond)
					c.WaitReadable(wctx)
					wc()
					continue
				}
				if err != nil {
					b.Fatal(err)
				}
				if p.Type == vmbus.PacketTransferPage {
					if err := sendFlow(ctx, c, vmbus.PacketCompletion, 0, p.TransID, ack); err != nil {
						b.Fatal(err)
					}
				}
			}
			c.CommitRecv()
			c.Flush()
			b.StopTimer()
			cancel()
			<-fed
			b.ReportMetric(float64(want)*8/1e9/b.Elapsed().Seconds(), "Gbit/s")
		})
	}
}
