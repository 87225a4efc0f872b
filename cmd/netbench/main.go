// Command netbench measures vmbusd's user-space netvsc data path against
// the simulated host running in a separate process (so the guest's CPU is
// its own): packet rates and CPU per million packets each way, the CPU of
// an idle attached port per wait mode, the send-buffer size sweep under
// bursty load, the TAP attachment against a plain veth pair between the
// same two network namespaces, and a transmit-only load like DPDK testpmd's
// txonly mode (txonly, which can drive a host started by `vmbusd sim
// --port sink`, so DPDK's guest and vmbusd's meet the same host).
//
//	netbench [-dur 3s] [-json] rate|idle|sweep|tapveth|txonly|all ...
//
// It re-executes itself as the host ("netbench host ...").
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/vmbusd/vmbusd/netvsc"
	"github.com/vmbusd/vmbusd/sim"
	"github.com/vmbusd/vmbusd/tap"
	"github.com/vmbusd/vmbusd/vmbus"
)

var (
	dur     = flag.Duration("dur", 3*time.Second, "measurement time per point")
	asJSON  = flag.Bool("json", false, "print results as JSON lines")
	queues  = flag.Int("queues", 1, "queues for the rate test")
	cpuProf = flag.String("cpuprofile", "", "write a CPU profile of the guest side")
	modes   = flag.String("modes", "hybrid,interrupt,poll", "wait modes for the rate and idle tests")
	monLat  = flag.Duration("monitor-latency", 0, "host monitor-page scan latency the guest asks for (0: netvsc's 50 µs)")
	reps    = flag.Int("reps", 3, "repetitions per sweep point (the median is reported)")
	gso     = flag.Bool("gso", false, "tapveth: virtio-net header and TSO on the TAP")
	simRoot = flag.String("root", "", "txonly: drive the first NIC of a host already serving this root (e.g. vmbusd sim --port sink) instead of starting one")
	hostPID = flag.Int("host-pid", 0, "txonly with -root: the host's pid, to report its CPU")
	txSize  = flag.Int("size", 64, "txonly: frame size in bytes")
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
		default:
			err = fmt.Errorf("unknown test %q (rate, idle, sweep, tapveth, txonly, all)", t)
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
	fs.Parse(args)
	h, err := sim.New(sim.Config{Root: *root, Profile: sim.DefaultProfile})
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
		t, err := sim.NewTAP(sim.TAPConfig{Netns: *ns, Name: "hv0", Addr: pfx})
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
			pkts := make([]*netvsc.Packet, 64)
			for ctx.Err() == nil {
				k := q.RxBurst(pkts)
				if k == 0 {
					if q.Wait(ctx) != nil {
						return
					}
					continue
				}
				count.Add(uint64(k))
				netvsc.PutBurst(pkts[:k])
			}
		}()
	}
	return &wg
}

