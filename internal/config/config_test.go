package config

import (
	"errors"
	"strings"
	"testing"
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
	if len(c.NICs) != 3 || c.NICs[0].Queues != 2 || c.NICs[1].Queues != 1 || c.NICs[1].Mode != "hybrid" ||
		c.NICs[1].TAP != "" || c.NICs[0].TAP != "vm0" || !*c.NICs[2].Bind || len(c.HvSock) != 2 || c.Log.Level != "debug" {
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
		{"forward without peer", "[[nic]]\ndevice = \"eth1\"\nattach = \"forward\"\n", 0, "peer: missing"},
		{"unknown peer", "[[nic]]\ndevice = \"eth1\"\nattach = \"forward\"\npeer = \"eth9\"\n", 4, "not a configured NIC"},
		{"bad device", "[[nic]]\ndevice = \"this is not an interface\"\n", 2, "neither an instance GUID"},
		{"bad log level", "[log]\nlevel = \"loud\"\n", 2, "level"},
		{"bad metrics", "[metrics]\nlisten = \"9464\"\n", 2, "want host:port"},
		{"relative socket", "[control]\nsocket = \"ctl.sock\"\n", 2, "absolute path"},
		{"hvsock both", "[[hvsock]]\nport = 1\nto = \"unix:/a\"\nlisten = \"tcp:127.0.0.1:1\"\nto_port = 2\n", 2, "not both"},
		{"hvsock bad to", "[[hvsock]]\nport = 1\nto = \"udp:1.2.3.4:5\"\n", 3, "want unix or tcp"},
		{"hvsock relative unix", "[[hvsock]]\nport = 1\nto = \"unix:app.sock\"\n", 3, "absolute"},
		{"hvsock empty", "[[hvsock]]\n", 0, "empty entry"},
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

func FuzzParse(f *testing.F) {
	f.Add(good)
	f.Add("[[nic]]\ndevice = \"eth1\"\n")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := Parse("f.toml", s)
		if err == nil && c.Control.Socket == "" {
			t.Fatal("valid config without control socket")
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
