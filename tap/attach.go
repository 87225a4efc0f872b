package tap

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vmbusd/vmbusd/netvsc"
)

// Pump moves frames from src to dst in bursts of up to burst until ctx
// ends or either side fails, which it returns. When dst refuses part of a
// burst it waits (dst.WaitTx) and retries, so backpressure reaches the
// source; it never drops. It allocates only its burst slice.
func Pump(ctx context.Context, src PacketSource, dst PacketSink, burst int, moved *atomic.Uint64) error {
	return PumpObserved(ctx, src, dst, burst, moved, nil)
}

// PumpObserved is Pump with an observer that sees every burst after it is
// read and before it is handed on (packet capture); observe must not keep
// the packets. A nil observer costs nothing.
func PumpObserved(ctx context.Context, src PacketSource, dst PacketSink, burst int, moved *atomic.Uint64, observe func([]*netvsc.Packet)) error {
	pkts := make([]*netvsc.Packet, burst)
	for {
		n := src.RxBurst(pkts)
		if n == 0 {
			if err := src.Wait(ctx); err != nil {
				return err
			}
			continue
		}
		if observe != nil {
			observe(pkts[:n])
		}
		sent := 0
		for sent < n {
			sent += dst.TxBurst(pkts[sent:n])
			if sent < n {
				if err := dst.WaitTx(ctx); err != nil {
					netvsc.PutBurst(pkts[sent:n])
					return err
				}
			}
		}
		if moved != nil {
			moved.Add(uint64(n))
		}
		clear(pkts[:n])
	}
}

// SteeredSink transmits on a NIC, each frame on the queue the host's send
// indirection table picks for its flow (docs/protocol/netvsc.md §2.8). Not safe for
// concurrent use (one per forwarding goroutine).
type SteeredSink struct {
	NIC   *netvsc.NIC
	short *netvsc.Queue
}

// TxBurst implements PacketSink.
func (s *SteeredSink) TxBurst(pkts []*netvsc.Packet) int {
	qs := s.NIC.Queues()
	if len(qs) == 1 {
		n := qs[0].TxBurst(pkts)
		if n < len(pkts) {
			s.short = qs[0]
		}
		return n
	}
	// Runs of frames for the same queue go in one burst; frames keep their
	// order; a queue that refuses stops the burst there (the rest are
	// retried after WaitTx).
	done := 0
	for done < len(pkts) {
		q := s.NIC.TxQueue(FlowHash(pkts[done].Data()))
		end := done + 1
		for end < len(pkts) && s.NIC.TxQueue(FlowHash(pkts[end].Data())) == q {
			end++
		}
		k := q.TxBurst(pkts[done:end])
		done += k
		if done < end {
			s.short = q
			return done
		}
	}
	return done
}

// WaitTx implements PacketSink.
func (s *SteeredSink) WaitTx(ctx context.Context) error {
	if q := s.short; q != nil {
		s.short = nil
		return q.WaitTx(ctx)
	}
	return ctx.Err()
}

// FlowHash is a cheap hash of an IP frame's addresses and ports (FNV-1a
// with a finaliser),
// consistent per flow; other frames hash to 0.
func FlowHash(f []byte) uint32 {
	if len(f) < 14 {
		return 0
	}
	var addr, ports []byte
	switch binary.BigEndian.Uint16(f[12:]) {
	case 0x0800:
		if len(f) < 34 {
			return 0
		}
		ihl := int(f[14]&0xf) * 4
		addr = f[26:34]
		if p := f[23]; (p == 6 || p == 17) && len(f) >= 14+ihl+4 {
			ports = f[14+ihl : 14+ihl+4]
		}
	case 0x86dd:
		if len(f) < 58 {
			return 0
		}
		addr = f[22:54]
		if p := f[20]; p == 6 || p == 17 {
			ports = f[54:58]
		}
	default:
		return 0
	}
	h := uint32(2166136261)
	for _, c := range addr {
		h = (h ^ uint32(c)) * 16777619
	}
	for _, c := range ports {
		h = (h ^ uint32(c)) * 16777619
	}
	// Avalanche (murmur3's finaliser): the send table uses the low bits,
	// and FNV's low bit is just the XOR of the inputs' low bits (Linux
	// hands out only even ports to connect()).
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	return h
}

// Buffers for frames read from a TAP with offloads hold a 64 KiB
// super-frame: superPoolPackets of them per TAP queue.
const (
	superPoolPackets = 128
	superPoolFrame   = 65536 + 128
)

// Attachment forwards between a NIC and a TAP device both ways, one
// goroutine per direction and queue, and makes the TAP's carrier follow
// the NIC's link.
type Attachment struct {
	nic    *netvsc.NIC
	dev    *Device
	log    *slog.Logger
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	err    error
	done   chan struct{}

	ToTAP, FromTAP atomic.Uint64 // frames forwarded
}

// AttachOptions tune Attach.
type AttachOptions struct {
	Burst  int // frames per burst (0: 64)
	Logger *slog.Logger
	// Observe, when set, sees every burst: toTAP says the direction (NIC to
	// TAP: received by the guest), queue is the NIC queue it came from or
	// -1 for frames read from the TAP. It must not keep the packets.
	Observe func(toTAP bool, queue int, pkts []*netvsc.Packet)
}

// Attach starts forwarding. NIC queue i goes to TAP queue i mod the TAP's
// queue count; TAP queue j reads into NIC queue j's pool and transmits
// through the send table. It stops at Close or when either side fails
// (Err; Done closes).
func Attach(nic *netvsc.NIC, dev *Device, opt AttachOptions) (*Attachment, error) {
	if opt.Burst <= 0 {
		opt.Burst = 64
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	nqs, tqs := nic.Queues(), dev.Queues()
	if len(nqs) == 0 || len(tqs) == 0 {
		return nil, errors.New("tap: nothing to attach")
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &Attachment{nic: nic, dev: dev, log: opt.Logger.With("tap", dev.Name()), cancel: cancel, done: make(chan struct{})}
	observer := func(toTAP bool, queue int) func([]*netvsc.Packet) {
		if opt.Observe == nil {
			return nil
		}
		return func(p []*netvsc.Packet) { opt.Observe(toTAP, queue, p) }
	}
	for i, q := range nqs {
		t := tqs[i%len(tqs)]
		obs := observer(true, i)
		a.run(ctx, "nic-to-tap", func() error { return PumpObserved(ctx, q, t, opt.Burst, &a.ToTAP, obs) })
	}
	for _, t := range tqs {
		t.f.SetReadDeadline(time.Time{})
	}
	off := nic.TxOffloads()
	superFrames := dev.offloads&(OffloadTSO4|OffloadTSO6|OffloadUSO4|OffloadUSO6) != 0
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
		sink := &SteeredSink{NIC: nic}
		obs := observer(false, -1)
		a.run(ctx, "tap-to-nic", func() error { return PumpObserved(ctx, t, sink, opt.Burst, &a.FromTAP, obs) })
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
		q.interrupt()
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
