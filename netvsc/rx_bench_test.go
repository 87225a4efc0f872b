package netvsc

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/netvsc/nvsp"
	"github.com/vmbusd/vmbusd/netvsc/rndis"
	"github.com/vmbusd/vmbusd/vmbus"
	"golang.org/x/sys/unix"
)

// sumHandler is an rxHandler that reads every frame's first byte and
// metadata, so that the parse is the work measured.
type sumHandler struct {
	slot  rxFrame
	recv  []byte
	bytes int
	flags uint32
}

func (h *sumHandler) rxSlot() *rxFrame { return &h.slot }

func (h *sumHandler) rxData(f *rxFrame) {
	h.bytes += f.n + int(h.recv[f.off])
	h.flags |= f.info.Checksum
}

func (h *sumHandler) rxControl([]byte) error { return nil }

// BenchmarkParseXfer: one transfer page of 64 frames laid out as a host
// does (header, checksum and hash PPIs, the frame, the rest of the
// sub-allocation), parsed without the ring or the copy into packets: the
// receive path's per-frame parse cost, with no simulated host running.
// cpu-ns/frame is the CPU time of the benchmark's own thread, which a
// loaded machine inflates less than the wall clock.
func BenchmarkParseXfer(b *testing.B) {
	const frames, sub = 64, 2048
	for _, size := range []int{64, 1514} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			recv := make([]byte, frames*sub)
			var info rndis.PacketInfo
			info.SetChecksum(uint32(rndis.RxChecksumTCPOK | rndis.RxChecksumIPOK))
			info.SetHashValue(0x12345678)
			info.SetHashInfo(rndis.NDISHashFunctionToeplitz | rndis.NDISHashTCPIPv4)
			fr := make([]byte, size)
			hdr := vmbus.TransferPageHeader(nil, nvsp.RecvBufID, frames)
			for i := range frames {
				at := rndis.PacketHeaderSize + info.PPILen()
				if _, err := rndis.PutPacketAt(recv[i*sub:], &info, fr, at, sub); err != nil {
					b.Fatal(err)
				}
				hdr = vmbus.AppendTransferRange(hdr, sub, uint32(i*sub))
			}
			p, err := xferPacket(b, 1, hdr, nvspData)
			if err != nil {
				b.Fatal(err)
			}
			h := &sumHandler{recv: recv}
			scratch := make([]byte, maxControlMessage)
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := threadTime(b)
			for range b.N {
				if err := parseXfer(&p, recv, scratch, h); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			cpu := threadTime(b) - cpu0
			if h.bytes < b.N*frames*size {
				b.Fatalf("parsed %d bytes, want at least %d", h.bytes, b.N*frames*size)
			}
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*frames), "cpu-ns/frame")
		})
	}
}

// threadTime returns the CPU time the calling OS thread has used.
func threadTime(b *testing.B) time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		b.Fatalf("clock_gettime(CLOCK_THREAD_CPUTIME_ID): %v", err)
	}
	return time.Duration(ts.Nano())
}
