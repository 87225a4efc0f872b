// Command ringbench sends and receives VMBus channel packets through a ring
// file shared with another process, using this repository's vmbus ring code.
// It has the interface, file layout, packet format, payload pattern and
// result line of ringpeer (tools/ringpeer), a peer built on DPDK's VMBus ring
// code, so either end of a run can be ringbench or ringpeer.
package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"

	"vmbusd/vmbus"
)

const help = `ringbench: VMBus ring traffic through a shared file, on vmbusd's vmbus package.
Drop-in peer for ringpeer (DPDK's ring code): same file, packets, pattern, output.

usage: ringbench init FILE TOTAL_SIZE     create/zero FILE (TOTAL = 2 x ring size), set up both ring headers
       ringbench [opts] send FILE N SIZE  send N inband packets with SIZE-byte payloads, xactid = seq = 0..N-1
       ringbench [opts] recv FILE N       receive N packets, check header + payload, report errors
opts:  -r guest|host  guest (default) writes ring 1 (offset 0) and reads ring 2 (offset TOTAL/2);
                      host writes ring 2 and reads ring 1
       -c CPU         pin to CPU: LockOSThread + sched_setaffinity, and GOMAXPROCS=1 so the
                      Go runtime does not compete with the peer (default: float, default GOMAXPROCS)
       -w USEC        sleep USEC (nanosleep) when the ring is full/empty (default: spin with PAUSE);
                      a waiting sender then also sets pending_send_sz, as a driver about to sleep does
       -t SECS        exit 1 after SECS without progress (default 30)
       -x             stamp/check only the sequence word (ring cost only; BOTH sides must use it)
       -P             accepted for ringpeer compatibility; vmbus.InRing has one receive path
Sizes accept K/M/G suffixes (powers of 1024). SIZE must be a multiple of 8, from 8 to 524264.

Each ring is a 4096-byte header page (windex, rindex, imask, pending_send, feature_bits at 64)
and a data area. A packet is a 16-byte descriptor (type 6, hlen 2, tlen, flags 0, xactid), the
payload, and an 8-byte trailer. Payload word 0 = seq, word k = (seq+1)*0x9E3779B97F4A7C15 +
k*0xD1B54A32D192ED03. The sender writes up to 64 packets (or what fits) per Commit; the receiver
reads until the ring is empty (at most 64 packets) per Commit.

The last stdout line is
  result op=send|recv role=guest|host pkts= payload_bytes= secs= pps= MBps= signals= waits= errors=
MBps = payload bytes / 1e6 / secs. The receiver's clock runs from packet 0 to packet N-1, the
sender's from before packet 0 to after packet N-1. signals: sender = Commits that said to signal
the reader; receiver = Commits that said to signal the writer (pending_send_sz rule). waits:
sender = packets that found the ring full; receiver = times the ring was found empty. errors:
packets with a bad type, xactid != seq, zero length or a broken pattern (first 10 on stderr).
Exit status: 0 ok, 1 verification errors or timeout, 2 usage or setup error.
Env RINGBENCH_CPUPROFILE=FILE writes a pprof CPU profile of send/recv to FILE.
`

// options are the flags shared by send and recv.
type options struct {
	host    bool
	cpu     int
	waitUS  int
	timeout float64
	seqOnly bool // -x
	plain   bool // -P, accepted and ignored
}

func (o *options) role() string {
	if o.host {
		return "host"
	}
	return "guest"
}

func main() {
	o, args := parseOptions(os.Args[1:])
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		fatal("the payload code assumes a little-endian host")
	}
	if vmbus.DataOffset() != headerPage {
		fatal("vmbus uses a %d-byte ring header; ringpeer's layout needs 4096", vmbus.DataOffset())
	}
	switch {
	case len(args) == 3 && args[0] == "init":
		if err := initFile(args[1], parseNum(args[2])); err != nil {
			fatal("%v", err)
		}
	case len(args) == 4 && args[0] == "send":
		n, size := parseNum(args[2]), parseNum(args[3])
		if size < 8 || size%8 != 0 || size > maxPayload {
			fatal("SIZE must be a multiple of 8 in [8, 524264]")
		}
		outMem, _ := setup(o, args[1])
		if 16+size+8 >= uint64(len(outMem)-headerPage) {
			fatal("packet does not fit the ring")
		}
		out, err := vmbus.NewOutRing(outMem)
		if err != nil {
			fatal("%v", err)
		}
		stop := startProfile()
		r := send(o, out, n, size)
		stop()
		r.print()
	case len(args) == 3 && args[0] == "recv":
		n := parseNum(args[2])
		_, inMem := setup(o, args[1])
		in, err := vmbus.NewInRing(inMem, 0)
		if err != nil {
			fatal("%v", err)
		}
		stop := startProfile()
		r := recv(o, in, n)
		stop()
		r.print()
		if r.errors != 0 {
			os.Exit(1)
		}
	default:
		usage()
	}
}

