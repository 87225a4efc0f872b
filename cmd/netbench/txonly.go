package main

// The txonly test: vmbusd's counterpart of DPDK testpmd's txonly forwarding
// mode, so the two guests can be measured against the same simulated host
// (`vmbusd sim --port sink`) with the same frame size and queue count.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vmbusd/vmbusd/frame"
	"github.com/vmbusd/vmbusd/netvsc"
	"github.com/vmbusd/vmbusd/vmbus"
)

// testTxOnly transmits -size byte frames on every one of -queues queues as
// fast as the NIC takes them for -dur, after a warm-up, and reports the
// guest's transmit rate and CPU. With -root it drives the first synthetic
// NIC of a host already serving that root (its CPU is read from -host-pid
// when given); otherwise it starts its own host with a discarding port.
func testTxOnly() error {
	var h *host
	var dev vmbus.Device
	if *simRoot != "" {
		d, err := findNIC(*simRoot)
		if err != nil {
			return err
		}
		dev = d
	} else {
		var err error
		if h, err = startHost("-port", "sink", "-maxq", fmt.Sprint(max(*queues, 1))); err != nil {
			return err
		}
		defer h.stop()
		if dev, err = vmbus.LookupDevice(h.root, h.instance); err != nil {
			return err
		}
	}
	hostCPU := func() float64 {
		switch {
		case h != nil:
			return h.cpu()
		case *hostPID > 0:
			return procCPU(*hostPID)
		}
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	n, err := netvsc.Open(ctx, dev, netvsc.Config{Queues: *queues, Mode: modeList()[0]})
	cancel()
	if err != nil {
		return fmt.Errorf("open %s: %w", dev.Instance, err)
	}
	defer n.Close()

	var count, rxc atomic.Uint64
	ctx, cancel = context.WithCancel(context.Background())
	rx := &sync.WaitGroup{}
	if *txRx {
		rx = rxLoop(ctx, n, &rxc)
	}
	var wg sync.WaitGroup
	qs := n.Queues()
	w := *workers
	if w <= 0 || w > len(qs) {
		w = len(qs)
	}
	// Worker i serves queues i, i+w, i+2w, ...: with -workers 1 one
	// goroutine serves every queue, as testpmd's single forwarding lcore
	// does.
	for i := range w {
		var mine []*netvsc.Queue
		for j := i; j < len(qs); j += w {
			mine = append(mine, qs[j])
		}
		wg.Add(1)
		go func() { defer wg.Done(); txLoopQueues(ctx, n, mine, *txSize, &count) }()
	}
	time.Sleep(300 * time.Millisecond) // warm up: sections and rings in use
	c0, hc0, p0, s0 := selfCPU(), hostCPU(), count.Load(), n.Stats()
	start := time.Now()
	time.Sleep(*dur)
	el := time.Since(start).Seconds()
	c1, hc1, p1, s1 := selfCPU(), hostCPU(), count.Load(), n.Stats()
	cancel()
	wg.Wait()
	rx.Wait()
	if err := n.Err(); err != nil {
		return err
	}
	pk := float64(p1 - p0)
	if pk == 0 {
		return fmt.Errorf("no frames sent in %.1f s", el)
	}
	var sig, busy, full uint64
	for i := range s1.Queues {
		a, b := s1.Queues[i], s0.Queues[i]
		sig += a.Channel.TxSignals + a.Channel.RxSignals - b.Channel.TxSignals - b.Channel.RxSignals
		busy += a.TxBusy - b.TxBusy
		full += a.TxSendFull - b.TxSendFull
	}
	kv := map[string]any{"test": "txonly", "size": *txSize, "mode": modeList()[0].String(), "queues": len(s1.Queues), "workers": w,
		"pps": pk / el, "gbps": pk * float64(*txSize) * 8 / el / 1e9,
		"guest_cpu": (c1 - c0) / el, "guest_cpu_s_per_mpkt": (c1 - c0) / (pk / 1e6),
		"signals_per_pkt": float64(sig) / pk, "tx_busy_per_kpkt": float64(busy) / (pk / 1e3),
		"send_full_per_kpkt": float64(full) / (pk / 1e3)}
	order := []string{"test", "size", "mode", "queues", "workers", "pps", "gbps", "guest_cpu", "guest_cpu_s_per_mpkt"}
	if h != nil || *hostPID > 0 {
		kv["host_cpu"], kv["host_cpu_s_per_mpkt"] = (hc1-hc0)/el, (hc1-hc0)/(pk/1e6)
		order = append(order, "host_cpu", "host_cpu_s_per_mpkt")
	}
	emit(kv, append(order, "signals_per_pkt", "tx_busy_per_kpkt", "send_full_per_kpkt")...)
	return nil
}

// findNIC returns the first synthetic NIC under root that is bound to
// uio_hv_generic.
func findNIC(root string) (vmbus.Device, error) {
	devs, err := vmbus.ScanDevices(root)
	if err != nil {
		return vmbus.Device{}, fmt.Errorf("scan %s: %w", root, err)
	}
	for _, d := range devs {
		if d.Class == vmbus.ClassNetwork && d.UIO != "" {
			return d, nil
		}
	}
	return vmbus.Device{}, fmt.Errorf("no synthetic NIC bound to uio_hv_generic under %s", root)
}

// txLoopQueues transmits -size byte frames on its queues in turn, 32 per
// burst per queue, until ctx ends. It waits only when no queue took a frame
// in a whole round, and then on the first queue that refused one.
func txLoopQueues(ctx context.Context, n *netvsc.NIC, qs []*netvsc.Queue, size int, count *atomic.Uint64) {
	if len(qs) == 1 {
		txLoop(ctx, n, qs[0], size, 0, 0, count)
		return
	}
	tmpl := txTemplate(n, size)
	pkts := make([]*frame.Packet, 32)
	for ctx.Err() == nil {
		var full *netvsc.Queue
		sent := 0
		for _, q := range qs {
			k := q.AllocBurst(pkts)
			for _, p := range pkts[:k] {
				copy(p.SetLen(size), tmpl)
			}
			m := q.TxBurst(pkts[:k])
			frame.PutBurst(pkts[m:k])
			sent += m
			if (m < k || k == 0) && full == nil {
				full = q
			}
		}
		count.Add(uint64(sent))
		if sent == 0 && full != nil {
			full.WaitTx(ctx)
		}
	}
}
