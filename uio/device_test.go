//go:build linux

package uio

import (
	"context"
	"encoding/binary"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vmbusd/vmbusd/internal/testutil"
)

// testHost plays the simulator's side of the uio socket contract
// (docs/uio-contract.md §3.2): a unixpacket listener at R/dev/uio0 and one memfd per map.
type testHost struct {
	root string
	info Info
	ln   *net.UnixListener
	fds  []int    // one memfd per map
	mems [][]byte // the host's mappings of fds
}

// shortTempDir is t.TempDir for socket paths, which must stay under 108 bytes.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "uio")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func newTestHost(t *testing.T, maps []fakeMap) *testHost {
	t.Helper()
	h := &testHost{root: shortTempDir(t)}
	buildDevice(t, h.root, testGUID, 0, maps, linkRelative)
	info, err := Lookup(h.root, "uio0")
	if err != nil {
		t.Fatal(err)
	}
	h.info = info
	os.MkdirAll(filepath.Join(h.root, "dev"), 0o755)
	h.ln, err = net.ListenUnix("unixpacket", &net.UnixAddr{Name: info.NodePath(), Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.ln.Close() })
	for _, m := range maps {
		fd, mem := newMemfd(t, m.size)
		h.fds = append(h.fds, fd)
		h.mems = append(h.mems, mem)
	}
	return h
}

// newMemfd returns a memfd of size bytes and the host's mapping of it.
func newMemfd(t *testing.T, size uint64) (int, []byte) {
	t.Helper()
	fd, err := unix.MemfdCreate("uio-test", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		unix.Munmap(mem)
		unix.Close(fd)
	})
	return fd, mem
}

func hello(version, k uint32) []byte {
	b := append([]byte(nil), helloMagic...)
	b = binary.LittleEndian.AppendUint32(b, version)
	return binary.LittleEndian.AppendUint32(b, k)
}

func (h *testHost) goodHello() []byte { return hello(helloVersion, uint32(len(h.fds))) }

// serve accepts one connection in a goroutine, runs handle on it and then
// hands it over on the returned channel (nil if accept failed).
func (h *testHost) serve(t *testing.T, handle func(c *net.UnixConn)) <-chan *net.UnixConn {
	ch := make(chan *net.UnixConn, 1)
	go func() {
		h.ln.SetDeadline(time.Now().Add(10 * time.Second))
		c, err := h.ln.AcceptUnix()
		if err != nil {
			t.Errorf("accept: %v", err)
			ch <- nil
			return
		}
		handle(c)
		ch <- c
	}()
	return ch
}

// sendHello sends msg with fds attached.
func sendHello(t *testing.T, c *net.UnixConn, msg []byte, fds []int) {
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := c.WriteMsgUnix(msg, oob, nil); err != nil {
		t.Errorf("send hello: %v", err)
	}
}

// open opens the device against a host that sends the good hello; it
// returns the Device and the host's end of the connection.
func (h *testHost) open(t *testing.T, opts Options) (*Device, *net.UnixConn) {
	t.Helper()
	ch := h.serve(t, func(c *net.UnixConn) { sendHello(t, c, h.goodHello(), h.fds) })
	d, err := Open(h.info, opts)
	c := <-ch
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if c == nil {
		t.FailNow()
	}
	t.Cleanup(func() {
		d.Close()
		c.Close()
	})
	return d, c
}

func notify(t *testing.T, c *net.UnixConn, counts ...uint32) {
	t.Helper()
	for _, n := range counts {
		if _, err := c.Write(binary.LittleEndian.AppendUint32(nil, n)); err != nil {
			t.Fatalf("notify %d: %v", n, err)
		}
	}
}

// waitIRQ is one Wait on d, bounded so that a Wait that never returns
// fails the test.
func waitIRQ(t *testing.T, d *Device) uint32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := d.Wait(ctx)
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	return n
}

func TestOpenSocketMapsAreSharedBothWays(t *testing.T) {
	h := newTestHost(t, nicMaps)
	d, _ := h.open(t, Options{})
	if !d.Simulated() {
		t.Error("Simulated() = false on the socket")
	}
	maps := d.Maps()
	if len(maps) != len(nicMaps) {
		t.Fatalf("%d maps, want %d", len(maps), len(nicMaps))
	}
	for k, m := range maps {
		if uint64(len(m)) != nicMaps[k].size || uint64(cap(m)) != nicMaps[k].size {
			t.Errorf("map%d len %d cap %d, want %d", k, len(m), cap(m), nicMaps[k].size)
		}
	}
	h.mems[0][10] = 0xab
	if maps[0][10] != 0xab {
		t.Error("guest does not see the host's write to map0")
	}
	d.Map("send:")[len(maps[4])-1] = 0xcd
	if h.mems[4][len(h.mems[4])-1] != 0xcd {
		t.Error("host does not see the guest's write to send:")
	}
	if d.Map("monitor_page") == nil || d.Map("nope") != nil {
		t.Error("Map by name misbehaves")
	}
	if got := d.Info(); !strings.HasSuffix(got.NodePath(), "dev/uio0") || len(got.Maps) != 5 {
		t.Errorf("Info() = %+v", got)
	}
}

