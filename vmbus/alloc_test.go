package vmbus_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/vmbusd/vmbusd/internal/testutil"
	"github.com/vmbusd/vmbusd/vmbus"
	"github.com/vmbusd/vmbusd/vmbus/vmbustest"
)

// The ring and channel hot paths allocate nothing in steady state: the
// budget is 0 per run. Each run moves a whole burst, so an allocation per
// packet shows as at least the burst size. testing.AllocsPerRun counts the
// whole process and rounds the mean down; 200 runs let a stray allocation
// by another goroutine round away, while one per run never can.
const allocRuns = 200

// TestRingBurstAllocatesNothing: writing a burst of packets, committing,
// reading them all back and committing the read, as a queue's burst does,
// through a 2 MiB ring (a NIC channel's size) that wraps during the runs.
func TestRingBurstAllocatesNothing(t *testing.T) {
	const burst = 32
	hdr := make([]byte, 8)
	tests := []struct {
		name  string
		write func(o *vmbus.OutRing, id uint64, payload []byte) error
	}{
		{"payload", func(o *vmbus.OutRing, id uint64, p []byte) error {
			return o.Write(vmbus.PacketInband, 0, id, nil, p)
		}},
		{"header and two payload slices", func(o *vmbus.OutRing, id uint64, p []byte) error {
			return o.Write(vmbus.PacketInband, vmbus.FlagCompletionRequested, id, hdr, p[:len(p)/2], p[len(p)/2:])
		}},
	}
	for _, tc := range tests {
		for _, size := range []int{64, 1500, 16 << 10} {
			t.Run(fmt.Sprintf("%s/%dB", tc.name, size), func(t *testing.T) {
				mem := make([]byte, vmbus.DataOffset()+2<<20-4096)
				if err := vmbus.InitRingHeader(mem); err != nil {
					t.Fatal(err)
				}
				o, err := vmbus.NewOutRing(mem)
				if err != nil {
					t.Fatal(err)
				}
				in, err := vmbus.NewInRing(mem, 0)
				if err != nil {
					t.Fatal(err)
				}
				payload := make([]byte, size)
				buf := make([]byte, in.MaxPacket())
				id := uint64(0)
				testutil.AllocBudget(t, 0, allocRuns, func() {
					for range burst {
						if err := tc.write(o, id, payload); err != nil {
							t.Fatal(err)
						}
						id++
					}
					o.Commit()
					for range burst {
						if _, err := in.Read(buf); err != nil {
							t.Fatal(err)
						}
					}
					if _, err := in.Read(buf); err != vmbus.ErrRingEmpty {
						t.Fatalf("read past the burst: %v", err)
					}
					in.Commit()
				})
				if wraps := id * uint64(vmbus.PacketSize(len(hdr), size)) / uint64(o.DataSize()); size >= 1500 && wraps == 0 {
					t.Fatalf("%d packets of %d bytes never wrapped the ring", id, size)
				}
			})
		}
	}
}

// TestRingFullAllocatesNothing: a writer that finds the ring full gets its
// *RingFullError without an allocation (it retries in a loop under load).
func TestRingFullAllocatesNothing(t *testing.T) {
	mem := make([]byte, vmbus.DataOffset()+4096)
	if err := vmbus.InitRingHeader(mem); err != nil {
		t.Fatal(err)
	}
	o, err := vmbus.NewOutRing(mem)
	if err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 1000)
	for o.Write(vmbus.PacketInband, 0, 0, nil, payload) == nil {
	}
	testutil.AllocBudget(t, 0, allocRuns, func() {
		// A type assertion, not errors.As: its target would escape.
		if _, full := o.Write(vmbus.PacketInband, 0, 0, nil, payload).(*vmbus.RingFullError); !full {
			t.Fatal("a write to the full ring did not report it full")
		}
	})
}

