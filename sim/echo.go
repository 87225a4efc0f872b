package sim

import (
	"context"
	"errors"
	"fmt"

	"vmbusd/vmbus"
)

// Echo is the test device class's host (vmbus.ClassTest): every inband
// packet comes back as an inband packet with the same transaction id and
// payload; a packet that requests a completion is answered by a completion
// carrying its payload. It serves the primary and every sub-channel.
type Echo struct{}

// echoBatch bounds the packets handled between two commits, so a busy
// guest still gets its space back and its echoes promptly.
const echoBatch = 256

// Serve implements Service.
func (Echo) Serve(ctx context.Context, s *Session) error {
	return echoChannel(ctx, s.Primary())
}

func echoChannel(ctx context.Context, c *Channel) error {
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
		var full *vmbus.RingFullError
		if !errors.As(err, &full) {
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
