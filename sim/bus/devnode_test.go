package bus

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vmbusd/vmbusd/internal/testutil"
)

// rawUIOGuest is the guest side of the uio socket contract, written directly
// against the socket (independent of the uio package): hello with SCM_RIGHTS,
// 4-byte counts in, 4-byte irqcontrol out.
type rawUIOGuest struct {
	t    *testing.T
	conn *net.UnixConn
	maps [][]byte
}

func dialRawUIOGuest(t *testing.T, path string) *rawUIOGuest {
	t.Helper()
	conn, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		t.Fatalf("dial %s: %v", path, err)
	}
	g := &rawUIOGuest{t: t, conn: conn}
	t.Cleanup(g.close)
	return g
}

func (g *rawUIOGuest) close() {
	for _, m := range g.maps {
		unix.Munmap(m)
	}
	g.maps = nil
	g.conn.Close()
}

// send sends one raw message (any length, including zero).
func (g *rawUIOGuest) send(b []byte) {
	g.t.Helper()
	raw, err := g.conn.SyscallConn()
	if err != nil {
		g.t.Fatal(err)
	}
	var serr error
	if err := raw.Write(func(fd uintptr) bool {
		serr = unix.Sendto(int(fd), b, unix.MSG_NOSIGNAL, nil)
		return true
	}); err != nil {
		g.t.Fatal(err)
	}
	if serr != nil {
		g.t.Fatalf("send %d bytes: %v", len(b), serr)
	}
}

func (g *rawUIOGuest) sendU32(v uint32) {
	g.t.Helper()
	g.send(binary.LittleEndian.AppendUint32(nil, v))
}

func (g *rawUIOGuest) sendRingSizes(out, in uint32) {
	g.t.Helper()
	b := binary.LittleEndian.AppendUint32(nil, out)
	g.send(binary.LittleEndian.AppendUint32(b, in))
}

// readHello reads the hello, checks its format and maps every descriptor
// whole, as the guest maps maps/mapK/size bytes from offset 0.
func (g *rawUIOGuest) readHello() {
	g.t.Helper()
	var buf [64]byte
	oob := make([]byte, unix.CmsgSpace(4*maxUIOMaps))
	g.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, oobn, flags, _, err := g.conn.ReadMsgUnix(buf[:], oob)
	if err != nil {
		g.t.Fatalf("read hello: %v", err)
	}
	if n != 16 || flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		g.t.Fatalf("hello: %d bytes, flags %#x; want 16, none", n, flags)
	}
	if string(buf[:8]) != "VMBUSUIO" {
		g.t.Fatalf("hello magic %q, want VMBUSUIO", buf[:8])
	}
	if v := binary.LittleEndian.Uint32(buf[8:12]); v != 1 {
		g.t.Fatalf("hello version %d, want 1", v)
	}
	k := int(binary.LittleEndian.Uint32(buf[12:16]))
	var fds []int
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil || len(msgs) != 1 {
			g.t.Fatalf("hello control messages: %d, %v", len(msgs), err)
		}
		if fds, err = unix.ParseUnixRights(&msgs[0]); err != nil {
			g.t.Fatalf("hello rights: %v", err)
		}
	}
	if len(fds) != k {
		g.t.Fatalf("hello: K = %d but %d descriptors", k, len(fds))
	}
	for _, fd := range fds {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			g.t.Fatal(err)
		}
		m, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		unix.Close(fd) // the mapping keeps the memory
		if err != nil {
			g.t.Fatalf("mmap map: %v", err)
		}
		g.maps = append(g.maps, m)
	}
}

