package config

import (
	"errors"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/afxdp"
	"github.com/vmbusd/vmbusd/netvsc"
)

const good = `
root = "/dev/shm/vmbusd"

[log]
level = "debug"
format = "json"

[metrics]
listen = "127.0.0.1:9464"

[control]
socket = "/run/vmbusd/control.sock"

[[nic]]
device = "f8615163-df3e-46c5-913f-f2d2f965ed0e"
queues = 2
mtu = 9000
mode = "poll"
tap = "vm0"

[[nic]]
device = "eth1"
attach = "forward"
peer = "eth2"

[[nic]]
device = "eth2"
attach = "forward"
peer = "eth1"

[[hvsock]]
port = 2761
to = "unix:/run/app.sock"

[[hvsock]]
listen = "tcp:127.0.0.1:9000"
to_port = 5000
`

func TestParseGood(t *testing.T) {
	c, err := Parse("good.toml", good)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.NICs) != 3 || c.NICs[0].Queues != 2 || c.NICs[1].Queues != 1 || c.NICs[1].Mode != Mode(netvsc.Hybrid) ||
		c.NICs[1].TAP != "" || c.NICs[0].TAP != "vm0" || !c.NICs[2].Binds() || len(c.HvSock) != 2 ||
		c.Log.Level != LogLevel(slog.LevelDebug) || c.Log.Format != FormatJSON {
		t.Fatalf("parsed %+v", c)
	}
	if c.NICs[0].Mode != Mode(netvsc.Poll) || c.NICs[1].Attach != AttachForward || c.NICs[0].Attach != AttachTAP {
		t.Fatalf("enums %+v", c.NICs)
	}
	if c.HvSock[0].To != (Addr{"unix", "/run/app.sock"}) || c.HvSock[1].Listen != (Addr{"tcp", "127.0.0.1:9000"}) {
		t.Fatalf("addresses %+v", c.HvSock)
	}
	if c.State() != "/dev/shm/vmbusd/run/vmbusd" {
		t.Fatalf("state dir %q, want it under the root", c.State())
	}
}

func TestParseTypedValues(t *testing.T) {
	c, err := Parse("t.toml", `
ready = "any"
[log]
rate_interval = "10s"
[metrics]
idle_timeout = "5s"
[gpa]
pool = "hugepage"
[[nic]]
device = "{F8615163-DF3E-46C5-913F-F2D2F965ED0E}"
address = "10.0.0.2/24"
`)
	if err != nil {
		t.Fatal(err)
	}
	if c.Ready != ReadyAny || c.Log.RateInterval != 10*time.Second || c.Metrics.IdleTimeout != 5*time.Second ||
		c.GPA.Pool != GPAHugepage || c.NICs[0].Address != netip.MustParsePrefix("10.0.0.2/24") ||
		c.NICs[0].Device != "f8615163-df3e-46c5-913f-f2d2f965ed0e" {
		t.Fatalf("parsed %+v", c)
	}
}

func TestParseDefaults(t *testing.T) {
	c, err := Parse("empty.toml", "")
	if err != nil {
		t.Fatal(err)
	}
	if c.Metrics.Listen != DefaultMetricsListen || c.Control.Socket != DefaultControlSocket || c.Root != "/" {
		t.Fatalf("defaults %+v", c)
	}
	if c.State() != "/run/vmbusd" || c.Ready != ReadyAll || c.GPA.Pool != GPAAuto || c.Control.MaxCaptures != DefaultMaxCaptures {
		t.Fatalf("defaults %+v (state %s)", c, c.State())
	}
}

