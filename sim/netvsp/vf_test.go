package netvsp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/vmbusd/vmbusd/netvsc/nvsp"
	"github.com/vmbusd/vmbusd/netvsc/rndis"
	"github.com/vmbusd/vmbusd/sim/vswitch"
	"github.com/vmbusd/vmbusd/vmbus"
)

var vfTestSeq atomic.Uint32

// vfTestConfig returns a stand-in configuration with names unique to this
// process and test: the guest end in its own namespace, removed at
// cleanup. It skips when the kernel refuses veth pairs or namespaces.
func vfTestConfig(t *testing.T) VFConfig {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (veth pairs, network namespaces)")
	}
	id := fmt.Sprintf("%d%d", os.Getpid()%100000, vfTestSeq.Add(1))
	c := VFConfig{HostIf: "svh" + id, GuestIf: "svg" + id, GuestNetns: "svns" + id}
	// Probe: can this kernel make a veth pair at all?
	la := netlink.NewLinkAttrs()
	la.Name = "svp" + id
	probe := &netlink.Veth{LinkAttrs: la, PeerName: "svq" + id, PeerTxQLen: -1}
	if err := netlink.LinkAdd(probe); err != nil {
		t.Skipf("the kernel refuses a veth pair: %v", err)
	}
	netlink.LinkDel(probe)
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(c.HostIf); err == nil {
			netlink.LinkDel(l)
		}
	})
	return c
}

// guestEnd is a packet socket on the VF's guest end, standing in for a
// guest's VF driver.
type guestEnd struct {
	t  *testing.T
	fd int
}

func openGuestEnd(t *testing.T, v *VF) *guestEnd {
	t.Helper()
	g := &guestEnd{t: t, fd: -1}
	err := v.inGuestNS(false, func(h *netlink.Handle) error {
		l, err := h.LinkByName(v.cfg.GuestIf)
		if err != nil {
			return err
		}
		s, err := openVFSocket(l.Attrs().Index, v.cfg.GuestIf)
		if err != nil {
			return err
		}
		fd, err := unix.Dup(int(s.f.Fd()))
		s.close()
		g.fd = fd
		return err
	})
	if err != nil {
		t.Fatalf("guest end: %v", err)
	}
	t.Cleanup(func() { unix.Close(g.fd) })
	return g
}

// read returns the next frame, or nil when none comes within d.
func (g *guestEnd) read(d time.Duration) []byte {
	deadline := time.Now().Add(d)
	buf := make([]byte, 65536)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return nil
		}
		fds := []unix.PollFd{{Fd: int32(g.fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, int(left/time.Millisecond)+1); err != nil && err != unix.EINTR {
			g.t.Fatalf("poll guest end: %v", err)
		}
		n, err := unix.Read(g.fd, buf)
		if err == unix.EAGAIN || err == unix.EINTR {
			continue
		}
		if err != nil {
			g.t.Fatalf("read guest end: %v", err)
		}
		return buf[:n]
	}
}

func (g *guestEnd) write(f []byte) {
	if _, err := unix.Write(g.fd, f); err != nil {
		g.t.Fatalf("write guest end: %v", err)
	}
}

// vfTCPFrame builds a TCP/IPv4 frame with the given flags.
func vfTCPFrame(dst, src [6]byte, flags byte) []byte {
	f := make([]byte, 14+20+20)
	copy(f[0:6], dst[:])
	copy(f[6:12], src[:])
	f[12], f[13] = 0x08, 0x00
	ip := f[14:]
	ip[0], ip[2], ip[3], ip[8], ip[9] = 0x45, 0, 40, 64, vswitch.IPProtoTCP
	copy(ip[12:], []byte{10, 0, 0, 1, 10, 0, 0, 2})
	tcp := ip[20:]
	tcp[0], tcp[1], tcp[2], tcp[3] = 0x30, 0x39, 0x00, 0x50
	tcp[12], tcp[13] = 5<<4, flags
	return f
}

func (g *tguest) vfAssociation(want uint32) nvsp.VFAssociation {
	g.t.Helper()
	p := g.next(0, func(p *gpkt) bool {
		return p.typ == vmbus.PacketInband && p.nvspType() == nvsp.TypeSendVFAssociation
	})
	var a nvsp.VFAssociation
	if err := a.Unmarshal(p.payload()); err != nil || a.Allocated != want {
		g.t.Fatalf("VF association %+v %v, want allocated %d", a, err, want)
	}
	return a
}

