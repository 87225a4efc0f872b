package vmbus

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
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
			o, in, _ := newTestPair(b, 2<<20-4096)
			payload := make([]byte, size)
			buf := make([]byte, in.MaxPacket())
			burst := min(32, (2<<20-4096)/PacketSize(0, size)-1)
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

// BenchmarkRingCrossCore runs writer and reader on two goroutines (two
// cores here), both spinning, the way two ends of a channel do; it shows
// the cache-line cost between cores and counts the signals the writer would
// raise per packet.
func BenchmarkRingCrossCore(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			o, in, _ := newTestPair(b, 2<<20-4096)
			payload := make([]byte, size)
			buf := make([]byte, in.MaxPacket())
			b.SetBytes(int64(size))
			b.ReportAllocs()
			var wg sync.WaitGroup
			wg.Add(1)
			b.ResetTimer()
			go func() {
				defer wg.Done()
				for got := 0; got < b.N; {
					_, err := in.Read(buf)
					if err == ErrRingEmpty {
						in.Commit()
						runtime.Gosched()
						continue
					}
					if err != nil {
						panic(err)
					}
					got++
				}
				in.Commit()
			}()
			signals := 0
			for n := 0; n < b.N; {
				err := o.Write(PacketInband, 0, uint64(n), nil, payload)
				if err == nil {
					n++
					if n%64 != 0 && n != b.N {
						continue
					}
				} else if _, full := err.(*RingFullError); !full {
					b.Fatal(err)
				}
				if o.Commit() {
					signals++
				}
				if err != nil {
					runtime.Gosched()
				}
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pkts/s")
			b.ReportMetric(float64(signals)/float64(b.N), "signals/pkt")
		})
	}
}
