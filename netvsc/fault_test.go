package netvsc_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/clock/clocktest"
	"github.com/vmbusd/vmbusd/frame"
	"github.com/vmbusd/vmbusd/netvsc"
	"github.com/vmbusd/vmbusd/netvsc/nvsp"
	"github.com/vmbusd/vmbusd/netvsc/protoerr"
	"github.com/vmbusd/vmbusd/sim"
	"github.com/vmbusd/vmbusd/vmbus"
)

// traffic pushes frames through a reflector until the NIC fails or the
// timeout, and returns the NIC's error.
func traffic(n *netvsc.NIC, d time.Duration) error {
	deadline := time.Now().Add(d)
	peer := []byte{0x02, 0, 0, 0, 0, 9}
	pkts := make([]*frame.Packet, 16)
	for seq := uint32(0); time.Now().Before(deadline); seq++ {
		for _, q := range n.Queues() {
			if err := q.Err(); err != nil {
				return err
			}
			if p := q.Alloc(); p != nil {
				f := testFrame(peer, n.MAC(), 200, seq, 1000)
				copy(p.SetLen(len(f)), f)
				if q.TxBurst([]*frame.Packet{p}) == 0 {
					p.Free()
				}
			}
			k := q.RxBurst(pkts)
			frame.PutBurst(pkts[:k])
			ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
			q.Wait(ctx)
			cancel()
		}
	}
	return n.Err()
}

// TestHostFaultResetsOnlyThatDevice switches on each host fault on one of
// two NICs: the faulty one dies with a *DeviceError naming the check,
// counted once; the other keeps working; closing and reopening the faulty
// one (the reset) works.
func TestHostFaultResetsOnlyThatDevice(t *testing.T) {
	fatal := []struct {
		fault sim.NICFault
		check string
	}{
		{sim.NICFaultXferPageSet, "netvsc: wrong type"},
		{sim.NICFaultRangeOutsideBuffer, "netvsc: out of range"},
		{sim.NICFaultSectionIndex, "netvsc: section index"},
		{sim.NICFaultNVSPType, "netvsc: wrong type"},
		{sim.NICFaultRNDISLength, "netvsc: bad message length"},
		{sim.NICFaultRNDISOffset, "netvsc: out of range"},
		{sim.NICFaultRNDISDataLength, "netvsc: no data"},
		{sim.NICFaultBadPPI, "netvsc: bad ppi size"},
		{sim.NICFaultRNDISType, "netvsc: wrong type"},
		{sim.NICFaultUnknownCompletion, "vmbus: completion id"},
	}
	h, err := sim.New(sim.Config{Root: t.TempDir(), Profile: sim.DefaultProfile})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	other := openOn(t, h, sim.NICConfig{}, sim.NewReflector(), netvsc.Config{})
	defer other.Close()
	for _, tc := range fatal {
		t.Run(tc.fault.String(), func(t *testing.T) {
			sn, err := h.AddNIC(sim.NICConfig{RingSize: 256 << 10, RecvBuffer: 4 << 20, SendBuffer: 2 << 20})
			if err != nil {
				t.Fatal(err)
			}
			defer sn.Remove()
			sn.Attach(sim.NewReflector())
			n := openNIC(t, h, sn, netvsc.Config{})
			sn.SetFault(tc.fault, true)
			err = traffic(n, 5*time.Second)
			var de *netvsc.DeviceError
			if !errors.As(err, &de) {
				t.Fatalf("after %s: %v, want a *DeviceError", tc.fault, err)
			}
			if de.Check != tc.check {
				t.Errorf("check %q, want %q (%v)", de.Check, tc.check, err)
			}
			if v := n.Stats().Violations[tc.check]; v != 1 {
				t.Errorf("violations %v", n.Stats().Violations)
			}
			if err := n.Queues()[0].Wait(context.Background()); !errors.As(err, &de) {
				t.Errorf("Wait after failure: %v", err)
			}
			n.Close()
			// The reset: reopen and use it.
			n = openNIC(t, h, sn, netvsc.Config{})
			roundTrip(t, n, n.Queues()[0], 50, []int{100})
			n.Close()
			// The other NIC carried on.
			roundTrip(t, other, other.Queues()[0], 50, []int{100})
		})
	}
}

