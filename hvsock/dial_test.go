package hvsock_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/clock/clocktest"
	"github.com/vmbusd/vmbusd/hvsock"
	"github.com/vmbusd/vmbusd/hvsock/wire"
	"github.com/vmbusd/vmbusd/internal/testutil"
	"github.com/vmbusd/vmbusd/sim"
	"github.com/vmbusd/vmbusd/vmbus"
)

func TestDialRefusedByTheHost(t *testing.T) {
	testutil.CheckGoroutineLeaks(t)
	e := newTestEnv(t, sim.HvSockConfig{})
	d := hvsock.Dialer{Config: e.cfg, Timeout: time.Hour, Retries: 2}
	_, err := d.Dial(testCtx(t), 1234)
	var op *net.OpError
	if !errors.Is(err, syscall.ECONNREFUSED) || !errors.As(err, &op) || op.Op != "dial" {
		t.Fatalf("Dial to a port without a host listener = %v, want *net.OpError dial ECONNREFUSED", err)
	}
	if got := e.hv.Stats().Refused; got != 3 {
		t.Fatalf("host refused %d requests, want 3 (one attempt and two retries)", got)
	}
	if want := "dial hvsock host(2):1234:"; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %q, want prefix %q", err, want)
	}
}

// TestDialTimeoutIgnoresLateOffer: the host offers after the guest gave up;
// the guest leaves the offer unopened and the host rescinds it after its
// open timeout (Linux's behaviour). Both timeouts run on a fake clock: the
// dialer's expires as soon as the host holds the request, whose offer
// comes 300 ms (real time) later.
func TestDialTimeoutIgnoresLateOffer(t *testing.T) {
	testutil.CheckGoroutineLeaks(t)
	clk := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	e := newTestEnv(t, sim.HvSockConfig{GuestOpenTimeout: time.Second, Clock: clk})
	l, _ := e.hv.Listen(300)
	defer l.Close()
	e.hv.SetOfferDelay(300 * time.Millisecond)
	cfg := e.cfg
	cfg.Clock = clk
	d := hvsock.Dialer{Config: cfg, Timeout: 5 * time.Second}
	dialed := make(chan error, 1)
	go func() {
		_, err := d.Dial(testCtx(t), 300)
		dialed <- err
	}()
	// Expire the timeout once the host holds the request (its offer is
	// 300 ms away).
	testutil.WaitFor(t, hangAfter, func() bool { return e.hv.Stats().Requests > 0 }, "the host to get the connect request")
	if err := clk.WaitTimer(testCtx(t), d.Timeout); err != nil {
		t.Fatal(err)
	}
	clk.Advance(d.Timeout)
	if err := recv(t, "Dial", dialed); !errors.Is(err, syscall.ETIMEDOUT) {
		t.Fatalf("Dial = %v, want ETIMEDOUT", err)
	}
	// The late offer, left alone, waits for the guest's open.
	if err := clk.WaitTimer(testCtx(t), time.Second); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	testutil.WaitFor(t, hangAfter, func() bool {
		s := e.hv.Stats()
		return s.OpenTimeouts > 0 && s.Rescinds > 0
	}, "the host to rescind the late offer")
	if s := e.hv.Stats(); s.Offers != 1 || s.Rescinds != 1 {
		t.Fatalf("host stats %+v: want the one late offer rescinded", s)
	}
	// With the host prompt again, a patient dialer connects.
	e.hv.SetOfferDelay(0)
	c, err := d.Dial(testCtx(t), 300)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := l.AcceptHvSock()
	h.Close()
	c.Close()
}