// readMsg reads one message, waiting up to d.
func (g *rawUIOGuest) readMsg(d time.Duration) ([]byte, error) {
	var buf [64]byte
	g.conn.SetReadDeadline(time.Now().Add(d))
	n, _, _, _, err := g.conn.ReadMsgUnix(buf[:], nil)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// readCount reads one interrupt-count message.
func (g *rawUIOGuest) readCount() uint32 {
	g.t.Helper()
	b, err := g.readMsg(5 * time.Second)
	if err != nil {
		g.t.Fatalf("read count: %v", err)
	}
	if len(b) != 4 {
		g.t.Fatalf("count message of %d bytes, want 4", len(b))
	}
	return binary.LittleEndian.Uint32(b)
}

// expectNoMessage checks that nothing arrives within d.
func (g *rawUIOGuest) expectNoMessage(d time.Duration) {
	g.t.Helper()
	b, err := g.readMsg(d)
	if err == nil {
		g.t.Fatalf("unexpected message %x", b)
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		g.t.Fatalf("read: %v, want a timeout", err)
	}
}

// expectEOF checks that the guest reads the end of the stream.
func (g *rawUIOGuest) expectEOF() {
	g.t.Helper()
	b, err := g.readMsg(5 * time.Second)
	if !errors.Is(err, io.EOF) {
		g.t.Fatalf("read: %x, %v; want EOF", b, err)
	}
}

// waitReadable waits until a message is queued for the guest, without
// reading it.
func (g *rawUIOGuest) waitReadable() {
	g.t.Helper()
	raw, err := g.conn.SyscallConn()
	if err != nil {
		g.t.Fatal(err)
	}
	raw.Control(func(fd uintptr) {
		p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(p, 5000); err != nil || p[0].Revents&unix.POLLIN == 0 {
			g.t.Errorf("waiting for the hello: %v, revents %#x", err, p[0].Revents)
		}
	})
}

type nodeOpenCall struct {
	c       *nodeConn
	out, in uint32
}

// testUIOHost is a host for one node: memfd maps handed to every Open, and
// every callback recorded on a channel.
type testUIOHost struct {
	n          *node
	path       string
	mems       [][]byte
	opens      chan nodeOpenCall
	controls   chan uint32
	closed     chan *nodeConn
	violations chan string
}

// testUIOHostOpts configures newTestUIOHost; it is fixed before the node
// starts.
type testUIOHostOpts struct {
	wantRingSizes bool
	mapSizes      []int
	openErr       error             // Open fails with this
	onOpen        func(c *nodeConn) // runs inside Open
}

func newTestUIOHost(t *testing.T, o testUIOHostOpts) *testUIOHost {
	t.Helper()
	h := &testUIOHost{
		path:       filepath.Join(t.TempDir(), "uio0"),
		opens:      make(chan nodeOpenCall, 64),
		controls:   make(chan uint32, 64),
		closed:     make(chan *nodeConn, 64),
		violations: make(chan string, 64),
	}
	var files []*os.File
	for _, size := range o.mapSizes {
		f, mem, err := newMemFile("map", size, false)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unmapMem(mem); f.Close() })
		files = append(files, f)
		h.mems = append(h.mems, mem)
	}
	n, err := listenNode(nodeConfig{
		Path:          h.path,
		WantRingSizes: o.wantRingSizes,
		Open: func(c *nodeConn, out, in uint32) ([]*os.File, error) {
			h.opens <- nodeOpenCall{c, out, in}
			if o.onOpen != nil {
				o.onOpen(c)
			}
			if o.openErr != nil {
				return nil, o.openErr
			}
			return files, nil
		},
		Control:   func(c *nodeConn, v uint32) { h.controls <- v },
		Closed:    func(c *nodeConn) { h.closed <- c },
		Violation: func(what string) { h.violations <- what },
	})
	if err != nil {
		t.Fatal(err)
	}
	h.n = n
	t.Cleanup(func() { n.Close() })
	return h
}

func (h *testUIOHost) waitOpen(t *testing.T) nodeOpenCall {
	t.Helper()
	select {
	case o := <-h.opens:
		return o
	case <-time.After(5 * time.Second):
		t.Fatal("Open not called")
		return nodeOpenCall{}
	}
}

