//go:build linux

package afxdp_test

import (
	"testing"

	"github.com/vmbusd/vmbusd/internal/testutil"
)

func TestRxPendingFollowsTheRing(t *testing.T) {
	a, b := vethPair(t, 1)
	p := openPort(t, b, smallConfig())
	rx := p.Sockets()[0]
	tx := openSocket(t, a, 0, smallConfig())
	if rx.RxPending() {
		t.Fatal("pending before any frame")
	}
	sendAll(t, tx, [][]byte{testFrame(64, 0, 1), testFrame(64, 0, 2)})
	testutil.WaitFor(t, 0, rx.RxPending, "frames pending")
	recvN(t, rx, 2)
	if rx.RxPending() {
		t.Error("pending after every frame was taken")
	}
	sendAll(t, tx, [][]byte{testFrame(64, 0, 3)})
	testutil.WaitFor(t, 0, rx.RxPending, "a frame pending")
	p.Close()
	if rx.RxPending() {
		t.Error("pending on a closed socket")
	}
}
