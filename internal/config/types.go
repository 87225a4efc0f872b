package config

import (
	"fmt"
	"log/slog"
	"net"
	"strings"

	"github.com/vmbusd/vmbusd/afxdp"
	"github.com/vmbusd/vmbusd/netvsc"
)

// The typed values of the file. Each reads its TOML string with
// UnmarshalText, so a bad value is refused by the decoder with its line
// and key, and writes it back with MarshalText.

// LogLevel is the least severe level logged: debug, info, warn or error.
type LogLevel slog.Level

func (l *LogLevel) UnmarshalText(b []byte) error {
	switch string(b) {
	case "debug":
		*l = LogLevel(slog.LevelDebug)
	case "info":
		*l = LogLevel(slog.LevelInfo)
	case "warn":
		*l = LogLevel(slog.LevelWarn)
	case "error":
		*l = LogLevel(slog.LevelError)
	default:
		return fmt.Errorf("%q: want debug, info, warn or error", b)
	}
	return nil
}

func (l LogLevel) MarshalText() ([]byte, error) {
	return []byte(strings.ToLower(slog.Level(l).String())), nil
}

// LogFormat is how log lines are written.
type LogFormat int

const (
	FormatText LogFormat = iota // logfmt (slog.TextHandler)
	FormatJSON                  // one JSON object per line
)

func (f *LogFormat) UnmarshalText(b []byte) error {
	switch string(b) {
	case "text":
		*f = FormatText
	case "json":
		*f = FormatJSON
	default:
		return fmt.Errorf("%q: want text or json", b)
	}
	return nil
}

func (f LogFormat) MarshalText() ([]byte, error) { return []byte(f.String()), nil }

func (f LogFormat) String() string {
	if f == FormatJSON {
		return "json"
	}
	return "text"
}

// Mode is a NIC's wait mode (netvsc.Mode): hybrid, poll or interrupt.
type Mode netvsc.Mode

func (m *Mode) UnmarshalText(b []byte) error {
	v, err := netvsc.ParseMode(string(b))
	if err != nil {
		return fmt.Errorf("%q: want hybrid, poll or interrupt", b)
	}
	*m = Mode(v)
	return nil
}

func (m Mode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }
func (m Mode) String() string               { return netvsc.Mode(m).String() }

// Attach is where a NIC's frames go.
type Attach int

const (
	AttachTAP     Attach = iota // a kernel TAP interface (the default)
	AttachForward               // the NIC named by Peer, and back
)

func (a *Attach) UnmarshalText(b []byte) error {
	switch string(b) {
	case "tap":
		*a = AttachTAP
	case "forward":
		*a = AttachForward
	default:
		return fmt.Errorf("%q: want tap or forward", b)
	}
	return nil
}

func (a Attach) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

func (a Attach) String() string {
	if a == AttachForward {
		return "forward"
	}
	return "tap"
}

// ReadyPolicy is when the daemon sends READY=1.
type ReadyPolicy int

const (
	// ReadyAll: once every configured NIC is up and every forward listens.
	ReadyAll ReadyPolicy = iota
	// ReadyAny: once at least one is; STATUS= names the others.
	ReadyAny
)

func (p *ReadyPolicy) UnmarshalText(b []byte) error {
	switch string(b) {
	case "all":
		*p = ReadyAll
	case "any":
		*p = ReadyAny
	default:
		return fmt.Errorf("%q: want all (every device up) or any (at least one)", b)
	}
	return nil
}

func (p ReadyPolicy) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

func (p ReadyPolicy) String() string {
	if p == ReadyAny {
		return "any"
	}
	return "all"
}

// GPAPool selects the pinned memory NICs send frames larger than a send
// section from (GPA-direct).
type GPAPool int

const (
	// GPAAuto: the simulator's guest memory under a simulated root,
	// hugepages on a real system, none when neither can be had.
	GPAAuto GPAPool = iota
	// GPAOff: no pool; frames larger than a send section are dropped.
	GPAOff
	// GPASim: the simulated host's guest memory (R/dev/guestmem).
	GPASim
	// GPAHugepage: hugepages, frame numbers from /proc/self/pagemap.
	GPAHugepage
)

var gpaNames = [...]string{GPAAuto: "auto", GPAOff: "off", GPASim: "sim", GPAHugepage: "hugepage"}

func (g *GPAPool) UnmarshalText(b []byte) error {
	for i, n := range gpaNames {
		if n == string(b) {
			*g = GPAPool(i)
			return nil
		}
	}
	return fmt.Errorf("%q: want auto, off, sim or hugepage", b)
}

