package main

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/vmbusd/vmbusd/frame"
	"github.com/vmbusd/vmbusd/hoptrace"
	"github.com/vmbusd/vmbusd/netvsc"
	"github.com/vmbusd/vmbusd/nictap"
	"github.com/vmbusd/vmbusd/tap"
)

// testLatency measures UDP request/response round trips (-rounds of one
// 1-byte datagram each way, one in flight, back to back as netperf's
// UDP_RR, after 200 warm-up rounds) from
// a guest namespace to a host namespace, through the TAP attachment in
// each wait mode and through a veth pair, and breaks every vmbusd round
// trip into its hops with package hoptrace: the guest, the simulated host
// (a child process) and the client stamp a shared page.
func testLatency() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root")
	}
	id := strconv.Itoa(os.Getpid() % 100000)
	hns, gns := "nlh"+id, "nlg"+id
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
	stampPath := filepath.Join("/dev/shm", "netbench-stamps-"+id)
	stamps, err := hoptrace.Create(stampPath)
	if err != nil {
		return err
	}
	defer os.Remove(stampPath)
	defer stamps.Close()
	h, err := startHost("-port", "tap", "-netns", hns, "-addr", "10.87.0.1/24", "-maxq", "2", "-stamps", stampPath,
		"-cpuprofile", *hostProf, "-trace", *hostTrace)
	if err != nil {
		return err
	}
	defer h.stop()
	// veth anchor between the same namespaces.
	va, vb := "nlva"+id, "nlvb"+id
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: va}, PeerName: vb}); err != nil {
		return err
	}
	defer func() {
		if l, err := netlink.LinkByName(va); err == nil {
			netlink.LinkDel(l)
		}
	}()
	for _, x := range []struct{ name, ns, addr string }{{va, hns, "10.86.0.1/24"}, {vb, gns, "10.86.0.2/24"}} {
		for _, args := range [][]string{{"link", "set", x.name, "netns", x.ns}, {"-n", x.ns, "addr", "add", x.addr, "dev", x.name},
			{"-n", x.ns, "link", "set", x.name, "up"}} {
			if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
				return fmt.Errorf("ip %v: %v %s", args, err, out)
			}
		}
	}
	srvs := map[string]*net.UDPConn{}
	for _, a := range []string{"10.87.0.1", "10.86.0.1"} {
		var c *net.UDPConn
		if err := tap.InNetns(hns, func() error {
			var err error
			c, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(a+":7300")))
			return err
		}); err != nil {
			return err
		}
		defer c.Close()
		var st *hoptrace.Stamps // the veth anchor is not traced
		if a == "10.87.0.1" {
			st = stamps
		}
		go udpEcho(c, st)
		srvs[a] = c
	}
	var budgets []time.Duration
	for _, f := range strings.Split(*busyPolls, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil {
			return fmt.Errorf("-busy-poll: %w", err)
		}
		budgets = append(budgets, d)
	}
	for _, mode := range modeList() {
		for _, bp := range budgets {
			if mode == netvsc.Poll && bp != 0 {
				continue // poll mode never sleeps: nothing to busy-poll before
			}
			if err := latencyMode(h, gns, id, mode, bp, stamps); err != nil {
				return fmt.Errorf("%s: %w", mode, err)
			}
		}
	}
	s0, c0, t0 := selfEvents(), selfCPU(), time.Now()
	rtts, err := udpRounds(gns, "10.86.0.1:7300", nil, nil)
	if err != nil {
		return fmt.Errorf("veth: %w", err)
	}
	emitLatency("veth", "-", 0, rtts, (selfCPU()-c0)/time.Since(t0).Seconds(), 0, selfEvents().sub(s0), procEvents{})
	return nil
}

// latencyMode attaches a NIC in one wait mode to a fresh TAP and runs the
// traced rounds.
func latencyMode(h *host, gns, id string, mode netvsc.Mode, busyPoll time.Duration, stamps *hoptrace.Stamps) error {
	n, err := h.open(netvsc.Config{Queues: *queues, Mode: mode, MonitorLatency: *monLat, PollBudget: *pollSpin, BusyPoll: busyPoll})
	if err != nil {
		return err
	}
	defer n.Close()
	for _, q := range n.Queues() {
		q.Channel().SetTrace(stamps)
	}
	dev, err := tap.Create(tap.Config{Name: "nlt" + id, Queues: len(n.Queues()), MAC: n.MAC(), MTU: n.MTU(), Netns: gns,
		Addr: netip.MustParsePrefix("10.87.0.2/24")})
	if err != nil {
		return err
	}
	defer dev.Close()
	att, err := nictap.Attach(n, dev, nictap.Options{Observe: func(toTAP bool, _ int, _ []*frame.Packet) {
		if toTAP {
			stamps.Stamp(hoptrace.GuestRx)
		} else {
			stamps.Stamp(hoptrace.GuestTAPRead)
		}
	}})
	if err != nil {
		return err
	}
	defer att.Close()
	if err := waitReachable(gns, "10.87.0.1"); err != nil {
		return err
	}
	var hops [hoptrace.NumStages][]int64
	hpid := h.cmd.Process.Pid
	s0, hs0 := selfEvents(), procEventsOf(hpid)
	c0, hc0, t0 := selfCPU(), h.cpu(), time.Now()
	rtts, err := udpRounds(gns, "10.87.0.1:7300", stamps, func(s *[hoptrace.NumStages]int64) {
		legs, ok := hoptrace.Legs(s)
		for k := range legs {
			if ok[k] {
				hops[k] = append(hops[k], legs[k])
			}
		}
	})
	if err != nil {
		return err
	}
	el := time.Since(t0).Seconds()
	emitLatency("vmbusd-tap", mode.String(), busyPoll, rtts, (selfCPU()-c0)/el, (h.cpu()-hc0)/el,
		selfEvents().sub(s0), procEventsOf(hpid).sub(hs0))
	for k := hoptrace.GuestTAPRead; k < hoptrace.NumStages; k++ {
		d := hops[k]
		if len(d) == 0 {
			continue
		}
		slices.Sort(d)
		emit(map[string]any{"test": "latency", "kind": "hop", "mode": mode.String(), "busy_poll_us": busyPoll.Microseconds(), "order": int(k),
			"stage": k.String(), "n": len(d), "p50_us": pct(d, 50), "p99_us": pct(d, 99)},
			"test", "kind", "mode", "busy_poll_us", "order", "stage", "n", "p50_us", "p99_us")
	}
	return nil
}

