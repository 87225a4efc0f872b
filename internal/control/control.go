package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vmbusd/vmbusd/internal/connlimit"
)

// Server serves the control API.
type Server struct {
	path string
	ln   net.Listener
	srv  *http.Server
	log  *slog.Logger
	// allowed reports whether a peer uid may use the socket.
	allowed  func(uid uint32) bool
	limited  *connlimit.Listener
	refusing chan struct{} // a token per connection being refused
	// forbidden counts connections from users who may not connect.
	forbidden atomic.Uint64
	// ino identifies the socket file Listen created.
	ino        uint64
	removeOnce sync.Once
}

// ErrRunning is returned when another live process owns the socket.
var ErrRunning = errors.New("control: another vmbusd is already running on this socket")

// Limits bound what clients of the control socket can hold.
type Limits struct {
	// MaxConnections open at once, and MaxPerUser of one peer uid
	// (SO_PEERCRED); more are closed as they are accepted.
	MaxConnections, MaxPerUser int
	// IdleTimeout closes a keep-alive connection with no request.
	IdleTimeout time.Duration
	// RequestTimeout bounds reading a request and writing its answer; a
	// streaming handler (capture) extends its write deadline per write.
	RequestTimeout time.Duration
}

// DefaultLimits are Listen's.
var DefaultLimits = Limits{MaxConnections: 32, MaxPerUser: 8, IdleTimeout: 30 * time.Second, RequestTimeout: 30 * time.Second}

// maxRefusing bounds the connections being refused (403) at once; beyond
// it a refused connection is closed without an answer.
const maxRefusing = 16

// Listen creates the socket at path (and its directory, 0755) and returns a
// server for handler with DefaultLimits. It refuses when a live daemon
// answers on path.
func Listen(path string, handler http.Handler, log *slog.Logger) (*Server, error) {
	return ListenLimited(path, handler, log, DefaultLimits)
}

// ListenLimited is Listen with limits.
func ListenLimited(path string, handler http.Handler, log *slog.Logger, lim Limits) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("control: %w", err)
	}
	ln, err := listenUnix(path)
	if err != nil {
		return nil, err
	}
	me := uint32(os.Getuid())
	s := &Server{path: path, log: log, allowed: func(uid uint32) bool { return uid == 0 || uid == me },
		refusing: make(chan struct{}, maxRefusing)}
	// Refused users first (answered 403, bounded), then the limits on
	// those allowed: a flood from a user who may not connect cannot take
	// the slots of one who may.
	s.limited = connlimit.New(&credListener{Listener: ln, s: s}, connlimit.Config{
		Max: lim.MaxConnections, PerClient: lim.MaxPerUser,
		Client: func(c net.Conn) string {
			uid, _, err := peerCred(c)
			if err != nil {
				return ""
			}
			return strconv.FormatUint(uint64(uid), 10)
		},
		OnRefuse: func(_ net.Conn, uid, reason string) {
			log.Warn("control connection refused: too many connections", "uid", uid, "limit", reason)
		},
	})
	s.ln = s.limited
	s.srv = &http.Server{Handler: handler, ReadHeaderTimeout: min(5*time.Second, lim.RequestTimeout),
		ReadTimeout: lim.RequestTimeout, WriteTimeout: lim.RequestTimeout, IdleTimeout: lim.IdleTimeout,
		MaxHeaderBytes: 16 << 10, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control: %s: %w", path, err)
	}
	s.ino = st.Ino
	return s, nil
}

// Stats returns the connection counters.
func (s *Server) Stats() connlimit.Stats { return s.limited.Stats() }

// Forbidden returns how many connections were refused because their user
// may not use the socket.
func (s *Server) Forbidden() uint64 { return s.forbidden.Load() }

