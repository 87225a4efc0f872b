package vmbus

import (
	"encoding/binary"
	"fmt"
	"os"
)

// A VMBus ring is one direction of a channel: a header page of control words
// followed by a data area used as a circular byte buffer of packets
// (docs/protocol/vmbus-ring.md §2). Each packet is a 16-byte descriptor, header, payload,
// zero padding to 8 bytes, and an 8-byte trailer holding its start offset.
//
//	header page (system page size)        data area (dsize bytes)
//	+-------+-------+------+---------+---+  +----------+-----+-------+---
//	| write | read  | mask | pending |...|  | desc|pay | pad | trail | ...
//	+-------+-------+------+---------+---+  +----------+-----+-------+---
//
// The writer never fills the ring completely: read == write always means
// empty, so a write needs strictly more free bytes than the packet takes.
//
// OutRing is the writer's end and InRing the reader's. Both keep private
// cursors: nothing is visible to the peer until Commit, so a batch of packets
// costs one index store and at most one signal. Neither type is safe for
// concurrent use; one goroutine owns each end.

// FeaturePendingSendSz is bit 0 of feature_bits: the ring's peer sets
// pending_send_sz when blocked and expects a signal once that much space is
// free.
const FeaturePendingSendSz = 1

// DataOffset is where the data area starts in a ring mapping: one system
// page of header (the first 4 KiB hold the control words).
func DataOffset() int { return os.Getpagesize() }

// ring is the memory of one direction.
type ring struct {
	ctl     *ringControl
	data    []byte
	size    uint32 // len(data): the data size
	bulkMin int    // copies this long or longer use bulkCopy (copy.go)
}

func newRing(mem []byte) (ring, error) {
	off := DataOffset()
	if len(mem) <= off || (len(mem)-off)%8 != 0 || len(mem)-off > 1<<31 {
		return ring{}, fmt.Errorf("vmbus: ring of %d bytes: want a %d-byte header and a data area that is a positive multiple of 8", len(mem), off)
	}
	if !aligned4(mem) {
		return ring{}, fmt.Errorf("vmbus: ring memory not 4-byte aligned")
	}
	return ring{ctl: controlOf(mem), data: mem[off:], size: uint32(len(mem) - off), bulkMin: bulkCopyMin}, nil
}

// used returns the bytes between read index r and write index w.
func (r *ring) used(w, rd uint32) uint32 {
	if w >= rd {
		return w - rd
	}
	return r.size - rd + w
}

// sharedUsed returns the bytes between the published indices, or -1 when
// they are out of range.
func (r *ring) sharedUsed() int {
	w, rd := r.ctl.writeIndex.Load(), r.ctl.readIndex.Load()
	if w >= r.size || rd >= r.size {
		return -1
	}
	return int(r.used(w, rd))
}

// copyOut copies len(dst) bytes starting at data offset off, wrapping.
func (r *ring) copyOut(dst []byte, off uint32) {
	n := r.copyData(dst, r.data[off:])
	if n < len(dst) {
		r.copyData(dst[n:], r.data)
	}
}

// copyIn copies src to data offset off, wrapping, and returns the offset
// after it.
func (r *ring) copyIn(off uint32, src []byte) uint32 {
	n := r.copyData(r.data[off:], src)
	if n < len(src) {
		r.copyData(r.data, src[n:])
	}
	return r.advance(off, uint32(len(src)))
}

func (r *ring) advance(off, n uint32) uint32 {
	off += n
	if off >= r.size {
		off -= r.size
	}
	return off
}

// InitRingHeader prepares a fresh ring as the kernel's hv_ringbuffer_init
// does when a channel opens: the header page is zeroed and the
// pending-send-size feature is advertised.
func InitRingHeader(mem []byte) error {
	r, err := newRing(mem)
	if err != nil {
		return err
	}
	clear(mem[:DataOffset()])
	r.ctl.featureBits.Store(FeaturePendingSendSz)
	return nil
}

// OutRing is the writing end of a ring.
type OutRing struct {
	r         ring
	next      uint32 // private write index: end of written, uncommitted packets
	committed uint32 // write index we last published
	readIdx   uint32 // last validated read index of the peer
	err       *CorruptError
	full      RingFullError // returned by reserve, so a full ring costs no allocation
}

