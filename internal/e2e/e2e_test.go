// Package e2e runs vmbusd's user-space NIC end to end in network
// namespaces: the simulated host's vSwitch port is a kernel interface in
// one namespace, the guest's NIC is attached to a TAP in another, and
// real kernel traffic (ICMP echo, TCP) crosses the VMBus rings between
// them. Needs root and `ip`; skipped otherwise.
package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/vmbusd/vmbusd/internal/testutil"
	"github.com/vmbusd/vmbusd/netvsc"
	"github.com/vmbusd/vmbusd/nictap"
	"github.com/vmbusd/vmbusd/sim"
	"github.com/vmbusd/vmbusd/tap"
	"github.com/vmbusd/vmbusd/vmbus"
)

var (
	hostAddr  = netip.MustParsePrefix("10.77.0.1/24")
	guestAddr = netip.MustParsePrefix("10.77.0.2/24")
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip(8)")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skip("needs /dev/net/tun")
	}
}

// netnsAdd creates a named namespace, removed at cleanup even on failure.
func netnsAdd(t *testing.T, name string) {
	t.Helper()
	exec.Command("ip", "netns", "del", name).Run()
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Skipf("ip netns add: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	tap.InNetns(name, func() error {
		lo, err := netlink.LinkByName("lo")
		if err == nil {
			netlink.LinkSetUp(lo)
		}
		return nil
	})
}

// rig is one simulated host NIC with a kernel port in namespace hostNS and
// the guest NIC attached to a TAP in namespace guestNS.
type rig struct {
	host    *sim.Host
	sn      *sim.NIC
	port    *sim.TAP
	nic     *netvsc.NIC
	dev     *tap.Device
	att     *nictap.Attachment
	hostNS  string
	guestNS string
	opts    rigOptions
}

func newRig(t *testing.T, nc sim.NICConfig, queues int, veth bool) *rig {
	return newRigWith(t, nc, queues, veth, rigOptions{})
}

// rigOptions vary a rig's offloads: the guest TAP's and the host port's
// (virtio-net header and TUNSETOFFLOAD), the guest NIC's (host checksum
// and LSO offloads), and a GPA pool for the guest NIC.
type rigOptions struct {
	noTAPOffloads, noHostOffloads, noNICOffloads, gpa bool
	rsc                                               bool // netvsc.Config.RSC
}

func newRigWith(t *testing.T, nc sim.NICConfig, queues int, veth bool, o rigOptions) *rig {
	t.Helper()
	needRoot(t)
	id := fmt.Sprintf("%d%d", os.Getpid()%10000, time.Now().UnixNano()%1000)
	r := &rig{hostNS: "vmbh" + id, guestNS: "vmbg" + id, opts: o}
	netnsAdd(t, r.hostNS)
	netnsAdd(t, r.guestNS)
	var err error
	r.host, err = sim.New(sim.Config{Root: t.TempDir(), Profile: sim.DefaultProfile})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.host.Close() })
	r.port, err = sim.NewTAP(sim.TAPConfig{Netns: r.hostNS, Name: "hv0", Addr: hostAddr, Veth: veth, NoOffloads: o.noHostOffloads})
	if err != nil {
		t.Fatal(err)
	}
	r.sn, err = r.host.AddNIC(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.sn.Attach(r.port); err != nil {
		t.Fatal(err)
	}
	r.open(t, queues)
	return r
}

// open brings the guest side up: NIC, TAP, attachment.
func (r *rig) open(t *testing.T, queues int) {
	t.Helper()
	dev, err := vmbus.LookupDevice(r.host.Root(), r.sn.Device().Instance())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := netvsc.Config{Queues: queues, Mode: rigMode, ControlTimeout: 10 * time.Second, SubchannelTimeout: time.Second,
		NoOffloads: r.opts.noNICOffloads, RSC: r.opts.rsc}
	if r.opts.gpa {
		g, err := netvsc.OpenSimGPAPool(r.host.Root(), 0, 64<<20)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.Close() })
		cfg.GPAPool = g
	}
	r.nic, err = netvsc.Open(ctx, dev, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.nic.Close() })
	r.dev, err = tap.Create(tap.Config{Name: "vmbusd0", Queues: len(r.nic.Queues()), MAC: r.nic.MAC(), MTU: r.nic.MTU(),
		Netns: r.guestNS, Addr: guestAddr, NoOffloads: r.opts.noTAPOffloads})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.dev.Close() })
	r.att, err = nictap.Attach(r.nic, r.dev, nictap.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.att.Close() })
}

