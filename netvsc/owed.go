package netvsc

import (
	"sync"
	"sync/atomic"

	"github.com/vmbusd/vmbusd/vmbus"
)

// completions is a queue's fixed-size completion ring: the receive
// completions it owes the host, added by the drain (under inMu) and
// written into the outbound ring by whoever holds outMu. mu guards owed
// and is a leaf lock; msg is immutable after newQueue.
//
// It never grows: a transfer page the ring cannot take is a protocol
// violation (owed.add), which kills the channel and is counted by check
// (Stats.Violations).
type completions struct {
	mu   sync.Mutex
	owed owed
	// n is owed.len(), stored under mu, for pending and send to find
	// nothing owed without the lock: every burst and drain asks, and on a
	// transmit-only queue the answer is always no.
	n   atomic.Int32
	msg []byte // the SEND_RNDIS_PKT_COMPLETE every completion carries
	// sentAt is, per tid, the inbound-ring position (rxPath.inPos) the
	// host had published when the tid's last completion was: a packet
	// that starts before it was written before the host could read that
	// completion, so it cannot reuse the tid (reused). 0 when the sender
	// did not know the position (a TxBurst, not holding inMu).
	sentAt []uint64
}

// init sizes the ring for count sub-allocations.
func (a *completions) init(count uint32) {
	a.mu.Lock()
	a.owed.init(count)
	a.sentAt = make([]uint64, count)
	a.n.Store(0)
	a.mu.Unlock()
}

// owes reports whether tid is owed now.
func (a *completions) owes(tid uint32) bool {
	a.mu.Lock()
	v := a.owed.owes(tid)
	a.mu.Unlock()
	return v
}

// reused reports whether a transfer page with tid that starts at
// inbound-ring position pos reuses the tid before the host can have read
// its completion: the tid is owed, or its last completion was published
// after the host had written the packet (pos below the sentAt mark).
func (a *completions) reused(tid uint32, pos uint64) bool {
	a.mu.Lock()
	v := a.owed.owes(tid) || (int(tid) < len(a.sentAt) && pos < a.sentAt[tid])
	a.mu.Unlock()
	return v
}

// add records that tid is owed; false when it already is, lies past the
// count, or the ring is full: each a host violation.
func (a *completions) add(tid uint32) bool {
	a.mu.Lock()
	v := a.owed.add(tid)
	if v {
		a.n.Store(int32(a.owed.len()))
	}
	a.mu.Unlock()
	return v
}

// pending reports completions still owed.
func (a *completions) pending() bool { return a.n.Load() > 0 }

// send writes the owed completions into ch's outbound ring, oldest first,
// and returns how many; outMu is held. It stops at the first error (a
// *vmbus.RingFullError: the rest stay owed). A tid stops being owed once
// its completion is in the ring: the host may hand it out again only
// after reading it, so a packet of the inbound ring before mark (the
// position the host had published before these completions are; 0:
// unknown) reusing it is still a violation (reused).
func (a *completions) send(ch *vmbus.Channel, mark uint64) (int, error) {
	if a.n.Load() == 0 {
		return 0, nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	sent := 0
	var err error
	for a.owed.len() > 0 {
		tid := a.owed.oldest()
		if err = ch.SendCompletion(uint64(tid), a.msg); err != nil {
			break
		}
		a.sentAt[tid] = mark
		a.owed.done()
		sent++
	}
	a.n.Store(int32(a.owed.len()))
	return sent, err
}

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
// Not safe for concurrent use: completions guards it. The zero value
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
