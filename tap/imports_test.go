package tap

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportsNoDriver keeps tap a frame port: it speaks frame.Packet and
// must not depend on a NIC driver (nictap is the glue that knows both);
// rawio, a leaf that only makes system calls, is the one other package.
func TestImportsNoDriver(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command in PATH")
	}
	out, err := exec.Command(gobin, "list", "-deps", "-f", "{{.ImportPath}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	const mod = "github.com/vmbusd/vmbusd/"
	for _, p := range strings.Fields(string(out)) {
		rel, ok := strings.CutPrefix(p, mod)
		if ok && rel != "tap" && rel != "frame" && rel != "rawio" && !strings.HasPrefix(rel, "frame/") {
			t.Errorf("tap depends on %s", p)
		}
	}
}
