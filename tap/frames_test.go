package tap

import (
	"encoding/binary"
	"testing"

	"github.com/vmbusd/vmbusd/frame"
	"github.com/vmbusd/vmbusd/frame/csum"
)

// Frame builders shared by the offload tests.

var (
	macA = []byte{0x02, 0, 0, 0, 0, 1}
	macB = []byte{0x02, 0, 0, 0, 0, 2}
	tsOp = []byte{1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2} // NOP NOP timestamps
)

// tcpSpec describes a TCP segment to build.
type tcpSpec struct {
	v6       bool
	sport    uint16
	seq, ack uint32
	flags    uint8
	opts     []byte
	payload  int
	fill     byte // payload byte i is fill+i
}

// buildTCP returns a TCP frame with complete checksums.
func buildTCP(s tcpSpec) []byte {
	thl := 20 + len(s.opts)
	var f []byte
	f = append(f, macB...)
	f = append(f, macA...)
	if s.v6 {
		f = binary.BigEndian.AppendUint16(f, 0x86dd)
		h := make([]byte, 40)
		h[0] = 0x60
		binary.BigEndian.PutUint16(h[4:], uint16(thl+s.payload))
		h[6], h[7] = 6, 64
		h[23], h[39] = 1, 2 // ::1 -> ::2 (enough to tell the flows apart)
		f = append(f, h...)
	} else {
		f = binary.BigEndian.AppendUint16(f, 0x0800)
		h := make([]byte, 20)
		h[0] = 0x45
		binary.BigEndian.PutUint16(h[2:], uint16(20+thl+s.payload))
		binary.BigEndian.PutUint16(h[4:], uint16(s.seq)) // an id that varies
		h[6], h[8], h[9] = 0x40, 64, 6
		copy(h[12:], []byte{10, 0, 0, 1, 10, 0, 0, 2})
		binary.BigEndian.PutUint16(h[10:], csum.Checksum(0, h))
		f = append(f, h...)
	}
	l4 := len(f)
	t := make([]byte, 20)
	binary.BigEndian.PutUint16(t[0:], s.sport)
	binary.BigEndian.PutUint16(t[2:], 5201)
	binary.BigEndian.PutUint32(t[4:], s.seq)
	binary.BigEndian.PutUint32(t[8:], s.ack)
	t[12] = byte(thl/4) << 4
	t[13] = s.flags
	binary.BigEndian.PutUint16(t[14:], 1000)
	f = append(f, t...)
	f = append(f, s.opts...)
	for i := range s.payload {
		f = append(f, s.fill+byte(i))
	}
	setTCPChecksum(f, l4, s.v6)
	return f
}

// pseudo returns a frame's TCP pseudo-header sum for transport length n.
func pseudo(f []byte, v6 bool, n int) uint32 {
	if v6 {
		return csum.Add(0, f[22:54]) + 6 + uint32(n)
	}
	return csum.Add(0, f[26:34]) + 6 + uint32(n)
}

func setTCPChecksum(f []byte, l4 int, v6 bool) {
	f[l4+16], f[l4+17] = 0, 0
	binary.BigEndian.PutUint16(f[l4+16:], csum.Checksum(pseudo(f, v6, len(f)-l4), f[l4:]))
}

// tcpValid reports whether a frame's TCP checksum (and IPv4 header
// checksum) is valid.
func tcpValid(f []byte, v6 bool) bool {
	l4 := 34
	if v6 {
		l4 = 54
	} else if csum.Checksum(0, f[14:34]) != 0 {
		return false
	}
	return csum.Checksum(pseudo(f, v6, len(f)-l4), f[l4:]) == 0
}

// testPool is a heap pool for test packets.
func testPool(t testing.TB, n, size int) *frame.Pool {
	t.Helper()
	p, err := frame.NewPool(frame.PoolConfig{Buffers: n, Frame: size, Headroom: testHeadroom})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// received returns frames as the NIC hands them over: in pool packets,
// marked with the host's checksum results.
func received(t testing.TB, pool *frame.Pool, frames ...[]byte) []*frame.Packet {
	t.Helper()
	out := make([]*frame.Packet, len(frames))
	for i, f := range frames {
		p := pool.Get()
		if p == nil {
			t.Fatal("test pool empty")
		}
		copy(p.SetLen(len(f)), f)
		p.Meta.Flags = frame.MetaRxIPChecksumOK | frame.MetaRxL4ChecksumOK
		out[i] = p
	}
	return out
}

// testHeadroom is room for a virtio-net header and more, as a NIC's pool
// leaves for its own.
const testHeadroom = 128
