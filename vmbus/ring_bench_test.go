package vmbus

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

var benchSizes = []int{64, 256, 1024, 4096, 16384, 65536}

func sizeName(n int) string {
	if n >= 1024 {
		return fmt.Sprintf("%dKiB", n/1024)
	}
	return fmt.Sprintf("%dB", n)
}

// BenchmarkRingSendBurst measures the ring itself: one goroutine writes a
// burst of packets, commits once, then reads and commits them, through a
// 2 MiB ring (the size uio_hv_generic gives a NIC channel).
func BenchmarkRingSendBurst(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			o, in, _ := newTestPair(b, benchRing)
			payload := make([]byte, size)
			buf := make([]byte, in.MaxPacket())
			burst := min(32, benchRing/PacketSize(0, size)-1)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for n := 0; n < b.N; {
				k := 0
				for ; k < burst && n+k < b.N; k++ {
					if err := o.Write(PacketInband, 0, uint64(n+k), nil, payload); err != nil {
						b.Fatal(err)
					}
				}
				o.Commit()
				for j := 0; j < k; j++ {
					if _, err := in.Read(buf); err != nil {
						b.Fatal(err)
					}
				}
				in.Commit()
				n += k
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pkts/s")
		})
	}
}

// benchRing is the data size of the rings the benchmarks use: 2 MiB less
// the header page, what uio_hv_generic gives a NIC channel per direction.
const benchRing = 2<<20 - 4096

// placement is where a benchmark puts each packet in the ring.
type placement struct {
	name string
	// at returns the start offset of packet k of total bytes in a ring of
	// size bytes.
	at func(k, total, size int) uint32
}

// placements: packets laid out through the whole ring with the payload
// (16 bytes after the start) on a 64-byte boundary or 24 bytes past one,
// and every packet split by the end of the data area halfway through.
var placements = []placement{
	{"aligned", func(k, total, size int) uint32 { return stridePos(k, total, size, 48) }},
	{"unaligned", func(k, total, size int) uint32 { return stridePos(k, total, size, 8) }},
	{"wrap", func(_, total, size int) uint32 { return uint32(size - align8(total/2)) }},
}

// stridePos returns the k-th packet start of a walk through the ring with
// packet starts at phase modulo 64, wrapping before the end.
func stridePos(k, total, size, phase int) uint32 {
	stride := (total+63)&^63 + 64
	n := (size - 64) / stride
	return uint32(k%n*stride + phase)
}

// touch writes the data area once, so that page faults stay out of the
// measurement.
func touch(mem []byte) {
	for i := DataOffset(); i < len(mem); i += 4096 {
		mem[i] = 0
	}
}

// moveTo empties the ring and puts both ends' cursors at pos, as if a
// reader had just consumed everything up to there.
func moveTo(o *OutRing, in *InRing, pos uint32) {
	o.r.ctl.writeIndex.Store(pos)
	o.r.ctl.readIndex.Store(pos)
	o.next, o.committed, o.readIdx = pos, pos, pos
	in.next, in.committed, in.writeIdx = pos, pos, pos
}

// medianTimer samples the time of every 16 operations of a benchmark loop,
// so that it can report the median time of one operation (ns/op-p50) besides
// the mean: on a shared, loaded machine the mean moves with the scheduler,
// the median much less. Sampling every 16th costs about 1 ns an operation.
type medianTimer struct {
	samples []int64
	n       int
	mark    time.Time
}

const medianEvery = 16

func newMedianTimer() *medianTimer {
	return &medianTimer{samples: make([]int64, 1<<14), mark: time.Now()}
}

// tick is called after operation k (counting from 1).
func (m *medianTimer) tick(k int) {
	if k%medianEvery != 0 {
		return
	}
	now := time.Now()
	m.samples[m.n%len(m.samples)] = int64(now.Sub(m.mark))
	m.n++
	m.mark = now
}

func (m *medianTimer) report(b *testing.B) {
	if m.n < 2 {
		return
	}
	// The first sample may include the set-up before the loop.
	s := m.samples[1:min(m.n, len(m.samples))]
	slices.Sort(s)
	b.ReportMetric(float64(s[len(s)/2])/medianEvery, "ns/op-p50")
}

// BenchmarkRingWrite measures the writer alone: one packet written and
// committed at each placement of a 2 MiB ring, the reader's index moved
// past it at once (a reader that takes no time).
func BenchmarkRingWrite(b *testing.B) {
	for _, pl := range placements {
		for _, size := range benchSizes {
			b.Run(pl.name+"/"+sizeName(size), func(b *testing.B) {
				o, in, mem := newTestPair(b, benchRing)
				touch(mem)
				payload := pattern(1, size)
				total := PacketSize(0, size)
				b.SetBytes(int64(size))
				b.ReportAllocs()
				mt := newMedianTimer()
				k := 0
				for b.Loop() {
					moveTo(o, in, pl.at(k, total, benchRing))
					if err := o.Write(PacketInband, 0, uint64(k), nil, payload); err != nil {
						b.Fatal(err)
					}
					o.Commit()
					k++
					mt.tick(k)
				}
				mt.report(b)
			})
		}
	}
}