// NewOutRing attaches a writer to ring memory (header page + data). It takes
// the current write index as its starting point; the read index must be a
// valid position at or behind it.
func NewOutRing(mem []byte) (*OutRing, error) {
	r, err := newRing(mem)
	if err != nil {
		return nil, err
	}
	w := r.ctl.writeIndex.Load()
	rd := r.ctl.readIndex.Load()
	if w >= r.size || w%8 != 0 {
		return nil, &CorruptError{Kind: CorruptWriteIndex, Off: w, Val: uint64(w)}
	}
	if rd >= r.size || rd%8 != 0 {
		return nil, &CorruptError{Kind: CorruptReadIndex, Off: rd, Val: uint64(rd)}
	}
	return &OutRing{r: r, next: w, committed: w, readIdx: rd}, nil
}

// DataSize returns the size of the data area.
func (o *OutRing) DataSize() int { return int(o.r.size) }

// MaxPacket returns the largest packet (trailer included) that can ever be
// written: the ring keeps 8 bytes free.
func (o *OutRing) MaxPacket() int { return int(o.r.size) - 8 }

// Err returns the corruption that killed the ring, or nil.
func (o *OutRing) Err() error {
	if o.err == nil {
		return nil
	}
	return o.err
}

// refreshRead loads and validates the peer's read index. A valid index lies
// between the last one we saw and what we have published.
func (o *OutRing) refreshRead() *CorruptError {
	rd := o.r.ctl.readIndex.Load()
	if rd == o.readIdx {
		return nil
	}
	if rd >= o.r.size || rd%8 != 0 || o.r.used(rd, o.readIdx) > o.r.used(o.committed, o.readIdx) {
		o.err = &CorruptError{Kind: CorruptReadIndex, Off: o.readIdx, Val: uint64(rd)}
		return o.err
	}
	o.readIdx = rd
	return nil
}

// Free returns the bytes free for writing, as seen now.
func (o *OutRing) Free() int {
	if o.err != nil || o.refreshRead() != nil {
		return 0
	}
	return int(o.r.size - o.r.used(o.next, o.readIdx))
}

// Room reports whether more than n bytes are free, as Write decides:
// from the read index last seen, loading the peer's only when that one
// says they are not. Free loads it every time, and its cache line, which
// the peer writes as it reads, is then usually fetched from the peer's
// core.
func (o *OutRing) Room(n int) bool { return o.reserve(n) == nil }

// Pending returns the bytes written but not committed.
func (o *OutRing) Pending() int { return int(o.r.used(o.next, o.committed)) }

// reserve checks that total bytes fit, refreshing the read index only when
// the cached one says they do not.
func (o *OutRing) reserve(total int) error {
	if o.err != nil {
		return o.err
	}
	free := int(o.r.size - o.r.used(o.next, o.readIdx))
	if free > total {
		return nil
	}
	if err := o.refreshRead(); err != nil {
		return err
	}
	free = int(o.r.size - o.r.used(o.next, o.readIdx))
	if free > total {
		return nil
	}
	o.full = RingFullError{Need: total, Free: free}
	return &o.full
}

// Write appends one packet after the last written one: a descriptor of type
// typ with flags and transaction id id, then hdr (type-specific header, a
// multiple of 8 bytes, counted in offset8), then the payload parts. Nothing
// is visible to the reader until Commit. It returns *RingFullError when the
// packet does not fit now (the value is reused by the next Write) and an
// error when it could never fit.
func (o *OutRing) Write(typ PacketType, flags uint16, id uint64, hdr []byte, payload ...[]byte) error {
	if len(hdr)%8 != 0 {
		return fmt.Errorf("vmbus: packet header of %d bytes is not a multiple of 8", len(hdr))
	}
	plen := 0
	for _, p := range payload {
		plen += len(p)
	}
	body := descriptorSize + len(hdr) + plen
	total := align8(body) + trailerSize
	if total > o.MaxPacket() || align8(body)/8 > 0xffff {
		return fmt.Errorf("vmbus: packet of %d bytes exceeds the ring's maximum %d", total, min(o.MaxPacket(), 0xffff*8+trailerSize))
	}
	if err := o.reserve(total); err != nil {
		return err
	}
	start := o.next
	var d [descriptorSize]byte
	binary.LittleEndian.PutUint16(d[0:], uint16(typ))
	binary.LittleEndian.PutUint16(d[2:], uint16((descriptorSize+len(hdr))/8))
	binary.LittleEndian.PutUint16(d[4:], uint16(align8(body)/8))
	binary.LittleEndian.PutUint16(d[6:], flags)
	binary.LittleEndian.PutUint64(d[8:], id)
	off := o.r.copyIn(start, d[:])
	off = o.r.copyIn(off, hdr)
	for _, p := range payload {
		off = o.r.copyIn(off, p)
	}
	if pad := align8(body) - body; pad > 0 {
		var z [8]byte
		off = o.r.copyIn(off, z[:pad])
	}
	var t [trailerSize]byte
	binary.LittleEndian.PutUint64(t[:], uint64(start)<<32)
	o.next = o.r.copyIn(off, t[:])
	return nil
}

