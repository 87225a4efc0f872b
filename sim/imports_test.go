package sim

import (
	"os/exec"
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