// listenUnix binds path with mode 0600, replacing a stale socket.
func listenUnix(path string) (net.Listener, error) {
	old := unix.Umask(0o177)
	ln, err := net.Listen("unix", path)
	unix.Umask(old)
	if err == nil {
		ln.(*net.UnixListener).SetUnlinkOnClose(false)
		return ln, nil
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("control: listen %s: %w", path, err)
	}
	// Someone left a socket file. If it answers, a daemon is running.
	if _, err := RemoveStale(path); err != nil {
		return nil, err
	}
	old = unix.Umask(0o177)
	ln, err = net.Listen("unix", path)
	unix.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("control: listen %s: %w", path, err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	return ln, nil
}

// Serve answers requests until ctx ends, then shuts down (waiting up to 2 s
// for requests in progress) and removes the socket. It returns once the
// socket is gone, so that a process that exits right after leaves none.
func (s *Server) Serve(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(s.ln) }()
	var err error
	select {
	case err = <-errc:
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if s.srv.Shutdown(sctx) != nil {
			s.srv.Close()
		}
		cancel()
		<-errc
	}
	s.Close()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// Close stops the server at once and removes the socket (if it is still
// the one Listen created). It is safe to call more than once, and on every
// exit path.
func (s *Server) Close() error {
	err := s.srv.Close()
	s.ln.Close()
	s.removeOnce.Do(func() { removeIfSame(s.path, s.ino) })
	return err
}

// removeIfSame removes path if it is still the socket with inode ino (not
// one a later daemon created there).
func removeIfSame(path string, ino uint64) {
	var st unix.Stat_t
	if unix.Lstat(path, &st) == nil && st.Ino == ino && st.Mode&unix.S_IFMT == unix.S_IFSOCK {
		os.Remove(path)
	}
}

// RemoveStale removes the socket at path when nobody answers on it (its
// daemon died); it returns ErrRunning when one does. A missing path is
// not an error; a file that is not a socket is left alone.
func RemoveStale(path string) (removed bool, err error) {
	st, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("control: %w", err)
	}
	if st.Mode()&os.ModeSocket == 0 {
		return false, fmt.Errorf("control: %s exists and is not a socket; leaving it", path)
	}
	if c, derr := net.DialTimeout("unix", path, time.Second); derr == nil {
		c.Close()
		return false, fmt.Errorf("%w (%s)", ErrRunning, path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("control: remove stale socket %s: %w", path, err)
	}
	return true, nil
}

// Path returns the socket path.
func (s *Server) Path() string { return s.path }

// credListener refuses connections from users other than root and the
// daemon's own.
type credListener struct {
	net.Listener
	s *Server
}

func (l *credListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		uid, pid, err := peerCred(c)
		if err == nil && l.s.allowed(uid) {
			return c, nil
		}
		l.s.forbidden.Add(1)
		l.s.log.Warn("control connection refused: user not allowed", "uid", uid, "pid", pid, "err", err)
		select {
		case l.s.refusing <- struct{}{}:
			go func() {
				refuse(c)
				<-l.s.refusing
			}()
		default:
			c.Close() // too many being refused: no answer
		}
	}
}

// refuse answers 403 and closes. It reads what the client sent first, so
// closing does not reset the connection before the client has read the
// answer.
func refuse(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	var buf [4096]byte
	c.Read(buf[:])
	io.WriteString(c, "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
	if uc, ok := c.(*net.UnixConn); ok {
		uc.CloseWrite()
	}
	for {
		if _, err := c.Read(buf[:]); err != nil {
			return
		}
	}
}

func peerCred(c net.Conn) (uid uint32, pid int32, err error) {
	if w, ok := c.(interface{ NetConn() net.Conn }); ok {
		c = w.NetConn()
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0, 0, errors.New("not a unix connection")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, 0, err
	}
	var cred *unix.Ucred
	var cerr error
	err = raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if err == nil {
		err = cerr
	}
	if err != nil {
		return 0, 0, err
	}
	return cred.Uid, cred.Pid, nil
}

// Client talks to a daemon's control socket.
type Client struct {
	path string
	http *http.Client
}

// NewClient returns a client for the socket at path.
func NewClient(path string) *Client {
	// No keep-alive: a client makes a request or two, and an idle
	// connection would hold one of the user's few slots on the socket.
	tr := &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}
	return &Client{path: path, http: &http.Client{Transport: tr}}
}

// Get performs GET path (e.g. "/v1/stats?json=1") and returns the response
// body for the caller to read and close. A daemon that is not running gives
// a clear error naming the socket.
func (c *Client) Get(ctx context.Context, path string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://vmbusd"+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("no vmbusd running on %s (start it with `vmbusd run`, or pass --control)", c.path)
		}
		if errors.Is(err, os.ErrPermission) {
			return nil, fmt.Errorf("permission denied on %s: run as root or as the daemon's user", c.path)
		}
		return nil, fmt.Errorf("control %s: %w", c.path, err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		if resp.StatusCode == http.StatusForbidden {
			return nil, fmt.Errorf("vmbusd refused the request: only root or the daemon's user may use %s", c.path)
		}
		// The daemon answers errors with {"error": "...", ...}
		// (docs/control-api.md); anything else is shown as it came.
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return nil, fmt.Errorf("vmbusd: %s", e.Error)
		}
		return nil, fmt.Errorf("vmbusd: %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	return resp.Body, nil
}