// txLoop sends frames of size on queue q until ctx ends; burst/pause make
// the load bursty (0: continuous).
func txLoop(ctx context.Context, n *netvsc.NIC, q *netvsc.Queue, size, burst int, pause time.Duration, count *atomic.Uint64) {
	tmpl := make([]byte, size)
	copy(tmpl, []byte{0x02, 0, 0, 0, 0, 9})
	copy(tmpl[6:], n.MAC())
	tmpl[12], tmpl[13] = 0x08, 0x00
	tmpl[14] = 0x45
	pkts := make([]*netvsc.Packet, 32)
	inBurst := 0
	for ctx.Err() == nil {
		k := q.AllocBurst(pkts)
		for _, p := range pkts[:k] {
			copy(p.SetLen(size), tmpl)
		}
		m := q.TxBurst(pkts[:k])
		netvsc.PutBurst(pkts[m:k])
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
	for _, dir := range []string{"rx", "tx"} {
		for _, size := range []int{64, 1514} {
			for _, mode := range modeList() {
				if mode == netvsc.Interrupt {
					continue
				}
				if err := ratePoint(dir, size, mode); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func ratePoint(dir string, size int, mode netvsc.Mode) error {
	port := "sink"
	if dir == "rx" {
		port = "gen"
	}
	h, err := startHost("-port", port, "-size", strconv.Itoa(size), "-flows", "64")
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
	if dir == "rx" {
		wg2 := rxLoop(ctx, n, &count)
		defer wg2.Wait()
	} else {
		var rxc atomic.Uint64
		wg2 := rxLoop(ctx, n, &rxc)
		defer wg2.Wait()
		for _, q := range n.Queues() {
			wg.Add(1)
			go func() { defer wg.Done(); txLoop(ctx, n, q, size, 0, 0, &count) }()
		}
	}
	time.Sleep(300 * time.Millisecond) // warm up
	c0, hc0, p0 := selfCPU(), h.cpu(), count.Load()
	s0 := n.Stats()
	start := time.Now()
	time.Sleep(*dur)
	el := time.Since(start).Seconds()
	c1, hc1, p1 := selfCPU(), h.cpu(), count.Load()
	s1 := n.Stats()
	cancel()
	wg.Wait()
	n.Close()
	h.stop()
	pk := float64(p1 - p0)
	var sig, wake uint64
	for i := range s1.Queues {
		a, b := s1.Queues[i].Channel, s0.Queues[i].Channel
		sig += a.TxSignals + a.RxSignals - b.TxSignals - b.RxSignals
		wake += a.Wakeups - b.Wakeups
	}
	emit(map[string]any{"test": "rate", "dir": dir, "size": size, "mode": mode.String(), "queues": len(s1.Queues),
		"pps": pk / el, "gbps": pk * float64(size) * 8 / el / 1e9,
		"guest_cpu": (c1 - c0) / el, "guest_cpu_s_per_mpkt": (c1 - c0) / (pk / 1e6),
		"host_cpu": (hc1 - hc0) / el, "signals_per_pkt": float64(sig) / pk, "wakeups_per_pkt": float64(wake) / pk},
		"test", "dir", "size", "mode", "queues", "pps", "gbps", "guest_cpu", "guest_cpu_s_per_mpkt", "host_cpu", "signals_per_pkt", "wakeups_per_pkt")
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

// testTapVeth: TCP throughput and ICMP-free latency between two network
// namespaces, once through the simulated host and vmbusd's TAP attachment,
// once through a veth pair (the kernel's own path), in the same run.
func testTapVeth() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root")
	}
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
	h, err := startHost("-port", "tap", "-netns", hns, "-addr", "10.88.0.1/24", "-maxq", "2")
	if err != nil {
		return err
	}
	defer h.stop()
	n, err := h.open(netvsc.Config{Queues: 2, Mode: modeList()[0], MonitorLatency: *monLat})
	if err != nil {
		return err
	}
	defer n.Close()
	dev, err := tap.Create(tap.Config{Name: "vmbusd0", Queues: len(n.Queues()), MAC: n.MAC(), MTU: n.MTU(), Netns: gns,
		Addr: netip.MustParsePrefix("10.88.0.2/24"), GSO: *gso})
	if err != nil {
		return err
	}
	defer dev.Close()
	att, err := tap.Attach(n, dev, tap.AttachOptions{})
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
	time.Sleep(300 * time.Millisecond)
	for _, p := range []struct{ path, srv string }{{"vmbusd-tap", "10.88.0.1"}, {"veth", "10.89.0.1"}} {
		for _, conns := range []int{1, 4} {
			c0, hc0, t0 := selfCPU(), h.cpu(), time.Now()
			gbps, rtt, err := tcpBench(hns, gns, p.srv, conns, *dur)
			if err != nil {
				return fmt.Errorf("%s: %w", p.path, err)
			}
			c1, hc1, el := selfCPU(), h.cpu(), time.Since(t0)
			emit(map[string]any{"test": "tapveth", "path": p.path, "mode": modeList()[0].String(), "gso": *gso, "conns": conns, "gbps": gbps, "rr_us": rtt,
				"netbench_cpu": (c1 - c0) / el.Seconds(), "host_cpu": (hc1 - hc0) / el.Seconds()},
				"test", "path", "mode", "gso", "conns", "gbps", "rr_us", "netbench_cpu", "host_cpu")
		}
	}
	return nil
}

// tcpBench streams from the guest namespace to a server in the host
// namespace over conns connections for d, then measures a 1-byte
// request/response round trip; it returns Gbit/s and the mean RTT in µs.
func tcpBench(hns, gns, srv string, conns int, d time.Duration) (float64, float64, error) {
	var ln net.Listener
	if err := tap.InNetns(hns, func() error {
		var err error
		ln, err = net.Listen("tcp4", srv+":5201")
		return err
	}); err != nil {
		return 0, 0, err
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
					if k == 1 && buf[0] == 'p' { // ping-pong probe
						c.Write(buf[:1])
					}
				}
			}()
		}
	}()
	dial := func() (net.Conn, error) {
		var c net.Conn
		err := tap.InNetns(gns, func() error {
			var err error
			c, err = net.DialTimeout("tcp4", srv+":5201", 5*time.Second)
			return err
		})
		return c, err
	}
	var wg sync.WaitGroup
	stop := time.Now().Add(d)
	for i := 0; i < conns; i++ {
		c, err := dial()
		if err != nil {
			return 0, 0, err
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
	gbps := float64(total.Load()) * 8 / time.Since(start).Seconds() / 1e9
	c, err := dial()
	if err != nil {
		return gbps, 0, err
	}
	defer c.Close()
	c.(*net.TCPConn).SetNoDelay(true)
	b := []byte{'p'}
	const rounds = 2000
	t0 := time.Now()
	for i := 0; i < rounds; i++ {
		c.Write(b)
		if _, err := io.ReadFull(c, b); err != nil {
			return gbps, 0, err
		}
	}
	return gbps, float64(time.Since(t0).Microseconds()) / rounds, nil
}
