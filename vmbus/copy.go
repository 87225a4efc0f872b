package vmbus

import "math"

// Ring data is copied between private buffers and memory that the peer, on
// another core, reads or writes at the same time. For large blocks how the
// bytes are stored decides the speed. Ordinary stores (the vector loops of
// Go's copy) must first take ownership of every destination cache line,
// fetching its old contents (read for ownership), and in a ring those lines
// were last read by the peer's core. x86's REP MOVSB writes whole lines
// without fetching them. Go 1.26's copy uses REP MOVS only on Intel CPUs
// with ERMS and FSRM; on AMD it always runs its AVX loop, and a 64 KiB
// record was written into a 2 MiB ring at a fifth of REP MOVSB's speed
// (write-ns/pkt-p50 of BenchmarkRingCrossCore on an AMD EPYC: 9.1 against
// 1.8 us). glibc's memcpy, which DPDK's ring code calls, uses REP MOVSB from
// about 2 KiB on the same CPU.
//
// The price: when the lines are in this core's own cache (both ends on one
// core, BenchmarkRingWrite and BenchmarkRingRead), REP MOVSB is slower than
// the vector loop from 4 to 16 KiB (by 12-60% on that EPYC) and faster only
// from about 64 KiB. A ring's two ends normally run on different cores.
//
// So a block of at least bulkCopyMin bytes goes through bulkCopy, which uses
// the CPU's fastest large copy; bulkCopyMin is chosen per CPU at start-up
// (copy_amd64.go) and is noBulk where there is nothing faster than copy.

// noBulk is a bulkCopyMin that disables bulkCopy.
const noBulk = math.MaxInt

// copyData is copy(dst, src) for ring data, through bulkCopy from
// r.bulkMin bytes on.
func (r *ring) copyData(dst, src []byte) int {
	if len(src) >= r.bulkMin && len(dst) >= r.bulkMin {
		return bulkCopy(dst, src)
	}
	return copy(dst, src)
}