func TestParseErrorsCarryLineAndReason(t *testing.T) {
	tests := []struct {
		name, text string
		line       int
		want       string
	}{
		{"syntax", "root = \n", 1, "expected value"},
		{"unknown key", "[[nic]]\ndevice = \"eth1\"\nquues = 2\n", 3, `unknown setting "nic.quues"`},
		{"wrong type", "[[nic]]\ndevice = \"eth1\"\nqueues = \"two\"\n", 3, "incompatible types"},
		{"bad mode", "[[nic]]\ndevice = \"eth1\"\nmode = \"turbo\"\n", 3, `nic[0].mode: "turbo"`},
		{"queues range", "[[nic]]\ndevice = \"eth1\"\n\n[[nic]]\ndevice = \"eth2\"\nqueues = 99\n", 6, "nic[1].queues: 99"},
		{"duplicate device", "[[nic]]\ndevice = \"eth1\"\n[[nic]]\ndevice = \"eth1\"\n", 4, "already configured"},
		// A missing key is reported on its entry's first line.
		{"forward without peer", "[[nic]]\ndevice = \"eth1\"\nattach = \"forward\"\n", 1, "peer: missing"},
		{"unknown peer", "[[nic]]\ndevice = \"eth1\"\nattach = \"forward\"\npeer = \"eth9\"\n", 4, "not a configured NIC"},
		{"bad device", "[[nic]]\ndevice = \"this is not an interface\"\n", 2, "neither an instance GUID"},
		{"bad log level", "[log]\nlevel = \"loud\"\n", 2, "level"},
		{"bad metrics", "[metrics]\nlisten = \"9464\"\n", 2, "want host:port"},
		{"relative socket", "[control]\nsocket = \"ctl.sock\"\n", 2, "absolute path"},
		{"hvsock both", "[[hvsock]]\nport = 1\nto = \"unix:/a\"\nlisten = \"tcp:127.0.0.1:1\"\nto_port = 2\n", 2, "not both"},
		{"hvsock bad to", "[[hvsock]]\nport = 1\nto = \"udp:1.2.3.4:5\"\n", 3, "want unix or tcp"},
		{"hvsock relative unix", "[[hvsock]]\nport = 1\nto = \"unix:app.sock\"\n", 3, "absolute"},
		{"hvsock empty", "[[hvsock]]\n", 1, "empty entry"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("x.toml", tc.text)
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %v, want *Error", err)
			}
			if ce.Line != tc.line || !strings.Contains(ce.Msg, tc.want) {
				t.Fatalf("got line %d %q, want line %d containing %q", ce.Line, ce.Msg, tc.line, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "x.toml:") {
				t.Fatalf("error text %q does not name the file", err)
			}
		})
	}
}

