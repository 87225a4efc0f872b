package daemon_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/vmbusd/vmbusd/internal/config"
	"github.com/vmbusd/vmbusd/internal/daemon"
	"github.com/vmbusd/vmbusd/internal/jsonshape"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/control-api-keys.golden")

// apiDocuments are the documents docs/control-api.md describes.
var apiDocuments = []reflect.Type{
	reflect.TypeFor[daemon.Status](), reflect.TypeFor[daemon.Stats](),
	reflect.TypeFor[daemon.Devices](), reflect.TypeFor[daemon.APIError](),
	reflect.TypeFor[daemon.Checks](),
}

// docSections reads docs/control-api.md into its "### Name" sections.
func docSections(t *testing.T) (string, map[string]string) {
	t.Helper()
	b, err := os.ReadFile("../../docs/control-api.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	sections := map[string]string{}
	parts := strings.Split(doc, "\n### ")
	for _, p := range parts[1:] {
		name, body, _ := strings.Cut(p, "\n")
		body, _, _ = strings.Cut(body, "\n## ")
		sections[strings.TrimSpace(name)] = body
	}
	return doc, sections
}

var docRow = regexp.MustCompile("(?m)^\\| `([^`]+)` \\|")

// TestAPIKeysAreDocumented: every key of every document is snake_case,
// never omitted (no omitempty), and has a row in its type's section of
// docs/control-api.md; every row there names a key that exists.
func TestAPIKeysAreDocumented(t *testing.T) {
	doc, sections := docSections(t)
	var seen []reflect.Type
	for _, d := range apiDocuments {
		for _, st := range jsonshape.Structs(d) {
			if slices.Contains(seen, st) {
				continue
			}
			seen = append(seen, st)
			body, ok := sections[st.Name()]
			if !ok {
				t.Errorf("docs/control-api.md has no section ### %s", st.Name())
				continue
			}
			var keys []string
			for _, f := range jsonshape.Fields(st) {
				keys = append(keys, f.Key)
				if !jsonshape.SnakeCase(f.Key) {
					t.Errorf("%s: key %q is not snake_case", st.Name(), f.Key)
				}
				if len(f.Options) > 0 {
					t.Errorf("%s: key %q has options %q: every key is always present", st.Name(), f.Key, f.Options)
				}
				if !strings.Contains(body, "| `"+f.Key+"` |") {
					t.Errorf("docs/control-api.md: ### %s has no row for %q", st.Name(), f.Key)
				}
			}
			for _, m := range docRow.FindAllStringSubmatch(body, -1) {
				if !slices.Contains(keys, m[1]) {
					t.Errorf("docs/control-api.md: ### %s documents %q, which %s does not have", st.Name(), m[1], st)
				}
			}
		}
	}
	for _, e := range daemon.Endpoints {
		if !strings.Contains(doc, "### `"+e+"`") {
			t.Errorf("docs/control-api.md does not document the endpoint %s", e)
		}
	}
	if !strings.Contains(doc, fmt.Sprintf("(now **%d**)", daemon.SchemaVersion)) {
		t.Errorf("docs/control-api.md does not give schema_version %d", daemon.SchemaVersion)
	}
}

// TestAPIKeysGolden holds the key paths of every document: a key that
// disappears or is renamed breaks clients, which needs a new
// schema_version (and go test -run TestAPIKeysGolden -update).
func TestAPIKeysGolden(t *testing.T) {
	var b strings.Builder
	fmt.Fprintf(&b, "# schema_version %d\n", daemon.SchemaVersion)
	for _, d := range apiDocuments {
		for _, p := range jsonshape.Paths(d) {
			fmt.Fprintf(&b, "%s %s\n", d.Name(), p)
		}
	}
	const path = "testdata/control-api-keys.golden"
	if *updateGolden {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(b.String(), "\n")
	for _, line := range strings.Split(string(want), "\n") {
		if !slices.Contains(got, line) {
			t.Errorf("%q is gone: a removed or renamed key needs a new schema_version; then run with -update", line)
		}
	}
	if b.String() != string(want) {
		t.Errorf("keys differ from %s (added keys are compatible: run with -update)", path)
	}
}

// TestAPIDocumentsHaveEveryKey reads the live documents from the control
// socket and checks each against its type: every key present, none
// added, no null list or map.
func TestAPIDocumentsHaveEveryKey(t *testing.T) {
	r := newRig(t)
	cfg := r.config()
	cfg.HvSock = []config.HvSock{{Listen: config.Addr{Network: "tcp", Address: "127.0.0.1:0"}, ToPort: 5000, MaxConnections: 4}}
	r.startWith(t, cfg)
	waitFor(t, "traffic", func() bool { return forwarded(r) > 100 })
	sock := cfg.Control.Socket
	for _, tc := range []struct {
		method, path string
		code         int
		doc          reflect.Type
	}{
		{"GET", "/v1/status", 200, reflect.TypeFor[daemon.Status]()},
		{"GET", "/v1/stats", 200, reflect.TypeFor[daemon.Stats]()},
		{"GET", "/v1/nothing", 404, reflect.TypeFor[daemon.APIError]()},
		{"POST", "/v1/stats", 405, reflect.TypeFor[daemon.APIError]()},
		{"GET", "/v1/capture?queue=7", 400, reflect.TypeFor[daemon.APIError]()},
		{"GET", "/v1/capture?filter=udp+and+prot+53", 400, reflect.TypeFor[daemon.APIError]()},
		{"GET", "/v1/capture?device=eth9", 404, reflect.TypeFor[daemon.APIError]()},
	} {
		code, body := controlRequest(t, sock, tc.method, tc.path)
		if code != tc.code {
			t.Errorf("%s %s: %d, want %d\n%s", tc.method, tc.path, code, tc.code, body)
			continue
		}
		if err := jsonshape.Check(body, tc.doc); err != nil {
			t.Errorf("%s %s: %v\n%.2000s", tc.method, tc.path, err, body)
		}
		if strings.Contains(string(body), `\u00`) {
			t.Errorf("%s %s: HTML escaping is on:\n%.2000s", tc.method, tc.path, body)
		}
	}
}

// controlRequest sends one request over the control socket.
func controlRequest(t *testing.T, sock, method, path string) (int, []byte) {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	req, _ := http.NewRequest(method, "http://vmbusd"+path, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}
