package bus

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

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
