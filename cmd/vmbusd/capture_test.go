package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vmbusd/vmbusd/internal/pcapng"
)

// readCapture reads a pcapng file back with this repository's reader.
func readCapture(t *testing.T, path string) []pcapng.Packet {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var pkts []pcapng.Packet
	r := pcapng.NewReader(f)
	for {
		b, err := r.Next()
		if errors.Is(err, io.EOF) {
			return pkts
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if b.Type == pcapng.BlockEnhancedPacket {
			p, err := b.Packet()
			if err != nil {
				t.Fatal(err)
			}
			p.Data = bytes.Clone(p.Data)
			pkts = append(pkts, p)
		}
	}
}

// tsharkFields reads a capture with tshark, one line of tab-separated
// fields per frame; ok is false without tshark.
func tsharkFields(t *testing.T, path string, fields ...string) (lines []string, ok bool) {
	t.Helper()
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		return nil, false
	}
	args := []string{"-r", path, "-T", "fields"}
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	out, err := exec.Command(tshark, args...).Output()
	if err != nil {
		t.Fatalf("tshark %v: %v", args, err)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n"), true
}

var summaryLine = regexp.MustCompile(`(?m)^(\d+) packets captured, (\d+) received by filter, (\d+) dropped$`)

// captureRun runs vmbusd capture and checks its summary line: captured
// is want, received by filter at least that.
// A capture that never sees its count would wait for ever: it is cut
// off after a generous deadline, which fails the test.
func captureRun(t *testing.T, want int, args ...string) (stdout []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, vmbusdBin, args...)
	var outb, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &outb, &errb
	err := cmd.Run()
	errs := errb.String()
	if ctx.Err() != nil {
		t.Fatalf("vmbusd %s: no %d frames within the deadline\n%s", strings.Join(args, " "), want, errs)
	}
	if err != nil {
		t.Fatalf("vmbusd %s: %v\n%s%s", strings.Join(args, " "), err, outb.String(), errs)
	}
	m := summaryLine.FindStringSubmatch(errs)
	if m == nil {
		t.Fatalf("vmbusd %s: no summary line on stderr:\n%s", strings.Join(args, " "), errs)
	}
	captured, _ := strconv.Atoi(m[1])
	received, _ := strconv.Atoi(m[2])
	if captured != want || received < captured {
		t.Fatalf("summary %q: want %d captured, and at least as many received", m[0], want)
	}
	if !strings.Contains(errs, "listening on eth1") {
		t.Fatalf("no listening line:\n%s", errs)
	}
	return outb.Bytes()
}

