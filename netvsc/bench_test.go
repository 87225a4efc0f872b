package netvsc_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/frame"
	"github.com/vmbusd/vmbusd/netvsc"
	"github.com/vmbusd/vmbusd/sim"
	"golang.org/x/sys/unix"
)

var benchSizes = []int{64, 1514}

// benchNIC opens a NIC with standard (2 MiB) rings and buffers on a
// generator port.
func benchNIC(b *testing.B, gen *sim.Generator, mode netvsc.Mode) (*sim.NIC, *netvsc.NIC) {
	_, sn, n := newNIC(b, sim.NICConfig{RingSize: 2 << 20, RecvBuffer: 31 << 20, SendBuffer: 16 << 20, QueueLen: 4096},
		gen, netvsc.Config{Mode: mode, PoolPackets: 8192, RxStage: 2048})
	return sn, n
}

// threadCPU returns the CPU time the calling OS thread has used. The
// benchmarks lock their goroutine to its thread, so the difference over a
// run is the guest driver's own cost per packet: the simulated host runs in
// the same process on other threads and, on a machine with few cores,
// otherwise sets the pace of pkts/s (docs/performance.md, "In-process
// benchmarks").
func threadCPU(b *testing.B) time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		b.Fatalf("clock_gettime(CLOCK_THREAD_CPUTIME_ID): %v", err)
	}
	return time.Duration(ts.Nano())
}

func report(b *testing.B, q *netvsc.Queue, start time.Time, cpu0 time.Duration, before netvsc.QueueStats) {
	el := time.Since(start)
	cpu := threadCPU(b) - cpu0
	st := q.Stats()
	n := float64(b.N)
	b.ReportMetric(n/el.Seconds(), "pkts/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/n, "guest-ns/pkt")
	ch, ch0 := st.Channel, before.Channel
	b.ReportMetric(float64(ch.TxSignals+ch.RxSignals-ch0.TxSignals-ch0.RxSignals)/n, "signals/pkt")
	b.ReportMetric(float64(ch.Wakeups-ch0.Wakeups)/n, "wakeups/pkt")
}

// BenchmarkNetvscRxBurst: host->guest through the simulated vSwitch from a
// generator port, one queue, the guest in an RxBurst/Wait loop.
func BenchmarkNetvscRxBurst(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			gen := sim.NewGenerator(sim.GeneratorConfig{Sizes: []int{size}, Batch: 64})
			_, n := benchNIC(b, gen, netvsc.Hybrid)
			defer gen.Close()
			q := n.Queues()[0]
			pkts := make([]*frame.Packet, 64)
			ctx := context.Background()
			// Warm up, then measure.
			for got := 0; got < 10000; {
				k := q.RxBurst(pkts)
				got += k
				frame.PutBurst(pkts[:k])
				if k == 0 {
					q.Wait(ctx)
				}
			}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			before := q.Stats()
			b.ResetTimer()
			start, cpu0 := time.Now(), threadCPU(b)
			for got := 0; got < b.N; {
				k := q.RxBurst(pkts)
				got += k
				frame.PutBurst(pkts[:k])
				if k == 0 {
					q.Wait(ctx)
				}
			}
			b.StopTimer()
			report(b, q, start, cpu0, before)
		})
	}
}

// BenchmarkNetvscTxBurst: guest->host, one queue, bursts of 32 into the
// generator's sink; packets are counted by the host.
func BenchmarkNetvscTxBurst(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			gen := sim.NewGenerator(sim.GeneratorConfig{Idle: true})
			_, n := benchNIC(b, gen, netvsc.Hybrid)
			q := n.Queues()[0]
			peer := []byte{0x02, 0, 0, 0, 0, 9}
			tmpl := testFrame(peer, n.MAC(), size, 1, 1000)
			pkts := make([]*frame.Packet, 32)
			ctx := context.Background()
			send := func(total int) { sendTemplate(b, ctx, q, tmpl, pkts, total) }
			send(10000)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			before := q.Stats()
			b.ResetTimer()
			start, cpu0 := time.Now(), threadCPU(b)
			send(b.N)
			b.StopTimer()
			report(b, q, start, cpu0, before)
			waitCond(b, "the sink to receive every frame sent", func() bool {
				q.RxBurst(pkts) // reap the host's completions
				return gen.Stats().Received >= uint64(b.N+10000)
			})
		})
	}
}

// BenchmarkNetvscRxOverload: the host offers twice what the guest can
// take. The guest spends a fixed time per frame (overloadCost, standing
// in for the application's work), so it takes at most 1/overloadCost
// frames a second, and the generator sends at twice that. goodput is the
// frames the application got per second; guest_drops the frames the
// guest took off the host and dropped (rx_no_memory), host_drops the
// frames the host could not queue, each per frame delivered.
func BenchmarkNetvscRxOverload(b *testing.B) {
	const overloadCost = 5 * time.Microsecond
	gen := sim.NewGenerator(sim.GeneratorConfig{Sizes: []int{64}, Batch: 64,
		Rate: 2 / overloadCost.Seconds()})
	_, n := benchNIC(b, gen, netvsc.Hybrid)
	defer gen.Close()
	q := n.Queues()[0]
	pkts := make([]*frame.Packet, 64)
	ctx := context.Background()
	consume := func(total int) {
		for got := 0; got < total; {
			k := q.RxBurst(pkts)
			got += k
			for t0 := time.Now(); time.Since(t0) < time.Duration(k)*overloadCost; {
			}
			frame.PutBurst(pkts[:k])
			if k == 0 {
				q.Wait(ctx)
			}
		}
	}
	consume(10000)
	b.ReportAllocs()
	st0, g0 := q.Stats(), gen.Stats()
	b.ResetTimer()
	start := time.Now()
	consume(b.N)
	b.StopTimer()
	el := time.Since(start)
	st, g := q.Stats(), gen.Stats()
	nf := float64(b.N)
	b.ReportMetric(nf/el.Seconds(), "goodput")
	b.ReportMetric(float64(st.RxNoMemory-st0.RxNoMemory)/nf, "guest_drops/pkt")
	b.ReportMetric(float64((g.Sent-g.Accepted)-(g0.Sent-g0.Accepted))/nf, "host_drops/pkt")
}
