package netvsc

import (
	"context"
	"log/slog"
	"testing"

	"github.com/vmbusd/vmbusd/frame"
	"github.com/vmbusd/vmbusd/netvsc/nvsp"
	"github.com/vmbusd/vmbusd/netvsc/protoerr"
	"github.com/vmbusd/vmbusd/netvsc/rndis"
	"github.com/vmbusd/vmbusd/vmbus"
)

type nopSignaler struct{}

func (nopSignaler) Signal() error { return nil }

// unreadQueue returns a queue whose host never reads its outbound ring:
// out bytes of ring take a few completions and then stay full.
func unreadQueue(t *testing.T, subAllocs uint32, out int) *Queue {
	t.Helper()
	pg := vmbus.DataOffset()
	mem := make([]byte, 2*pg+out+16<<10)
	split := pg + out
	if err := vmbus.InitRingHeader(mem[:split]); err != nil {
		t.Fatal(err)
	}
	if err := vmbus.InitRingHeader(mem[split:]); err != nil {
		t.Fatal(err)
	}
	ch, err := vmbus.NewChannel(vmbus.ChannelConfig{Ring: mem, Split: split, Signaler: nopSignaler{}})
	if err != nil {
		t.Fatal(err)
	}
	s := &session{subAllocs: subAllocs, recv: make([]byte, int(subAllocs)*2048), dead: make(chan struct{}),
		log: slog.New(slog.DiscardHandler), nic: &NIC{}}
	q := &Queue{s: s, ch: ch, rx: rxPath{scratch: make([]byte, maxControlMessage)},
		acks: completions{msg: nvsp.RNDISComplete{Status: nvsp.StatusSuccess}.Marshal(nil)}}
	q.initAcks()
	return q
}

// TestFloodWithoutReadingCompletionsIsCountedNotGrown: a host that keeps
// sending transfer-page packets while it reads none of the guest's
// completions gets every sub-allocation's completion owed, then has to
// reuse an id still owed: each such packet is protoerr.KindDuplicateTID, and the
// owed completions never outgrow one slot per sub-allocation.
func TestFloodWithoutReadingCompletionsIsCountedNotGrown(t *testing.T) {
	const count = 64
	q := unreadQueue(t, count, 1024) // room for fewer than count completions
	for tid := range count {
		rndis.PutPacket(q.s.recv[tid*2048:], nil, make([]byte, 100))
	}
	accepted, dups := 0, 0
	for range 4 {
		for tid := range uint32(count) {
			hdr := vmbus.TransferPageHeader(nil, nvsp.RecvBufID, 1)
			hdr = vmbus.AppendTransferRange(hdr, 2048, tid*2048)
			p, err := xferPacket(t, uint64(tid), hdr, nvspData)
			if err != nil {
				t.Fatal(err)
			}
			if err := q.handle(&p); err != nil {
				wantKind(t, err, protoerr.KindDuplicateTID)
				dups++
			} else {
				accepted++
			}
			q.sendAcks(true)
			if len(q.acks.owed.tids) != count || q.acks.owed.len() > count {
				t.Fatalf("owed completions: %d in a ring of %d, want at most %d in %d", q.acks.owed.len(), len(q.acks.owed.tids), count, count)
			}
		}
	}
	sent := int(q.c.rxCompSent.load())
	if sent == 0 || sent >= count || q.c.rxCompBusy.load() == 0 {
		t.Fatalf("completions sent %d, busy %d: the ring should take some, then stay full", sent, q.c.rxCompBusy.load())
	}
	// Ids whose completion went into the ring may come again (the guest
	// cannot tell the host did not read it); every other repeat is a
	// duplicate.
	if accepted != count+sent || dups != 4*count-accepted {
		t.Errorf("accepted %d, duplicates %d (completions sent %d)", accepted, dups, sent)
	}
	if q.acks.owed.len() != count {
		t.Errorf("%d completions owed, want %d", q.acks.owed.len(), count)
	}
	if q.s.rxIgnored.Load() != uint64(accepted) {
		t.Errorf("%d frames seen, want one per accepted packet (%d)", q.s.rxIgnored.Load(), accepted)
	}
}

