package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime/pprof"

	"github.com/vmbusd/vmbusd/vmbus"
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
k*0xD1B54A32D192ED03 (generated into a buffer that Write copies into the ring; checked after Read
copies the packet out). Batching, as a driver does: the sender writes what fits, up to 64 packets
or 32 KiB, then Commits once; the receiver reads until the ring is empty, up to 64 packets or
32 KiB, then Commits once.

The last stdout line is
  result op=send|recv role=guest|host pkts= payload_bytes= secs= pps= MBps= signals= waits= errors=
MBps = payload bytes / 1e6 / secs. The receiver's clock runs from packet 0 to packet N-1, the
sender's from before packet 0 to after packet N-1. signals: sender = Commits that said to signal
the reader; receiver = Commits that said to signal the writer (pending_send_sz rule). waits:
sender = packets that found the ring full; receiver = times the ring was found empty. errors:
packets with a bad type, xactid != seq, zero length or a broken pattern (first 10 on stderr);
a packet vmbus.InRing.Read rejects as corrupt (unknown type, bad lengths) ends the run, exit 2.
Exit status: 0 ok, 1 verification errors or timeout, 2 usage or setup error.
Env RINGBENCH_CPUPROFILE=FILE writes a pprof CPU profile of send/recv to FILE.
`

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
		runSend(o, args[1], parseNum(args[2]), parseNum(args[3]))
	case len(args) == 3 && args[0] == "recv":
		runRecv(o, args[1], parseNum(args[2]))
	default:
		usage()
	}
}

func runSend(o *options, path string, n, size uint64) {
	if size < 8 || size%8 != 0 || size > maxPayload {
		fatal("SIZE must be a multiple of 8 in [8, 524264]")
	}
	mem, _ := setup(o, path)
	if 16+size+8 >= uint64(len(mem)-headerPage) {
		fatal("packet does not fit the ring")
	}
	out, err := vmbus.NewOutRing(mem)
	if err != nil {
		fatal("%v", err)
	}
	stop := startProfile()
	r := send(o, out, n, size)
	stop()
	r.print()
}

func runRecv(o *options, path string, n uint64) {
	_, mem := setup(o, path)
	in, err := vmbus.NewInRing(mem, 0)
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

func usage() {
	fmt.Fprint(os.Stderr, help)
	os.Exit(2)
}

// fatal reports a usage or setup error and exits 2.
func fatal(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "ringbench: "+format+"\n", a...)
	os.Exit(2)
}
