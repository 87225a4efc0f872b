package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vmbusd/vmbusd/internal/bind"
	"github.com/vmbusd/vmbusd/netvsc"
	"github.com/vmbusd/vmbusd/netvsc/nvsp"
	"github.com/vmbusd/vmbusd/netvsc/protoerr"
	"github.com/vmbusd/vmbusd/netvsc/rndis"
	"github.com/vmbusd/vmbusd/uio"
	"github.com/vmbusd/vmbusd/vmbus"
)

// TestClassifyFollowsTheErrorContract: each failure an incarnation can
// end with, as netvsc and the daemon's own steps return it (wrapped the
// way they wrap it), goes to the reaction its class calls for.
func TestClassifyFollowsTheErrorContract(t *testing.T) {
	ringViolation := &netvsc.DeviceError{Check: "vmbus: len8", Err: &vmbus.CorruptError{Kind: vmbus.CorruptLength, Off: 64, Val: 7}}
	tests := []struct {
		name string
		err  error
		want failureKind
	}{
		// Host violations, however deep: a ring violation inside the
		// DeviceError a dead NIC reports, an NVSP one at bring-up.
		{"ring violation of a running NIC", ringViolation, failViolation},
		{"ring violation wrapped by the supervisor", fmt.Errorf("open: %w", ringViolation), failViolation},
		{"NVSP violation at bring-up", fmt.Errorf("open: %w", &protoerr.Error{Msg: "SEND_RECV_BUF_COMPLETE",
			Kind: protoerr.KindSectionCount, Field: "NumSections", Val: 2}), failViolation},
		// Rescinds, bare or inside the DeviceError.
		{"rescind", &netvsc.DeviceError{Err: fmt.Errorf("channel 3: %w", vmbus.ErrRescinded)}, failRescind},
		{"uio rescind at open", fmt.Errorf("open: %w", uio.ErrRescinded), failRescind},
		// The host refusing or not answering.
		{"control timeout", fmt.Errorf("open: query link: %w", netvsc.ErrControlTimeout), failHost},
		{"RNDIS failure status", fmt.Errorf("open: %w", &netvsc.RNDISError{Request: "SET packet filter", Status: rndis.StatusFailure}), failHost},
		{"NVSP failure status", fmt.Errorf("open: %w", &netvsc.NVSPError{Request: "SEND_RECV_BUF", Status: nvsp.StatusFail}), failHost},
		{"failed control exchange of a running NIC", &netvsc.DeviceError{Err: errors.New("netvsc: control channel closed")}, failHost},
		{"liveness probe", fmt.Errorf("%w: %w", errHostSilent, netvsc.ErrControlTimeout), failHost},
		// A required VF that did not come.
		{"no VF", fmt.Errorf("open: %w within 30s", netvsc.ErrNoVF), failNoVF},
		// Local conditions that pass.
		{"stale GPA pool", fmt.Errorf("open: %w (/r/dev/guestmem)", netvsc.ErrGPAPoolStale), failTransient},
		{"TAP name still held", tapFailure(unix.EBUSY), failTransient},
		{"bind timed out", bindFailure(fmt.Errorf("wait for uio: %w", bind.ErrTimeout)), failTransient},
		{"TAP deleted under the NIC", transient(fmt.Errorf("data path: %w", unix.EBADFD)), failTransient},
		// The device not offered.
		{"device not found at bind", bindFailure(fmt.Errorf("eth1: %w", bind.ErrNotFound)), failAbsent},
		{"sysfs entry gone", bindFailure(&fs.PathError{Op: "open", Path: "/sys/x", Err: fs.ErrNotExist}), failAbsent},
		// Configuration and setup errors.
		{"management interface", bindFailure(fmt.Errorf("interface eth0: %w", bind.ErrManagement)), failConfig},
		{"TAP without privilege", tapFailure(unix.EPERM), failConfig},
		{"MTU the driver refuses", permanent(errors.New("netvsc: MTU 9500 outside 68..9202")), failConfig},
		// A permanent error stays permanent whatever it wraps.
		{"permanent over a timeout", permanent(fmt.Errorf("resolve: %w", netvsc.ErrControlTimeout)), failConfig},
		{"unknown setup error", fmt.Errorf("open: vmbus: open ring: %w", unix.ENOMEM), failConfig},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := classify(tc.err); got != tc.want {
				t.Fatalf("classify(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
