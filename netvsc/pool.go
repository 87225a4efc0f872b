package netvsc

import (
	"fmt"
	"sync"

	"github.com/vmbusd/vmbusd/netvsc/rndis"
)

// Packet is one Ethernet frame (no FCS) in a fixed-size buffer from a
// queue's pool, with its offload metadata. The frame is Data(); the bytes
// before it are headroom the transmit path may use for the RNDIS header.
//
// A Packet belongs to one goroutine at a time: the one that got it from
// Alloc or RxBurst, until it passes it to TxBurst (which takes ownership)
// or calls Free. Its zero value is not usable.
type Packet struct {
	buf  []byte // the whole fixed-size buffer
	off  int    // start of the frame in buf
	n    int    // frame length
	pool *Pool
	idx  int32 // index in the pool
	free bool  // on the free list (double-free check)

	// Meta is the frame's offload metadata: set by RxBurst from the
	// host's per-packet info, read by TxBurst.
	Meta Meta
}

// MetaFlags say which Meta fields hold.
type MetaFlags uint16

const (
	// MetaVLAN: VLAN holds the 802.1Q tag control (the tag is never in
	// the frame: Hyper-V strips it on receive and drops frames carrying
	// one on transmit, docs/protocol/netvsc.md §2.7).
	MetaVLAN MetaFlags = 1 << iota
	// MetaHash: Hash holds the host's RSS hash (receive) or a flow hash
	// choosing the send-table entry (transmit).
	MetaHash
	// Receive checksum results from the host.
	MetaRxIPChecksumOK
	MetaRxL4ChecksumOK
	MetaRxChecksumBad
	// Transmit offload requests: the host computes the checksums named,
	// with L3Off/L4Off the header offsets in the frame.
	MetaTxIPv4
	MetaTxIPv6
	MetaTxIPChecksum
	MetaTxTCPChecksum
	MetaTxUDPChecksum
	// MetaTxLSO: a TCP frame larger than the MTU to be cut into MSS-sized
	// segments (by the host with LSOv2, else in software).
	MetaTxLSO
)

// Meta is a frame's offload metadata.
type Meta struct {
	Flags MetaFlags
	VLAN  uint16 // 802.1Q TCI
	Hash  uint32
	L3Off uint16 // transmit: IP header offset
	L4Off uint16 // transmit: TCP/UDP header offset
	MSS   uint16 // transmit with MetaTxLSO
}

// Data returns the frame.
func (p *Packet) Data() []byte { return p.buf[p.off : p.off+p.n : p.off+p.n] }

// Len returns the frame length.
func (p *Packet) Len() int { return p.n }

// Cap returns the largest frame the buffer holds after the headroom.
func (p *Packet) Cap() int { return len(p.buf) - p.off }

// SetLen sets the frame length (at most Cap) and returns the frame.
func (p *Packet) SetLen(n int) []byte {
	if n < 0 || n > p.Cap() {
		panic(fmt.Sprintf("netvsc: packet length %d outside 0..%d", n, p.Cap()))
	}
	p.n = n
	return p.Data()
}

// Buffer returns the whole space after the headroom, for reading a frame
// into; then call SetLen.
func (p *Packet) Buffer() []byte { return p.buf[p.off:] }

// Prepend extends the frame by n bytes at the front, out of the headroom
// (a virtio-net header in front of a frame for a TAP), and returns the
// frame. n must not exceed Headroom minus what was prepended already.
func (p *Packet) Prepend(n int) []byte {
	if n < 0 || n > p.off {
		panic(fmt.Sprintf("netvsc: prepend %d bytes with %d of headroom", n, p.off))
	}
	p.off -= n
	p.n += n
	return p.Data()
}

// TrimFront drops n bytes from the front of the frame (into the headroom).
func (p *Packet) TrimFront(n int) {
	if n < 0 || n > p.n {
		panic(fmt.Sprintf("netvsc: trim %d bytes of a %d-byte frame", n, p.n))
	}
	p.off += n
	p.n -= n
}

// Reset clears the frame and metadata and restores the default headroom.
func (p *Packet) Reset() {
	p.off = p.pool.headroom
	p.n = 0
	p.Meta = Meta{}
}

// Free returns the packet to its pool.
func (p *Packet) Free() { p.pool.Put(p) }

