package vmbus

import (
	"bytes"
	"fmt"
	"testing"
)

// checkBulkCopy copies n bytes from offset so of a source buffer to offset
// do of a destination buffer with bulkCopy, both slices trimmed to the given
// lengths, and checks that the result is copy's: the same count, the same
// bytes, nothing written outside dst.
func checkBulkCopy(t testing.TB, src, dstBuf []byte, do, dlen int) {
	t.Helper()
	copy(dstBuf, canary[:len(dstBuf)])
	dst := dstBuf[do : do+dlen]
	want := min(len(dst), len(src))
	if got := bulkCopy(dst, src); got != want {
		t.Fatalf("len(dst) %d len(src) %d: copied %d, want %d", len(dst), len(src), got, want)
	}
	if !bytes.Equal(dst[:want], src[:want]) {
		i := 0
		for dst[i] == src[i] {
			i++
		}
		t.Fatalf("len(dst) %d len(src) %d dst offset %d: byte %d is %#x, want %#x", len(dst), len(src), do, i, dst[i], src[i])
	}
	if !bytes.Equal(dstBuf[:do], canary[:do]) || !bytes.Equal(dstBuf[do+want:], canary[do+want:len(dstBuf)]) {
		t.Fatalf("len(dst) %d len(src) %d dst offset %d: bytes outside the copy written", len(dst), len(src), do)
	}
}

// canary fills the destination around a copy, to catch stray writes.
var canary = bytes.Repeat([]byte{0xa5}, 0xffff*8+256)

// filled returns n bytes of a pattern with no repeat shorter than 251.
func filled(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i%251 + 1)
	}
	return b
}

func TestBulkCopyMatchesCopy(t *testing.T) {
	const maxLen = 4160
	srcBuf := filled(maxLen + 64 + 64)
	dstBuf := make([]byte, maxLen+64+64)
	// Every length up to past the thresholds, each with every destination
	// alignment and a source alignment that varies with both.
	for n := 0; n <= maxLen; n++ {
		for do := range 64 {
			so := (n*7 + do*3) % 64
			checkBulkCopy(t, srcBuf[so:so+n], dstBuf, do, n)
		}
	}
	// Every pair of alignments around the 64-byte head and the thresholds.
	for _, n := range []int{64, 65, 127, 128, 2047, 2048, 2049, 4095, 4096, 4097} {
		for so := range 64 {
			for do := range 64 {
				checkBulkCopy(t, srcBuf[so:so+n], dstBuf, do, n)
			}
		}
	}
	// Unequal lengths: the shorter one counts.
	for _, c := range []struct{ dlen, slen int }{{100, 4000}, {4000, 100}, {3000, 2999}, {0, 4096}, {4096, 0}} {
		checkBulkCopy(t, srcBuf[3:3+c.slen], dstBuf, 5, c.dlen)
	}
	// Records as large as a ring takes.
	big := filled(0xffff*8 + 64)
	bigDst := make([]byte, len(big)+64)
	for _, n := range []int{8192, 65536 + 24, 0xffff * 8} {
		checkBulkCopy(t, big[8:8+n], bigDst, 24, n)
	}
}

// Overlapping slices are left to copy, which handles them as memmove does.
func TestBulkCopyOverlap(t *testing.T) {
	for _, shift := range []int{-4096, -100, -64, -1, 0, 1, 63, 64, 100, 4096} {
		t.Run(fmt.Sprint(shift), func(t *testing.T) {
			const n = 8192
			a, b := filled(2*n), filled(2*n)
			so, do := n/2, n/2+shift
			want := copy(b[do:do+n], b[so:so+n])
			if got := bulkCopy(a[do:do+n], a[so:so+n]); got != want || !bytes.Equal(a, b) {
				t.Fatalf("overlap by %d: bulkCopy differs from copy", shift)
			}
		})
	}
}

// TestRingBulkCopyRoundTrip sends packets around a ring whose size is not a
// multiple of any record, so they split at every kind of offset, with the
// bulk copy used from 64 bytes, from this CPU's threshold, and never.
func TestRingBulkCopyRoundTrip(t *testing.T) {
	for _, bulkMin := range []int{64, bulkCopyMin, noBulk} {
		for _, size := range []int{64, 2040, 2048, 4104, 16384, 65536} {
			name := fmt.Sprintf("bulk%d/%d", bulkMin, size)
			if bulkMin == noBulk {
				name = fmt.Sprintf("nobulk/%d", size)
			}
			t.Run(name, func(t *testing.T) {
				o, in, _ := newTestPair(t, 3*PacketSize(0, size)+24)
				o.r.bulkMin, in.r.bulkMin = bulkMin, bulkMin
				buf := make([]byte, in.MaxPacket())
				wraps := 0
				for seq := uint64(0); seq < 40; seq++ {
					p := pattern(seq, size)
					before := o.next
					if err := o.Write(PacketInband, 0, seq, nil, p); err != nil {
						t.Fatalf("write %d: %v", seq, err)
					}
					if o.next < before {
						wraps++
					}
					o.Commit()
					pkt, err := in.Read(buf)
					if err != nil {
						t.Fatalf("read %d: %v", seq, err)
					}
					if pkt.TransID != seq || !bytes.Equal(pkt.Payload(), p) {
						t.Fatalf("packet %d differs", seq)
					}
					in.Commit()
				}
				if wraps < 10 {
					t.Fatalf("only %d of 40 packets wrapped", wraps)
				}
			})
		}
	}
}

// FuzzBulkCopy compares bulkCopy with copy for arbitrary lengths and
// alignments of source and destination.
func FuzzBulkCopy(f *testing.F) {
	f.Add([]byte("seed"), uint16(4097), uint16(4100), uint8(3), uint8(17))
	f.Add([]byte{1, 2, 3}, uint16(2048), uint16(2048), uint8(0), uint8(63))
	f.Add([]byte{}, uint16(65), uint16(64), uint8(8), uint8(8))
	f.Fuzz(func(t *testing.T, seed []byte, slen, dlen uint16, so, do uint8) {
		src := make([]byte, int(so%64)+int(slen))
		for i := range src {
			src[i] = byte(i*7 + 1)
			if len(seed) > 0 {
				src[i] ^= seed[i%len(seed)]
			}
		}
		dstBuf := make([]byte, int(do%64)+int(dlen)+64)
		checkBulkCopy(t, src[so%64:], dstBuf, int(do%64), int(dlen))
	})
}
