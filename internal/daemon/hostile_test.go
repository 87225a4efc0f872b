package daemon_test

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Hostile local clients of the metrics endpoint and the control socket:
// slow, huge, garbage, many at once, and thousands of idle connections from
// an unprivileged user. The daemon must keep its data path flowing, answer
// a well-behaved client, and hold a bounded number of file descriptors and
// a bounded amount of memory.

func countFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// hostileChild is this test binary run as another user, holding idle
// connections to the daemon until its stdin closes.
type hostileChild struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	held  string // what it reported
}

// startHostileChild runs the helper as uid/gid 65534 (nobody), opening n
// TCP connections to tcpAddr and m Unix connections to sock.
func startHostileChild(t *testing.T, tcpAddr, sock string, n, m int) *hostileChild {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a client as another user")
	}
	// The test binary, where the other user may run it.
	dir, err := os.MkdirTemp("", "vmbusd-hostile-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "daemon.test")
	src, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, src, 0o755); err != nil {
		t.Fatal(err)
	}
	c := &hostileChild{cmd: exec.Command(bin, "-test.run=^TestHelperHostileClient$")}
	c.cmd.Env = []string{"HOSTILE_TCP=" + tcpAddr, "HOSTILE_UNIX=" + sock, "HOSTILE_N=" + strconv.Itoa(n), "HOSTILE_M=" + strconv.Itoa(m)}
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	c.cmd.Stderr = os.Stderr
	out, _ := c.cmd.StdoutPipe()
	c.stdin, _ = c.cmd.StdinPipe()
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.stop() })
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if l := sc.Text(); strings.HasPrefix(l, "held ") {
			c.held = l
			break
		}
	}
	if c.held == "" {
		t.Fatal("the hostile client did not start")
	}
	go io.Copy(io.Discard, out)
	return c
}

func (c *hostileChild) stop() {
	c.stdin.Close()
	c.cmd.Wait()
}

// TestHelperHostileClient is the unprivileged client: it opens its
// connections, sends nothing, and holds them until stdin closes.
func TestHelperHostileClient(t *testing.T) {
	addr := os.Getenv("HOSTILE_TCP")
	if addr == "" {
		t.Skip("helper of TestHostileClients")
	}
	n, _ := strconv.Atoi(os.Getenv("HOSTILE_N"))
	m, _ := strconv.Atoi(os.Getenv("HOSTILE_M"))
	var conns []net.Conn
	tcp, unix := 0, 0
	for range n {
		if c, err := net.Dial("tcp", addr); err == nil {
			conns = append(conns, c)
			tcp++
		}
	}
	for range m {
		if c, err := net.Dial("unix", os.Getenv("HOSTILE_UNIX")); err == nil {
			c.Write([]byte("GET /v1/status HTTP/1.1\r\nHost: x\r\n\r\n"))
			conns = append(conns, c)
			unix++
		}
	}
	fmt.Printf("held %d tcp %d unix as uid %d\n", tcp, unix, os.Getuid())
	io.Copy(io.Discard, os.Stdin)
	for _, c := range conns {
		c.Close()
	}
}

