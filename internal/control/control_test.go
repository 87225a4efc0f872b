package control

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/internal/testutil"
)

func TestServeAndClient(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "control.sock")
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/ping", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "pong") })
	s, err := Listen(path, mux, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 || st.Mode()&os.ModeSocket == 0 {
		t.Fatalf("socket mode %v, err %v; want 0600 socket", st.Mode(), err)
	}
	body, err := NewClient(path).Get(context.Background(), "/v1/ping")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(body)
	body.Close()
	if string(b) != "pong" {
		t.Fatalf("got %q", b)
	}
	// A second daemon on the same socket is refused.
	if _, err := Listen(path, mux, nil); !errors.Is(err, ErrRunning) {
		t.Fatalf("second Listen: %v, want ErrRunning", err)
	}
	cancel()
	<-done
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left after shutdown: %v", err)
	}
}

func TestStaleSocketIsReplaced(t *testing.T) {
	path := filepath.Join(t.TempDir(), "control.sock")
	// A socket file nobody listens on, as a crashed daemon leaves.
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	s, err := Listen(path, http.NewServeMux(), nil)
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	s.Close()
}

func TestRefusesToReplaceARegularFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "control.sock")
	os.WriteFile(path, []byte("precious"), 0o644)
	if _, err := Listen(path, http.NewServeMux(), nil); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("Listen over a regular file: %v", err)
	}
}

func TestPeerCredentialsChecked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "control.sock")
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/ping", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "pong") })
	s, err := Listen(path, mux, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.allowed = func(uid uint32) bool { return false } // as if we were another user
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Serve(ctx)
	_, err = NewClient(path).Get(context.Background(), "/v1/ping")
	if err == nil || !strings.Contains(err.Error(), "only root or the daemon's user") {
		t.Fatalf("Get as a refused user: %v", err)
	}
}

func TestClientWithoutDaemon(t *testing.T) {
	_, err := NewClient(filepath.Join(t.TempDir(), "none.sock")).Get(context.Background(), "/v1/stats")
	if err == nil || !strings.Contains(err.Error(), "no vmbusd running") {
		t.Fatalf("error %v", err)
	}
}

// TestSocketGoneWhenServeReturns: a daemon that exits right after Serve
// returns leaves no socket, even when it is stopped before it served
// anything.
func TestSocketGoneWhenServeReturns(t *testing.T) {
	for i := range 20 {
		path := filepath.Join(t.TempDir(), "control.sock")
		s, err := Listen(path, http.NewServeMux(), nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := s.Serve(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("run %d: socket left after Serve returned: %v", i, err)
		}
	}
}

func TestCloseLeavesASocketSomeoneElseCreated(t *testing.T) {
	path := filepath.Join(t.TempDir(), "control.sock")
	s, err := Listen(path, http.NewServeMux(), nil)
	if err != nil {
		t.Fatal(err)
	}
	// Another daemon replaced the file (after deciding ours was stale).
	os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s.Close()
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("Close removed a socket it did not create: %v", err)
	}
}

func TestRemoveStale(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, "stale.sock")
	ln, _ := net.Listen("unix", stale)
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	if removed, err := RemoveStale(stale); !removed || err != nil {
		t.Fatalf("stale socket: removed %v, %v", removed, err)
	}
	live := filepath.Join(dir, "live.sock")
	ln, _ = net.Listen("unix", live)
	defer ln.Close()
	if _, err := RemoveStale(live); !errors.Is(err, ErrRunning) {
		t.Fatalf("live socket: %v, want ErrRunning", err)
	}
	if removed, err := RemoveStale(filepath.Join(dir, "none")); removed || err != nil {
		t.Fatalf("missing: %v %v", removed, err)
	}
}

// TestPerUserLimit: one user's idle connections beyond MaxPerUser are
// closed as they arrive; a request within the limit is served.
func TestPerUserLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "control.sock")
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/ping", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "pong") })
	s, err := ListenLimited(path, mux, nil, Limits{MaxConnections: 10, MaxPerUser: 2, IdleTimeout: time.Minute, RequestTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Serve(ctx)
	var idle []net.Conn
	for range 2 {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		idle = append(idle, c)
	}
	testutil.WaitFor(t, 0, func() bool { return s.Stats().Active == 2 }, "both idle connections to be accepted")
	if _, err := NewClient(path).Get(context.Background(), "/v1/ping"); err == nil {
		t.Fatal("a third connection of the same user was served")
	}
	if st := s.Stats(); st.RefusedPerClient == 0 {
		t.Fatalf("stats %+v", st)
	}
	idle[0].Close()
	// The server notices the close when its read of that connection ends;
	// until then a request is refused, so try until one is served.
	var lastErr error
	defer func() {
		if t.Failed() {
			t.Logf("last refusal: %v", lastErr)
		}
	}()
	testutil.WaitFor(t, 0, func() bool {
		body, err := NewClient(path).Get(context.Background(), "/v1/ping")
		if err != nil {
			lastErr = err
			return false
		}
		body.Close()
		return true
	}, "a request to be served after an idle connection closed")
}