// TestDialRetriesOnTheClock: a refused dial is tried again RetryWait later
// on the dialer's clock, and not before; after Retries more refusals it
// fails.
func TestDialRetriesOnTheClock(t *testing.T) {
	testutil.CheckGoroutineLeaks(t)
	e := newTestEnv(t, sim.HvSockConfig{})
	clk := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := e.cfg
	cfg.Clock = clk
	d := hvsock.Dialer{Config: cfg, Timeout: time.Hour, Retries: 2, RetryWait: 3 * time.Second}
	dialed := make(chan error, 1)
	go func() {
		_, err := d.Dial(testCtx(t), 1235)
		dialed <- err
	}()
	for attempt := 1; attempt <= 2; attempt++ {
		// Parked on the wait after the attempt's refusal.
		if err := clk.WaitTimer(testCtx(t), d.RetryWait); err != nil {
			t.Fatal(err)
		}
		if got := e.hv.Stats().Refused; got != uint64(attempt) {
			t.Fatalf("waiting after attempt %d: host refused %d", attempt, got)
		}
		clk.Advance(d.RetryWait - time.Nanosecond)
		select {
		case err := <-dialed:
			t.Fatalf("Dial returned (%v) during a retry wait", err)
		default:
		}
		if got := e.hv.Stats().Refused; got != uint64(attempt) {
			t.Fatalf("attempt %d made before the wait ended", attempt+1)
		}
		clk.Advance(time.Nanosecond)
	}
	if err := recv(t, "Dial", dialed); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("Dial = %v, want ECONNREFUSED", err)
	}
	if got := e.hv.Stats().Refused; got != 3 {
		t.Fatalf("host refused %d requests, want 3 (one attempt and two retries)", got)
	}
}

func TestDialHonoursContext(t *testing.T) {
	testutil.CheckGoroutineLeaks(t)
	e := newTestEnv(t, sim.HvSockConfig{})
	l, _ := e.hv.Listen(301)
	defer l.Close()
	e.hv.SetOfferDelay(time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dialed := make(chan error, 1)
	go func() {
		d := hvsock.Dialer{Config: e.cfg, Timeout: time.Hour, Retries: 5}
		_, err := d.Dial(ctx, 301)
		dialed <- err
	}()
	// Cancel once the dialer waits for the offer: the host has its
	// request (and holds the offer back for an hour).
	testutil.WaitFor(t, hangAfter, func() bool { return e.hv.Stats().Requests > 0 }, "the host to get the connect request")
	cancel()
	if err := recv(t, "Dial", dialed); !errors.Is(err, context.Canceled) {
		t.Fatalf("Dial = %v, want context.Canceled", err)
	}
	e.hv.Close() // ends the host's wait
}

func TestDialAddresses(t *testing.T) {
	testutil.CheckGoroutineLeaks(t)
	e := newTestEnv(t, sim.HvSockConfig{})
	g, h := e.pair(t, e.cfg, 2761)
	defer g.Close()
	defer h.Close()
	la, ra := g.LocalAddr().(*hvsock.Addr), g.RemoteAddr().(*hvsock.Addr)
	if ra.ContextID != hvsock.CIDHost || ra.Port != 2761 || ra.Network() != "hvsock" {
		t.Errorf("remote %v (%s)", ra, ra.Network())
	}
	if la.ContextID != hvsock.CIDAny || la.Port <= 1023 {
		t.Errorf("local %v: want CID any and an ephemeral port", la)
	}
	// The host sees the guest's endpoint GUID as the device instance.
	if got, want := h.Device().Instance(), hvsock.ServiceID(la.Port); got != want {
		t.Errorf("device instance %s, want the local port's service id %s", got, want)
	}
	if p := h.RemoteAddr().(*wire.Addr).Port; p != la.Port {
		t.Errorf("host sees guest port %d, want %d", p, la.Port)
	}
}

func TestListenAcceptsHostConnects(t *testing.T) {
	testutil.CheckGoroutineLeaks(t)
	e := newTestEnv(t, sim.HvSockConfig{})
	cfg := e.cfg
	cfg.SendRingSize, cfg.RecvRingSize = 128<<10, 40000
	l, err := cfg.Listen(2762)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := cfg.Listen(2762); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("second Listen on the port = %v, want EADDRINUSE", err)
	}
	g, h := e.acceptPair(t, l, 2762)
	defer closePair(g, h)
	snd, rcv := g.RingSizes()
	if snd != 128<<10 || rcv != 40960 {
		t.Fatalf("accepted connection rings %d, %d; want the listener's 131072, 40960", snd, rcv)
	}
	ra := g.RemoteAddr().(*hvsock.Addr)
	if ra.ContextID != hvsock.CIDHost || ra.Port != h.LocalAddr().(*wire.Addr).Port {
		t.Errorf("remote %v, want host and the port of the host's endpoint id (%v)", ra, h.LocalAddr())
	}
	if g.LocalAddr().(*hvsock.Addr).Port != 2762 {
		t.Errorf("local %v", g.LocalAddr())
	}
	h.Write([]byte("ping"))
	b := make([]byte, 4)
	if _, err := io.ReadFull(g, b); err != nil || string(b) != "ping" {
		t.Fatalf("read %q, %v", b, err)
	}
}

