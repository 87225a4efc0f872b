package vswitch

import (
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// blockingUplink records the frames delivered; while hold is set, each
// Deliver first reports on entered and waits for release.
type blockingUplink struct {
	got     chan string
	hold    atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (u *blockingUplink) Deliver(frames [][]byte) int {
	if u.hold.Load() {
		u.entered <- struct{}{}
		<-u.release
	}
	for _, f := range frames {
		select {
		case u.got <- string(f[EthHeaderLen:]):
		default: // the test stopped counting
		}
	}
	return len(frames)
}
func (u *blockingUplink) MAC() net.HardwareAddr { return net.HardwareAddr{2, 0, 0, 0, 0, 1} }
func (u *blockingUplink) MTU() int              { return 1500 }

// newSocketPort is a TAP port over a datagram socket pair standing in for
// the kernel side (kernel is its end, closed when the test ends), with an
// uplink that records what the port delivers; expect fails the test
// unless the next frame delivered carries want, waiting at most a minute
// (a bound for a hang, not a threshold).
func newSocketPort(t *testing.T) (tp *TAP, kernel int, u *blockingUplink, expect func(want string)) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	kernel = fds[1]
	t.Cleanup(func() { unix.Close(kernel) })
	tp = &TAP{f: os.NewFile(uintptr(fds[0]), "port")}
	if err := tp.initIO(); err != nil {
		t.Fatal(err)
	}
	u = &blockingUplink{got: make(chan string, 64), entered: make(chan struct{}), release: make(chan struct{})}
	tp.up = u
	deadline := time.After(time.Minute)
	expect = func(want string) {
		t.Helper()
		select {
		case got := <-u.got:
			if got != want {
				t.Fatalf("delivered %q, want %q", got, want)
			}
		case <-deadline:
			t.Fatalf("%q never delivered", want)
		}
	}
	return tp, kernel, u, expect
}

// TestTAPPortReadLoop drives the port's read loop over a datagram socket
// standing in for the kernel side: a frame that arrives while the vSwitch
// takes the previous batch is delivered (the loop waits for the poller
// only after a read found nothing, and keeps no stale readiness), and
// Close returns while the kernel keeps sending.
func TestTAPPortReadLoop(t *testing.T) {
	tp, kernel, u, expect := newSocketPort(t)
	tp.wg.Add(1)
	go tp.runRead()
	send := func(payload string) {
		f := append(make([]byte, EthHeaderLen), payload...)
		if err := unix.Send(kernel, f, 0); err != nil && err != unix.EAGAIN {
			t.Fatal(err)
		}
	}

	u.hold.Store(true)
	send("first")
	<-u.entered // the loop is in Deliver, past the read that emptied the socket
	u.hold.Store(false)
	send("second")
	u.release <- struct{}{}
	expect("first")
	expect("second")
	send("third")
	expect("third")

	stop := make(chan struct{})
	sent := make(chan struct{})
	go func() { // the kernel keeps sending
		defer close(sent)
		for {
			select {
			case <-stop:
				return
			default:
				unix.Send(kernel, make([]byte, EthHeaderLen+4), 0) // fails once the port is closed
			}
		}
	}()
	closed := make(chan error)
	go func() { closed <- tp.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(time.Minute): // a bound for a hang, not a threshold
		t.Fatal("Close did not return while frames kept coming")
	}
	close(stop)
	<-sent
}

// TestTAPPortTransmitTakesAnswers: what the kernel queued for the guest
// by the time a Transmit's writes are done is delivered by that Transmit
// (pollAfterWrite), in order with what the read loop delivers, and a
// frame the read loop is woken for while a Transmit reads is not left
// behind.
func TestTAPPortTransmitTakesAnswers(t *testing.T) {
	tp, kernel, u, expect := newSocketPort(t)
	deadline := time.After(time.Minute) // a bound for a hang, not a threshold
	send := func(payload string) {
		t.Helper()
		if err := unix.Send(kernel, append(make([]byte, EthHeaderLen), payload...), 0); err != nil {
			t.Fatal(err)
		}
	}
	frame := append(make([]byte, EthHeaderLen), "request"...)
	written := func() {
		t.Helper()
		b := make([]byte, 256)
		n, err := unix.Read(kernel, b)
		if err != nil || string(b[EthHeaderLen:n]) != "request" {
			t.Fatalf("the kernel read %q, %v; want the request", b[:max(n, 0)], err)
		}
	}

	// No read loop yet: only the Transmit can deliver the answers.
	send("answer 1")
	send("answer 2")
	tp.Transmit([][]byte{frame})
	written()
	for _, want := range []string{"answer 1", "answer 2"} {
		select {
		case got := <-u.got:
			if got != want {
				t.Fatalf("delivered %q, want %q", got, want)
			}
		default:
			t.Fatalf("%q not delivered when Transmit returned", want)
		}
	}

	// A frame the read loop wakes for while a Transmit holds the reader
	// is delivered after the Transmit's, by one of them.
	tp.wg.Add(1)
	go tp.runRead()
	defer tp.Close()
	u.hold.Store(true)
	send("answer 3")
	done := make(chan struct{})
	go func() {
		defer close(done)
		tp.TransmitOffload([][]byte{frame}, nil)
	}()
	<-u.entered // whoever reads is in Deliver with the reader held
	u.hold.Store(false)
	send("answer 4")
	u.release <- struct{}{}
	expect("answer 3")
	expect("answer 4")
	select {
	case <-done:
	case <-deadline:
		t.Fatal("Transmit did not return")
	}
	written()

	// A Transmit while the read loop is in Deliver neither waits for it
	// nor delivers out of order.
	u.hold.Store(true)
	send("answer 5")
	<-u.entered
	u.hold.Store(false)
	send("answer 6")
	tp.Transmit([][]byte{frame}) // returns: the reader is busy
	written()
	u.release <- struct{}{}
	expect("answer 5")
	expect("answer 6")
}