func (g GPAPool) MarshalText() ([]byte, error) { return []byte(g.String()), nil }

func (g GPAPool) String() string {
	if g >= 0 && int(g) < len(gpaNames) {
		return gpaNames[g]
	}
	return fmt.Sprintf("gpa(%d)", int(g))
}

// Addr is a local stream address: "unix:/path" or "tcp:host:port". The
// zero value is "not set".
type Addr struct {
	Network string // "unix" or "tcp"
	Address string // the path, or host:port
}

// ParseAddr reads "unix:/path" or "tcp:host:port".
func ParseAddr(s string) (Addr, error) {
	network, addr, ok := strings.Cut(s, ":")
	switch {
	case !ok || addr == "":
		return Addr{}, fmt.Errorf("%q: want unix:/path or tcp:host:port", s)
	case network == "unix":
		if err := checkSocketPath(addr); err != nil {
			return Addr{}, fmt.Errorf("unix socket: %v", err)
		}
	case network == "tcp":
		if err := checkHostPort(addr); err != nil {
			return Addr{}, fmt.Errorf("tcp: %v", err)
		}
	default:
		return Addr{}, fmt.Errorf("%q: network %q: want unix or tcp", s, network)
	}
	return Addr{Network: network, Address: addr}, nil
}

func (a *Addr) UnmarshalText(b []byte) error {
	v, err := ParseAddr(string(b))
	if err != nil {
		return err
	}
	*a = v
	return nil
}

func (a Addr) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// IsValid reports whether the address is set.
func (a Addr) IsValid() bool { return a.Network != "" }

func (a Addr) String() string {
	if !a.IsValid() {
		return ""
	}
	return a.Network + ":" + a.Address
}

// Listen listens on the address.
func (a Addr) Listen() (net.Listener, error) { return net.Listen(a.Network, a.Address) }

// VFMode says whether a NIC uses the accelerated-networking VF the host
// associates with it (netvsc.VFMode). Its zero value is VFAuto, the
// default: on Azure the VF is where the traffic belongs, and a NIC the
// host offers no VF to runs synthetic as before.
type VFMode int

const (
	VFAuto     VFMode = iota // pair and use the VF whenever the host offers one
	VFOff                    // leave any VF alone; traffic stays synthetic
	VFRequired               // auto, and bring-up fails without a VF carrying traffic
)

// Netvsc returns the driver's mode.
func (m VFMode) Netvsc() netvsc.VFMode {
	switch m {
	case VFOff:
		return netvsc.VFOff
	case VFRequired:
		return netvsc.VFRequired
	}
	return netvsc.VFAuto
}

func (m *VFMode) UnmarshalText(b []byte) error {
	v, err := netvsc.ParseVFMode(string(b))
	if err != nil {
		return fmt.Errorf("%q: want auto, off or required", b)
	}
	switch v {
	case netvsc.VFOff:
		*m = VFOff
	case netvsc.VFRequired:
		*m = VFRequired
	default:
		*m = VFAuto
	}
	return nil
}

func (m VFMode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }
func (m VFMode) String() string               { return m.Netvsc().String() }

// XDPAttach is how the VF's XDP program hooks its netdev
// (afxdp.AttachMode): auto (native, else generic), native or generic.
type XDPAttach afxdp.AttachMode

func (a *XDPAttach) UnmarshalText(b []byte) error {
	for _, m := range []afxdp.AttachMode{afxdp.AttachAuto, afxdp.AttachNative, afxdp.AttachGeneric} {
		if m.String() == string(b) {
			*a = XDPAttach(m)
			return nil
		}
	}
	return fmt.Errorf("%q: want auto, native or generic", b)
}

func (a XDPAttach) MarshalText() ([]byte, error) { return []byte(a.String()), nil }
func (a XDPAttach) String() string               { return afxdp.AttachMode(a).String() }

// XDPBind is how the VF's AF_XDP sockets reach their memory
// (afxdp.BindMode): auto (zero-copy, else copy), zero-copy or copy.
type XDPBind afxdp.BindMode

func (m *XDPBind) UnmarshalText(b []byte) error {
	for _, v := range []afxdp.BindMode{afxdp.BindAuto, afxdp.BindZeroCopy, afxdp.BindCopy} {
		if v.String() == string(b) {
			*m = XDPBind(v)
			return nil
		}
	}
	return fmt.Errorf("%q: want auto, zero-copy or copy", b)
}

func (m XDPBind) MarshalText() ([]byte, error) { return []byte(m.String()), nil }
func (m XDPBind) String() string               { return afxdp.BindMode(m).String() }