// WriteRaw appends pkt verbatim as one packet (it must already hold a
// descriptor and be a multiple of 8 bytes) followed by the trailer. The
// simulator uses it to inject malformed packets; drivers use Write.
func (o *OutRing) WriteRaw(pkt []byte) error {
	if len(pkt)%8 != 0 || len(pkt) < descriptorSize {
		return fmt.Errorf("vmbus: raw packet of %d bytes", len(pkt))
	}
	if err := o.reserve(len(pkt) + trailerSize); err != nil {
		return err
	}
	start := o.next
	off := o.r.copyIn(start, pkt)
	var t [trailerSize]byte
	binary.LittleEndian.PutUint64(t[:], uint64(start)<<32)
	o.next = o.r.copyIn(off, t[:])
	return nil
}

// Commit publishes every packet written since the last Commit and reports
// whether the reader must be signalled: only when the ring was empty before
// this batch and the reader's interrupt mask is clear (ring_buffer.c
// hv_signal_on_write; docs/protocol/vmbus-ring.md §2.4).
func (o *OutRing) Commit() (signal bool) {
	if o.next == o.committed || o.err != nil {
		return false
	}
	old := o.committed
	o.r.ctl.writeIndex.Store(o.next)
	o.committed = o.next
	if o.r.ctl.interruptMask.Load() != 0 {
		return false
	}
	return o.r.ctl.readIndex.Load() == old
}

// Revert drops packets written since the last Commit.
func (o *OutRing) Revert() { o.next = o.committed }

// PendingSendSupported reports whether the reader advertised that it
// signals a blocked writer (feature bit on this ring). Without it a blocked
// writer must poll.
func (o *OutRing) PendingSendSupported() bool {
	return o.r.ctl.featureBits.Load()&FeaturePendingSendSz != 0
}

// SetPendingSend tells the reader this writer is blocked until need bytes
// are free. The value is raised to a quarter of the ring so the writer does
// not wake for every packet the reader frees (openvmm WriteState), and kept
// below the most the ring can ever free. The caller re-checks Free after
// this call, before sleeping, to close the race with a reader that freed
// space before it saw the request.
func (o *OutRing) SetPendingSend(need int) {
	v := max(align8(need), int(o.r.size)/4)
	v = min(v, o.MaxPacket())
	o.r.ctl.pendingSendSz.Store(uint32(v))
}

// ClearPendingSend withdraws the request, right before writing again.
func (o *OutRing) ClearPendingSend() {
	if o.r.ctl.pendingSendSz.Load() != 0 {
		o.r.ctl.pendingSendSz.Store(0)
	}
}

// PeerMasked reports whether the reader currently masks interrupts.
func (o *OutRing) PeerMasked() bool { return o.r.ctl.interruptMask.Load() != 0 }

// InRing is the reading end of a ring.
type InRing struct {
	r         ring
	next      uint32 // private read index: after the last packet read
	committed uint32 // read index we last published
	writeIdx  uint32 // last validated write index of the peer
	maxPkt    int    // largest packet body accepted (descriptor to padding)
	err       *CorruptError
	held      uint32 // body length of the packet Peek left in place, 0 if none
}

// NewInRing attaches a reader to ring memory. maxPacket bounds the body
// (len8*8) of any packet the peer may send; a longer one is CorruptLength.
// It is also the buffer size Read needs. 0 means the whole ring.
func NewInRing(mem []byte, maxPacket int) (*InRing, error) {
	r, err := newRing(mem)
	if err != nil {
		return nil, err
	}
	rd := r.ctl.readIndex.Load()
	w := r.ctl.writeIndex.Load()
	if rd >= r.size || rd%8 != 0 {
		return nil, &CorruptError{Kind: CorruptReadIndex, Off: rd, Val: uint64(rd)}
	}
	if w >= r.size || w%8 != 0 {
		return nil, &CorruptError{Kind: CorruptWriteIndex, Off: w, Val: uint64(w)}
	}
	if maxPacket <= 0 || maxPacket > int(r.size)-trailerSize {
		maxPacket = int(r.size) - trailerSize
	}
	return &InRing{r: r, next: rd, committed: rd, writeIdx: rd, maxPkt: maxPacket}, nil
}

// DataSize returns the size of the data area.
func (i *InRing) DataSize() int { return int(i.r.size) }