// TestHostileClients attacks both servers at once while the NICs forward.
func TestHostileClients(t *testing.T) {
	r := newRig(t)
	os.Chmod(r.root, 0o755)
	cfg := r.config()
	cfg.Metrics.MaxConnections = 16
	cfg.Metrics.RequestTimeout, cfg.Metrics.IdleTimeout = 2*time.Second, 2*time.Second
	cfg.Control.MaxConnections, cfg.Control.MaxConnectionsPerUser = 8, 4
	cfg.Control.RequestTimeout, cfg.Control.IdleTimeout = 2*time.Second, 2*time.Second
	r.startWith(t, cfg)
	waitFor(t, "traffic", func() bool { return forwarded(r) > 500 })
	addr, sock := r.d.MetricsAddr(), cfg.Control.Socket
	// Open the socket to everyone, as a careless operator might: the
	// daemon's own checks must hold.
	os.Chmod(sock, 0o666)
	fds, heap, goroutines := countFDs(t), heapInUse(), runtime.NumGoroutine()

	child := startHostileChild(t, addr, sock, 3000, 500)
	t.Log(child.held)
	var wg sync.WaitGroup
	attack := func(network, addr string, payload func(c net.Conn)) {
		wg.Go(func() {
			c, err := net.Dial(network, addr)
			if err != nil {
				return
			}
			defer c.Close()
			payload(c)
			c.SetReadDeadline(time.Now().Add(60 * time.Second))
			io.Copy(io.Discard, c) // until the server closes it
		})
	}
	for _, target := range []struct{ network, addr string }{{"tcp", addr}, {"unix", sock}} {
		for range 10 { // slow: half a request line, then nothing
			attack(target.network, target.addr, func(c net.Conn) { c.Write([]byte("GET /metr")) })
		}
		for range 5 { // huge: a megabyte of header
			attack(target.network, target.addr, func(c net.Conn) {
				c.Write([]byte("GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: "))
				c.Write(bytes.Repeat([]byte("a"), 1<<20))
			})
		}
		for range 5 { // garbage
			attack(target.network, target.addr, func(c net.Conn) {
				b := make([]byte, 64<<10)
				rand.Read(b)
				c.Write(b)
			})
		}
		for range 100 { // many at once, well-formed
			attack(target.network, target.addr, func(c net.Conn) {
				c.Write([]byte("GET /metrics HTTP/1.0\r\n\r\n"))
			})
		}
	}
	// Meanwhile: the data path flows, a well-behaved client is answered,
	// and the daemon's file descriptors and memory stay bounded.
	before := forwarded(r)
	waitFor(t, "traffic under attack", func() bool { return forwarded(r) > before+1000 })
	waitFor(t, "/healthz answered under attack", func() bool {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return false
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Write([]byte("GET /healthz HTTP/1.0\r\n\r\n"))
		b, _ := io.ReadAll(c)
		return bytes.HasPrefix(b, []byte("HTTP/1.0 200"))
	})
	waitFor(t, "the control socket answering root under attack", func() bool {
		return statusOK(sock)
	})
	// The daemon holds at most its limits (16 + 8), plus a few being
	// refused, whatever the attackers hold.
	if got := countFDs(t); got > fds+16+8+16+64 {
		t.Fatalf("%d file descriptors under attack, %d before", got, fds)
	}
	if got := heapInUse(); got > heap+64<<20 {
		t.Fatalf("heap %d MiB under attack, %d MiB before", got>>20, heap>>20)
	}
	_, body := get(t, addr, "/metrics")
	for _, want := range []string{`vmbusd_daemon_connections_refused_total{reason="total",server="metrics"}`,
		`vmbusd_daemon_connections_refused_total{reason="forbidden",server="control"}`} {
		if !strings.Contains(body, want) || strings.Contains(body, want+" 0\n") {
			t.Fatalf("no refusals counted as %s:\n%s", want, grepLines(body, "connections_refused"))
		}
	}
	wg.Wait()
	child.stop()
	// Once the attackers are gone, what they cost is given back.
	waitFor(t, "goroutines back to normal", func() bool { return runtime.NumGoroutine() <= goroutines+20 })
	waitFor(t, "file descriptors back to normal", func() bool { return countFDs(t) <= fds+8 })
	if v := r.h.Violations(); len(v) != 0 {
		t.Fatalf("the host counted violations: %v", v)
	}
}

func statusOK(sock string) bool {
	c, err := net.DialTimeout("unix", sock, 5*time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	c.Write([]byte("GET /v1/status HTTP/1.0\r\n\r\n"))
	b, _ := io.ReadAll(c)
	return bytes.HasPrefix(b, []byte("HTTP/1.0 200"))
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