// TestHostileConfigsNameKeyAndLine: malformed and hostile files, each
// refused with the key and the line an operator must fix.
func TestHostileConfigsNameKeyAndLine(t *testing.T) {
	nic := "[[nic]]\ndevice = \"eth1\"\n" // lines 1-2
	tests := []struct {
		name, text string
		line       int
		key        string
		want       string
	}{
		{"MTU the driver refuses", nic + "mtu = 9500\n", 3, "nic[0].mtu", "MTU 9500 outside 68..9202"},
		{"MTU below IPv4's minimum", nic + "mtu = 67\n", 3, "nic[0].mtu", "MTU 67"},
		{"negative MTU", nic + "mtu = -1\n", 3, "nic[0].mtu", "MTU -1"},
		{"too many queues", nic + "queues = 65\n", 3, "nic[0].queues", "65 queues"},
		{"negative queues", nic + "queues = -3\n", 3, "nic[0].queues", "-3 queues"},
		{"unknown attach", nic + "attach = \"bridge\"\n", 3, "nic[0].attach", "want tap or forward"},
		{"address without prefix", nic + "address = \"10.0.0.1\"\n", 3, "nic[0].address", "no '/'"},
		{"address out of range", nic + "address = \"300.0.0.1/24\"\n", 3, "nic[0].address", "300"},
		{"TAP name too long", nic + "tap = \"a-name-much-too-long\"\n", 3, "nic[0].tap", "not a valid interface name"},
		{"TAP name with slash", nic + "tap = \"a/b\"\n", 3, "nic[0].tap", "not a valid interface name"},
		{"TAP name used twice", nic + "tap = \"t0\"\n[[nic]]\ndevice = \"eth2\"\ntap = \"t0\"\n", 6, "nic[1].tap", "already used by nic[0]"},
		{"namespace escaping /run/netns", nic + "netns = \"../etc\"\n", 3, "nic[0].netns", "not a valid namespace name"},
		{"empty device", "[[nic]]\ndevice = \"\"\n", 2, "nic[0].device", "missing"},
		{"same GUID in two spellings", "[[nic]]\ndevice = \"f8615163-df3e-46c5-913f-f2d2f965ed0e\"\n[[nic]]\n" +
			"device = \"{F8615163-DF3E-46C5-913F-F2D2F965ED0E}\"\n", 4, "nic[1].device", "already configured by nic[0]"},
		{"forward to itself", nic + "attach = \"forward\"\npeer = \"eth1\"\n", 4, "nic[0].peer", "cannot forward to itself"},
		{"TAP setting on a forward", nic + "attach = \"forward\"\npeer = \"eth2\"\ntap = \"x\"\n[[nic]]\ndevice = \"eth2\"\n", 5, "nic[0].tap", "only for attach"},
		{"peer on a TAP", nic + "peer = \"eth2\"\n", 3, "nic[0].peer", "only for attach"},
		{"relative root", "root = \"relative/dir\"\n", 1, "root", "want an absolute path"},
		{"NUL in root", "root = \"/a\\u0000b\"\n", 1, "root", "NUL"},
		{"relative state_dir", "\nstate_dir = \"run\"\n", 2, "state_dir", "absolute"},
		{"socket path too long", "[control]\nsocket = \"/" + strings.Repeat("s", 200) + "\"\n", 2, "control.socket", "at most 107"},
		{"NUL in socket path", "[control]\nsocket = \"/run/\\u0000x\"\n", 2, "control.socket", "NUL"},
		{"port out of range", "[metrics]\nlisten = \"127.0.0.1:99999\"\n", 2, "metrics.listen", "want 0 to 65535"},
		{"listen without port", "[metrics]\nlisten = \"localhost\"\n", 2, "metrics.listen", "want host:port"},
		{"no connections", "[metrics]\nmax_connections = 0\n", 2, "metrics.max_connections", "want 1 to 65536"},
		{"duration without unit", "[metrics]\nidle_timeout = 30\n", 2, "metrics.idle_timeout", "with a unit"},
		{"duration unreadable", "[metrics]\n\nidle_timeout = \"forever\"\n", 3, "metrics.idle_timeout", "invalid duration"},
		{"per-user limit above the total", "[control]\nmax_connections_per_user = 100\n", 2, "control.max_connections_per_user", "more than max_connections"},
		{"negative captures", "[control]\nmax_captures = -1\n", 2, "control.max_captures", "want 1 to 65536"},
		{"log level", "[log]\nlevel = \"loud\"\n", 2, "log.level", "want debug, info, warn or error"},
		{"log format", "[log]\nformat = \"xml\"\n", 2, "log.format", "want text or json"},
		{"negative rate limit", "[log]\nrate_limit = -5\n", 2, "log.rate_limit", "want 0"},
		{"zero rate interval", "[log]\nrate_interval = \"0s\"\n", 2, "log.rate_interval", "at least 1ms"},
		{"ready policy", "ready = \"some\"\n", 1, "ready", "want all"},
		{"GPA pool kind", "[gpa]\npool = \"magic\"\n", 2, "gpa.pool", "want auto, off, sim or hugepage"},
		{"tcp forward without port", "[[hvsock]]\nport = 5\nto = \"tcp:host\"\n", 3, "hvsock[0].to", "want host:port"},
		{"hv_sock port forwarded twice", "[[hvsock]]\nport = 5\nto = \"unix:/a\"\n[[hvsock]]\nport = 5\nto = \"unix:/b\"\n", 5, "hvsock[1].port", "already forwarded by hvsock[0]"},
		{"listener used twice", "[[hvsock]]\nlisten = \"tcp:127.0.0.1:1\"\nto_port = 1\n[[hvsock]]\nlisten = \"tcp:127.0.0.1:1\"\nto_port = 2\n", 5, "hvsock[1].listen", "already used"},
		{"negative hv_sock port", "[[hvsock]]\nport = -1\n", 2, "hvsock[0].port", "out of range"},
		{"hv_sock port beyond 32 bits", "[[hvsock]]\nport = 4294967296\n", 2, "hvsock[0].port", "out of range"},
		{"unknown key in an entry", nic + "[[nic]]\ndevice = \"eth2\"\nqueus = 2\n", 5, "nic[1].queus", "unknown setting"},
		{"string for a number", nic + "queues = \"two\"\n", 3, "nic[0].queues", "incompatible types"},
		{"string for a bool", nic + "bind = \"yes\"\n", 3, "nic[0].bind", "incompatible types"},
		{"key given twice", nic + "mtu = 1500\nmtu = 9000\n", 4, "nic[0].mtu", "already been defined"},
		{"unterminated string", nic + "tap = \"vm0\n", 3, "nic[0].tap", "strings cannot contain newlines"},
		{"table instead of array of tables", "[nic]\ndevice = \"eth1\"\n", 1, "nic", "incompatible types"},
		{"deeply nested arrays", "a = " + strings.Repeat("[", 500) + strings.Repeat("]", 500) + "\n", 1, "a", "unknown setting"},
		{"huge device name", "[[nic]]\ndevice = \"" + strings.Repeat("x", 100000) + "\"\n", 2, "nic[0].device", "neither an instance GUID"},
		{"invalid UTF-8", "[[nic]]\ndevice = \"eth\xff\"\n", 2, "nic[0].device", "invalid UTF-8"},
		{"unknown VF mode", nic + "vf = \"sometimes\"\n", 3, "nic[0].vf", "want auto, off or required"},
		{"VF mode as a bool", nic + "vf = true\n", 3, "nic[0].vf", "want auto, off or required"},
		{"XDP setting with the VF off", nic + "vf = \"off\"\nvf_bind = \"copy\"\n", 4, "nic[0].vf_bind", "only with vf"},
		{"VF wait without a required VF", nic + "vf_timeout = \"1m\"\n", 3, "nic[0].vf_timeout", "only with vf = \"required\""},
		{"VF wait without a unit", nic + "vf = \"required\"\nvf_timeout = 30\n", 4, "nic[0].vf_timeout", "with a unit"},
		{"unknown XDP attach mode", nic + "vf_attach = \"skb\"\n", 3, "nic[0].vf_attach", "want auto, native or generic"},
		{"unknown XDP bind mode", nic + "vf_bind = \"zerocopy\"\n", 3, "nic[0].vf_bind", "want auto, zero-copy or copy"},
		{"negative VF queue", nic + "vf_queues = [0, -1]\n", 3, "nic[0].vf_queues", "queue id -1"},
		{"VF queue twice", nic + "vf_queues = [0, 1, 0]\n", 3, "nic[0].vf_queues", "listed twice"},
		{"busy poll without a unit", nic + "vf_busy_poll = 50\n", 3, "nic[0].vf_busy_poll", "want 1us"},
		{"busy poll budget alone", nic + "vf_busy_poll_budget = 64\n", 3, "nic[0].vf_busy_poll_budget", "only with vf_busy_poll"},
		{"NIC busy poll too long", nic + "busy_poll = \"1s\"\n", 3, "nic[0].busy_poll", "outside 0..10ms"},
		{"negative NIC busy poll", nic + "busy_poll = \"-5us\"\n", 3, "nic[0].busy_poll", "outside 0..10ms"},
		{"busy poll budget too large", nic + "vf_busy_poll = \"50us\"\nvf_busy_poll_budget = 70000\n", 4, "nic[0].vf_busy_poll_budget", "want 1 to 65535"},
	}
	if len(tests) < 30 {
		t.Fatalf("only %d cases", len(tests))
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("x.toml", tc.text)
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %v, want *Error", err)
			}
			if ce.Line != tc.line || ce.Key != tc.key || !strings.Contains(ce.Msg, tc.want) {
				t.Fatalf("got line %d key %q %q, want line %d key %q containing %q", ce.Line, ce.Key, ce.Msg, tc.line, tc.key, tc.want)
			}
			if tc.key != "" && !strings.HasPrefix(ce.Msg, tc.key+": ") {
				t.Fatalf("message %q does not start with the key %q", ce.Msg, tc.key)
			}
		})
	}
}

