package vmbus_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"vmbusd/sim"
	"vmbusd/vmbus"
)

// newSimDevice starts a simulated host under a fresh root with one test
// (echo) device and opens it from the guest side.
func newSimDevice(t *testing.T, prof sim.Profile, cfg sim.DeviceConfig, opts vmbus.Options) (*sim.Host, *sim.Device, *vmbus.Handle) {
	t.Helper()
	h, err := sim.New(sim.Config{Root: t.TempDir(), Profile: prof})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	if cfg.Class.IsZero() {
		cfg.Class = vmbus.ClassTest
	}
	d, err := h.AddDevice(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := vmbus.LookupDevice(h.Root(), d.Instance())
	if err != nil {
		t.Fatal(err)
	}
	hd, err := vmbus.Open(dev, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hd.Close() })
	return h, d, hd
}

func stamp(b []byte, seq uint64) {
	for k := 0; k+8 <= len(b); k += 8 {
		binary.LittleEndian.PutUint64(b[k:], seq*0x9E3779B97F4A7C15+uint64(k))
	}
}

func checkStamp(b []byte, seq uint64) bool {
	for k := 0; k+8 <= len(b); k += 8 {
		if binary.LittleEndian.Uint64(b[k:]) != seq*0x9E3779B97F4A7C15+uint64(k) {
			return false
		}
	}
	return true
}

// echo sends n stamped packets of size bytes through the echo host and
// checks every echo, keeping at most window packets in flight.
func echo(ctx context.Context, ch *vmbus.Channel, n, size, window int) error {
	out := make([]byte, size)
	sent, got := 0, 0
	for got < n {
		for sent < n && sent-got < window {
			stamp(out, uint64(sent))
			err := ch.SendInband(uint64(sent), out)
			var full *vmbus.RingFullError
			if errors.As(err, &full) {
				break
			}
			if err != nil {
				return fmt.Errorf("send %d: %w", sent, err)
			}
			sent++
		}
		if err := ch.Flush(); err != nil {
			return err
		}
		k := 0
		for {
			p, err := ch.Recv()
			if err == vmbus.ErrRingEmpty {
				break
			}
			if err != nil {
				return fmt.Errorf("recv after %d: %w", got, err)
			}
			if p.Type != vmbus.PacketInband || p.TransID != uint64(got) || !checkStamp(p.Payload()[:size], uint64(got)) {
				return fmt.Errorf("echo %d: type %s id %d bad", got, p.Type, p.TransID)
			}
			got++
			k++
		}
		if err := ch.CommitRecv(); err != nil {
			return err
		}
		if k == 0 && (sent == n || sent-got >= window) {
			if err := ch.WaitReadable(ctx); err != nil {
				return fmt.Errorf("wait after %d of %d: %w", got, n, err)
			}
		}
	}
	return nil
}

func TestEchoEveryProfile(t *testing.T) {
	for _, prof := range sim.Profiles() {
		for _, mode := range []vmbus.WaitMode{vmbus.WaitInterrupt, vmbus.WaitPoll} {
			t.Run(prof.String()+"/"+mode.String(), func(t *testing.T) {
				_, _, hd := newSimDevice(t, prof, sim.DeviceConfig{RingSize: 64 << 10}, vmbus.Options{Mode: mode})
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				if err := echo(ctx, hd.Primary(), 20000, 200, 64); err != nil {
					t.Fatal(err)
				}
				st := hd.Primary().Stats()
				t.Logf("stats %+v interrupts %d", st, hd.Interrupts())
				if mode == vmbus.WaitInterrupt && st.Wakeups == 0 {
					t.Errorf("interrupt mode never woke on an interrupt")
				}
			})
		}
	}
}