func (h *testUIOHost) waitClosed(t *testing.T) *nodeConn {
	t.Helper()
	select {
	case c := <-h.closed:
		return c
	case <-time.After(5 * time.Second):
		t.Fatal("Closed not called")
		return nil
	}
}

func (h *testUIOHost) waitControl(t *testing.T) uint32 {
	t.Helper()
	select {
	case v := <-h.controls:
		return v
	case <-time.After(5 * time.Second):
		t.Fatal("Control not called")
		return 0
	}
}

func (h *testUIOHost) waitViolation(t *testing.T) string {
	t.Helper()
	select {
	case v := <-h.violations:
		return v
	case <-time.After(5 * time.Second):
		t.Fatal("Violation not called")
		return ""
	}
}

func (h *testUIOHost) expectNoViolation(t *testing.T) {
	t.Helper()
	select {
	case v := <-h.violations:
		t.Fatalf("unexpected violation: %s", v)
	default:
	}
}

func TestNodeHelloPassesMapsThatShareMemory(t *testing.T) {
	testutil.CheckGoroutineLeaks(t)
	h := newTestUIOHost(t, testUIOHostOpts{mapSizes: []int{2 * 4096, 4096}})
	g := dialRawUIOGuest(t, h.path)
	o := h.waitOpen(t)
	if o.out != 0 || o.in != 0 {
		t.Errorf("Open ring sizes %d, %d without WantRingSizes; want 0, 0", o.out, o.in)
	}
	if pid := o.c.PeerPID(); pid != os.Getpid() {
		t.Errorf("PeerPID = %d, want %d", pid, os.Getpid())
	}
	g.readHello()
	if len(g.maps) != 2 || len(g.maps[0]) != 2*4096 || len(g.maps[1]) != 4096 {
		t.Fatalf("guest maps: %d", len(g.maps))
	}
	h.mems[0][4097] = 0xab
	if g.maps[0][4097] != 0xab {
		t.Error("host write not seen by the guest")
	}
	g.maps[1][5] = 0xcd
	if h.mems[1][5] != 0xcd {
		t.Error("guest write not seen by the host")
	}
	h.expectNoViolation(t)
}

func TestNodeHelloWithoutMaps(t *testing.T) {
	h := newTestUIOHost(t, testUIOHostOpts{})
	g := dialRawUIOGuest(t, h.path)
	h.waitOpen(t)
	g.readHello()
	if len(g.maps) != 0 {
		t.Errorf("%d maps, want 0", len(g.maps))
	}
}

func TestNodeControlDeliversZeroOrOne(t *testing.T) {
	h := newTestUIOHost(t, testUIOHostOpts{mapSizes: []int{4096}})
	g := dialRawUIOGuest(t, h.path)
	h.waitOpen(t)
	g.readHello()
	for _, tc := range []struct{ send, want uint32 }{{0, 0}, {1, 1}, {7, 1}, {0xffffffff, 1}, {0, 0}} {
		g.sendU32(tc.send)
		if got := h.waitControl(t); got != tc.want {
			t.Errorf("write(%#x): Control(%d), want %d", tc.send, got, tc.want)
		}
	}
	h.expectNoViolation(t)
}

// With a guest that does not read, many interrupts leave exactly one message
// queued. It carries the count at the time it was sent (the first
// interrupt's); the count goes on rising, and the next message after the
// guest has read carries the current value.
func TestNodeNotifyKeepsAtMostOneUndeliveredMessage(t *testing.T) {
	h := newTestUIOHost(t, testUIOHostOpts{mapSizes: []int{4096}})
	g := dialRawUIOGuest(t, h.path)
	c := h.waitOpen(t).c
	g.readHello()
	for range 100 {
		c.Notify()
	}
	if got := c.Count(); got != 100 {
		t.Errorf("Count = %d, want 100", got)
	}
	if got := g.readCount(); got != 1 {
		t.Errorf("queued message carries %d, want 1 (the count when it was sent)", got)
	}
	g.expectNoMessage(50 * time.Millisecond)
	c.Notify()
	if got := g.readCount(); got != 101 {
		t.Errorf("next message carries %d, want 101", got)
	}
	g.expectNoMessage(20 * time.Millisecond)
}

