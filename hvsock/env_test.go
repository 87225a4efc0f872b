package hvsock_test

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/hvsock"
	"github.com/vmbusd/vmbusd/sim"
)

// testEnv is a simulated host with its hv_sock side under a fresh root on
// tmpfs, and a Config pointing the guest at it.
type testEnv struct {
	t    *testing.T
	root string
	host *sim.Host
	hv   *sim.HvSock
	cfg  hvsock.Config
}

// shmDir returns a fresh directory on tmpfs (docs/uio-contract.md §1.1: R on tmpfs),
// removed at the end of the test.
func shmDir(t testing.TB) string {
	t.Helper()
	base := "/dev/shm"
	if st, err := os.Stat(base); err != nil || !st.IsDir() {
		return t.TempDir()
	}
	dir, err := os.MkdirTemp(base, "hvsock-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func newTestEnv(t testing.TB, hcfg sim.HvSockConfig) *testEnv {
	t.Helper()
	root := shmDir(t)
	var log *slog.Logger
	if os.Getenv("HVSOCK_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	h, err := sim.New(sim.Config{Root: root, Profile: sim.DefaultProfile, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	hv, err := h.StartHvSock(hcfg)
	if err != nil {
		h.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		hv.Close()
		h.Close()
		if v := h.Violations(); len(v) > 0 {
			t.Logf("guest violations: %v", v)
		}
	})
	tt, _ := t.(*testing.T)
	return &testEnv{t: tt, root: root, host: h, hv: hv,
		cfg: hvsock.Config{Transport: hvsock.TransportVMBus, Root: root, Logger: log}}
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// pair connects the guest to a host listener on port and returns both ends
// (guest-initiated).
func (e *testEnv) pair(t testing.TB, cfg hvsock.Config, port uint32) (*hvsock.Conn, *sim.HvSockConn) {
	t.Helper()
	l, err := e.hv.Listen(port)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	type res struct {
		c   *sim.HvSockConn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := l.AcceptHvSock()
		ch <- res{c, err}
	}()
	g, err := cfg.Dial(testCtx(t), port)
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		g.Close()
		t.Fatal(r.err)
	}
	return g, r.c
}

// acceptPair has the host connect to a guest listener (host-initiated).
func (e *testEnv) acceptPair(t testing.TB, l *hvsock.Listener, port uint32) (*hvsock.Conn, *sim.HvSockConn) {
	t.Helper()
	type res struct {
		c   *hvsock.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := l.AcceptHvsock()
		ch <- res{c, err}
	}()
	h, err := e.hv.Connect(testCtx(t), port)
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		h.Close()
		t.Fatal(r.err)
	}
	return r.c, h
}

type simHvSockConfig = sim.HvSockConfig

func newFile(fd int) *os.File { return os.NewFile(uintptr(fd), "socketpair") }