func TestListenPortAny(t *testing.T) {
	testutil.CheckGoroutineLeaks(t)
	e := newTestEnv(t, sim.HvSockConfig{})
	l, err := e.cfg.Listen(hvsock.PortAny)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*hvsock.Addr).Port
	if port <= 1023 || port == hvsock.PortAny {
		t.Fatalf("port %d", port)
	}
	g, h := e.acceptPair(t, l, port)
	h.Close()
	g.Close()
}

// TestHostConnectWithoutListenerTimesOut: a guest without a listener never
// opens the offer; the host gives up and rescinds.
func TestHostConnectWithoutListenerTimesOut(t *testing.T) {
	testutil.CheckGoroutineLeaks(t)
	e := newTestEnv(t, sim.HvSockConfig{HostConnectTimeout: 100 * time.Millisecond})
	_, err := e.hv.Connect(testCtx(t), 999)
	if !errors.Is(err, syscall.ETIMEDOUT) {
		t.Fatalf("Connect = %v, want ETIMEDOUT", err)
	}
	if s := e.hv.Stats(); s.OpenTimeouts != 1 {
		t.Fatalf("host stats %+v", s)
	}
}

// TestListenerBacklogFull: with the backlog full the listener leaves the
// offer alone (Linux: accept queue full) and the host's connect times out;
// once Accept makes room, connects succeed again.
func TestListenerBacklogFull(t *testing.T) {
	testutil.CheckGoroutineLeaks(t)
	e := newTestEnv(t, sim.HvSockConfig{HostConnectTimeout: 20 * time.Second})
	cfg := e.cfg
	cfg.Backlog = 1
	l, err := cfg.Listen(400)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	h1, err := e.hv.Connect(testCtx(t), 400)
	if err != nil {
		t.Fatal(err)
	}
	// The guest leaves the second offer alone; this host gives up on it
	// after 300 ms (its own timeout would say ETIMEDOUT).
	ctx, cancel := context.WithTimeout(testCtx(t), 300*time.Millisecond)
	_, err = e.hv.Connect(ctx, 400)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Connect past the backlog = %v, want the host to give up", err)
	}
	g1, err := l.AcceptHvsock()
	if err != nil {
		t.Fatal(err)
	}
	closePair(g1, h1)
	h2, err := e.hv.Connect(testCtx(t), 400)
	if err != nil {
		t.Fatalf("Connect after Accept made room: %v", err)
	}
	g2, err := l.AcceptHvsock()
	if err != nil {
		t.Fatal(err)
	}
	closePair(g2, h2)
}

func TestListenerCloseEndsAccept(t *testing.T) {
	testutil.CheckGoroutineLeaks(t)
	e := newTestEnv(t, sim.HvSockConfig{})
	l, err := e.cfg.Listen(401)
	if err != nil {
		t.Fatal(err)
	}
	h, err := e.hv.Connect(testCtx(t), 401) // made, never accepted
	if err != nil {
		t.Fatal(err)
	}
	// Close waits for opens in progress and closes what they made.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close = %v, want net.ErrClosed", err)
	}
	if err := l.Close(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("second Close = %v, want net.ErrClosed", err)
	}
	// The unaccepted connection was closed: the host reads its FIN.
	h.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := h.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("host read on the unaccepted connection = %v, want EOF", err)
	}
	h.Close()
	// The port is free again.
	l2, err := e.cfg.Listen(401)
	if err != nil {
		t.Fatal(err)
	}
	l2.Close()
}

