package pcapng

import (
	"bytes"
	"encoding/binary"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// walk splits a stream into blocks, checking both length words.
func walk(t *testing.T, b []byte) (types []uint32, blocks [][]byte) {
	for len(b) > 0 {
		if len(b) < 12 {
			t.Fatalf("trailing %d bytes", len(b))
		}
		n := binary.LittleEndian.Uint32(b[4:])
		if n%4 != 0 || int(n) > len(b) || binary.LittleEndian.Uint32(b[n-4:]) != n {
			t.Fatalf("bad block length %d", n)
		}
		types = append(types, binary.LittleEndian.Uint32(b))
		blocks = append(blocks, b[:n])
		b = b[n:]
	}
	return
}

func TestBlocksAndOptions(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, "vmbusd test")
	if err != nil {
		t.Fatal(err)
	}
	id, _ := w.AddInterface("nic0", "netvsc test", 0)
	frame := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0x08, 0x00, 0xaa}
	if err := w.WritePacket(id, time.Unix(1, 5), DirOut, 3, frame, len(frame)); err != nil {
		t.Fatal(err)
	}
	if err := w.WritePacket(7, time.Now(), DirIn, 0, frame, len(frame)); err != ErrNoInterface {
		t.Fatalf("undeclared interface: %v", err)
	}
	types, blocks := walk(t, buf.Bytes())
	if len(types) != 3 || types[0] != blockSHB || types[1] != blockIDB || types[2] != blockEPB {
		t.Fatalf("blocks %x", types)
	}
	epb := blocks[2]
	if got := binary.LittleEndian.Uint32(epb[20:]); got != uint32(len(frame)) {
		t.Fatalf("captured length %d", got)
	}
	opts := epb[28+16 : len(epb)-4] // 15-byte frame padded to 16
	if binary.LittleEndian.Uint16(opts) != optEpbFlags || binary.LittleEndian.Uint32(opts[4:]) != uint32(DirOut) {
		t.Fatalf("epb_flags option % x", opts[:8])
	}
	if binary.LittleEndian.Uint16(opts[8:]) != optEpbQueue || binary.LittleEndian.Uint32(opts[12:]) != 3 {
		t.Fatalf("epb_queue option % x", opts[8:16])
	}
}

// TestTsharkReadsIt checks the stream with Wireshark's own reader, when
// tshark is installed (CI installs it).
func TestTsharkReadsIt(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark not installed")
	}
	path := filepath.Join(t.TempDir(), "x.pcapng")
	f, _ := os.Create(path)
	w, _ := NewWriter(f, "vmbusd test")
	id, _ := w.AddInterface("nic0", "", 0)
	frame := make([]byte, 60)
	copy(frame, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0x15, 0x5d, 1, 2, 3, 0x08, 0x06})
	w.WritePacket(id, time.Now(), DirIn, 1, frame, 60)
	w.WritePacket(id, time.Now(), DirOut, 0, frame, 60)
	f.Close()
	out, err := exec.Command(tshark, "-r", path, "-T", "fields", "-e", "frame.interface_name",
		"-e", "frame.p2p_dir", "-e", "frame.len", "-e", "eth.src").Output()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, out)
	}
	// frame.p2p_dir: 1 received (host to guest), 0 sent.
	want := "nic0\t1\t60\t00:15:5d:01:02:03\nnic0\t0\t60\t00:15:5d:01:02:03"
	if got := strings.TrimSpace(string(out)); got != want {
		t.Fatalf("tshark read:\n%s\nwant:\n%s", got, want)
	}
}

