package frame

import "fmt"

// Packet is one Ethernet frame (no FCS) in a fixed-size buffer from a
// Pool, with its offload metadata. The frame is Data(); the bytes before it
// are headroom a port may prepend its own header into (an RNDIS header, a
// virtio-net header). Its zero value is not usable: packets come from a
// Pool. See the package doc for who owns a packet when.
type Packet struct {
	buf  []byte // the whole fixed-size buffer
	off  int    // start of the frame in buf
	n    int    // frame length
	pool *Pool
	idx  int32 // index in the pool
	free bool  // on the free list (double-free check)

	// Meta is the frame's offload metadata: set by the source that filled
	// the packet, read by the sink it goes to.
	Meta Meta
}

// MetaFlags say which Meta fields hold. The bits from MetaPortBits up are
// a port's own marks (netvsc marks frames that came through the VF there).
type MetaFlags uint16

const (
	// MetaVLAN: VLAN holds the 802.1Q tag control; the tag is not in the
	// frame.
	MetaVLAN MetaFlags = 1 << iota
	// MetaHash: Hash holds the receive-side hash (RSS) or, on transmit, a
	// flow hash choosing the queue.
	MetaHash
	// Receive checksum results from the port that received the frame.
	MetaRxIPChecksumOK
	MetaRxL4ChecksumOK
	MetaRxChecksumBad
	// Transmit offload requests: the sink (or the hardware behind it)
	// computes the checksums named, with L3Off/L4Off the header offsets in
	// the frame.
	MetaTxIPv4
	MetaTxIPv6
	MetaTxIPChecksum
	MetaTxTCPChecksum
	MetaTxUDPChecksum
	// MetaTxLSO: a TCP frame larger than the MTU to be cut into MSS-sized
	// segments (by the sink's hardware or in software).
	MetaTxLSO

	// MetaPortBits is the lowest bit left to a port's own marks.
	MetaPortBits MetaFlags = 1 << 12
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

// TxOffloads are the transmit offloads a sink takes: which checksum
// requests in Meta it honours and the largest segmentation offload
// (MetaTxLSO) frame. A source that produces offload requests (a TAP with
// a virtio-net header) asks for no more than these.
type TxOffloads struct {
	IPv4Checksum               bool // IPv4 header checksum
	TCP4Checksum, TCP6Checksum bool
	UDP4Checksum, UDP6Checksum bool
	// LSO4, LSO6: the largest large send in bytes (the frame, headers
	// included), 0 when the sink does not segment for the family.
	LSO4, LSO6 int
}

// Data returns the frame.
func (p *Packet) Data() []byte { return p.buf[p.off : p.off+p.n : p.off+p.n] }

// Len returns the frame length.
func (p *Packet) Len() int { return p.n }

// Cap returns the largest frame the buffer holds after the headroom.
func (p *Packet) Cap() int { return len(p.buf) - p.off }

// Headroom returns the bytes free in front of the frame.
func (p *Packet) Headroom() int { return p.off }

// SetLen sets the frame length (at most Cap) and returns the frame.
func (p *Packet) SetLen(n int) []byte {
	if n < 0 || n > p.Cap() {
		panic(fmt.Sprintf("frame: packet length %d outside 0..%d", n, p.Cap()))
	}
	p.n = n
	return p.Data()
}

// Buffer returns the whole space after the headroom, for reading a frame
// into; then call SetLen.
func (p *Packet) Buffer() []byte { return p.buf[p.off:] }

// Prepend extends the frame by n bytes at the front, out of the headroom,
// and returns the frame. n must not exceed Headroom.
func (p *Packet) Prepend(n int) []byte {
	if n < 0 || n > p.off {
		panic(fmt.Sprintf("frame: prepend %d bytes with %d of headroom", n, p.off))
	}
	p.off -= n
	p.n += n
	return p.Data()
}

// TrimFront drops n bytes from the front of the frame (into the headroom).
func (p *Packet) TrimFront(n int) {
	if n < 0 || n > p.n {
		panic(fmt.Sprintf("frame: trim %d bytes of a %d-byte frame", n, p.n))
	}
	p.off += n
	p.n -= n
}

// Reset clears the frame and metadata and restores the pool's headroom.
func (p *Packet) Reset() {
	p.off = p.pool.headroom
	p.n = 0
	p.Meta = Meta{}
}

// Pool returns the pool the packet belongs to.
func (p *Packet) Pool() *Pool { return p.pool }

// Free returns the packet to its pool.
func (p *Packet) Free() { p.pool.Put(p) }
