package netvsc

import (
	"log/slog"
	"testing"

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
	q := &Queue{s: s, ch: ch, scratch: make([]byte, maxControlMessage),
		ackMsg: NVSPRNDISComplete{Status: NVSPStatSuccess}.Marshal(nil)}
	q.initAcks()
	return q
}

// TestFloodWithoutReadingCompletionsIsCountedNotGrown: a host that keeps
// sending transfer-page packets while it reads none of the guest's
// completions gets every sub-allocation's completion owed, then has to
// reuse an id still owed: each such packet is KindDuplicateTID, and the
// owed completions never outgrow one slot per sub-allocation.
func TestFloodWithoutReadingCompletionsIsCountedNotGrown(t *testing.T) {
	const count = 64
	q := unreadQueue(t, count, 1024) // room for fewer than count completions
	for tid := range count {
		PutRNDISPacket(q.s.recv[tid*2048:], nil, make([]byte, 100))
	}
	accepted, dups := 0, 0
	for range 4 {
		for tid := range uint32(count) {
			hdr := vmbus.TransferPageHeader(nil, NVSRxBufSig, 1)
			hdr = vmbus.AppendTransferRange(hdr, 2048, tid*2048)
			p, err := xferPacket(t, uint64(tid), hdr, nvspData)
			if err != nil {
				t.Fatal(err)
			}
			if err := q.handle(&p); err != nil {
				wantKind(t, err, KindDuplicateTID)
				dups++
			} else {
				accepted++
			}
			q.sendAcks(true)
			if len(q.acks.tids) != count || q.acks.len() > count {
				t.Fatalf("owed completions: %d in a ring of %d, want at most %d in %d", q.acks.len(), len(q.acks.tids), count, count)
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
	if q.acks.len() != count {
		t.Errorf("%d completions owed, want %d", q.acks.len(), count)
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