// Interrupts raised while the hello is still unread: the hello is not a
// notification, so one count message may queue behind it, and only one.
func TestNodeNotifyQueuesOneMessageBehindUnreadHello(t *testing.T) {
	h := newTestUIOHost(t, testUIOHostOpts{mapSizes: []int{4096}})
	g := dialRawUIOGuest(t, h.path)
	c := h.waitOpen(t).c
	g.waitReadable() // the hello is queued, unread
	for range 10 {
		c.Notify()
	}
	g.readHello()
	if got := g.readCount(); got != 1 {
		t.Errorf("message after the hello carries %d, want 1", got)
	}
	g.expectNoMessage(50 * time.Millisecond)
	c.Notify()
	if got := g.readCount(); got != 11 {
		t.Errorf("next message carries %d, want 11", got)
	}
}

// Interrupts raised during Open (the channel is open, the hello not yet
// sent) are announced by one message right after the hello, as the real
// read() reports events since open().
func TestNodeNotifyDuringOpenFollowsHello(t *testing.T) {
	h := newTestUIOHost(t, testUIOHostOpts{mapSizes: []int{4096}, onOpen: func(c *nodeConn) {
		c.Notify()
		c.Notify()
		c.Notify()
	}})
	g := dialRawUIOGuest(t, h.path)
	h.waitOpen(t)
	g.readHello()
	if got := g.readCount(); got != 3 {
		t.Errorf("message after the hello carries %d, want 3", got)
	}
	g.expectNoMessage(50 * time.Millisecond)
}

func TestNodeSecondConcurrentConnectIsViolationAndFirstKeepsWorking(t *testing.T) {
	testutil.CheckGoroutineLeaks(t)
	h := newTestUIOHost(t, testUIOHostOpts{mapSizes: []int{4096}})
	g1 := dialRawUIOGuest(t, h.path)
	c1 := h.waitOpen(t).c
	g1.readHello()

	g2 := dialRawUIOGuest(t, h.path)
	g2.expectEOF()
	if v := h.waitViolation(t); !strings.Contains(v, "second concurrent connect") {
		t.Errorf("violation %q", v)
	}
	select {
	case o := <-h.opens:
		t.Fatalf("Open called for the rejected connection (pid %d)", o.c.PeerPID())
	default:
	}

	g1.sendU32(1)
	if v := h.waitControl(t); v != 1 {
		t.Errorf("Control(%d), want 1", v)
	}
	c1.Notify()
	if got := g1.readCount(); got != 1 {
		t.Errorf("count %d, want 1", got)
	}
}

func TestNodeReconnectGetsFreshOpen(t *testing.T) {
	testutil.CheckGoroutineLeaks(t)
	h := newTestUIOHost(t, testUIOHostOpts{mapSizes: []int{4096}})
	g1 := dialRawUIOGuest(t, h.path)
	c1 := h.waitOpen(t).c
	g1.readHello()
	c1.Notify()
	if got := g1.readCount(); got != 1 {
		t.Fatalf("count %d, want 1", got)
	}
	g1.close()
	if c := h.waitClosed(t); c != c1 {
		t.Error("Closed called for another connection")
	}
	c1.Notify() // dead: ignored
	if got := c1.Count(); got != 1 {
		t.Errorf("Notify on a closed connection counted: %d", got)
	}

	g2 := dialRawUIOGuest(t, h.path)
	c2 := h.waitOpen(t).c
	if c2 == c1 {
		t.Fatal("reconnect reused the connection")
	}
	g2.readHello()
	// The count is the device's: it continues across opens.
	c2.Notify()
	if got := g2.readCount(); got != 2 {
		t.Errorf("count %d after reopen, want 2", got)
	}
	h.expectNoViolation(t)
}