// TestDuplicateTIDKillsDevice: the host sends a receive packet twice with
// the same transaction id while the first is not completed. The guest
// can see that only while the first is still owed (both arrive in one
// drain, as the host publishes them together), so the one-shot fault is
// re-armed until it lands.
func TestDuplicateTIDKillsDevice(t *testing.T) {
	_, sn, n := newNIC(t, sim.NICConfig{}, sim.NewReflector(), netvsc.Config{})
	var err error
	for deadline := time.Now().Add(20 * time.Second); err == nil && time.Now().Before(deadline); {
		sn.SetFault(sim.NICFaultDuplicateTID, true)
		err = traffic(n, 100*time.Millisecond)
	}
	var de *netvsc.DeviceError
	if !errors.As(err, &de) || de.Check != "netvsc: duplicate transaction id" {
		t.Fatalf("%v, want a *DeviceError for a duplicate transaction id", err)
	}
	if pe, ok := protoerr.As(err); !ok || pe.Kind != protoerr.KindDuplicateTID {
		t.Errorf("not a duplicate-tid *protoerr.Error: %v", err)
	}
	if v := n.Stats().Violations; v["netvsc: duplicate transaction id"] != 1 {
		t.Errorf("violations %v", v)
	}
}

func TestRingFaultKillsDevice(t *testing.T) {
	for _, f := range []sim.Fault{sim.FaultBadLen8, sim.FaultBadType, sim.FaultCorruptWriteIndex, sim.FaultBadRanges} {
		t.Run(f.String(), func(t *testing.T) {
			_, sn, n := newNIC(t, sim.NICConfig{}, sim.NewReflector(), netvsc.Config{})
			// A corrupted write index lasts only until the host's next
			// commit rewrites it, so the guest may not see one in time:
			// re-arm the one-shot fault until it is caught.
			var err error
			for deadline := time.Now().Add(20 * time.Second); err == nil && time.Now().Before(deadline); {
				sn.Device().SetFault(f, true)
				err = traffic(n, 100*time.Millisecond)
			}
			var de *netvsc.DeviceError
			if !errors.As(err, &de) {
				t.Fatalf("%v", err)
			}
			if _, ok := vmbus.IsCorrupt(err); !ok {
				t.Errorf("not a ring corruption: %v", err)
			}
			t.Logf("%s -> %v", f, err)
		})
	}
}

// TestEveryNICFaultAtBringUp switches each of the simulator's NIC faults
// on before the guest opens the NIC. A fault that breaks the protocol
// during bring-up makes Open fail with a *DeviceError whose check names it
// (CheckOf, as the owner counts it: *protoerr.Error, or *vmbus.CorruptError
// for the ring); a refusal is a typed refusal; the rest first bite on the
// data path (TestHostFaultResetsOnlyThatDevice) or are tolerated.
func TestEveryNICFaultAtBringUp(t *testing.T) {
	want := map[sim.NICFault]string{
		sim.NICFaultUnknownCompletion:   "vmbus: completion id",
		sim.NICFaultRecvSections:        "netvsc: section count",
		sim.NICFaultRecvOffset:          "netvsc: section offset",
		sim.NICFaultRecvFit:             "netvsc: sections do not fit",
		sim.NICFaultSendSection:         "netvsc: section size",
		sim.NICFaultBadIndirectionTable: "netvsc: table count",
		sim.NICFaultRNDISRequestID:      "netvsc: wrong type",
		sim.NICFaultRNDISQueryInfo:      "netvsc: out of range",
		sim.NICFaultBadIndication:       "netvsc: out of range",
		sim.NICFaultRNDISStatus:         "refused",
	}
	h, err := sim.New(sim.Config{Root: t.TempDir(), Profile: sim.DefaultProfile})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, f := range sim.AllNICFaults() {
		t.Run(f.String(), func(t *testing.T) {
			sn, err := h.AddNIC(sim.NICConfig{RingSize: 256 << 10, RecvBuffer: 4 << 20, SendBuffer: 2 << 20, MaxQueues: 4,
				Faults: []sim.NICFault{f}})
			if err != nil {
				t.Fatal(err)
			}
			defer sn.Remove()
			sn.Attach(sim.NewReflector())
			dev, _ := vmbus.LookupDevice(h.Root(), sn.Device().Instance())
			n, err := netvsc.Open(context.Background(), dev, netvsc.Config{Queues: 4, ControlTimeout: 5 * time.Second, PoolPackets: 256})
			if err == nil {
				n.Close()
			}
			check := want[f]
			switch {
			case check == "":
				if err != nil {
					t.Fatalf("Open: %v, want it to come up", err)
				}
			case check == "refused":
				var re *netvsc.RNDISError
				if !errors.As(err, &re) || netvsc.CheckOf(err) != "" {
					t.Fatalf("Open: %v, want an *RNDISError that is no violation", err)
				}
			default:
				var de *netvsc.DeviceError
				if !errors.As(err, &de) || de.Check != check || netvsc.CheckOf(err) != check {
					t.Fatalf("Open: %v (check %q), want a *DeviceError with check %q", err, netvsc.CheckOf(err), check)
				}
				_, pe := protoerr.As(err)
				_, ce := vmbus.IsCorrupt(err)
				if pe == ce {
					t.Errorf("Open: %v: protocol error %v, ring corruption %v: want exactly one", err, pe, ce)
				}
			}
		})
	}
}

