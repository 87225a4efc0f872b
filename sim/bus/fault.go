package bus

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/bits"
	"strings"
	"sync/atomic"
	"time"

	"github.com/vmbusd/vmbusd/vmbus"
)

// Fault is a host misbehaviour the simulator can inject, one switch per
// check the guest makes on host data (docs/protocol/vmbus-ring.md design lesson 13).
type Fault uint32

const (
	// One-shot: the next batch the host publishes carries the fault.
	FaultCorruptWriteIndex Fault = 1 << iota // a write index past the data area
	FaultBadLen8                             // a packet with len8 < offset8
	FaultBadOffset8                          // a packet with offset8 < 2
	FaultBadType                             // a packet of an unused type
	FaultBadFlags                            // a packet with an undefined flag
	FaultBadRanges                           // a transfer-page packet whose range table overflows its header

	// Lasting, while switched on.
	FaultSpuriousInterrupts // interrupts with nothing new, every millisecond
	FaultMissingInterrupts  // interrupts the host owes are never raised
	FaultStopDraining       // the host stops reading the guest's rings
	FaultSlowHost           // every batch is delayed (SetSlowDelay)
	// FaultSplitSubchannelID: offered sub-channels get their
	// subchannel_id in two writes, as an independent host on a plain
	// file system might: the attribute is empty until splitIDDelay after
	// the ring appears (a real sysfs attribute reads whole).
	FaultSplitSubchannelID

	faultEnd
)

const oneShot = FaultCorruptWriteIndex | FaultBadLen8 | FaultBadOffset8 | FaultBadType | FaultBadFlags | FaultBadRanges

var faultNames = map[Fault]string{
	FaultCorruptWriteIndex:  "corrupt-write-index",
	FaultBadLen8:            "bad-len8",
	FaultBadOffset8:         "bad-offset8",
	FaultBadType:            "bad-type",
	FaultBadFlags:           "bad-flags",
	FaultBadRanges:          "bad-ranges",
	FaultSpuriousInterrupts: "spurious-interrupts",
	FaultMissingInterrupts:  "missing-interrupts",
	FaultStopDraining:       "stop-draining",
	FaultSlowHost:           "slow-host",
	FaultSplitSubchannelID:  "split-subchannel-id",
}

func (f Fault) String() string {
	if n, ok := faultNames[f]; ok {
		return n
	}
	return fmt.Sprintf("fault(%#x)", uint32(f))
}

// AllFaults lists every fault.
func AllFaults() []Fault {
	var fs []Fault
	for f := Fault(1); f < faultEnd; f <<= 1 {
		fs = append(fs, f)
	}
	return fs
}

// ParseFault takes a fault's name as String prints it.
func ParseFault(s string) (Fault, error) {
	for f, n := range faultNames {
		if n == s {
			return f, nil
		}
	}
	var names []string
	for _, f := range AllFaults() {
		names = append(names, f.String())
	}
	return 0, fmt.Errorf("sim: unknown fault %q (valid: %s)", s, strings.Join(names, ", "))
}

// Faults holds a device's fault switches. Safe for concurrent use.
type Faults struct {
	on    atomic.Uint32
	delay atomic.Int64
	hits  [32]atomic.Uint64
	spur  atomic.Bool // the spurious-interrupt generator runs
}

// Has reports whether f is switched on.
func (f *Faults) Has(x Fault) bool { return Fault(f.on.Load())&x != 0 }

// Hits returns how many times fault x took effect.
func (f *Faults) Hits(x Fault) uint64 { return f.hits[bits.TrailingZeros32(uint32(x))].Load() }

func (f *Faults) count(x Fault) { f.hits[bits.TrailingZeros32(uint32(x))].Add(1) }

// take clears a one-shot fault and reports whether it was on.
func (f *Faults) take(x Fault) bool {
	for {
		v := f.on.Load()
		if Fault(v)&x == 0 {
			return false
		}
		if f.on.CompareAndSwap(v, v&^uint32(x)) {
			f.count(x)
			return true
		}
	}
}