// MaxPacket returns the largest packet body Read accepts.
func (i *InRing) MaxPacket() int { return i.maxPkt }

// Err returns the corruption that killed the ring, or nil.
func (i *InRing) Err() error {
	if i.err == nil {
		return nil
	}
	return i.err
}

func (i *InRing) fail(k CorruptKind, off uint32, v uint64) *CorruptError {
	i.err = &CorruptError{Kind: k, Off: off, Val: v}
	return i.err
}

// refreshWrite loads and validates the peer's write index: inside the data
// area, 8-aligned, never moving back over data it had published.
func (i *InRing) refreshWrite() *CorruptError {
	w := i.r.ctl.writeIndex.Load()
	if w == i.writeIdx {
		return nil
	}
	if w >= i.r.size || w%8 != 0 {
		return i.fail(CorruptWriteIndex, i.writeIdx, uint64(w))
	}
	// Measured from our published read index, the writer cannot take back
	// what it published (an 8-aligned index can never claim more than the
	// size-8 bytes a writer may fill).
	if i.r.used(w, i.committed) < i.r.used(i.writeIdx, i.committed) {
		return i.fail(CorruptWriteRewind, i.writeIdx, uint64(w))
	}
	i.writeIdx = w
	return nil
}

// Available returns the bytes of unread packets, refreshing the peer's
// write index. It returns 0 on a dead ring.
func (i *InRing) Available() int {
	if i.err != nil || i.refreshWrite() != nil {
		return 0
	}
	return int(i.r.used(i.writeIdx, i.next))
}

// Read copies the next packet into buf and validates it: descriptor fields,
// length against the data available and the channel maximum, type, flags and
// the transfer-page or GPA-direct range table. The returned Packet's Raw is
// buf[:len8*8]. ErrRingEmpty means no packet is waiting. A *CorruptError is
// final: the ring is dead. buf must hold MaxPacket bytes.
//
// Nothing is released to the writer until Commit.
func (i *InRing) Read(buf []byte) (Packet, error) {
	p, d, err := i.descriptor()
	if err != nil {
		return Packet{}, err
	}
	body := uint32(p.Len8) * 8
	if len(buf) < int(body) {
		return Packet{}, fmt.Errorf("vmbus: read buffer of %d bytes for a %d-byte packet (want MaxPacket = %d)", len(buf), body, i.maxPkt)
	}
	p.Raw = buf[:body]
	if err := i.finish(&p, d); err != nil {
		return Packet{}, err
	}
	i.next = i.r.advance(i.next, body+trailerSize)
	i.held = 0
	return p, nil
}

// descriptor reads and validates the descriptor of the next packet:
// its fields, its length against the data available and the channel
// maximum, its type and flags.
func (i *InRing) descriptor() (Packet, [descriptorSize]byte, error) {
	var d [descriptorSize]byte
	if i.err != nil {
		return Packet{}, d, i.err
	}
	avail := i.r.used(i.writeIdx, i.next)
	if avail == 0 {
		if err := i.refreshWrite(); err != nil {
			return Packet{}, d, err
		}
		avail = i.r.used(i.writeIdx, i.next)
		if avail == 0 {
			return Packet{}, d, ErrRingEmpty
		}
	}
	if avail < MinPacketSize {
		return Packet{}, d, i.fail(CorruptShortPacket, i.next, uint64(avail))
	}
	i.r.copyOut(d[:], i.next)
	p := Packet{
		Type:    PacketType(binary.LittleEndian.Uint16(d[0:])),
		Offset8: binary.LittleEndian.Uint16(d[2:]),
		Len8:    binary.LittleEndian.Uint16(d[4:]),
		Flags:   binary.LittleEndian.Uint16(d[6:]),
		TransID: binary.LittleEndian.Uint64(d[8:]),
	}
	body := uint32(p.Len8) * 8
	switch {
	case p.Offset8 < 2:
		return Packet{}, d, i.fail(CorruptOffset, i.next, uint64(p.Offset8))
	case p.Len8 < p.Offset8:
		return Packet{}, d, i.fail(CorruptLength, i.next, uint64(p.Len8))
	case body+trailerSize > avail || int(body) > i.maxPkt:
		return Packet{}, d, i.fail(CorruptLength, i.next, uint64(p.Len8))
	case !validType(p.Type):
		return Packet{}, d, i.fail(CorruptType, i.next, uint64(p.Type))
	case p.Flags&^FlagCompletionRequested != 0:
		return Packet{}, d, i.fail(CorruptFlags, i.next, uint64(p.Flags))
	}
	return p, d, nil
}