// setup pins if asked and maps the ring file for o's role.
func setup(o *options, path string) (out, in []byte) {
	if o.cpu >= 0 {
		if err := pin(o.cpu); err != nil {
			fatal("cannot pin to CPU %d: %v", o.cpu, err)
		}
	}
	out, in, err := mapRings(path, o.host)
	if err != nil {
		fatal("%v", err)
	}
	fmt.Fprintf(os.Stderr, "ringbench: vmbusd vmbus (Go), %s, ring %d bytes per direction (data %d)\n",
		o.role(), len(out), len(out)-headerPage)
	return out, in
}

// startProfile starts a CPU profile when RINGBENCH_CPUPROFILE names a file
// and returns the function that ends it.
func startProfile() (stop func()) {
	path := os.Getenv("RINGBENCH_CPUPROFILE")
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		fatal("cpu profile: %v", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}

// parseOptions reads options like getopt("+r:c:w:t:xP"): clustered flags,
// values attached or separate, stop at the first non-option or "--".
func parseOptions(args []string) (*options, []string) {
	o := &options{cpu: -1, timeout: 30}
	for len(args) > 0 {
		a := args[0]
		if a == "--help" || a == "-help" {
			fmt.Print(help)
			os.Exit(0)
		}
		if a == "--" {
			return o, args[1:]
		}
		if len(a) < 2 || a[0] != '-' {
			break
		}
		args = args[1:]
		for j := 1; j < len(a); j++ {
			c := a[j]
			switch c {
			case 'x':
				o.seqOnly = true
				continue
			case 'P':
				o.plain = true
				continue
			case 'h':
				fmt.Print(help)
				os.Exit(0)
			case 'r', 'c', 'w', 't':
			default:
				usage()
			}
			val := a[j+1:]
			if val == "" {
				if len(args) == 0 {
					usage()
				}
				val, args = args[0], args[1:]
			}
			if !setOption(o, c, val) {
				usage()
			}
			break
		}
	}
	return o, args
}

func setOption(o *options, c byte, val string) bool {
	var err error
	switch c {
	case 'r':
		if val != "guest" && val != "host" {
			return false
		}
		o.host = val == "host"
	case 'c':
		o.cpu, err = strconv.Atoi(val)
	case 'w':
		o.waitUS, err = strconv.Atoi(val)
		err = nonNegative(o.waitUS, err)
	case 't':
		o.timeout, err = strconv.ParseFloat(val, 64)
	}
	return err == nil
}

func nonNegative(v int, err error) error {
	if err == nil && v < 0 {
		return strconv.ErrRange
	}
	return err
}

// parseNum parses a count or size: decimal, 0x hex or 0 octal, with an
// optional K, M or G suffix (powers of 1024).
func parseNum(s string) uint64 {
	orig, shift := s, 0
	if i := strings.IndexAny(s, "KMG"); i >= 0 && i == len(s)-1 {
		shift = 10 * (1 + strings.IndexByte("KMG", s[i]))
		s = s[:i]
	}
	v, err := strconv.ParseUint(s, 0, 64)
	if err != nil || v > ^uint64(0)>>shift {
		fatal("bad number '%s'", orig)
	}
	return v << shift
}

func usage() {
	fmt.Fprint(os.Stderr, help)
	os.Exit(2)
}

// fatal reports a usage or setup error and exits 2.
func fatal(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "ringbench: "+format+"\n", a...)
	os.Exit(2)
}
