package afxdp

import (
	"bytes"
	"errors"
	"testing"
)

// A fake kernel: the four rings and the UMEM in ordinary memory, laid out
// with the same words the kernel uses, so the data path can be driven
// with every ring entry a misbehaving kernel could write.

const testHdr = 192 // producer at 0, consumer at 64, flags at 128, entries at 192

type fakeKernel struct {
	x                     *xsk
	rxMem, txMem, fillMem []byte
	compMem               []byte
	fillCons, txCons      uint32 // the kernel's consumer indices
	rxProd, compProd      uint32 // the kernel's producer indices
	ring, first           uint32
}

func newFakeKernel(ring, first uint32, shift uint, txOff uint64) *fakeKernel {
	mk := func(n uint32, esz int) ([]byte, ringMem) {
		mem := make([]byte, testHdr+int(n)*esz)
		return mem, newRingMem(mem, 0, 64, 128, testHdr, n)
	}
	k := &fakeKernel{ring: ring, first: first}
	var rx, tx, fill, comp ringMem
	k.rxMem, rx = mk(ring, descSize)
	k.txMem, tx = mk(ring, descSize)
	k.fillMem, fill = mk(2*ring, 8)
	k.compMem, comp = mk(ring, 8)
	umem := make([]byte, (uint64(first)+2*uint64(ring))<<shift)
	k.x = &xsk{
		umem:    umem,
		rx:      consRing{m: rx, size: ring, which: RingRX},
		tx:      prodRing{m: tx, size: ring, which: RingTX},
		fill:    prodRing{m: fill, size: 2 * ring, which: RingFill},
		comp:    consRing{m: comp, size: ring, which: RingCompletion},
		fr:      newFrames(shift, first, ring, ring, txOff),
		maxTx:   int(uint64(1)<<shift - txOff),
		scratch: make([]uint32, ring),
	}
	k.x.primeFill()
	return k
}

// takeFill consumes one fill entry, as the kernel does before receiving.
func (k *fakeKernel) takeFill() (uint64, bool) {
	if k.fillCons == k.x.fill.m.producer.Load() {
		return 0, false
	}
	a := *k.x.fill.m.addr(k.fillCons)
	k.fillCons++
	k.x.fill.m.consumer.Store(k.fillCons)
	return a, true
}

// deliver writes an RX descriptor as given (no checks: the kernel may lie)
// and publishes it.
func (k *fakeKernel) deliver(addr uint64, length, options uint32) {
	d := k.x.rx.m.desc(k.rxProd)
	d.addr, d.len, d.options = addr, length, options
	k.rxProd++
	k.x.rx.m.producer.Store(k.rxProd)
}

// receive is an honest kernel receiving frame: a fill entry, the data at
// the XDP headroom, an RX descriptor.
func (k *fakeKernel) receive(t testing.TB, frame []byte) {
	base, ok := k.takeFill()
	if !ok {
		t.Fatal("fake kernel: fill ring empty")
	}
	addr := base + xdpPacketHeadroom
	copy(k.x.umem[addr:], frame)
	k.deliver(addr, uint32(len(frame)), 0)
}

// transmit is an honest kernel sending every TX descriptor and completing
// it; it returns the frames' bytes.
func (k *fakeKernel) transmit() [][]byte {
	var out [][]byte
	for prod := k.x.tx.m.producer.Load(); k.txCons != prod; k.txCons++ {
		d := k.x.tx.m.desc(k.txCons)
		out = append(out, bytes.Clone(k.x.umem[d.addr:d.addr+uint64(d.len)]))
		*k.x.comp.m.addr(k.compProd) = d.addr
		k.compProd++
	}
	k.x.tx.m.consumer.Store(k.txCons)
	k.x.comp.m.producer.Store(k.compProd)
	return out
}

func (k *fakeKernel) complete(addr uint64) {
	*k.x.comp.m.addr(k.compProd) = addr
	k.compProd++
	k.x.comp.m.producer.Store(k.compProd)
}

func testPayload(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

func newBufs(n, size int) ([][]byte, []int) {
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = make([]byte, size)
	}
	return bufs, make([]int, n)
}

func TestRecvCopiesFramesAndRefillsOnAHonestKernel(t *testing.T) {
	k := newFakeKernel(64, 0, 11, 0)
	bufs, sizes := newBufs(16, 2048)
	// Several laps of every ring, with batches of different sizes.
	for lap := range 40 {
		n := 1 + lap%16
		var want [][]byte
		for i := range n {
			f := testPayload(60+lap*30%1400+i, byte(lap+i))
			want = append(want, f)
			k.receive(t, f)
		}
		got, err := k.x.recv(bufs, sizes)
		if err != nil || got != n {
			t.Fatalf("lap %d: recv = %d, %v; want %d", lap, got, err, n)
		}
		for i := range n {
			if !bytes.Equal(bufs[i][:sizes[i]], want[i]) {
				t.Fatalf("lap %d frame %d differs", lap, i)
			}
		}
	}
	var want uint64
	for lap := range 40 {
		want += uint64(1 + lap%16)
	}
	if st := k.x.c.snapshot(); st.RxPackets != want || st.InvalidDesc != 0 {
		t.Fatalf("stats %+v, want %d packets", st, want)
	}
}

