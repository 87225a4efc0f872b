// Package config reads vmbusd's configuration file (TOML). Invalid files
// are refused with the line and the reason; nothing is applied from a file
// that does not validate.
package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/vmbusd/vmbusd/vmbus"
)

// Config is the whole file. The zero value is not valid; use Parse or
// Default.
type Config struct {
	// Root is the directory standing for "/" (a simulated host's tree).
	Root    string  `toml:"root"`
	Log     Log     `toml:"log"`
	Metrics Metrics `toml:"metrics"`
	Control Control `toml:"control"`
	// StateDir holds the records of devices vmbusd bound, so that a later
	// start or `vmbusd restore` can give them back after a crash.
	StateDir string   `toml:"state_dir"`
	NICs     []NIC    `toml:"nic"`
	HvSock   []HvSock `toml:"hvsock"`
}

// Log configures log/slog.
type Log struct {
	Level  string `toml:"level"`  // debug, info, warn, error
	Format string `toml:"format"` // text, json
}

// Metrics configures the HTTP endpoint with /metrics, /healthz, /readyz.
type Metrics struct {
	// Listen is host:port; "" disables the endpoint. Localhost by default:
	// the metrics name devices and addresses.
	Listen string `toml:"listen"`
}

// Control configures the control socket used by vmbusd stats, status and
// capture.
type Control struct {
	Socket string `toml:"socket"`
}

// NIC is one synthetic NIC driven by vmbusd.
type NIC struct {
	// Device names the NIC by instance GUID or by its kernel interface name
	// (before vmbusd binds it).
	Device string `toml:"device"`
	// Queues wanted (one per channel); the host may grant fewer.
	Queues int `toml:"queues"`
	// MTU of the synthetic NIC; 0 keeps the default (1500).
	MTU int `toml:"mtu"`
	// Mode: hybrid (poll under load, sleep when idle), poll, interrupt.
	Mode string `toml:"mode"`
	// Attach: "tap" (a kernel TAP interface) or "forward" (frames go to the
	// NIC named by Peer and back).
	Attach string `toml:"attach"`
	// TAP interface name (attach = "tap"); default vmbus<N>.
	TAP string `toml:"tap"`
	// NetNS moves the TAP into a named network namespace.
	NetNS string `toml:"netns"`
	// Address (CIDR), when set, is assigned to the TAP.
	Address string `toml:"address"`
	// GSO lets the kernel hand the TAP 64 KiB TCP super-frames, which the
	// NIC segments (or the host, with LSO).
	GSO bool `toml:"gso"`
	// Peer is the other NIC's device (attach = "forward").
	Peer string `toml:"peer"`
	// Bind: claim the device from its kernel driver at start (driver_override
	// flow) and give it back at stop. Default true.
	Bind *bool `toml:"bind"`
	// Force binding the interface that carries the default route or the
	// current SSH session.
	Force bool `toml:"force"`
}

// HvSock is one hv_sock forward. Either Port and To (a guest service: hv_sock
// connections to Port are forwarded to the local address To), or Listen and
// ToPort (a local listener forwarded to the host's hv_sock service ToPort).
type HvSock struct {
	Port   uint32 `toml:"port"`
	To     string `toml:"to"`
	Listen string `toml:"listen"`
	ToPort uint32 `toml:"to_port"`
}

// Defaults.
const (
	DefaultMetricsListen = "127.0.0.1:9464"
	DefaultControlSocket = "/run/vmbusd/control.sock"
	DefaultStateDir      = "/run/vmbusd"
)

// Default returns the configuration used without a file.
func Default() Config {
	return Config{
		Root:     "/",
		Log:      Log{Level: "info", Format: "text"},
		Metrics:  Metrics{Listen: DefaultMetricsListen},
		Control:  Control{Socket: DefaultControlSocket},
		StateDir: DefaultStateDir,
	}
}

// Error is a configuration error with the line it was found on (0 when it
// concerns the file as a whole).
type Error struct {
	File string
	Line int
	Msg  string
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Msg)
}

// Load reads and validates a file.
func Load(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	return Parse(path, string(b))
}