func TestOwedRing(t *testing.T) {
	var o owed
	if o.add(0) {
		t.Fatal("the zero value took a tid")
	}
	o.init(3)
	for _, tid := range []uint32{2, 0, 1} {
		if !o.add(tid) {
			t.Fatalf("add %d", tid)
		}
	}
	if o.add(1) || o.add(3) {
		t.Fatal("took an owed tid or one past the count")
	}
	if o.oldest() != 2 {
		t.Fatalf("oldest %d", o.oldest())
	}
	o.done()
	if !o.add(2) || o.len() != 3 {
		t.Fatal("a completed tid could not be owed again")
	}
	for _, want := range []uint32{0, 1, 2} {
		if got := o.oldest(); got != want {
			t.Fatalf("oldest %d, want %d", got, want)
		}
		o.done()
	}
	if o.len() != 0 {
		t.Fatal("not empty")
	}
}

// hookHandler is a slog.Handler that runs fn on every record with msg: a
// way to act at a precise point inside the receive path, on its goroutine.
type hookHandler struct {
	msg string
	fn  func()
}

func (h hookHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h hookHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.fn()
	}
	return nil
}
func (h hookHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h hookHandler) WithGroup(string) slog.Handler      { return h }

// TestCompletionWaitsForEveryRange: a transfer-page packet's completion
// cannot be sent while its ranges are still being read. Any goroutine
// holding outMu (a TxBurst) sends the completions owed, and a host that
// reads one may write new frames over those sub-allocations at once (the
// simulated host does: with nothing else out it starts again at its first
// sub-allocation). Here the packet carries a link indication and then a
// frame; while the indication is handled (its log line), the test does
// what a TxBurst may do at that moment and, as the host, rewrites every
// sub-allocation whose completion it finds. The frame received must be the
// one the host sent, and its completion must come once, after the packet.
func TestCompletionWaitsForEveryRange(t *testing.T) {
	const (
		count = 8
		sub   = 2048
		tid   = 3
	)
	pg := vmbus.DataOffset()
	const ringSize = 64 << 10
	mem := make([]byte, 2*(pg+ringSize))
	split := pg + ringSize
	if err := vmbus.InitRingHeader(mem[:split]); err != nil {
		t.Fatal(err)
	}
	if err := vmbus.InitRingHeader(mem[split:]); err != nil {
		t.Fatal(err)
	}
	ch, err := vmbus.NewChannel(vmbus.ChannelConfig{Ring: mem, Split: split, Signaler: nopSignaler{}})
	if err != nil {
		t.Fatal(err)
	}
	host, err := vmbus.NewInRing(mem[:split], 0) // the host reads our outbound ring
	if err != nil {
		t.Fatal(err)
	}
	pool, err := NewPool(16, sub, nil)
	if err != nil {
		t.Fatal(err)
	}
	nic := &NIC{linkCh: make(chan struct{}), events: map[string]uint64{}}
	s := &session{subAllocs: count, recv: make([]byte, count*sub), dead: make(chan struct{}), nic: nic}
	s.running.Store(true)
	q := &Queue{s: s, ch: ch, pool: pool,
		rx:   rxPath{stage: make([]*frame.Packet, 4), fresh: make([]*frame.Packet, 4), scratch: make([]byte, maxControlMessage)},
		acks: completions{msg: nvsp.RNDISComplete{Status: nvsp.StatusSuccess}.Marshal(nil)}}
	q.initAcks()

	sent, reused := []byte("frame 1 from the host"), []byte("frame 2 from the host") // as long: the range fits both
	ind := rndis.IndicateStatus{Status: rndis.StatusMediaConnect}.Marshal(nil)
	copy(s.recv[0:], ind) // from the control sub-allocations
	n, err := rndis.PutPacket(s.recv[tid*sub:], nil, sent)
	if err != nil {
		t.Fatal(err)
	}
	completions := func() []uint64 {
		var tids []uint64
		buf := make([]byte, host.MaxPacket())
		for {
			p, err := host.Read(buf)
			if err == vmbus.ErrRingEmpty {
				return tids
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Type == vmbus.PacketCompletion {
				tids = append(tids, p.TransID)
			}
		}
	}
	early := 0
	s.log = slog.New(hookHandler{msg: "link", fn: func() {
		q.sendAcks(true)
		for _, done := range completions() {
			early++
			if _, err := rndis.PutPacket(s.recv[done*sub:], nil, reused); err != nil {
				t.Error(err)
			}
		}
	}})

	hdr := vmbus.TransferPageHeader(nil, nvsp.RecvBufID, 2)
	hdr = vmbus.AppendTransferRange(hdr, uint32(len(ind)), 0)
	hdr = vmbus.AppendTransferRange(hdr, uint32(n), tid*sub)
	p, err := xferPacket(t, tid, hdr, nvspData)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.handle(&p); err != nil {
		t.Fatal(err)
	}
	if !s.linkUp.Load() {
		t.Fatal("the link indication was not handled")
	}
	got := make([]*frame.Packet, 2)
	if k := q.rx.unstage(got); k != 1 {
		t.Fatalf("%d frames received, want 1", k)
	}
	if string(got[0].Data()) != string(sent) {
		t.Errorf("received %q, want %q (%d completions went out while the packet was read)", got[0].Data(), sent, early)
	}
	got[0].Free()
	q.sendAcks(true)
	if after := completions(); early != 0 || len(after) != 1 || after[0] != tid {
		t.Errorf("completions %d while the packet was read, %v after it; want none, then [%d]", early, after, tid)
	}
}

// TestReuseBeforeTheHostCouldReadIsDuplicate: once a drain has put a
// completion in the outbound ring the tid is no longer owed, yet a host
// can hand it out again only after reading that completion. A transfer
// page the host had published before the completion went out and that
// reuses its tid is a duplicate all the same; one published after the
// host read it is not.
func TestReuseBeforeTheHostCouldReadIsDuplicate(t *testing.T) {
	const (
		count = 8
		sub   = 2048
		tid   = 5
	)
	for _, tc := range []struct {
		name      string
		afterRead bool // the host writes the second packet after reading the completion
	}{
		{"published before the completion", false},
		{"published after the host read it", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pg := vmbus.DataOffset()
			const ringSize = 64 << 10
			mem := make([]byte, 2*(pg+ringSize))
			split := pg + ringSize
			for _, half := range [][]byte{mem[:split], mem[split:]} {
				if err := vmbus.InitRingHeader(half); err != nil {
					t.Fatal(err)
				}
			}
			ch, err := vmbus.NewChannel(vmbus.ChannelConfig{Ring: mem, Split: split, Signaler: nopSignaler{}})
			if err != nil {
				t.Fatal(err)
			}
			hostIn, err := vmbus.NewInRing(mem[:split], 0) // our outbound ring
			if err != nil {
				t.Fatal(err)
			}
			hostOut, err := vmbus.NewOutRing(mem[split:]) // our inbound ring
			if err != nil {
				t.Fatal(err)
			}
			s := &session{subAllocs: count, recv: make([]byte, count*sub), dead: make(chan struct{}),
				log: slog.New(slog.DiscardHandler), nic: &NIC{}}
			q := &Queue{s: s, ch: ch, rx: rxPath{scratch: make([]byte, maxControlMessage)},
				acks: completions{msg: nvsp.RNDISComplete{Status: nvsp.StatusSuccess}.Marshal(nil)}}
			q.initAcks()
			n, err := rndis.PutPacket(s.recv[tid*sub:], nil, make([]byte, 100))
			if err != nil {
				t.Fatal(err)
			}
			hdr := vmbus.TransferPageHeader(nil, nvsp.RecvBufID, 1)
			hdr = vmbus.AppendTransferRange(hdr, uint32(n), tid*sub)
			for len(hdr)%8 != 0 {
				hdr = append(hdr, 0)
			}
			send := func() {
				if err := hostOut.Write(vmbus.PacketTransferPage, vmbus.FlagCompletionRequested, tid, hdr, nvspData); err != nil {
					t.Fatal(err)
				}
				hostOut.Commit()
			}
			read := func() []uint64 {
				var tids []uint64
				buf := make([]byte, hostIn.MaxPacket())
				for {
					p, err := hostIn.Read(buf)
					if err == vmbus.ErrRingEmpty {
						hostIn.Commit()
						return tids
					}
					if err != nil {
						t.Fatal(err)
					}
					tids = append(tids, p.TransID)
				}
			}
			handleNext := func() error {
				p, err := q.recv()
				if err != nil {
					t.Fatal(err)
				}
				return q.handle(&p)
			}

			send()
			if !tc.afterRead {
				send()
			}
			if err := handleNext(); err != nil {
				t.Fatal(err)
			}
			q.sendAcksDrain(true)
			if q.acks.owes(tid) {
				t.Fatal("the tid is still owed after its completion was sent")
			}
			if tc.afterRead {
				if got := read(); len(got) != 1 || got[0] != tid {
					t.Fatalf("the host read completions %v, want [%d]", got, tid)
				}
				send()
			}
			err = handleNext()
			if tc.afterRead {
				if err != nil {
					t.Fatalf("reuse after the host read the completion: %v", err)
				}
				return
			}
			wantKind(t, err, protoerr.KindDuplicateTID)
		})
	}
}
