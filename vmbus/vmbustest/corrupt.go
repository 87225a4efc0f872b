package vmbustest

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/vmbusd/vmbusd/vmbus"
)

// WriteCorrupt makes the host break the ring rule that kind names, so that
// the guest's next read (or, for CorruptReadIndex, its next look at the
// free space) fails with exactly that kind, and then interrupts the guest
// whatever its mask says, as a misbehaving host may. It belongs to the
// host's sending goroutine, and the host's receiving side must be idle.
//
//   - CorruptOffset, CorruptLength, CorruptType, CorruptFlags,
//     CorruptRanges: a packet with a bad descriptor or range table,
//     published by a normal commit.
//   - CorruptCompletion: a completion for a request the guest never made;
//     the guest checks it only with a request table (Options.Requests).
//   - CorruptShortPacket: a write index 8 bytes on, fewer than a packet.
//   - CorruptWriteIndex: a write index past the data area.
//   - CorruptWriteRewind: the write index taken back to the guest's read
//     index, over packets the host had published; the guest sees the
//     rewind only if it had seen them (it read one without committing, or
//     looked at Available).
//   - CorruptReadIndex: a read index past the data area on the guest's
//     outbound ring.
//
// The index kinds leave the host broken: its Flush and CommitRecv publish
// nothing more, so the bad index stays for the guest to find.
func (h *Host) WriteCorrupt(kind vmbus.CorruptKind) error {
	if h.broken.Load() {
		return errors.New("vmbustest: the host end is already broken")
	}
	var pkt []byte
	switch kind {
	case vmbus.CorruptOffset:
		pkt = descriptor(vmbus.PacketInband, 1, 3, 0, 8)
	case vmbus.CorruptLength:
		pkt = descriptor(vmbus.PacketInband, 2, 1, 0, 8)
	case vmbus.CorruptType:
		pkt = descriptor(8, 2, 3, 0, 8) // VM_PKT_DATA_USING_GPADL: never on a channel
	case vmbus.CorruptFlags:
		pkt = descriptor(vmbus.PacketInband, 2, 3, 0x8000, 8)
	case vmbus.CorruptRanges:
		// A transfer-page header with room for no range that claims five.
		pkt = descriptor(vmbus.PacketTransferPage, 3, 4, 0, 16)
		binary.LittleEndian.PutUint32(pkt[20:], 5)
	case vmbus.CorruptCompletion:
		if h.p.opts.Requests == 0 {
			return errors.New("vmbustest: a stray completion is corrupt only to a guest with a request table (Options.Requests)")
		}
		// Ids are slot+1 up to the table size: one past it was never issued.
		if err := h.SendCompletion(uint64(h.p.opts.Requests) + 1); err != nil {
			return err
		}
		return h.publishAndInterrupt()
	case vmbus.CorruptShortPacket, vmbus.CorruptWriteIndex, vmbus.CorruptWriteRewind, vmbus.CorruptReadIndex:
		return h.corruptIndex(kind)
	default:
		return fmt.Errorf("vmbustest: no way to provoke %v", kind)
	}
	if err := h.Out().WriteRaw(pkt); err != nil {
		return err
	}
	return h.publishAndInterrupt()
}

// publishAndInterrupt commits what the host wrote (signalling by the
// rules) and interrupts the guest if the commit did not.
func (h *Host) publishAndInterrupt() error {
	before := h.Stats().TxSignals
	if err := h.Flush(); err != nil {
		return err
	}
	if h.Stats().TxSignals == before {
		h.p.interrupt()
	}
	return nil
}

// corruptIndex stores a bad index in shared memory, bypassing the host's
// ring code, and breaks the host end.
func (h *Host) corruptIndex(kind vmbus.CorruptKind) error {
	if err := h.Flush(); err != nil {
		return err
	}
	in, out := h.p.in(), h.p.out() // the guest's inbound ring is the host's outbound
	inSize := uint32(len(in) - vmbus.DataOffset())
	w, r := loadWord(in, writeIndexOff), loadWord(in, readIndexOff)
	switch kind {
	case vmbus.CorruptShortPacket:
		if h.Out().Free() <= 8 {
			return errors.New("vmbustest: no room for a short packet")
		}
		h.broken.Store(true)
		storeWord(in, writeIndexOff, (w+8)%inSize)
	case vmbus.CorruptWriteIndex:
		h.broken.Store(true)
		storeWord(in, writeIndexOff, inSize+8)
	case vmbus.CorruptWriteRewind:
		if w == r {
			return errors.New("vmbustest: nothing published that the guest has not consumed: no rewind to make")
		}
		h.broken.Store(true)
		storeWord(in, writeIndexOff, r)
	case vmbus.CorruptReadIndex:
		h.broken.Store(true)
		storeWord(out, readIndexOff, uint32(len(out)-vmbus.DataOffset())+8)
	}
	h.p.interrupt()
	return nil
}

// descriptor builds a packet with the given descriptor fields and body
// bytes of zeros after the 16-byte descriptor.
func descriptor(typ vmbus.PacketType, off8, len8, flags uint16, body int) []byte {
	b := make([]byte, 16+body)
	binary.LittleEndian.PutUint16(b[0:], uint16(typ))
	binary.LittleEndian.PutUint16(b[2:], off8)
	binary.LittleEndian.PutUint16(b[4:], len8)
	binary.LittleEndian.PutUint16(b[6:], flags)
	return b
}