func TestTolerableHostBehaviour(t *testing.T) {
	t.Run("nvsp-status", func(t *testing.T) {
		var logs syncBuffer
		_, _, n := newNIC(t, sim.NICConfig{Faults: []sim.NICFault{sim.NICFaultNVSPStatus}}, sim.NewReflector(),
			netvsc.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if v, _ := n.Protocol(); v != nvsp.Version6 {
			t.Errorf("NVSP %#x after 6.1 failed, want 6.0", v)
		}
		if c := n.Stats().ControlFailures; c != 1 {
			t.Errorf("%d control failures counted, want 1", c)
		}
		if l := logs.String(); !strings.Contains(l, `msg="host refused a control request"`) || !strings.Contains(l, `request="INIT 0x60001" status=fail`) {
			t.Errorf("no log line for the refused INIT:\n%s", logs.String())
		}
	})
	// table-during-sync is left out: the simulator builds the table in the
	// buffer that holds the completion it precedes, so the completion
	// arrives carrying the table (reported to the sim's author).
	t.Run("rx-during-setup", func(t *testing.T) {
		_, _, n := newNIC(t, sim.NICConfig{MaxQueues: 2, Faults: []sim.NICFault{sim.NICFaultRxDuringSetup}},
			sim.NewReflector(), netvsc.Config{Queues: 2})
		roundTrip(t, n, n.Queues()[1], 100, []int{64})
		t.Logf("ignored during setup: %d", n.Stats().RxIgnored)
	})
	t.Run("tx-fail", func(t *testing.T) {
		var logs syncBuffer
		_, sn, n := newNIC(t, sim.NICConfig{}, sim.NewReflector(), netvsc.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		sn.SetFault(sim.NICFaultTxFail, true)
		traffic(n, 50*time.Millisecond)
		if err := n.Err(); err != nil {
			t.Fatal(err)
		}
		if sn.FaultHits(sim.NICFaultTxFail) != 1 {
			t.Fatal("the fault did not fire")
		}
		if st := n.Stats(); st.Queues[0].TxFailed == 0 && st.ControlFailures == 0 {
			t.Errorf("no failed send counted")
		}
		if !strings.Contains(logs.String(), "host failed a send") && !strings.Contains(logs.String(), "request=\"control send\"") {
			t.Errorf("no log line for the failed send:\n%s", logs.String())
		}
	})
	t.Run("link-flap-logged-at-a-bounded-rate", func(t *testing.T) {
		var logs syncBuffer
		_, sn, n := newNIC(t, sim.NICConfig{LinkSpacing: time.Millisecond}, sim.NewReflector(),
			netvsc.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		sn.SetFault(sim.NICFaultLinkFlap, true)
		for deadline := time.Now().Add(20 * time.Second); n.Stats().LinkChanges < 4*vmbus.DefaultLogBurst; {
			if time.Now().After(deadline) {
				t.Fatalf("%d link changes", n.Stats().LinkChanges)
			}
			traffic(n, 10*time.Millisecond)
		}
		sn.SetFault(sim.NICFaultLinkFlap, false)
		if err := n.Err(); err != nil {
			t.Fatal(err)
		}
		if k := strings.Count(logs.String(), "msg=link "); k > vmbus.DefaultLogBurst {
			t.Errorf("%d link lines logged for %d changes, want at most %d a minute", k, n.Stats().LinkChanges, vmbus.DefaultLogBurst)
		}
	})
	t.Run("keepalive", func(t *testing.T) {
		_, sn, n := newNIC(t, sim.NICConfig{}, sim.NewReflector(), netvsc.Config{})
		sn.SetFault(sim.NICFaultKeepalive, true)
		traffic(n, 50*time.Millisecond)
		if err := n.Err(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("rndis-status", func(t *testing.T) {
		_, sn, n := newNIC(t, sim.NICConfig{}, sim.NewReflector(), netvsc.Config{})
		sn.SetFault(sim.NICFaultRNDISStatus, true)
		_, err := n.QueryLink(context.Background())
		var re *netvsc.RNDISError
		if !errors.As(err, &re) {
			t.Fatalf("QueryLink: %v", err)
		}
		if _, err := n.QueryLink(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("slow-vsp", func(t *testing.T) {
		// The bring-up gets the default timeout (a short one can expire
		// on a loaded machine); the query's context bounds it like
		// ControlTimeout does, against a host that never answers.
		_, sn, n := newNIC(t, sim.NICConfig{}, sim.NewReflector(), netvsc.Config{})
		sn.SetControlDelay(time.Hour)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if _, err := n.QueryLink(ctx); !errors.Is(err, netvsc.ErrControlTimeout) {
			t.Fatalf("QueryLink: %v", err)
		}
		if c := n.Stats().ControlTimeouts; c != 1 {
			t.Errorf("%d control timeouts counted", c)
		}
		if n.Err() != nil {
			t.Fatal(n.Err())
		}
	})
	t.Run("control-timeout", func(t *testing.T) {
		// ControlTimeout itself, on a fake clock: bring-up cannot time
		// out however loaded the machine, and the query against a host
		// that never answers ends exactly when the timeout does.
		clk := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		cfg := netvsc.Config{ControlTimeout: 10 * time.Second, Clock: clk}
		_, sn, n := newNIC(t, sim.NICConfig{}, sim.NewReflector(), cfg)
		sn.SetControlDelay(time.Hour)
		done := make(chan error, 1)
		go func() {
			_, err := n.QueryLink(context.Background())
			done <- err
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := clk.WaitTimer(ctx, cfg.ControlTimeout); err != nil {
			t.Fatal(err)
		}
		clk.Advance(cfg.ControlTimeout - 1)
		select {
		case err := <-done:
			t.Fatalf("QueryLink returned (%v) before ControlTimeout", err)
		default:
		}
		clk.Advance(1)
		select {
		case err := <-done:
			if !errors.Is(err, netvsc.ErrControlTimeout) {
				t.Fatalf("QueryLink: %v, want ErrControlTimeout", err)
			}
		case <-ctx.Done():
			t.Fatal("QueryLink did not return after ControlTimeout")
		}
		if c := n.Stats().ControlTimeouts; c != 1 {
			t.Errorf("%d control timeouts counted", c)
		}
		if n.Err() != nil {
			t.Fatal(n.Err())
		}
	})
	t.Run("late-answer", func(t *testing.T) {
		// The answer to a query that timed out arrives while the next
		// query waits: stale, dropped and counted, as Linux does, never a
		// violation. The host answers in order, so the late answer
		// always comes first.
		_, sn, n := newNIC(t, sim.NICConfig{}, sim.NewReflector(), netvsc.Config{})
		sn.SetControlDelay(300 * time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		if _, err := n.QueryLink(ctx); !errors.Is(err, netvsc.ErrControlTimeout) {
			t.Fatalf("QueryLink: %v", err)
		}
		if _, err := n.QueryLink(context.Background()); err != nil {
			t.Fatalf("QueryLink after a timed-out one: %v", err)
		}
		if err := n.Err(); err != nil {
			t.Fatal(err)
		}
		ev := n.Stats().HostEvents
		if ev["late QUERY_CMPLT"] != 1 {
			t.Errorf("host events %v, want one late QUERY_CMPLT", ev)
		}
	})
}

func TestControlAnswerFaults(t *testing.T) {
	for _, tc := range []struct {
		fault sim.NICFault
		check string
	}{
		{sim.NICFaultRNDISRequestID, "netvsc: wrong type"},
		{sim.NICFaultRNDISQueryInfo, "netvsc: out of range"},
	} {
		t.Run(tc.fault.String(), func(t *testing.T) {
			_, sn, n := newNIC(t, sim.NICConfig{}, sim.NewReflector(), netvsc.Config{})
			sn.SetFault(tc.fault, true)
			_, err := n.QueryLink(context.Background())
			if got := netvsc.CheckOf(err); got != tc.check {
				t.Errorf("QueryLink: %v (check %q), want %q", err, got, tc.check)
			}
		})
	}
}

func openNIC(t testing.TB, h *sim.Host, sn *sim.NIC, cfg netvsc.Config) *netvsc.NIC {
	t.Helper()
	dev, err := vmbus.LookupDevice(h.Root(), sn.Device().Instance())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ControlTimeout == 0 {
		cfg.ControlTimeout = 10 * time.Second
	}
	if cfg.PoolPackets == 0 {
		cfg.PoolPackets = 512
	}
	n, err := netvsc.Open(context.Background(), dev, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func openOn(t testing.TB, h *sim.Host, nc sim.NICConfig, port sim.Port, cfg netvsc.Config) *netvsc.NIC {
	nc.RingSize, nc.RecvBuffer, nc.SendBuffer = 256<<10, 4<<20, 2<<20
	sn, err := h.AddNIC(nc)
	if err != nil {
		t.Fatal(err)
	}
	sn.Attach(port)
	return openNIC(t, h, sn, cfg)
}

func TestMalformedHostMessages(t *testing.T) {
	t.Run("bad-indication", func(t *testing.T) {
		_, sn, n := newNIC(t, sim.NICConfig{LinkSpacing: time.Millisecond}, sim.NewReflector(), netvsc.Config{})
		sn.SetFault(sim.NICFaultBadIndication, true)
		sn.SetLink(false) // the indication that carries the fault
		err := traffic(n, 5*time.Second)
		if got := netvsc.CheckOf(err); got != "netvsc: out of range" {
			t.Errorf("%v (check %q)", err, got)
		}
	})
	t.Run("bad-indirection-table", func(t *testing.T) {
		h, err := sim.New(sim.Config{Root: t.TempDir(), Profile: sim.DefaultProfile})
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		sn, err := h.AddNIC(sim.NICConfig{RingSize: 256 << 10, RecvBuffer: 4 << 20, SendBuffer: 2 << 20, MaxQueues: 2,
			Faults: []sim.NICFault{sim.NICFaultBadIndirectionTable}})
		if err != nil {
			t.Fatal(err)
		}
		sn.Attach(sim.NewReflector())
		dev, _ := vmbus.LookupDevice(h.Root(), sn.Device().Instance())
		n, err := netvsc.Open(context.Background(), dev, netvsc.Config{Queues: 2, ControlTimeout: 5 * time.Second})
		if err == nil {
			defer n.Close()
			err = traffic(n, 5*time.Second)
		}
		if got := netvsc.CheckOf(err); got != "netvsc: table count" {
			t.Errorf("%v (check %q)", err, got)
		}
	})
}

// syncBuffer is a bytes.Buffer safe for a logger and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
