package frame

import (
	"fmt"
	"sync"
)

// Pool is a fixed set of packet buffers with a free list. Safe for
// concurrent use; the burst calls take its lock once per burst.
type Pool struct {
	mu       sync.Mutex
	free     []*Packet
	pkts     []Packet
	headroom int
	bufSize  int
	mem      []byte
	backing  any
}

// PoolConfig describes a pool's buffers.
type PoolConfig struct {
	Buffers  int // how many
	Frame    int // the largest frame each holds after the headroom
	Headroom int // bytes reserved in front of each frame
	// Mem, when set, is the memory the buffers are carved from (at least
	// MemSize bytes; pinned memory a port can hand to a device); else
	// they come from the Go heap.
	Mem []byte
	// Backing is what Mem belongs to, for the port that can use it
	// directly (netvsc looks up a guest-physical window there); the pool
	// only keeps it.
	Backing any
}

// BufferSize returns the size of each buffer: headroom and frame rounded
// up to a cache line.
func (c PoolConfig) BufferSize() int { return (c.Headroom + c.Frame + 63) &^ 63 }

// MemSize returns the bytes the pool's buffers take.
func (c PoolConfig) MemSize() int { return c.Buffers * c.BufferSize() }

// NewPool returns a pool of c.Buffers free packets.
func NewPool(c PoolConfig) (*Pool, error) {
	if c.Buffers <= 0 || c.Frame <= 0 || c.Headroom < 0 {
		return nil, fmt.Errorf("frame: pool of %d buffers of %d bytes with %d of headroom", c.Buffers, c.Frame, c.Headroom)
	}
	size := c.BufferSize()
	mem := c.Mem
	switch {
	case mem == nil:
		mem = make([]byte, c.MemSize())
	case len(mem) < c.MemSize():
		return nil, fmt.Errorf("frame: pool needs %d bytes, memory has %d", c.MemSize(), len(mem))
	}
	p := &Pool{pkts: make([]Packet, c.Buffers), free: make([]*Packet, 0, c.Buffers),
		headroom: c.Headroom, bufSize: size, mem: mem, backing: c.Backing}
	for i := range p.pkts {
		pk := &p.pkts[i]
		pk.buf = mem[i*size : (i+1)*size : (i+1)*size]
		pk.pool, pk.idx, pk.off, pk.free = p, int32(i), c.Headroom, true
		p.free = append(p.free, pk)
	}
	return p, nil
}

// Size returns the number of buffers.
func (p *Pool) Size() int { return len(p.pkts) }

// Available returns how many buffers are free now.
func (p *Pool) Available() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.free)
}

// Backing returns PoolConfig.Backing.
func (p *Pool) Backing() any { return p.backing }

// Offset returns where pk's frame starts in the pool's memory (PoolConfig
// Mem), for a port that addresses that memory by offset.
func (p *Pool) Offset(pk *Packet) int { return int(pk.idx)*p.bufSize + pk.off }

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
		panic("frame: packet freed twice")
	}
	pk.free = true
	p.free = append(p.free, pk)
	p.mu.Unlock()
}

// PutBurst returns packets to their pools, taking each pool's lock once
// per run of its packets.
func PutBurst(pkts []*Packet) {
	for len(pkts) > 0 {
		p := pkts[0].pool
		p.mu.Lock()
		i := 0
		for ; i < len(pkts) && pkts[i].pool == p; i++ {
			pk := pkts[i]
			if pk.free {
				p.mu.Unlock()
				panic("frame: packet freed twice")
			}
			pk.free = true
			p.free = append(p.free, pk)
		}
		p.mu.Unlock()
		pkts = pkts[i:]
	}
}
