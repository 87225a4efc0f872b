package vmbus_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/vmbusd/vmbusd/internal/echo"
	"github.com/vmbusd/vmbusd/sim"
	"github.com/vmbusd/vmbusd/vmbus"
)

// BenchmarkChannelEcho drives a channel end to end against the simulated
// host in this process: each op is one packet sent by the guest, echoed by
// the host and verified by the guest. Allocations count both ends.
func BenchmarkChannelEcho(b *testing.B) {
	for _, size := range []int{64, 1024, 16384} {
		for _, mode := range []vmbus.WaitMode{vmbus.WaitInterrupt, vmbus.WaitPoll} {
			b.Run(fmt.Sprintf("%dB/%s", size, mode), func(b *testing.B) {
				h, err := sim.New(sim.Config{Root: b.TempDir(), Profile: sim.DefaultProfile})
				if err != nil {
					b.Fatal(err)
				}
				defer h.Close()
				d, err := h.AddDevice(sim.DeviceConfig{Class: vmbus.ClassTest})
				if err != nil {
					b.Fatal(err)
				}
				dev, _ := vmbus.LookupDevice(h.Root(), d.Instance())
				hd, err := vmbus.Open(dev, vmbus.Options{Mode: mode})
				if err != nil {
					b.Fatal(err)
				}
				defer hd.Close()
				p := &echo.Pump{Size: size, Window: 512}
				// Warm up so the pump's buffers exist before measuring.
				if err := p.Run(context.Background(), hd.Primary(), 1000); err != nil {
					b.Fatal(err)
				}
				p = &echo.Pump{Size: size, Window: 512}
				b.SetBytes(int64(size))
				b.ReportAllocs()
				b.ResetTimer()
				if err := p.Run(context.Background(), hd.Primary(), b.N); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				st := hd.Primary().Stats()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pkts/s")
				b.ReportMetric(float64(st.TxSignals+st.RxSignals)/float64(b.N+1000), "signals/pkt")
				b.ReportMetric(float64(st.Wakeups)/float64(b.N+1000), "wakeups/pkt")
			})
		}
	}
}

// BenchmarkChannelPingPong sends one packet at a time and waits for its
// echo, so every round trip blocks on the interrupt fd at both ends: it
// measures wake-up latency and shows that a blocking wait allocates
// nothing on the guest side (the allocations left are the simulated
// host's).
func BenchmarkChannelPingPong(b *testing.B) {
	for _, monitored := range []bool{true, false} {
		name := "monitored"
		if !monitored {
			name = "uio-write"
		}
		b.Run(name, func(b *testing.B) {
			h, err := sim.New(sim.Config{Root: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			defer h.Close()
			d, err := h.AddDevice(sim.DeviceConfig{Class: vmbus.ClassTest, NotMonitored: !monitored})
			if err != nil {
				b.Fatal(err)
			}
			dev, _ := vmbus.LookupDevice(h.Root(), d.Instance())
			hd, err := vmbus.Open(dev, vmbus.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer hd.Close()
			p := &echo.Pump{Size: 64, Window: 1}
			if err := p.Run(context.Background(), hd.Primary(), 100); err != nil {
				b.Fatal(err)
			}
			p = &echo.Pump{Size: 64, Window: 1}
			b.ReportAllocs()
			b.ResetTimer()
			if err := p.Run(context.Background(), hd.Primary(), b.N); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1000, "us/rtt")
			b.ReportMetric(float64(hd.Primary().Stats().Wakeups)/float64(b.N+100), "wakeups/pkt")
		})
	}
}
