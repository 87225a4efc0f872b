package netvsp

import (
	"sync"
	"testing"

	"github.com/vmbusd/vmbusd/netvsc/nvsp"
	"github.com/vmbusd/vmbusd/netvsc/rndis"
	"github.com/vmbusd/vmbusd/sim/vswitch"
	"github.com/vmbusd/vmbusd/vmbus"
)

// answerPort answers its first Transmit at once with one frame for the
// guest, as a TAP's kernel does (TCP acknowledgements), and records how
// many frames the NIC had put in the guest's ring when each later
// Transmit began.
type answerPort struct {
	nic    *NIC
	answer []byte
	up     vswitch.Uplink

	mu    sync.Mutex
	calls int
	seen  []uint64 // NICStats.RxPackets at the start of Transmit 2, 3, ...
}

func (p *answerPort) Connect(up vswitch.Uplink) error { p.up = up; return nil }
func (p *answerPort) Close() error                    { return nil }

func (p *answerPort) Transmit(frames [][]byte) {
	p.mu.Lock()
	p.calls++
	first := p.calls == 1
	if !first {
		p.seen = append(p.seen, p.nic.Stats().RxPackets)
	}
	p.mu.Unlock()
	if first {
		p.up.Deliver([][]byte{p.answer})
	}
}

func (p *answerPort) snapshot() (int, []uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls, append([]uint64(nil), p.seen...)
}

// TestNetVSPAnswersGoOutBeforeTheRestOfThePass: when one pass of the host
// loop forwards more than one batch (here: more frames than a batch
// holds, published by the guest at once), what the port answered to the
// first batch is in the guest's ring before the second batch goes to the
// port, not held until the pass ends.
func TestNetVSPAnswersGoOutBeforeTheRestOfThePass(t *testing.T) {
	g := newTGuest(t, tguestOpts{})
	g.handshake(nvsp.Version61)
	g.setFilter(rndis.NDISPacketFilterDefault)
	bcast := [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	src := [6]byte{0x02, 0, 0, 0, 0, 9}
	p := &answerPort{nic: g.nic, answer: udpFrame(bcast, src, 4000, 60)}
	if err := g.nic.Detach(); err != nil {
		t.Fatal(err)
	}
	if err := g.nic.Attach(p); err != nil {
		t.Fatal(err)
	}
	// Eight aggregated frames per send; enough sends for more frames than
	// one batch takes (cap(txBatch.frames)), all published with one
	// write-index update so that one pass finds them all.
	perBatch := cap(newTxBatch().frames)
	sends := perBatch/8 + 2
	if uint32(sends) > g.secCount {
		t.Fatalf("%d sends need more than the %d send sections", sends, g.secCount)
	}
	dst := [6]byte{0x02, 0, 0, 0, 0, 7}
	var msgs [][]byte
	for i := range 8 {
		msgs = append(msgs, rndisPacket(udpFrame(dst, src, uint16(2000+i), 60), nil))
	}
	sec := aggregate(msgs)
	c := g.chs[0]
	tids := make([]uint64, sends)
	for i := range sends {
		tids[i] = g.newTID()
		if err := c.Send(vmbus.PacketInband, vmbus.FlagCompletionRequested, tids[i], nil, g.section(nvsp.RMCData, sec)); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, tid := range tids {
		if st := g.sendStatus(0, tid); st != nvsp.StatusSuccess {
			t.Fatalf("send status %v", st)
		}
	}
	g.next(0, func(p *gpkt) bool { return p.typ == vmbus.PacketTransferPage })
	calls, seen := p.snapshot()
	if calls < 2 {
		t.Fatalf("the port got %d batches, want at least 2 (one pass, %d frames)", calls, sends*8)
	}
	if seen[0] != 1 {
		t.Fatalf("the port's answer to the first batch reached the guest's ring after the next batch (RxPackets %d when it began, want 1)", seen[0])
	}
	g.noViolations()
}
