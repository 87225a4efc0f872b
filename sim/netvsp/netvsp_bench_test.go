package netvsp

// Benchmarks of the simulated host's data path against a lean scripted
// guest: host to guest from a generator port, guest to host into a sink.
// They measure the simulator (the NetVSP and vSwitch), not a driver.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vmbusd/vmbusd/netvsc/nvsp"
	"github.com/vmbusd/vmbusd/netvsc/rndis"
	"github.com/vmbusd/vmbusd/sim/bus"
	"github.com/vmbusd/vmbusd/sim/vswitch"
	"github.com/vmbusd/vmbusd/vmbus"
)

func benchGuest(b *testing.B) *tguest {
	g := newTGuest(b, tguestOpts{nic: NICConfig{RecvBuffer: bus.DefaultRecvBuffer, SendBuffer: bus.DefaultSendBuffer,
		RingSize: bus.DefaultRingSize, SubchannelRingSize: bus.DefaultRingSize, MaxQueues: 1}})
	g.handshake(nvsp.Version61)
	g.setFilter(rndis.NDISPacketFilterDefault)
	return g
}

// sendFlow writes a packet, flushing and waiting while the ring is full.
func sendFlow(ctx context.Context, c *vmbus.Channel, typ vmbus.PacketType, flags uint16, tid uint64, payload []byte) error {
	for {
		err := c.Send(typ, flags, tid, nil, payload)
		var full *vmbus.RingFullError
		if !errors.As(err, &full) {
			return err
		}
		if err := c.Flush(); err != nil {
			return err
		}
		if err := c.WaitWritable(ctx, full.Need); err != nil {
			return err
		}
	}
}

func BenchmarkNetVSPHostToGuest(b *testing.B) {
	for _, size := range []int{64, 1500} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			g := benchGuest(b)
			c := g.chs[0]
			ack := nvsp.RNDISComplete{Status: nvsp.StatusSuccess}.Marshal(nil)
			ctx := context.Background()
			gen := vswitch.NewGenerator(vswitch.GeneratorConfig{Sizes: []int{size}, Count: uint64(b.N), Flows: 64, Batch: 64})
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			if err := g.nic.Attach(gen); err != nil {
				b.Fatal(err)
			}
			got := 0
			for got < b.N {
				p, ok := recvOrWait(b, ctx, c)
				if ok && p.Type == vmbus.PacketTransferPage {
					var m nvsp.RNDISPacket
					if m.Unmarshal(p.Payload()) == nil && m.ChannelType == nvsp.RMCData {
						got += p.RangeCount()
					}
					if err := sendFlow(ctx, c, vmbus.PacketCompletion, 0, p.TransID, ack); err != nil {
						b.Fatal(err)
					}
				}
			}
			c.CommitRecv()
			c.Flush()
			b.StopTimer()
			s := b.Elapsed().Seconds()
			b.ReportMetric(float64(b.N)/s, "pkts/s")
			b.ReportMetric(float64(b.N)*float64(size)*8/1e9/s, "Gbit/s")
			gen.Close()
		})
	}
}

func BenchmarkNetVSPGuestToHost(b *testing.B) {
	for _, size := range []int{64, 1500} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			g := benchGuest(b)
			c := g.chs[0]
			sink := vswitch.NewGenerator(vswitch.GeneratorConfig{Idle: true})
			if err := g.nic.Attach(sink); err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			// DPDK's copy path: up to 8 packets per send section, each
			// padded to 8 bytes.
			frame := udpFrame([6]byte{2}, [6]byte(g.nic.MAC()), 7, size)
			msg := rndisPacket(frame, nil)
			pad := (len(msg) + 7) &^ 7
			perSec := min(maxPacketsPerMessage, int(g.secSize)/pad)
			for s := uint32(0); s < g.secCount; s++ {
				sec := g.send[s*g.secSize:]
				for i := 0; i < perSec; i++ {
					copy(sec[i*pad:], msg)
					le32put(sec[i*pad+4:], uint32(pad))
				}
			}
			secLen := uint32(pad * perSec)
			const window = 512
			out := 0
			next := uint32(0)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			var nv [nvsp.MessageSize]byte
			for sent := 0; sent < b.N; {
				for out >= window {
					if p, ok := recvOrWait(b, ctx, c); ok && p.Type == vmbus.PacketCompletion {
						out--
					}
				}
				n := min(perSec, b.N-sent)
				l := secLen
				if n < perSec {
					l = uint32(pad * n)
				}
				m := nvsp.RNDISPacket{ChannelType: nvsp.RMCData, SectionIndex: next, SectionSize: l}.Marshal(nv[:0])
				if err := sendFlow(ctx, c, vmbus.PacketInband, vmbus.FlagCompletionRequested, uint64(next)+1, m); err != nil {
					b.Fatal(err)
				}
				next = (next + 1) % g.secCount
				out++
				sent += n
			}
			c.Flush()
			for sink.Stats().Received < uint64(b.N) {
				p, err := c.Recv()
				if err == vmbus.ErrRingEmpty {
					c.CommitRecv()
					ctx2, cancel := context.WithTimeout(ctx, tgWait)
					err = c.WaitReadable(ctx2)
					cancel()
					if err != nil && sink.Stats().Received < uint64(b.N) {
						b.Fatalf("sink got %d of %d", sink.Stats().Received, b.N)
					}
					continue
				}
				_ = p
			}
			b.StopTimer()
			s := b.Elapsed().Seconds()
			b.ReportMetric(float64(b.N)/s, "pkts/s")
			b.ReportMetric(float64(b.N)*float64(size)*8/1e9/s, "Gbit/s")
		})
	}
}