func TestRingSizesAreChosenBeforeConnecting(t *testing.T) {
	testutil.CheckGoroutineLeaks(t)
	e := newTestEnv(t, sim.HvSockConfig{})
	tests := []struct{ ask, want int }{
		{0, hvsock.DefaultRingSize}, {16 << 10, 24576}, {32 << 10, 32768}, {40000, 40960},
		{64 << 10, 65536}, {256 << 10, 262144}, {1 << 20, 262144},
	}
	for i, tc := range tests {
		t.Run(fmt.Sprint(tc.ask), func(t *testing.T) {
			cfg := e.cfg
			cfg.SendRingSize, cfg.RecvRingSize = tc.ask, 64<<10
			g, h := e.pair(t, cfg, uint32(500+i))
			defer closePair(g, h)
			snd, rcv := g.RingSizes()
			if snd != tc.want || rcv != 65536 {
				t.Fatalf("rings %d, %d; want %d, 65536", snd, rcv, tc.want)
			}
			// The host sees the same rings: its inbound ring is our
			// outbound one.
			if got := h.Channel().In().DataSize(); got != tc.want-4096 {
				t.Errorf("host inbound data area %d, want %d", got, tc.want-4096)
			}
			// And sysfs lists the map as their sum.
			dev, err := vmbus.LookupDevice(e.root, h.Device().Instance())
			if err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(filepath.Join(dev.Path, "uio", dev.UIO, "maps", "map0", "size"))
			if want := fmt.Sprintf("0x%016x\n", tc.want+65536); string(b) != want {
				t.Errorf("map0/size %q, want %q", b, want)
			}
			if err := g.SetWriteBuffer(1 << 20); !errors.Is(err, hvsock.ErrRingsFixed) {
				t.Errorf("SetWriteBuffer after connect = %v, want ErrRingsFixed", err)
			}
		})
	}
}

func TestConfigChecks(t *testing.T) {
	e := newTestEnv(t, sim.HvSockConfig{})
	cfg := e.cfg
	cfg.ChunkSize = wire.MTU + 1
	if _, err := cfg.Dial(testCtx(t), 1); err == nil {
		t.Fatal("a chunk above the MTU was accepted")
	}
	if _, err := cfg.Listen(1); err == nil {
		t.Fatal("a chunk above the MTU was accepted")
	}
}

// TestChunkSizeBoundsPackets: a write is cut into packets of at most the
// chunk size; ChunkSize 0 sizes the chunk to the send ring (an eighth of
// its data area within Linux's 4088 and the 16 KiB MTU), so a 64 KiB write
// on the largest ring is four packets, on a 24 KiB ring Linux's chunks.
func TestChunkSizeBoundsPackets(t *testing.T) {
	testutil.CheckGoroutineLeaks(t)
	e := newTestEnv(t, sim.HvSockConfig{})
	for i, tc := range []struct {
		name               string
		chunk, ring, write int
		packets            int
	}{
		{"mtu", wire.MTU, hvsock.MaxRingSize, 64 << 10, 4},
		{"linux", wire.DefaultChunk, hvsock.MaxRingSize, 64 << 10, 17},
		{"auto/256K", 0, hvsock.MaxRingSize, 64 << 10, 4},
		{"auto/default", 0, hvsock.DefaultRingSize, 64 << 10, 4},
		{"auto/64K", 0, 64 << 10, 16 << 10, 3},           // 61440/8 = 7680 B
		{"auto/24K", 0, hvsock.MinRingSize, 16 << 10, 5}, // 20480/8 < 4088
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := e.cfg
			cfg.ChunkSize = tc.chunk
			cfg.SendRingSize = tc.ring
			g, h := e.pair(t, cfg, uint32(600+i))
			defer func() {
				h.Close()
				g.Close()
			}()
			if _, err := g.Write(make([]byte, tc.write)); err != nil {
				t.Fatal(err)
			}
			st := g.Stats()
			if st.PacketsWritten != uint64(tc.packets) {
				t.Errorf("%d packets, want %d", st.PacketsWritten, tc.packets)
			}
			// The send loop: the whole write was one batch, one commit.
			if st.Channel.TxCommits != 1 {
				t.Errorf("%d commits for one write that fits, want 1", st.Channel.TxCommits)
			}
		})
	}
}

