package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"runtime/pprof"
	"runtime/trace"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/vmbusd/vmbusd/frame"
	"github.com/vmbusd/vmbusd/hoptrace"
	"github.com/vmbusd/vmbusd/netvsc"
	"github.com/vmbusd/vmbusd/nictap"
	"github.com/vmbusd/vmbusd/sim"
	"github.com/vmbusd/vmbusd/tap"
	"github.com/vmbusd/vmbusd/vmbus"
)

var (
	dur       = flag.Duration("dur", 3*time.Second, "measurement time per point")
	asJSON    = flag.Bool("json", false, "print results as JSON lines")
	queues    = flag.Int("queues", 1, "queues for the rate test")
	txRx      = flag.Bool("rx", true, "txonly: run a receive loop (RxBurst/Wait) per queue; false: none, as testpmd's txonly polls no receive queue (TxBurst and WaitTx reap the host's completions themselves)")
	workers   = flag.Int("workers", 0, "txonly: goroutines transmitting, each serving its share of the queues (0: one per queue; 1: one for all, like testpmd with one forwarding lcore)")
	cpuProf   = flag.String("cpuprofile", "", "write a CPU profile of the guest side")
	traceOut  = flag.String("trace", "", "write an execution trace of the guest side (go tool trace: scheduler latency)")
	hostTrace = flag.String("hosttrace", "", "tapveth, latency, rate: write an execution trace of the simulated host's process")
	hostProf  = flag.String("hostprofile", "", "tapveth, latency, rate: write a CPU profile of the simulated host's process")
	modes     = flag.String("modes", "hybrid,interrupt,poll", "wait modes for the rate and idle tests")
	monLat    = flag.Duration("monitor-latency", 0, "host monitor-page scan latency the guest asks for (0: netvsc's 50 µs)")
	reps      = flag.Int("reps", 3, "repetitions per sweep point (the median is reported)")
	gso       = flag.Bool("gso", false, "tapveth: same as -offloads=true (kept for older scripts)")
	offl      = flag.Bool("offloads", true, "tapveth: virtio-net headers with checksum and segmentation offloads on the guest's TAP and the host's TAP port")
	rscOn     = flag.Bool("rsc", true, "tapveth: with offloads, ask the host for receive segment coalescing (netvsc.Config.RSC)")
	gpaPool   = flag.Bool("gpa", true, "tapveth: give the guest NIC a GPA pool in the simulated guest memory, so large sends go GPA-direct (as the daemon does by default; false: copied into send sections)")
	verbose   = flag.Bool("v", false, "tapveth: print drop counters of every layer to stderr after each point; rate: the queues' transmit counters")
	tcpTool   = flag.String("tcp", "auto", "tapveth: TCP load: iperf3, go (in-process sockets), or auto (iperf3 when installed)")
	hold      = flag.Bool("hold", false, "tapveth: set both paths up, print the namespaces and addresses, and wait for SIGINT instead of measuring")
	rxStage   = flag.Int("rxstage", 0, "tapveth: the guest NIC's RxStage, and twice that many pool packets (0: netvsc's defaults)")
	simRoot   = flag.String("root", "", "txonly: drive the first NIC of a host already serving this root (e.g. vmbusd sim --port sink) instead of starting one")
	hostPID   = flag.Int("host-pid", 0, "txonly with -root: the host's pid, to report its CPU")
	txSize    = flag.Int("size", 64, "txonly: frame size in bytes")
	pollSpin  = flag.Duration("poll-budget", 0, "latency: the hybrid NIC's poll budget after the last packet (0: netvsc's 50 µs)")
	rounds    = flag.Int("rounds", 3000, "latency: measured round trips per point")
	ratePts   = flag.String("points", "rx/64,rx/1514,tx/64,tx/1514", "rate: the direction/frame-size points to measure")
	ratePairs = flag.Int("pairs", 1, "rate: measurements of each wait mode per point, back to back, the modes' order reversed every other time (A B B A ...)")
	busyPolls = flag.String("busy-poll", "0", "latency: the NIC's busy-poll budgets to measure each wait mode with (comma-separated durations; 0: off)")
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "host" {
		if err := runHost(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "netbench host:", err)
			os.Exit(1)
		}
		return
	}
	flag.Parse()
	if *cpuProf != "" {
		f, err := os.Create(*cpuProf)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	if *traceOut != "" {
		f, err := os.Create(*traceOut)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		trace.Start(f)
		defer trace.Stop()
	}
	tests := flag.Args()
	if len(tests) == 0 || tests[0] == "all" {
		tests = []string{"rate", "idle", "sweep", "tapveth"}
	}
	for _, t := range tests {
		var err error
		switch t {
		case "rate":
			err = testRate()
		case "idle":
			err = testIdle()
		case "sweep":
			err = testSweep()
		case "tapveth":
			err = testTapVeth()
		case "txonly":
			err = testTxOnly()
		case "latency":
			err = testLatency()
		default:
			err = fmt.Errorf("unknown test %q (rate, idle, sweep, tapveth, txonly, latency, all)", t)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "netbench:", t+":", err)
			pprof.StopCPUProfile()
			os.Exit(1)
		}
	}
}

