package hvsock_test

import (
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/hvsock"
	"github.com/vmbusd/vmbusd/hvsock/wire"
	"github.com/vmbusd/vmbusd/sim"
)

// Benchmarks run the guest against the simulated host in this process, so
// the CPU figures (getrusage of the process) include the host's side. Each
// reports MB/s (SetBytes), cpu-s/GB, and for hv_sock the signals and
// wake-ups per MB of each side (guest, simulated host).
//
//	BenchmarkHvsockSendLoop   seed 000: one Write per 64 KiB with the send
//	                          loop, vs the pre-2019 one chunk per call.
//	BenchmarkHvsockRingSize   seed 002: write sizes x ring sizes, both ways.
//	BenchmarkHvsockVsUnix     hv_sock vs a Unix stream socket pair.
//
// cmd/hvsockbench prints the seed-shaped tables from the same code paths.

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchPipe moves b.N writes of size bytes from w to r (read with a 64 KiB
// buffer) and reports the figures. split, when > 0, hands Write at most
// that many bytes per call.
func benchPipe(b *testing.B, w io.Writer, r io.Reader, size, split int, extra func(b *testing.B, mb float64)) {
	buf := make([]byte, size)
	total := int64(b.N) * int64(size)
	done := make(chan error, 1)
	go func() {
		rb := make([]byte, 64<<10)
		var got int64
		for got < total {
			n, err := r.Read(rb)
			got += int64(n)
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	b.SetBytes(int64(size))
	b.ReportAllocs()
	cpu0 := cpuTime()
	b.ResetTimer()
	for range b.N {
		if split > 0 {
			for off := 0; off < size; off += split {
				if _, err := w.Write(buf[off:min(off+split, size)]); err != nil {
					b.Fatal(err)
				}
			}
			continue
		}
		if _, err := w.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	cpu := cpuTime() - cpu0
	gb := float64(total) / 1e9
	b.ReportMetric(cpu.Seconds()/gb, "cpu-s/GB")
	if extra != nil {
		extra(b, float64(total)/1e6)
	}
}

// hvsockFigures reports, per MB, the guest's signals to the host and its
// wake-ups, and the simulated host's signals to the guest and its
// wake-ups: each side of the signalling the ring rules ask for.
func hvsockFigures(g *hvsock.Conn, h *sim.HvSockConn) func(b *testing.B, mb float64) {
	before, hbefore := g.Stats(), h.Channel().Stats()
	return func(b *testing.B, mb float64) {
		st, hst := g.Stats(), h.Channel().Stats()
		b.ReportMetric(float64(st.Channel.TxSignals-before.Channel.TxSignals+st.Channel.RxSignals-before.Channel.RxSignals)/mb, "signals/MB")
		b.ReportMetric(float64(st.Channel.Wakeups-before.Channel.Wakeups)/mb, "wakeups/MB")
		b.ReportMetric(float64(hst.TxSignals-hbefore.TxSignals+hst.RxSignals-hbefore.RxSignals)/mb, "host-signals/MB")
		b.ReportMetric(float64(hst.Wakeups-hbefore.Wakeups)/mb, "host-wakeups/MB")
	}
}

func benchEnv(b *testing.B) *testEnv {
	return newTestEnv(b, sim.HvSockConfig{})
}

// BenchmarkHvsockSendLoop is seed 000's experiment: 64 KiB writes from the
// guest to a host that reads, with the send loop (one Write keeps writing
// chunks until done or the ring is full, one commit per batch) and with the
// behaviour before it, one chunk per call: the benchmark hands Write one
// 4088-byte chunk at a time, as the vsock core's loop handed
// hvs_stream_enqueue, each call a commit of its own. The rings are the
// seed's, Linux's 24 KiB.
func BenchmarkHvsockSendLoop(b *testing.B) {
	for _, mode := range []struct {
		name  string
		split int
	}{{"loop", 0}, {"onechunk", wire.DefaultChunk}} {
		b.Run(mode.name, func(b *testing.B) {
			e := benchEnv(b)
			cfg := e.cfg
			cfg.SendRingSize, cfg.RecvRingSize = hvsock.MinRingSize, hvsock.MinRingSize
			g, h := e.pair(b, cfg, 9000)
			defer closePair(g, h)
			benchPipe(b, g, h, 64<<10, mode.split, hvsockFigures(g, h))
		})
	}
}

// BenchmarkHvsockRingSize is seed 002's second table: throughput by write
// size and ring size, guest to host (the guest's send ring varies) and host
// to guest (its receive ring varies).
func BenchmarkHvsockRingSize(b *testing.B) {
	for _, dir := range []string{"g2h", "h2g"} {
		for _, ring := range []int{0, 16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10} {
			for _, size := range []int{128, 1 << 10, 4 << 10, 64 << 10} {
				name := fmt.Sprintf("%s/ring=%s/write=%s", dir, sizeName(ring), sizeName(size))
				b.Run(name, func(b *testing.B) {
					e := benchEnv(b)
					cfg := e.cfg
					if dir == "g2h" {
						cfg.SendRingSize = ring
					} else {
						cfg.RecvRingSize = ring
					}
					g, h := e.pair(b, cfg, 9100)
					defer closePair(g, h)
					if dir == "g2h" {
						benchPipe(b, g, h, size, 0, hvsockFigures(g, h))
					} else {
						benchPipe(b, h, g, size, 0, hvsockFigures(g, h))
					}
				})
			}
		}
	}
}

// BenchmarkHvsockVsUnix compares a guest-to-host hv_sock connection, with
// the default rings and with the largest, with a Unix stream socket pair
// on the same machine, all in this process.
func BenchmarkHvsockVsUnix(b *testing.B) {
	for _, size := range []int{128, 4 << 10, 64 << 10} {
		for _, ring := range []int{0, hvsock.MaxRingSize} {
			b.Run(fmt.Sprintf("hvsock/ring=%s/%s", sizeName(ring), sizeName(size)), func(b *testing.B) {
				e := benchEnv(b)
				cfg := e.cfg
				cfg.SendRingSize, cfg.RecvRingSize = ring, ring
				g, h := e.pair(b, cfg, 9200)
				defer closePair(g, h)
				benchPipe(b, g, h, size, 0, hvsockFigures(g, h))
			})
		}
		b.Run("unix/"+sizeName(size), func(b *testing.B) {
			w, r := unixPair(b)
			benchPipe(b, w, r, size, 0, nil)
		})
	}
}

// closePair closes the host end first: its FIN and its reading of the
// guest's let the guest's Close finish without lingering.
func closePair(g *hvsock.Conn, h *sim.HvSockConn) {
	h.Close()
	g.Close()
}

// unixPair returns the two ends of a Unix stream socket pair.
func unixPair(b testing.TB) (net.Conn, net.Conn) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	var cs [2]net.Conn
	for i, fd := range fds {
		f := newFile(fd)
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			b.Fatal(err)
		}
		cs[i] = c
		b.Cleanup(func() { c.Close() })
	}
	return cs[0], cs[1]
}

func sizeName(n int) string {
	switch {
	case n == 0:
		return "default"
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}
