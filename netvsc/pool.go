package netvsc

import (
	"fmt"

	"github.com/vmbusd/vmbusd/frame"
	"github.com/vmbusd/vmbusd/netvsc/rndis"
)

// Headroom reserved in front of each frame: a PACKET_MSG header and every
// per-packet info this package writes, rounded up.
const Headroom = (rndis.MaxPacketHeaderLen + 63) &^ 63

// gpaWindow is a pool's Backing when its buffers are carved from a GPA
// pool: where its memory starts there.
type gpaWindow struct {
	gpa *GPAPool
	off int
}

// NewPool returns a pool of n buffers, each holding Headroom plus frame
// bytes. With gpa set the buffers are carved from it (and frames in them
// can be sent GPA-direct); otherwise from the Go heap.
func NewPool(n, frameLen int, gpa *GPAPool) (*frame.Pool, error) {
	c := frame.PoolConfig{Buffers: n, Frame: frameLen, Headroom: Headroom}
	if n > 0 && frameLen > 0 && gpa != nil {
		off, mem, err := gpa.carve(c.MemSize())
		if err != nil {
			return nil, err
		}
		c.Mem, c.Backing = mem, &gpaWindow{gpa: gpa, off: off}
	}
	p, err := frame.NewPool(c)
	if err != nil {
		return nil, fmt.Errorf("netvsc: %w", err)
	}
	return p, nil
}

// gpaBacked reports whether pk's buffer is carved from a GPA pool.
func gpaBacked(pk *frame.Packet) bool {
	_, ok := pk.Pool().Backing().(*gpaWindow)
	return ok
}

// gpaOf returns the guest-physical page numbers and in-page offset of
// pk's frame; ok is false when its pool is not GPA-backed.
func gpaOf(pk *frame.Packet, pfns []uint64) (pageOff uint32, out []uint64, ok bool) {
	w, ok := pk.Pool().Backing().(*gpaWindow)
	if !ok {
		return 0, pfns, false
	}
	return w.gpa.ranges(w.off+pk.Pool().Offset(pk), pk.Len(), pfns)
}