func emit(kv map[string]any, order ...string) {
	if *asJSON {
		b, _ := json.Marshal(kv)
		fmt.Println(string(b))
		return
	}
	var parts []string
	for _, k := range order {
		v := kv[k]
		if f, ok := v.(float64); ok {
			v = strconv.FormatFloat(f, 'g', 4, 64)
		}
		parts = append(parts, fmt.Sprintf("%s=%v", k, v))
	}
	fmt.Println(strings.Join(parts, " "))
}

func modeList() []netvsc.Mode {
	var ms []netvsc.Mode
	for _, s := range strings.Split(*modes, ",") {
		m, err := netvsc.ParseMode(strings.TrimSpace(s))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		ms = append(ms, m)
	}
	return ms
}

// host is a simulated host in a child process.
type host struct {
	cmd      *exec.Cmd
	root     string
	instance vmbus.GUID
	out      *bufio.Reader
}

// startHost runs "netbench host" with args under a fresh root.
func startHost(args ...string) (*host, error) {
	root, err := os.MkdirTemp("/dev/shm", "netbench")
	if err != nil {
		return nil, err
	}
	exe, _ := os.Executable()
	cmd := exec.Command(exe, append([]string{"host", "-root", root}, args...)...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	h := &host{cmd: cmd, root: root, out: bufio.NewReader(stdout)}
	line, err := h.out.ReadString('\n')
	if err != nil {
		h.stop()
		return nil, fmt.Errorf("host did not start: %v", err)
	}
	f := strings.Fields(line)
	if len(f) != 2 || f[0] != "READY" {
		h.stop()
		return nil, fmt.Errorf("host said %q", line)
	}
	if h.instance, err = vmbus.ParseGUID(f[1]); err != nil {
		h.stop()
		return nil, err
	}
	return h, nil
}

// cpu returns the child's CPU seconds so far.
func (h *host) cpu() float64 { return procCPU(h.cmd.Process.Pid) }

func (h *host) stop() map[string]uint64 {
	h.cmd.Process.Signal(syscall.SIGTERM)
	var st map[string]uint64
	if h.out != nil {
		if line, err := h.out.ReadString('\n'); err == nil {
			json.Unmarshal([]byte(line), &st)
		}
	}
	h.cmd.Wait()
	os.RemoveAll(h.root)
	return st
}

func (h *host) open(cfg netvsc.Config) (*netvsc.NIC, error) {
	dev, err := vmbus.LookupDevice(h.root, h.instance)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return netvsc.Open(ctx, dev, cfg)
}

func procCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.ParseFloat(f[11], 64)
	k, _ := strconv.ParseFloat(f[12], 64)
	return (u + k) / 100 // USER_HZ
}

// machineCPU returns the CPU seconds every CPU of the machine spent busy
// so far (/proc/stat: all but idle and iowait), 0 if unreadable. Less
// this process's and the host's over a window, it is what the rest of
// the machine (other processes, the kernel's own threads) took.
func machineCPU() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	var busy float64
	for i, v := range f[1:9] { // user nice system idle iowait irq softirq steal
		if i == 3 || i == 4 {
			continue
		}
		n, _ := strconv.ParseFloat(v, 64)
		busy += n
	}
	return busy / 100 // USER_HZ
}

func selfCPU() float64 {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}

