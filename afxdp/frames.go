package afxdp

// Frame ownership. A socket owns a contiguous run of UMEM frames: the
// first half receives (each frame cycles fill ring -> kernel -> RX ring ->
// copied out -> fill ring), the second half transmits (free list -> TX
// ring -> kernel -> completion ring -> free list). A state byte per frame
// records who holds it, so a descriptor from the kernel is accepted only
// for a frame the kernel was given, in the half its ring may name.

const (
	frameOurs   uint8 = iota // free for TX, or being copied out of RX
	frameInFill              // given to the kernel through the fill ring
	frameInTx                // given to the kernel through the TX ring
)

type frames struct {
	shift   uint   // log2 of the frame size
	size    uint64 // frame size in bytes, a power of two
	first   uint32 // index of the socket's first frame in the UMEM
	rxCount uint32 // frames [first, first+rxCount) receive
	txCount uint32 // frames [first+rxCount, first+rxCount+txCount) transmit
	txOff   uint64 // where TX data starts inside a frame
	state   []uint8
	free    []uint32 // TX frames we hold, as frame indices; a stack
}

func newFrames(shift uint, first, rxCount, txCount uint32, txOff uint64) frames {
	f := frames{
		shift:   shift,
		size:    1 << shift,
		first:   first,
		rxCount: rxCount,
		txCount: txCount,
		txOff:   txOff,
		state:   make([]uint8, rxCount+txCount),
		free:    make([]uint32, 0, txCount),
	}
	for i := txCount; i > 0; i-- {
		f.free = append(f.free, first+rxCount+i-1)
	}
	return f
}

// checkRX validates an RX descriptor and returns the frame's index
// relative to first. It accepts only a frame of the RX half that is in
// the kernel's hands, with the data inside that frame.
func (f *frames) checkRX(addr uint64, length, options uint32) (uint32, Kind) {
	idx := addr >> f.shift
	if idx < uint64(f.first) || idx-uint64(f.first) >= uint64(f.rxCount) {
		return 0, KindAddr
	}
	rel := uint32(idx - uint64(f.first))
	off := addr & (f.size - 1)
	if length == 0 || uint64(length) > f.size-off {
		return 0, KindLen
	}
	if options != 0 {
		return 0, KindOptions
	}
	if f.state[rel] != frameInFill {
		return 0, KindOwner
	}
	return rel, 0
}

// checkCompletion validates a completion address and returns the frame's
// index relative to first: a frame of the TX half, sent by us, with the
// address it was sent with.
func (f *frames) checkCompletion(addr uint64) (uint32, Kind) {
	idx := addr >> f.shift
	if idx < uint64(f.first)+uint64(f.rxCount) || idx-uint64(f.first) >= uint64(f.rxCount)+uint64(f.txCount) {
		return 0, KindAddr
	}
	if addr&(f.size-1) != f.txOff {
		return 0, KindTxAddr
	}
	rel := uint32(idx - uint64(f.first))
	if f.state[rel] != frameInTx {
		return 0, KindOwner
	}
	return rel, 0
}

// addrOf returns the UMEM offset of frame rel (relative to first).
func (f *frames) addrOf(rel uint32) uint64 {
	return uint64(f.first+rel) << f.shift
}
