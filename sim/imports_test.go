package sim

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestImportsNoGuestDriver keeps the simulated host (every package under
// sim/) on the wire packages:
// it may encode and decode what the guest drivers send (netvsc/nvsp,
// netvsc/rndis, hvsock/wire) but must not depend on a driver or on the
// daemon's internal packages, so no host rule can lean on guest code.
func TestImportsNoGuestDriver(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command in PATH")
	}
	out, err := exec.Command(gobin, "list", "-deps", "-f", "{{.ImportPath}}", "./...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	const mod = "github.com/vmbusd/vmbusd/"
	drivers := map[string]bool{"netvsc": true, "hvsock": true, "afxdp": true, "tap": true}
	for _, p := range strings.Fields(string(out)) {
		rel, ok := strings.CutPrefix(p, mod)
		if ok && (drivers[rel] || strings.HasPrefix(rel, "internal/")) {
			t.Errorf("sim depends on %s", p)
		}
	}
}

// TestImportsPointDown keeps the split by role a layering: each package
// under sim/ may depend only on the ones below it, so no role leans on
// another sideways (the NetVSP never on the hv_sock host) and nothing
// below the assembled host depends on it. A new package must be given its
// place here.
func TestImportsPointDown(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command in PATH")
	}
	out, err := exec.Command(gobin, "list", "-f", "{{.ImportPath}} {{join .Deps \" \"}}", "./...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	const sim = "github.com/vmbusd/vmbusd/sim"
	below := map[string][]string{
		"":            {"bus", "hvsockhost", "netvsp", "vswitch"},
		"/netvsp":     {"bus", "vswitch"},
		"/hvsockhost": {"bus"},
		"/vswitch":    nil,
		"/bus":        nil,
	}
	seen := 0
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		rel, ok := strings.CutPrefix(f[0], sim)
		if !ok {
			continue
		}
		allowed, ok := below[rel]
		if !ok {
			t.Errorf("%s has no place in the layering", f[0])
			continue
		}
		seen++
		for _, d := range f[1:] {
			dep, ok := strings.CutPrefix(d, sim+"/")
			if ok && !slices.Contains(allowed, dep) {
				t.Errorf("%s depends on %s, which is not below it", f[0], d)
			}
		}
	}
	if seen != len(below) {
		t.Errorf("go list showed %d of the %d packages of the layering", seen, len(below))
	}
}