func runHost(args []string) error {
	fs := flag.NewFlagSet("host", flag.ExitOnError)
	root := fs.String("root", "", "root")
	port := fs.String("port", "sink", "gen, sink, tap")
	size := fs.Int("size", 64, "generator frame size")
	flows := fs.Int("flows", 1, "generator flows")
	maxq := fs.Int("maxq", 8, "max queues")
	ns := fs.String("netns", "", "tap port namespace")
	addr := fs.String("addr", "", "tap port address")
	offloads := fs.Bool("offloads", true, "tap port: virtio-net header and offloads")
	prof := fs.String("cpuprofile", "", "write a CPU profile of the host")
	traceOut := fs.String("trace", "", "write an execution trace of the host")
	stampFile := fs.String("stamps", "", "stamp the host's hops of traced round trips into this hoptrace page")
	fs.Parse(args)
	var stamps *hoptrace.Stamps
	if *stampFile != "" {
		var err error
		if stamps, err = hoptrace.Open(*stampFile); err != nil {
			return err
		}
		defer stamps.Close()
	}
	if *traceOut != "" {
		f, err := os.Create(*traceOut)
		if err != nil {
			return err
		}
		trace.Start(f)
		defer trace.Stop()
	}
	if *prof != "" {
		f, err := os.Create(*prof)
		if err != nil {
			return err
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	h, err := sim.New(sim.Config{Root: *root, Profile: sim.DefaultProfile, Stamps: stamps})
	if err != nil {
		return err
	}
	defer h.Close()
	sn, err := h.AddNIC(sim.NICConfig{MaxQueues: *maxq, QueueLen: 4096})
	if err != nil {
		return err
	}
	var gen *sim.Generator
	var p sim.Port
	switch *port {
	case "gen":
		gen = sim.NewGenerator(sim.GeneratorConfig{Sizes: []int{*size}, Flows: *flows, Batch: 64})
		p = gen
	case "sink":
		gen = sim.NewGenerator(sim.GeneratorConfig{Idle: true})
		p = gen
	case "tap":
		pfx, err := netip.ParsePrefix(*addr)
		if err != nil {
			return err
		}
		t, err := sim.NewTAP(sim.TAPConfig{Netns: *ns, Name: "hv0", Addr: pfx, NoOffloads: !*offloads, Stamps: stamps})
		if err != nil {
			return err
		}
		p = t
	default:
		return fmt.Errorf("port %q", *port)
	}
	if err := sn.Attach(p); err != nil {
		return err
	}
	fmt.Printf("READY %s\n", sn.Device().Instance())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	st := map[string]uint64{}
	if gen != nil {
		gs := gen.Stats()
		st["sent"], st["accepted"], st["received"] = gs.Sent, gs.Accepted, gs.Received
	}
	ns2 := sn.Stats()
	st["host_rx_dropped"], st["host_missed_wakeups"] = ns2.RxDropped, ns2.MissedWakeups
	st["host_rx_too_big"], st["host_tx_dropped"], st["host_tx_packets"], st["host_rx_packets"] = ns2.RxTooBig, ns2.TxDropped, ns2.TxPackets, ns2.RxPackets
	if t, ok := p.(*sim.TAP); ok {
		st["port_rx_dropped"] = t.RxDropped()
		_, _, st["port_tx_errors"] = t.Stats()
	}
	b, _ := json.Marshal(st)
	fmt.Println(string(b))
	return nil
}

// rxLoop receives on every queue until stop, counting frames.
func rxLoop(ctx context.Context, n *netvsc.NIC, count *atomic.Uint64) *sync.WaitGroup {
	var wg sync.WaitGroup
	for _, q := range n.Queues() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pkts := make([]*frame.Packet, 64)
			for ctx.Err() == nil {
				k := q.RxBurst(pkts)
				if k == 0 {
					if q.Wait(ctx) != nil {
						return
					}
					continue
				}
				count.Add(uint64(k))
				frame.PutBurst(pkts[:k])
			}
		}()
	}
	return &wg
}

// txTemplate is the frame the transmit tests send: to a peer MAC the
// simulated host's vSwitch does not know, from the NIC's own, IPv4.
func txTemplate(n *netvsc.NIC, size int) []byte {
	tmpl := make([]byte, size)
	copy(tmpl, []byte{0x02, 0, 0, 0, 0, 9})
	copy(tmpl[6:], n.MAC())
	tmpl[12], tmpl[13] = 0x08, 0x00
	tmpl[14] = 0x45
	return tmpl
}

// txLoop sends frames of size on queue q until ctx ends; burst/pause make
// the load bursty (0: continuous).
func txLoop(ctx context.Context, n *netvsc.NIC, q *netvsc.Queue, size, burst int, pause time.Duration, count *atomic.Uint64) {
	tmpl := txTemplate(n, size)
	pkts := make([]*frame.Packet, 32)
	inBurst := 0
	for ctx.Err() == nil {
		k := q.AllocBurst(pkts)
		for _, p := range pkts[:k] {
			copy(p.SetLen(size), tmpl)
		}
		m := q.TxBurst(pkts[:k])
		frame.PutBurst(pkts[m:k])
		count.Add(uint64(m))
		if m < k || k == 0 {
			q.WaitTx(ctx)
		}
		inBurst += m
		if burst > 0 && inBurst >= burst {
			inBurst = 0
			time.Sleep(pause)
		}
	}
}

