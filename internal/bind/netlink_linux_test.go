package bind

import (
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// inNetns runs the test on a thread of its own in a fresh network
// namespace, so that the netlink steps work on throwaway links.
func inNetns(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace")
	}
	runtime.LockOSThread() // never unlocked: the thread ends with the test
	orig, err := netns.Get()
	if err != nil {
		t.Skip(err)
	}
	ns, err := netns.New()
	if err != nil {
		orig.Close()
		t.Skipf("no network namespace: %v", err)
	}
	t.Cleanup(func() {
		netns.Set(orig)
		ns.Close()
		orig.Close()
	})
}

func TestNetlinkStepsSaveAndRestoreALink(t *testing.T) {
	inNetns(t)
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "vmbt0", MTU: 1500}, PeerName: "vmbt1"}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Skipf("no veth: %v", err)
	}
	link, err := netlink.LinkByName("vmbt0")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"10.9.0.4/24", "fd00:9::4/64"} {
		addr, _ := netlink.ParseAddr(a)
		if err := netlink.AddrAdd(link, addr); err != nil {
			t.Fatal(err)
		}
	}
	if err := netlink.LinkSetUp(link); err != nil {
		t.Fatal(err)
	}

	addrs, err := linkAddrs("vmbt0")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(addrs)
	if !slices.Equal(addrs, []string{"10.9.0.4/24", "fd00:9::4/64"}) {
		t.Errorf("linkAddrs = %v", addrs)
	}
	if !addrOnLink("vmbt0", netip.MustParseAddr("10.9.0.4")) || addrOnLink("vmbt0", netip.MustParseAddr("10.9.0.5")) {
		t.Error("addrOnLink wrong")
	}
	if err := setLinkDown("vmbt0"); err != nil {
		t.Fatal(err)
	}
	if l, _ := netlink.LinkByName("vmbt0"); l.Attrs().Flags&net.FlagUp != 0 {
		t.Error("still up after setLinkDown")
	}

	// The netdev comes back bare and under another name, as after a rebind.
	for _, a := range addrs {
		addr, _ := netlink.ParseAddr(a)
		netlink.AddrDel(link, addr)
	}
	if err := netlink.LinkSetName(link, "vmbt9"); err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetMTU(link, 1400); err != nil {
		t.Fatal(err)
	}
	name, err := restoreLink("vmbt9", Record{Interface: "vmbt0", MTU: 1500, Up: true, Addresses: addrs})
	if err != nil || name != "vmbt0" {
		t.Fatalf("restoreLink = %q, %v", name, err)
	}
	l, err := netlink.LinkByName("vmbt0")
	if err != nil {
		t.Fatal(err)
	}
	if l.Attrs().MTU != 1500 || l.Attrs().Flags&net.FlagUp == 0 {
		t.Errorf("restored link %+v", l.Attrs())
	}
	got, _ := linkAddrs("vmbt0")
	slices.Sort(got)
	if !slices.Equal(got, addrs) {
		t.Errorf("restored addresses %v, want %v", got, addrs)
	}
	// Again: addresses already there are fine.
	if _, err := restoreLink("vmbt0", Record{Interface: "vmbt0", MTU: 1500, Up: true, Addresses: addrs}); err != nil {
		t.Errorf("second restoreLink: %v", err)
	}
}
