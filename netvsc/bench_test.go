package netvsc_test

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"
	"unsafe"

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

// threadNanos is threadCPU for the samples around every wait: a raw
// system call (no vDSO serves this clock), without the scheduler
// hand-off of unix.ClockGettime, which would double each sample's cost.
// The clock cannot fail for the calling thread; 0 on error.
func threadNanos() int64 {
	var ts unix.Timespec
	if _, _, e := unix.RawSyscall(unix.SYS_CLOCK_GETTIME, unix.CLOCK_THREAD_CPUTIME_ID,
		uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return 0
	}
	return ts.Nano()
}

// waitMeter times the guest thread's CPU inside Queue.Wait and
// Queue.WaitTx. A hybrid queue under full load keeps polling inside its
// waits until the host catches up (wait.go loadPollSpan), so the thread's
// CPU per packet (guest-ns/pkt) mixes the driver's work with time spent
// waiting for the simulated host; work-ns/pkt leaves the waits out. The
// waits come once per thousands of packets, so sampling around them costs
// little; report subtracts that cost too. A nil *waitMeter just waits.
type waitMeter struct {
	ns    int64  // thread CPU inside the waits (half their samples' cost included)
	calls int64  // waits timed
	reaps uint64 // send completions WaitTx reaped (work done while waiting)
}

func (m *waitMeter) waitRx(ctx context.Context, q *netvsc.Queue) error {
	if m == nil {
		return q.Wait(ctx)
	}
	t0 := threadNanos()
	err := q.Wait(ctx)
	m.ns += threadNanos() - t0
	m.calls++
	return err
}

func (m *waitMeter) waitTx(ctx context.Context, q *netvsc.Queue) error {
	if m == nil {
		return q.WaitTx(ctx)
	}
	// Stats inside the samples: the counting is charged to the wait.
	t0 := threadNanos()
	c0 := q.Stats().TxCompletions
	err := q.WaitTx(ctx)
	m.reaps += q.Stats().TxCompletions - c0
	m.ns += threadNanos() - t0
	m.calls++
	return err
}

// sampleCost returns the thread CPU one threadNanos call costs, from runs
// of back-to-back calls (the cheapest run: preemption only adds).
func sampleCost() float64 {
	const n = 1000
	best := math.Inf(1)
	for range 5 {
		t0 := threadNanos()
		for range n - 1 {
			threadNanos()
		}
		best = min(best, float64(threadNanos()-t0)/n)
	}
	return best
}

// report adds the per-packet metrics (docs/performance.md, "In-process
// benchmarks"): guest-ns/pkt is all the guest thread's CPU, work-ns/pkt
// the part outside the waits, less the cost of the samples around them
// (each wait's two samples cost about 2×sampleCost, half of it inside the
// wait's figure and half outside; clock-ns/pkt is that whole cost per
// packet). wait-reaps/pkt counts the send completions WaitTx reaped: that
// reaping is work, but counted as waiting.
func report(b *testing.B, q *netvsc.Queue, start time.Time, cpu0 time.Duration, before netvsc.QueueStats, m *waitMeter) {
	el := time.Since(start)
	cpu := threadCPU(b) - cpu0
	st := q.Stats()
	n := float64(b.N)
	c := sampleCost()
	b.ReportMetric(n/el.Seconds(), "pkts/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/n, "guest-ns/pkt")
	b.ReportMetric((float64(cpu.Nanoseconds()-m.ns)-float64(m.calls)*c)/n, "work-ns/pkt")
	b.ReportMetric(float64(m.calls)/n, "waits/pkt")
	b.ReportMetric(2*c*float64(m.calls)/n, "clock-ns/pkt")
	if st.TxCompletions > before.TxCompletions {
		b.ReportMetric(float64(m.reaps)/n, "wait-reaps/pkt")
	}
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
			m := new(waitMeter)
			b.ResetTimer()
			start, cpu0 := time.Now(), threadCPU(b)
			for got := 0; got < b.N; {
				k := q.RxBurst(pkts)
				got += k
				frame.PutBurst(pkts[:k])
				if k == 0 {
					m.waitRx(ctx, q)
				}
			}
			b.StopTimer()
			report(b, q, start, cpu0, before, m)
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
			sendTemplate(b, ctx, q, tmpl, pkts, 10000)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			before := q.Stats()
			m := new(waitMeter)
			b.ResetTimer()
			start, cpu0 := time.Now(), threadCPU(b)
			sendMetered(b, ctx, q, tmpl, pkts, b.N, m)
			b.StopTimer()
			report(b, q, start, cpu0, before, m)
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
