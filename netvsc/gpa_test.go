package netvsc_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/internal/csum"
	"github.com/vmbusd/vmbusd/netvsc"
	"github.com/vmbusd/vmbusd/sim"
)

// collect receives frames from every queue until want arrived or timeout.
func collect(t *testing.T, n *netvsc.NIC, want int) [][]byte {
	t.Helper()
	var out [][]byte
	rx := make([]*netvsc.Packet, 64)
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

func sendOne(t *testing.T, q *netvsc.Queue, f []byte, meta netvsc.Meta) {
	t.Helper()
	p := q.Alloc()
	if p == nil || p.Cap() < len(f) {
		t.Fatalf("no packet buffer for %d bytes", len(f))
	}
	copy(p.SetLen(len(f)), f)
	p.Meta = meta
	for q.TxBurst([]*netvsc.Packet{p}) == 0 {
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
	f := frame(dst, src, 54+payload, seq, 40000)
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

// TestLargeFramesWithoutGPA: without pinned memory a jumbo UDP frame is
// fragmented and a TCP one segmented in software.
func TestLargeFramesWithoutGPA(t *testing.T) {
	_, _, n := newNIC(t, sim.NICConfig{MTU: 9000, RecvBuffer: 8 << 20, RecvSectionSize: sim.RecvSectionFromMTU}, sim.NewReflector(),
		netvsc.Config{MTU: 9000, PoolPackets: 256})
	q := n.Queues()[0]
	peer := []byte{0x02, 0, 0, 0, 0, 9}
	sendOne(t, q, frame(peer, n.MAC(), 9014, 1, 1000), netvsc.Meta{})
	frags := collect(t, n, 2)
	total := 0
	for _, f := range frags {
		total += len(f) - 34
		if len(f) > 6144 {
			t.Errorf("fragment of %d bytes", len(f))
		}
	}
	if total != 9014-34 {
		t.Errorf("fragments carry %d bytes of IP payload, want %d", total, 9014-34)
	}
	// TCP, segmented to fit a send section (6144 bytes).
	big := tcpFrame(peer, n.MAC(), 8000, 1000)
	sendOne(t, q, big, netvsc.Meta{})
	segs := collect(t, n, 2)
	got := 0
	for _, s := range segs {
		got += len(s) - 54
	}
	if got != 8000 {
		t.Errorf("segments carry %d payload bytes", got)
	}
	if st := q.Stats(); st.TxSegmented != 2 {
		t.Errorf("segmented %d", st.TxSegmented)
	}
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
			var pool *netvsc.Pool
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
			p.Meta = netvsc.Meta{Flags: netvsc.MetaTxLSO | netvsc.MetaTxIPv4 | netvsc.MetaTxTCPChecksum | netvsc.MetaTxIPChecksum,
				L3Off: 14, L4Off: 34, MSS: 1448}
			q := n.Queues()[0]
			if q.TxBurst([]*netvsc.Packet{p}) != 1 {
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
	burst := make([]*netvsc.Packet, 1)
	ctx := context.Background()
	if a := testing.AllocsPerRun(50, func() {
		p := pool.Get()
		copy(p.SetLen(len(big)), big)
		p.Meta = netvsc.Meta{Flags: netvsc.MetaTxLSO | netvsc.MetaTxIPv4 | netvsc.MetaTxTCPChecksum, L3Off: 14, L4Off: 34, MSS: 1448}
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
