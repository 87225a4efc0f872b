package config

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"golang.org/x/sys/unix"

	"github.com/vmbusd/vmbusd/afxdp"
	"github.com/vmbusd/vmbusd/netvsc"
	"github.com/vmbusd/vmbusd/netvsc/nvsp"
	"github.com/vmbusd/vmbusd/vmbus"
)

// Config is the whole file. The zero value is not valid; use Parse, Load
// or Default.
type Config struct {
	// Root is the directory standing for "/" (a simulated host's tree).
	Root string `toml:"root"`
	// StateDir holds the records of devices vmbusd bound, so that a later
	// start or `vmbusd restore` can give them back after a crash, and the
	// lock that makes one daemon the owner of them. "" means
	// ROOT/run/vmbusd (see State).
	StateDir string `toml:"state_dir"`
	// Ready is when the daemon tells systemd it is ready.
	Ready   ReadyPolicy `toml:"ready"`
	Log     Log         `toml:"log"`
	Metrics Metrics     `toml:"metrics"`
	Control Control     `toml:"control"`
	GPA     GPA         `toml:"gpa"`
	NICs    []NIC       `toml:"nic"`
	HvSock  []HvSock    `toml:"hvsock"`
}

// Log configures log/slog.
type Log struct {
	Level  LogLevel  `toml:"level"`
	Format LogFormat `toml:"format"`
	// RateLimit is how many lines with the same message (and the same
	// device) are logged per RateInterval; the rest are counted and
	// summarised in one "suppressed" line. It bounds what a misbehaving
	// host or client can write into the log.
	RateLimit    int           `toml:"rate_limit"`
	RateInterval time.Duration `toml:"rate_interval"`
}

// Metrics configures the HTTP endpoint with /metrics, /healthz, /readyz.
type Metrics struct {
	// Listen is host:port; "" disables the endpoint. Localhost by default:
	// the metrics name devices and addresses.
	Listen string `toml:"listen"`
	// MaxConnections bounds the connections served at once; more are
	// closed as they arrive.
	MaxConnections int `toml:"max_connections"`
	// IdleTimeout closes a keep-alive connection with no request.
	IdleTimeout time.Duration `toml:"idle_timeout"`
	// RequestTimeout bounds reading a request and writing its answer.
	RequestTimeout time.Duration `toml:"request_timeout"`
}

// Control configures the control socket used by vmbusd stats, status and
// capture.
type Control struct {
	Socket string `toml:"socket"`
	// MaxConnections bounds the connections served at once, and
	// MaxConnectionsPerUser those of one user (SO_PEERCRED).
	MaxConnections        int `toml:"max_connections"`
	MaxConnectionsPerUser int `toml:"max_connections_per_user"`
	// IdleTimeout closes a keep-alive connection with no request.
	IdleTimeout time.Duration `toml:"idle_timeout"`
	// RequestTimeout bounds reading a request and writing its answer; a
	// capture is bounded per write instead (a client that stops reading
	// for this long ends it).
	RequestTimeout time.Duration `toml:"request_timeout"`
	// MaxCaptures bounds the captures running at once.
	MaxCaptures int `toml:"max_captures"`
}

// GPA configures the pinned pool NICs send large frames from (GPA-direct).
type GPA struct {
	Pool GPAPool `toml:"pool"`
}

