package tap

import (
	"context"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vmbusd/vmbusd/frame"
)

// pipeQueue is a Queue over a non-blocking pipe (no virtio-net header):
// each write is one "frame" for RxBurst and Wait. The returned fd is the
// pipe's write end.
func pipeQueue(t *testing.T) (*Queue, int) {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(p[0]), "pipe")
	t.Cleanup(func() { f.Close(); unix.Close(p[1]) })
	q, err := newQueue(&Device{name: "pipe"}, 0, f)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := frame.NewPool(frame.PoolConfig{Buffers: 8, Frame: 256})
	if err != nil {
		t.Fatal(err)
	}
	q.SetPool(pool)
	return q, p[1]
}

// TestRxBurstLeavesTheCheckAfterAnEmptyReadToWait: after a burst that
// emptied the kernel's queue, the next empty-handed RxBurst does not read
// again; a frame that came meanwhile is not lost: Wait reads it at once,
// and a caller that only polls gets it on the call after.
func TestRxBurstLeavesTheCheckAfterAnEmptyReadToWait(t *testing.T) {
	q, w := pipeQueue(t)
	pkts := make([]*frame.Packet, 4)
	send := func(s string) {
		if _, err := unix.Write(w, []byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	got := func(n int, want string) {
		t.Helper()
		if n != 1 || string(pkts[0].Data()) != want {
			t.Fatalf("RxBurst = %d frames, want 1 (%q)", n, want)
		}
		pkts[0].Free()
	}
	send("a")
	got(q.RxBurst(pkts), "a") // and the read after it finds the pipe empty
	send("b")
	if n := q.RxBurst(pkts); n != 0 {
		t.Fatalf("RxBurst after an empty read = %d frames, want 0 (Wait checks)", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := q.Wait(ctx); err != nil {
		t.Fatalf("Wait with a frame queued: %v", err)
	}
	got(q.RxBurst(pkts), "b")

	// Polling without Wait: every other call asks the kernel.
	q.RxBurst(pkts)
	send("c")
	n := q.RxBurst(pkts)
	if n == 0 {
		n = q.RxBurst(pkts)
	}
	got(n, "c")
}
