package tap

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/vmbusd/vmbusd/frame"
)

func needRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skip("needs /dev/net/tun")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip(8)")
	}
}

func linkIn(t *testing.T, ns, name string) (netlink.Link, error) {
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
	return nh.LinkByName(name)
}

func TestCreateInNetnsCarrierAndDelete(t *testing.T) {
	needRoot(t)
	ns := fmt.Sprintf("vmbt%d", os.Getpid()%100000)
	exec.Command("ip", "netns", "del", ns).Run()
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Skipf("ip netns add: %v %s", err, out)
	}
	defer exec.Command("ip", "netns", "del", ns).Run()
	mac := net.HardwareAddr{0x00, 0x15, 0x5d, 1, 2, 3}
	d, err := Create(Config{Name: "vmbt%d", Queues: 2, MAC: mac, MTU: 4000, Netns: ns})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if len(d.Queues()) != 2 {
		t.Fatalf("%d queues", len(d.Queues()))
	}
	l, err := linkIn(t, ns, d.Name())
	if err != nil {
		t.Fatalf("%s not in %s: %v", d.Name(), ns, err)
	}
	if l.Attrs().MTU != 4000 || l.Attrs().HardwareAddr.String() != mac.String() {
		t.Errorf("mtu %d mac %s", l.Attrs().MTU, l.Attrs().HardwareAddr)
	}
	for _, up := range []bool{false, true, false} {
		if err := d.SetCarrier(up); err != nil {
			t.Fatal(err)
		}
		l, _ := linkIn(t, ns, d.Name())
		if got := l.Attrs().RawFlags&unix.IFF_LOWER_UP != 0; got != up {
			t.Errorf("carrier %v, want %v", got, up)
		}
	}
	if _, err := netlink.LinkByName(d.Name()); err == nil {
		t.Errorf("%s also visible in the current namespace", d.Name())
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := linkIn(t, ns, d.Name()); err == nil {
		t.Errorf("%s survived Close", d.Name())
	}
}