func TestWaitReturnsNewestCountAndWakesOnce(t *testing.T) {
	h := newTestHost(t, nicMaps[:1])
	d, c := h.open(t, Options{})
	notify(t, c, 1, 2, 3)
	if n := waitIRQ(t, d); n != 3 {
		t.Fatalf("Wait = %d, want 3", n)
	}
	if n, changed, err := d.Poll(); n != 3 || changed || err != nil {
		t.Fatalf("Poll after Wait = %d, %v, %v; want 3, false, nil", n, changed, err)
	}
	// A repeated count is not a change; the next new one is.
	notify(t, c, 3, 4)
	if n := waitIRQ(t, d); n != 4 || d.Count() != 4 {
		t.Fatalf("Wait = %d (Count %d), want 4", n, d.Count())
	}
	notify(t, c, 9)
	if n, changed, err := d.Poll(); n != 9 || !changed || err != nil {
		t.Fatalf("Poll = %d, %v, %v; want 9, true, nil", n, changed, err)
	}
}

func TestWaitBlocksUntilNotified(t *testing.T) {
	h := newTestHost(t, nicMaps[:1])
	d, c := h.open(t, Options{})
	done := make(chan uint32)
	go func() {
		n, err := d.Wait(context.Background())
		if err != nil {
			t.Errorf("Wait: %v", err)
		}
		done <- n
	}()
	testutil.WaitBlocked(t, 0, "uio.(*Device).Wait")
	select {
	case n := <-done:
		t.Fatalf("Wait returned %d before any notification", n)
	default:
	}
	notify(t, c, 7)
	if n := <-done; n != 7 {
		t.Errorf("Wait = %d, want 7", n)
	}
}

func TestWaitHonoursContext(t *testing.T) {
	h := newTestHost(t, nicMaps[:1])
	d, c := h.open(t, Options{})

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := d.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait(cancelled) = %v, want context.Canceled", err)
	}

	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	timedOut := make(chan error, 1)
	go func() {
		_, err := d.Wait(ctx)
		timedOut <- err
	}()
	select {
	case err := <-timedOut:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Wait(timeout) = %v, want context.DeadlineExceeded", err)
		}
	case <-time.After(testutil.DefaultTimeout):
		t.Fatal("Wait never noticed its context's deadline")
	}

	// The cancellation must not stick to the connection.
	notify(t, c, 5)
	if n := waitIRQ(t, d); n != 5 {
		t.Errorf("Wait after a cancelled Wait = %d, want 5", n)
	}
}

