//go:build linux

package afxdp_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/vmbusd/vmbusd/afxdp"
)

// BenchmarkXSKRecv measures Wait+Recv of one queue in copy mode on veth,
// fed by an AF_XDP sender on the peer that runs flat out. The kernel's
// share (XDP redirect and the copy into the UMEM) runs in the sender's
// system calls, so the figure is what one receiving goroutine sustains.
func BenchmarkXSKRecv(b *testing.B) {
	for _, size := range []int{64, 1514} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			a, peer := vethPair(b, 1)
			rx := openPort(b, a, afxdp.Config{}).Sockets()[0]
			tx := openSocket(b, peer, 0, afxdp.Config{})
			frames := make([][]byte, 64)
			for i := range frames {
				frames[i] = testFrame(size, 0, uint32(i))
			}
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			wg.Go(func() {
				for ctx.Err() == nil {
					if n, _ := tx.Send(frames); n == 0 {
						_ = tx.Flush()
					}
				}
			})
			bufs := make([][]byte, 64)
			for i := range bufs {
				bufs[i] = make([]byte, rx.MaxFrameLen())
			}
			sizes := make([]int, len(bufs))
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for got := 0; got < b.N; {
				if err := rx.Wait(ctx); err != nil {
					b.Fatal(err)
				}
				n, err := rx.Recv(bufs[:min(len(bufs), b.N-got)], sizes)
				if err != nil {
					b.Fatal(err)
				}
				got += n
			}
			elapsed := time.Since(start)
			b.StopTimer()
			cancel()
			wg.Wait()
			st := rx.Stats()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "pkts/s")
			b.ReportMetric(float64(st.Waits)/float64(b.N), "waits/pkt")
		})
	}
}

// BenchmarkXSKSend measures Send of one queue in copy mode on veth; the
// peer drops every frame in its XDP hook. In copy mode the kernel
// transmits inside Send's sendto, so this is the whole path's cost.
func BenchmarkXSKSend(b *testing.B) {
	for _, size := range []int{64, 1514} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			a, peer := vethPair(b, 1)
			attachDrop(b, peer)
			tx := openSocket(b, a, 0, afxdp.Config{})
			frames := make([][]byte, 64)
			for i := range frames {
				frames[i] = testFrame(size, 0, uint32(i))
			}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for sent := 0; sent < b.N; {
				n, err := tx.Send(frames[:min(len(frames), b.N-sent)])
				if err != nil {
					b.Fatal(err)
				}
				if n == 0 {
					_ = tx.Flush()
				}
				sent += n
			}
			elapsed := time.Since(start)
			b.StopTimer()
			st := tx.Stats()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "pkts/s")
			b.ReportMetric(float64(st.TxWakeups)/float64(b.N), "syscalls/pkt")
		})
	}
}

// attachDrop attaches an XDP program returning XDP_DROP to ifname.
func attachDrop(b *testing.B, ifname string) {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.XDP,
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 1), asm.Return()},
		License:      "MIT",
	})
	skipIfNoXDP(b, err)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { prog.Close() })
	l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifindex(b, ifname), Flags: link.XDPDriverMode})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
}
