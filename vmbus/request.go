package vmbus

import "fmt"

// Requests is a bounded table of outstanding requests that expect a
// completion. Ids are small integers chosen by the guest (never pointers,
// as Linux's vmbus_requestor does), and every completion the host sends is
// checked against the table: an id that is not outstanding is a protocol
// violation. Each slot carries a caller cookie (netvsc: a send-section
// index). Not safe for concurrent use; it belongs to the channel's owner.
type Requests struct {
	cookie []uint64
	busy   []bool
	free   []uint32 // stack of free slots
}

// NewRequests returns a table of n slots.
func NewRequests(n int) *Requests {
	r := &Requests{cookie: make([]uint64, n), busy: make([]bool, n), free: make([]uint32, n)}
	for i := range r.free {
		r.free[i] = uint32(n - 1 - i)
	}
	return r
}

// Cap returns the number of slots; InFlight the number in use.
func (r *Requests) Cap() int      { return len(r.busy) }
func (r *Requests) InFlight() int { return len(r.busy) - len(r.free) }

// Alloc takes a slot for a request and returns its transaction id; ok is
// false when every slot is in use (the caller waits for completions).
// Ids start at 1: 0 is what some guests use for "no completion expected".
func (r *Requests) Alloc(cookie uint64) (id uint64, ok bool) {
	n := len(r.free)
	if n == 0 {
		return 0, false
	}
	s := r.free[n-1]
	r.free = r.free[:n-1]
	r.busy[s] = true
	r.cookie[s] = cookie
	return uint64(s) + 1, true
}

// Complete releases the request with id and returns its cookie. An id that
// is not outstanding returns a *CorruptError (CorruptCompletion).
func (r *Requests) Complete(id uint64) (cookie uint64, err error) {
	s := id - 1
	if id == 0 || s >= uint64(len(r.busy)) || !r.busy[s] {
		return 0, &CorruptError{Kind: CorruptCompletion, Val: id}
	}
	r.busy[s] = false
	r.free = append(r.free, uint32(s))
	return r.cookie[s], nil
}

// Cancel releases every outstanding request (channel teardown) and calls fn
// with each cookie.
func (r *Requests) Cancel(fn func(cookie uint64)) {
	for s, b := range r.busy {
		if b {
			r.busy[s] = false
			r.free = append(r.free, uint32(s))
			if fn != nil {
				fn(r.cookie[s])
			}
		}
	}
}

func (r *Requests) String() string { return fmt.Sprintf("requests %d/%d", r.InFlight(), r.Cap()) }