func TestIRQControlReachesHost(t *testing.T) {
	h := newTestHost(t, nicMaps[:1])
	d, c := h.open(t, Options{})
	for _, enable := range []bool{true, false, true} {
		if err := d.IRQControl(enable); err != nil {
			t.Fatalf("IRQControl(%v): %v", enable, err)
		}
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for _, want := range []uint32{1, 0, 1} {
		var b [16]byte
		n, err := c.Read(b[:])
		if err != nil || n != 4 || binary.LittleEndian.Uint32(b[:]) != want {
			t.Fatalf("host read % x, %v; want 4-byte %d", b[:n], err, want)
		}
	}
}

func TestRingSizesAreTheFirstMessage(t *testing.T) {
	h := newTestHost(t, nicMaps[:1])
	got := make(chan []byte, 1)
	ch := h.serve(t, func(c *net.UnixConn) {
		b := make([]byte, 64)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := c.Read(b)
		if err != nil {
			t.Errorf("host read: %v", err)
		}
		got <- b[:n]
		sendHello(t, c, h.goodHello(), h.fds)
	})
	d, err := Open(h.info, Options{RingSizes: [2]uint32{0x6000, 0x40000}})
	c := <-ch
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	defer d.Close()
	want := []byte{0x00, 0x60, 0, 0, 0x00, 0x00, 0x04, 0}
	if b := <-got; string(b) != string(want) {
		t.Errorf("first message % x, want % x", b, want)
	}
}

func TestHostCloseIsRescind(t *testing.T) {
	h := newTestHost(t, nicMaps[:1])
	d, c := h.open(t, Options{})
	notify(t, c, 1)
	c.Close()
	// The notification queued before the close still counts.
	n, err := d.Wait(context.Background())
	if n != 1 && !errors.Is(err, ErrRescinded) {
		t.Fatalf("Wait = %d, %v", n, err)
	}
	if err == nil {
		_, err = d.Wait(context.Background())
	}
	if !errors.Is(err, ErrRescinded) {
		t.Errorf("Wait after host close = %v, want ErrRescinded", err)
	}
	if _, _, err := d.Poll(); !errors.Is(err, ErrRescinded) {
		t.Errorf("Poll after host close = %v, want ErrRescinded", err)
	}
	if err := d.IRQControl(true); !errors.Is(err, ErrRescinded) {
		t.Errorf("IRQControl after host close = %v, want ErrRescinded", err)
	}
	if err := d.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
}

func TestBadNotificationIsAnError(t *testing.T) {
	h := newTestHost(t, nicMaps[:1])
	d, c := h.open(t, Options{})
	c.Write([]byte{1, 2, 3, 4, 5})
	if _, err := d.Wait(context.Background()); err == nil || errors.Is(err, ErrRescinded) {
		t.Errorf("Wait on a 5-byte notification = %v, want a non-rescind error", err)
	}
}

func TestCloseUnblocksWait(t *testing.T) {
	h := newTestHost(t, nicMaps)
	d, _ := h.open(t, Options{})
	errc := make(chan error, 1)
	go func() {
		_, err := d.Wait(context.Background())
		errc <- err
	}()
	testutil.WaitBlocked(t, 0, "uio.(*Device).Wait")
	if err := d.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, os.ErrClosed) || !errors.Is(err, net.ErrClosed) {
			t.Errorf("Wait after Close = %v, want os.ErrClosed and net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not unblock Wait")
	}
	if err := d.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	if d.Maps() != nil || d.Map("txrx_rings") != nil {
		t.Error("maps still handed out after Close")
	}
	if err := d.IRQControl(true); !errors.Is(err, os.ErrClosed) {
		t.Errorf("IRQControl after Close = %v", err)
	}
	if _, _, err := d.Poll(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Poll after Close = %v", err)
	}
}

func TestBadHelloIsRefused(t *testing.T) {
	maps := nicMaps[:2]
	for _, tc := range []struct {
		name string
		send func(t *testing.T, h *testHost, c *net.UnixConn)
		want error // nil: any error
	}{
		{"bad magic", func(t *testing.T, h *testHost, c *net.UnixConn) {
			b := h.goodHello()
			copy(b, "VMBUSUIX")
			sendHello(t, c, b, h.fds)
		}, ErrBadHello},
		{"version 2", func(t *testing.T, h *testHost, c *net.UnixConn) {
			sendHello(t, c, hello(2, 2), h.fds)
		}, ErrBadHello},
		{"map count differs from sysfs", func(t *testing.T, h *testHost, c *net.UnixConn) {
			sendHello(t, c, hello(1, 1), h.fds[:1])
		}, ErrBadHello},
		{"too few descriptors", func(t *testing.T, h *testHost, c *net.UnixConn) {
			sendHello(t, c, h.goodHello(), h.fds[:1])
		}, ErrBadHello},
		{"no descriptors", func(t *testing.T, h *testHost, c *net.UnixConn) {
			sendHello(t, c, h.goodHello(), nil)
		}, ErrBadHello},
		{"too many descriptors", func(t *testing.T, h *testHost, c *net.UnixConn) {
			sendHello(t, c, h.goodHello(), append(h.fds, h.fds...))
		}, ErrBadHello},
		{"descriptor too small", func(t *testing.T, h *testHost, c *net.UnixConn) {
			small, _ := newMemfd(t, 4096)
			sendHello(t, c, h.goodHello(), []int{h.fds[0], small}) // map1 is 2 pages
		}, ErrBadHello},
		{"short", func(t *testing.T, h *testHost, c *net.UnixConn) {
			sendHello(t, c, h.goodHello()[:12], h.fds)
		}, ErrBadHello},
		{"long", func(t *testing.T, h *testHost, c *net.UnixConn) {
			sendHello(t, c, append(h.goodHello(), 0), h.fds)
		}, ErrBadHello},
		{"a count instead", func(t *testing.T, h *testHost, c *net.UnixConn) {
			c.Write([]byte{1, 0, 0, 0})
		}, ErrBadHello},
		{"closed before hello", func(t *testing.T, h *testHost, c *net.UnixConn) {
			c.Close()
		}, ErrRescinded},
		{"no hello", func(t *testing.T, h *testHost, c *net.UnixConn) {}, os.ErrDeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms := maps
			if tc.name == "descriptor too small" {
				ms = []fakeMap{maps[0], {"big", 2 * 4096}}
			}
			h := newTestHost(t, ms)
			ch := h.serve(t, func(c *net.UnixConn) { tc.send(t, h, c) })
			d, err := Open(h.info, Options{HelloTimeout: 200 * time.Millisecond})
			if c := <-ch; c != nil {
				c.Close()
			}
			if err == nil {
				d.Close()
				t.Fatal("Open succeeded")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("Open = %v, want %v", err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "uio: open ") {
				t.Errorf("error %q lacks context", err)
			}
		})
	}
}