// NIC is one synthetic NIC driven by vmbusd.
type NIC struct {
	// Device names the NIC by instance GUID (kept in canonical form) or by
	// its kernel interface name (before vmbusd binds it).
	Device string `toml:"device"`
	// Queues wanted (one per channel); the host may grant fewer. 0 means 1.
	Queues int `toml:"queues"`
	// MTU of the synthetic NIC; 0 keeps the driver's default (1500).
	MTU  int  `toml:"mtu"`
	Mode Mode `toml:"mode"`
	// BusyPoll is the NIC's latency setting for request/response traffic
	// (netvsc.Config.BusyPoll): a queue spins this long on its ring before
	// it sleeps, and a transmit wakes it to spin for the answer. 0: off.
	BusyPoll time.Duration `toml:"busy_poll"`
	// Attach: a kernel TAP interface, or forwarding to the NIC named by
	// Peer.
	Attach Attach `toml:"attach"`
	// TAP interface name (attach = "tap"); default vmbus<N>.
	TAP string `toml:"tap"`
	// NetNS moves the TAP into a named network namespace.
	NetNS string `toml:"netns"`
	// Address, when valid, is assigned to the TAP.
	Address netip.Prefix `toml:"address"`
	// GSO is accepted for configurations written before TAP offloads
	// became the default and changes nothing: the TAP always takes 64 KiB
	// TCP super-frames from the kernel, which the host segments (LSO) or
	// the NIC does.
	GSO bool `toml:"gso"`
	// Peer is the other NIC's device (attach = "forward").
	Peer string `toml:"peer"`
	// Bind: claim the device from its kernel driver at start
	// (driver_override flow) and give it back at stop. Default true.
	Bind *bool `toml:"bind"`
	// Force binding the interface that carries the default route or the
	// current SSH session.
	Force bool `toml:"force"`

	// VF: the accelerated-networking VF the host pairs with the NIC
	// (docs/accelerated-networking.md): auto (the default), off or
	// required.
	VF VFMode `toml:"vf"`
	// VFTimeout bounds bring-up's wait for a required VF (0: the driver's
	// 30 s); a MANA VF's probe can take minutes.
	VFTimeout time.Duration `toml:"vf_timeout"`
	// The VF's AF_XDP data path; the zero values suit mlx5 and MANA.
	// VFQueues lists the VF's RX queue ids to open a socket on (empty:
	// every one it has; older kernels number mlx5's zero-copy queues
	// from the channel count up). VFAttach and VFBind force the XDP hook
	// and the sockets' copy mode; VFBusyPoll (SO_BUSY_POLL) and
	// VFBusyPollBudget make the sockets' own system calls run the
	// driver's poll.
	VFQueues         []int         `toml:"vf_queues"`
	VFAttach         XDPAttach     `toml:"vf_attach"`
	VFBind           XDPBind       `toml:"vf_bind"`
	VFBusyPoll       time.Duration `toml:"vf_busy_poll"`
	VFBusyPollBudget int           `toml:"vf_busy_poll_budget"`
}

// Binds reports whether vmbusd binds the NIC itself (the default).
func (n NIC) Binds() bool { return n.Bind == nil || *n.Bind }

// Equal reports whether two NIC entries configure the same thing (a reload
// leaves a NIC whose entry is Equal alone).
func (n NIC) Equal(o NIC) bool {
	a, b := n, o
	a.Bind, b.Bind = nil, nil
	if len(a.VFQueues) == 0 {
		a.VFQueues = nil
	}
	if len(b.VFQueues) == 0 {
		b.VFQueues = nil
	}
	return reflect.DeepEqual(a, b) && n.Binds() == o.Binds()
}

// Netvsc returns the driver configuration of the NIC (without a pool or a
// logger).
func (n NIC) Netvsc() netvsc.Config {
	return netvsc.Config{Queues: n.Queues, MTU: n.MTU, Mode: netvsc.Mode(n.Mode), BusyPoll: n.BusyPoll,
		VF: n.VF.Netvsc(), VFTimeout: n.VFTimeout,
		VFXDP: afxdp.Config{Queues: slices.Clone(n.VFQueues), Attach: afxdp.AttachMode(n.VFAttach),
			Bind: afxdp.BindMode(n.VFBind), BusyPoll: afxdp.BusyPoll{Timeout: n.VFBusyPoll, Budget: n.VFBusyPollBudget}}}
}

// HvSock is one hv_sock forward. Either Port and To (a guest service: hv_sock
// connections to Port are forwarded to the local address To), or Listen and
// ToPort (a local listener forwarded to the host's hv_sock service ToPort).
type HvSock struct {
	Port   uint32 `toml:"port"`
	To     Addr   `toml:"to"`
	Listen Addr   `toml:"listen"`
	ToPort uint32 `toml:"to_port"`
	// MaxConnections bounds the connections forwarded at once (0:
	// DefaultForwardConns); more are closed as they are accepted.
	MaxConnections int `toml:"max_connections"`
}

// Name is how logs, status and metrics call the forward.
func (h HvSock) Name() string {
	if h.Port != 0 {
		return fmt.Sprintf("hvsock:%d->%s", h.Port, h.To)
	}
	return fmt.Sprintf("%s->hvsock:%d", h.Listen, h.ToPort)
}

