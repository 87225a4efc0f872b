package vmbus_test

import (
	"context"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/internal/echo"
	"github.com/vmbusd/vmbusd/sim"
	"github.com/vmbusd/vmbusd/vmbus"
)

// A channel with a busy-poll budget longer than the host's answer takes
// catches every echo by spinning: no wait sleeps, none needs an interrupt.
func TestBusyPollCatchesTheAnswerWithoutSleeping(t *testing.T) {
	_, _, hd := newSimDevice(t, sim.DefaultProfile, sim.DeviceConfig{RingSize: 64 << 10},
		vmbus.Options{BusyPoll: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ch := hd.Primary()
	payload := make([]byte, 64)
	const n = 50
	for i := range uint64(n) {
		if err := ch.SendInband(i, payload); err != nil {
			t.Fatal(err)
		}
		if err := ch.Flush(); err != nil {
			t.Fatal(err)
		}
		expectEcho(t, ctx, ch, i)
	}
	st := ch.Stats()
	t.Logf("stats %+v interrupts %d", st, hd.Interrupts())
	if st.IdleWaits != 0 {
		t.Errorf("%d waits slept with an hour's busy-poll budget", st.IdleWaits)
	}
	if st.BusyPollHits == 0 || st.BusyPollHits > n {
		t.Errorf("%d busy-poll hits for %d echoes", st.BusyPollHits, n)
	}
}

// With a budget too short to matter, the channel still sleeps and is woken
// by the host's interrupts: busy polling changes nothing else.
func TestBusyPollFallsBackToInterrupts(t *testing.T) {
	_, _, hd := newSimDevice(t, sim.DefaultProfile, sim.DeviceConfig{RingSize: 64 << 10},
		vmbus.Options{BusyPoll: time.Nanosecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := &echo.Pump{Size: 200, Window: 64}
	if err := p.Run(ctx, hd.Primary(), 5000); err != nil {
		t.Fatal(err)
	}
	st := hd.Primary().Stats()
	t.Logf("stats %+v interrupts %d", st, hd.Interrupts())
	if st.MissedWakeups != 0 {
		t.Errorf("%d waits found data only on their timeout", st.MissedWakeups)
	}
}
