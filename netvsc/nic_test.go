package netvsc_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/frame"
	"github.com/vmbusd/vmbusd/netvsc"
	"github.com/vmbusd/vmbusd/netvsc/nvsp"
	"github.com/vmbusd/vmbusd/netvsc/rndis"
	"github.com/vmbusd/vmbusd/sim"
	"github.com/vmbusd/vmbusd/vmbus"
)

// newNIC starts a simulated host with one synthetic NIC attached to port
// and opens it from the guest side.
func newNIC(t testing.TB, nc sim.NICConfig, port sim.Port, cfg netvsc.Config) (*sim.Host, *sim.NIC, *netvsc.NIC) {
	t.Helper()
	h, err := sim.New(sim.Config{Root: t.TempDir(), Profile: sim.DefaultProfile})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	if nc.RingSize == 0 {
		nc.RingSize = 256 << 10
	}
	if nc.SubchannelRingSize == 0 {
		nc.SubchannelRingSize = 256 << 10
	}
	if nc.RecvBuffer == 0 {
		nc.RecvBuffer = 4 << 20
	}
	if nc.SendBuffer == 0 {
		nc.SendBuffer = 2 << 20
	}
	sn, err := h.AddNIC(nc)
	if err != nil {
		t.Fatal(err)
	}
	if port != nil {
		if err := sn.Attach(port); err != nil {
			t.Fatal(err)
		}
	}
	dev, err := vmbus.LookupDevice(h.Root(), sn.Device().Instance())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ControlTimeout == 0 {
		cfg.ControlTimeout = 10 * time.Second
	}
	if cfg.PoolPackets == 0 {
		cfg.PoolPackets = 1024
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := netvsc.Open(ctx, dev, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return h, sn, n
}

// frame builds a UDP/IPv4 frame of size bytes from src to dst carrying
// seq, on UDP source port sport.
func testFrame(dst, src []byte, size int, seq uint32, sport uint16) []byte {
	f := make([]byte, size)
	copy(f[0:6], dst)
	copy(f[6:12], src)
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	ip := f[14:34]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(size-14))
	ip[8], ip[9] = 64, 17
	copy(ip[12:], []byte{198, 18, 0, 1})
	copy(ip[16:], []byte{198, 18, 0, 2})
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	udp := f[34:]
	binary.BigEndian.PutUint16(udp[0:], sport)
	binary.BigEndian.PutUint16(udp[2:], 9)
	binary.BigEndian.PutUint16(udp[4:], uint16(size-34))
	binary.BigEndian.PutUint32(f[42:], seq)
	for i := 46; i < size; i++ {
		f[i] = byte(seq) ^ byte(i)
	}
	return f
}

// roundTrip sends count frames through queue q to a reflector and checks
// that each comes back intact (MACs swapped), on any queue.
func roundTrip(t *testing.T, n *netvsc.NIC, q *netvsc.Queue, count int, sizes []int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	peer := []byte{0x02, 0, 0, 0, 0, 9}
	want := map[uint32][]byte{}
	sent, got := 0, 0
	pkts := make([]*frame.Packet, 32)
	rx := make([]*frame.Packet, 64)
	for got < count {
		if ctx.Err() != nil {
			t.Fatalf("timeout: sent %d, got %d; stats %+v", sent, got, n.Stats())
		}
		k := 0
		for ; k < len(pkts) && sent+k < count && sent+k-got < 256; k++ {
			seq := uint32(sent + k)
			f := testFrame(peer, n.MAC(), sizes[int(seq)%len(sizes)], seq, uint16(1000+seq%7))
			p := q.Alloc()
			if p == nil {
				break
			}
			copy(p.SetLen(len(f)), f)
			pkts[k] = p
			exp := bytes.Clone(f)
			copy(exp[0:6], f[6:12])
			copy(exp[6:12], f[0:6])
			want[seq] = exp
		}
		m := q.TxBurst(pkts[:k])
		for _, p := range pkts[m:k] {
			p.Free()
			delete(want, 0) // unreachable in practice; keeps the map honest
		}
		if m < k {
			for i := m; i < k; i++ {
				delete(want, uint32(sent+i))
			}
		}
		sent += m
		progress := m > 0
		for _, rq := range n.Queues() {
			r := rq.RxBurst(rx)
			for _, p := range rx[:r] {
				d := p.Data()
				seq := binary.BigEndian.Uint32(d[42:])
				exp, ok := want[seq]
				if !ok || !bytes.Equal(d, exp) {
					t.Fatalf("frame %d (len %d) on queue %d: unexpected or corrupt", seq, len(d), rq.Index())
				}
				delete(want, seq)
				p.Free()
				got++
				progress = true
			}
		}
		if !progress {
			wctx, wc := context.WithTimeout(ctx, 2*time.Millisecond)
			q.Wait(wctx)
			wc()
		}
	}
}

func TestOpenReflectRoundTrip(t *testing.T) {
	refl := sim.NewReflector()
	_, sn, n := newNIC(t, sim.NICConfig{}, refl, netvsc.Config{})
	if !bytes.Equal(n.MAC(), sn.MAC()) {
		t.Errorf("MAC %s, host says %s", n.MAC(), sn.MAC())
	}
	if n.MTU() != 1500 {
		t.Errorf("MTU %d", n.MTU())
	}
	if v, _ := n.Protocol(); v != nvsp.Version61 {
		t.Errorf("NVSP %#x", v)
	}
	if !n.Link().Up {
		t.Errorf("link %v", n.Link())
	}
	roundTrip(t, n, n.Queues()[0], 5000, []int{60, 64, 128, 1514, 700})
	st := n.Stats()
	q := st.Queues[0]
	if q.TxPackets != 5000 || q.RxPackets != 5000 {
		t.Errorf("tx %d rx %d, want 5000 each", q.TxPackets, q.RxPackets)
	}
	if q.TxCopied != 5000 || q.TxSections == 0 || q.TxSections >= 5000 {
		t.Errorf("copied %d in %d sections: want aggregation", q.TxCopied, q.TxSections)
	}
	hs := sn.Stats()
	t.Logf("guest %+v", q)
	t.Logf("host tx %d rx %d sends %d transfers %d", hs.TxPackets, hs.RxPackets, hs.TxSends, hs.RxTransfers)
	if hs.PacketFilter != rndis.NDISPacketFilterDefault {
		t.Errorf("filter %#x", hs.PacketFilter)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(n.Err(), netvsc.ErrClosed) {
		t.Errorf("after Close: %v", n.Err())
	}
	// The closed session's interrupts are folded into the NIC's once:
	// not lost, not counted twice.
	if st.Interrupts == 0 {
		t.Fatal("no interrupts counted over 5000 round trips")
	}
	if after := n.Stats().Interrupts; after < st.Interrupts || after >= 2*st.Interrupts {
		t.Errorf("interrupts %d before Close, %d after", st.Interrupts, after)
	}
	if q := n.Queues()[0]; q.RxBurst(make([]*frame.Packet, 1)) != 0 {
		t.Errorf("burst after close")
	}
}