// Defaults.
const (
	DefaultMetricsListen  = "127.0.0.1:9464"
	DefaultControlSocket  = "/run/vmbusd/control.sock"
	DefaultMaxConnections = 64
	DefaultIdleTimeout    = 30 * time.Second
	DefaultRequestTimeout = 30 * time.Second
	DefaultControlConns   = 32
	DefaultConnsPerUser   = 8
	DefaultMaxCaptures    = 4
	DefaultForwardConns   = 256
	DefaultRateLimit      = 10
	DefaultRateInterval   = time.Minute
	// MaxFileSize bounds the configuration file; a real one is a few KiB.
	MaxFileSize = 1 << 20
	// minDuration catches a bare number, which TOML would read as
	// nanoseconds.
	minDuration = time.Millisecond
	// maxSocketPath is sun_path's 108 bytes less the terminating NUL.
	maxSocketPath = 107
)

// Default returns the configuration used without a file.
func Default() Config {
	return Config{
		Root: "/",
		Log:  Log{Level: LogLevel(slog.LevelInfo), Format: FormatText, RateLimit: DefaultRateLimit, RateInterval: DefaultRateInterval},
		Metrics: Metrics{Listen: DefaultMetricsListen, MaxConnections: DefaultMaxConnections,
			IdleTimeout: DefaultIdleTimeout, RequestTimeout: DefaultRequestTimeout},
		Control: Control{Socket: DefaultControlSocket, MaxConnections: DefaultControlConns,
			MaxConnectionsPerUser: DefaultConnsPerUser, IdleTimeout: DefaultIdleTimeout,
			RequestTimeout: DefaultRequestTimeout, MaxCaptures: DefaultMaxCaptures},
	}
}

// State returns the state directory: StateDir, or ROOT/run/vmbusd.
func (c Config) State() string {
	if c.StateDir != "" {
		return c.StateDir
	}
	root := c.Root
	if root == "" {
		root = "/"
	}
	return filepath.Join(root, "run/vmbusd")
}

// Error is a configuration error with the line and key it was found on
// (Line 0 when it concerns the file as a whole). Msg starts with the key.
type Error struct {
	File string
	Line int
	Key  string // e.g. "nic[1].mtu"; "" for the file as a whole
	Msg  string
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Msg)
}

// Load reads and validates a file. It opens the file without blocking and
// refuses anything but a regular file (a FIFO, /dev/zero) and files larger
// than MaxFileSize.
func Load(path string) (Config, error) {
	b, err := readFile(path)
	if err != nil {
		return Config{}, err
	}
	return Parse(path, string(b))
}

func readFile(path string) ([]byte, error) {
	if strings.IndexByte(path, 0) >= 0 {
		return nil, &Error{File: strconv.Quote(path), Msg: "the path contains a NUL byte"}
	}
	// O_NONBLOCK: opening a FIFO must not wait for a writer.
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, fmt.Errorf("config: %w", &os.PathError{Op: "open", Path: path, Err: err})
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, &Error{File: path, Msg: fmt.Sprintf("not a regular file (%s): refusing to read it", fileKind(st.Mode()))}
	}
	if st.Size() > MaxFileSize {
		return nil, &Error{File: path, Msg: fmt.Sprintf("%d bytes: larger than the %d a configuration may have", st.Size(), MaxFileSize)}
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if len(b) > MaxFileSize {
		return nil, &Error{File: path, Msg: fmt.Sprintf("grew past %d bytes while being read", MaxFileSize)}
	}
	return b, nil
}

func fileKind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a block device"
	case m&os.ModeSocket != 0:
		return "a socket"
	}
	return m.Type().String()
}