// TestChannelRoundTripAllocatesNothing: a request from the guest, its
// completion from the host and the guest's receipt of it, through both
// ends' channel code and the request table. "masked" is the steady state
// of two busy ends (neither signals); "signalling" unmasks both before
// each round, so every commit raises a signal and every signal a wake-up.
func TestChannelRoundTripAllocatesNothing(t *testing.T) {
	for _, signalling := range []bool{false, true} {
		name := "masked"
		if signalling {
			name = "signalling"
		}
		t.Run(name, func(t *testing.T) {
			p := vmbustest.New(t, vmbustest.Options{Requests: 16})
			g, h := p.Guest, p.Host
			ctx := context.Background()
			req, answer := make([]byte, 200), make([]byte, 200)
			testutil.AllocBudget(t, 0, allocRuns, func() {
				if signalling {
					h.In().SetInterruptMask(false)
					g.In().SetInterruptMask(false)
				}
				if _, err := g.SendRequest(vmbus.PacketInband, 42, nil, req); err != nil {
					t.Fatal(err)
				}
				if err := g.Flush(); err != nil {
					t.Fatal(err)
				}
				if err := h.WaitReadable(ctx); err != nil {
					t.Fatal(err)
				}
				pkt, err := h.Recv()
				if err != nil {
					t.Fatal(err)
				}
				if err := h.SendCompletion(pkt.TransID, answer); err != nil {
					t.Fatal(err)
				}
				if err := h.Flush(); err != nil {
					t.Fatal(err)
				}
				if err := h.CommitRecv(); err != nil {
					t.Fatal(err)
				}
				if err := g.WaitReadable(ctx); err != nil {
					t.Fatal(err)
				}
				c, err := g.Recv()
				if err != nil || c.Cookie != 42 {
					t.Fatalf("completion %+v, %v", c, err)
				}
				if err := g.CommitRecv(); err != nil {
					t.Fatal(err)
				}
			})
			st := p.Stats()
			if signalling && (st.Interrupts < allocRuns || st.GuestSignals < allocRuns) {
				t.Fatalf("%+v: the signalling case raised fewer signals than rounds", st)
			}
			if !signalling && (st.Interrupts != 0 || st.GuestSignals != 0) {
				t.Fatalf("%+v: the masked case signalled", st)
			}
		})
	}
}

// TestChannelBlockingWaitAllocatesNothing: a guest that sends one packet
// and sleeps on its interrupt until the host's echo wakes it, the host
// sleeping the same way in another goroutine: the waits that block
// (unmask, re-check, park, wake) allocate nothing at either end.
func TestChannelBlockingWaitAllocatesNothing(t *testing.T) {
	testutil.CheckGoroutineLeaks(t)
	p := vmbustest.New(t, vmbustest.Options{})
	g, h := p.Guest, p.Host
	ctx := context.Background()
	hostDone := make(chan error, 1)
	go func() {
		for {
			pkt, err := h.Recv()
			if err == vmbus.ErrRingEmpty {
				if err := h.CommitRecv(); err != nil {
					hostDone <- err
					return
				}
				if err := h.WaitReadable(ctx); err != nil {
					hostDone <- err
					return
				}
				continue
			}
			if err == nil {
				err = h.SendInband(pkt.TransID, pkt.Payload())
			}
			if err == nil {
				err = h.Flush()
			}
			if err != nil {
				hostDone <- err
				return
			}
		}
	}()
	payload := make([]byte, 64)
	id := uint64(0)
	testutil.AllocBudget(t, 0, allocRuns, func() {
		id++
		if err := g.SendInband(id, payload); err != nil {
			t.Fatal(err)
		}
		if err := g.Flush(); err != nil {
			t.Fatal(err)
		}
		for {
			pkt, err := g.Recv()
			if err == vmbus.ErrRingEmpty {
				if err := g.WaitReadable(ctx); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if err != nil || pkt.TransID != id {
				t.Fatalf("echo %+v, %v; want id %d", pkt, err, id)
			}
			break
		}
		if err := g.CommitRecv(); err != nil {
			t.Fatal(err)
		}
	})
	p.Close()
	if err := <-hostDone; !errors.Is(err, vmbus.ErrChannelClosed) {
		t.Fatalf("host loop: %v", err)
	}
	if st := g.Stats(); st.IdleWaits == 0 || st.Wakeups == 0 {
		t.Fatalf("guest stats %+v: the guest never slept on an interrupt, so the test measured no blocking wait", st)
	}
}
