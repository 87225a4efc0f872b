package afxdp

import (
	"encoding/binary"
	"errors"
	"testing"
)

// refRxKind is the RX descriptor rule written out plainly, as a reference
// for the fuzzers: a frame of the socket's RX half (frames first ..
// first+ring-1 of 2048 bytes), data inside it, no options, and not named
// twice in one batch.
func refRxKind(addr uint64, length, options uint32, first, ring uint64, seen map[uint64]bool) Kind {
	frame := addr / 2048
	switch {
	case frame < first || frame >= first+ring:
		return KindAddr
	case length == 0 || addr%2048+uint64(length) > 2048:
		return KindLen
	case options != 0:
		return KindOptions
	case seen[frame]:
		return KindOwner
	}
	return 0
}

// FuzzRecv feeds the receive path descriptors a kernel might write, honest
// or not, and checks it against refRxKind: valid frames are delivered
// intact, the first invalid one fails with the reference's Kind, nothing
// panics. Each 16-byte record is one descriptor; its first byte's low bit
// picks an honest address (from the fill ring, offset by the record) or
// the record's raw one; bit 1 ends the batch after it.
func FuzzRecv(f *testing.F) {
	rec := func(honest bool, end bool, addr uint64, length, options uint32) []byte {
		b := make([]byte, 16)
		binary.LittleEndian.PutUint64(b, addr)
		binary.LittleEndian.PutUint32(b[8:], length)
		binary.LittleEndian.PutUint32(b[12:], options)
		b[0] &^= 3
		if !honest {
			b[0] |= 1
		}
		if end {
			b[0] |= 2
		}
		return b
	}
	f.Add(append(rec(true, false, 256, 64, 0), rec(true, true, 256, 1514, 0)...))
	f.Add(rec(false, true, 3<<11|256, 64, 0))
	f.Add(rec(true, true, 256, 0, 0))
	f.Add(rec(true, true, 1800, 300, 0))
	f.Add(rec(true, true, 256, 64, 1))
	f.Fuzz(func(t *testing.T, data []byte) {
		const ring, first = 16, 2
		k := newFakeKernel(ring, first, 11, 0)
		bufs, sizes := newBufs(ring, 2048)
		seen := map[uint64]bool{}
		var pending []struct {
			addr   uint64
			length uint32
			want   Kind
		}
		for len(data) >= 16 && k.x.err() == nil {
			r := data[:16]
			data = data[16:]
			addr := binary.LittleEndian.Uint64(r) &^ 3
			length := binary.LittleEndian.Uint32(r[8:])
			options := binary.LittleEndian.Uint32(r[12:])
			if r[0]&1 == 0 {
				base, ok := k.takeFill()
				if !ok {
					return
				}
				addr = base + addr%2048
			}
			if uint32(len(pending)) == ring {
				return
			}
			k.deliver(addr, length, options)
			kind := refRxKind(addr, length, options, first, ring, seen)
			seen[addr/2048] = true
			pending = append(pending, struct {
				addr   uint64
				length uint32
				want   Kind
			}{addr, length, kind})
			if r[0]&2 == 0 && len(data) >= 16 {
				continue
			}
			n, err := k.x.recv(bufs, sizes)
			want := 0
			var wantKind Kind
			for _, p := range pending {
				if p.want != 0 {
					wantKind = p.want
					break
				}
				want++
			}
			if n != want {
				t.Fatalf("recv = %d frames, reference %d", n, want)
			}
			for i := range n {
				p := pending[i]
				if sizes[i] != int(p.length) || string(bufs[i][:sizes[i]]) != string(k.x.umem[p.addr:p.addr+uint64(p.length)]) {
					t.Fatalf("frame %d not delivered intact", i)
				}
			}
			var ce *CorruptError
			if wantKind == 0 && err != nil || wantKind != 0 && (!errors.As(err, &ce) || ce.Kind != wantKind) {
				t.Fatalf("recv err = %v, reference kind %v", err, wantKind)
			}
			pending = pending[:0]
			clear(seen)
		}
		if k.x.err() == nil {
			// Every RX frame is back with the kernel.
			for rel := range uint32(ring) {
				if k.x.fr.state[rel] != frameInFill {
					t.Fatalf("rx frame %d not in the fill ring", rel)
				}
			}
		}
	})
}

// FuzzCompletions feeds the transmit path completion addresses and index
// moves, and checks that the free list never holds a frame twice or a
// frame the kernel still has, whatever the kernel writes.
func FuzzCompletions(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3}, uint8(3))
	f.Add([]byte{200, 1, 1}, uint8(10))
	f.Fuzz(func(t *testing.T, data []byte, sends uint8) {
		const ring, first = 16, 2
		k := newFakeKernel(ring, first, 11, 0)
		frames := make([][]byte, sends%(ring+4))
		for i := range frames {
			frames[i] = testPayload(64, byte(i))
		}
		sent, _ := k.x.send(frames)
		for _, b := range data {
			switch {
			case b < 128: // complete tx frame b%32 (some never sent, some out of range)
				k.complete(uint64(first+ring+uint64(b%32)) << 11)
			case b < 192: // a raw, likely bad, address
				k.complete(uint64(b) << 9)
			default: // move the completion producer by b-192
				k.compProd += uint32(b - 192)
				k.x.comp.m.producer.Store(k.compProd)
			}
			if _, err := k.x.send(nil); err != nil {
				var ce *CorruptError
				if !errors.As(err, &ce) {
					t.Fatalf("send: %v", err)
				}
				break
			}
		}
		seen := map[uint32]bool{}
		for _, idx := range k.x.fr.free {
			if seen[idx] {
				t.Fatalf("frame %d on the free list twice", idx)
			}
			seen[idx] = true
			if idx < first+ring || idx >= first+2*ring || k.x.fr.state[idx-first] != frameOurs {
				t.Fatalf("frame %d on the free list is not a free tx frame", idx)
			}
		}
		_ = sent
		if len(k.x.fr.free) > ring {
			t.Fatalf("free list holds %d frames of %d", len(k.x.fr.free), ring)
		}
	})
}