// TestQueuesMoveFramesBothWays writes frames into the TAP from the kernel
// side (a packet socket) and through TxBurst, checking both arrive.
func TestQueuesMoveFramesBothWays(t *testing.T) {
	needRoot(t)
	d, err := Create(Config{Name: "vmbq%d", Queues: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	pool, err := frame.NewPool(frame.PoolConfig{Buffers: 64, Frame: 2048, Headroom: testHeadroom})
	if err != nil {
		t.Fatal(err)
	}
	q := d.Queues()[0]
	q.SetPool(pool)
	l, err := netlink.LinkByName(d.Name())
	if err != nil {
		t.Fatal(err)
	}
	// A packet socket on the interface sees what TxBurst hands the kernel
	// and can send frames out of it (which the TAP queue then reads).
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL)))
	if err != nil {
		t.Skip(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: l.Attrs().Index}); err != nil {
		t.Fatal(err)
	}
	f := make([]byte, 100)
	copy(f, []byte{0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x88, 0xb5})
	f[20] = 0xab
	if err := unix.Sendto(fd, f, 0, &unix.SockaddrLinklayer{Ifindex: l.Attrs().Index, Halen: 6}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pkts := make([]*frame.Packet, 8)
	for found := false; !found; {
		if err := q.Wait(ctx); err != nil {
			t.Fatalf("Wait: %v", err)
		}
		got := q.RxBurst(pkts)
		for _, p := range pkts[:got] {
			// The kernel sends its own frames too (IPv6 MLD, ...).
			if d := p.Data(); len(d) == 100 && d[12] == 0x88 && d[13] == 0xb5 && d[20] == 0xab {
				found = true
			}
		}
		frame.PutBurst(pkts[:got])
	}
	p := pool.Get()
	copy(p.SetLen(100), f)
	if q.TxBurst([]*frame.Packet{p}) != 1 || q.TxFrames.Load() != 1 {
		t.Errorf("TxBurst: frames %d drops %d", q.TxFrames.Load(), q.TxDrops.Load())
	}
	if pool.Available() != pool.Size() {
		t.Errorf("pool leaked: %d of %d free", pool.Available(), pool.Size())
	}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// TestQueueBurstsAllocateNothing: reading frames from a TAP with offloads
// and writing coalesced bursts to it allocate nothing per burst.
func TestQueueBurstsAllocateNothing(t *testing.T) {
	needRoot(t)
	d, err := Create(Config{Name: "vmba%d", Queues: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Offloads()&OffloadTSO4 == 0 {
		t.Fatalf("offloads %s: no TSO", d.Offloads())
	}
	q := d.Queues()[0]
	big := testPool(t, 64, 65536+128)
	small := testPool(t, 256, 2048)
	q.SetPool(big)
	q.SetNIC(frame.TxOffloads{TCP4Checksum: true, LSO4: 62780}, small)
	l, err := netlink.LinkByName(d.Name())
	if err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL)))
	if err != nil {
		t.Skip(err)
	}
	defer unix.Close(fd)
	f := buildTCP(tcpSpec{seq: 1, ack: 2, flags: 0x10, payload: 100})
	sa := &unix.SockaddrLinklayer{Ifindex: l.Attrs().Index, Halen: 6}
	const runs = 50
	for range runs + 10 {
		if err := unix.Sendto(fd, f, 0, sa); err != nil {
			t.Fatal(err)
		}
	}
	pkts := make([]*frame.Packet, 1)
	got := 0
	if a := testing.AllocsPerRun(runs, func() {
		if q.RxBurst(pkts) == 1 {
			got++
			pkts[0].Free()
		}
	}); a != 0 {
		t.Errorf("RxBurst: %v allocations per burst", a)
	}
	if got == 0 {
		t.Fatal("RxBurst read nothing")
	}
	segs := stream(false, 0, 40, 1448, tsOp)
	burst := make([]*frame.Packet, len(segs))
	if a := testing.AllocsPerRun(runs, func() {
		for i := range burst {
			burst[i] = small.Get()
			copy(burst[i].SetLen(len(segs[i])), segs[i])
			burst[i].Meta.Flags = frame.MetaRxIPChecksumOK | frame.MetaRxL4ChecksumOK
		}
		q.TxBurst(burst)
	}); a != 0 {
		t.Errorf("TxBurst: %v allocations per burst", a)
	}
	if q.TxCoalesced.Load() == 0 || q.TxDrops.Load() != 0 {
		t.Errorf("coalesced %d, drops %d", q.TxCoalesced.Load(), q.TxDrops.Load())
	}
	if small.Available() != small.Size() {
		t.Error("packets leaked")
	}
}

// TestInterruptStopsWaitUntilResume: a forwarder stops a pump blocked in
// Wait with Interrupt; Waits keep failing until Resume, after which a
// frame from the kernel wakes Wait again.
func TestInterruptStopsWaitUntilResume(t *testing.T) {
	needRoot(t)
	d, err := Create(Config{Name: "vmbi%d", Queues: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	pool, err := frame.NewPool(frame.PoolConfig{Buffers: 16, Frame: 2048, Headroom: testHeadroom})
	if err != nil {
		t.Fatal(err)
	}
	q := d.Queues()[0]
	q.SetPool(pool)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- q.Wait(ctx) }()
	q.Interrupt()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait after Interrupt: %v, want context.Canceled", err)
	}
	if err := q.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("a later Wait before Resume: %v, want context.Canceled", err)
	}
	q.Resume()
	l, err := netlink.LinkByName(d.Name())
	if err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL)))
	if err != nil {
		t.Skip(err)
	}
	defer unix.Close(fd)
	f := make([]byte, 60)
	copy(f, []byte{0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x88, 0xb5})
	if err := unix.Sendto(fd, f, 0, &unix.SockaddrLinklayer{Ifindex: l.Attrs().Index, Halen: 6}); err != nil {
		t.Fatal(err)
	}
	if err := q.Wait(ctx); err != nil {
		t.Fatalf("Wait after Resume: %v", err)
	}
	pkts := make([]*frame.Packet, 8)
	n := q.RxBurst(pkts)
	frame.PutBurst(pkts[:n])
	if n == 0 {
		t.Fatal("Wait returned with nothing for RxBurst")
	}
	if pool.Available() != pool.Size() {
		t.Errorf("pool leaked: %d of %d free", pool.Available(), pool.Size())
	}
}
