package bus

import (
	"context"
	"log/slog"

	"github.com/vmbusd/vmbusd/vmbus"
)

// The services behind devices (the NetVSP, the hv_sock host) live in
// their own packages and share the host's lifetime, log and violation
// counts through these.

// Context is done when the host closes.
func (h *Host) Context() context.Context { return h.ctx }

// Logger is the host's logger; a service adds its own attributes.
func (h *Host) Logger() *slog.Logger { return h.log }

// Go runs f on a goroutine that Close waits for, after cancelling
// Context: a service's loop that must stop with the host.
func (h *Host) Go(f func()) {
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		f()
	}()
}

// Violation counts a broken host rule against dev's guest and logs it (the
// first few times, then at powers of two); Violations reports the counts.
func (h *Host) Violation(dev vmbus.GUID, what string) { h.violation(dev, what) }

// Rescinded reports whether the host has taken d away.
func (d *Device) Rescinded() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.rescinded
}
