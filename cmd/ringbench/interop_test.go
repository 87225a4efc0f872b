package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The interop test runs real traffic between two processes through one ring
// file: ringbench (this package, on vmbusd's vmbus code) against ringpeer
// (tools/ringpeer, on DPDK 22.11's bus/vmbus ring code), both ways, and
// ringbench against itself. Set RINGPEER to the ringpeer binary
// (tools/ringpeer/build.sh OUTDIR builds it); without it the DPDK half is
// skipped, or fails when VMBUSD_REQUIRE_INTEROP=1.

const (
	testRing = 256 << 10 // bytes per direction
	minLaps  = 64        // each run wraps the ring at least this often
)

var testSizes = []int{8, 64, 1024, 4096, 16384, 65536}

// ringbenchBin is built once by TestMain.
var ringbenchBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ringbench-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ringbenchBin = filepath.Join(dir, "ringbench")
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// peer is one implementation: the binary to run.
type peer struct{ name, bin string }

func goPeer(t *testing.T) peer {
	t.Helper()
	if _, err := os.Stat(ringbenchBin); err != nil {
		gobin := "go"
		if p, err := exec.LookPath("go"); err == nil {
			gobin = p
		}
		out, err := exec.Command(gobin, "build", "-o", ringbenchBin, ".").CombinedOutput()
		if err != nil {
			t.Fatalf("go build ringbench: %v\n%s", err, out)
		}
	}
	return peer{"go", ringbenchBin}
}

func dpdkPeer(t *testing.T) peer {
	t.Helper()
	bin := os.Getenv("RINGPEER")
	if bin == "" {
		if os.Getenv("VMBUSD_REQUIRE_INTEROP") == "1" {
			t.Fatal("VMBUSD_REQUIRE_INTEROP=1 but RINGPEER is not set; build ringpeer with tools/ringpeer/build.sh OUTDIR and set RINGPEER=OUTDIR/ringpeer")
		}
		t.Skip("RINGPEER is not set: skipping the DPDK interop test (build tools/ringpeer with build.sh OUTDIR, then RINGPEER=OUTDIR/ringpeer)")
	}
	if st, err := os.Stat(bin); err != nil || st.Mode()&0o111 == 0 {
		t.Fatalf("RINGPEER=%s is not an executable: %v", bin, err)
	}
	return peer{"dpdk", bin}
}

