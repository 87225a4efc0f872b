package bus

import (
	"context"
	"os"
	"sync/atomic"

	"github.com/vmbusd/vmbusd/hoptrace"

	"github.com/vmbusd/vmbusd/vmbus"
)

// Channel is the host end of one channel: the vmbus ring code attached from
// the host's side (it reads the guest-to-host ring and writes the
// host-to-guest one), plus the host's way of interrupting the guest. Use it
// like a guest uses vmbus.Channel: Recv/CommitRecv/WaitReadable on one
// goroutine, Send/Flush/WaitWritable on one.
type Channel struct {
	*vmbus.Channel
	sess  *Session
	relid uint32
	sub   uint16
	mon   int
	mem   []byte   // whole ring mapping: guest-to-host ring, then host-to-guest
	split int      // where the host-to-guest ring starts
	file  *os.File // a sub-channel's ring file

	poisoned atomic.Bool // the corrupt-write-index fault fired
	// wake gets a token for every guest signal, for services that wait
	// on more than the ring (the NetVSP).
	wake chan struct{}
}

// Session returns the session the channel belongs to.
func (c *Channel) Session() *Session { return c.sess }

// Signal interrupts the guest for this channel (vmbus.Signaler): the
// simulated kernel runs hv_uio_channel_cb for it. Before 6.18 the callback
// masks the channel's inbound ring; before 6.16 a sub-channel's callback
// has no uio device to notify (a guest that unmasked a sub-channel there,
// or set pending_send_sz on it, would have crashed its kernel, which is
// counted as its violation). The uio fd then counts one interrupt.
func (c *Channel) Signal() error {
	h := c.sess.dev.host
	f := &c.sess.dev.faults
	if f.Has(FaultMissingInterrupts) {
		f.count(FaultMissingInterrupts)
		return nil
	}
	if c.sub != 0 && !h.cfg.Profile.SubchannelInterrupts() {
		h.violation(c.sess.dev.cfg.Instance, "sub-channel interrupt on a kernel that cannot deliver it")
		return nil
	}
	if h.cfg.Profile.MasksOnInterrupt() {
		setRingMask(c.mem[c.split:], true)
	}
	h.cfg.Stamps.Stamp(hoptrace.HostSignal)
	c.sess.conn.Notify()
	return nil
}

// guestSignal is the guest signalling the host for this channel (monitor
// bit, or write(1) on a non-monitored channel).
func (c *Channel) guestSignal() {
	c.Notify()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Wake delivers a token after guest signals (at most one pending), for
// services that wait on more than the ring.
func (c *Channel) Wake() <-chan struct{} { return c.wake }

// Flush publishes what the host wrote, after applying any pending fault.
// Once the corrupt-write-index fault has fired the host end is broken for
// good: it publishes nothing more, so the bad index stays for the guest
// to find.
func (c *Channel) Flush() error {
	if c.poisoned.Load() {
		return nil
	}
	c.sess.dev.faults.inject(c)
	if c.poisoned.Load() {
		return nil
	}
	return c.Channel.Flush()
}

// BeginWait tells the host that this channel's service is about to wait
// for a guest signal: to clear the guest-to-host ring's interrupt_mask,
// set the host-to-guest ring's pending_send_sz, or both. EndWait tells it
// the wait is over: the mask is set again and pending_send_sz cleared. A
// guest signals a monitored channel only in between
// (docs/protocol/vmbus-ring.md §2.4), so the monitor scanner runs only
// while some monitored channel is inside such a wait (Host.runMonitor).
// A service that manages the mask or pending_send_sz itself, rather than
// through WaitReadable and WaitWritable, must bracket every wait with
// them, BeginWait before the unmask and EndWait after the mask; a guest
// signal outside that bracket may be seen late. They nest (the reading
// and the writing goroutine may both wait) and allocate nothing.
func (c *Channel) BeginWait() {
	if c.mon >= 0 {
		c.sess.dev.host.listen()
	}
}

// EndWait ends a wait BeginWait began.
func (c *Channel) EndWait() {
	if c.mon >= 0 {
		c.sess.dev.host.unlisten()
	}
}

// WaitReadable is vmbus.Channel.WaitReadable inside BeginWait and EndWait.
func (c *Channel) WaitReadable(ctx context.Context) error {
	if c.In().Available() > 0 {
		return nil // no unmask, no wait
	}
	c.BeginWait()
	defer c.EndWait()
	return c.Channel.WaitReadable(ctx)
}

// WaitWritable is vmbus.Channel.WaitWritable inside BeginWait and EndWait.
func (c *Channel) WaitWritable(ctx context.Context, need int) error {
	if c.Out().Free() > need {
		return nil // no pending_send_sz, no wait
	}
	c.BeginWait()
	defer c.EndWait()
	return c.Channel.WaitWritable(ctx, need)
}
