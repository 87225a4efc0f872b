package vmbus

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Kernel describes how the running uio_hv_generic behaves; the semantics
// changed three times (docs/protocol/vmbus-ring.md §1.4-1.5, docs/uio-contract.md §1.2).
// There is no sysfs feature flag, so it is derived from the kernel release.
type Kernel struct {
	Release string
	// ControlSignals: write(1) on the uio fd signals the host for a
	// non-monitored channel (6.10+). Before, it only unmasks.
	ControlSignals bool
	// ControlAll: irqcontrol applies to the primary and every sub-channel,
	// so one write(1) signals all non-monitored channels (6.16+).
	ControlAll bool
	// SubchannelInterrupts: host interrupts for sub-channels reach the
	// primary's uio fd (6.16+). Before, a sub-channel must never be
	// unmasked (the kernel callback would dereference NULL) and is polled.
	SubchannelInterrupts bool
	// KernelMasks: the kernel sets interrupt_mask at open and on every
	// interrupt (before 6.18); user space must clear it before sleeping.
	KernelMasks bool
}

// KernelForRelease maps a release string ("6.12.53-azure") to its uio
// semantics.
func KernelForRelease(release string) (Kernel, error) {
	rel := strings.TrimSpace(release)
	parts := strings.SplitN(rel, ".", 3)
	if len(parts) < 2 {
		return Kernel{}, fmt.Errorf("vmbus: kernel release %q: want MAJOR.MINOR", rel)
	}
	major, err1 := strconv.Atoi(parts[0])
	minorStr := parts[1]
	if i := strings.IndexFunc(minorStr, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		minorStr = minorStr[:i]
	}
	minor, err2 := strconv.Atoi(minorStr)
	if err1 != nil || err2 != nil {
		return Kernel{}, fmt.Errorf("vmbus: kernel release %q: want MAJOR.MINOR", rel)
	}
	v := major*1000 + minor
	return Kernel{
		Release:              rel,
		ControlSignals:       v >= 6010,
		ControlAll:           v >= 6016,
		SubchannelInterrupts: v >= 6016,
		KernelMasks:          v < 6018,
	}, nil
}

// DetectKernel reads root/proc/sys/kernel/osrelease. The simulated host
// writes one that matches its kernel profile.
func DetectKernel(root string) (Kernel, error) {
	b, err := os.ReadFile(filepath.Join(root, "proc/sys/kernel/osrelease"))
	if err != nil {
		return Kernel{}, fmt.Errorf("vmbus: detect kernel: %w", err)
	}
	return KernelForRelease(string(b))
}
