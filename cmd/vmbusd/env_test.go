package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/vmbusd/vmbusd/internal/config"
)

// TestFlagsFromEnvironment: every root, socket, state and configuration
// flag takes its default from its environment variable, says so in its
// help, and loses to the flag on the command line.
func TestFlagsFromEnvironment(t *testing.T) {
	for _, tc := range []struct {
		flag, env string
		def       map[string]string // command -> default without the variable
	}{
		{"root", "VMBUSD_ROOT", map[string]string{"devices": "/", "bind": "/", "unbind": "/", "restore": "/", "check": "/", "run": "", "sim": ""}},
		{"control", "VMBUSD_CONTROL", map[string]string{"status": config.DefaultControlSocket, "stats": config.DefaultControlSocket,
			"capture": config.DefaultControlSocket, "devices": config.DefaultControlSocket, "run": ""}},
		{"state-dir", "VMBUSD_STATE_DIR", map[string]string{"bind": "", "unbind": "", "restore": ""}},
		{"config", "VMBUSD_CONFIG", map[string]string{"run": "", "restore": ""}},
	} {
		for name, def := range tc.def {
			for _, c := range []struct {
				what, env string
				args      []string
				want      string
			}{
				{"default", "", nil, def},
				{"environment", "/from/env", nil, "/from/env"},
				{"flag over environment", "/from/env", []string{"--" + tc.flag, "/from/flag"}, "/from/flag"},
				{"flag=value over environment", "/from/env", []string{"--" + tc.flag + "=/from/flag"}, "/from/flag"},
			} {
				t.Run(name+"/"+tc.flag+"/"+c.what, func(t *testing.T) {
					t.Setenv(tc.env, c.env)
					fs, _ := commandFlags(t, name, c.args)
					f := fs.Lookup(tc.flag)
					if f == nil {
						t.Fatalf("vmbusd %s has no --%s", name, tc.flag)
					}
					if got := f.Value.String(); got != c.want {
						t.Errorf("--%s = %q, want %q", tc.flag, got, c.want)
					}
					if !strings.Contains(f.Usage, "env "+tc.env) {
						t.Errorf("--%s's help does not name %s: %q", tc.flag, tc.env, f.Usage)
					}
				})
			}
		}
	}
}

// commandFlags parses args with the named command's own flag set (its
// --help hands the set over to a flagSink) and returns it.
func commandFlags(t *testing.T, name string, args []string) (*pflag.FlagSet, string) {
	t.Helper()
	for _, c := range commands() {
		if c.name == name {
			sink := &flagSink{Writer: io.Discard}
			c.run(context.Background(), append(args, "--help"), sink)
			if sink.fs == nil {
				t.Fatalf("vmbusd %s %v --help gave no flag set", name, args)
			}
			return sink.fs, sink.synopsis
		}
	}
	t.Fatalf("no command %s", name)
	return nil, ""
}

// TestRunRootPrecedence: for run, a flag wins over the configuration
// file, which wins over the environment; VMBUSD_CONFIG names the file.
func TestRunRootPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file.toml")
	other := filepath.Join(dir, "other.toml")
	for p, root := range map[string]string{file: "fileroot", other: "otherroot"} {
		if err := os.WriteFile(p, []byte(fmt.Sprintf("root = %q\n", filepath.Join(dir, root))), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, errDefault := os.Stat(defaultConfigPath)
	for _, c := range []struct {
		name          string
		root, config  string // the environment
		args          []string
		wantFile, got string
	}{
		{"VMBUSD_CONFIG names the file", "", file, nil, file, "fileroot"},
		{"--config over VMBUSD_CONFIG", "", file, []string{"--config", other}, other, "otherroot"},
		{"the file over VMBUSD_ROOT", "envroot", file, nil, file, "fileroot"},
		{"--root over the file", "envroot", file, []string{"--root", filepath.Join(dir, "flagroot")}, file, "flagroot"},
		{"VMBUSD_ROOT without a file", "envroot", "", nil, "the default configuration", "envroot"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.config == "" && errDefault == nil {
				t.Skipf("%s exists: the default file applies", defaultConfigPath)
			}
			env := map[string]string{"VMBUSD_ROOT": "", "VMBUSD_CONFIG": c.config}
			if c.root != "" {
				env["VMBUSD_ROOT"] = filepath.Join(dir, c.root)
			}
			for k, v := range env {
				t.Setenv(k, v)
			}
			var out, errs bytes.Buffer
			if code := run(append([]string{"run", "--check-config"}, c.args...), &out, &errs); code != exitOK {
				t.Fatalf("exit %d\n%s%s", code, out.String(), errs.String())
			}
			want := fmt.Sprintf("%s: OK (0 NICs, 0 hv_sock forwards, state in %s)", c.wantFile, filepath.Join(dir, c.got, "run/vmbusd"))
			if !strings.Contains(out.String(), want) {
				t.Errorf("got %q, want %q", out.String(), want)
			}
		})
	}
}
