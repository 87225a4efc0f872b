package hvsock_test

import (
	"io"
	"testing"

	"github.com/vmbusd/vmbusd/hvsock"
	"github.com/vmbusd/vmbusd/internal/testutil"
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
