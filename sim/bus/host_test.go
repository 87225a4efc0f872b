package bus

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/vmbus"
)

// TestSecondHostOnALiveRootIsRefused: a second host on a root another one
// serves fails before it touches anything (the first one's device nodes
// stay); once the first has closed, a new host takes the root over.
func TestSecondHostOnALiveRootIsRefused(t *testing.T) {
	root := t.TempDir()
	h, err := New(Config{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	d, err := h.AddDevice(DeviceConfig{Class: vmbus.ClassTest})
	if err != nil {
		t.Fatal(err)
	}
	node := d.UIONode()
	before, err := os.Stat(node)
	if err != nil {
		t.Fatal(err)
	}
	osrel := filepath.Join(root, osReleasePath)
	relBefore, _ := os.Stat(osrel)
	for _, prof := range []Profile{DefaultProfile, ProfileLegacy} { // a legacy host would rewrite osrelease
		_, err := New(Config{Root: root, Profile: prof})
		if !errors.Is(err, ErrRootInUse) {
			t.Fatalf("second host on a live root: %v, want ErrRootInUse", err)
		}
	}
	if after, err := os.Stat(node); err != nil || !os.SameFile(before, after) {
		t.Fatalf("the first host's %s was replaced or removed: %v", node, err)
	}
	if relAfter, _ := os.Stat(osrel); !relAfter.ModTime().Equal(relBefore.ModTime()) {
		t.Fatal("the second host rewrote osrelease")
	}
	// The first host still serves its device.
	dev, err := vmbus.LookupDevice(root, d.Instance())
	if err != nil {
		t.Fatal(err)
	}
	hd, err := vmbus.Open(dev, vmbus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	hd.Close()
	h.Close()
	h2, err := New(Config{Root: root})
	if err != nil {
		t.Fatalf("a host after the first closed: %v", err)
	}
	h2.Close()
}

// holdService hands its session's primary channel to the test and then
// neither reads nor waits: its host end drains nothing and never asks for
// a signal.
type holdService struct{ got chan<- *Channel }

func (s holdService) Serve(ctx context.Context, ss *Session) error {
	s.got <- ss.Primary()
	<-ctx.Done()
	return nil
}

// TestMonitorScannerRunsOnlyWhileAHostEndWaits: a guest signals a
// monitored channel only while the host's end waits for it (its
// interrupt_mask clear or its pending_send_sz set), so with no end waiting
// the scanner parks and a bit set then stays pending; once an end begins
// a wait the bit is taken within the scan latency and wakes it, and so is
// one set during the wait.
func TestMonitorScannerRunsOnlyWhileAHostEndWaits(t *testing.T) {
	h, err := New(Config{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	got := make(chan *Channel, 1)
	d, err := h.AddDevice(DeviceConfig{Class: vmbus.ClassTest, Service: holdService{got}})
	if err != nil {
		t.Fatal(err)
	}
	dev, err := vmbus.LookupDevice(h.Root(), d.Instance())
	if err != nil {
		t.Fatal(err)
	}
	hd, err := vmbus.Open(dev, vmbus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer hd.Close()
	var c *Channel
	select {
	case c = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the service never started")
	}
	if c.mon < 0 {
		t.Fatal("the test device's channel has no monitor id")
	}
	sig, err := vmbus.NewMonitorSignaler(h.monPage, c.mon)
	if err != nil {
		t.Fatal(err)
	}
	g, bit := c.mon/32, uint32(1)<<(c.mon%32)
	wake := func(what string) {
		t.Helper()
		select {
		case <-c.Wake():
		case <-time.After(2 * time.Second):
			t.Fatalf("%s: no wake-up within 2 s", what)
		}
		if vmbus.MonitorPeek(h.monPage, g)&bit != 0 {
			t.Fatalf("%s: woken, but the bit is still pending", what)
		}
	}

	// Nobody waits: a bit set now is not scanned for, over many times
	// the 100 µs scan interval.
	sig.Signal()
	<-time.After(50 * time.Millisecond)
	if vmbus.MonitorPeek(h.monPage, g)&bit == 0 {
		t.Fatal("the scanner took a bit while no host end waited for a signal")
	}
	select {
	case <-c.Wake():
		t.Fatal("a wake-up while no host end waited")
	default:
	}

	// A wait begins: the pending bit is found.
	c.BeginWait()
	wake("bit set before the wait")
	// And one set during the wait.
	sig.Signal()
	wake("bit set during the wait")
	c.EndWait()

	// Waits nest: the scanner runs until the last one ends.
	c.BeginWait()
	c.BeginWait()
	c.EndWait()
	sig.Signal()
	wake("bit set while one of two waits remains")
	c.EndWait()
	if n := h.listening.Load(); n != 0 {
		t.Fatalf("%d waits counted after all ended", n)
	}
}
