package frame

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func newPool(t testing.TB, n int) *Pool {
	t.Helper()
	p, err := NewPool(PoolConfig{Buffers: n, Frame: 1514, Headroom: 64})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestNewPoolRejects(t *testing.T) {
	for _, c := range []PoolConfig{
		{Buffers: 0, Frame: 1514},
		{Buffers: 4, Frame: 0},
		{Buffers: 4, Frame: 1514, Headroom: -1},
		{Buffers: 4, Frame: 1514, Mem: make([]byte, 100)},
	} {
		if _, err := NewPool(c); err == nil {
			t.Errorf("NewPool(%+v) succeeded", c)
		}
	}
}

func TestPoolCarvesGivenMemory(t *testing.T) {
	c := PoolConfig{Buffers: 3, Frame: 100, Headroom: 16, Backing: "mine"}
	c.Mem = make([]byte, c.MemSize())
	p, err := NewPool(c)
	if err != nil {
		t.Fatal(err)
	}
	if p.Backing() != "mine" {
		t.Fatalf("Backing = %v", p.Backing())
	}
	for range 3 {
		pk := p.Get()
		copy(pk.SetLen(4), "abcd")
		off := p.Offset(pk)
		if string(c.Mem[off:off+4]) != "abcd" || off%c.BufferSize() != 16 {
			t.Fatalf("Offset %d does not address the frame in Mem", off)
		}
	}
	if p.Get() != nil {
		t.Fatal("Get from an exhausted pool returned a packet")
	}
}

func TestPacketFrameEdits(t *testing.T) {
	p := newPool(t, 1).Get()
	if p.Headroom() != 64 || p.Cap() < 1514 || p.Cap()%64 != 0 {
		t.Fatalf("headroom %d cap %d", p.Headroom(), p.Cap())
	}
	copy(p.SetLen(4), "data")
	copy(p.Prepend(2), "hd")
	if string(p.Data()) != "hddata" || p.Headroom() != 62 {
		t.Fatalf("after Prepend: %q headroom %d", p.Data(), p.Headroom())
	}
	p.TrimFront(3)
	if string(p.Data()) != "ata" || p.Len() != 3 {
		t.Fatalf("after TrimFront: %q", p.Data())
	}
	p.Meta.Flags = MetaVLAN
	p.Reset()
	if p.Len() != 0 || p.Headroom() != 64 || p.Meta != (Meta{}) {
		t.Fatal("Reset left state behind")
	}
	for name, f := range map[string]func(){
		"SetLen beyond Cap":  func() { p.SetLen(p.Cap() + 1) },
		"Prepend beyond":     func() { p.Prepend(65) },
		"TrimFront too much": func() { p.TrimFront(1) },
		"double free":        func() { p.Free(); p.Free() },
	} {
		if !panics(f) {
			t.Errorf("%s did not panic", name)
		}
	}
}

func panics(f func()) (did bool) {
	defer func() { did = recover() != nil }()
	f()
	return false
}

func TestPutBurstReturnsToEachPool(t *testing.T) {
	a, b := newPool(t, 4), newPool(t, 4)
	pkts := make([]*Packet, 0, 8)
	for range 2 {
		pkts = append(pkts, a.Get(), b.Get(), b.Get())
	}
	PutBurst(pkts)
	if a.Available() != 4 || b.Available() != 4 {
		t.Fatalf("available a=%d b=%d, want 4 and 4", a.Available(), b.Available())
	}
	b.Put(a.Get()) // Put finds the packet's own pool
	if a.Available() != 4 {
		t.Fatal("Put into the wrong pool kept the packet")
	}
}

// chanSource yields the packets of each batch it is sent, then ends with
// errDone once closed.
type chanSource struct {
	in  chan []*Packet
	cur []*Packet
}

var errDone = errors.New("source done")

func (s *chanSource) RxBurst(pkts []*Packet) int {
	n := copy(pkts, s.cur)
	s.cur = s.cur[n:]
	return n
}

func (s *chanSource) Wait(ctx context.Context) error {
	select {
	case b, ok := <-s.in:
		if !ok {
			return errDone
		}
		s.cur = b
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stingySink takes at most one packet per call, and none every other call,
// so the pump must wait and retry; it keeps the frames' first bytes.
type stingySink struct {
	got   []byte
	calls int
	waits int
}

func (s *stingySink) TxBurst(pkts []*Packet) int {
	s.calls++
	if s.calls%2 == 0 || len(pkts) == 0 {
		return 0
	}
	s.got = append(s.got, pkts[0].Data()[0])
	pkts[0].Free()
	return 1
}

func (s *stingySink) WaitTx(ctx context.Context) error { s.waits++; return ctx.Err() }

func TestPumpKeepsOrderUnderBackpressure(t *testing.T) {
	pool := newPool(t, 16)
	src := &chanSource{in: make(chan []*Packet, 4)}
	var want []byte
	for b := range 3 {
		batch := make([]*Packet, 5)
		for i := range batch {
			batch[i] = pool.Get()
			c := byte(b*5 + i)
			batch[i].SetLen(1)[0] = c
			want = append(want, c)
		}
		src.in <- batch
	}
	close(src.in)
	dst := &stingySink{}
	var moved atomic.Uint64
	var observed int
	err := PumpObserved(context.Background(), src, dst, 4, &moved, func(p []*Packet) { observed += len(p) })
	if !errors.Is(err, errDone) {
		t.Fatalf("Pump returned %v, want the source's error", err)
	}
	if string(dst.got) != string(want) || moved.Load() != 15 || observed != 15 {
		t.Fatalf("got %v moved %d observed %d, want %v", dst.got, moved.Load(), observed, want)
	}
	if dst.waits == 0 {
		t.Fatal("the pump never waited on a refusing sink")
	}
	if pool.Available() != 16 {
		t.Fatalf("%d packets leaked", 16-pool.Available())
	}
}

// refusingSink never takes anything.
type refusingSink struct{}

func (refusingSink) TxBurst([]*Packet) int            { return 0 }
func (refusingSink) WaitTx(ctx context.Context) error { return context.Canceled }

func TestPumpFreesWhatTheSinkRefusedOnError(t *testing.T) {
	pool := newPool(t, 4)
	src := &chanSource{in: make(chan []*Packet, 1)}
	src.in <- []*Packet{pool.Get(), pool.Get()}
	if err := Pump(context.Background(), src, refusingSink{}, 8, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Pump returned %v", err)
	}
	if pool.Available() != 4 {
		t.Fatalf("%d packets leaked", 4-pool.Available())
	}
}

// spuriousSource never has a frame and its Wait always returns nil at
// once, without looking at ctx (a source that keeps finding work it
// cannot deliver).
type spuriousSource struct{ waits atomic.Int64 }

func (*spuriousSource) RxBurst([]*Packet) int            { return 0 }
func (s *spuriousSource) Wait(ctx context.Context) error { s.waits.Add(1); return nil }

func TestPumpEndsWithItsContextOnASpuriousSource(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	src := &spuriousSource{}
	done := make(chan error, 1)
	go func() { done <- Pump(ctx, src, refusingSink{}, 8, nil) }()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Pump returned %v, want the context's error", err)
		}
	case <-time.After(time.Minute):
		t.Fatalf("Pump still running a minute after its context ended (%d waits)", src.waits.Load())
	}
}

func TestPoolBurstsAllocateNothing(t *testing.T) {
	pool := newPool(t, 64)
	pkts := make([]*Packet, 32)
	if a := testing.AllocsPerRun(100, func() {
		PutBurst(pkts[:pool.GetBurst(pkts)])
	}); a != 0 {
		t.Fatalf("GetBurst+PutBurst: %v allocs, want 0", a)
	}
}

func TestFlowHashIsPerFlow(t *testing.T) {
	tcp4 := func(sport byte) []byte {
		f := make([]byte, 54)
		f[12], f[13], f[14], f[23] = 0x08, 0x00, 0x45, 6
		copy(f[26:34], []byte{10, 0, 0, 1, 10, 0, 0, 2})
		f[35] = sport
		return f
	}
	a, b := tcp4(2), tcp4(4)
	if FlowHash(a) != FlowHash(append([]byte(nil), a...)) || FlowHash(a) == FlowHash(b) {
		t.Fatal("hash not per flow")
	}
	// Even source ports only (Linux connect()) still spread over the low bit.
	var used [2]int
	for p := byte(0); p < 64; p += 2 {
		used[FlowHash(tcp4(p))%2]++
	}
	if used[0] == 0 || used[1] == 0 {
		t.Fatalf("low bit stuck: %v", used)
	}
	if FlowHash([]byte{1, 2, 3}) != 0 {
		t.Fatal("a short frame hashed")
	}
	if testing.AllocsPerRun(100, func() { FlowHash(a) }) != 0 {
		t.Fatal("FlowHash allocates")
	}
}

var (
	_ Source = (*chanSource)(nil)
	_ Sink   = (*stingySink)(nil)
)