// Parse decodes and validates text; name is used in errors.
func Parse(name, text string) (Config, error) {
	c := Default()
	md, err := toml.Decode(text, &c)
	if err != nil {
		return Config{}, decodeError(name, text, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		k := und[0]
		line := keyLine(text, k)
		key := k.String()
		if len(k) > 1 {
			if i := tableIndexAt(text, k[0], line); i >= 0 {
				key = fmt.Sprintf("%s[%d].%s", k[0], i, strings.Join(k[1:], "."))
			}
		}
		return Config{}, &Error{File: name, Line: line, Key: key, Msg: fmt.Sprintf("%s: unknown setting %q", key, k.String())}
	}
	if err := c.validate(); err != nil {
		var ve *validationError
		if errors.As(err, &ve) {
			return Config{}, &Error{File: name, Line: ve.line(text), Key: ve.key(), Msg: ve.msg}
		}
		return Config{}, &Error{File: name, Msg: err.Error()}
	}
	return c, nil
}

var tomlLine = regexp.MustCompile(`^toml: line (\d+)(?: \(last key "([^"]*)"\))?:(.*)$`)

// decodeError turns the TOML decoder's error into an *Error naming the line
// and, where the decoder knows it, the key (with the entry of an array of
// tables, e.g. nic[1].mtu).
func decodeError(name, text string, err error) error {
	var line int
	var last, msg string
	var pe toml.ParseError
	if errors.As(err, &pe) {
		line, last, msg = pe.Position.Line, pe.LastKey, pe.Message
	} else {
		msg = err.Error()
		if m := tomlLine.FindStringSubmatch(msg); m != nil {
			line, _ = strconv.Atoi(m[1])
			last, msg = m[2], strings.TrimSpace(m[3])
		}
		msg = strings.TrimPrefix(msg, "toml: ")
	}
	key := last
	if t, rest, ok := strings.Cut(last, "."); ok && line > 0 {
		if i := tableIndexAt(text, t, line); i >= 0 {
			key = fmt.Sprintf("%s[%d].%s", t, i, rest)
		}
	}
	if key != "" {
		msg = key + ": " + msg
	}
	return &Error{File: name, Line: line, Key: key, Msg: msg}
}

// validationError names the table entry and key it concerns, so Parse can
// find its line.
type validationError struct {
	table string // "nic", "hvsock", "log", ... ; "" for top level
	index int    // entry of an array of tables; -1 for a plain table
	name  string
	msg   string
}

func (e *validationError) Error() string { return e.msg }

func (e *validationError) key() string {
	switch {
	case e.table == "":
		return e.name
	case e.index < 0:
		return e.table + "." + e.name
	}
	return fmt.Sprintf("%s[%d].%s", e.table, e.index, e.name)
}

func (e *validationError) line(text string) int {
	if l := findLine(text, e.table, e.index, e.name); l > 0 {
		return l
	}
	// The key is missing: point at its table.
	return tableLine(text, e.table, e.index)
}

// verr reports a problem with key in an array-of-tables entry (index >= 0),
// a table (index -1) or the top level (table "").
func verr(table string, index int, key, format string, args ...any) error {
	e := &validationError{table: table, index: index, name: key}
	e.msg = e.key() + ": " + fmt.Sprintf(format, args...)
	return e
}

func (c *Config) validate() error {
	if err := c.validatePaths(); err != nil {
		return err
	}
	if err := c.validateServers(); err != nil {
		return err
	}
	if err := c.validateNICs(); err != nil {
		return err
	}
	return c.validateHvSock()
}

func (c *Config) validatePaths() error {
	if c.Root == "" {
		c.Root = "/"
	}
	if err := checkPath(c.Root); err != nil {
		return verr("", 0, "root", "%v", err)
	}
	c.Root = filepath.Clean(c.Root)
	if c.StateDir != "" {
		if err := checkPath(c.StateDir); err != nil {
			return verr("", 0, "state_dir", "%v", err)
		}
		c.StateDir = filepath.Clean(c.StateDir)
	}
	if err := checkSocketPath(c.Control.Socket); err != nil {
		return verr("control", -1, "socket", "%v", err)
	}
	return nil
}

// checkPath requires an absolute path without NUL bytes.
func checkPath(p string) error {
	switch {
	case p == "":
		return errors.New("empty: want an absolute path")
	case strings.IndexByte(p, 0) >= 0:
		return fmt.Errorf("%q contains a NUL byte", p)
	case !filepath.IsAbs(p):
		return fmt.Errorf("%q: want an absolute path", p)
	}
	return nil
}

func checkSocketPath(p string) error {
	if err := checkPath(p); err != nil {
		return err
	}
	if len(p) > maxSocketPath {
		return fmt.Errorf("%d bytes: a Unix socket path has at most %d", len(p), maxSocketPath)
	}
	return nil
}

func (c *Config) validateServers() error {
	if c.Log.RateLimit < 0 {
		return verr("log", -1, "rate_limit", "%d: want 0 (no limit) or more lines", c.Log.RateLimit)
	}
	if c.Log.RateInterval < minDuration {
		return verr("log", -1, "rate_interval", "%v: want a duration of at least %v, with a unit (e.g. \"1m\")", c.Log.RateInterval, minDuration)
	}
	if c.Metrics.Listen != "" {
		if err := checkHostPort(c.Metrics.Listen); err != nil {
			return verr("metrics", -1, "listen", "%v (or \"\" to disable)", err)
		}
	}
	for _, v := range []struct {
		table, key string
		n          int
	}{
		{"metrics", "max_connections", c.Metrics.MaxConnections},
		{"control", "max_connections", c.Control.MaxConnections},
		{"control", "max_connections_per_user", c.Control.MaxConnectionsPerUser},
		{"control", "max_captures", c.Control.MaxCaptures},
	} {
		if v.n < 1 || v.n > 1<<16 {
			return verr(v.table, -1, v.key, "%d: want 1 to 65536", v.n)
		}
	}
	if c.Control.MaxConnectionsPerUser > c.Control.MaxConnections {
		return verr("control", -1, "max_connections_per_user", "%d: more than max_connections (%d)",
			c.Control.MaxConnectionsPerUser, c.Control.MaxConnections)
	}
	for _, v := range []struct {
		table, key string
		d          time.Duration
	}{
		{"metrics", "idle_timeout", c.Metrics.IdleTimeout},
		{"metrics", "request_timeout", c.Metrics.RequestTimeout},
		{"control", "idle_timeout", c.Control.IdleTimeout},
		{"control", "request_timeout", c.Control.RequestTimeout},
	} {
		if v.d < minDuration || v.d > time.Hour {
			return verr(v.table, -1, v.key, "%v: want %v to 1h, with a unit (e.g. \"30s\")", v.d, minDuration)
		}
	}
	return nil
}

// checkHostPort requires host:port with a numeric port.
func checkHostPort(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%q: want host:port", s)
	}
	if strings.ContainsAny(host, "\x00 \t\n") {
		return fmt.Errorf("%q: bad host", s)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("%q: port %q: want 0 to 65535", s, port)
	}
	return nil
}

