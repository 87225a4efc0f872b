package netvsp

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/frame/csum"
	"github.com/vmbusd/vmbusd/netvsc/nvsp"
	"github.com/vmbusd/vmbusd/netvsc/rndis"
	"github.com/vmbusd/vmbusd/sim/vswitch"
	"github.com/vmbusd/vmbusd/vmbus"
)

func TestReflectorSendsFramesBackWithMACsSwapped(t *testing.T) {
	g := newTGuest(t, tguestOpts{})
	r := vswitch.NewReflector()
	if err := g.nic.Attach(r); err != nil {
		t.Fatal(err)
	}
	g.handshake(nvsp.Version61)
	g.setFilter(rndis.NDISPacketFilterDefault)
	mac := [6]byte(g.nic.MAC())
	peer := [6]byte{2, 0, 0, 0, 0, 5}
	f := udpFrame(peer, mac, 3333, 200)
	g.sendStatus(0, g.sendRNDIS(0, nvsp.RMCData, rndisPacket(f, nil)))
	got := g.recvFrames(0, 1)[0].frame
	want := udpFrame(mac, peer, 3333, 200)
	if !bytes.Equal(got, want) {
		t.Errorf("reflected %x\nwant      %x", got, want)
	}
	if n, _, d := r.Stats(); n != 1 || d != 0 {
		t.Errorf("reflector stats %d %d", n, d)
	}
	g.noViolations()
}