// ringFile returns a path for a ring file, in /dev/shm when there is one.
func ringFile(t *testing.T) string {
	t.Helper()
	dir := "/dev/shm"
	f, err := os.CreateTemp(dir, "ringbench-test-*")
	if err != nil {
		dir = t.TempDir()
		f, err = os.CreateTemp(dir, "ring-*")
		if err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	t.Cleanup(func() { os.Remove(f.Name()) })
	return f.Name()
}

// laps returns a packet count that wraps a ring of ring bytes per direction
// at least minLaps times.
func laps(ring, size int) int {
	data := ring - headerPage
	pkt := 16 + size + 8
	return max(1000, (minLaps*data+pkt-1)/pkt)
}

// run is one transfer: sender and receiver processes on one ring file.
type run struct {
	send, recv peer
	size, n    int
	ring       int    // bytes per direction
	mode       string // "" or "-x"
	recvMode   string // the receiver's mode when it must differ (negative test)
	senderHost bool   // the sender takes role host (writes ring 2)
}

// outcome is what a process printed and how it exited.
type outcome struct {
	code   int
	result map[string]string
	stderr string
}

func (o outcome) num(t *testing.T, key string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(o.result[key], 10, 64)
	if err != nil {
		t.Fatalf("result field %s=%q: %v", key, o.result[key], err)
	}
	return v
}

func (r run) exec(t *testing.T) (snd, rcv outcome) {
	t.Helper()
	file := ringFile(t)
	init := exec.Command(r.send.bin, "init", file, strconv.Itoa(2*r.ring))
	if out, err := init.CombinedOutput(); err != nil {
		t.Fatalf("%s init: %v\n%s", r.send.name, err, out)
	}
	sendRole, recvRole := "guest", "host"
	if r.senderHost {
		sendRole, recvRole = "host", "guest"
	}
	recvMode := r.mode
	if r.recvMode != "" {
		recvMode = r.recvMode
	}
	// -w 1: two processes plus go test share 2 CPUs here, so sleep-poll.
	args := func(mode, role string, rest ...string) []string {
		a := []string{"-w", "1", "-t", "20", "-r", role}
		if mode == "-x" {
			a = append(a, "-x")
		}
		return append(a, rest...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rc := exec.CommandContext(ctx, r.recv.bin, args(recvMode, recvRole, "recv", file, strconv.Itoa(r.n))...)
	sc := exec.CommandContext(ctx, r.send.bin, args(r.mode, sendRole, "send", file, strconv.Itoa(r.n), strconv.Itoa(r.size))...)
	var rout, rerr, sout, serr bytes.Buffer
	rc.Stdout, rc.Stderr = &rout, &rerr
	sc.Stdout, sc.Stderr = &sout, &serr
	if err := rc.Start(); err != nil {
		t.Fatal(err)
	}
	if err := sc.Start(); err != nil {
		t.Fatal(err)
	}
	serrc := sc.Wait()
	rerrc := rc.Wait()
	return parseOutcome(t, "sender "+r.send.name, serrc, &sout, &serr),
		parseOutcome(t, "receiver "+r.recv.name, rerrc, &rout, &rerr)
}

func parseOutcome(t *testing.T, who string, err error, stdout, stderr *bytes.Buffer) outcome {
	t.Helper()
	o := outcome{result: map[string]string{}, stderr: stderr.String()}
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("%s: %v", who, err)
		}
		o.code = ee.ExitCode()
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "result ") {
		t.Fatalf("%s (exit %d): no result line; stdout %q, stderr %q", who, o.code, stdout, stderr)
	}
	for _, f := range strings.Fields(last)[1:] {
		k, v, _ := strings.Cut(f, "=")
		o.result[k] = v
	}
	return o
}

// check runs r and asserts a clean transfer of n packets. It returns the
// sender's waits and the receiver's signals.
func (r run) check(t *testing.T) (sendWaits, recvSignals uint64) {
	t.Helper()
	snd, rcv := r.exec(t)
	for _, x := range []struct {
		who string
		o   outcome
		op  string
	}{{"sender " + r.send.name, snd, "send"}, {"receiver " + r.recv.name, rcv, "recv"}} {
		if x.o.code != 0 {
			t.Errorf("%s exited %d; stderr:\n%s", x.who, x.o.code, x.o.stderr)
		}
		if x.o.result["op"] != x.op || x.o.num(t, "pkts") != uint64(r.n) || x.o.num(t, "errors") != 0 ||
			x.o.num(t, "payload_bytes") != uint64(r.n*r.size) {
			t.Errorf("%s: result %v, want op=%s pkts=%d payload_bytes=%d errors=0; stderr:\n%s",
				x.who, x.o.result, x.op, r.n, r.n*r.size, x.o.stderr)
		}
	}
	// A DPDK writer never sets pending_send, so a reader that follows the
	// pending_send_sz rule never has a reason to signal it.
	sendWaits, recvSignals = snd.num(t, "waits"), rcv.num(t, "signals")
	if r.send.name == "dpdk" && recvSignals != 0 {
		t.Errorf("receiver %s signalled %d times a writer that never set pending_send", r.recv.name, recvSignals)
	}
	// ringbench -w sets pending_send_sz for each packet that finds the ring
	// full and clears it before writing again, so the reader's rule allows
	// one signal per wait. (+1: a reader that loads pending_send just
	// before the writer clears it and the write index just after the
	// writer's next commit could, in theory, signal once more.)
	if r.send.name == "go" && recvSignals > sendWaits+1 {
		t.Errorf("receiver %s signalled %d times for %d sender waits", r.recv.name, recvSignals, sendWaits)
	}
	t.Logf("%s->%s %s size %d n %d: recv %s MB/s, signals send %s recv %s, waits send %s recv %s",
		r.send.name, r.recv.name, r.mode, r.size, r.n, rcv.result["MBps"],
		snd.result["signals"], rcv.result["signals"], snd.result["waits"], rcv.result["waits"])
	return sendWaits, recvSignals
}

// matrix runs every size in both modes from send to recv. The sender is the
// guest in default mode and the host with -x, so both implementations
// drive both rings of the file.
// A Go sender announces pending_send_sz when it waits; over the matrix the
// receiver must answer some of those waits with a signal.
func matrix(t *testing.T, send, recv peer) {
	var waits, signals uint64
	for _, mode := range []string{"", "-x"} {
		for _, size := range testSizes {
			name := fmt.Sprintf("%s-%s/%d%s", send.name, recv.name, size, mode)
			t.Run(name, func(t *testing.T) {
				w, s := run{send: send, recv: recv, size: size, n: laps(testRing, size), ring: testRing,
					mode: mode, senderHost: mode == "-x"}.check(t)
				waits += w
				signals += s
			})
		}
	}
	if send.name == "go" && waits >= 20 && signals == 0 {
		t.Errorf("the %s receiver never signalled the Go sender's %d pending_send waits", recv.name, waits)
	}
}

func TestGoToGo(t *testing.T) {
	g := goPeer(t)
	matrix(t, g, g)
}

func TestInteropGoToDPDK(t *testing.T) {
	d, g := dpdkPeer(t), goPeer(t)
	matrix(t, g, d)
}

func TestInteropDPDKToGo(t *testing.T) {
	d, g := dpdkPeer(t), goPeer(t)
	matrix(t, d, g)
}

// TestInteropLargest sends the largest payload, 524264 bytes (tlen =
// 0xffff), through a 1 MiB ring each way.
func TestInteropLargest(t *testing.T) {
	d, g := dpdkPeer(t), goPeer(t)
	const ring, size = 1 << 20, maxPayload
	for _, p := range [][2]peer{{g, d}, {d, g}, {g, g}} {
		t.Run(p[0].name+"-"+p[1].name, func(t *testing.T) {
			run{send: p[0], recv: p[1], size: size, n: 100, ring: ring}.check(t)
		})
	}
}

// TestInteropInit checks that ringbench init writes the same bytes as
// ringpeer init.
func TestInteropInit(t *testing.T) {
	d, g := dpdkPeer(t), goPeer(t)
	for _, size := range []string{"16K", "512K", "4M"} {
		a, b := ringFile(t), ringFile(t)
		for _, x := range []struct {
			p    peer
			file string
		}{{d, a}, {g, b}} {
			if out, err := exec.Command(x.p.bin, "init", x.file, size).CombinedOutput(); err != nil {
				t.Fatalf("%s init %s: %v\n%s", x.p.name, size, err, out)
			}
		}
		ba, err := os.ReadFile(a)
		if err != nil {
			t.Fatal(err)
		}
		bb, err := os.ReadFile(b)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(ba, bb) {
			t.Errorf("init %s: ringbench's file differs from ringpeer's", size)
		}
	}
}

// TestInteropDetectsMismatch makes sure each side's checker really checks
// the other's payload: a -x sender stamps only word 0, so a full-pattern
// receiver must report every packet but packet 0 and exit 1.
func TestInteropDetectsMismatch(t *testing.T) {
	d, g := dpdkPeer(t), goPeer(t)
	const n = 500
	for _, p := range [][2]peer{{g, d}, {d, g}} {
		t.Run(p[0].name+"-"+p[1].name, func(t *testing.T) {
			_, rcv := run{send: p[0], recv: p[1], size: 1024, n: n, ring: testRing,
				mode: "-x", recvMode: "full"}.exec(t)
			if rcv.code != 1 || rcv.num(t, "errors") != n-1 {
				t.Errorf("receiver %s: exit %d, errors=%s; want exit 1, errors=%d", p[1].name, rcv.code, rcv.result["errors"], n-1)
			}
			if !strings.Contains(rcv.stderr, "packet 1:") {
				t.Errorf("receiver %s: stderr does not name packet 1:\n%s", p[1].name, rcv.stderr)
			}
		})
	}
}
