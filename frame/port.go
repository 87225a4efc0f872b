package frame

import (
	"context"
	"encoding/binary"
	"sync/atomic"
)

// Source yields frames in bursts (a netvsc queue's receive side, a TAP
// queue's reads). The package doc states the ownership and blocking rules.
type Source interface {
	// RxBurst fills pkts with received frames and returns how many; the
	// caller owns them. It never blocks.
	RxBurst(pkts []*Packet) int
	// Wait blocks until RxBurst may find a frame, ctx ends (its error) or
	// the source fails or closes (that error).
	Wait(ctx context.Context) error
}

// Sink takes frames in bursts (a netvsc queue's transmit side, a TAP
// queue's writes).
type Sink interface {
	// TxBurst takes ownership of a prefix of pkts and returns its length;
	// it may take none when it has no room. It never blocks.
	TxBurst(pkts []*Packet) int
	// WaitTx blocks until TxBurst may take more, ctx ends (its error) or
	// the sink fails or closes (that error).
	WaitTx(ctx context.Context) error
}

// Pump moves frames from src to dst in bursts of up to burst until ctx
// ends or either side fails, which it returns. When dst refuses part of a
// burst it waits (dst.WaitTx) and retries, so backpressure reaches the
// source; it never drops. moved, when set, counts the frames handed on.
// It allocates only its burst slice.
func Pump(ctx context.Context, src Source, dst Sink, burst int, moved *atomic.Uint64) error {
	return PumpObserved(ctx, src, dst, burst, moved, nil)
}

// PumpObserved is Pump with an observer that sees every burst after it is
// read and before it is handed on (packet capture); observe must not keep
// the packets. A nil observer costs nothing.
func PumpObserved(ctx context.Context, src Source, dst Sink, burst int, moved *atomic.Uint64, observe func([]*Packet)) error {
	pkts := make([]*Packet, max(burst, 1))
	for {
		n := src.RxBurst(pkts)
		if n == 0 {
			// Wait may return nil spuriously and need not look at ctx
			// when it finds work: a source that keeps finding work it
			// cannot deliver (a dead ring with bytes unread, say) must
			// not keep a cancelled pump spinning.
			if err := ctx.Err(); err != nil {
				return err
			}
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
					PutBurst(pkts[sent:n])
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

// FlowHash is a cheap hash of an IP frame's addresses and ports (FNV-1a
// with a finaliser), the same for every frame of a flow; other frames hash
// to 0. A sink with several queues uses it to keep a flow on one queue.
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
	// Avalanche (murmur3's finaliser): a multi-queue sink uses the low
	// bits, and FNV's low bit is just the XOR of the inputs' low bits
	// (Linux hands out only even ports to connect()).
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	return h
}
