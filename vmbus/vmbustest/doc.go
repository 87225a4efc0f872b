// Package vmbustest connects a guest vmbus.Channel to a host one over heap
// memory, with an in-process signaller, so that a driver's unit tests can
// drive the host end of its channel directly, without the simulated host's
// sysfs tree, uio socket and shared-memory files.
//
// Both ends are real vmbus.Channels running the real ring code on one ring
// pair, the host attached from the other end (ChannelConfig.HostSide), so
// signalling follows the ring's own rules: a writer interrupts its peer
// only when a commit takes the ring from empty to non-empty with the
// peer's interrupt mask clear, and a reader signals a blocked writer only
// when its pending_send_sz becomes free (with the feature bit on the ring).
// The signaller only carries the signals those rules raise: a host signal
// is the guest's interrupt (the uio fd's wake-up of every channel, as
// vmbus.Handle delivers it), a guest signal wakes the host end.
//
// Where the guest's kernel matters (Options.Kernel), it follows
// uio_hv_generic's semantics for that release: before 6.18 each interrupt
// masks the guest's inbound ring; before 6.16 a sub-channel's interrupts
// never reach the guest, which then polls it.
//
// For corruption and flow-control tests the host end can misbehave: it can
// publish a packet or index that breaks each ring rule (Host.WriteCorrupt,
// one per vmbus.CorruptKind), stop reading (FaultStopReading), lose its
// interrupts (FaultNoInterrupts), or rescind the channel (Pair.Rescind).
//
// The full simulator (package sim) remains the host of integration tests:
// it also models discovery, the uio contract, the monitor page and
// sub-channel offers, none of which a Pair has.
package vmbustest