// A guest that closes and at once reconnects (no wait for the host to notice
// the close) gets a fresh open, not a violation.
func TestNodeImmediateReconnectIsNotViolation(t *testing.T) {
	h := newTestUIOHost(t, testUIOHostOpts{mapSizes: []int{4096}})
	for i := range 20 {
		g := dialRawUIOGuest(t, h.path)
		h.waitOpen(t)
		g.readHello()
		if i%2 == 0 {
			g.sendU32(1) // unread by the host when the guest closes
		}
		g.close()
	}
	for range 20 {
		h.waitClosed(t)
	}
	h.expectNoViolation(t)
}

// Go defers the close(2) of a socket while another goroutine is inside a Read
// on it; a reconnect right after Close must still not count as concurrent.
func TestNodeReconnectWhileOldReaderUnwindsIsNotViolation(t *testing.T) {
	h := newTestUIOHost(t, testUIOHostOpts{mapSizes: []int{4096}})
	for range 10 {
		g := dialRawUIOGuest(t, h.path)
		h.waitOpen(t)
		g.readHello()
		go g.readMsg(5 * time.Second)
		// Close while the reader is parked in its Read (the old
		// reader of an earlier round has been woken by its Close).
		testutil.WaitBlocked(t, 0, "(*rawUIOGuest).readMsg", "IO wait")
		g.conn.Close()
	}
	for range 10 {
		h.waitClosed(t)
	}
	h.expectNoViolation(t)
}

func TestNodeCloseGivesGuestEOF(t *testing.T) {
	testutil.CheckGoroutineLeaks(t)
	h := newTestUIOHost(t, testUIOHostOpts{mapSizes: []int{4096}})
	g := dialRawUIOGuest(t, h.path)
	c := h.waitOpen(t).c
	g.readHello()
	g.sendU32(1)
	g.sendU32(0)
	if err := h.n.Close(); err != nil {
		t.Fatal(err)
	}
	// Close waited for Closed.
	select {
	case got := <-h.closed:
		if got != c {
			t.Error("Closed for another connection")
		}
	default:
		t.Fatal("Closed not called before node.Close returned")
	}
	g.expectEOF()
	if _, err := g.conn.Write([]byte{1, 0, 0, 0}); !errors.Is(err, unix.EPIPE) {
		t.Errorf("write after rescind: %v, want EPIPE", err)
	}
	if _, err := os.Lstat(h.path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket file after Close: %v", err)
	}
	if _, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: h.path, Net: "unixpacket"}); err == nil {
		t.Error("connect after Close succeeded")
	}
	if err := h.n.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	select {
	case <-h.closed:
		t.Error("Closed called twice")
	default:
	}
	c.Notify() // dead: must not panic or send
}

func TestNodeConnCloseDropsGuest(t *testing.T) {
	h := newTestUIOHost(t, testUIOHostOpts{mapSizes: []int{4096}})
	g := dialRawUIOGuest(t, h.path)
	c := h.waitOpen(t).c
	g.readHello()
	c.Close()
	c.Close()
	g.expectEOF()
	if got := h.waitClosed(t); got != c {
		t.Error("Closed for another connection")
	}
	g2 := dialRawUIOGuest(t, h.path)
	h.waitOpen(t)
	g2.readHello()
	h.expectNoViolation(t)
}

func TestNodeOpenErrorClosesConnection(t *testing.T) {
	h := newTestUIOHost(t, testUIOHostOpts{mapSizes: []int{4096}, openErr: errors.New("no channel")})
	g := dialRawUIOGuest(t, h.path)
	o := h.waitOpen(t)
	g.expectEOF()
	// No Closed for a connection that never opened: once the connection
	// is finished, Closed would have been called.
	select {
	case <-o.c.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the connection did not finish")
	}
	select {
	case <-h.closed:
		t.Error("Closed called after a failed Open")
	default:
	}
}