func TestRecvDropsFramesLongerThanTheBuffer(t *testing.T) {
	k := newFakeKernel(64, 0, 11, 0)
	k.receive(t, testPayload(100, 1))
	k.receive(t, testPayload(40, 2))
	bufs := [][]byte{make([]byte, 64), make([]byte, 64)}
	sizes := make([]int, 2)
	n, err := k.x.recv(bufs, sizes)
	if err != nil || n != 1 || sizes[0] != 40 {
		t.Fatalf("recv = %d, %v, sizes %v; want the 40-byte frame only", n, err, sizes)
	}
	if st := k.x.c.snapshot(); st.RxTooLong != 1 {
		t.Fatalf("RxTooLong = %d", st.RxTooLong)
	}
	// The dropped frame's slot went back to the kernel.
	if got := k.x.fill.prod - k.fillCons; got != 64 {
		t.Fatalf("fill ring holds %d frames, want 64", got)
	}
}

func TestSendQueuesFramesAndReapsCompletions(t *testing.T) {
	k := newFakeKernel(64, 0, 11, 64)
	for lap := range 20 {
		var bufs [][]byte
		for i := range 1 + lap%30 {
			bufs = append(bufs, testPayload(60+i*40, byte(lap)))
		}
		n, err := k.x.send(bufs)
		if err != nil || n != len(bufs) {
			t.Fatalf("lap %d: send = %d, %v", lap, n, err)
		}
		got := k.transmit()
		for i := range bufs {
			if !bytes.Equal(got[i], bufs[i]) {
				t.Fatalf("lap %d frame %d differs", lap, i)
			}
		}
	}
}

func TestSendStopsWhenFramesRunOut(t *testing.T) {
	k := newFakeKernel(64, 0, 11, 0)
	bufs := make([][]byte, 100)
	for i := range bufs {
		bufs[i] = testPayload(64, byte(i))
	}
	n, err := k.x.send(bufs)
	if err != nil || n != 64 {
		t.Fatalf("send = %d, %v; want 64 (the TX frames)", n, err)
	}
	if n, _ := k.x.send(bufs); n != 0 {
		t.Fatalf("send with nothing completed = %d", n)
	}
	if st := k.x.c.snapshot(); st.TxRingFull != 2 {
		t.Fatalf("TxRingFull = %d, want 2", st.TxRingFull)
	}
	k.transmit()
	if n, err := k.x.send(bufs[:10]); err != nil || n != 10 {
		t.Fatalf("send after completions = %d, %v", n, err)
	}
}

func TestSendRejectsBadFrameSizes(t *testing.T) {
	k := newFakeKernel(64, 0, 11, 0)
	for _, bad := range []int{0, 2049} {
		n, err := k.x.send([][]byte{testPayload(64, 1), make([]byte, bad)})
		if n != 1 || !errors.Is(err, ErrFrameSize) {
			t.Fatalf("size %d: send = %d, %v", bad, n, err)
		}
		if k.x.err() != nil {
			t.Fatal("a bad frame from the caller must not kill the socket")
		}
	}
}