func TestPatchConnectsTwoNICs(t *testing.T) {
	a := newTGuest(t, tguestOpts{})
	// A second NIC on the same host.
	n2, err := AddNIC(a.h, NICConfig{RingSize: 256 << 10, RecvBuffer: 4 << 20, SendBuffer: 1 << 20, WakeTimeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	b := &tguest{t: t, h: a.h, nic: n2, tid: 100, rid: 1}
	b.open(0)
	if err := Patch(a.nic, n2); err != nil {
		t.Fatal(err)
	}
	a.handshake(nvsp.Version61)
	b.handshake(nvsp.Version61)
	b.setFilter(rndis.NDISPacketFilterDefault)
	f := udpFrame([6]byte(n2.MAC()), [6]byte(a.nic.MAC()), 4444, 128)
	a.sendStatus(0, a.sendRNDIS(0, nvsp.RMCData, rndisPacket(f, nil)))
	if got := b.recvFrames(0, 1)[0].frame; !bytes.Equal(got, f) {
		t.Errorf("peer got %x", got)
	}
	// Not for b's MAC, and b is not promiscuous: filtered.
	other := udpFrame([6]byte{2, 9, 9, 9, 9, 9}, [6]byte(a.nic.MAC()), 4444, 128)
	a.sendStatus(0, a.sendRNDIS(0, nvsp.RMCData, rndisPacket(other, nil)))
	waitFor(t, "the peer to filter the frame", func() bool { return n2.Stats().RxFiltered != 0 })
	if n2.Stats().RxFiltered != 1 {
		t.Errorf("filtered %d", n2.Stats().RxFiltered)
	}
}

func TestGeneratorSendsFlowsAndSinksGuestFrames(t *testing.T) {
	g := newTGuest(t, tguestOpts{})
	g.handshake(nvsp.Version61)
	g.setFilter(rndis.NDISPacketFilterDefault)
	gen := vswitch.NewGenerator(vswitch.GeneratorConfig{Flows: 4, Sizes: []int{64, 300}, Count: 100})
	if err := g.nic.Attach(gen); err != nil {
		t.Fatal(err)
	}
	fs := g.recvFrames(0, 100)
	sizes := map[int]int{}
	ports := map[uint16]bool{}
	for _, f := range fs {
		sizes[len(f.frame)]++
		ports[be.Uint16(f.frame[34:])] = true
	}
	if sizes[64] != 50 || sizes[300] != 50 || len(ports) != 4 {
		t.Errorf("sizes %v ports %v", sizes, ports)
	}
	<-gen.Done()
	if st := gen.Stats(); st.Accepted != 100 {
		t.Errorf("generator %+v", st)
	}
	g.sendStatus(0, g.sendRNDIS(0, nvsp.RMCData, rndisPacket(udpFrame([6]byte{2}, [6]byte(g.nic.MAC()), 1, 90), nil)))
	waitFor(t, "the sink to receive the guest's frame", func() bool { return gen.Stats().Received != 0 })
	if st := gen.Stats(); st.Received != 1 || st.ReceivedBytes != 90 {
		t.Errorf("sink %+v", st)
	}
}

// answerPings is a scripted guest IP stack: it answers ARP for ip and
// ICMP echo requests until ctx ends.
func (g *tguest) answerPings(ctx context.Context, ip netip.Addr) (answered int) {
	mac := [6]byte(g.nic.MAC())
	a4 := ip.As4()
	for ctx.Err() == nil {
		p, ok := g.read(0, 20*time.Millisecond)
		if !ok || p.typ != vmbus.PacketTransferPage {
			continue
		}
		var m nvsp.RNDISPacket
		if m.Unmarshal(p.payload()) != nil || m.ChannelType != nvsp.RMCData {
			g.ack(&p)
			continue
		}
		for _, f := range g.frames(&p) {
			fr := f.frame
			var reply []byte
			switch be.Uint16(fr[12:]) {
			case 0x0806: // ARP request for ip
				if len(fr) >= 42 && be.Uint16(fr[20:]) == 1 && bytes.Equal(fr[38:42], a4[:]) {
					reply = make([]byte, 42)
					copy(reply[0:6], fr[6:12])
					copy(reply[6:12], mac[:])
					copy(reply[12:22], fr[12:22])
					be.PutUint16(reply[20:], 2)
					copy(reply[22:28], mac[:])
					copy(reply[28:32], a4[:])
					copy(reply[32:38], fr[22:28])
					copy(reply[38:42], fr[28:32])
				}
			case vswitch.EthTypeIPv4: // ICMP echo request to ip
				fl := vswitch.ParseFlow(fr)
				if fl.IP && fr[fl.L3+9] == 1 && bytes.Equal(fl.Dst, a4[:]) && fr[fl.L4Off] == 8 {
					reply = append([]byte(nil), fr[:fl.L4End]...)
					copy(reply[0:6], fr[6:12])
					copy(reply[6:12], mac[:])
					copy(reply[fl.L3+12:fl.L3+16], fr[fl.L3+16:fl.L3+20])
					copy(reply[fl.L3+16:fl.L3+20], fr[fl.L3+12:fl.L3+16])
					icmp := reply[fl.L4Off:]
					icmp[0], icmp[2], icmp[3] = 0, 0, 0
					be.PutUint16(icmp[2:], ^csum.Fold(csum.Add(0, icmp)))
					h := reply[fl.L3:fl.L4Off]
					h[10], h[11] = 0, 0
					be.PutUint16(h[10:], ^csum.Fold(csum.Add(0, h)))
					answered++
				}
			}
			if reply != nil {
				g.sendStatus(0, g.sendRNDIS(0, nvsp.RMCData, rndisPacket(reply, nil)))
			}
		}
		g.ack(&p)
	}
	return answered
}

func TestTAPAndVethLetKernelToolsPingTheGuest(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, TAP)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2")
	}
	if _, err := exec.LookPath("ping"); err != nil {
		t.Skip("needs ping")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skip("needs /dev/net/tun")
	}
	for i, veth := range []bool{false, true} {
		name := "tap"
		if veth {
			name = "veth"
		}
		t.Run(name, func(t *testing.T) {
			ns := fmt.Sprintf("vmbusd-test-%d-%d", os.Getpid(), i)
			g := newTGuest(t, tguestOpts{})
			tap, err := vswitch.NewTAP(vswitch.TAPConfig{Netns: ns, Name: "vmbt0", Veth: veth, Addr: netip.MustParsePrefix("10.77.0.1/24")})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { tap.Close() })
			if err := g.nic.Attach(tap); err != nil {
				t.Fatal(err)
			}
			g.handshake(nvsp.Version61)
			g.setFilter(rndis.NDISPacketFilterDefault)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan int)
			go func() { done <- g.answerPings(ctx, netip.MustParseAddr("10.77.0.2")) }()
			out, err := exec.Command("ip", "netns", "exec", ns, "ping", "-c", "3", "-i", "0.2", "-W", "5", "10.77.0.2").CombinedOutput()
			cancel()
			answered := <-done
			if err != nil {
				t.Fatalf("ping from %s: %v\n%s", ns, err, out)
			}
			if answered < 3 {
				t.Errorf("guest answered %d echo requests", answered)
			}
			if rx, tx, _ := tap.Stats(); rx == 0 || tx == 0 {
				t.Errorf("tap rx %d tx %d", rx, tx)
			}
			g.noViolations()
			tap.Close()
			if _, err := os.Stat("/run/netns/" + ns); err == nil {
				t.Errorf("namespace %s left behind", ns)
			}
		})
	}
}