// TestLoadRefusesWhatIsNotAConfigFile: a FIFO (which would block), a
// device (which never ends), a directory, an oversized file and a path with
// a NUL are refused at once.
func TestLoadRefusesWhatIsNotAConfigFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.toml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.toml")
	if err := os.WriteFile(big, []byte("# "+strings.Repeat("x", MaxFileSize)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ path, want string }{
		{fifo, "not a regular file (a FIFO)"},
		{"/dev/zero", "not a regular file (a character device)"},
		{dir, "not a regular file (a directory)"},
		{big, "larger than the 1048576"},
		{filepath.Join(dir, "a\x00b"), "NUL"},
		{filepath.Join(dir, "missing.toml"), "no such file"},
	}
	for _, tc := range tests {
		t.Run(filepath.Base(tc.path), func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				_, err := Load(tc.path)
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("Load(%q): %v, want an error containing %q", tc.path, err, tc.want)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("Load(%q) blocked", tc.path)
			}
		})
	}
}

func TestWarnsAboutAMetricsAddressOffLoopback(t *testing.T) {
	for addr, warn := range map[string]bool{"127.0.0.1:9464": false, "[::1]:9464": false, "localhost:9464": false,
		"0.0.0.0:9464": true, ":9464": true, "10.1.2.3:9464": true} {
		c := Default()
		c.Metrics.Listen = addr
		if got := len(c.Warnings()) > 0; got != warn {
			t.Errorf("%s: warning %v, want %v (%q)", addr, got, warn, c.Warnings())
		}
	}
}

