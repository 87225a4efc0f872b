package vswitch

// A traffic generator and sink port for benchmarks: it sends UDP/IPv4
// frames to the guest (flows, sizes, rate, count) and counts what the
// guest sends.

import (
	"encoding/binary"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vmbusd/vmbusd/frame/csum"
)

// GeneratorConfig describes the traffic a Generator sends to the guest.
type GeneratorConfig struct {
	// Flows is how many distinct UDP flows (source ports 1024..) the
	// frames cycle through, so RSS spreads them; 0 means 1.
	Flows int
	// Sizes are the frame sizes (Ethernet header included, no FCS) the
	// frames cycle through; each is at least 60. nil means {64}.
	Sizes []int
	// Rate is frames per second; 0 sends as fast as the guest's queues
	// take them (backing off briefly when they are full).
	Rate float64
	// Count stops after this many frames were accepted; 0 never stops.
	Count uint64
	// Batch is the frames per Deliver call; 0 means 32.
	Batch int
	// Idle makes a pure sink: nothing is sent.
	Idle bool
	// SrcMAC is the frames' source (default 02:00:00:00:00:01); their
	// destination is the guest's MAC.
	SrcMAC net.HardwareAddr
	// SrcIP and DstIP default to 198.18.0.1 and 198.18.0.2 (RFC 2544).
	SrcIP, DstIP netip.Addr
}

// GeneratorStats are a Generator's counters.
type GeneratorStats struct {
	Sent     uint64 // frames offered to the guest's NIC
	Accepted uint64 // frames the NIC queued for the guest
	// Received and ReceivedBytes count frames the guest sent (the sink).
	Received, ReceivedBytes uint64
}

// Generator is a traffic generator and sink port. Safe for concurrent use;
// make it with NewGenerator. Attach it to one NIC only.
type Generator struct {
	cfg  GeneratorConfig
	up   Uplink
	stop chan struct{}
	done chan struct{}
	once sync.Once

	mu      sync.Mutex // orders Connect against a Close of a never-attached generator
	started bool       // runSend owns done (closes it when it returns)
	closed  bool

	sent, accepted, received, receivedBytes atomic.Uint64
}

// NewGenerator returns a generator port; it starts sending when attached.
func NewGenerator(cfg GeneratorConfig) *Generator {
	if cfg.Flows <= 0 {
		cfg.Flows = 1
	}
	if len(cfg.Sizes) == 0 {
		cfg.Sizes = []int{64}
	}
	for i, s := range cfg.Sizes {
		cfg.Sizes[i] = max(s, 60)
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 32
	}
	if cfg.SrcMAC == nil {
		cfg.SrcMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 1}
	}
	if !cfg.SrcIP.IsValid() {
		cfg.SrcIP = netip.MustParseAddr("198.18.0.1")
	}
	if !cfg.DstIP.IsValid() {
		cfg.DstIP = netip.MustParseAddr("198.18.0.2")
	}
	return &Generator{cfg: cfg, stop: make(chan struct{}), done: make(chan struct{})}
}

// Connect implements Port: sending starts.
func (g *Generator) Connect(up Uplink) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.up = up
	if g.closed {
		return nil // Close closed done already
	}
	g.started = true
	if g.cfg.Idle {
		close(g.done)
		return nil
	}
	go g.runSend()
	return nil
}

// Transmit implements Port: the sink counts the guest's frames.
func (g *Generator) Transmit(frames [][]byte) {
	var b uint64
	for _, f := range frames {
		b += uint64(len(f))
	}
	g.received.Add(uint64(len(frames)))
	g.receivedBytes.Add(b)
}

// Close implements Port: sending stops.
func (g *Generator) Close() error {
	g.once.Do(func() {
		close(g.stop)
		g.mu.Lock()
		g.closed = true
		if !g.started {
			close(g.done) // never attached: nothing will
		}
		g.mu.Unlock()
	})
	<-g.done
	return nil
}

// Done is closed when the generator has stopped sending (Count reached,
// or Close).
func (g *Generator) Done() <-chan struct{} { return g.done }

