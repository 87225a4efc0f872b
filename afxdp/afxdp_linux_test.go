//go:build linux

package afxdp_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/vmbusd/vmbusd/afxdp"
	"github.com/vmbusd/vmbusd/internal/testutil"
)

// Test frames: broadcast, EtherType 0x88b5 (IEEE local experimental), a
// magic, the queue and sequence number, then a pattern from both.
const etherType = 0x88b5

func testFrame(size int, queue, seq uint32) []byte {
	b := make([]byte, size)
	copy(b, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0, 1})
	binary.BigEndian.PutUint16(b[12:], etherType)
	copy(b[14:], "VMBX")
	binary.BigEndian.PutUint32(b[18:], queue)
	binary.BigEndian.PutUint32(b[22:], seq)
	for i := 26; i < size; i++ {
		b[i] = byte(i) ^ byte(seq) ^ byte(queue*31)
	}
	return b
}

// parseFrame returns a test frame's queue and sequence number, and
// whether every byte is the one testFrame wrote.
func parseFrame(b []byte) (queue, seq uint32, ok bool) {
	if len(b) < 26 || binary.BigEndian.Uint16(b[12:]) != etherType || string(b[14:18]) != "VMBX" {
		return 0, 0, false
	}
	queue, seq = binary.BigEndian.Uint32(b[18:]), binary.BigEndian.Uint32(b[22:])
	return queue, seq, bytes.Equal(b, testFrame(len(b), queue, seq))
}

func openPort(t testing.TB, ifname string, cfg afxdp.Config) *afxdp.Port {
	t.Helper()
	p, err := afxdp.Open(ifname, cfg)
	skipIfNoXDP(t, err)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func openSocket(t testing.TB, ifname string, queue int, cfg afxdp.Config) *afxdp.Socket {
	t.Helper()
	s, err := afxdp.OpenSocket(ifname, queue, cfg)
	skipIfNoXDP(t, err)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// sendAll sends frames, retrying while the TX ring is full.
func sendAll(t testing.TB, s *afxdp.Socket, frames [][]byte) {
	t.Helper()
	for len(frames) > 0 {
		var n int
		testutil.WaitFor(t, 0, func() bool {
			var err error
			if n, err = s.Send(frames); err != nil {
				t.Fatalf("send: %v", err)
			}
			if n == 0 {
				if err := s.Flush(); err != nil {
					t.Fatalf("flush: %v", err)
				}
			}
			return n > 0
		}, "room in the TX ring")
		frames = frames[n:]
	}
	if err := s.Flush(); err != nil {
		t.Fatalf("flush: %v", err)
	}
}

// recvN receives exactly n frames from s (the deadline only stops a hung
// test) and returns copies.
func recvN(t testing.TB, s *afxdp.Socket, n int) [][]byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	bufs := make([][]byte, 64)
	for i := range bufs {
		bufs[i] = make([]byte, s.MaxFrameLen())
	}
	sizes := make([]int, len(bufs))
	var out [][]byte
	for len(out) < n {
		if err := s.Wait(ctx); err != nil {
			t.Fatalf("queue %d: wait after %d of %d frames: %v", s.Queue(), len(out), n, err)
		}
		k, err := s.Recv(bufs[:min(len(bufs), n-len(out))], sizes)
		if err != nil {
			t.Fatalf("recv: %v", err)
		}
		for i := range k {
			out = append(out, bytes.Clone(bufs[i][:sizes[i]]))
		}
	}
	return out
}

func smallConfig() afxdp.Config { return afxdp.Config{RingSize: 256} }

func TestPeerFramesArriveIntactOnEveryQueue(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared-umem=%v", shared), func(t *testing.T) {
			const queues, perQueue = 4, 200
			a, b := vethPair(t, queues)
			cfg := smallConfig()
			cfg.SharedUMEM = shared
			p := openPort(t, a, cfg)
			if got := len(p.Sockets()); got != queues {
				t.Fatalf("port opened %d sockets, want one per queue (%d)", got, queues)
			}
			t.Logf("xdp %v, sockets %v", p.AttachMode(), p.BindMode())
			// One sender per queue on the peer: veth delivers a frame
			// sent on TX queue q to RX queue q of the other end.
			for q := range queues {
				tx := openSocket(t, b, q, smallConfig())
				var frames [][]byte
				for i := range perQueue {
					size := 60 + (i*97)%1455 // 60 .. 1514 bytes
					frames = append(frames, testFrame(size, uint32(q), uint32(i)))
				}
				sendAll(t, tx, frames)
			}
			for q, s := range p.Sockets() {
				got := recvN(t, s, perQueue)
				for i, f := range got {
					fq, seq, ok := parseFrame(f)
					if !ok || fq != uint32(q) || seq != uint32(i) {
						t.Fatalf("queue %d frame %d: queue %d seq %d intact %v", q, i, fq, seq, ok)
					}
				}
				if st := s.Stats(); st.RxPackets != perQueue || st.InvalidDesc != 0 || st.KernelRxDropped != 0 {
					t.Fatalf("queue %d stats %+v", q, st)
				}
			}
		})
	}
}

