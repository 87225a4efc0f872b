package netvsc

// owed is the receive completions a queue owes the host: one per
// transfer-page packet received and not yet completed, oldest first.
//
// Its size is fixed when the receive buffer is known: one slot per
// sub-allocation, as Linux sizes its completion ring (docs/protocol/netvsc.md §2.5 step
// 4, §2.6). Transaction ids are checked below that count before they get
// here and a tid can be owed only once, so the ring can never fill: a host
// that keeps sending while our completions wait (it stopped reading its
// inbound ring) has to reuse a tid still owed, and that is the protocol
// violation add reports (protoerr.KindDuplicateTID), never growth.
//
// Not safe for concurrent use: the queue's ackMu guards it. The zero value
// owes nothing and refuses every tid.
type owed struct {
	tids []uint32 // ring of owed tids
	head int
	n    int
	set  []uint64 // bit per tid: owed now
}

// init sizes the ring for count sub-allocations (tids 0..count-1).
func (o *owed) init(count uint32) {
	o.tids = make([]uint32, count)
	o.set = make([]uint64, (uint64(count)+63)/64)
	o.head, o.n = 0, 0
}

// add records that tid is owed; false when it already is (or lies past
// the count init was given).
func (o *owed) add(tid uint32) bool {
	w, bit := int(tid/64), uint64(1)<<(tid%64)
	if int(tid) >= len(o.tids) || o.set[w]&bit != 0 || o.n == len(o.tids) {
		return false
	}
	o.set[w] |= bit
	i := o.head + o.n
	if i >= len(o.tids) {
		i -= len(o.tids)
	}
	o.tids[i] = tid
	o.n++
	return true
}

// owes reports whether tid is owed now.
func (o *owed) owes(tid uint32) bool {
	return int(tid) < len(o.tids) && o.set[tid/64]&(1<<(tid%64)) != 0
}

// len returns how many completions are owed.
func (o *owed) len() int { return o.n }

// oldest returns the tid owed longest; o.len() must be > 0.
func (o *owed) oldest() uint32 { return o.tids[o.head] }

// done forgets the oldest tid: its completion was written.
func (o *owed) done() {
	tid := o.tids[o.head]
	o.set[tid/64] &^= 1 << (tid % 64)
	o.head++
	if o.head == len(o.tids) {
		o.head = 0
	}
	o.n--
}