func testRate() error {
	// The first measurement in this process came out about 12 % slower
	// than the rest, whichever mode it was (not a GC: none runs during
	// it); it is made once more and the first one is not reported.
	warmedUp := false
	var ms []netvsc.Mode // the rate test compares the polling modes only
	for _, mode := range modeList() {
		if mode != netvsc.Interrupt {
			ms = append(ms, mode)
		}
	}
	for _, pt := range strings.Split(*ratePts, ",") {
		dir, sz, _ := strings.Cut(strings.TrimSpace(pt), "/")
		size, err := strconv.Atoi(sz)
		if (dir != "rx" && dir != "tx") || err != nil || size < 60 {
			return fmt.Errorf("rate point %q: want rx/<size> or tx/<size>", pt)
		}
		// A point's measurements run back to back and in the order
		// A B B A A B ...: the machine drifts over seconds, and this way
		// neither mode always meets it as the other left it.
		for r := range max(*ratePairs, 1) {
			for i := range ms {
				mode := ms[i]
				if r%2 == 1 {
					mode = ms[len(ms)-1-i]
				}
				if !warmedUp {
					warmedUp = true
					if err := ratePoint(dir, size, mode, false); err != nil {
						return err
					}
				}
				if err := ratePoint(dir, size, mode, true); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// ratePoint measures one direction, frame size and wait mode with a host
// of its own, and prints the record when report is set.
func ratePoint(dir string, size int, mode netvsc.Mode, report bool) error {
	port := "sink"
	if dir == "rx" {
		port = "gen"
	}
	xBefore := xcoreRTT()
	h, err := startHost("-port", port, "-size", strconv.Itoa(size), "-flows", "64",
		"-cpuprofile", *hostProf, "-trace", *hostTrace)
	if err != nil {
		return err
	}
	n, err := h.open(netvsc.Config{Mode: mode, Queues: *queues, PoolPackets: 8192, RxStage: 2048})
	if err != nil {
		h.stop()
		return err
	}
	var count atomic.Uint64
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	// The receive loops read the rings until they see ctx end: they are
	// waited for before Close unmaps them.
	var rxWG *sync.WaitGroup
	if dir == "rx" {
		rxWG = rxLoop(ctx, n, &count)
	} else {
		var rxc atomic.Uint64
		rxWG = rxLoop(ctx, n, &rxc)
		for _, q := range n.Queues() {
			wg.Add(1)
			go func() { defer wg.Done(); txLoop(ctx, n, q, size, 0, 0, &count) }()
		}
	}
	time.Sleep(300 * time.Millisecond) // warm up
	c0, hc0, p0, m0 := selfCPU(), h.cpu(), count.Load(), machineCPU()
	s0 := n.Stats()
	start := time.Now()
	time.Sleep(*dur)
	el := time.Since(start).Seconds()
	c1, hc1, p1, m1 := selfCPU(), h.cpu(), count.Load(), machineCPU()
	s1 := n.Stats()
	cancel()
	wg.Wait()
	rxWG.Wait()
	n.Close()
	hs := h.stop()
	xAfter := xcoreRTT()
	pk := float64(p1 - p0)
	if !report {
		return nil
	}
	if *verbose {
		for i := range s1.Queues {
			a, b := s1.Queues[i], s0.Queues[i]
			fmt.Fprintf(os.Stderr, "queue %d: sections %d completions %d stop_queue %d no_space %d busy %d wakeups rx %d idle_waits %d signals tx %d rx %d; host %v\n",
				i, a.TxSections-b.TxSections, a.TxCompletions-b.TxCompletions, a.StopQueue-b.StopQueue, a.TxNoSpace-b.TxNoSpace, a.TxBusy-b.TxBusy,
				a.Channel.Wakeups-b.Channel.Wakeups, a.Channel.IdleWaits-b.Channel.IdleWaits, a.Channel.TxSignals-b.Channel.TxSignals, a.Channel.RxSignals-b.Channel.RxSignals, hs)
			w, v := a.Waits, b.Waits
			fmt.Fprintf(os.Stderr, "queue %d waits: rx polls %d (load %d) sleeps %d (owed %d) wakeups %d kicked %d; tx polls %d sleeps %d wakeups %d blocked %d (timeouts %d)\n",
				i, w.RxPolls-v.RxPolls, w.RxLoadPolls-v.RxLoadPolls, w.RxSleeps-v.RxSleeps, w.RxSleepsOwed-v.RxSleepsOwed, w.RxWakeups-v.RxWakeups, w.RxKicked-v.RxKicked,
				w.TxPolls-v.TxPolls, w.TxSleeps-v.TxSleeps, w.TxWakeups-v.TxWakeups, w.TxBlocked-v.TxBlocked, w.TxBlockedTimeouts-v.TxBlockedTimeouts)
		}
	}
	var sig, wake, sleeps uint64
	var poll, slept float64
	for i := range s1.Queues {
		a, b := s1.Queues[i].Channel, s0.Queues[i].Channel
		sig += a.TxSignals + a.RxSignals - b.TxSignals - b.RxSignals
		wake += a.Wakeups - b.Wakeups
		sleeps += a.IdleWaits - b.IdleWaits
		poll += s1.Queues[i].PollSeconds - s0.Queues[i].PollSeconds
		slept += s1.Queues[i].SleepSeconds - s0.Queues[i].SleepSeconds
	}
	// The generator's refusals (frames its NIC's queue had no room for,
	// each batch of them followed by a short back-off) say how often the
	// guest held the host up, over the host's whole life.
	var refused float64
	if hs["sent"] > 0 {
		refused = float64(hs["sent"]-hs["accepted"]) / float64(hs["sent"])
	}
	emit(map[string]any{"test": "rate", "dir": dir, "size": size, "mode": mode.String(), "queues": len(s1.Queues),
		"pps": pk / el, "gbps": pk * float64(size) * 8 / el / 1e9,
		"guest_cpu": (c1 - c0) / el, "guest_cpu_s_per_mpkt": (c1 - c0) / (pk / 1e6),
		"host_cpu": (hc1 - hc0) / el, "signals_per_pkt": float64(sig) / pk, "wakeups_per_pkt": float64(wake) / pk,
		"sleeps_per_s": float64(sleeps) / el, "poll_share": poll / el, "sleep_share": slept / el, "gen_refused": refused,
		"xcore_ns_before": xBefore, "xcore_ns_after": xAfter, "other_cpu": max(0, (m1-m0-(c1-c0)-(hc1-hc0))/el)},
		"test", "dir", "size", "mode", "queues", "pps", "gbps", "guest_cpu", "guest_cpu_s_per_mpkt", "host_cpu", "signals_per_pkt", "wakeups_per_pkt",
		"sleeps_per_s", "poll_share", "sleep_share", "gen_refused", "xcore_ns_before", "xcore_ns_after", "other_cpu")
	return nil
}

// testIdle measures the CPU of an opened NIC whose queues sit in their
// receive loop with no traffic, per wait mode.
func testIdle() error {
	for _, mode := range modeList() {
		h, err := startHost("-port", "sink")
		if err != nil {
			return err
		}
		n, err := h.open(netvsc.Config{Mode: mode, Queues: 2})
		if err != nil {
			h.stop()
			return err
		}
		var count atomic.Uint64
		ctx, cancel := context.WithCancel(context.Background())
		wg := rxLoop(ctx, n, &count)
		time.Sleep(200 * time.Millisecond)
		c0, hc0, s0 := selfCPU(), h.cpu(), n.Stats()
		start := time.Now()
		time.Sleep(*dur)
		el := time.Since(start).Seconds()
		c1, hc1, s1 := selfCPU(), h.cpu(), n.Stats()
		cancel()
		wg.Wait()
		n.Close()
		h.stop()
		var wake uint64
		for i := range s1.Queues {
			wake += s1.Queues[i].Channel.Wakeups - s0.Queues[i].Channel.Wakeups
		}
		emit(map[string]any{"test": "idle", "mode": mode.String(), "queues": len(s1.Queues),
			"guest_cpu": (c1 - c0) / el, "host_cpu": (hc1 - hc0) / el, "wakeups_per_s": float64(wake) / el},
			"test", "mode", "queues", "guest_cpu", "host_cpu", "wakeups_per_s")
	}
	return nil
}

// testSweep: transmit throughput under bursty load with 1..16 MiB of the
// send buffer usable (the seed's claim: more helps up to 16 MB).
func testSweep() error {
	for _, size := range []int{64, 1514} {
		for _, mib := range []int{1, 2, 4, 8, 16} {
			var pts []map[string]any
			for r := 0; r < max(*reps, 1); r++ {
				p, err := sweepPoint(size, mib)
				if err != nil {
					return err
				}
				pts = append(pts, p)
			}
			sort.Slice(pts, func(i, j int) bool { return pts[i]["pps"].(float64) < pts[j]["pps"].(float64) })
			m := pts[len(pts)/2]
			m["reps"] = len(pts)
			m["pps_min"], m["pps_max"] = pts[0]["pps"], pts[len(pts)-1]["pps"]
			emit(m, "test", "size", "sendbuf_mib", "sections", "reps", "pps", "pps_min", "pps_max", "gbps",
				"guest_cpu_s_per_mpkt", "stops_per_kpkt", "no_section_per_kpkt")
		}
	}
	return nil
}

// sweepPoint: bursts of 8192 frames as fast as TxBurst takes them, 500 µs
// apart, with mib MiB of the send buffer usable.
func sweepPoint(size, mib int) (map[string]any, error) {
	h, err := startHost("-port", "sink")
	if err != nil {
		return nil, err
	}
	n, err := h.open(netvsc.Config{SendBufferLimit: mib << 20, PoolPackets: 8192})
	if err != nil {
		h.stop()
		return nil, err
	}
	var count, rxc atomic.Uint64
	ctx, cancel := context.WithCancel(context.Background())
	wg := rxLoop(ctx, n, &rxc)
	q := n.Queues()[0]
	done := make(chan struct{})
	go func() { txLoop(ctx, n, q, size, 8192, 500*time.Microsecond, &count); close(done) }()
	time.Sleep(200 * time.Millisecond)
	c0, p0, s0 := selfCPU(), count.Load(), q.Stats()
	start := time.Now()
	time.Sleep(*dur)
	el := time.Since(start).Seconds()
	c1, p1, s1 := selfCPU(), count.Load(), q.Stats()
	cancel()
	<-done
	wg.Wait()
	_, sections := n.SendSections()
	n.Close()
	h.stop()
	pk := float64(p1 - p0)
	return map[string]any{"test": "sweep", "size": size, "sendbuf_mib": mib, "sections": sections,
		"pps": pk / el, "gbps": pk * float64(size) * 8 / el / 1e9, "guest_cpu_s_per_mpkt": (c1 - c0) / (pk / 1e6),
		"stops_per_kpkt": float64(s1.StopQueue-s0.StopQueue) / (pk / 1e3), "no_section_per_kpkt": float64(s1.TxNoSpace-s0.TxNoSpace) / (pk / 1e3)}, nil
}

// testTapVeth: TCP throughput (both directions) and round trips between
// two network namespaces, once through the simulated host and vmbusd's
// TAP attachment, once through a veth pair (the kernel's own path), in the
// same run. TCP comes from iperf3 when it is installed (-tcp), otherwise
// from sockets in this process; the round trips are a 1-byte TCP
// request/response (rr_us) and ICMP echo (ping_us, when ping is installed).
func testTapVeth() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root")
	}
	tool := *tcpTool
	if tool == "auto" {
		tool = "go"
		if _, err := exec.LookPath("iperf3"); err == nil {
			tool = "iperf3"
		}
	}
	if tool != "go" && tool != "iperf3" {
		return fmt.Errorf("-tcp %q: want iperf3, go or auto", tool)
	}
	offloads := *offl || *gso
	id := strconv.Itoa(os.Getpid() % 100000)
	hns, gns := "nbh"+id, "nbg"+id
	for _, ns := range []string{hns, gns} {
		if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
			return fmt.Errorf("ip netns add: %v %s", err, out)
		}
		defer exec.Command("ip", "netns", "del", ns).Run()
		tap.InNetns(ns, func() error {
			if lo, err := netlink.LinkByName("lo"); err == nil {
				netlink.LinkSetUp(lo)
			}
			return nil
		})
	}
	// vmbusd path.
	h, err := startHost("-port", "tap", "-netns", hns, "-addr", "10.88.0.1/24", "-maxq", "2",
		"-offloads="+strconv.FormatBool(offloads), "-cpuprofile", *hostProf, "-trace", *hostTrace)
	if err != nil {
		return err
	}
	defer func() {
		if st := h.stop(); *verbose {
			fmt.Fprintf(os.Stderr, "host: %v\n", st)
		}
	}()
	cfg := netvsc.Config{Queues: 2, Mode: modeList()[0], MonitorLatency: *monLat, RxStage: *rxStage, PoolPackets: 2 * *rxStage,
		RSC: offloads && *rscOn}
	if *gpaPool {
		g, err := netvsc.OpenSimGPAPool(h.root, 0, 64<<20)
		if err != nil {
			return err
		}
		defer g.Close()
		cfg.GPAPool = g
	}
	n, err := h.open(cfg)
	if err != nil {
		return err
	}
	defer n.Close()
	dev, err := tap.Create(tap.Config{Name: "vmbusd0", Queues: len(n.Queues()), MAC: n.MAC(), MTU: n.MTU(), Netns: gns,
		Addr: netip.MustParsePrefix("10.88.0.2/24"), NoOffloads: !offloads})
	if err != nil {
		return err
	}
	defer dev.Close()
	att, err := nictap.Attach(n, dev, nictap.Options{})
	if err != nil {
		return err
	}
	defer att.Close()
	// veth path between the same namespaces.
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "nbva" + id}, PeerName: "nbvb" + id}
	if err := netlink.LinkAdd(veth); err != nil {
		return err
	}
	defer netlink.LinkDel(veth)
	for _, x := range []struct{ name, ns, addr string }{{"nbva" + id, hns, "10.89.0.1/24"}, {"nbvb" + id, gns, "10.89.0.2/24"}} {
		if out, err := exec.Command("ip", "link", "set", x.name, "netns", x.ns).CombinedOutput(); err != nil {
			return fmt.Errorf("%v %s", err, out)
		}
		if out, err := exec.Command("ip", "-n", x.ns, "addr", "add", x.addr, "dev", x.name).CombinedOutput(); err != nil {
			return fmt.Errorf("%v %s", err, out)
		}
		if out, err := exec.Command("ip", "-n", x.ns, "link", "set", x.name, "up").CombinedOutput(); err != nil {
			return fmt.Errorf("%v %s", err, out)
		}
	}
	if err := waitReachable(gns, "10.88.0.1", "10.89.0.1"); err != nil {
		return err
	}
	if *hold {
		fmt.Printf("guest netns %s (vmbusd0 10.88.0.2, veth 10.89.0.2); host netns %s (vmbusd path 10.88.0.1, veth 10.89.0.1)\n", gns, hns)
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt, syscall.SIGTERM, syscall.SIGUSR1)
		for s := range sig {
			if s != syscall.SIGUSR1 {
				return nil
			}
			printDrops(n, dev, hns, gns) // kill -USR1: the counters so far
		}
	}
	for _, p := range []struct{ path, srv string }{{"vmbusd-tap", "10.88.0.1"}, {"veth", "10.89.0.1"}} {
		for _, conns := range []int{1, 4} {
			c0, hc0, t0 := selfCPU(), h.cpu(), time.Now()
			var r tcpResult
			if tool == "iperf3" {
				r, err = iperfBench(hns, gns, p.srv, conns, *dur)
			} else {
				r, err = tcpBench(hns, gns, p.srv, conns, *dur)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", p.path, err)
			}
			c1, hc1, el := selfCPU(), h.cpu(), time.Since(t0)
			if *verbose && p.path == "vmbusd-tap" {
				printDrops(n, dev, hns, gns)
			}
			emit(map[string]any{"test": "tapveth", "path": p.path, "mode": modeList()[0].String(), "gso": offloads, "offloads": offloads, "rsc": n.RSC() && p.path == "vmbusd-tap",
				"gpa": *gpaPool, "tool": tool, "conns": conns, "gbps": r.gbps, "gbps_rev": r.gbpsRev, "retrans": r.retrans,
				"rr_us": r.rrUS, "ping_us": pingRTT(gns, p.srv),
				"netbench_cpu": (c1 - c0) / el.Seconds(), "host_cpu": (hc1 - hc0) / el.Seconds()},
				"test", "path", "mode", "offloads", "gpa", "tool", "conns", "gbps", "gbps_rev", "retrans", "rr_us", "ping_us", "netbench_cpu", "host_cpu")
		}
	}
	return nil
}