// A sender this package did not write: an AF_PACKET socket on the peer.
func TestPacketSocketFramesArrive(t *testing.T) {
	const n = 300
	a, b := vethPair(t, 2)
	p := openPort(t, a, smallConfig())
	fd := packetSocket(t, b)
	ifi := ifindex(t, b)
	// The frames spread over the queues by the peer's TX queue choice;
	// count them all. Sent in bursts below veth's 256-frame ring, each
	// received before the next.
	seen := make([]bool, n)
	total := 0
	deadline := time.Now().Add(20 * time.Second) // hang guard only
	for sent := 0; sent < n; {
		for end := min(sent+50, n); sent < end; sent++ {
			f := testFrame(64+sent%1400, 9, uint32(sent))
			if err := unix.Sendto(fd, f, 0, &unix.SockaddrLinklayer{Ifindex: ifi, Halen: 6, Addr: [8]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}); err != nil {
				t.Fatalf("packet socket send: %v", err)
			}
		}
		for total < sent {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d frames arrived", total, sent)
			}
			for _, s := range p.Sockets() {
				got := drain(t, s)
				for _, f := range got {
					_, seq, ok := parseFrame(f)
					if !ok || seq >= n || seen[seq] {
						t.Fatalf("bad or duplicate frame seq %d intact %v", seq, ok)
					}
					seen[seq] = true
				}
				total += len(got)
			}
		}
	}
}

// drain returns what s holds now, waiting briefly for the first frame.
func drain(t testing.TB, s *afxdp.Socket) [][]byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := s.Wait(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait: %v", err)
	}
	bufs := make([][]byte, 64)
	for i := range bufs {
		bufs[i] = make([]byte, s.MaxFrameLen())
	}
	sizes := make([]int, 64)
	var out [][]byte
	for {
		k, err := s.Recv(bufs, sizes)
		if err != nil {
			t.Fatalf("recv: %v", err)
		}
		if k == 0 {
			return out
		}
		for i := range k {
			out = append(out, bytes.Clone(bufs[i][:sizes[i]]))
		}
	}
}

func packetSocket(t testing.TB, ifname string) int {
	t.Helper()
	proto := int(htons(etherType))
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		t.Fatalf("packet socket: %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(etherType), Ifindex: ifindex(t, ifname)}); err != nil {
		t.Fatalf("packet bind: %v", err)
	}
	// Room for every frame a test sends (the default drops beyond ~100).
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 16<<20)
	tv := unix.Timeval{Sec: 20}
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	return fd
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func ifindex(t testing.TB, name string) int {
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return l.Attrs().Index
}

// Send reaches the peer, seen by a receiver this package did not write.
func TestSendReachesThePeer(t *testing.T) {
	const n = 500
	a, b := vethPair(t, 1)
	fd := packetSocket(t, b)
	s := openSocket(t, a, 0, smallConfig())
	var frames [][]byte
	for i := range n {
		frames = append(frames, testFrame(60+(i*53)%1455, 0, uint32(i)))
	}
	sendAll(t, s, frames)
	buf := make([]byte, 2048)
	for i := range n {
		m, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			t.Fatalf("peer received %d of %d: %v", i, n, err)
		}
		_, seq, ok := parseFrame(buf[:m])
		if !ok || seq != uint32(i) || m != len(frames[i]) {
			t.Fatalf("peer frame %d: seq %d intact %v len %d", i, seq, ok, m)
		}
	}
	if st := s.Stats(); st.TxPackets != n || st.TxWakeups == 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestVethRefusesZeroCopySoCopyModeIsUsed(t *testing.T) {
	a, _ := vethPair(t, 1)
	cfg := smallConfig()
	cfg.Bind = afxdp.BindZeroCopy
	_, err := afxdp.Open(a, cfg)
	if !errors.Is(err, unix.EOPNOTSUPP) {
		t.Fatalf("forced zero-copy on veth: %v, want EOPNOTSUPP", err)
	}
	if attachedProg(t, a) != 0 {
		t.Fatal("failed Open left an XDP program attached")
	}
	p := openPort(t, a, smallConfig())
	if p.BindMode() != afxdp.BindCopy {
		t.Fatalf("bind mode %v, want copy", p.BindMode())
	}
	if p.AttachMode() != afxdp.AttachNative {
		t.Fatalf("attach mode %v, want native (veth has native XDP)", p.AttachMode())
	}
	if attachedProg(t, a) == 0 {
		t.Fatal("no XDP program attached")
	}
}

