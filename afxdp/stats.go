package afxdp

import "sync/atomic"

// Stats is a snapshot of one socket's counters. The first group is kept
// by this package; the Kernel… fields are the kernel's own counters for
// the socket (XDP_STATISTICS), zero where the kernel could not be asked.
type Stats struct {
	RxPackets   uint64 // frames copied out by Recv
	RxBytes     uint64
	RxTooLong   uint64 // frames dropped by Recv because the caller's buffer was shorter
	TxPackets   uint64 // frames queued by Send
	TxBytes     uint64
	TxRingFull  uint64 // Send calls that could not take every frame: TX ring or TX frames exhausted
	InvalidDesc uint64 // ring entries or indices from the kernel that failed validation
	RxWakeups   uint64 // recvfrom calls: need-wakeup on the fill ring, busy polling, probes
	TxWakeups   uint64 // sendto calls that kicked the kernel's transmit
	Waits       uint64 // times Wait blocked in poll

	KernelRxDropped     uint64 // frames the kernel dropped for this socket (any reason)
	KernelRxInvalid     uint64 // fill ring entries the kernel refused
	KernelTxInvalid     uint64 // TX descriptors the kernel refused
	KernelRxRingFull    uint64 // frames dropped because the RX ring was full
	KernelFillRingEmpty uint64 // times the kernel found the fill ring empty
	KernelTxRingEmpty   uint64 // times the kernel found the TX ring empty
}

// counters are the live counters behind Stats: plain atomics, added to
// once per batch, read at any time from any goroutine.
type counters struct {
	rxPackets, rxBytes, rxTooLong     atomic.Uint64
	txPackets, txBytes, txRingFull    atomic.Uint64
	invalidDesc, rxWakeups, txWakeups atomic.Uint64
	waits                             atomic.Uint64
}

func (c *counters) snapshot() Stats {
	return Stats{
		RxPackets:   c.rxPackets.Load(),
		RxBytes:     c.rxBytes.Load(),
		RxTooLong:   c.rxTooLong.Load(),
		TxPackets:   c.txPackets.Load(),
		TxBytes:     c.txBytes.Load(),
		TxRingFull:  c.txRingFull.Load(),
		InvalidDesc: c.invalidDesc.Load(),
		RxWakeups:   c.rxWakeups.Load(),
		TxWakeups:   c.txWakeups.Load(),
		Waits:       c.waits.Load(),
	}
}