// checkCapture runs tcpdump-style captures against a daemon whose eth1
// receives the simulated host's UDP flows (source ports 1024 to 1087, to
// port 9) and is attached to a TAP in the namespace ns.
func checkCapture(t *testing.T, d *daemonProc, root, ns string) {
	// A filter expression, with flags after it as GNU getopt allows.
	capFile := filepath.Join(root, "flow.pcapng")
	captureRun(t, 20, "capture", "udp", "and", "src", "port", "1030", "-c", "20", "-i", "eth1", "-w", capFile, "--control", d.control)
	pkts := readCapture(t, capFile)
	if len(pkts) != 20 {
		t.Fatalf("%d packets in the file, want 20", len(pkts))
	}
	for i, p := range pkts {
		if len(p.Data) < 42 || p.Data[23] != 17 || p.Data[34] != 1030>>8 || p.Data[35] != 1030&0xff || p.Dir != pcapng.DirIn {
			t.Fatalf("packet %d is not inbound UDP from port 1030: dir %d % x", i, p.Dir, p.Data[:min(len(p.Data), 42)])
		}
	}
	if lines, ok := tsharkFields(t, capFile, "frame.p2p_dir", "udp.srcport", "udp.dstport"); ok {
		for _, l := range lines {
			if l != "1\t1030\t9" {
				t.Fatalf("tshark read a frame the filter should have left out: %q\n%s", l, strings.Join(lines, "\n"))
			}
		}
		if len(lines) != 20 {
			t.Fatalf("tshark read %d frames", len(lines))
		}
	} else {
		t.Log("tshark not installed: capture read back by the repository's reader only")
	}

	// -Q in, the expression as one word, pcapng on standard output.
	inFile := filepath.Join(root, "in.pcapng")
	pcap := captureRun(t, 30, "capture", "udp and dst port 9", "--control", d.control, "-Q", "in", "-c", "30", "-w", "-")
	if err := os.WriteFile(inFile, pcap, 0o644); err != nil {
		t.Fatal(err)
	}
	if pkts := readCapture(t, inFile); len(pkts) != 30 {
		t.Fatalf("%d packets on standard output, want 30", len(pkts))
	}
	for i, p := range readCapture(t, inFile) {
		if p.Dir != pcapng.DirIn {
			t.Fatalf("packet %d of a -Q in capture has direction %d", i, p.Dir)
		}
	}

	// A queue the NIC does not have is refused by the daemon, at once.
	if _, errs, code := vmbusd(t, "capture", "--control", d.control, "--queue", "7", "-w", filepath.Join(root, "q.pcapng")); code != 1 || !strings.Contains(errs, "queue 7 is out of range") {
		t.Fatalf("--queue 7: exit %d, %s", code, errs)
	}

	// -Q out: what the guest sends (its ARP requests for an address
	// nobody has), none of the host's far more numerous frames.
	if _, err := exec.LookPath("ping"); err != nil {
		t.Log("ping not installed: -Q out not checked")
		return
	}
	ping := exec.Command("ip", "netns", "exec", ns, "ping", "-c", "600", "-i", "0.2", "10.98.0.77")
	if err := ping.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { ping.Process.Kill(); ping.Wait() }()
	outFile := filepath.Join(root, "out.pcapng")
	captureRun(t, 2, "capture", "--control", d.control, "-Q", "out", "-c", "2", "-w", outFile)
	for i, p := range readCapture(t, outFile) {
		if p.Dir != pcapng.DirOut {
			t.Fatalf("packet %d of a -Q out capture has direction %d", i, p.Dir)
		}
	}
	if lines, ok := tsharkFields(t, outFile, "frame.p2p_dir"); ok {
		if len(lines) != 2 || lines[0] != "0" || lines[1] != "0" { // p2p_dir: 0 sent, 1 received
			t.Fatalf("tshark read the outbound capture as:\n%s", strings.Join(lines, "\n"))
		}
	}
	arpFile := filepath.Join(root, "arp.pcapng")
	captureRun(t, 1, "capture", "--control", d.control, "-c", "1", "-w", arpFile, "arp", "and", "dst", "host", "10.98.0.77")
	if lines, ok := tsharkFields(t, arpFile, "frame.p2p_dir", "arp.dst.proto_ipv4"); ok && (len(lines) != 1 || lines[0] != "0\t10.98.0.77") {
		t.Fatalf("tshark read the ARP capture as:\n%s", strings.Join(lines, "\n"))
	}
}

// TestCaptureRefusesATerminal: pcapng is not written to a terminal.
func TestCaptureRefusesATerminal(t *testing.T) {
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	defer ptmx.Close()
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Skipf("unlock the pseudo-terminal: %v", err)
	}
	n, err := unix.IoctlGetUint32(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Skipf("pseudo-terminal number: %v", err)
	}
	tty, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("open the pseudo-terminal: %v", err)
	}
	defer tty.Close()
	cmd := exec.Command(vmbusdBin, "capture", "--control", filepath.Join(t.TempDir(), "x.sock"), "-i", "eth1")
	var errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = tty, &errb
	err = cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(errb.String(), "refusing to write binary pcapng to a terminal") {
		t.Fatalf("capture to a terminal: %v, stderr %q", err, errb.String())
	}
}