const latencyWarmup = 200

// udpRounds runs the warm-up and the measured rounds against an echo
// server; with stamps it clears the page before each request and hands
// the filled page to each after every measured response.
func udpRounds(gns, addr string, st *hoptrace.Stamps, each func(*[hoptrace.NumStages]int64)) ([]int64, error) {
	var c *net.UDPConn
	if err := tap.InNetns(gns, func() error {
		var err error
		c, err = net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.MustParseAddrPort(addr)))
		return err
	}); err != nil {
		return nil, err
	}
	defer c.Close()
	b := make([]byte, 64)
	rtts := make([]int64, 0, *rounds)
	var page [hoptrace.NumStages]int64
	for i := range latencyWarmup + *rounds {
		st.Reset()
		t0 := hoptrace.Now()
		st.StampAt(hoptrace.ClientSend, t0)
		if _, err := c.Write(b[:1]); err != nil {
			return nil, err
		}
		// A lost datagram (the first ARP, say) is sent again.
		c.SetReadDeadline(time.Now().Add(time.Second))
		if _, err := c.Read(b); err != nil {
			if i < latencyWarmup {
				continue
			}
			return nil, err
		}
		t1 := hoptrace.Now()
		if i < latencyWarmup {
			continue
		}
		rtts = append(rtts, t1-t0)
		if st != nil && each != nil {
			st.StampAt(hoptrace.ClientRecv, t1)
			st.Read(&page)
			each(&page)
		}
	}
	slices.Sort(rtts)
	return rtts, nil
}

// udpEcho answers every datagram; with st it stamps the server's hop
// between reading a request and writing its response.
func udpEcho(c *net.UDPConn, st *hoptrace.Stamps) {
	b := make([]byte, 2048)
	for {
		n, from, err := c.ReadFromUDPAddrPort(b)
		if err != nil {
			return
		}
		st.Stamp(hoptrace.ServerEcho)
		c.WriteToUDPAddrPort(b[:n], from)
	}
}

// emitLatency prints one path's round trips. The context switches and
// page faults (of netbench, which holds the guest driver, the client and
// the server, and of the simulated host) are per round trip, warm-up
// included: a diagnostic that does not depend on how busy the machine is,
// for the wake-ups and first touches the hops wait for
// (docs/operations.md, "Waiting and latency").
func emitLatency(path, mode string, busyPoll time.Duration, sorted []int64, cpu, hostCPU float64, ev, hostEv procEvents) {
	per := func(n uint64) float64 { return float64(n) / float64(len(sorted)+latencyWarmup) }
	emit(map[string]any{"test": "latency", "kind": "rtt", "path": path, "mode": mode, "busy_poll_us": busyPoll.Microseconds(), "rounds": len(sorted),
		"p50_us": pct(sorted, 50), "p90_us": pct(sorted, 90), "p99_us": pct(sorted, 99), "netbench_cpu": cpu, "host_cpu": hostCPU,
		"netbench_cs_per_rt": per(ev.switches), "netbench_faults_per_rt": per(ev.faults),
		"host_cs_per_rt": per(hostEv.switches), "host_faults_per_rt": per(hostEv.faults)},
		"test", "kind", "path", "mode", "busy_poll_us", "rounds", "p50_us", "p90_us", "p99_us", "netbench_cpu", "host_cpu",
		"netbench_cs_per_rt", "netbench_faults_per_rt", "host_cs_per_rt", "host_faults_per_rt")
}

// procEvents counts a process's context switches (voluntary and not, all
// threads) and minor page faults.
type procEvents struct{ switches, faults uint64 }

func (a procEvents) sub(b procEvents) procEvents {
	return procEvents{a.switches - min(a.switches, b.switches), a.faults - min(a.faults, b.faults)}
}

func selfEvents() procEvents {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return procEvents{uint64(ru.Nvcsw + ru.Nivcsw), uint64(ru.Minflt)}
}

// procEvents reads another process's counts from /proc: the faults from
// its stat (field 10, minflt, all threads), the switches summed over its
// threads' status (a thread that exited meanwhile drops out).
func procEventsOf(pid int) procEvents {
	var ev procEvents
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 <= len(s) {
			if f := strings.Fields(s[i+2:]); len(f) > 7 {
				ev.faults, _ = strconv.ParseUint(f[7], 10, 64)
			}
		}
	}
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, t.Name()))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.HasSuffix(k, "voluntary_ctxt_switches") {
				n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
				ev.switches += n
			}
		}
	}
	return ev
}

// pct is the p-th percentile of sorted nanoseconds, in µs.
func pct(sorted []int64, p int) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := min(len(sorted)*p/100, len(sorted)-1)
	return float64(sorted[i]) / 1e3
}