// BenchmarkRingRead measures the reader alone: the ring is filled once with
// packets at each placement, then read (copied out and validated) over and
// over, the write index always just past the packet.
func BenchmarkRingRead(b *testing.B) {
	for _, pl := range placements {
		for _, size := range benchSizes {
			b.Run(pl.name+"/"+sizeName(size), func(b *testing.B) {
				o, in, mem := newTestPair(b, benchRing)
				touch(mem)
				payload := pattern(1, size)
				total := PacketSize(0, size)
				starts := make([]uint32, 0, benchRing/total)
				for k := 0; k == 0 || pl.at(k, total, benchRing) != starts[0]; k++ {
					pos := pl.at(k, total, benchRing)
					moveTo(o, in, pos)
					if err := o.Write(PacketInband, 0, uint64(k), nil, payload); err != nil {
						b.Fatal(err)
					}
					o.Commit()
					starts = append(starts, pos)
				}
				buf := make([]byte, in.MaxPacket())
				b.SetBytes(int64(size))
				b.ReportAllocs()
				mt := newMedianTimer()
				k := 0
				for b.Loop() {
					pos := starts[k%len(starts)]
					in.next, in.committed = pos, pos
					in.writeIdx = in.r.advance(pos, uint32(total))
					p, err := in.Read(buf)
					if err != nil || len(p.Payload()) != size {
						b.Fatalf("read at %d: %v", pos, err)
					}
					k++
					mt.tick(k)
				}
				mt.report(b)
			})
		}
	}
}

// BenchmarkRingCrossCore runs writer and reader on two goroutines, each
// locked to its own CPU when there are two, both spinning as the two ends of
// a busy channel do, and batching as a driver does (up to 64 packets or
// 32 KiB per Commit). Writes land on cache lines the reader's core has just
// read, which is what decides the cost of a large copy. Besides throughput
// it reports the median time of one Write from 1 KiB up (timing costs some
// 20 ns a Write), the figure other load on the machine disturbs least, and
// the signals the writer would raise per packet.
func BenchmarkRingCrossCore(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			o, in, mem := newTestPair(b, benchRing)
			touch(mem)
			payload := pattern(1, size)
			buf := make([]byte, in.MaxPacket())
			timed := size >= 1024
			samples := make([]int64, 1<<16)
			const batch, batchBytes = 64, 32 << 10
			total := PacketSize(0, size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			var wg sync.WaitGroup
			wg.Add(1)
			b.ResetTimer()
			go func() {
				defer wg.Done()
				defer lockToCPU(b, 1)()
				var idle spinner
				for got, held := 0, 0; got < b.N; {
					_, err := in.Read(buf)
					if err == ErrRingEmpty {
						in.Commit()
						held = 0
						idle.spin()
						continue
					}
					if err != nil {
						panic(err)
					}
					got++
					if held += total; held >= batchBytes || got%batch == 0 {
						in.Commit()
						held = 0
					}
				}
				in.Commit()
			}()
			unlock := lockToCPU(b, 0)
			var idle spinner
			signals, writes := 0, 0
			for n := 0; n < b.N; {
				var err error
				for k, held := 0, 0; k < batch && held < batchBytes && n < b.N; k, held = k+1, held+total {
					var t0 time.Time
					if timed {
						t0 = time.Now()
					}
					if err = o.Write(PacketInband, 0, uint64(n), nil, payload); err != nil {
						break
					}
					if timed {
						samples[writes%len(samples)] = int64(time.Since(t0))
						writes++
					}
					n++
				}
				if o.Commit() {
					signals++
				}
				if err != nil {
					if _, full := err.(*RingFullError); !full {
						b.Fatal(err)
					}
					idle.spin()
				}
			}
			wg.Wait()
			b.StopTimer()
			unlock()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pkts/s")
			b.ReportMetric(float64(signals)/float64(b.N), "signals/pkt")
			if writes > 0 {
				s := samples[:min(writes, len(samples))]
				slices.Sort(s)
				b.ReportMetric(float64(s[len(s)/2]), "write-ns/pkt-p50")
			}
		})
	}
}

// spinner is a busy wait that lets the scheduler in now and then.
type spinner struct{ n uint32 }

func (s *spinner) spin() {
	if s.n++; s.n%1024 == 0 {
		runtime.Gosched()
	}
}

// lockToCPU locks the calling goroutine to its thread and the thread to cpu
// when the machine has more CPUs than cpu, and returns what undoes both.
func lockToCPU(b *testing.B, cpu int) (undo func()) {
	runtime.LockOSThread()
	var old, set unix.CPUSet
	if runtime.NumCPU() <= cpu || unix.SchedGetaffinity(0, &old) != nil {
		return runtime.UnlockOSThread
	}
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		b.Logf("pin to CPU %d: %v", cpu, err)
	}
	return func() {
		unix.SchedSetaffinity(0, &old)
		runtime.UnlockOSThread()
	}
}
