package main

import (
	"fmt"
	"math"
	"os"

	"golang.org/x/sys/unix"

	"github.com/vmbusd/vmbusd/vmbus"
)

// The ring file is one channel's ring pair, laid out like uio_hv_generic's
// txrx_rings map and ringpeer's file: ring 1 (guest to host) at offset 0,
// ring 2 (host to guest) at offset R = TOTAL/2. Each ring is a 4096-byte
// header page followed by R-4096 bytes of data.
const headerPage = 4096

func checkSize(path string, total uint64) error {
	if total%(2*headerPage) != 0 || total/2 <= headerPage || total/2 > math.MaxUint32 {
		return fmt.Errorf("%s: size must be 2 x 4096 x k with k >= 2", path)
	}
	return nil
}

// initFile creates or zeroes path at total bytes and prepares both ring
// headers (zero indices, feature_bits = pending_send_sz), which is what
// ringpeer's init and Linux's hv_ringbuffer_init produce.
func initFile(path string, total uint64) error {
	if err := checkSize(path, total); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Truncate(0); err != nil {
		return err
	}
	if err := f.Truncate(int64(total)); err != nil {
		return err
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(total), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("cannot map %s: %w", path, err)
	}
	defer unix.Munmap(mem)
	half := int(total / 2)
	for _, r := range [][]byte{mem[:half:half], mem[half:]} {
		if err := vmbus.InitRingHeader(r); err != nil {
			return err
		}
	}
	return nil
}

// mapRings maps the ring file shared and returns the ring this role writes
// and the one it reads: a guest writes ring 1 and reads ring 2, a host the
// reverse.
func mapRings(path string, host bool) (out, in []byte, err error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	total := uint64(st.Size())
	if err := checkSize(path, total); err != nil {
		return nil, nil, err
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(total), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot map %s: %w", path, err)
	}
	half := int(total / 2)
	ring1, ring2 := mem[:half:half], mem[half:]
	if host {
		return ring2, ring1, nil
	}
	return ring1, ring2, nil
}