// discardOffloads is an OffloadPort that drops what it gets: it measures
// the NetVSP's cost of a large send, not a port's.
type discardOffloads struct{ frames atomic.Uint64 }

func (d *discardOffloads) Connect(vswitch.Uplink) error { return nil }
func (d *discardOffloads) Transmit(f [][]byte)          { d.frames.Add(uint64(len(f))) }
func (d *discardOffloads) Close() error                 { return nil }
func (d *discardOffloads) Offloads() bool               { return true }
func (d *discardOffloads) TransmitOffload(f [][]byte, _ []vswitch.FrameOffload) {
	d.frames.Add(uint64(len(f)))
}

// BenchmarkNetVSPGuestToHostLargeSends: 60 KB TCP large sends,
// GPA-direct (the TAP attachment's super-frames), into a port that takes
// them whole; bytes are the frames'.
func BenchmarkNetVSPGuestToHostLargeSends(b *testing.B) {
	g := benchGuest(b)
	if g.mem == nil {
		b.Skip("no file-model guest memory")
	}
	port := &discardOffloads{}
	if err := g.nic.Attach(port); err != nil {
		b.Fatal(err)
	}
	enableLSO(b, g)
	c := g.chs[0]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f := tcpFrame(false, 60000) // within HostLSOv2MaxSize
	f[16], f[17] = 0, 0
	var info rndis.PacketInfo
	info.SetLSO(rndis.NewLSOv2(1448, 34, false))
	msg := rndisPacket(f, &info)
	copy(g.mem[gpaPage*4096:], msg)
	hdr := vmbus.GPAHeader(nil, 0)
	n := 0
	for off := 0; off < len(msg); off += 4096 {
		hdr = vmbus.AppendGPARange(hdr, uint32(min(4096, len(msg)-off)), 0, []uint64{gpaPage + uint64(off/4096)})
		n++
	}
	binary.LittleEndian.PutUint32(hdr[4:], uint32(n))
	m := nvsp.RNDISPacket{ChannelType: nvsp.RMCData, SectionIndex: nvsp.NoSection}.Marshal(nil)
	const window = 64
	out := 0
	b.SetBytes(int64(len(f)))
	b.ReportAllocs()
	cpu0 := processCPU()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for out >= window {
			if p, ok := recvOrWait(b, ctx, c); ok && p.Type == vmbus.PacketCompletion {
				out--
			}
		}
		for {
			err := c.Send(vmbus.PacketGPADirect, vmbus.FlagCompletionRequested, uint64(i)+1, hdr, m)
			var full *vmbus.RingFullError
			if !errors.As(err, &full) {
				if err != nil {
					b.Fatal(err)
				}
				break
			}
			c.Flush()
			if err := c.WaitWritable(ctx, full.Need); err != nil {
				b.Fatal(err)
			}
		}
		out++
	}
	c.Flush()
	for port.frames.Load() < uint64(b.N) {
		recvOrWait(b, ctx, c)
	}
	// The process's CPU time (guest and host sides, both in it) per
	// send: steadier than ns/op on shared cores.
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
}

// recvOrWait reads the next packet on the guest's inbound ring (the
// host's completions of its sends); on an empty ring it commits what was
// read, sleeps until the ring is readable and reports false, so the
// caller re-checks what it waits for.
func recvOrWait(b *testing.B, ctx context.Context, c *vmbus.Channel) (vmbus.Packet, bool) {
	p, err := c.Recv()
	if err == vmbus.ErrRingEmpty {
		c.CommitRecv()
		c.Flush()
		if err := c.WaitReadable(ctx); err != nil {
			b.Fatal(err)
		}
		return p, false
	}
	if err != nil {
		b.Fatal(err)
	}
	return p, true
}

// processCPU returns the process's user and system time.
func processCPU() time.Duration {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
