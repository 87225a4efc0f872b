package nictap

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/vmbusd/vmbusd/frame"
	"github.com/vmbusd/vmbusd/netvsc"
	"github.com/vmbusd/vmbusd/tap"
	"github.com/vmbusd/vmbusd/vmbus"
)

// Buffers for frames read from a TAP with offloads hold a 64 KiB
// super-frame: superPoolPackets of them per TAP queue.
const (
	superPoolPackets = 128
	superPoolFrame   = 65536 + 128
)

// SuperFramePoolBytes is the GPA-pool memory Attach carves per TAP queue
// for the super-frames of a TAP with offloads, so that whoever sizes a
// NIC's GPA pool can leave room for them: without it the buffers come from
// the heap and every large send is copied into send sections in pieces
// instead of going to the host whole (GPA-direct).
func SuperFramePoolBytes() int {
	c := frame.PoolConfig{Buffers: superPoolPackets, Frame: superPoolFrame, Headroom: netvsc.Headroom}
	const page = vmbus.HyperVPageSize
	return (c.MemSize() + page - 1) &^ (page - 1)
}

// Attachment forwards between a NIC and a TAP device both ways, one
// goroutine per direction and queue, and makes the TAP's carrier follow
// the NIC's link.
type Attachment struct {
	nic    *netvsc.NIC
	dev    *tap.Device
	log    *slog.Logger
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	err    error
	done   chan struct{}

	ToTAP, FromTAP atomic.Uint64 // frames forwarded
}

// Options tune Attach.
type Options struct {
	Burst  int // frames per burst (0: 64)
	Logger *slog.Logger
	// Observe, when set, sees every burst: toTAP says the direction (NIC to
	// TAP: received by the guest), queue is the NIC queue it came from or
	// -1 for frames read from the TAP. It must not keep the packets.
	Observe func(toTAP bool, queue int, pkts []*frame.Packet)
}

// Attach starts forwarding. NIC queue i goes to TAP queue i mod the TAP's
// queue count; TAP queue j reads into NIC queue j's pool and transmits
// through the send table. It stops at Close or when either side fails
// (Err; Done closes).
func Attach(nic *netvsc.NIC, dev *tap.Device, opt Options) (*Attachment, error) {
	if opt.Burst <= 0 {
		opt.Burst = 64
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	nqs, tqs := nic.Queues(), dev.Queues()
	if len(nqs) == 0 || len(tqs) == 0 {
		return nil, errors.New("nictap: nothing to attach")
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &Attachment{nic: nic, dev: dev, log: opt.Logger.With("tap", dev.Name()), cancel: cancel, done: make(chan struct{})}
	observer := func(toTAP bool, queue int) func([]*frame.Packet) {
		if opt.Observe == nil {
			return nil
		}
		return func(p []*frame.Packet) { opt.Observe(toTAP, queue, p) }
	}
	for i, q := range nqs {
		t := tqs[i%len(tqs)]
		obs := observer(true, i)
		a.run(ctx, "nic-to-tap", func() error { return frame.PumpObserved(ctx, q, t, opt.Burst, &a.ToTAP, obs) })
	}
	for _, t := range tqs {
		t.Resume() // a previous attachment may have interrupted it
	}
	off := nic.TxOffloads()
	superFrames := dev.Offloads()&(tap.OffloadTSO4|tap.OffloadTSO6|tap.OffloadUSO4|tap.OffloadUSO6) != 0
	gpa := nic.Config().GPAPool
	if superFrames && gpa != nil && min(off.LSO4, off.LSO6) > 0 && min(off.LSO4, off.LSO6) < 65536 {
		// Whole large sends go GPA-direct only up to the host's limit.
		if err := dev.SetGSOMaxSize(min(off.LSO4, off.LSO6)); err != nil {
			a.log.Warn("super-frames larger than the host's large send will be cut", "err", err)
		}
	}
	for j, t := range tqs {
		nq := nqs[j%len(nqs)]
		pool := nq.Pool()
		if superFrames {
			// 64 KiB buffers, from the NIC's GPA pool when it has one (a
			// large send then goes to the host without a copy).
			var err error
			if pool, err = netvsc.NewPool(superPoolPackets, superPoolFrame, gpa); err != nil && gpa != nil {
				a.log.Warn("GPA pool too small for the TAP's super-frames; using the heap", "err", err)
				pool, err = netvsc.NewPool(superPoolPackets, superPoolFrame, nil)
			}
			if err != nil {
				cancel()
				return nil, err
			}
		}
		t.SetPool(pool)
		t.SetNIC(off, nq.Pool())
		sink := &netvsc.SteeredSink{NIC: nic}
		obs := observer(false, -1)
		a.run(ctx, "tap-to-nic", func() error { return frame.PumpObserved(ctx, t, sink, opt.Burst, &a.FromTAP, obs) })
	}
	a.run(ctx, "carrier", func() error { return a.runCarrier(ctx) })
	go func() {
		a.wg.Wait()
		close(a.done)
	}()
	return a, nil
}

func (a *Attachment) run(ctx context.Context, what string, fn func() error) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		a.log.Debug("forwarder started", "what", what)
		err := fn()
		if err != nil && ctx.Err() == nil {
			a.mu.Lock()
			if a.err == nil {
				a.err = err
			}
			a.mu.Unlock()
			a.log.Warn("forwarder stopped", "what", what, "err", err)
			a.stop()
		}
		a.log.Debug("forwarder stopped", "what", what)
	}()
}

// runCarrier keeps the TAP carrier equal to the NIC's link state.
func (a *Attachment) runCarrier(ctx context.Context) error {
	for {
		ch := a.nic.LinkChanged()
		up := a.nic.Link().Up && a.nic.Err() == nil
		if err := a.dev.SetCarrier(up); err != nil {
			return err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil
		}
	}
}

func (a *Attachment) stop() {
	a.cancel()
	for _, q := range a.dev.Queues() {
		q.Interrupt()
	}
}

// Err returns why forwarding stopped (nil after Close).
func (a *Attachment) Err() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// Done is closed when every forwarding goroutine has stopped.
func (a *Attachment) Done() <-chan struct{} { return a.done }

// Close stops forwarding and waits for the goroutines. The NIC and the
// device stay open.
func (a *Attachment) Close() error {
	a.stop()
	<-a.done
	return nil
}