// Parse decodes and validates text; name is used in errors.
func Parse(name, text string) (Config, error) {
	c := Default()
	md, err := toml.Decode(text, &c)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return Config{}, &Error{File: name, Line: pe.Position.Line, Msg: pe.Message}
		}
		msg := err.Error()
		line := 0
		if m := tomlLine.FindStringSubmatch(msg); m != nil {
			line, _ = strconv.Atoi(m[1])
			msg = strings.TrimSpace(m[2])
		}
		return Config{}, &Error{File: name, Line: line, Msg: strings.TrimPrefix(msg, "toml: ")}
	}
	if und := md.Undecoded(); len(und) > 0 {
		k := und[0]
		return Config{}, &Error{File: name, Line: keyLine(text, k), Msg: fmt.Sprintf("unknown setting %q", k.String())}
	}
	if err := c.validate(); err != nil {
		var ve *validationError
		if errors.As(err, &ve) {
			return Config{}, &Error{File: name, Line: ve.line(text), Msg: ve.msg}
		}
		return Config{}, &Error{File: name, Msg: err.Error()}
	}
	return c, nil
}

var tomlLine = regexp.MustCompile(`^toml: line (\d+)(?: \(last key "[^"]*"\))?:(.*)$`)

// validationError names the table entry and key it concerns, so Parse can
// find its line.
type validationError struct {
	table string // "nic", "hvsock", "" for top level
	index int    // entry of an array of tables
	key   string
	msg   string
}

func (e *validationError) Error() string { return e.msg }

func (e *validationError) line(text string) int {
	return findLine(text, e.table, e.index, e.key)
}

func verr(table string, index int, key, format string, args ...any) error {
	prefix := key
	if table != "" {
		prefix = fmt.Sprintf("%s[%d].%s", table, index, key)
	}
	return &validationError{table: table, index: index, key: key, msg: prefix + ": " + fmt.Sprintf(format, args...)}
}

func (c *Config) validate() error {
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		return verr("", 0, "level", "%q: want debug, info, warn or error", c.Log.Level)
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		return verr("", 0, "format", "%q: want text or json", c.Log.Format)
	}
	if c.Metrics.Listen != "" {
		if _, _, err := net.SplitHostPort(c.Metrics.Listen); err != nil {
			return verr("", 0, "listen", "%q: want host:port (or \"\" to disable)", c.Metrics.Listen)
		}
	}
	if c.Control.Socket == "" || !strings.HasPrefix(c.Control.Socket, "/") {
		return verr("", 0, "socket", "%q: want an absolute path", c.Control.Socket)
	}
	if c.Root == "" {
		c.Root = "/"
	}
	seen := map[string]int{}
	taps := map[string]int{}
	for i := range c.NICs {
		n := &c.NICs[i]
		if n.Device == "" {
			return verr("nic", i, "device", "missing: name the NIC by instance GUID or interface name")
		}
		if _, err := vmbus.ParseGUID(n.Device); err != nil && !validIfName(n.Device) {
			return verr("nic", i, "device", "%q is neither an instance GUID nor an interface name", n.Device)
		}
		if j, dup := seen[n.Device]; dup {
			return verr("nic", i, "device", "%q is already configured by nic[%d]", n.Device, j)
		}
		seen[n.Device] = i
		if n.Queues == 0 {
			n.Queues = 1
		}
		if n.Queues < 1 || n.Queues > 64 {
			return verr("nic", i, "queues", "%d: want 1 to 64", n.Queues)
		}
		if n.MTU != 0 && (n.MTU < 68 || n.MTU > 65521) {
			return verr("nic", i, "mtu", "%d: want 68 to 65521 (or 0 for the default)", n.MTU)
		}
		if n.Mode == "" {
			n.Mode = "hybrid"
		}
		switch n.Mode {
		case "hybrid", "poll", "interrupt":
		default:
			return verr("nic", i, "mode", "%q: want hybrid, poll or interrupt", n.Mode)
		}
		if n.Attach == "" {
			n.Attach = "tap"
		}
		switch n.Attach {
		case "tap":
			if n.TAP == "" {
				n.TAP = fmt.Sprintf("vmbus%d", i)
			}
			if !validIfName(n.TAP) {
				return verr("nic", i, "tap", "%q is not a valid interface name (1-15 characters, no '/' or spaces)", n.TAP)
			}
			if j, dup := taps[n.TAP]; dup {
				return verr("nic", i, "tap", "%q is already used by nic[%d]", n.TAP, j)
			}
			taps[n.TAP] = i
			if n.Peer != "" {
				return verr("nic", i, "peer", "only for attach = \"forward\"")
			}
			if n.Address != "" {
				if _, err := netip.ParsePrefix(n.Address); err != nil {
					return verr("nic", i, "address", "%q: want an address with prefix length, e.g. 10.0.0.2/24", n.Address)
				}
			}
		case "forward":
			if n.Peer == "" {
				return verr("nic", i, "peer", "missing: attach = \"forward\" needs the other NIC")
			}
			if n.Peer == n.Device {
				return verr("nic", i, "peer", "a NIC cannot forward to itself")
			}
		default:
			return verr("nic", i, "attach", "%q: want tap or forward", n.Attach)
		}
		if n.Bind == nil {
			t := true
			n.Bind = &t
		}
	}
	for i := range c.NICs {
		if p := c.NICs[i].Peer; p != "" {
			if _, ok := seen[p]; !ok {
				return verr("nic", i, "peer", "%q is not a configured NIC", p)
			}
		}
	}
	for i, h := range c.HvSock {
		guestSvc := h.Port != 0 || h.To != ""
		hostSvc := h.Listen != "" || h.ToPort != 0
		switch {
		case guestSvc && hostSvc:
			return verr("hvsock", i, "port", "give either port and to, or listen and to_port, not both")
		case guestSvc:
			if h.Port == 0 {
				return verr("hvsock", i, "port", "missing: the hv_sock port to accept on")
			}
			if err := checkAddr(h.To); err != nil {
				return verr("hvsock", i, "to", "%v", err)
			}
		case hostSvc:
			if h.ToPort == 0 {
				return verr("hvsock", i, "to_port", "missing: the host's hv_sock port")
			}
			if err := checkAddr(h.Listen); err != nil {
				return verr("hvsock", i, "listen", "%v", err)
			}
		default:
			return verr("hvsock", i, "port", "empty entry: give port and to, or listen and to_port")
		}
	}
	return nil
}

