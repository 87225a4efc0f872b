package vmbus

import (
	"fmt"
	"sync/atomic"
)

// Signaler tells the host that a channel has something for it: new packets
// on the guest-to-host ring, or freed space the host is waiting for.
type Signaler interface {
	Signal() error
}

// Monitor page layout (struct hv_monitor_page; docs/protocol/vmbus-ring.md §3.2).
const (
	MonitorPageSize      = 4096
	monitorTriggerGroups = 0x008 // [4]{pending u32, armed u32}
	monitorLatency       = 0x240 // [4][32]u16, units of 100 ns
	MaxMonitorID         = 128
)

// MonitorSignaler signals a monitored channel by setting its bit in the
// trigger group of the shared monitor page; the host scans the page
// periodically. It costs no system call.
type MonitorSignaler struct {
	pending *uint32
	bit     uint32
}

// NewMonitorSignaler returns a signaler for monitor id id on page.
func NewMonitorSignaler(page []byte, id int) (*MonitorSignaler, error) {
	if len(page) < MonitorPageSize || id < 0 || id >= MaxMonitorID {
		return nil, fmt.Errorf("vmbus: monitor id %d on a %d-byte page", id, len(page))
	}
	return &MonitorSignaler{pending: word32(page, monitorTriggerGroups+8*(id/32)), bit: 1 << (id % 32)}, nil
}

// Signal sets the channel's pending bit.
func (m *MonitorSignaler) Signal() error {
	atomic.OrUint32(m.pending, m.bit)
	return nil
}

// SetMonitorLatency writes the scan latency the guest asks of the host for
// monitor id id, as DPDK's rte_vmbus_set_latency does (netvsc default
// 50 µs). The latency words are u16 pairs; the write is done on the
// containing 4-byte word so it stays one atomic access.
func SetMonitorLatency(page []byte, id int, usec int) error {
	if len(page) < MonitorPageSize || id < 0 || id >= MaxMonitorID {
		return fmt.Errorf("vmbus: monitor id %d on a %d-byte page", id, len(page))
	}
	units := uint32(min(usec*10, 0xffff))
	off := monitorLatency + 2*id
	w := word32(page, off&^3)
	shift := uint32(off&2) * 8
	for {
		old := atomic.LoadUint32(w)
		nw := old&^(0xffff<<shift) | units<<shift
		if atomic.CompareAndSwapUint32(w, old, nw) {
			return nil
		}
	}
}

// MonitorLatency reads back the latency (in 100 ns units) for id.
func MonitorLatency(page []byte, id int) uint16 {
	off := monitorLatency + 2*id
	return uint16(atomic.LoadUint32(word32(page, off&^3)) >> (uint32(off&2) * 8))
}

// MonitorPeek reads the pending bits of trigger group g without clearing
// them.
func MonitorPeek(page []byte, g int) uint32 {
	return atomic.LoadUint32(word32(page, monitorTriggerGroups+8*g))
}

// MonitorPending atomically takes and clears the pending bits of trigger
// group g (the host side of the monitor page).
func MonitorPending(page []byte, g int) uint32 {
	return atomic.SwapUint32(word32(page, monitorTriggerGroups+8*g), 0)
}

// ControlFunc adapts an irqcontrol write to a Signaler: on a non-monitored
// channel the only way to signal the host is write(1) on the uio fd (6.10+).
type ControlFunc func(enable bool) error

// Signal writes 1.
func (f ControlFunc) Signal() error { return f(true) }