func TestAutoChunk(t *testing.T) {
	for _, tc := range []struct{ data, want int }{
		{hvsock.MinRingSize - 4096, wire.DefaultChunk},
		{64<<10 - 4096, 7680},
		{hvsock.DefaultRingSize - 4096, wire.MTU},
		{hvsock.MaxRingSize - 4096, wire.MTU},
		{100003, 12496}, // rounded down to 8
	} {
		if got := hvsock.AutoChunk(tc.data); got != tc.want {
			t.Errorf("AutoChunk(%d) = %d, want %d", tc.data, got, tc.want)
		}
	}
}

// TestFullRingBlocksOnPendingSendSize: a write larger than the ring waits
// for the host through pending_send_sz and finishes once it reads.
func TestFullRingBlocksOnPendingSendSize(t *testing.T) {
	testutil.CheckGoroutineLeaks(t)
	e := newTestEnv(t, sim.HvSockConfig{})
	g, h := e.pair(t, e.cfg, 700)
	done := make(chan error, 1)
	go func() {
		_, err := g.Write(make([]byte, 2*hvsock.MaxRingSize))
		done <- err
	}()
	testutil.WaitFor(t, hangAfter, func() bool { return g.Stats().Channel.TxFullWaits > 0 }, "the write to block on the full ring")
	// Blocked: the host's side shows our pending_send_sz.
	if p := h.Channel().In().WriterPending(); p == 0 {
		t.Error("guest blocked without setting pending_send_sz")
	}
	if _, err := io.ReadFull(h, make([]byte, 2*hvsock.MaxRingSize)); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if p := h.Channel().In().WriterPending(); p != 0 {
		t.Errorf("pending_send_sz %d left set after the write finished", p)
	}
	h.Close()
	g.Close()
}

func TestTransportSelection(t *testing.T) {
	e := newTestEnv(t, sim.HvSockConfig{})
	if tr := (&hvsock.Config{Root: e.root}).ResolvedTransport(); tr != hvsock.TransportVMBus {
		t.Errorf("root with %s: transport %v, want vmbus", wire.ConnectNode, tr)
	}
	t.Setenv("VMBUSD_ROOT", e.root)
	if tr := (&hvsock.Config{}).ResolvedTransport(); tr != hvsock.TransportVMBus {
		t.Errorf("VMBUSD_ROOT with %s: transport %v, want vmbus", wire.ConnectNode, tr)
	}
	if tr := (&hvsock.Config{Root: t.TempDir()}).ResolvedTransport(); tr != hvsock.TransportKernel {
		t.Errorf("root without %s: transport %v, want kernel", wire.ConnectNode, tr)
	}
	if tr := (&hvsock.Config{Root: e.root, Transport: hvsock.TransportKernel}).ResolvedTransport(); tr != hvsock.TransportKernel {
		t.Errorf("explicit kernel transport resolved to %v", tr)
	}
}

// TestListenAgainKeepsOpenConnections: a listener is closed and opened
// again on the same port while a connection it accepted lives on; the new
// listener must not be handed that connection's channel again.
func TestListenAgainKeepsOpenConnections(t *testing.T) {
	testutil.CheckGoroutineLeaks(t)
	e := newTestEnv(t, sim.HvSockConfig{})
	l, err := e.cfg.Listen(402)
	if err != nil {
		t.Fatal(err)
	}
	g1, h1 := e.acceptPair(t, l, 402)
	l.Close()
	l2, err := e.cfg.Listen(402)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	g2, h2 := e.acceptPair(t, l2, 402)
	if g2.RemoteAddr().String() == g1.RemoteAddr().String() {
		t.Fatal("the new listener was handed the old connection")
	}
	for _, p := range []struct {
		g *hvsock.Conn
		h *sim.HvSockConn
	}{{g1, h1}, {g2, h2}} {
		p.h.Write([]byte("still"))
		b := make([]byte, 5)
		if _, err := io.ReadFull(p.g, b); err != nil {
			t.Fatal(err)
		}
		closePair(p.g, p.h)
	}
	if v := e.host.Violations(); len(v) != 0 {
		t.Fatalf("violations %v", v)
	}
}
