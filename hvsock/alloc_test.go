package hvsock_test

import (
	"io"
	"testing"

	"github.com/vmbusd/vmbusd/hvsock"
	"github.com/vmbusd/vmbusd/sim"
)

// The data path allocates nothing: a Write that finds room in the ring and
// a Read that finds data waiting move bytes between the caller's buffer
// and the ring with no allocation. Each run is one transfer and its
// drain by the other end, in one goroutine, so nothing blocks and the
// ends signal nobody (a reader that is not waiting keeps its interrupt
// masked): the steady state of a stream whose two ends keep up with each
// other. testing.AllocsPerRun counts the whole process, so the simulated
// host's end is held to it too; 200 runs per case let a stray allocation
// by some other goroutine round away, while one per run cannot.

// allocSizes are the write sizes of the seed tables that fit a ring with
// room to spare, so that no run waits for space.
var allocSizes = []int{128, 4 << 10, 64 << 10}

func allocPair(t *testing.T) (*hvsock.Conn, *sim.HvSockConn) {
	e := newTestEnv(t, sim.HvSockConfig{})
	cfg := e.cfg
	cfg.SendRingSize, cfg.RecvRingSize = hvsock.MaxRingSize, hvsock.MaxRingSize
	g, h := e.pair(t, cfg, 9300)
	t.Cleanup(func() { closePair(g, h) })
	return g, h
}

func TestConnWriteAllocatesNothing(t *testing.T) {
	g, h := allocPair(t)
	for _, size := range allocSizes {
		t.Run(sizeName(size), func(t *testing.T) {
			wb, rb := make([]byte, size), make([]byte, size)
			n := testing.AllocsPerRun(200, func() {
				if _, err := g.Write(wb); err != nil {
					t.Fatal(err)
				}
				if _, err := io.ReadFull(h, rb); err != nil {
					t.Fatal(err)
				}
			})
			if n != 0 {
				t.Fatalf("a %d-byte Write and its drain allocate %v times", size, n)
			}
		})
	}
	if st := g.Stats(); st.Channel.TxSignals > 1 || st.Channel.TxFullWaits != 0 {
		t.Errorf("the writes signalled %d times and waited for room %d times; the test measures neither", st.Channel.TxSignals, st.Channel.TxFullWaits)
	}
}

func TestConnReadAllocatesNothing(t *testing.T) {
	g, h := allocPair(t)
	for _, size := range allocSizes {
		t.Run(sizeName(size), func(t *testing.T) {
			wb, rb := make([]byte, size), make([]byte, size)
			n := testing.AllocsPerRun(200, func() {
				if _, err := h.Write(wb); err != nil {
					t.Fatal(err)
				}
				if _, err := io.ReadFull(g, rb); err != nil {
					t.Fatal(err)
				}
			})
			if n != 0 {
				t.Fatalf("a %d-byte Read and the host's write allocate %v times", size, n)
			}
		})
	}
	if st := g.Stats(); st.Channel.RxSignals != 0 || st.Channel.IdleWaits != 0 {
		t.Errorf("the reads signalled %d times and slept %d times; the test measures neither", st.Channel.RxSignals, st.Channel.IdleWaits)
	}
}