func TestNodeRingSizesArePassedToOpen(t *testing.T) {
	h := newTestUIOHost(t, testUIOHostOpts{wantRingSizes: true, mapSizes: []int{0x6000 + 0x8000}})
	g := dialRawUIOGuest(t, h.path)
	// The host waits for the ring sizes, and has not opened the device.
	testutil.WaitBlocked(t, 0, "(*nodeConn).open", "IO wait")
	select {
	case <-h.opens:
		t.Fatal("Open called before the ring-size message")
	default:
	}
	g.sendRingSizes(0x6000, 0x8000)
	o := h.waitOpen(t)
	if o.out != 0x6000 || o.in != 0x8000 {
		t.Errorf("Open(out %#x, in %#x), want 0x6000, 0x8000", o.out, o.in)
	}
	g.readHello()
	h.expectNoViolation(t)
}

func TestNodeRingSizeMessageOfWrongLengthIsViolation(t *testing.T) {
	h := newTestUIOHost(t, testUIOHostOpts{wantRingSizes: true, mapSizes: []int{4096}})
	g := dialRawUIOGuest(t, h.path)
	g.sendU32(1)
	if v := h.waitViolation(t); !strings.Contains(v, "ring-size message of 4 bytes") {
		t.Errorf("violation %q", v)
	}
	g.expectEOF()
	select {
	case <-h.opens:
		t.Error("Open called")
	default:
	}
}

func TestNodeWrongSizeMessagesAreViolations(t *testing.T) {
	h := newTestUIOHost(t, testUIOHostOpts{mapSizes: []int{4096}})
	g := dialRawUIOGuest(t, h.path)
	h.waitOpen(t)
	g.readHello()
	g.send([]byte{1, 0, 0})
	g.send([]byte{1, 0, 0, 0, 0})
	g.send(make([]byte, 100))
	g.send(nil)
	g.sendU32(1)
	var got []string
	for range 4 {
		got = append(got, h.waitViolation(t))
	}
	want := []string{
		"irqcontrol message of 3 bytes, want 4",
		"irqcontrol message of 5 bytes, want 4",
		"irqcontrol message of 100 bytes, want 4",
		"zero-length message",
	}
	if !slices.Equal(got, want) {
		t.Errorf("violations %q, want %q", got, want)
	}
	if v := h.waitControl(t); v != 1 {
		t.Errorf("Control(%d) after the bad messages, want 1", v)
	}
	select {
	case <-h.controls:
		t.Error("a bad message reached Control")
	default:
	}
}

func TestNodeReplacesStaleFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "uio7")
	if err := os.WriteFile(path, []byte("stale"), 0o600); err != nil {
		t.Fatal(err)
	}
	n, err := listenNode(nodeConfig{Path: path, Open: func(*nodeConn, uint32, uint32) ([]*os.File, error) { return nil, nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	st, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Type() != os.ModeSocket || st.Mode().Perm() != 0o600 {
		t.Errorf("node file mode %v, want a socket with 0600", st.Mode())
	}
}

// Many goroutines raising interrupts while the guest reads: counts only go
// up and the last message eventually carries the final count.
func TestNodeConcurrentNotify(t *testing.T) {
	h := newTestUIOHost(t, testUIOHostOpts{mapSizes: []int{4096}})
	g := dialRawUIOGuest(t, h.path)
	c := h.waitOpen(t).c
	g.readHello()
	const workers, each = 8, 500
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				c.Notify()
			}
		})
	}
	var last uint32
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for finished := false; !finished; {
		select {
		case <-done:
			finished = true
		default:
		}
		b, err := g.readMsg(50 * time.Millisecond)
		if err != nil {
			continue
		}
		v := binary.LittleEndian.Uint32(b)
		if v <= last {
			t.Fatalf("count went from %d to %d", last, v)
		}
		last = v
	}
	// Drain a message still queued from the last workers.
	if b, err := g.readMsg(50 * time.Millisecond); err == nil {
		last = binary.LittleEndian.Uint32(b)
	}
	if last == 0 || last > workers*each {
		t.Errorf("last count seen %d, want 1..%d", last, workers*each)
	}
	c.Notify()
	if got := g.readCount(); got != workers*each+1 {
		t.Errorf("final count %d, want %d", got, workers*each+1)
	}
}

