package vmbus_test

import (
	"context"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/sim"
	"github.com/vmbusd/vmbusd/vmbus"
)

// InboundUsage is RingUsage's inbound figure: zero on an empty ring, the
// unread bytes once the host answered, zero again after the read is
// committed.
func TestInboundUsageIsRingUsagesInboundFigure(t *testing.T) {
	_, _, hd := newSimDevice(t, sim.DefaultProfile, sim.DeviceConfig{RingSize: 64 << 10}, vmbus.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ch := hd.Primary()
	if n := ch.InboundUsage(); n != 0 {
		t.Fatalf("InboundUsage %d on an empty ring", n)
	}
	if err := ch.SendInband(7, make([]byte, 64)); err != nil {
		t.Fatal(err)
	}
	if err := ch.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := ch.WaitReadable(ctx); err != nil {
		t.Fatal(err)
	}
	_, in := ch.RingUsage()
	if n := ch.InboundUsage(); n == 0 || n != in {
		t.Fatalf("InboundUsage %d with the echo unread, RingUsage's inbound %d", n, in)
	}
	expectEcho(t, ctx, ch, 7)
	if n := ch.InboundUsage(); n != 0 {
		t.Fatalf("InboundUsage %d after the echo was read and committed", n)
	}
}