// waitReachable waits until a TCP connection attempt to each address
// from namespace ns is answered (accepted or refused), so ARP and the
// attachment are up before measuring.
func waitReachable(ns string, addrs ...string) error {
	for _, a := range addrs {
		deadline := time.Now().Add(10 * time.Second)
		for {
			err := tap.InNetns(ns, func() error {
				c, err := net.DialTimeout("tcp4", a+":9", 200*time.Millisecond)
				if err == nil {
					c.Close()
				}
				return err
			})
			if err == nil || errors.Is(err, syscall.ECONNREFUSED) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s unreachable from %s: %w", a, ns, err)
			}
		}
	}
	return nil
}

// tcpResult is one TCP measurement: guest-to-host and host-to-guest
// Gbit/s, retransmitted segments, and the request/response round trip.
type tcpResult struct {
	gbps, gbpsRev, rrUS float64
	retrans             int
}

// iperfBench runs iperf3 with conns streams from the guest namespace to a
// server in the host namespace for d, then the reverse direction (-R),
// then the in-process request/response round trip.
func iperfBench(hns, gns, srv string, conns int, d time.Duration) (tcpResult, error) {
	var r tcpResult
	port := strconv.Itoa(20000 + os.Getpid()%20000)
	var srvOut strings.Builder
	server := exec.Command("ip", "netns", "exec", hns, "iperf3", "-s", "-B", srv, "-p", port)
	server.Stdout, server.Stderr = &srvOut, &srvOut
	if err := server.Start(); err != nil {
		return r, err
	}
	defer func() {
		server.Process.Kill()
		server.Wait()
	}()
	// iperf3 reads -t as whole seconds (atoi), and 0 means "run until
	// killed": a -dur under a second must not become an endless test.
	secs := max(1, int(d.Round(time.Second)/time.Second))
	for _, rev := range []bool{false, true} {
		args := []string{"netns", "exec", gns, "iperf3", "-c", srv, "-p", port, "-J",
			"-t", strconv.Itoa(secs), "-P", strconv.Itoa(conns), "--connect-timeout", "5000"}
		if rev {
			args = append(args, "-R")
		}
		var out []byte
		var err error
		for deadline := time.Now().Add(15 * time.Second); ; { // until the server listens
			// Bounded all the same: a stalled client is a failed
			// measurement, not a hung harness.
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(secs)*time.Second+30*time.Second)
			out, err = exec.CommandContext(ctx, "ip", args...).Output()
			cancel()
			if (err == nil && !bytes.Contains(out, []byte("unable to connect"))) || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			return r, fmt.Errorf("iperf3: %v %s (server: %s)", err, out, srvOut.String())
		}
		var res struct {
			End struct {
				SumSent     struct{ Retransmits int } `json:"sum_sent"`
				SumReceived struct {
					BitsPerSecond float64 `json:"bits_per_second"`
				} `json:"sum_received"`
			} `json:"end"`
			Error string `json:"error"`
		}
		if err := json.Unmarshal(out, &res); err != nil {
			return r, fmt.Errorf("iperf3 output: %w", err)
		}
		if res.Error != "" {
			return r, fmt.Errorf("iperf3: %s", res.Error)
		}
		if rev {
			r.gbpsRev = res.End.SumReceived.BitsPerSecond / 1e9
		} else {
			r.gbps = res.End.SumReceived.BitsPerSecond / 1e9
		}
		r.retrans += res.End.SumSent.Retransmits
	}
	rr, err := tcpRR(hns, gns, srv)
	r.rrUS = rr
	return r, err
}