func TestGenericAttachOnRequest(t *testing.T) {
	a, b := vethPair(t, 1)
	cfg := smallConfig()
	cfg.Attach = afxdp.AttachGeneric
	p := openPort(t, a, cfg)
	if p.AttachMode() != afxdp.AttachGeneric {
		t.Fatalf("attach mode %v", p.AttachMode())
	}
	tx := openSocket(t, b, 0, smallConfig())
	sendAll(t, tx, [][]byte{testFrame(100, 0, 1)})
	got := recvN(t, p.Sockets()[0], 1)
	if _, seq, ok := parseFrame(got[0]); !ok || seq != 1 {
		t.Fatal("frame not intact in generic mode")
	}
}

func TestBusyPollOptions(t *testing.T) {
	a, b := vethPair(t, 1)
	cfg := smallConfig()
	cfg.BusyPoll = afxdp.BusyPoll{Timeout: 20 * time.Microsecond, Budget: 16}
	p := openPort(t, a, cfg)
	s := p.Sockets()[0]
	if !s.BusyPolling() {
		t.Skip("kernel refused SO_PREFER_BUSY_POLL/SO_BUSY_POLL/SO_BUSY_POLL_BUDGET")
	}
	// An empty Recv runs the device's poll from this socket.
	if n, err := s.Recv(make([][]byte, 1), make([]int, 1)); n != 0 || err != nil {
		t.Fatalf("recv on an idle socket: %d, %v", n, err)
	}
	if s.Stats().RxWakeups == 0 {
		t.Fatal("busy polling made no recvfrom")
	}
	tx := openSocket(t, b, 0, smallConfig())
	sendAll(t, tx, [][]byte{testFrame(64, 0, 7)})
	if got := recvN(t, s, 1); len(got) != 1 {
		t.Fatal("no frame with busy polling")
	}
}

func attachedProg(t testing.TB, name string) uint32 {
	t.Helper()
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	if x := l.Attrs().Xdp; x != nil && x.Attached {
		return x.ProgId
	}
	return 0
}

// The device goes away under a sleeping Wait: the removal is seen from
// the netlink event alone (probing is off), and every call then says
// ErrDeviceGone.
func TestDeviceRemovalIsErrDeviceGone(t *testing.T) {
	a, b := vethPair(t, 1)
	p := openPort(t, a, smallConfig())
	s := p.Sockets()[0]
	afxdp.SetProbeInterval(s, -1)
	tx := openSocket(t, b, 0, afxdp.Config{RingSize: 64})                    // the peer's, gone with it
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // hang guard only
	defer cancel()
	waitErr := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		close(started)
		waitErr <- s.Wait(ctx)
	}()
	<-started
	deleted := time.Now()
	deleteLink(b)
	err := <-waitErr
	t.Logf("wait returned %v %v after the deletion", err, time.Since(deleted))
	if !errors.Is(err, afxdp.ErrDeviceGone) {
		t.Fatalf("wait: %v, want ErrDeviceGone", err)
	}
	if _, err := s.Recv(make([][]byte, 1), make([]int, 1)); !errors.Is(err, afxdp.ErrDeviceGone) {
		t.Fatalf("recv after removal: %v", err)
	}
	if _, err := tx.Send([][]byte{testFrame(64, 0, 0)}); !errors.Is(err, afxdp.ErrDeviceGone) {
		t.Fatalf("send after removal: %v", err)
	}
	if !errors.Is(tx.Err(), afxdp.ErrDeviceGone) {
		t.Fatalf("Err() = %v", tx.Err())
	}
	if err := p.Close(); err != nil {
		t.Fatalf("close after removal: %v", err)
	}
}

func TestCloseWakesWait(t *testing.T) {
	a, _ := vethPair(t, 1)
	p := openPort(t, a, smallConfig())
	s := p.Sockets()[0]
	afxdp.SetProbeInterval(s, -1)
	waitErr := make(chan error, 1)
	go func() { waitErr <- s.Wait(context.Background()) }()
	// Close may land before or during the Wait: both end it.
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-waitErr; !errors.Is(err, afxdp.ErrClosed) {
		t.Fatalf("wait: %v, want ErrClosed", err)
	}
	if _, err := s.Send([][]byte{testFrame(64, 0, 0)}); !errors.Is(err, afxdp.ErrClosed) {
		t.Fatalf("send after close: %v", err)
	}
}

