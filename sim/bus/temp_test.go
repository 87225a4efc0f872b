package bus

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/vmbusd/vmbusd/vmbus"
)

func TestNewTempRemovesItsRoot(t *testing.T) {
	h, err := NewTemp(Config{})
	if err != nil {
		t.Fatal(err)
	}
	root := h.Root()
	if _, err := h.AddDevice(DeviceConfig{Class: vmbus.ClassTest, RingSize: 64 << 10}); err != nil {
		h.Close()
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "sys/bus/vmbus/devices")); err != nil {
		h.Close()
		t.Fatalf("no tree under the temporary root: %v", err)
	}
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() && filepath.Dir(root) != "/dev/shm" {
		t.Errorf("root %s is not on /dev/shm", root)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Errorf("root %s after Close: %v, want it gone", root, err)
	}
}

func TestNewTempRefusesARoot(t *testing.T) {
	root := t.TempDir()
	if h, err := NewTemp(Config{Root: root}); err == nil {
		h.Close()
		t.Fatal("NewTemp took a root it was given")
	}
	if ents, _ := os.ReadDir(root); len(ents) != 0 {
		t.Errorf("the refused root was written to: %d entries", len(ents))
	}
}