// pingRTT returns the mean ICMP echo round trip from namespace ns to dst
// in µs over 200 echoes, or -1 without ping(8).
func pingRTT(ns, dst string) float64 {
	out, err := exec.Command("ip", "netns", "exec", ns, "ping", "-q", "-c", "200", "-i", "0.002", "-W", "1", dst).Output()
	if err != nil {
		return -1
	}
	// rtt min/avg/max/mdev = 0.031/0.045/0.120/0.010 ms
	s := string(out)
	i := strings.Index(s, " = ")
	if i < 0 {
		return -1
	}
	f := strings.Split(strings.Fields(s[i+3:])[0], "/")
	if len(f) < 2 {
		return -1
	}
	avg, err := strconv.ParseFloat(f[1], 64)
	if err != nil {
		return -1
	}
	return avg * 1000
}

// tcpBench streams from the guest namespace to a server in the host
// namespace over conns connections for d (sockets in this process), then
// measures the request/response round trip.
func tcpBench(hns, gns, srv string, conns int, d time.Duration) (tcpResult, error) {
	var r tcpResult
	var ln net.Listener
	if err := tap.InNetns(hns, func() error {
		var err error
		ln, err = net.Listen("tcp4", srv+":5201")
		return err
	}); err != nil {
		return r, err
	}
	defer ln.Close()
	var total atomic.Uint64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 256<<10)
				for {
					k, err := c.Read(buf)
					total.Add(uint64(k))
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	var wg sync.WaitGroup
	stop := time.Now().Add(d)
	for i := 0; i < conns; i++ {
		c, err := dialIn(gns, srv+":5201")
		if err != nil {
			return r, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			buf := make([]byte, 256<<10)
			for time.Now().Before(stop) {
				if _, err := c.Write(buf); err != nil {
					return
				}
			}
		}()
	}
	start := time.Now()
	wg.Wait()
	r.gbps = float64(total.Load()) * 8 / time.Since(start).Seconds() / 1e9
	rr, err := tcpRR(hns, gns, srv)
	r.rrUS = rr
	return r, err
}

