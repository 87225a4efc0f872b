package pcapng

import (
	"bytes"
	"encoding/binary"
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