// Every check a kernel-written entry can fail, with the exact Kind.
func TestCorruptRingEntriesKillTheSocket(t *testing.T) {
	const ring = 64
	const first = 4 // the socket's frames start at frame 4 of a shared UMEM
	rxBase := func(i uint64) uint64 { return (first + i) << 11 }
	txBase := func(i uint64) uint64 { return (first + ring + i) << 11 }
	tests := []struct {
		name string
		do   func(k *fakeKernel) error
		ring Ring
		kind Kind
	}{
		{"rx producer a lap ahead", func(k *fakeKernel) error {
			k.x.rx.m.producer.Store(ring + 1)
			return recvErr(k)
		}, RingRX, KindProducer},
		{"rx addr below the socket's frames", func(k *fakeKernel) error {
			k.takeFill()
			k.deliver(0x100, 64, 0)
			return recvErr(k)
		}, RingRX, KindAddr},
		{"rx addr in a tx frame", func(k *fakeKernel) error {
			k.takeFill()
			k.deliver(txBase(0)+256, 64, 0)
			return recvErr(k)
		}, RingRX, KindAddr},
		{"rx addr past the umem", func(k *fakeKernel) error {
			k.takeFill()
			k.deliver(1<<40, 64, 0)
			return recvErr(k)
		}, RingRX, KindAddr},
		{"rx addr wraps", func(k *fakeKernel) error {
			k.takeFill()
			k.deliver(^uint64(0)-10, 64, 0)
			return recvErr(k)
		}, RingRX, KindAddr},
		{"rx len zero", func(k *fakeKernel) error {
			a, _ := k.takeFill()
			k.deliver(a+256, 0, 0)
			return recvErr(k)
		}, RingRX, KindLen},
		{"rx len past the frame", func(k *fakeKernel) error {
			a, _ := k.takeFill()
			k.deliver(a+256, 2048-256+1, 0)
			return recvErr(k)
		}, RingRX, KindLen},
		{"rx len huge", func(k *fakeKernel) error {
			a, _ := k.takeFill()
			k.deliver(a+256, ^uint32(0), 0)
			return recvErr(k)
		}, RingRX, KindLen},
		{"rx options", func(k *fakeKernel) error {
			a, _ := k.takeFill()
			k.deliver(a+256, 64, 1)
			return recvErr(k)
		}, RingRX, KindOptions},
		{"rx frame twice in a batch", func(k *fakeKernel) error {
			a, _ := k.takeFill()
			k.deliver(a+256, 64, 0)
			k.deliver(a+256, 64, 0)
			return recvErr(k)
		}, RingRX, KindOwner},
		{"fill consumer past producer", func(k *fakeKernel) error {
			k.x.fill.cons = 0
			k.x.fill.m.consumer.Store(k.x.fill.prod + 1)
			_, err := k.x.fill.free(2 * ring)
			if err != nil {
				return k.x.fail(err)
			}
			return nil
		}, RingFill, KindConsumer},
		{"tx consumer backwards", func(k *fakeKernel) error {
			full := make([][]byte, ring)
			for i := range full {
				full[i] = testPayload(64, 0)
			}
			k.x.send(full)
			k.transmit()
			k.x.send(full[:32]) // reads the consumer: 64
			k.transmit()
			k.x.tx.m.consumer.Store(3) // behind what it already consumed
			_, err := k.x.send(full)
			return err
		}, RingTX, KindConsumer},
		{"completion producer a lap ahead", func(k *fakeKernel) error {
			k.x.comp.m.producer.Store(ring + 5)
			_, err := k.x.send([][]byte{testPayload(64, 0)})
			return err
		}, RingCompletion, KindProducer},
		{"completion of an rx frame", func(k *fakeKernel) error {
			k.complete(rxBase(3))
			_, err := k.x.send(nil)
			return err
		}, RingCompletion, KindAddr},
		{"completion past the umem", func(k *fakeKernel) error {
			k.complete(txBase(ring))
			_, err := k.x.send(nil)
			return err
		}, RingCompletion, KindAddr},
		{"completion at another offset", func(k *fakeKernel) error {
			k.x.send([][]byte{testPayload(64, 0)})
			k.complete(txBase(ring-1) + 8) // the frame sent first, off by 8
			_, err := k.x.send(nil)
			return err
		}, RingCompletion, KindTxAddr},
		{"completion of a frame never sent", func(k *fakeKernel) error {
			k.complete(txBase(5))
			_, err := k.x.send(nil)
			return err
		}, RingCompletion, KindOwner},
		{"completion twice", func(k *fakeKernel) error {
			k.x.send([][]byte{testPayload(64, 0)})
			k.transmit()
			k.complete(txBase(ring - 1))
			_, err := k.x.send(nil)
			return err
		}, RingCompletion, KindOwner},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := newFakeKernel(ring, first, 11, 0)
			err := tt.do(k)
			var ce *CorruptError
			if !errors.As(err, &ce) || ce.Ring != tt.ring || ce.Kind != tt.kind {
				t.Fatalf("err = %v; want a corrupt %s ring: %s", err, tt.ring, tt.kind)
			}
			// Dead from then on, counted once.
			if _, err2 := k.x.recv(newBufs(1, 2048)); err2 != err {
				t.Fatalf("recv after corruption: %v", err2)
			}
			if _, err2 := k.x.send([][]byte{testPayload(64, 0)}); err2 != err {
				t.Fatalf("send after corruption: %v", err2)
			}
			if n := k.x.c.snapshot().InvalidDesc; n != 1 {
				t.Fatalf("InvalidDesc = %d", n)
			}
		})
	}
}

func recvErr(k *fakeKernel) error {
	_, err := k.x.recv(newBufs(8, 2048))
	return err
}

func TestKindsHaveNames(t *testing.T) {
	for k := KindProducer; k <= KindTxAddr; k++ {
		if s := k.String(); s == "" || s[0] == 'k' {
			t.Errorf("Kind %d has no name", k)
		}
	}
}
