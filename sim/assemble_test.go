package sim

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/vmbusd/vmbusd/hvsock"
	"github.com/vmbusd/vmbusd/vmbus"
)

// TestConfigFaultsReachEveryDevice: Config.Faults are on for every device
// the host offers: test devices, NICs and hv_sock connection channels.
func TestConfigFaultsReachEveryDevice(t *testing.T) {
	const f = FaultSlowHost // harmless here: the delay is 0
	h, err := New(Config{Root: t.TempDir(), Faults: []Fault{f}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	td, err := h.AddDevice(DeviceConfig{Class: vmbus.ClassTest})
	if err != nil {
		t.Fatal(err)
	}
	nic, err := h.AddNIC(NICConfig{RingSize: 64 << 10, RecvBuffer: 1 << 20, SendBuffer: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	hv, err := h.StartHvSock(HvSockConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer hv.Close()
	l, err := hv.Listen(2770)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		if c, err := l.Accept(); err == nil {
			c.Close()
		}
	}()
	g, err := (&hvsock.Config{Transport: hvsock.TransportVMBus, Root: h.Root()}).Dial(context.Background(), 2770)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	kinds := map[string]bool{}
	for _, d := range h.Devices() {
		kind := "hv_sock"
		switch d {
		case td:
			kind = "test"
		case nic.Device():
			kind = "nic"
		}
		kinds[kind] = true
		if !d.Faults().Has(f) {
			t.Errorf("%s device %s: fault %s off", kind, d.Instance(), f)
		}
	}
	if len(kinds) != 3 {
		t.Fatalf("devices seen: %v, want a test device, a NIC and an hv_sock channel", kinds)
	}
}

// TestCloseRemovesGuestMemory: R/dev/guestmem, created for a NIC, goes
// with the host that served it (on tmpfs its pages hold RAM); the rest of
// the tree stays.
func TestCloseRemovesGuestMemory(t *testing.T) {
	root := t.TempDir()
	h, err := New(Config{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.AddNIC(NICConfig{RingSize: 64 << 10, RecvBuffer: 1 << 20, SendBuffer: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	mem := filepath.Join(root, GuestMemPath)
	if _, err := os.Stat(mem); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(mem); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s after Close: %v", mem, err)
	}
	if _, err := os.Stat(filepath.Join(root, "proc/sys/kernel/osrelease")); err != nil {
		t.Fatalf("the tree went too: %v", err)
	}
}