// SetFault switches a fault on or off for this device.
func (d *Device) SetFault(x Fault, on bool) {
	f := &d.faults
	for {
		v := f.on.Load()
		nv := v &^ uint32(x)
		if on {
			nv |= uint32(x)
		}
		if f.on.CompareAndSwap(v, nv) {
			break
		}
	}
	d.host.log.Info("fault", "device", d.cfg.Instance.String(), "fault", x.String(), "on", on)
	if on && x == FaultSpuriousInterrupts && f.spur.CompareAndSwap(false, true) {
		go d.runSpurious()
	}
}

// SetSlowDelay sets the per-batch delay of FaultSlowHost.
func (d *Device) SetSlowDelay(t time.Duration) { d.faults.delay.Store(int64(t)) }

// runSpurious raises interrupts with nothing behind them while the fault is on.
func (d *Device) runSpurious() {
	defer d.faults.spur.Store(false)
	for d.faults.Has(FaultSpuriousInterrupts) {
		if s := d.Session(); s != nil {
			s.conn.Notify()
			d.faults.count(FaultSpuriousInterrupts)
		}
		select {
		case <-time.After(time.Millisecond):
		case <-d.host.ctx.Done():
			return
		}
	}
}

// Throttle is called by services before each batch they drain: it blocks
// while FaultStopDraining is on and sleeps FaultSlowHost's delay.
func (c *Channel) Throttle(ctx context.Context) error {
	f := &c.sess.dev.faults
	for f.Has(FaultStopDraining) {
		f.count(FaultStopDraining)
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if f.Has(FaultSlowHost) {
		f.count(FaultSlowHost)
		select {
		case <-time.After(time.Duration(f.delay.Load())):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// inject writes a pending malformed packet before the channel's batch is
// published, or corrupts the published write index after it.
func (f *Faults) inject(c *Channel) {
	if Fault(f.on.Load())&oneShot == 0 {
		return
	}
	var pkt []byte
	switch {
	case f.take(FaultBadLen8):
		pkt = RawDescriptor(6, 2, 1, 0, 8)
	case f.take(FaultBadOffset8):
		pkt = RawDescriptor(6, 1, 3, 0, 8)
	case f.take(FaultBadType):
		pkt = RawDescriptor(8, 2, 3, 0, 8) // VM_PKT_DATA_USING_GPADL: unused on channels
	case f.take(FaultBadFlags):
		pkt = RawDescriptor(6, 2, 3, 0x8000, 8)
	case f.take(FaultBadRanges):
		pkt = RawDescriptor(7, 3, 4, 1, 16)
		binary.LittleEndian.PutUint16(pkt[16:], 0xcafe)
		binary.LittleEndian.PutUint32(pkt[20:], 5) // five ranges in a header with room for none
	case f.take(FaultCorruptWriteIndex):
		c.Channel.Flush()
		size := uint32(c.split - vmbus.DataOffset())
		if c.split == len(c.mem) { // cannot happen: split is inside the mapping
			return
		}
		atomic.StoreUint32(ringWord(c.mem[c.split:], 0), size+8)
		c.poisoned.Store(true)
		c.Signal()
		return
	}
	if pkt != nil {
		c.Out().WriteRaw(pkt)
	}
}

// RawDescriptor builds a VMBus packet of the given descriptor fields with body
// bytes of zeros after the 16-byte descriptor.
func RawDescriptor(typ, off8, len8, flags uint16, body int) []byte {
	b := make([]byte, 16+body)
	binary.LittleEndian.PutUint16(b[0:], typ)
	binary.LittleEndian.PutUint16(b[2:], off8)
	binary.LittleEndian.PutUint16(b[4:], len8)
	binary.LittleEndian.PutUint16(b[6:], flags)
	return b
}