func TestVFStandInShowsThePCIDeviceAndTheNetdev(t *testing.T) {
	cfg := vfTestConfig(t)
	cfg.Kind = VFMANA
	g := newTGuest(t, tguestOpts{nic: NICConfig{VF: 9, VFStandIn: &cfg}})
	v := g.nic.VF()
	root := g.h.Root()
	dom := fmt.Sprintf("%04x", uint16(0x7870+9))
	bdf := dom + ":00:00.0"
	read := func(p string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	if got := read("sys/bus/pci/slots/9/address"); got != dom+":00:00" {
		t.Errorf("slot address %q", got)
	}
	dev, err := filepath.EvalSymlinks(filepath.Join(root, "sys/bus/pci/devices", bdf))
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(root, "sys/devices/pci"+dom+":00", bdf); dev != want {
		t.Errorf("device %s, want %s", dev, want)
	}
	rel, _ := filepath.Rel(root, dev)
	for attr, want := range map[string]string{"vendor": "0x1414", "device": "0x00ba", "class": "0x020000", "numa_node": "0"} {
		if got := read(filepath.Join(rel, attr)); got != want {
			t.Errorf("%s = %q, want %q", attr, got, want)
		}
	}
	drv, err := filepath.EvalSymlinks(filepath.Join(dev, "driver"))
	if err != nil || filepath.Base(drv) != "mana" {
		t.Errorf("driver link %s %v", drv, err)
	}
	if got := read(filepath.Join(rel, "net", cfg.GuestIf, "address")); got != g.nic.MAC().String() {
		t.Errorf("netdev address %q, want %s", got, g.nic.MAC())
	}
	// The netdev itself: in the guest's namespace, the NIC's MAC, up,
	// IPv6 off.
	err = v.inGuestNS(false, func(h *netlink.Handle) error {
		l, err := h.LinkByName(cfg.GuestIf)
		if err != nil {
			return err
		}
		if l.Attrs().HardwareAddr.String() != g.nic.MAC().String() || l.Attrs().Flags&1 == 0 {
			return fmt.Errorf("guest end %s flags %v", l.Attrs().HardwareAddr, l.Attrs().Flags)
		}
		b, err := os.ReadFile("/proc/sys/net/ipv6/conf/" + cfg.GuestIf + "/disable_ipv6")
		if err == nil && strings.TrimSpace(string(b)) != "1" {
			return fmt.Errorf("IPv6 on on the guest end")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), tgWait)
	defer cancel()
	if err := v.Remove(ctx, true); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"sys/bus/pci/slots/9", "sys/bus/pci/devices/" + bdf, rel, "sys/class/net/" + cfg.GuestIf} {
		if _, err := os.Lstat(filepath.Join(root, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there after removal: %v", p, err)
		}
	}
	if _, err := netlink.LinkByName(cfg.HostIf); err == nil {
		t.Errorf("veth %s still there after removal", cfg.HostIf)
	}
}

func TestVFSteeringFollowsTheGuestsSwitchAndKeepsExceptionsSynthetic(t *testing.T) {
	cfg := vfTestConfig(t)
	g := newTGuest(t, tguestOpts{nic: NICConfig{VF: 7, VFDelay: 10 * time.Millisecond, VFStandIn: &cfg}})
	v := g.nic.VF()
	end := openGuestEnd(t, v)
	g.handshake(nvsp.Version61)
	g.vfAssociation(1)
	g.setFilter(rndis.NDISPacketFilterDefault)
	mac := [6]byte(g.nic.MAC())
	peer := [6]byte{0x02, 0, 0, 0, 0, 1}
	uni := udpFrame(mac, peer, 2000, 100)

	// Before the switch everything is synthetic.
	g.port.up.Deliver([][]byte{uni})
	if fs := g.recvFrames(0, 1); len(fs) != 1 {
		t.Fatalf("synthetic frames %d", len(fs))
	}
	// The switch: an empty completion, and steering from then on.
	c := g.completion(g.nvsp(nvsp.SwitchDataPath{ActiveDataPath: nvsp.DataPathVF}.Marshal(nil), true))
	if len(c.payload()) != 0 {
		t.Errorf("switch completion of %d bytes", len(c.payload()))
	}
	bcast := udpFrame([6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, peer, 2001, 100)
	syn := vfTCPFrame(mac, peer, 0x02)
	ack := vfTCPFrame(mac, peer, 0x10)
	if n := g.port.up.Deliver([][]byte{uni, bcast, syn, ack}); n != 4 {
		t.Errorf("delivered %d of 4", n)
	}
	for _, want := range [][]byte{uni, ack} {
		got := end.read(tgWait)
		if string(got) != string(want) {
			t.Fatalf("VF got %x, want %x", got, want)
		}
	}
	exc := g.recvFrames(0, 2)
	if string(exc[0].frame) != string(bcast) || string(exc[1].frame) != string(syn) {
		t.Errorf("synthetic got %x / %x, want the broadcast and the SYN", exc[0].frame, exc[1].frame)
	}
	// The guest's frames on the VF reach the port.
	out := udpFrame(peer, mac, 3000, 200)
	end.write(out)
	if f := g.port.wait(t, 1); string(f[0]) != string(out) {
		t.Errorf("port got %x", f[0])
	}
	st := g.nic.Stats().VF
	if st.RxPackets != 2 || st.Exceptions != 2 || st.TxPackets != 1 || !st.Steering {
		t.Errorf("VF stats %+v", st)
	}

	// Graceful servicing: the host switches the guest back, withdraws the
	// association, and only then takes the VF away.
	ctx, cancel := context.WithTimeout(context.Background(), tgWait)
	defer cancel()
	removed := make(chan error, 1)
	go func() { removed <- v.Remove(ctx, false) }()
	sw := g.next(0, func(p *gpkt) bool {
		return p.typ == vmbus.PacketInband && p.nvspType() == nvsp.TypeSwitchDataPath
	})
	var m nvsp.SwitchDataPath
	if m.Unmarshal(sw.payload()); m.ActiveDataPath != nvsp.DataPathSynthetic {
		t.Errorf("host switch %+v", m)
	}
	g.vfAssociation(0)
	if !v.Present() {
		t.Error("the VF was removed before the guest left it")
	}
	// The guest leaves the VF as Linux does: its own switch, completed.
	g.completion(g.nvsp(nvsp.SwitchDataPath{ActiveDataPath: nvsp.DataPathSynthetic}.Marshal(nil), true))
	if err := <-removed; err != nil {
		t.Fatal(err)
	}
	var kinds []VFEventKind
	for _, e := range v.Events() {
		kinds = append(kinds, e.Kind)
	}
	want := []VFEventKind{VFServiceStarted, VFHostSwitchSent, VFWithdrawalSent, VFGuestSwitchSynth, VFNetdevRemoved, VFPCIRemoved}
	if !containsInOrder(kinds, want) {
		t.Errorf("events %v, want %v in order", kinds, want)
	}
	g.port.up.Deliver([][]byte{uni})
	if fs := g.recvFrames(0, 1); string(fs[0].frame) != string(uni) {
		t.Errorf("after removal: %x", fs[0].frame)
	}

	// The VF returns, association last; steering waits for the guest.
	if err := v.Add(ctx, VFNetdevFirst); err != nil {
		t.Fatal(err)
	}
	g.vfAssociation(1)
	if _, err := os.Stat(filepath.Join(g.h.Root(), "sys/bus/pci/slots/7/address")); err != nil {
		t.Errorf("slot after re-add: %v", err)
	}
	g.port.up.Deliver([][]byte{uni})
	if fs := g.recvFrames(0, 1); string(fs[0].frame) != string(uni) {
		t.Errorf("after re-add, before the switch: %x", fs[0].frame)
	}
	g.noViolations()
}

func TestVFSwitchWithoutAssociationIsAViolation(t *testing.T) {
	g := newTGuest(t, tguestOpts{nic: NICConfig{}})
	g.handshake(nvsp.Version61)
	g.completion(g.nvsp(nvsp.SwitchDataPath{ActiveDataPath: nvsp.DataPathVF}.Marshal(nil), true))
	g.completion(g.nvsp(nvsp.SwitchDataPath{ActiveDataPath: 7}.Marshal(nil), true))
	if g.violations("without a VF association") != 1 || g.violations("unknown data path") != 1 {
		t.Errorf("violations %v", g.h.Violations())
	}
}

func containsInOrder(have, want []VFEventKind) bool {
	i := 0
	for _, k := range have {
		if i < len(want) && k == want[i] {
			i++
		}
	}
	return i == len(want)
}
