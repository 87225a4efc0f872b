package hvsock_test

import (
	"io"
	"testing"

	"github.com/vmbusd/vmbusd/hvsock"
	"github.com/vmbusd/vmbusd/internal/testutil"
	"github.com/vmbusd/vmbusd/sim"
	"github.com/vmbusd/vmbusd/vmbus/vmbustest"
)

// The data path allocates nothing: a Write that finds room in the ring and
// a Read that finds data waiting move bytes between the caller's buffer
// and the ring with no allocation. Each run is one transfer and its
// drain by the other end, in one goroutine, so nothing blocks and the
// ends signal nobody (a reader that is not waiting keeps its interrupt
// masked): the steady state of a stream whose two ends keep up with each
// other. The host end is a vmbustest pair's, whose framing allocates
// nothing either, so every allocation counted is the guest's.

// allocSizes are the write sizes of the seed tables that fit a ring with
// room to spare, so that no run waits for space.
var allocSizes = []int{128, 4 << 10, 64 << 10}

func allocPair(t *testing.T) (*hvsock.Conn, *hostPipe) {
	return pipePair(t, hvsock.Config{}, vmbustest.Options{OutRingSize: hvsock.MaxRingSize, InRingSize: hvsock.MaxRingSize})
}

func TestConnWriteAllocatesNothing(t *testing.T) {
	g, h := allocPair(t)
	for _, size := range allocSizes {
		t.Run(sizeName(size), func(t *testing.T) {
			wb, rb := make([]byte, size), make([]byte, size)
			testutil.AllocBudget(t, 0, 200, func() {
				if _, err := g.Write(wb); err != nil {
					t.Fatal(err)
				}
				if _, err := io.ReadFull(h, rb); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
	if st := g.Stats(); st.Channel.TxSignals != 0 || st.Channel.TxFullWaits != 0 {
		t.Errorf("the writes signalled %d times and waited for room %d times; the test measures neither", st.Channel.TxSignals, st.Channel.TxFullWaits)
	}
}

func TestConnReadAllocatesNothing(t *testing.T) {
	g, h := allocPair(t)
	for _, size := range allocSizes {
		t.Run(sizeName(size), func(t *testing.T) {
			wb, rb := make([]byte, size), make([]byte, size)
			testutil.AllocBudget(t, 0, 200, func() {
				if _, err := h.Write(wb); err != nil {
					t.Fatal(err)
				}
				if _, err := io.ReadFull(g, rb); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
	if st := g.Stats(); st.Channel.RxSignals != 0 || st.Channel.IdleWaits != 0 {
		t.Errorf("the reads signalled %d times and slept %d times; the test measures neither", st.Channel.RxSignals, st.Channel.IdleWaits)
	}
}

// TestStreamThroughSimulatedHostAllocatesNothing moves 64 KiB writes
// through the default rings to the simulated host, whose reader drains
// them on its own goroutine: the writer fills the ring, waits for room and
// is woken, and each end signals the other through the simulated uio
// device, so the count covers the signalling of both sides (the guest's
// irqcontrol writes, the host's interrupts) as well as the copies.
func TestStreamThroughSimulatedHostAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on the signalling path by itself; make unit runs this test without -race")
	}
	e := newTestEnv(t, sim.HvSockConfig{})
	g, h := e.pair(t, e.cfg, 9400)
	defer closePair(g, h)
	const size, runs = 64 << 10, 200
	total := int64(runs+1) * size // AllocsPerRun's warm-up run, then runs
	done := make(chan error, 1)
	go func() {
		rb := make([]byte, size)
		var got int64
		for got < total {
			n, err := h.Read(rb)
			got += int64(n)
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	gs, hs := g.Stats(), h.Channel().Stats()
	wb := make([]byte, size)
	testutil.AllocBudget(t, 0, runs, func() {
		if _, err := g.Write(wb); err != nil {
			t.Fatal(err)
		}
	})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	gs2, hs2 := g.Stats(), h.Channel().Stats()
	if gs2.Channel.TxFullWaits == gs.Channel.TxFullWaits || hs2.TxSignals+hs2.RxSignals == hs.TxSignals+hs.RxSignals {
		t.Errorf("the writer waited for room %d times and the host signalled %d times; the test is meant to measure both",
			gs2.Channel.TxFullWaits-gs.Channel.TxFullWaits, hs2.TxSignals+hs2.RxSignals-hs.TxSignals-hs.RxSignals)
	}
}