func (c *Config) validateNICs() error {
	seen := map[string]int{}
	taps := map[string]int{}
	for i := range c.NICs {
		n := &c.NICs[i]
		if n.Device == "" {
			return verr("nic", i, "device", "missing: name the NIC by instance GUID or interface name")
		}
		if g, err := vmbus.ParseGUID(n.Device); err == nil {
			n.Device = g.String()
		} else if !ValidIfName(n.Device) {
			return verr("nic", i, "device", "%q is neither an instance GUID nor an interface name", n.Device)
		}
		if j, dup := seen[n.Device]; dup {
			return verr("nic", i, "device", "%q is already configured by nic[%d]", n.Device, j)
		}
		seen[n.Device] = i
		if n.Queues == 0 {
			n.Queues = 1
		}
		// The VF keys first, so that an error names the key at fault;
		// then the driver, which owns its limits, checks the NIC as
		// netvsc.Open would.
		if err := validateVF(i, n); err != nil {
			return err
		}
		if err := n.Netvsc().Validate(); err != nil {
			key := "mtu"
			switch {
			case n.Queues < 1 || n.Queues > nvsp.MaxSubchannels:
				key = "queues"
			case strings.Contains(err.Error(), "VF"):
				key = "vf"
			case strings.Contains(err.Error(), "busy poll"):
				key = "busy_poll"
			}
			return verr("nic", i, key, "%s", strings.TrimPrefix(err.Error(), "netvsc: "))
		}
		if n.Attach == AttachTAP {
			if n.TAP == "" {
				n.TAP = fmt.Sprintf("vmbus%d", i)
			}
			if !ValidIfName(n.TAP) {
				return verr("nic", i, "tap", "%q is not a valid interface name (1-15 characters, no '/', ':' or spaces)", n.TAP)
			}
			if j, dup := taps[n.TAP]; dup {
				return verr("nic", i, "tap", "%q is already used by nic[%d]", n.TAP, j)
			}
			taps[n.TAP] = i
			if n.Peer != "" {
				return verr("nic", i, "peer", "only for attach = \"forward\"")
			}
			if n.NetNS != "" && !validNetnsName(n.NetNS) {
				return verr("nic", i, "netns", "%q is not a valid namespace name (a file name under /run/netns)", n.NetNS)
			}
			continue
		}
		// attach = "forward"
		for _, k := range []struct {
			key string
			set bool
		}{{"tap", n.TAP != ""}, {"netns", n.NetNS != ""}, {"address", n.Address.IsValid()}, {"gso", n.GSO}} {
			if k.set {
				return verr("nic", i, k.key, "only for attach = \"tap\"")
			}
		}
		if n.Peer == "" {
			return verr("nic", i, "peer", "missing: attach = \"forward\" needs the other NIC")
		}
		if g, err := vmbus.ParseGUID(n.Peer); err == nil {
			n.Peer = g.String()
		}
		if n.Peer == n.Device {
			return verr("nic", i, "peer", "a NIC cannot forward to itself")
		}
	}
	for i := range c.NICs {
		if p := c.NICs[i].Peer; p != "" {
			if _, ok := seen[p]; !ok {
				return verr("nic", i, "peer", "%q is not a configured NIC", p)
			}
		}
	}
	return nil
}