func TestOpenRefusesOtherNodes(t *testing.T) {
	root := t.TempDir()
	buildDevice(t, root, testGUID, 0, nicMaps[:1], linkRelative)
	info, err := Lookup(root, "uio0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(info, Options{}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Open(missing node) = %v, want ErrNotExist", err)
	}
	writeFile(t, info.NodePath(), "regular file")
	if _, err := Open(info, Options{}); err == nil || !strings.Contains(err.Error(), "not a character device or socket") {
		t.Errorf("Open(regular file) = %v", err)
	}
}

// TestOpenCharDevice exercises the character-device path against /dev/zero,
// the one character device here that can be mmapped shared at any offset.
func TestOpenCharDevice(t *testing.T) {
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skip("no /dev/zero")
	}
	root := t.TempDir()
	buildDevice(t, root, testGUID, 0, []fakeMap{{"txrx_rings", 3 * 4096}, {"int_page", 100}}, linkRelative)
	info, err := Lookup(root, "uio0")
	if err != nil {
		t.Fatal(err)
	}
	symlink(t, "/dev/zero", info.NodePath())
	if _, err := Open(info, Options{RingSizes: [2]uint32{0x6000, 0x6000}}); err == nil {
		t.Error("Open with ring sizes on a character device succeeded")
	}
	d, err := Open(info, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Simulated() {
		t.Error("Simulated() = true on a character device")
	}
	maps := d.Maps()
	if len(maps) != 2 || len(maps[0]) != 3*4096 || len(maps[1]) != 100 {
		t.Fatalf("map lengths wrong: %d maps", len(maps))
	}
	maps[0][3*4096-1] = 1 // writable to the end
	// map1 is not touched: /dev/zero's shared object is only as large as
	// the mapping, so an access at page offset 1 would fault. A real
	// /dev/uioN picks the map by that offset instead.
	if err := d.IRQControl(true); err != nil {
		t.Errorf("IRQControl: %v", err)
	}
	// /dev/zero reads back count 0 forever: never a change, and Poll must
	// not spin on it.
	if n, changed, err := d.Poll(); n != 0 || changed || err != nil {
		t.Errorf("Poll = %d, %v, %v", n, changed, err)
	}
	if err := d.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// TestFileNodeWaitAndClose runs the Device over an *os.File node, as the
// character device is, with a socketpair standing in for /dev/uioN.
func TestFileNodeWaitAndClose(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	host := os.NewFile(uintptr(fds[1]), "host")
	defer host.Close()
	d, err := newDevice(Info{Name: "uio9"}, "uio9", os.NewFile(uintptr(fds[0]), "uio9"), false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []uint32{4, 5} {
		host.Write(binary.LittleEndian.AppendUint32(nil, n))
	}
	if n := waitIRQ(t, d); n != 5 {
		t.Errorf("Wait = %d, want 5", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := d.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait(timeout) = %v", err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := d.Wait(context.Background())
		errc <- err
	}()
	testutil.WaitBlocked(t, 0, "uio.(*Device).Wait")
	d.Close()
	if err := <-errc; !errors.Is(err, os.ErrClosed) {
		t.Errorf("Wait after Close = %v, want os.ErrClosed", err)
	}
}

func TestIRQControlAllocatesNothing(t *testing.T) {
	h := newTestHost(t, nicMaps[:1])
	d, c := h.open(t, Options{})
	done := make(chan struct{})
	go func() { // drain the host end so writes never block
		defer close(done)
		var b [16]byte
		for {
			if _, err := c.Read(b[:]); err != nil {
				return
			}
		}
	}()
	enable := false
	testutil.AllocBudget(t, 0, 200, func() {
		enable = !enable
		if err := d.IRQControl(enable); err != nil {
			t.Fatal(err)
		}
	})
	d.Close()
	c.Close()
	<-done
}
