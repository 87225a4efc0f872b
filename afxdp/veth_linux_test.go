//go:build linux

package afxdp_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

var vethSeq atomic.Uint32

// vethPair creates a veth pair with queues RX and TX queues on each end,
// named uniquely for this process, with IPv6 off (so the kernel sends
// nothing on it) and both ends up. It is deleted at cleanup. The test is
// skipped, with the kernel's reason, where veth cannot be created.
func vethPair(tb testing.TB, queues int) (a, b string) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root to create a veth pair")
	}
	n := vethSeq.Add(1)
	a = fmt.Sprintf("xa%d_%d", os.Getpid(), n)
	b = fmt.Sprintf("xb%d_%d", os.Getpid(), n)
	la := netlink.NewLinkAttrs()
	la.Name = a
	la.NumTxQueues, la.NumRxQueues = queues, queues
	la.MTU = 1500
	v := &netlink.Veth{LinkAttrs: la, PeerName: b, PeerNumTxQueues: uint32(queues), PeerNumRxQueues: uint32(queues)}
	if err := netlink.LinkAdd(v); err != nil {
		tb.Skipf("kernel refuses a veth pair: %v", err)
	}
	tb.Cleanup(func() { deleteLink(a) })
	for _, name := range []string{a, b} {
		_ = os.WriteFile("/proc/sys/net/ipv6/conf/"+name+"/disable_ipv6", []byte("1"), 0)
		l, err := netlink.LinkByName(name)
		if err != nil {
			tb.Fatalf("veth %s: %v", name, err)
		}
		if err := netlink.LinkSetUp(l); err != nil {
			tb.Fatalf("veth %s up: %v", name, err)
		}
	}
	return a, b
}

// deleteLink deletes a link if it still exists.
func deleteLink(name string) {
	if l, err := netlink.LinkByName(name); err == nil {
		_ = netlink.LinkDel(l)
	}
}

// skipIfNoXDP skips when the kernel refuses XDP or AF_XDP itself (as
// opposed to this package failing).
func skipIfNoXDP(tb testing.TB, err error) {
	tb.Helper()
	if err == nil {
		return
	}
	if errors.Is(err, unix.EAFNOSUPPORT) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) ||
		strings.Contains(err.Error(), "not supported") {
		tb.Skipf("kernel refuses XDP/AF_XDP: %v", err)
	}
}