// Bounds of the VF settings that are the daemon's own, not a driver's: a
// busy-poll time is spent spinning in a system call, and the budget is the
// kernel's 16-bit NAPI budget.
const (
	maxVFTimeout     = time.Hour
	maxVFBusyPoll    = time.Second
	maxVFBusyBudget  = 1<<16 - 1
	maxVFQueueID     = 1<<16 - 1
	minVFBusyPollSet = time.Microsecond // SO_BUSY_POLL counts microseconds
)

// validateVF checks the VF settings of nic[i]: the XDP ones only make
// sense with a VF, the wait only with a required one.
func validateVF(i int, n *NIC) error {
	if n.VF == VFOff {
		for _, k := range []struct {
			key string
			set bool
		}{{"vf_timeout", n.VFTimeout != 0}, {"vf_queues", len(n.VFQueues) > 0}, {"vf_attach", n.VFAttach != 0},
			{"vf_bind", n.VFBind != 0}, {"vf_busy_poll", n.VFBusyPoll != 0}, {"vf_busy_poll_budget", n.VFBusyPollBudget != 0}} {
			if k.set {
				return verr("nic", i, k.key, "only with vf = \"auto\" or \"required\" (this NIC has vf = \"off\")")
			}
		}
		return nil
	}
	if n.VFTimeout != 0 {
		if n.VF != VFRequired {
			return verr("nic", i, "vf_timeout", "only with vf = \"required\" (an auto VF is not waited for)")
		}
		if n.VFTimeout < time.Second || n.VFTimeout > maxVFTimeout {
			return verr("nic", i, "vf_timeout", "%v: want 1s to %v, with a unit (e.g. \"2m\")", n.VFTimeout, maxVFTimeout)
		}
	}
	seen := map[int]bool{}
	for _, q := range n.VFQueues {
		if q < 0 || q > maxVFQueueID {
			return verr("nic", i, "vf_queues", "queue id %d: want 0 to %d", q, maxVFQueueID)
		}
		if seen[q] {
			return verr("nic", i, "vf_queues", "queue id %d listed twice", q)
		}
		seen[q] = true
	}
	if n.VFBusyPoll != 0 && (n.VFBusyPoll < minVFBusyPollSet || n.VFBusyPoll > maxVFBusyPoll) {
		return verr("nic", i, "vf_busy_poll", "%v: want 1us to %v, with a unit (e.g. \"50us\"), or 0 for off", n.VFBusyPoll, maxVFBusyPoll)
	}
	if n.VFBusyPollBudget != 0 {
		if n.VFBusyPoll == 0 {
			return verr("nic", i, "vf_busy_poll_budget", "only with vf_busy_poll")
		}
		if n.VFBusyPollBudget < 0 || n.VFBusyPollBudget > maxVFBusyBudget {
			return verr("nic", i, "vf_busy_poll_budget", "%d: want 1 to %d (0: the kernel's default)", n.VFBusyPollBudget, maxVFBusyBudget)
		}
	}
	return nil
}