// checkAddr validates "unix:/path" or "tcp:host:port".
func checkAddr(a string) error {
	network, addr, ok := strings.Cut(a, ":")
	switch {
	case !ok || addr == "":
		return fmt.Errorf("%q: want unix:/path or tcp:host:port", a)
	case network == "unix":
		if !strings.HasPrefix(addr, "/") {
			return fmt.Errorf("%q: unix socket path must be absolute", a)
		}
	case network == "tcp":
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return fmt.Errorf("%q: want tcp:host:port", a)
		}
	default:
		return fmt.Errorf("%q: network %q: want unix or tcp", a, network)
	}
	return nil
}

// SplitAddr splits a checked "unix:/path" or "tcp:host:port".
func SplitAddr(a string) (network, addr string) {
	network, addr, _ = strings.Cut(a, ":")
	return network, addr
}

func validIfName(s string) bool {
	if s == "" || len(s) > 15 || s == "." || s == ".." {
		return false
	}
	return !strings.ContainsAny(s, "/ \t\n:")
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

// findLine returns the line of `key =` inside the index-th [[table]] (or
// [table]; any entry when index < 0; top level when table is ""). 0 when it
// cannot tell.
func findLine(text, table string, index int, key string) int {
	cur, n := "", -1
	keyRE := regexp.MustCompile(`^\s*"?` + regexp.QuoteMeta(key) + `"?\s*=`)
	for i, l := range strings.Split(text, "\n") {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "[") {
			name := strings.Trim(t, "[] ")
			if name != cur {
				n = -1
			}
			cur = name
			if strings.HasPrefix(t, "[[") {
				n++
			}
			continue
		}
		inTable := cur == table || (table == "" && (cur == "log" || cur == "metrics" || cur == "control"))
		if inTable && (index < 0 || n == index || table == "") && keyRE.MatchString(l) {
			return i + 1
		}
	}
	return 0
}
