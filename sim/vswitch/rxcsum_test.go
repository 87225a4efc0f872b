package vswitch

import (
	"math/rand/v2"
	"testing"

	"github.com/vmbusd/vmbusd/frame/csum"
	"github.com/vmbusd/vmbusd/netvsc/rndis"
)

// rxChecksumRef is RxChecksum written over ParseFlow and PseudoSum, as
// the vSwitch's other frame work parses: the reference RxChecksum must
// agree with on every frame.
func rxChecksumRef(f []byte) rndis.RxChecksum {
	fl := ParseFlow(f)
	if !fl.IP {
		return 0
	}
	var c rndis.RxChecksum
	if !fl.V6 {
		if ^csum.Fold(csum.Add(0, f[fl.L3:fl.L4Off])) == 0 {
			c |= rndis.RxChecksumIPOK
		} else {
			c |= rndis.RxChecksumIPFailed
		}
	}
	seg := f[fl.L4Off:fl.L4End]
	switch fl.L4 {
	case IPProtoTCP:
		if ^csum.Fold(csum.Add(PseudoSum(&fl, IPProtoTCP, len(seg)), seg)) == 0 {
			c |= rndis.RxChecksumTCPOK
		} else {
			c |= rndis.RxChecksumTCPFailed
		}
	case IPProtoUDP:
		switch {
		case !fl.V6 && be.Uint16(seg[6:]) == 0:
			c |= rndis.RxChecksumUDPOK
		case ^csum.Fold(csum.Add(PseudoSum(&fl, IPProtoUDP, len(seg)), seg)) == 0:
			c |= rndis.RxChecksumUDPOK
		default:
			c |= rndis.RxChecksumUDPFailed
		}
	}
	return c
}

// rxCsumSeeds are well-formed frames with correct checksums (TCP and UDP,
// IPv4 and IPv6), the starting points the test mutates.
func rxCsumSeeds(t testing.TB) [][]byte {
	var seeds [][]byte
	for _, v6 := range []bool{false, true} {
		for _, n := range []int{0, 1, 33, 1400} {
			f := tcpFrame(v6, n)
			fl := ParseFlow(f)
			c := rndis.TxChecksumTCP | rndis.TxChecksumIPv4 | rndis.TxChecksumIPHeader
			if v6 {
				c = rndis.TxChecksumTCP | rndis.TxChecksumIPv6
			}
			if err := ApplyTxChecksum(f, rndis.NewTxChecksum(c, fl.L4Off)); err != nil {
				t.Fatal(err)
			}
			seeds = append(seeds, f)
			// The same as UDP with a computed checksum.
			u := append([]byte(nil), f...)
			if v6 {
				u[EthHeaderLen+6] = IPProtoUDP
			} else {
				u[EthHeaderLen+9] = IPProtoUDP
			}
			be.PutUint16(u[fl.L4Off+4:], uint16(fl.L4End-fl.L4Off))
			uc := rndis.TxChecksumUDP | rndis.TxChecksumIPv4 | rndis.TxChecksumIPHeader
			if v6 {
				uc = rndis.TxChecksumUDP | rndis.TxChecksumIPv6
			}
			if err := ApplyTxChecksum(u, rndis.NewTxChecksum(uc, fl.L4Off)); err != nil {
				t.Fatal(err)
			}
			seeds = append(seeds, u)
		}
	}
	for _, size := range []int{60, 64, 1514} {
		seeds = append(seeds, udpFrame([6]byte{2}, [6]byte{4}, 1500, size)) // UDP checksum 0
	}
	return seeds
}

// TestRxChecksumMatchesReference: RxChecksum's own parse gives what
// ParseFlow and PseudoSum give, on good frames and on frames with bytes
// of their headers or payload changed, cut short or padded.
func TestRxChecksumMatchesReference(t *testing.T) {
	seeds := rxCsumSeeds(t)
	for _, f := range seeds {
		want := rxChecksumRef(f)
		if want&(rndis.RxChecksumTCPOK|rndis.RxChecksumUDPOK) == 0 {
			t.Fatalf("seed not verified good: %#x", want)
		}
		if got := RxChecksum(f); got != want {
			t.Fatalf("seed: got %#x, want %#x", got, want)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 200000 {
		f := append([]byte(nil), seeds[r.IntN(len(seeds))]...)
		for range 1 + r.IntN(3) {
			if len(f) == 0 {
				break
			}
			switch r.IntN(6) {
			case 0, 1, 2: // a header byte
				at := r.IntN(min(len(f), 80))
				f[at] = byte(r.Uint32())
			case 3: // a few interesting header values
				at := r.IntN(min(len(f), 80))
				f[at] = []byte{0, 0x45, 0x46, 0x4f, 0x60, 0x20, 0x3f, 0xff, IPProtoTCP, IPProtoUDP}[r.IntN(10)]
			case 4: // cut short
				f = f[:r.IntN(len(f)+1)]
			case 5: // padded
				f = append(f, make([]byte, r.IntN(8))...)
			}
		}
		if got, want := RxChecksum(f), rxChecksumRef(f); got != want {
			t.Fatalf("case %d: frame %x: got %#x, want %#x", i, f, got, want)
		}
	}
}

func FuzzRxChecksum(f *testing.F) {
	for _, s := range rxCsumSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := RxChecksum(b), rxChecksumRef(b); got != want {
			t.Fatalf("got %#x, want %#x", got, want)
		}
	})
}

func BenchmarkRxChecksum(b *testing.B) {
	for _, size := range []int{64, 1514} {
		f := udpFrame([6]byte{2}, [6]byte{4}, 1500, size)
		b.Run(map[int]string{64: "64B", 1514: "1514B"}[size], func(b *testing.B) {
			var s rndis.RxChecksum
			for range b.N {
				s |= RxChecksum(f)
			}
			if s != rndis.RxChecksumIPOK|rndis.RxChecksumUDPOK {
				b.Fatalf("%#x", s)
			}
		})
	}
}

// TestIPv4HeaderOK: the word-sum check agrees with csum on headers of
// every length IHL allows, valid (checksum set), invalid, all zero and
// all ones.
func TestIPv4HeaderOK(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 100000 {
		h := make([]byte, 4*(5+r.IntN(11)))
		switch i % 4 {
		case 0, 1:
			for j := range h {
				h[j] = byte(r.Uint32())
			}
			if i%4 == 0 { // make it valid
				h[10], h[11] = 0, 0
				be.PutUint16(h[10:], csum.Checksum(0, h))
			}
		case 2:
			for j := range h {
				h[j] = 0xff
			}
		}
		want := ^csum.Fold(csum.Add(0, h)) == 0
		if got := ipv4HeaderOK(h); got != want {
			t.Fatalf("header %x: got %v, want %v", h, got, want)
		}
		if i%4 == 0 && !want {
			t.Fatalf("header %x with its checksum set does not verify", h)
		}
	}
}