func TestContextEndsWait(t *testing.T) {
	a, _ := vethPair(t, 1)
	s := openPort(t, a, smallConfig()).Sockets()[0]
	afxdp.SetProbeInterval(s, -1)
	ctx, cancel := context.WithCancel(context.Background())
	waitErr := make(chan error, 1)
	go func() { waitErr <- s.Wait(ctx) }()
	cancel()
	if err := <-waitErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("wait: %v", err)
	}
}

// An idle Wait sleeps: it wakes for events, not in a loop.
func TestIdleWaitSleeps(t *testing.T) {
	a, _ := vethPair(t, 2)
	for _, s := range openPort(t, a, smallConfig()).Sockets() {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		err := s.Wait(ctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("wait: %v", err)
		}
		// A busy loop makes thousands of polls in that time; a sleeping
		// Wait one, plus one per link event anyone caused meanwhile.
		if w := s.Stats().Waits; w > 50 {
			t.Fatalf("queue %d: %d polls in one idle Wait", s.Queue(), w)
		}
	}
}

func openFDs(t testing.TB) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func TestCloseLeavesNothingBehind(t *testing.T) {
	a, b := vethPair(t, 2)
	goroutines, fds := runtime.NumGoroutine(), openFDs(t)
	for _, shared := range []bool{false, true} {
		cfg := smallConfig()
		cfg.SharedUMEM = shared
		p, err := afxdp.Open(a, cfg)
		skipIfNoXDP(t, err)
		if err != nil {
			t.Fatal(err)
		}
		id := attachedProg(t, a)
		if id == 0 {
			t.Fatal("no program attached after Open")
		}
		tx, err := afxdp.OpenSocket(b, 1, smallConfig())
		if err != nil {
			t.Fatal(err)
		}
		sendAll(t, tx, [][]byte{testFrame(64, 1, 0)})
		recvN(t, p.Sockets()[1], 1)
		ctx, cancel := context.WithCancel(context.Background())
		_ = p.Sockets()[0].Wait(ctxDone(ctx)) // registers a context callback
		cancel()
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		if err := tx.Close(); err != nil {
			t.Fatal(err)
		}
		if attachedProg(t, a) != 0 {
			t.Fatal("XDP program still attached after Close")
		}
		testutil.WaitFor(t, 0, func() bool {
			prog, err := ebpf.NewProgramFromID(ebpf.ProgramID(id))
			if err == nil {
				prog.Close()
				return false
			}
			return errors.Is(err, os.ErrNotExist)
		}, "the program to be freed")
	}
	if got := openFDs(t); got != fds {
		t.Fatalf("%d fds open after Close, %d before", got, fds)
	}
	testutil.WaitFor(t, 0, func() bool { return runtime.NumGoroutine() <= goroutines }, "goroutines to end")
}

// ctxDone returns an already ended copy of ctx's lineage, so Wait wires
// its cancellation and returns at once.
func ctxDone(parent context.Context) context.Context {
	ctx, cancel := context.WithCancel(parent)
	cancel()
	return ctx
}

func TestSteadyStateDoesNotAllocate(t *testing.T) {
	a, b := vethPair(t, 1)
	p := openPort(t, a, smallConfig())
	rx := p.Sockets()[0]
	tx := openSocket(t, b, 0, smallConfig())
	const batch = 16
	frames := make([][]byte, batch)
	for i := range frames {
		frames[i] = testFrame(1514, 0, uint32(i))
	}
	bufs := make([][]byte, batch)
	for i := range bufs {
		bufs[i] = make([]byte, rx.MaxFrameLen())
	}
	sizes := make([]int, batch)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fail := ""
	round := func() {
		sent := 0
		for sent < batch {
			n, err := tx.Send(frames[sent:])
			if err != nil {
				fail = err.Error()
				return
			}
			sent += n
		}
		got := 0
		for got < batch {
			if err := rx.Wait(ctx); err != nil {
				fail = err.Error()
				return
			}
			n, err := rx.Recv(bufs, sizes)
			if err != nil {
				fail = err.Error()
				return
			}
			got += n
		}
		// The receiving socket transmits too (to the peer's stack).
		if _, err := rx.Send(frames[:4]); err != nil {
			fail = err.Error()
		}
		_ = rx.Stats()
	}
	round() // wires the context once
	if allocs := testing.AllocsPerRun(200, round); allocs != 0 {
		t.Fatalf("%.1f allocations per send+wait+recv round, want 0", allocs)
	}
	if fail != "" {
		t.Fatal(fail)
	}
}