func dialIn(ns, addr string) (net.Conn, error) {
	var c net.Conn
	err := tap.InNetns(ns, func() error {
		var err error
		c, err = net.DialTimeout("tcp4", addr, 5*time.Second)
		return err
	})
	return c, err
}

// tcpRR returns the mean round trip in µs of a 1-byte request and its
// 1-byte response over one TCP connection (Nagle off) from the guest
// namespace to an echo server in the host namespace.
func tcpRR(hns, gns, srv string) (float64, error) {
	var ln net.Listener
	if err := tap.InNetns(hns, func() error {
		var err error
		ln, err = net.Listen("tcp4", srv+":5202")
		return err
	}); err != nil {
		return 0, err
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.(*net.TCPConn).SetNoDelay(true)
		io.Copy(c, c)
	}()
	c, err := dialIn(gns, srv+":5202")
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c.(*net.TCPConn).SetNoDelay(true)
	b := []byte{'p'}
	const rounds = 2000
	t0 := time.Now()
	for i := 0; i < rounds; i++ {
		if _, err := c.Write(b); err != nil {
			return 0, err
		}
		if _, err := io.ReadFull(c, b); err != nil {
			return 0, err
		}
	}
	return float64(time.Since(t0).Microseconds()) / rounds, nil
}

// printDrops writes the drop counters along the TAP path to stderr.
func printDrops(n *netvsc.NIC, dev *tap.Device, hns, gns string) {
	for _, q := range n.Stats().Queues {
		fmt.Fprintf(os.Stderr, "nic q%d: rx %d no_memory %d too_big %d | tx %d copied %d gpa %d segmented %d segments %d too_big %d no_space %d busy %d stop %d\n",
			q.Queue, q.RxPackets, q.RxNoMemory, q.RxTooBig, q.TxPackets, q.TxCopied, q.TxGPA, q.TxSegmented, q.TxSegments, q.TxTooBig, q.TxNoSpace, q.TxBusy, q.StopQueue)
	}
	for _, q := range n.Stats().Queues {
		fmt.Fprintf(os.Stderr, "nic q%d: lso %d\n", q.Queue, q.TxLSO)
	}
	fmt.Fprintf(os.Stderr, "tap offloads %s\n", dev.Offloads())
	for _, q := range dev.Queues() {
		fmt.Fprintf(os.Stderr, "tap q%d: rx %d (udp split %d) nobuf %d dropped %d | tx %d (coalesced %d) drops %d\n", q.Index(),
			q.RxFrames.Load(), q.RxSplit.Load(), q.RxNoBuf.Load(), q.RxDropped.Load(), q.TxFrames.Load(), q.TxCoalesced.Load(), q.TxDrops.Load())
	}
	for _, x := range []struct{ ns, dev string }{{gns, dev.Name()}, {hns, "hv0"}} {
		out, _ := exec.Command("ip", "-n", x.ns, "-s", "link", "show", x.dev).CombinedOutput()
		fmt.Fprintf(os.Stderr, "%s %s:\n%s", x.ns, x.dev, out)
	}
}
