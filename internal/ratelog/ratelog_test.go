package ratelog

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newTest(lines int) (*Handler, *bytes.Buffer, *clock) {
	var buf bytes.Buffer
	c := &clock{t: time.Unix(1e9, 0)}
	base := slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}})
	return New(base, Config{Lines: lines, Interval: time.Second, Now: c.now, MaxKeys: 4}), &buf, c
}

func lines(b *bytes.Buffer) []string {
	s := strings.TrimSpace(b.String())
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func TestAtMostNLinesPerKeyThenASummary(t *testing.T) {
	h, buf, c := newTest(2)
	log := slog.New(h)
	eth1, eth2 := log.With("nic", "eth1"), log.With("nic", "eth2")
	for range 10 {
		eth1.Error("NIC failed; resetting", "err", "boom")
	}
	eth2.Error("NIC failed; resetting")
	if got := lines(buf); len(got) != 3 {
		t.Fatalf("%d lines, want 2 for eth1 and 1 for eth2:\n%s", len(got), buf)
	}
	buf.Reset()
	c.add(time.Second)
	eth1.Error("NIC failed; resetting", "err", "again")
	got := lines(buf)
	if len(got) != 2 || !strings.Contains(got[0], `msg="log lines suppressed" nic=eth1 message="NIC failed; resetting" suppressed=8`) ||
		!strings.Contains(got[1], "err=again") {
		t.Fatalf("after the interval:\n%s", buf)
	}
}

func TestFlushWritesTheSummaryWithoutAnotherRecord(t *testing.T) {
	h, buf, c := newTest(1)
	log := slog.New(h).With("forward", "f1")
	for range 5 {
		log.Info("connection closed")
	}
	h.Flush(context.Background())
	if got := lines(buf); len(got) != 1 {
		t.Fatalf("summary before the interval ended:\n%s", buf)
	}
	c.add(2 * time.Second)
	h.Flush(context.Background())
	got := lines(buf)
	if len(got) != 2 || !strings.Contains(got[1], "suppressed=4") || !strings.Contains(got[1], "forward=f1") {
		t.Fatalf("after Flush:\n%s", buf)
	}
	// Quiet keys are forgotten.
	c.add(2 * time.Second)
	h.Flush(context.Background())
	if h.Keys() != 0 {
		t.Fatalf("%d keys kept after going quiet", h.Keys())
	}
}

func TestKeysAreBounded(t *testing.T) {
	h, buf, _ := newTest(1)
	log := slog.New(h)
	for i := range 100 {
		log.Warn(fmt.Sprintf("message %d", i))
	}
	if h.Keys() > 5 {
		t.Fatalf("%d keys, want at most MaxKeys+1", h.Keys())
	}
	if got := lines(buf); len(got) != 5 {
		t.Fatalf("%d lines, want 4 keys and one shared overflow line", len(got))
	}
}

func TestZeroLinesPassesEverything(t *testing.T) {
	h, buf, _ := newTest(0)
	log := slog.New(h)
	for range 50 {
		log.Info("x")
	}
	if got := lines(buf); len(got) != 50 {
		t.Fatalf("%d lines", len(got))
	}
}

func TestConcurrentUse(t *testing.T) {
	h, _, c := newTest(3)
	log := slog.New(h)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := log.With("g", g)
			for range 200 {
				l.Info("tick")
				c.add(time.Millisecond)
			}
			h.Flush(context.Background())
		}()
	}
	wg.Wait()
}
