package bus

import (
	"fmt"
	"os"
)

// NewTemp is New with a fresh root directory of its own, which Close
// removes: the host for an example, a test or a short-lived demo, so that
// nothing is left behind and two of them never share a root. The root is
// on tmpfs (/dev/shm) when the system has one, as the uio contract wants
// R, else under os.TempDir(). cfg.Root must be empty.
func NewTemp(cfg Config) (*Host, error) {
	if cfg.Root != "" {
		return nil, fmt.Errorf("sim: NewTemp chooses the root itself (got %s)", cfg.Root)
	}
	base := ""
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		base = "/dev/shm"
	}
	root, err := os.MkdirTemp(base, "vmbusd-sim-")
	if err != nil {
		return nil, fmt.Errorf("sim: temporary root: %w", err)
	}
	cfg.Root = root
	h, err := New(cfg)
	if err != nil {
		os.RemoveAll(root)
		return nil, err
	}
	h.removeRoot = true
	return h, nil
}
