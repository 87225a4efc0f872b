package daemon

import (
	"cmp"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/internal/pcapfilter"
	"github.com/vmbusd/vmbusd/internal/pcapng"
)

// udpFrame is an Ethernet/IPv4/UDP frame from srcPort to port 53.
func udpFrame(srcPort uint16) []byte {
	f := make([]byte, 60)
	f[12], f[13] = 0x08, 0x00
	f[14] = 0x45
	f[23] = 17
	f[34], f[35] = byte(srcPort>>8), byte(srcPort)
	f[36], f[37] = 0, 53
	return f
}

// TestCaptureOffer: a capture takes a frame only on its queue and
// direction and through its filter, cuts it to its snaplen, and counts
// what it saw, accepted and dropped.
func TestCaptureOffer(t *testing.T) {
	dns, err := pcapfilter.New("udp and src port 1000", pcapfilter.LinkEthernet, 0)
	if err != nil {
		t.Fatal(err)
	}
	type offer struct {
		in    bool
		queue int
		port  uint16
	}
	offers := []offer{{true, 0, 1000}, {false, 0, 1000}, {true, 1, 1000}, {true, 0, 2000}, {false, 1, 2000}}
	for _, tc := range []struct {
		name string
		sub  func() *captureSub
		want []int // indexes into offers that are queued
		st   pcapng.Stats
	}{
		{"everything", func() *captureSub { return &captureSub{queue: -1} }, []int{0, 1, 2, 3, 4}, pcapng.Stats{Received: 5, Accepted: 5}},
		{"queue 1", func() *captureSub { return &captureSub{queue: 1} }, []int{2, 4}, pcapng.Stats{Received: 2, Accepted: 2}},
		{"in", func() *captureSub { return &captureSub{queue: -1, dir: DirIn} }, []int{0, 2, 3}, pcapng.Stats{Received: 3, Accepted: 3}},
		{"out", func() *captureSub { return &captureSub{queue: -1, dir: DirOut} }, []int{1, 4}, pcapng.Stats{Received: 2, Accepted: 2}},
		{"filter", func() *captureSub { return &captureSub{queue: -1, filter: dns} }, []int{0, 1, 2}, pcapng.Stats{Received: 5, Accepted: 3}},
		{"in, queue 0, filter", func() *captureSub { return &captureSub{queue: 0, dir: DirIn, filter: dns} }, []int{0}, pcapng.Stats{Received: 2, Accepted: 1}},
		{"snaplen", func() *captureSub { return &captureSub{queue: -1, snaplen: 20} }, []int{0, 1, 2, 3, 4}, pcapng.Stats{Received: 5, Accepted: 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.sub()
			s.frames = make(chan capturedFrame, len(offers))
			for _, o := range offers {
				s.offer(time.Unix(1, 0), o.in, o.queue, udpFrame(o.port))
			}
			close(s.frames)
			var i int
			for f := range s.frames {
				o := offers[tc.want[i]]
				if f.in != o.in || f.queue != o.queue || f.orig != 60 {
					t.Fatalf("frame %d: %+v, want offer %d", i, f, tc.want[i])
				}
				if want := cmp.Or(s.snaplen, 60); len(f.data) != want {
					t.Fatalf("frame %d: %d bytes kept, want %d", i, len(f.data), want)
				}
				i++
			}
			if i != len(tc.want) || s.stats() != tc.st {
				t.Fatalf("%d frames queued, stats %+v; want %d, %+v", i, s.stats(), len(tc.want), tc.st)
			}
		})
	}
}

// TestCaptureOfferDropsWhenFull: a capture whose reader is behind drops
// (and counts) rather than blocking the data path.
func TestCaptureOfferDropsWhenFull(t *testing.T) {
	s := &captureSub{queue: -1, frames: make(chan capturedFrame, 2)}
	for range 5 {
		s.offer(time.Unix(1, 0), true, 0, udpFrame(1))
	}
	if st := s.stats(); st != (pcapng.Stats{Received: 5, Accepted: 5, Dropped: 3}) || len(s.frames) != 2 {
		t.Fatalf("stats %+v, %d queued", st, len(s.frames))
	}
}

func TestParseDirection(t *testing.T) {
	for in, want := range map[string]Direction{"": DirInOut, "inout": DirInOut, "in": DirIn, "out": DirOut} {
		if d, err := ParseDirection(in); err != nil || d != want {
			t.Errorf("ParseDirection(%q) = %v, %v", in, d, err)
		}
	}
	if _, err := ParseDirection("both"); err == nil {
		t.Error("ParseDirection accepted both")
	}
}