// TestVFSettings: the VF is paired by default (auto), and its settings
// reach the driver's configuration as they were written.
func TestVFSettings(t *testing.T) {
	c, err := Parse("vf.toml", `
[[nic]]
device = "eth1"

[[nic]]
device = "eth2"
vf = "off"

[[nic]]
device = "eth3"
vf = "required"
vf_timeout = "3m"
vf_queues = [0, 1]
vf_attach = "native"
vf_bind = "copy"
vf_busy_poll = "50us"
vf_busy_poll_budget = 64
`)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.NICs[0].Netvsc(); got.VF != netvsc.VFAuto || len(got.VFXDP.Queues) != 0 || got.VFTimeout != 0 {
		t.Fatalf("default: %+v, want auto with the driver's defaults", got)
	}
	if got := c.NICs[1].Netvsc().VF; got != netvsc.VFOff {
		t.Fatalf("vf = off: %v", got)
	}
	got := c.NICs[2].Netvsc()
	if got.VF != netvsc.VFRequired || got.VFTimeout != 3*time.Minute || !slices.Equal(got.VFXDP.Queues, []int{0, 1}) ||
		got.VFXDP.Attach != afxdp.AttachNative || got.VFXDP.Bind != afxdp.BindCopy ||
		got.VFXDP.BusyPoll != (afxdp.BusyPoll{Timeout: 50 * time.Microsecond, Budget: 64}) {
		t.Fatalf("required: %+v", got)
	}
	for _, m := range []VFMode{VFAuto, VFOff, VFRequired} {
		b, _ := m.MarshalText()
		var back VFMode
		if err := back.UnmarshalText(b); err != nil || back != m {
			t.Errorf("%v: round trip %q -> %v %v", m, b, back, err)
		}
	}
}

func TestNICEqual(t *testing.T) {
	tru, fals := true, false
	a := NIC{Device: "eth1", Queues: 2, Address: netip.MustParsePrefix("10.0.0.2/24")}
	b := a
	b.Bind = &tru
	if !a.Equal(b) {
		t.Fatal("bind unset and bind = true differ")
	}
	b.Bind = &fals
	if a.Equal(b) {
		t.Fatal("bind = false equals the default")
	}
	b = a
	b.MTU = 9000
	if a.Equal(b) {
		t.Fatal("a changed MTU is equal")
	}
	b = a
	b.VF = VFOff
	if a.Equal(b) {
		t.Fatal("a changed VF mode is equal")
	}
	a.VFQueues, b = []int{0, 1}, a
	b.VFQueues = []int{0, 1}
	if !a.Equal(b) {
		t.Fatal("the same VF queues in two slices differ")
	}
	b.VFQueues = []int{1, 0}
	if a.Equal(b) {
		t.Fatal("other VF queues are equal")
	}
	a.VFQueues, b.VFQueues = nil, []int{}
	if !a.Equal(b) {
		t.Fatal("no VF queues and an empty list differ")
	}
}

func FuzzParse(f *testing.F) {
	f.Add(good)
	f.Add("[[nic]]\ndevice = \"eth1\"\n")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := Parse("f.toml", s)
		if err == nil && c.Control.Socket == "" {
			t.Fatal("valid config without control socket")
		}
		if err == nil {
			for _, n := range c.NICs {
				if n.Netvsc().Validate() != nil {
					t.Fatalf("valid config with a NIC the driver refuses: %+v", n)
				}
			}
		}
	})
}

// TestContribExampleParses keeps the shipped example valid.
func TestContribExampleParses(t *testing.T) {
	c, err := Load("../../contrib/vmbusd.toml")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.NICs) != 1 || len(c.HvSock) != 2 {
		t.Fatalf("example: %+v", c)
	}
}
