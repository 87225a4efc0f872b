package hvsockhost

import (
	"bufio"
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
	"github.com/vmbusd/vmbusd/sim/bus"
	"github.com/vmbusd/vmbusd/vmbus"
)

// hvTestHost is a host with its hv_sock side under a fresh root.
func hvTestHost(t *testing.T, cfg Config) (*bus.Host, *Host) {
	t.Helper()
	root := t.TempDir()
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		d, err := os.MkdirTemp("/dev/shm", "sim-hvsock-")
		if err == nil {
			root = d
			t.Cleanup(func() { os.RemoveAll(d) })
		}
	}
	h, err := bus.New(bus.Config{Root: root, Profile: bus.DefaultProfile})
	if err != nil {
		t.Fatal(err)
	}
	hv, err := Start(h, cfg)
	if err != nil {
		h.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		hv.Close()
		h.Close()
	})
	return h, hv
}

// tlDial connects to R/dev/vmbus-tl as a guest kernel would post messages.
func tlDial(t *testing.T, h *bus.Host) *net.UnixConn {
	t.Helper()
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: filepath.Join(h.Root(), wire.ConnectNode), Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func readAttr(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// waitFor is testutil.WaitFor with its default deadline, for the tests of
// this package.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.WaitFor(t, 0, cond, what)
}

func TestHvSockNeedsASignallingProfile(t *testing.T) {
	h, err := bus.New(bus.Config{Root: t.TempDir(), Profile: bus.ProfileLegacy})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if _, err := Start(h, Config{}); err == nil {
		t.Fatal("hv_sock started on the legacy profile, whose guests cannot signal an unmonitored channel")
	}
}

// TestGuestConnectOfferInSysfs sends a raw TL_CONNECT_REQUEST and checks
// the offer's device: what a real offer carries, mapped as hvsock.go
// documents. Nobody opens it, so it is rescinded after the open timeout.
func TestGuestConnectOfferInSysfs(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	h, hv := hvTestHost(t, Config{Clock: clk}) // the offer stays until the test expires it
	l, err := hv.Listen(2761)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	req := wire.ConnectRequest{Endpoint: wire.ServiceID(40000), Service: wire.ServiceID(2761)}
	if _, err := tlDial(t, h).Write(req.Marshal()); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(h.Root(), "sys/bus/vmbus/devices", req.Endpoint.String())
	var node string // uioN, bound after the device appears
	waitFor(t, "the offer's uio node", func() bool {
		ents, _ := os.ReadDir(filepath.Join(dir, "uio"))
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "uio") {
				node = e.Name()
			}
		}
		return node != ""
	})
	for name, want := range map[string]string{
		"class_id":                        req.Service.Braced(),
		"device_id":                       req.Endpoint.Braced(),
		"chn_flags":                       "0x2011",
		"is_for_guest_accept":             "0",
		"device":                          "0x10",
		"uio/" + node + "/maps/map0/name": "txrx_rings",
		"uio/" + node + "/maps/map0/size": fmt.Sprintf("0x%016x", 2*vmbus.ClampHvSockRing(0)),
	} {
		if got := readAttr(t, dir, name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "monitor_id")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("monitor_id present: hv_sock channels are not monitored")
	}
	dev, err := vmbus.LookupDevice(h.Root(), req.Endpoint)
	if err != nil || dev.ClassName() != "hv_sock" || dev.MonitorID != -1 {
		t.Fatalf("device %+v, %v", dev, err)
	}
	if s := hv.Stats(); s.OpenTimeouts != 0 {
		t.Fatalf("stats %+v: an open timeout before the timeout", s)
	}
	advanceTimer(t, clk, DefaultGuestOpenTimeout)
	waitFor(t, "the rescind of the unopened offer", func() bool { _, err := os.Stat(dir); return err != nil })
	if s := hv.Stats(); s.Requests != 1 || s.Offers != 1 || s.OpenTimeouts != 1 || s.Refused != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestGuestConnectRefusedWithResult(t *testing.T) {
	h, hv := hvTestHost(t, Config{})
	c := tlDial(t, h)
	for _, v2 := range []bool{false, true} {
		req := wire.ConnectRequest{Endpoint: wire.ServiceID(40001), Service: wire.ServiceID(9), V2: v2}
		c.Write(req.Marshal())
		buf := make([]byte, 128)
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		n, err := c.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		res, err := wire.ParseConnectResult(buf[:n])
		if err != nil || n != wire.ConnectResultLen {
			t.Fatalf("answer % x: %v", buf[:n], err)
		}
		if res.Endpoint != req.Endpoint || res.Service != req.Service || uint32(res.Status) != 0xC0000236 {
			t.Fatalf("result %+v", res)
		}
	}
	if s := hv.Stats(); s.Refused != 2 || s.Offers != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestMalformedConnectRequestIsAViolation(t *testing.T) {
	h, hv := hvTestHost(t, Config{})
	c := tlDial(t, h)
	bad := wire.ConnectRequest{Endpoint: wire.ServiceID(1), Service: wire.ServiceID(2)}.Marshal()
	bad[0] = 22
	c.Write(bad)
	c.Write([]byte("short"))
	// The socket still serves: a good request is answered.
	c.Write(wire.ConnectRequest{Endpoint: wire.ServiceID(3), Service: wire.ServiceID(4)}.Marshal())
	buf := make([]byte, 128)
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	n, err := c.Read(buf)
	if err != nil || n != wire.ConnectResultLen {
		t.Fatalf("answer %d bytes, %v", n, err)
	}
	if s := hv.Stats(); s.Violations != 2 {
		t.Fatalf("violations %d, want 2", s.Violations)
	}
	if v := h.Violations(); len(v) != 2 {
		t.Fatalf("host violations %v", v)
	}
}

// TestConnectRequestsAreBackPressured: with one request allowed in
// progress the host reads the next only after the first is settled (here:
// its channel opened).
func TestConnectRequestsAreBackPressured(t *testing.T) {
	h, hv := hvTestHost(t, Config{MaxPendingConnects: 1, GuestOpenTimeout: time.Minute})
	l, _ := hv.Listen(50)
	defer l.Close()
	c := tlDial(t, h)
	a := wire.ConnectRequest{Endpoint: wire.ServiceID(41000), Service: wire.ServiceID(50)}
	b := wire.ConnectRequest{Endpoint: wire.ServiceID(41001), Service: wire.ServiceID(50)}
	c.Write(a.Marshal())
	c.Write(b.Marshal())
	waitFor(t, "the first offer", func() bool { return hv.Stats().Offers == 1 })
	// The reader parks waiting for a pending slot, not for the socket.
	testutil.WaitBlocked(t, 0, "(*Host).serveTL", "select")
	if s := hv.Stats(); s.Requests != 1 || s.Offers != 1 {
		t.Fatalf("stats %+v: the second request was taken while the first was pending", s)
	}
	dev, err := vmbus.LookupDevice(h.Root(), a.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the uio node", func() bool { d, _ := vmbus.LookupDevice(h.Root(), a.Endpoint); dev = d; return d.UIO != "" })
	hd, err := vmbus.Open(dev, vmbus.Options{RingSizes: [2]uint32{0, 0x8000}})
	if err != nil {
		t.Fatal(err)
	}
	defer hd.Close()
	waitFor(t, "the second offer", func() bool { return hv.Stats().Offers == 2 })
	hc, err := l.AcceptHvSock()
	if err != nil {
		t.Fatal(err)
	}
	if got := hc.Channel().Out().DataSize(); got != 0x8000-4096 {
		t.Errorf("host-to-guest ring data %d, want the guest's 0x8000 less the header", got)
	}
	hc.Close()
}

func TestHostConnectOfferInSysfs(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	h, hv := hvTestHost(t, Config{Clock: clk}) // the offer stays until the test expires it
	errc := make(chan error, 1)
	go func() {
		_, err := hv.Connect(context.Background(), 2763)
		errc <- err
	}()
	var dir string
	waitFor(t, "the offer", func() bool {
		ents, _ := os.ReadDir(filepath.Join(h.Root(), "sys/bus/vmbus/devices"))
		for _, e := range ents {
			d := filepath.Join(h.Root(), "sys/bus/vmbus/devices", e.Name())
			if b, err := os.ReadFile(filepath.Join(d, "is_for_guest_accept")); err == nil && strings.TrimSpace(string(b)) == "1" {
				dir = d
				return true
			}
		}
		return false
	})
	if got, want := readAttr(t, dir, "class_id"), wire.ServiceID(2763).Braced(); got != want {
		t.Errorf("class_id %s, want %s", got, want)
	}
	if got := readAttr(t, dir, "device_id"); got != "{"+filepath.Base(dir)+"}" {
		t.Errorf("device_id %s for directory %s", got, filepath.Base(dir))
	}
	// Nobody listens in the guest: the host gives up and rescinds.
	advanceTimer(t, clk, DefaultHostConnectTimeout)
	if err := <-errc; !errors.Is(err, syscall.ETIMEDOUT) {
		t.Fatalf("Connect = %v, want ETIMEDOUT", err)
	}
	waitFor(t, "the rescind", func() bool { _, err := os.Stat(dir); return err != nil })
}

// frontEnv is a host with the Unix socket front end and a guest listener.
func frontEnv(t *testing.T) (*bus.Host, *Host, string) {
	base := filepath.Join(t.TempDir(), "hvsock")
	h, hv := hvTestHost(t, Config{SocketBase: base, HostConnectTimeout: 2 * time.Second})
	return h, hv, base
}

// TestFrontEndConnectsToAGuestListener speaks the hybrid vsock protocol
// as socat would: CONNECT, OK, then bytes both ways and half-closes.
func TestFrontEndConnectsToAGuestListener(t *testing.T) {
	h, _, base := frontEnv(t)
	gl, err := (&hvsock.Config{Transport: hvsock.TransportVMBus, Root: h.Root()}).Listen(2764)
	if err != nil {
		t.Fatal(err)
	}
	defer gl.Close()
	guestDone := make(chan error, 1)
	go func() {
		c, err := gl.Accept()
		if err != nil {
			guestDone <- err
			return
		}
		defer c.Close()
		b, err := io.ReadAll(c) // until the host program's half-close
		if err != nil {
			guestDone <- err
			return
		}
		_, err = c.Write([]byte("guest got " + string(b)))
		c.(*hvsock.Conn).CloseWrite()
		guestDone <- err
	}()
	for _, form := range []string{"CONNECT 2764\n", "connect " + wire.ServiceID(2764).String() + "\n"} {
		uc, err := net.Dial("unix", base)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(uc, form)
		uc.SetReadDeadline(time.Now().Add(20 * time.Second))
		r := bufio.NewReader(uc)
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(form, "CONNECT 2764") {
			var port uint32
			if _, err := fmt.Sscanf(line, "OK %d\n", &port); err != nil {
				t.Fatalf("answer %q", line)
			}
			uc.Write([]byte("hello"))
			uc.(*net.UnixConn).CloseWrite()
			rest, _ := io.ReadAll(r)
			if string(rest) != "guest got hello" {
				t.Fatalf("read %q", rest)
			}
			if err := <-guestDone; err != nil {
				t.Fatal(err)
			}
		} else {
			// The GUID form answers with the endpoint GUID; no
			// guest is accepting any more, so just check the form.
			if _, err := vmbus.ParseGUID(strings.TrimPrefix(strings.TrimSpace(line), "OK ")); err != nil || !strings.HasPrefix(line, "OK ") {
				t.Fatalf("answer %q", line)
			}
		}
		uc.Close()
	}
}

func TestFrontEndRejectsBadRequests(t *testing.T) {
	_, _, base := frontEnv(t)
	for _, line := range []string{"HELLO 1\n", "CONNECT x\n", strings.Repeat("C", 100)} {
		uc, err := net.Dial("unix", base)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(uc, line)
		uc.SetReadDeadline(time.Now().Add(20 * time.Second))
		// Closed: an end of file, or a reset when the request was not
		// read to its end.
		if b, err := io.ReadAll(uc); len(b) != 0 || (err != nil && !errors.Is(err, syscall.ECONNRESET)) {
			t.Errorf("%q: answer %q, %v; want the socket closed", line, b, err)
		}
		uc.Close()
	}
}

// TestFrontEndRelaysGuestConnects: a program listening on B_<port> serves
// guest connects to that port; one on a socket nobody accepts on refuses
// the open.
func TestFrontEndRelaysGuestConnects(t *testing.T) {
	h, hv, base := frontEnv(t)
	ln, err := net.Listen("unix", base+"_2765")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		io.Copy(c, c) // echo until the guest's FIN
		c.(*net.UnixConn).CloseWrite()
		c.Close()
	}()
	cfg := &hvsock.Config{Transport: hvsock.TransportVMBus, Root: h.Root()}
	g, err := cfg.Dial(context.Background(), 2765)
	if err != nil {
		t.Fatal(err)
	}
	g.Write([]byte("echo me"))
	g.CloseWrite()
	b, err := io.ReadAll(g)
	if err != nil || string(b) != "echo me" {
		t.Fatalf("guest read %q, %v", b, err)
	}
	g.Close()

	// A socket file without a listener: the host cannot connect, so it
	// refuses the guest's open.
	dead, err := net.ListenUnix("unix", &net.UnixAddr{Name: base + "_2766", Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	dead.SetUnlinkOnClose(false)
	dead.Close()
	if _, err := cfg.Dial(context.Background(), 2766); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("Dial to a dead host socket = %v, want ECONNREFUSED", err)
	}
	waitFor(t, "the refused offer's rescind", func() bool { return hv.Stats().Rescinds >= 2 })
}

// advanceTimer waits until the host is parked on a one-shot wait of d,
// then lets that wait end.
func advanceTimer(t *testing.T, clk *clocktest.Fake, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := clk.WaitTimer(ctx, d); err != nil {
		t.Fatal(err)
	}
	clk.Advance(d)
}