// Stats returns the counters.
func (g *Generator) Stats() GeneratorStats {
	return GeneratorStats{Sent: g.sent.Load(), Accepted: g.accepted.Load(),
		Received: g.received.Load(), ReceivedBytes: g.receivedBytes.Load()}
}

// Frame writes a UDP/IPv4 frame of size bytes for flow into b.
func (g *Generator) Frame(b []byte, mac net.HardwareAddr, flow int, seq uint64) []byte {
	size := len(b)
	copy(b[0:6], mac)
	copy(b[6:12], g.cfg.SrcMAC)
	be.PutUint16(b[12:], EthTypeIPv4)
	ip := b[EthHeaderLen:]
	clear(ip[:28])
	ip[0] = 0x45
	be.PutUint16(ip[2:], uint16(size-EthHeaderLen))
	ip[8] = 64
	ip[9] = IPProtoUDP
	s, d := g.cfg.SrcIP.As4(), g.cfg.DstIP.As4()
	copy(ip[12:16], s[:])
	copy(ip[16:20], d[:])
	be.PutUint16(ip[10:], ^csum.Fold(csum.Add(0, ip[:20])))
	u := ip[20:]
	be.PutUint16(u[0:], uint16(1024+flow))
	be.PutUint16(u[2:], 9) // discard
	be.PutUint16(u[4:], uint16(size-EthHeaderLen-20))
	if len(u) >= 16 {
		binary.BigEndian.PutUint64(u[8:], seq)
	}
	return b
}

// genHeaderLen is the Ethernet, IPv4 and UDP headers of a generator
// frame: all Frame writes but the sequence number.
const genHeaderLen = EthHeaderLen + 20 + 8

// templates returns, for each configured size, the headers Frame writes
// for flow 0: they depend on the size only, but for the source port.
func (g *Generator) templates(mac net.HardwareAddr) [][genHeaderLen]byte {
	t := make([][genHeaderLen]byte, len(g.cfg.Sizes))
	for i, size := range g.cfg.Sizes {
		copy(t[i][:], g.Frame(make([]byte, size), mac, 0, 0))
	}
	return t
}

// fill writes into b what Frame(b, mac, flow, seq) does, from t, the
// template of b's size: the headers, the flow's source port and the
// sequence number, so that a frame costs no header checksum.
func fill(b []byte, t *[genHeaderLen]byte, flow int, seq uint64) []byte {
	copy(b, t[:])
	be.PutUint16(b[EthHeaderLen+20:], uint16(1024+flow))
	if len(b) >= genHeaderLen+8 {
		binary.BigEndian.PutUint64(b[genHeaderLen:], seq)
	}
	return b
}

// runSend sends the configured traffic until Count or Close.
func (g *Generator) runSend() {
	defer close(g.done)
	mac := g.up.MAC()
	tmpl := g.templates(mac)
	batch := g.cfg.Batch
	bufs := make([][]byte, batch)
	frames := make([][]byte, 0, batch)
	var seq uint64
	start := time.Now()
	for {
		select {
		case <-g.stop:
			return
		default:
		}
		n := batch
		if g.cfg.Count > 0 {
			left := g.cfg.Count - g.accepted.Load()
			if left == 0 {
				return
			}
			n = int(min(uint64(n), left))
		}
		if g.cfg.Rate > 0 {
			due := uint64(time.Since(start).Seconds() * g.cfg.Rate)
			if due <= seq {
				time.Sleep(max(time.Duration(float64(time.Second)/g.cfg.Rate), 50*time.Microsecond))
				continue
			}
			n = int(min(uint64(n), due-seq))
		}
		frames = frames[:0]
		for i := 0; i < n; i++ {
			k := int(seq) % len(g.cfg.Sizes)
			size := g.cfg.Sizes[k]
			if cap(bufs[i]) < size {
				bufs[i] = make([]byte, size)
			}
			frames = append(frames, fill(bufs[i][:size], &tmpl[k], int(seq)%g.cfg.Flows, seq))
			seq++
		}
		got := g.up.Deliver(frames)
		g.sent.Add(uint64(n))
		g.accepted.Add(uint64(got))
		if got < n {
			time.Sleep(20 * time.Microsecond) // the guest's queues are full
		}
	}
}
