package echo

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"

	"github.com/vmbusd/vmbusd/vmbus"
)

// Pump sends packets of Size bytes with transaction ids 0, 1, 2, ... and
// checks that each comes back in order with its payload intact, keeping at
// most Window in flight. Counters may be read while it runs.
type Pump struct {
	Size   int
	Window int

	Sent, Echoed, Bytes atomic.Uint64
}

// Run pumps n packets (n <= 0: until ctx ends) and returns the first
// mismatch or channel error; ctx ending is not an error.
func (p *Pump) Run(ctx context.Context, ch *vmbus.Channel, n int) error {
	size := max(p.Size, 8)
	window := max(p.Window, 1)
	out := make([]byte, size)
	var sent, got uint64
	limit := uint64(n)
	done := func(k uint64) bool { return n > 0 && k >= limit }
	for !done(got) {
		for !done(sent) && sent-got < uint64(window) {
			Stamp(out, sent)
			err := ch.SendInband(sent, out)
			if _, full := err.(*vmbus.RingFullError); full {
				break
			}
			if err != nil {
				return fmt.Errorf("echo: send %d: %w", sent, err)
			}
			sent++
		}
		if err := ch.Flush(); err != nil {
			return err
		}
		p.Sent.Store(sent)
		k := 0
		for {
			pkt, err := ch.Recv()
			if err == vmbus.ErrRingEmpty {
				break
			}
			if err != nil {
				return fmt.Errorf("echo: receive after %d: %w", got, err)
			}
			if pkt.Type != vmbus.PacketInband || pkt.TransID != got || len(pkt.Payload()) < size || !Check(pkt.Payload()[:size], got) {
				return fmt.Errorf("echo: packet %d came back wrong (type %s, id %d)", got, pkt.Type, pkt.TransID)
			}
			got++
			k++
		}
		if err := ch.CommitRecv(); err != nil {
			return err
		}
		p.Echoed.Store(got)
		p.Bytes.Store(got * uint64(size))
		if k == 0 && (done(sent) || sent-got >= uint64(window) || sent == got) {
			if err := ch.WaitReadable(ctx); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
		}
		if ctx.Err() != nil {
			return nil
		}
	}
	return nil
}

// Stamp fills b with the pattern for sequence number seq.
func Stamp(b []byte, seq uint64) {
	v := seq*0x9E3779B97F4A7C15 + 1
	for k := 0; k+8 <= len(b); k += 8 {
		binary.LittleEndian.PutUint64(b[k:], v)
		v += 0xD1B54A32D192ED03
	}
}

// Check reports whether b holds the pattern for seq.
func Check(b []byte, seq uint64) bool {
	v := seq*0x9E3779B97F4A7C15 + 1
	for k := 0; k+8 <= len(b); k += 8 {
		if binary.LittleEndian.Uint64(b[k:]) != v {
			return false
		}
		v += 0xD1B54A32D192ED03
	}
	return true
}

// RequestSubchannels asks the test device's host to offer count
// sub-channels, each ring appearing delay after the previous one, the last
// never of them never opening. The request is echoed back like data, so
// call it before a Pump starts (and read the echo: Pump does not).
func RequestSubchannels(ch *vmbus.Channel, count, delayMS, never uint32) error {
	var b [24]byte
	copy(b[:], "SUBCHREQ")
	binary.LittleEndian.PutUint32(b[8:], count)
	binary.LittleEndian.PutUint32(b[12:], delayMS)
	binary.LittleEndian.PutUint32(b[16:], never)
	if err := ch.SendInband(1<<63, b[:]); err != nil {
		return err
	}
	return ch.Flush()
}
