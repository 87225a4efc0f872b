package netvsc_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/frame"
	"github.com/vmbusd/vmbusd/frame/csum"
	"github.com/vmbusd/vmbusd/netvsc"
	"github.com/vmbusd/vmbusd/sim"
	"github.com/vmbusd/vmbusd/vmbus"
)

// collect receives frames from every queue until want arrived or timeout.
func collect(t *testing.T, n *netvsc.NIC, want int) [][]byte {
	t.Helper()
	var out [][]byte
	rx := make([]*frame.Packet, 64)
	deadline := time.Now().Add(10 * time.Second)
	for len(out) < want {
		if time.Now().After(deadline) {
			t.Fatalf("got %d frames, want %d; %+v", len(out), want, n.Stats().Queues[0])
		}
		got := false
		for _, q := range n.Queues() {
			k := q.RxBurst(rx)
			for _, p := range rx[:k] {
				out = append(out, bytes.Clone(p.Data()))
				p.Free()
			}
			got = got || k > 0
		}
		if !got {
			ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
			n.Queues()[0].Wait(ctx)
			cancel()
		}
	}
	return out
}

func sendOne(t *testing.T, q *netvsc.Queue, f []byte, meta frame.Meta) {
	t.Helper()
	p := q.Alloc()
	if p == nil || p.Cap() < len(f) {
		t.Fatalf("no packet buffer for %d bytes", len(f))
	}
	copy(p.SetLen(len(f)), f)
	p.Meta = meta
	for q.TxBurst([]*frame.Packet{p}) == 0 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := q.WaitTx(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
}

// tcpFrame builds a TCP/IPv4 frame with payload bytes of data.
func tcpFrame(dst, src []byte, payload int, seq uint32) []byte {
	f := testFrame(dst, src, 54+payload, seq, 40000)
	ip := f[14:34]
	ip[9] = 6
	ip[6] = 0x40 // DF, as TCP sends
	binary.BigEndian.PutUint16(ip[10:], 0)
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	tcp := f[34:54]
	binary.BigEndian.PutUint16(tcp[0:], 40000)
	binary.BigEndian.PutUint16(tcp[2:], 5001)
	binary.BigEndian.PutUint32(tcp[4:], seq)
	tcp[12] = 0x50
	tcp[13] = 0x18 // ACK|PSH
	binary.BigEndian.PutUint16(tcp[14:], 65535)
	for i := 54; i < len(f); i++ {
		f[i] = byte(i * 7)
	}
	// TCP checksum over the pseudo-header.
	sum = 0
	add := func(b []byte) {
		for len(b) >= 2 {
			sum += uint32(binary.BigEndian.Uint16(b))
			b = b[2:]
		}
		if len(b) == 1 {
			sum += uint32(b[0]) << 8
		}
	}
	add(ip[12:20])
	sum += 6 + uint32(len(f)-34)
	add(f[34:])
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(tcp[16:], ^uint16(sum))
	return f
}

func newGPAPool(t *testing.T, h *sim.Host) *netvsc.GPAPool {
	g, err := netvsc.OpenSimGPAPool(h.Root(), 0, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

// TestLargeFramesGPADirect: jumbo frames larger than a send section go
// GPA-direct from the simulated guest memory; small ones are still copied.
func TestLargeFramesGPADirect(t *testing.T) {
	h, err := sim.New(sim.Config{Root: t.TempDir(), Profile: sim.DefaultProfile})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	sn, err := h.AddNIC(sim.NICConfig{MTU: 9000, RingSize: 256 << 10, RecvBuffer: 8 << 20, SendBuffer: 2 << 20,
		RecvSectionSize: sim.RecvSectionFromMTU})
	if err != nil {
		t.Fatal(err)
	}
	sn.Attach(sim.NewReflector())
	g := newGPAPool(t, h)
	n := openNIC(t, h, sn, netvsc.Config{MTU: 9000, GPAPool: g, PoolPackets: 256})
	defer n.Close()
	roundTrip(t, n, n.Queues()[0], 500, []int{9014, 64, 7000, 1514})
	st := n.Stats().Queues[0]
	if st.TxGPA != 250 || st.TxCopied != 250 {
		t.Errorf("gpa %d copied %d, want 250 each", st.TxGPA, st.TxCopied)
	}
	if hs := sn.Stats(); hs.TxGPASends != 250 {
		t.Errorf("host GPA sends %d", hs.TxGPASends)
	}
}

// capture is a vSwitch port that keeps a copy of every frame the host
// passes on from the guest.
type capture struct {
	mu     sync.Mutex
	frames [][]byte
}

func (c *capture) Connect(sim.Uplink) error { return nil }
func (c *capture) Close() error             { return nil }
func (c *capture) Transmit(frames [][]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range frames {
		c.frames = append(c.frames, bytes.Clone(f))
	}
}

// wait returns the first n frames the port saw, once it has seen them.
func (c *capture) wait(t *testing.T, n int) [][]byte {
	t.Helper()
	waitCond(t, "the port to see the frames sent", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.frames) >= n
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.frames[:n:n]
}

// TestJumboFramesReachThePortIntact: with a GPA pool in the simulated
// guest memory, 9014-byte frames at MTU 9000 (larger than a 6144-byte send
// section) go GPA-direct and reach the host's vSwitch port byte for byte
// as sent: UDP, TCP with DF, and a non-IP frame.
func TestJumboFramesReachThePortIntact(t *testing.T) {
	h, err := sim.New(sim.Config{Root: t.TempDir(), Profile: sim.DefaultProfile})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	sn, err := h.AddNIC(sim.NICConfig{MTU: 9000, RingSize: 256 << 10, RecvBuffer: 8 << 20, SendBuffer: 2 << 20,
		RecvSectionSize: sim.RecvSectionFromMTU})
	if err != nil {
		t.Fatal(err)
	}
	port := &capture{}
	sn.Attach(port)
	n := openNIC(t, h, sn, netvsc.Config{MTU: 9000, GPAPool: newGPAPool(t, h), PoolPackets: 256})
	defer n.Close()
	q := n.Queues()[0]
	peer := []byte{0x02, 0, 0, 0, 0, 9}
	var sent [][]byte
	for i := range 64 {
		var f []byte
		switch i % 3 {
		case 0:
			f = testFrame(peer, n.MAC(), 9014, uint32(i), 1000)
		case 1:
			f = tcpFrame(peer, n.MAC(), 9014-54, uint32(i))
		default:
			f = testFrame(peer, n.MAC(), 9014, uint32(i), 1000)
			binary.BigEndian.PutUint16(f[12:], 0x88b5) // local experimental ethertype: not IP
		}
		sendOne(t, q, f, frame.Meta{})
		sent = append(sent, f)
	}
	got := port.wait(t, len(sent))
	for i := range sent {
		if !bytes.Equal(got[i], sent[i]) {
			t.Fatalf("frame %d: %d bytes reached the port, differing from the %d sent", i, len(got[i]), len(sent[i]))
		}
	}
	if st := q.Stats(); st.TxGPA != 64 || st.TxDropOversize != 0 || st.TxSegmented != 0 {
		t.Errorf("gpa %d dropped %d segmented %d, want 64 GPA-direct", st.TxGPA, st.TxDropOversize, st.TxSegmented)
	}
	if hs := sn.Stats(); hs.TxGPASends != 64 || hs.TxPackets != 64 {
		t.Errorf("host: %d GPA sends, %d frames", hs.TxGPASends, hs.TxPackets)
	}
}

// TestLargeFramesWithoutGPA: without pinned memory a frame larger than a
// send section is dropped and counted, never cut into IP fragments or
// segments behind the sender's back; a frame larger than the MTU is
// dropped too. Only a TSO super-frame (TCP marked MetaTxLSO) is cut, as
// its sender asked: into large sends that fit a section, which the host
// segments (it granted LSOv2; TestLSO covers the software fallback).
func TestLargeFramesWithoutGPA(t *testing.T) {
	port := &capture{}
	_, sn, n := newNIC(t, sim.NICConfig{MTU: 9000, RecvBuffer: 8 << 20, RecvSectionSize: sim.RecvSectionFromMTU}, port,
		netvsc.Config{MTU: 9000, PoolPackets: 256})
	q := n.Queues()[0]
	peer := []byte{0x02, 0, 0, 0, 0, 9}
	udp := testFrame(peer, n.MAC(), 9014, 1, 1000)
	tcp := tcpFrame(peer, n.MAC(), 8000, 1000) // no MetaTxLSO: not the sender's to cut
	other := testFrame(peer, n.MAC(), 7000, 2, 1000)
	binary.BigEndian.PutUint16(other[12:], 0x88b5)
	for _, f := range [][]byte{udp, tcp, other} {
		sendOne(t, q, f, frame.Meta{})
	}
	small := testFrame(peer, n.MAC(), 1514, 3, 1000)
	sendOne(t, q, small, frame.Meta{})
	// One queue, in order: when the small frame is there, the big ones
	// would have been before it.
	if got := port.wait(t, 1); !bytes.Equal(got[0], small) {
		t.Fatalf("the port saw a %d-byte frame first, want the 1514-byte one sent after the dropped ones", len(got[0]))
	}
	st := q.Stats()
	if st.TxDropOversize != 3 || st.TxSegmented != 0 || st.TxSegments != 0 || st.TxCopied != 1 {
		t.Errorf("dropped %d, segmented %d into %d, copied %d: want 3 dropped, 1 copied", st.TxDropOversize, st.TxSegmented, st.TxSegments, st.TxCopied)
	}
	if hs := sn.Stats(); hs.TxPackets != 1 {
		t.Errorf("host saw %d frames, want 1", hs.TxPackets)
	}
	var named uint64
	stats := n.Stats()
	for _, c := range stats.Ethtool() {
		if c.Name == "tx_queue_0_drop_oversize" {
			named = c.Value
		}
	}
	if named != 3 {
		t.Errorf("tx_queue_0_drop_oversize = %d", named)
	}

	// A TSO super-frame beyond the MTU reaches the port MSS-sized, and
	// the segments carry the payload as sent.
	pool, err := netvsc.NewPool(4, 65536, nil)
	if err != nil {
		t.Fatal(err)
	}
	send := func(f []byte, m frame.Meta) {
		t.Helper()
		p := pool.Get()
		copy(p.SetLen(len(f)), f)
		p.Meta = m
		for q.TxBurst([]*frame.Packet{p}) == 0 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			err := q.WaitTx(ctx)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	big := tcpFrame(peer, n.MAC(), 20000, 5000)
	send(big, frame.Meta{Flags: frame.MetaTxLSO | frame.MetaTxIPv4 | frame.MetaTxTCPChecksum, L3Off: 14, L4Off: 34, MSS: 1448})
	want := (20000 + 1447) / 1448
	segs := port.wait(t, 1+want)[1:]
	var payload []byte
	for _, s := range segs {
		if len(s) > 54+1448 {
			t.Fatalf("segment of %d bytes", len(s))
		}
		payload = append(payload, s[54:]...)
	}
	if !bytes.Equal(payload, big[54:]) {
		t.Errorf("segments do not join up to the original payload")
	}
	if st := q.Stats(); st.TxLSO == 0 || st.TxSegmented != 0 || st.TxSegments != 0 {
		t.Errorf("large sends %d, segmented %d into %d: want large sends only", st.TxLSO, st.TxSegmented, st.TxSegments)
	}

	// A frame beyond the MTU that is no TSO super-frame is dropped.
	before := q.Stats().TxTooBig
	send(testFrame(peer, n.MAC(), 9100, 4, 1000), frame.Meta{})
	if st := q.Stats(); st.TxTooBig != before+1 {
		t.Errorf("tx_too_big %d, want %d", st.TxTooBig, before+1)
	}
}

// TestStaleSimGPAPoolIsRefused: a pool carved from the guest memory of a
// simulated host that has since stopped (it removes R/dev/guestmem) is
// stale: the next host reads another file, so Open refuses the pool
// rather than send frames the host cannot see. A fresh pool works.
func TestStaleSimGPAPoolIsRefused(t *testing.T) {
	root := t.TempDir()
	nc := sim.NICConfig{RingSize: 256 << 10, RecvBuffer: 4 << 20, SendBuffer: 2 << 20}
	h, err := sim.New(sim.Config{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.AddNIC(nc); err != nil {
		t.Fatal(err)
	}
	old := newGPAPool(t, h)
	if err := old.Valid(); err != nil {
		t.Fatal(err)
	}
	h.Close()
	if err := old.Valid(); !errors.Is(err, netvsc.ErrGPAPoolStale) {
		t.Fatalf("pool of a stopped host: %v, want ErrGPAPoolStale", err)
	}
	h, err = sim.New(sim.Config{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	sn, err := h.AddNIC(nc)
	if err != nil {
		t.Fatal(err)
	}
	sn.Attach(sim.NewReflector())
	dev, err := vmbus.LookupDevice(root, sn.Device().Instance())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := netvsc.Open(context.Background(), dev, netvsc.Config{GPAPool: old}); !errors.Is(err, netvsc.ErrGPAPoolStale) {
		t.Fatalf("Open with a stale pool: %v, want ErrGPAPoolStale", err)
	}
	n := openNIC(t, h, sn, netvsc.Config{GPAPool: newGPAPool(t, h)})
	defer n.Close()
	roundTrip(t, n, n.Queues()[0], 20, []int{1514})
}

// TestLSO: a 30000-byte TCP frame marked for LSO comes back as MSS-sized
// segments with valid checksums whose payloads join up to the original,
// whether the host cuts it whole (GPA-direct with the LSOv2 PPI), the
// guest sends it as large sends that each fit a send section (no GPA
// pool), or the guest segments it (the host granted no LSO).
func TestLSO(t *testing.T) {
	for _, c := range []struct {
		name       string
		gpa, noLSO bool
	}{{"host-lsov2-gpa", true, false}, {"host-lsov2-sections", false, false}, {"software", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			h, err := sim.New(sim.Config{Root: t.TempDir(), Profile: sim.DefaultProfile})
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			sn, err := h.AddNIC(sim.NICConfig{RingSize: 256 << 10, RecvBuffer: 8 << 20, SendBuffer: 2 << 20})
			if err != nil {
				t.Fatal(err)
			}
			sn.Attach(sim.NewReflector())
			cfg := netvsc.Config{PoolPackets: 64, NoOffloads: c.noLSO}
			var pool *frame.Pool
			if c.gpa {
				cfg.GPAPool = newGPAPool(t, h)
				pool, err = netvsc.NewPool(8, 65536, cfg.GPAPool)
			} else {
				pool, err = netvsc.NewPool(8, 65536, nil)
			}
			if err != nil {
				t.Fatal(err)
			}
			n := openNIC(t, h, sn, cfg)
			defer n.Close()
			if got := n.TxOffloads(); (got.LSO4 == 0) != c.noLSO || got.TCP4Checksum == c.noLSO {
				t.Fatalf("offloads granted %+v", got)
			}
			peer := []byte{0x02, 0, 0, 0, 0, 9}
			big := tcpFrame(peer, n.MAC(), 30000, 5000)
			big[14+2], big[14+3] = 0, 0 // Linux leaves a large send's IP length 0
			p := pool.Get()
			copy(p.SetLen(len(big)), big)
			p.Meta = frame.Meta{Flags: frame.MetaTxLSO | frame.MetaTxIPv4 | frame.MetaTxTCPChecksum | frame.MetaTxIPChecksum,
				L3Off: 14, L4Off: 34, MSS: 1448}
			q := n.Queues()[0]
			if q.TxBurst([]*frame.Packet{p}) != 1 {
				t.Fatal("LSO frame refused")
			}
			want := (30000 + 1447) / 1448
			segs := collect(t, n, want)
			sort.Slice(segs, func(i, j int) bool {
				return binary.BigEndian.Uint32(segs[i][38:]) < binary.BigEndian.Uint32(segs[j][38:])
			})
			var payload []byte
			for i, s := range segs {
				if len(s) > 1514 {
					t.Fatalf("segment of %d bytes", len(s))
				}
				if csum.Checksum(0, s[14:34]) != 0 {
					t.Errorf("segment %d: IPv4 header checksum", i)
				}
				pseudo := csum.Add(0, s[26:34]) + 6 + uint32(len(s)-34)
				if csum.Checksum(pseudo, s[34:]) != 0 {
					t.Errorf("segment %d: TCP checksum", i)
				}
				payload = append(payload, s[54:]...)
			}
			if !bytes.Equal(payload, big[54:]) {
				t.Errorf("segments do not join up to the original payload")
			}
			st := q.Stats()
			switch {
			case c.gpa && (st.TxGPA != 1 || st.TxLSO != 1):
				t.Errorf("gpa %d lso %d, want one large send GPA-direct", st.TxGPA, st.TxLSO)
			case !c.gpa && !c.noLSO && (st.TxLSO != 5 || st.TxSegments != 0):
				// 21 segments of 1448 with 54 bytes of headers: 4 per
				// 6144-byte section, the 21st a plain frame.
				t.Errorf("lso %d segments %d, want 5 large sends", st.TxLSO, st.TxSegments)
			case c.noLSO && (st.TxSegments != uint64(want) || st.TxLSO != 0):
				t.Errorf("segments %d lso %d", st.TxSegments, st.TxLSO)
			}
			if hs := sn.Stats(); hs.TxDropped != 0 || hs.TxErrors != 0 {
				t.Errorf("host dropped %d, errors %d", hs.TxDropped, hs.TxErrors)
			}
		})
	}
}

// TestHugepageGPAPool reserves a few 2 MiB hugepages and reads their
// frame numbers from /proc/self/pagemap; skipped where the kernel refuses.
func TestHugepageGPAPool(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	const path = "/proc/sys/vm/nr_hugepages"
	old, err := os.ReadFile(path)
	if err != nil {
		t.Skip(err)
	}
	if string(bytes.TrimSpace(old)) == "0" {
		if err := os.WriteFile(path, []byte("4"), 0); err != nil {
			t.Skipf("cannot reserve hugepages: %v", err)
		}
		defer os.WriteFile(path, old, 0)
	}
	g, err := netvsc.OpenHugepageGPAPool(4 << 20)
	if errors.Is(err, netvsc.ErrNoPagemap) {
		t.Skip(err)
	}
	if err != nil {
		t.Skipf("kernel refused hugepages: %v", err)
	}
	defer g.Close()
	for off := 0; off < g.Size(); off += 2 << 20 {
		base := g.PFN(off)
		if base == 0 || base%512 != 0 {
			t.Errorf("hugepage at %d: PFN %#x not 2 MiB aligned", off, base)
		}
		for i := 1; i < 512; i++ {
			if g.PFN(off+i*4096) != base+uint64(i) {
				t.Fatalf("hugepage at %d not physically contiguous at page %d", off, i)
			}
		}
	}
	p, err := netvsc.NewPool(16, 2048, g)
	if err != nil {
		t.Fatal(err)
	}
	if p.Size() != 16 {
		t.Fatal("pool")
	}
}

// TestLargeSendPiecesAllocateNothing: cutting a super-frame into large
// sends that fill send sections allocates nothing per frame.
func TestLargeSendPiecesAllocateNothing(t *testing.T) {
	h, err := sim.New(sim.Config{Root: t.TempDir(), Profile: sim.DefaultProfile})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	sn, err := h.AddNIC(sim.NICConfig{RingSize: 256 << 10, RecvBuffer: 8 << 20, SendBuffer: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	sn.Attach(sim.NewGenerator(sim.GeneratorConfig{Idle: true}))
	n := openNIC(t, h, sn, netvsc.Config{PoolPackets: 64})
	defer n.Close()
	pool, err := netvsc.NewPool(4, 65536, nil)
	if err != nil {
		t.Fatal(err)
	}
	big := tcpFrame([]byte{0x02, 0, 0, 0, 0, 9}, n.MAC(), 60000, 5000)
	q := n.Queues()[0]
	burst := make([]*frame.Packet, 1)
	ctx := context.Background()
	if a := testing.AllocsPerRun(50, func() {
		p := pool.Get()
		copy(p.SetLen(len(big)), big)
		p.Meta = frame.Meta{Flags: frame.MetaTxLSO | frame.MetaTxIPv4 | frame.MetaTxTCPChecksum, L3Off: 14, L4Off: 34, MSS: 1448}
		burst[0] = p
		for q.TxBurst(burst) == 0 {
			q.WaitTx(ctx)
		}
	}); a != 0 {
		t.Errorf("%v allocations per super-frame", a)
	}
	if st := q.Stats(); st.TxLSO == 0 || st.TxSegments != 0 {
		t.Errorf("large sends %d, segments %d", st.TxLSO, st.TxSegments)
	}
}