// TestNodeSocketPolledForInputOnly: no epoll instance of the process
// watches the connection's socket for output. Go's network poller
// registers a socket for EPOLLOUT as well (edge-triggered), and every
// notification the guest reads frees send space, which would wake a
// poller thread for nothing (newNodeConn). The socket is watched, for
// input only, by the connection's own epoll instance.
func TestNodeSocketPolledForInputOnly(t *testing.T) {
	h := newTestUIOHost(t, testUIOHostOpts{mapSizes: []int{4096}})
	g := dialRawUIOGuest(t, h.path)
	o := h.waitOpen(t)
	g.readHello()
	fd := hostConnSocket(t, h.path)
	// The same socket under any descriptor number: compare the inode.
	var want unix.Stat_t
	if err := unix.Fstat(fd, &want); err != nil {
		t.Fatal(err)
	}
	watched := false
	for _, tg := range epollTargets(t) {
		var st unix.Stat_t
		if unix.Fstat(tg.fd, &st) != nil || st.Ino != want.Ino || st.Dev != want.Dev {
			continue
		}
		watched = true
		if tg.events&unix.EPOLLOUT != 0 {
			t.Errorf("the connection's socket (fd %d) is watched for output as fd %d (events %#x)", fd, tg.fd, tg.events)
		}
		if tg.events&unix.EPOLLIN == 0 {
			t.Errorf("the connection's socket (fd %d) is watched as fd %d without EPOLLIN (events %#x)", fd, tg.fd, tg.events)
		}
	}
	if !watched {
		t.Error("no epoll instance watches the connection's socket: irqcontrol writes would go unread")
	}
	// Notifications still reach the guest, and irqcontrol writes the host.
	o.c.Notify()
	if got := g.readCount(); got != 1 {
		t.Errorf("count %d, want 1", got)
	}
	g.sendU32(1)
	if v := h.waitControl(t); v != 1 {
		t.Errorf("control %d, want 1", v)
	}
	h.expectNoViolation(t)
}

// hostConnSocket returns a descriptor of the host's end of the one
// connection to the node at path: the socket named path that is not the
// listener.
func hostConnSocket(t *testing.T, path string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd:", err)
	}
	found := -1
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		sa, err := unix.Getsockname(fd)
		if err != nil {
			continue
		}
		if ua, ok := sa.(*unix.SockaddrUnix); !ok || ua.Name != path {
			continue
		}
		if acc, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN); err != nil || acc != 0 {
			continue
		}
		if found >= 0 {
			var a, b unix.Stat_t
			if unix.Fstat(found, &a) == nil && unix.Fstat(fd, &b) == nil && a.Ino == b.Ino {
				continue // the same socket under another number
			}
			t.Fatalf("two host connection sockets for %s: fds %d and %d", path, found, fd)
		}
		found = fd
	}
	if found < 0 {
		t.Fatalf("no host connection socket for %s", path)
	}
	return found
}

// epollTarget is one registration of an epoll instance.
type epollTarget struct {
	fd     int
	events uint32
}

// epollTargets returns the registrations of this process's epoll instances
// (/proc/self/fdinfo's "tfd:" lines).
func epollTargets(t *testing.T) []epollTarget {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd:", err)
	}
	var tgs []epollTarget
	for _, e := range ents {
		l, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil || l != "anon_inode:[eventpoll]" {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc/self/fdinfo", e.Name()))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			var tg epollTarget
			if _, err := fmt.Sscanf(line, "tfd: %d events: %x", &tg.fd, &tg.events); err == nil {
				tgs = append(tgs, tg)
			}
		}
	}
	return tgs
}
