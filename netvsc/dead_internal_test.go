package netvsc

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/frame"
	"github.com/vmbusd/vmbusd/vmbus"
)

// TestDeadChannelWithUnreadFramesFailsTheSession: a channel that dies
// under a running session (the device's interrupt loop kills every
// channel on a rescind, leaving the session to find out) with frames
// still unread in its inbound ring ends the session at the next RxBurst,
// so that the Wait after it returns the failure. Before, drainLocked left
// a dead ring alone without failing the session and Wait returned nil
// for the unread bytes at once, every time: a receive loop (frame.Pump)
// spun on RxBurst 0 / Wait nil for good, deaf to its context, and the
// daemon's shutdown waited on it forever (TestCLISIGTERMWhileTheHostIsDown).
func TestDeadChannelWithUnreadFramesFailsTheSession(t *testing.T) {
	for _, mode := range []Mode{Hybrid, Poll, Interrupt} {
		t.Run(mode.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			sn, n := openWaitNIC(t, ctx, Config{Mode: mode})
			q := n.Queues()[0]
			f := frameTo(n.MAC())
			if k := sn.Deliver([][]byte{f, f, f, f}); k != 4 {
				t.Fatalf("host took %d of 4 frames", k)
			}
			for {
				if _, in := q.ch.RingUsage(); in != 0 {
					break
				}
				if ctx.Err() != nil {
					t.Fatal("the frames never reached the inbound ring")
				}
				runtime.Gosched()
			}
			// What vmbus.Handle's interrupt loop does when the host goes.
			q.ch.Kill(vmbus.ErrRescinded)

			// A cancelled context, as when the daemon stops the loop: the
			// loop must end anyway, on the NIC's failure.
			wctx, wcancel := context.WithCancel(ctx)
			wcancel()
			pkts := make([]*frame.Packet, 64)
			var err error
			for i := 0; err == nil; i++ {
				if i == 1000 {
					t.Fatalf("RxBurst/Wait loop still running after %d rounds with the channel dead (session error %v)", i, n.Err())
				}
				k := q.RxBurst(pkts)
				frame.PutBurst(pkts[:k])
				if k == 0 {
					err = q.Wait(wctx)
				}
			}
			if !errors.Is(err, vmbus.ErrRescinded) {
				t.Fatalf("Wait: %v, want the rescind", err)
			}
			select {
			case <-n.Done():
			default:
				t.Fatal("the NIC is not done after its channel died")
			}
		})
	}
}

// TestControlRequestOnADeadChannelFailsTheSession: a control request
// (the daemon's liveness probe, QueryLink) that finds the primary channel
// dead ends the session, so the NIC's owner learns of the rescind at
// once. Before, the request failed and the NIC stayed running: with no
// receive loop to find the dead channel (a forwarder whose peer went
// first), the daemon noticed only when three probes in a row had failed,
// 30 s later, and then as a silent host.
func TestControlRequestOnADeadChannelFailsTheSession(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, n := openWaitNIC(t, ctx, Config{Mode: Interrupt})
	n.Queues()[0].ch.Kill(vmbus.ErrRescinded)
	if _, err := n.QueryLink(ctx); err == nil {
		t.Fatal("QueryLink on a dead channel succeeded")
	}
	select {
	case <-n.Done():
	default:
		t.Fatal("the NIC is not done after a control request found its channel dead")
	}
	if err := n.Err(); !errors.Is(err, vmbus.ErrRescinded) {
		t.Fatalf("NIC error %v, want the rescind", err)
	}
}
