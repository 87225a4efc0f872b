package bus

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/vmbusd/vmbusd/vmbus"
)

// Echo is the test device class's host (vmbus.ClassTest): every inband
// packet comes back as an inband packet with the same transaction id and
// payload; a packet that requests a completion is answered by a completion
// carrying its payload. It serves the primary and every sub-channel.
//
// One message is a request rather than data: an inband packet on the
// primary whose payload starts with EchoSubchannelRequest asks the host to
// offer sub-channels (the test class's stand-in for netvsc's NVSP
// sub-channel request): after the 8-byte tag come u32 count, u32 delay in
// milliseconds before each ring appears, u32 how many of the last ones
// never open (the kernel's vmbus_open failing). It is echoed like any
// other packet.
type Echo struct{}

// EchoSubchannelRequest is the tag of the test class's sub-channel request.
const EchoSubchannelRequest = "SUBCHREQ"

// echoBatch bounds the packets handled between two commits, so a busy
// guest still gets its space back and its echoes promptly.
const echoBatch = 256

// Serve implements Service.
func (Echo) Serve(ctx context.Context, s *Session) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	offer := func(count, delayMS, never uint32) {
		if count > 64 || never > count {
			s.dev.host.violation(s.dev.cfg.Instance, "sub-channel request out of range")
			return
		}
		offers := make([]SubchannelOffer, count)
		for i := range offers {
			offers[i] = SubchannelOffer{Delay: time.Duration(delayMS) * time.Millisecond * time.Duration(i+1),
				NeverOpens: uint32(i) >= count-never}
		}
		ch := s.OfferSubchannels(offers, nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range ch {
				wg.Add(1)
				go func() {
					defer wg.Done()
					echoChannel(ctx, c, nil)
				}()
			}
		}()
	}
	return echoChannel(ctx, s.Primary(), offer)
}

// echoChannel echoes until ctx ends or the channel fails. onRequest, when
// not nil, receives sub-channel requests seen on this channel.
func echoChannel(ctx context.Context, c *Channel, onRequest func(count, delayMS, never uint32)) error {
	dev := c.sess.dev
	for {
		if err := c.Throttle(ctx); err != nil {
			return err
		}
		n := 0
		for ; n < echoBatch; n++ {
			p, err := c.Recv()
			if err == vmbus.ErrRingEmpty {
				break
			}
			if err != nil {
				if ce, ok := vmbus.IsCorrupt(err); ok {
					dev.host.violation(dev.cfg.Instance, "corrupt guest ring: "+ce.Kind.String())
				}
				return err
			}
			if pl := p.Payload(); onRequest != nil && p.Type == vmbus.PacketInband && len(pl) >= 20 && string(pl[:8]) == EchoSubchannelRequest {
				onRequest(binary.LittleEndian.Uint32(pl[8:]), binary.LittleEndian.Uint32(pl[12:]), binary.LittleEndian.Uint32(pl[16:]))
			}
			if err := echoPacket(ctx, c, &p); err != nil {
				return err
			}
		}
		if err := c.CommitRecv(); err != nil {
			return err
		}
		if err := c.Flush(); err != nil {
			return err
		}
		if n == 0 {
			if err := c.WaitReadable(ctx); err != nil {
				return err
			}
		}
	}
}

func echoPacket(ctx context.Context, c *Channel, p *vmbus.Packet) error {
	for {
		var err error
		switch {
		case p.CompletionRequested():
			err = c.SendCompletion(p.TransID, p.Payload())
		case p.Type == vmbus.PacketInband:
			err = c.SendInband(p.TransID, p.Payload())
		default:
			return nil // completions from the guest need no answer
		}
		full, ok := err.(*vmbus.RingFullError)
		if !ok {
			if err != nil {
				return fmt.Errorf("sim: echo: %w", err)
			}
			return nil
		}
		need := full.Need
		if err := c.Flush(); err != nil {
			return err
		}
		// The guest frees space as it reads; release what we read too, so a
		// guest blocked on its own full ring can make progress.
		if err := c.CommitRecv(); err != nil {
			return err
		}
		if err := c.WaitWritable(ctx, need); err != nil {
			return err
		}
	}
}