// Pool is a fixed set of packet buffers with a free list. Safe for
// concurrent use; the burst calls take it once per burst.
type Pool struct {
	mu       sync.Mutex
	free     []*Packet
	pkts     []Packet
	headroom int
	bufSize  int
	mem      []byte
	gpa      *GPAPool // when the buffers are carved from pinned memory
	gpaOff   int      // offset of mem in the GPA pool
}

// Headroom reserved in front of each frame: a PACKET_MSG header and every
// per-packet info this package writes, rounded up.
const Headroom = (rndis.MaxPacketHeaderLen + 63) &^ 63

// NewPool returns a pool of n buffers, each holding Headroom plus frame
// bytes. With gpa set the buffers are carved from it (and frames in them
// can be sent GPA-direct); otherwise from the Go heap.
func NewPool(n, frame int, gpa *GPAPool) (*Pool, error) {
	if n <= 0 || frame <= 0 {
		return nil, fmt.Errorf("netvsc: pool of %d buffers of %d bytes", n, frame)
	}
	size := (Headroom + frame + 63) &^ 63
	p := &Pool{pkts: make([]Packet, n), free: make([]*Packet, 0, n), headroom: Headroom, bufSize: size}
	if gpa != nil {
		off, mem, err := gpa.carve(n * size)
		if err != nil {
			return nil, err
		}
		p.mem, p.gpa, p.gpaOff = mem, gpa, off
	} else {
		p.mem = make([]byte, n*size)
	}
	for i := range p.pkts {
		pk := &p.pkts[i]
		pk.buf = p.mem[i*size : (i+1)*size : (i+1)*size]
		pk.pool, pk.idx, pk.off, pk.free = p, int32(i), Headroom, true
		p.free = append(p.free, pk)
	}
	return p, nil
}

// Size returns the number of buffers; Available how many are free now.
func (p *Pool) Size() int { return len(p.pkts) }
func (p *Pool) Available() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.free)
}

// Get returns a free packet with an empty frame, or nil when the pool is
// exhausted.
func (p *Pool) Get() *Packet {
	p.mu.Lock()
	n := len(p.free)
	if n == 0 {
		p.mu.Unlock()
		return nil
	}
	pk := p.free[n-1]
	p.free = p.free[:n-1]
	pk.free = false
	p.mu.Unlock()
	pk.Reset()
	return pk
}

// GetBurst fills pkts with free packets and returns how many it got.
func (p *Pool) GetBurst(pkts []*Packet) int {
	p.mu.Lock()
	k := min(len(pkts), len(p.free))
	base := len(p.free) - k
	copy(pkts, p.free[base:])
	p.free = p.free[:base]
	for _, pk := range pkts[:k] {
		pk.free = false
	}
	p.mu.Unlock()
	for _, pk := range pkts[:k] {
		pk.Reset()
	}
	return k
}

// Put returns a packet to the pool it came from.
func (p *Pool) Put(pk *Packet) {
	if pk.pool != p {
		pk.pool.Put(pk)
		return
	}
	p.mu.Lock()
	if pk.free {
		p.mu.Unlock()
		panic("netvsc: packet freed twice")
	}
	pk.free = true
	p.free = append(p.free, pk)
	p.mu.Unlock()
}

// PutBurst returns packets to their pools.
func PutBurst(pkts []*Packet) {
	for len(pkts) > 0 {
		p := pkts[0].pool
		p.mu.Lock()
		i := 0
		for ; i < len(pkts) && pkts[i].pool == p; i++ {
			pk := pkts[i]
			if pk.free {
				p.mu.Unlock()
				panic("netvsc: packet freed twice")
			}
			pk.free = true
			p.free = append(p.free, pk)
		}
		p.mu.Unlock()
		pkts = pkts[i:]
	}
}

// gpaOf returns the guest-physical page numbers and in-page offset of
// buf[off:off+n] of a packet carved from a GPA pool; ok is false when the
// pool is not GPA-backed.
func (p *Pool) gpaOf(pk *Packet, off, n int, pfns []uint64) (pageOff uint32, out []uint64, ok bool) {
	if p.gpa == nil {
		return 0, pfns, false
	}
	base := p.gpaOff + int(pk.idx)*p.bufSize + off
	return p.gpa.ranges(base, n, pfns)
}