func BenchmarkWritePacket(b *testing.B) {
	w, _ := NewWriter(discard{}, "bench")
	id, _ := w.AddInterface("nic0", "", 0)
	frame := make([]byte, 1514)
	ts := time.Now()
	b.ReportAllocs()
	b.SetBytes(1514)
	for i := 0; i < b.N; i++ {
		w.WritePacket(id, ts, DirIn, 0, frame, 1514)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func TestStatsBlock(t *testing.T) {
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, "vmbusd test")
	id, _ := w.AddInterface("nic0", "", 0)
	if err := w.WriteStats(id, time.Unix(2, 7), Stats{Received: 10, Accepted: 4, Dropped: 1}); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteStats(3, time.Now(), Stats{}); err != ErrNoInterface {
		t.Fatalf("undeclared interface: %v", err)
	}
	types, blocks := walk(t, buf.Bytes())
	if len(types) != 3 || types[2] != blockISB {
		t.Fatalf("blocks %x", types)
	}
	isb := blocks[2]
	got := map[uint16]uint64{}
	for o := isb[20 : len(isb)-4]; len(o) >= 4; {
		code, n := binary.LittleEndian.Uint16(o), int(binary.LittleEndian.Uint16(o[2:]))
		if code == optEnd {
			break
		}
		if n == 8 && code != optIsbEndTime {
			got[code] = binary.LittleEndian.Uint64(o[4:])
		}
		o = o[4+(n+3)&^3:]
	}
	if got[optIsbIfRecv] != 10 || got[optIsbFilterAccept] != 4 || got[optIsbIfDrop] != 1 {
		t.Fatalf("options %v", got)
	}
}

// TestCapinfosReadsTheStats checks that Wireshark's capinfos, when it is
// installed, parses the statistics block.
func TestCapinfosReadsTheStats(t *testing.T) {
	capinfos, err := exec.LookPath("capinfos")
	if err != nil {
		t.Skip("capinfos not installed")
	}
	path := filepath.Join(t.TempDir(), "x.pcapng")
	f, _ := os.Create(path)
	w, _ := NewWriter(f, "vmbusd test")
	id, _ := w.AddInterface("nic0", "", 0)
	w.WritePacket(id, time.Now(), DirIn, 0, make([]byte, 60), 60)
	w.WriteStats(id, time.Now(), Stats{Received: 9, Accepted: 3, Dropped: 2})
	f.Close()
	out, err := exec.Command(capinfos, path).CombinedOutput()
	if err != nil {
		t.Fatalf("capinfos: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "Number of packets:   1") && !strings.Contains(string(out), "Number of packets = 1") {
		t.Fatalf("capinfos:\n%s", out)
	}
	// capinfos counts the statistics blocks it parsed; newer versions
	// also print their values (TestStatsBlock checks those).
	if !strings.Contains(string(out), "Number of stat entries = 1") {
		t.Fatalf("capinfos did not parse the statistics block:\n%s", out)
	}
	if strings.Contains(string(out), "ifdrop") && !strings.Contains(string(out), "ifdrop = 2") {
		t.Fatalf("capinfos shows the wrong ifdrop:\n%s", out)
	}
}

// TestReaderRoundTrip reads back what Writer wrote.
func TestReaderRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, "vmbusd test")
	id, _ := w.AddInterface("eth1", "desc", 128)
	frames := [][]byte{{1, 2, 3}, bytes.Repeat([]byte{7}, 61), {}}
	for i, f := range frames {
		w.WritePacket(id, time.Unix(5, int64(i)), Direction(1+i%2), i, f, len(f)+i)
	}
	w.WriteStats(id, time.Unix(9, 0), Stats{Received: 7, Accepted: 3, Dropped: 1})
	r := NewReader(&buf)
	var got []Packet
	var st Stats
	for {
		b, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch b.Type {
		case BlockInterface:
			if name, err := b.InterfaceName(); err != nil || name != "eth1" {
				t.Fatalf("if_name %q, %v", name, err)
			}
		case BlockEnhancedPacket:
			p, err := b.Packet()
			if err != nil {
				t.Fatal(err)
			}
			p.Data = bytes.Clone(p.Data)
			got = append(got, p)
		case BlockInterfaceStats:
			if _, st, err = b.Stats(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(got) != len(frames) || st != (Stats{Received: 7, Accepted: 3, Dropped: 1}) {
		t.Fatalf("read %d packets, stats %+v", len(got), st)
	}
	for i, p := range got {
		if !bytes.Equal(p.Data, frames[i]) || p.OrigLen != len(frames[i])+i || p.Queue != i ||
			p.Dir != Direction(1+i%2) || !p.Time.Equal(time.Unix(5, int64(i))) {
			t.Errorf("packet %d: %+v", i, p)
		}
	}
}

func TestReaderRejectsBadStreams(t *testing.T) {
	var good bytes.Buffer
	w, _ := NewWriter(&good, "x")
	w.AddInterface("eth1", "", 0)
	g := good.Bytes()
	bad := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(g)) }
	for name, stream := range map[string][]byte{
		"big-endian section": bad(func(b []byte) []byte { binary.BigEndian.PutUint32(b[8:], 0x1A2B3C4D); return b }),
		"trailing length":    bad(func(b []byte) []byte { b[len(b)-1] = 9; return b }),
		"odd length":         bad(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[4:], 30); return b }),
		"huge length":        bad(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[4:], 1<<30); return b }),
		"cut short":          g[:len(g)-3],
	} {
		r := NewReader(bytes.NewReader(stream))
		var err error
		for err == nil {
			_, err = r.Next()
		}
		if err == io.EOF {
			t.Errorf("%s: read to the end without an error", name)
		}
	}
}

func FuzzReader(f *testing.F) {
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, "vmbusd fuzz")
	id, _ := w.AddInterface("eth1", "", 0)
	w.WritePacket(id, time.Unix(1, 0), DirIn, 1, []byte{1, 2, 3, 4, 5}, 9)
	w.WriteStats(id, time.Unix(2, 0), Stats{Received: 1})
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewReader(bytes.NewReader(data))
		for range 64 {
			b, err := r.Next()
			if err != nil {
				return
			}
			if p, err := b.Packet(); err == nil && len(p.Data) > len(b.Raw) {
				t.Fatalf("packet data %d bytes from a %d-byte block", len(p.Data), len(b.Raw))
			}
			b.Stats()
			b.InterfaceName()
		}
	})
}