func (r *rig) close() {
	r.att.Close()
	r.dev.Close()
	r.nic.Close()
}

// ping sends ICMP echo requests from namespace ns to dst until one is
// answered (ARP needs the first) or the deadline, and returns how many of
// count got replies.
func ping(t *testing.T, ns string, dst netip.Addr, count int) int {
	t.Helper()
	return pingFor(t, ns, dst, count, 10*time.Second)
}

func pingFor(t *testing.T, ns string, dst netip.Addr, count int, d time.Duration) int {
	t.Helper()
	got := 0
	err := tap.InNetns(ns, func() error {
		c, err := icmp.ListenPacket("ip4:icmp", "0.0.0.0")
		if err != nil {
			return err
		}
		defer c.Close()
		buf := make([]byte, 1500)
		deadline := time.Now().Add(d)
		for seq := 1; got < count && time.Now().Before(deadline); seq++ {
			body := &icmp.Echo{ID: os.Getpid() & 0xffff, Seq: seq, Data: bytes.Repeat([]byte{byte(seq)}, 56)}
			m := icmp.Message{Type: ipv4.ICMPTypeEcho, Body: body}
			b, _ := m.Marshal(nil)
			if _, err := c.WriteTo(b, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
				return err
			}
			c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			for {
				n, _, err := c.ReadFrom(buf)
				if err != nil {
					break
				}
				rm, err := icmp.ParseMessage(1, buf[:n])
				if err != nil || rm.Type != ipv4.ICMPTypeEchoReply {
					continue
				}
				if e, ok := rm.Body.(*icmp.Echo); ok && e.Seq == seq && bytes.Equal(e.Data, body.Data) {
					got++
					break
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestPingBothWays(t *testing.T) {
	r := newRig(t, sim.NICConfig{}, 1, false)
	if n := ping(t, r.guestNS, hostAddr.Addr(), 5); n != 5 {
		t.Fatalf("guest -> host: %d of 5 echoes answered", n)
	}
	if n := ping(t, r.hostNS, guestAddr.Addr(), 5); n != 5 {
		t.Fatalf("host -> guest: %d of 5 echoes answered", n)
	}
	t.Logf("attachment: to tap %d, from tap %d; nic %+v", r.att.ToTAP.Load(), r.att.FromTAP.Load(), r.nic.Stats().Queues[0])
}

// transfer sends size random bytes over conns TCP connections from the
// guest namespace to a listener in the host namespace (and the same
// back), verifying SHA-256 on both ends.
func transfer(t *testing.T, r *rig, conns, size int) {
	t.Helper()
	transferTo(t, r, hostAddr.Addr(), conns, size)
}

// transferTo is transfer to a listener on dst (an address of the host
// namespace).
func transferTo(t *testing.T, r *rig, dst netip.Addr, conns, size int) {
	t.Helper()
	var ln net.Listener
	if err := tap.InNetns(r.hostNS, func() error {
		var err error
		ln, err = net.Listen("tcp", net.JoinHostPort(dst.String(), "5001"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	data := make([]byte, size)
	rand.Read(data)
	want := sha256.Sum256(data)
	var wg sync.WaitGroup
	errc := make(chan error, 2*conns)
	// Server: read everything, check, echo a digest, then send the data back.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < conns; i++ {
			c, err := ln.Accept()
			if err != nil {
				errc <- err
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				h := sha256.New()
				if _, err := io.CopyN(h, c, int64(size)); err != nil {
					errc <- fmt.Errorf("server read: %w", err)
					return
				}
				if !bytes.Equal(h.Sum(nil), want[:]) {
					errc <- fmt.Errorf("guest->host data corrupt")
					return
				}
				if _, err := c.Write(data); err != nil {
					errc <- fmt.Errorf("server write: %w", err)
				}
			}()
		}
	}()
	for i := 0; i < conns; i++ {
		var c net.Conn
		if err := tap.InNetns(r.guestNS, func() error {
			var err error
			c, err = net.DialTimeout("tcp", net.JoinHostPort(dst.String(), "5001"), 10*time.Second)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			c.SetDeadline(time.Now().Add(60 * time.Second))
			if _, err := c.Write(data); err != nil {
				errc <- fmt.Errorf("client write: %w", err)
				return
			}
			h := sha256.New()
			if _, err := io.CopyN(h, c, int64(size)); err != nil {
				errc <- fmt.Errorf("client read: %w", err)
				return
			}
			if !bytes.Equal(h.Sum(nil), want[:]) {
				errc <- fmt.Errorf("host->guest data corrupt")
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
}

// TestTCPTransferOffloads moves SHA-256-verified TCP data both ways with
// the offloads on (the default: 64 KiB super-frames from the guest's TAP
// sent as large sends that fill send sections, or whole GPA-direct with a
// GPA pool; the host's TAP port taking them whole; segments coalesced
// toward the guest's kernel), with the host granting none (the guest cuts
// super-frames and finishes checksums itself), and with plain TAPs.
func TestTCPTransferOffloads(t *testing.T) {
	for _, c := range []struct {
		name string
		o    rigOptions
	}{
		{"default", rigOptions{}},
		{"gpa", rigOptions{gpa: true}},
		{"host-grants-none", rigOptions{noNICOffloads: true}},
		{"plain-taps", rigOptions{noTAPOffloads: true, noHostOffloads: true}},
		{"rsc", rigOptions{rsc: true}},
		{"rsc-plain-guest-tap", rigOptions{rsc: true, noTAPOffloads: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRigWith(t, sim.NICConfig{MaxQueues: 2}, 2, false, c.o)
			start := time.Now()
			transfer(t, r, 4, 8<<20)
			// And over IPv6 (TSO6, LSOv2 for IPv6).
			for _, a := range []struct{ ns, dev, addr string }{{r.hostNS, "hv0", "fd77::1/64"}, {r.guestNS, r.dev.Name(), "fd77::2/64"}} {
				if out, err := exec.Command("ip", "-n", a.ns, "addr", "add", a.addr, "dev", a.dev, "nodad").CombinedOutput(); err != nil {
					t.Fatalf("ip addr add %s: %v %s", a.addr, err, out)
				}
			}
			transferTo(t, r, netip.MustParseAddr("fd77::1"), 2, 4<<20)
			var st netvsc.QueueStats
			for _, q := range r.nic.Stats().Queues {
				st.TxLSO += q.TxLSO
				st.TxGPA += q.TxGPA
				st.TxSegments += q.TxSegments
				st.RxRSCFrames += q.RxRSCFrames
				st.RxRSCDropped += q.RxRSCDropped
			}
			var coalesced, superFrames uint64
			for _, q := range r.dev.Queues() {
				coalesced += q.TxCoalesced.Load()
				superFrames += q.RxFrames.Load()
			}
			hs := r.sn.Stats()
			t.Logf("32+8 MiB both ways in %v; tap offloads %s; large sends %d (GPA-direct %d), segments cut by the guest %d, segments coalesced %d; host port rx dropped %d",
				time.Since(start), r.dev.Offloads(), st.TxLSO, st.TxGPA, st.TxSegments, coalesced, r.port.RxDropped())
			if hs.TxDropped != 0 || hs.TxErrors != 0 {
				t.Errorf("host dropped %d guest frames, %d errors", hs.TxDropped, hs.TxErrors)
			}
			switch c.name {
			case "default":
				if st.TxLSO == 0 || st.TxSegments != 0 || coalesced == 0 {
					t.Errorf("large sends %d, segments %d, coalesced %d: offloads not in use", st.TxLSO, st.TxSegments, coalesced)
				}
			case "gpa":
				if st.TxGPA == 0 || st.TxLSO == 0 {
					t.Errorf("GPA-direct %d, large sends %d", st.TxGPA, st.TxLSO)
				}
			case "host-grants-none":
				if st.TxLSO != 0 || st.TxSegments == 0 {
					t.Errorf("large sends %d, segments %d: want the guest to cut", st.TxLSO, st.TxSegments)
				}
			case "rsc", "rsc-plain-guest-tap":
				// Host to guest, the host's TAP port hands its super-frames
				// whole and the host coalesces them; the guest's TAP takes
				// them as GSO writes, or cut when it has no vnet header.
				if !r.nic.RSC() || st.RxRSCFrames == 0 || hs.RxCoalesced == 0 || st.RxRSCDropped != 0 {
					t.Errorf("RSC %v: coalesced frames %d (host %d), dropped %d", r.nic.RSC(), st.RxRSCFrames, hs.RxCoalesced, st.RxRSCDropped)
				}
			case "plain-taps":
				if st.TxLSO != 0 || coalesced != 0 || r.dev.Offloads() != 0 {
					t.Errorf("large sends %d, coalesced %d, offloads %s on plain TAPs", st.TxLSO, coalesced, r.dev.Offloads())
				}
			}
		})
	}
}

func TestTCPTransferOverTwoQueues(t *testing.T) {
	r := newRig(t, sim.NICConfig{MaxQueues: 2}, 2, false)
	if len(r.nic.Queues()) != 2 {
		t.Fatalf("%d queues", len(r.nic.Queues()))
	}
	if ping(t, r.guestNS, hostAddr.Addr(), 1) != 1 {
		t.Fatal("no connectivity")
	}
	start := time.Now()
	transfer(t, r, 16, 2<<20)
	el := time.Since(start)
	st := r.nic.Stats()
	for _, q := range st.Queues {
		t.Logf("queue %d: rx %d tx %d (copied %d, sections %d)", q.Queue, q.RxPackets, q.TxPackets, q.TxCopied, q.TxSections)
		if q.RxPackets == 0 || q.TxPackets == 0 {
			t.Errorf("queue %d carried no traffic one way: rx %d tx %d", q.Queue, q.RxPackets, q.TxPackets)
		}
	}
	t.Logf("64 MiB both ways in %v (%.0f Mbit/s)", el, 2*64*8*1.048576/el.Seconds())
}

// carrier reports the guest TAP's lower-layer state in its namespace.
func carrier(t *testing.T, ns, name string) bool {
	h, err := netns.GetFromName(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	nh, err := netlink.NewHandleAt(h)
	if err != nil {
		t.Fatal(err)
	}
	defer nh.Close()
	l, err := nh.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return l.Attrs().RawFlags&unix.IFF_LOWER_UP != 0
}

func TestLinkDownUpIsCarrier(t *testing.T) {
	r := newRig(t, sim.NICConfig{LinkSpacing: time.Millisecond}, 1, false)
	name := r.dev.Name()
	wait := func(want bool) {
		t.Helper()
		done := false
		defer func() {
			if !done {
				t.Logf("nic link %v when the wait for the carrier failed", r.nic.Link())
			}
		}()
		testutil.WaitFor(t, 10*time.Second, func() bool { return carrier(t, r.guestNS, name) == want },
			fmt.Sprintf("the carrier to go %v", want))
		done = true
	}
	wait(true)
	r.sn.SetLink(false)
	wait(false)
	r.sn.SetLink(true)
	wait(true)
	if ping(t, r.guestNS, hostAddr.Addr(), 2) != 2 {
		t.Fatal("no traffic after the link came back")
	}
}

func TestPartialGrantEndToEnd(t *testing.T) {
	r := newRig(t, sim.NICConfig{MaxQueues: 4, NeverOpen: 1}, 4, false)
	if got := len(r.nic.Queues()); got != 3 {
		t.Fatalf("%d queues, want 3 (4 asked, 3 granted... one never opened)", got)
	}
	transfer(t, r, 8, 1<<20)
}

// TestFaultResetAndReattach: a host fault kills the guest NIC; the
// attachment stops; closing and reopening the NIC (the reset) and
// attaching again restores traffic.
func TestFaultResetAndReattach(t *testing.T) {
	r := newRig(t, sim.NICConfig{}, 1, false)
	if ping(t, r.guestNS, hostAddr.Addr(), 1) != 1 {
		t.Fatal("no connectivity")
	}
	r.sn.SetFault(sim.NICFaultRangeOutsideBuffer, true)
	pingFor(t, r.hostNS, guestAddr.Addr(), 1, 500*time.Millisecond) // traffic for the fault to ride on
	select {
	case <-r.att.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("attachment did not stop after the fault")
	}
	if netvsc.CheckOf(r.nic.Err()) == "" {
		t.Fatalf("nic error %v", r.nic.Err())
	}
	r.close()
	r.open(t, 1)
	if n := ping(t, r.hostNS, guestAddr.Addr(), 3); n != 3 {
		t.Fatalf("after reset: %d of 3", n)
	}
}
