package hvsock_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/hvsock"
	"github.com/vmbusd/vmbusd/internal/testutil"
	"github.com/vmbusd/vmbusd/sim"
)

// TestManyConnectionsMoveVerifiedBytes runs connections in parallel, half
// guest-initiated and half host-initiated, with assorted ring and chunk
// sizes; each moves a pseudo-random stream both ways at once in writes and
// reads of random size, ends each direction with a half-close, and checks
// every byte. Sizes: 8 connections x 256 MiB each way; 16 MiB with -short;
// 4 x 2 MiB under the race detector (about 30x slower).
func TestManyConnectionsMoveVerifiedBytes(t *testing.T) {
	testutil.CheckGoroutineLeaks(t)
	conns, size := 8, uint64(256<<20)
	switch {
	case raceEnabled:
		conns, size = 4, 2<<20
	case testing.Short():
		size = 16 << 20
	}
	e := newTestEnv(t, sim.HvSockConfig{ChunkSize: 4096})
	l, err := e.cfg.Listen(7000)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	rings := []int{0, 64 << 10, 256 << 10}
	chunks := []int{0, 16384, 1024}
	type pairT struct {
		g *hvsock.Conn
		h *sim.HvSockConn
	}
	var pairs []pairT
	for i := range conns {
		cfg := e.cfg
		cfg.SendRingSize, cfg.RecvRingSize = rings[i%3], rings[(i+1)%3]
		cfg.ChunkSize = chunks[i%3]
		var g *hvsock.Conn
		var h *sim.HvSockConn
		if i%2 == 0 {
			g, h = e.pair(t, cfg, uint32(7100+i))
		} else {
			g, h = e.acceptPair(t, l, 7000) // the listener's (default) sizes
		}
		pairs = append(pairs, pairT{g, h})
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 4*conns)
	for i, p := range pairs {
		seed := uint64(i) * 2
		run := func(name string, f func(rng *rand.Rand) error) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(seed, uint64(len(name))))
				if err := f(rng); err != nil {
					errs <- fmt.Errorf("connection %d %s: %w", i, name, err)
				}
			}()
		}
		run("guest send", func(rng *rand.Rand) error {
			if err := sendPattern(p.g, seed, size, 96<<10, rng); err != nil {
				return err
			}
			return p.g.CloseWrite()
		})
		run("host receive", func(rng *rand.Rand) error { return recvPattern(p.h, seed, size, 80<<10, rng) })
		run("host send", func(rng *rand.Rand) error {
			if err := sendPattern(p.h, seed+1, size, 96<<10, rng); err != nil {
				return err
			}
			return p.h.CloseWrite()
		})
		run("guest receive", func(rng *rand.Rand) error { return recvPattern(p.g, seed+1, size, 80<<10, rng) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	el := time.Since(start)
	total := float64(2*uint64(conns)*size) / (1 << 20)
	t.Logf("%d connections moved %.0f MiB in %v (%.0f MiB/s)", conns, total, el.Round(time.Millisecond), total/el.Seconds())
	for i, p := range pairs {
		st := p.g.Stats()
		if i == 0 {
			t.Logf("connection 0 guest stats: %+v", st)
		}
		if err := p.g.Close(); err != nil {
			t.Errorf("connection %d: guest Close: %v", i, err)
		}
		p.h.Close()
		if st := p.g.Stats(); st.Reset {
			t.Errorf("connection %d: Close reset the connection although both sides had finished", i)
		}
	}
}