// finish copies p.Raw out of the ring at the read position, puts the
// validated descriptor d back over the copy's, so that a peer rewriting
// the ring meanwhile cannot smuggle in other values, and checks the
// type-specific header.
func (i *InRing) finish(p *Packet, d [descriptorSize]byte) error {
	i.r.copyOut(p.Raw, i.next)
	copy(p.Raw, d[:])
	if ce := checkHeader(p); ce != nil {
		ce.Off = i.next
		i.err = ce
		return ce
	}
	return nil
}

// Peek is Read for a reader that copies payloads straight out of the ring
// into their destination, as OpenVMM's pipe reader does (one copy instead
// of two): it validates the next packet as Read does but copies only its
// first len(head) bytes (all of it if shorter) into head, which must hold
// the descriptor and the type-specific header (offset8*8 bytes); Raw is
// that prefix and Len8 tells the packet's length. The packet stays in the
// ring, where CopyBody reads the rest, until Skip moves past it; calling
// Peek again before Skip returns it once more. Only the prefix is
// validated: the bytes CopyBody delivers are payload, which the peer may
// rewrite while we copy them but whose length and place were fixed here.
func (i *InRing) Peek(head []byte) (Packet, error) {
	p, d, err := i.descriptor()
	if err != nil {
		return Packet{}, err
	}
	body := int(p.Len8) * 8
	if len(head) < int(p.Offset8)*8 {
		return Packet{}, fmt.Errorf("vmbus: peek buffer of %d bytes for a %d-byte packet header", len(head), int(p.Offset8)*8)
	}
	p.Raw = head[:min(len(head), body)]
	if err := i.finish(&p, d); err != nil {
		return Packet{}, err
	}
	i.held = uint32(body)
	return p, nil
}

// CopyBody copies bytes of the packet Peek holds, from offset off of its
// body (descriptor included) into dst, and returns how many: fewer than
// len(dst) at the end of the packet, 0 past it or when no packet is held.
func (i *InRing) CopyBody(dst []byte, off int) int {
	if off < 0 || off >= int(i.held) {
		return 0
	}
	n := min(len(dst), int(i.held)-off)
	i.r.copyOut(dst[:n], i.r.advance(i.next, uint32(off)))
	return n
}

// Skip moves past the packet Peek holds; nothing is released to the
// writer until Commit. It does nothing when no packet is held.
func (i *InRing) Skip() {
	if i.held == 0 {
		return
	}
	i.next = i.r.advance(i.next, i.held+trailerSize)
	i.held = 0
}

// Commit publishes the read index after the packets read so far and reports
// whether the writer must be signalled: only when the writer advertised
// pending_send_sz and this batch moved the free space from not enough to
// enough (ring_buffer.c hv_pkt_iter_close; docs/protocol/vmbus-ring.md §2.4). The mask is
// not consulted.
func (i *InRing) Commit() (signal bool) {
	if i.next == i.committed || i.err != nil {
		return false
	}
	read := i.r.used(i.next, i.committed)
	i.r.ctl.readIndex.Store(i.next)
	i.committed = i.next
	if i.r.ctl.featureBits.Load()&FeaturePendingSendSz == 0 {
		return false
	}
	pending := i.r.ctl.pendingSendSz.Load()
	if pending == 0 {
		return false
	}
	// The write index may have moved since; a bad one is caught by the next
	// Read, here it only makes the answer conservative.
	w := i.r.ctl.writeIndex.Load()
	if w >= i.r.size {
		w = i.writeIdx
	}
	curr := i.r.size - i.r.used(w, i.next) // bytes free for the writer now
	if curr <= pending {
		return false // still not enough ("exactly full" counts as not enough)
	}
	return int(curr)-int(read) <= int(pending) // it was not enough before this batch
}

// SetInterruptMask sets or clears this reader's interrupt mask: while set,
// the writer does not signal on empty to non-empty.
func (i *InRing) SetInterruptMask(masked bool) {
	var v uint32
	if masked {
		v = 1
	}
	i.r.ctl.interruptMask.Store(v)
}

// InterruptMasked reports the mask as it is in shared memory now.
func (i *InRing) InterruptMasked() bool { return i.r.ctl.interruptMask.Load() != 0 }

// PendingSupported reports whether this ring carries the pending-send-size
// feature bit, so the writer relies on our signal when it is blocked.
func (i *InRing) PendingSupported() bool {
	return i.r.ctl.featureBits.Load()&FeaturePendingSendSz != 0
}

// WriterPending returns the writer's pending_send_sz as it is now.
func (i *InRing) WriterPending() uint32 { return i.r.ctl.pendingSendSz.Load() }
