package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/vmbusd/vmbusd/internal/daemon"
	"github.com/vmbusd/vmbusd/internal/jsonshape"
)

// TestCheckJSON: check --json prints the Checks document with every key
// present, snake_case names and verdicts, and keeps check's exit code.
func TestCheckJSON(t *testing.T) {
	for _, c := range []struct {
		name   string
		setup  func(root string)
		code   int
		status map[string]string
	}{
		{"no vmbus", func(string) {}, exitFailure, map[string]string{"vmbus": "fail", "uio_hv_generic": "fail", "default_route": "ok"}},
		{"an empty bus", func(root string) {
			for _, d := range []string{"sys/bus/vmbus/devices", "sys/bus/vmbus/drivers/uio_hv_generic", "proc/sys/kernel"} {
				os.MkdirAll(filepath.Join(root, d), 0o755)
			}
			os.WriteFile(filepath.Join(root, "proc/sys/kernel/osrelease"), []byte("6.8.0-azure\n"), 0o644)
		}, exitOK, map[string]string{"vmbus": "ok", "uio_hv_generic": "ok", "kernel": "ok", "default_route": "ok"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			c.setup(root)
			var out, errs bytes.Buffer
			if code := run([]string{"check", "--json", "--root", root}, &out, &errs); code != c.code {
				t.Fatalf("exit %d, want %d\n%s%s", code, c.code, out.String(), errs.String())
			}
			if err := jsonshape.Check(out.Bytes(), reflect.TypeFor[daemon.Checks]()); err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			var doc daemon.Checks
			if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
				t.Fatal(err)
			}
			if doc.SchemaVersion != daemon.SchemaVersion || doc.OK != (c.code == exitOK) || doc.Root != root {
				t.Errorf("schema_version %d, ok %v, root %q", doc.SchemaVersion, doc.OK, doc.Root)
			}
			got := map[string]string{}
			for _, i := range doc.Checks {
				if !jsonshape.SnakeCase(i.Name) {
					t.Errorf("check name %q is not snake_case", i.Name)
				}
				got[i.Name] = i.Status
			}
			for name, want := range c.status {
				if got[name] != want {
					t.Errorf("%s: %q, want %q (all: %v)", name, got[name], want, got)
				}
			}
		})
	}
}