func (c *Config) validateHvSock() error {
	ports := map[uint32]int{}
	listens := map[Addr]int{}
	for i := range c.HvSock {
		h := &c.HvSock[i]
		if h.MaxConnections == 0 {
			h.MaxConnections = DefaultForwardConns
		}
		if h.MaxConnections < 1 || h.MaxConnections > 1<<16 {
			return verr("hvsock", i, "max_connections", "%d: want 1 to 65536", h.MaxConnections)
		}
		guestSvc := h.Port != 0 || h.To.IsValid()
		hostSvc := h.Listen.IsValid() || h.ToPort != 0
		switch {
		case guestSvc && hostSvc:
			return verr("hvsock", i, "port", "give either port and to, or listen and to_port, not both")
		case guestSvc:
			if h.Port == 0 {
				return verr("hvsock", i, "port", "missing: the hv_sock port to accept on")
			}
			if !h.To.IsValid() {
				return verr("hvsock", i, "to", "missing: the local address to forward to (unix:/path or tcp:host:port)")
			}
			if j, dup := ports[h.Port]; dup {
				return verr("hvsock", i, "port", "%d is already forwarded by hvsock[%d]", h.Port, j)
			}
			ports[h.Port] = i
		case hostSvc:
			if h.ToPort == 0 {
				return verr("hvsock", i, "to_port", "missing: the host's hv_sock port")
			}
			if !h.Listen.IsValid() {
				return verr("hvsock", i, "listen", "missing: the local address to listen on (unix:/path or tcp:host:port)")
			}
			if j, dup := listens[h.Listen]; dup {
				return verr("hvsock", i, "listen", "%s is already used by hvsock[%d]", h.Listen, j)
			}
			listens[h.Listen] = i
		default:
			return verr("hvsock", i, "port", "empty entry: give port and to, or listen and to_port")
		}
	}
	return nil
}

// Warnings lists settings that are valid but probably not what was meant.
func (c Config) Warnings() []string {
	var w []string
	if c.Metrics.Listen != "" && !loopback(c.Metrics.Listen) {
		w = append(w, fmt.Sprintf("metrics.listen %q is not a loopback address: /metrics names devices, MACs and addresses to anyone who can reach it", c.Metrics.Listen))
	}
	return w
}

// loopback reports whether host:port listens on a loopback address only.
func loopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

// ValidIfName is the kernel's dev_valid_name: 1..15 bytes, not . or .., no
// '/', ':', white space or NUL.
func ValidIfName(s string) bool {
	if s == "" || len(s) > 15 || s == "." || s == ".." {
		return false
	}
	return !strings.ContainsAny(s, "/: \t\n\r\v\f\x00")
}

// validNetnsName: a file name under /run/netns.
func validNetnsName(s string) bool {
	return s != "" && len(s) <= 255 && s != "." && s != ".." && !strings.ContainsAny(s, "/\x00")
}

// keyLine finds the line where a dotted key such as nic.quues is set.
func keyLine(text string, k toml.Key) int {
	if len(k) == 0 {
		return 0
	}
	table := ""
	if len(k) > 1 {
		table = k[0]
	}
	return findLine(text, table, -1, k[len(k)-1])
}

// tables reads the table headers of text: for each line, the table it is
// in and the entry of an array of tables (-1 for a plain table).
type lineTable struct {
	name  string
	index int
}

func scanTables(text string) []lineTable {
	lines := strings.Split(text, "\n")
	out := make([]lineTable, len(lines))
	cur, idx := "", -1
	counts := map[string]int{}
	for i, l := range lines {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "[") {
			name := strings.TrimSpace(strings.Trim(strings.SplitN(t, "#", 2)[0], "[] \t"))
			cur, idx = name, -1
			if strings.HasPrefix(t, "[[") {
				idx = counts[name]
				counts[name]++
			}
		}
		out[i] = lineTable{cur, idx}
	}
	return out
}

// tableIndexAt returns the entry of the array of tables named table that
// line (1-based) is in, or -1.
func tableIndexAt(text, table string, line int) int {
	lt := scanTables(text)
	if line < 1 || line > len(lt) || lt[line-1].name != table {
		return -1
	}
	return lt[line-1].index
}

// tableLine returns the line of the header of the index-th [[table]] (or
// of [table]), 0 when there is none.
func tableLine(text, table string, index int) int {
	if table == "" {
		return 0
	}
	for i, t := range scanTables(text) {
		if t.name == table && (index < 0 || t.index == index) {
			return i + 1
		}
	}
	return 0
}

// findLine returns the line of `key =` inside the index-th [[table]] (or
// [table] when index < 0; top level when table is ""); with index < 0 in an
// array of tables, any entry. 0 when it cannot tell.
func findLine(text, table string, index int, key string) int {
	keyRE := regexp.MustCompile(`^\s*"?` + regexp.QuoteMeta(key) + `"?\s*=`)
	lt := scanTables(text)
	for i, l := range strings.Split(text, "\n") {
		t := lt[i]
		if t.name != table || (table != "" && index >= 0 && t.index != index) {
			continue
		}
		if keyRE.MatchString(l) {
			return i + 1
		}
	}
	return 0
}
