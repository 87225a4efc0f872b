package main

// TAP vs veth: the vmbusd daemon attaching a NIC of a simulated host (in
// its own process) to a TAP, against a veth pair between the same two
// network namespaces; then netbench's tapveth test as it stands.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

func tapRow() row {
	return row{id: "tap", title: "TAP attachment vs a veth pair",
		how: "Two fresh network namespaces, \"host\" and \"guest\". The vmbusd path: `vmbusd sim --test 0 --nic 1 --port tap:HOSTNS` " +
			"(the simulated host, its vSwitch port a kernel TAP in the host namespace, 10.77.1.1/24) and `vmbusd run --config` " +
			"with one `[[nic]]` entry `attach = \"tap\"`, `netns = GUESTNS`, `address = \"10.77.1.2/24\"` and nothing else set: " +
			"the daemon's default configuration, as a user gets it. The anchor: a veth pair between the same namespaces " +
			"(10.77.2.1 ↔ 10.77.2.2). Per run and per path, from the guest namespace to the host namespace: `iperf3 -c -t T -J` " +
			"(one TCP stream; received bits/s, retransmits and the sender's mean smoothed RTT over the transfer from its JSON) with " +
			"the kernel's default congestion control (named in the column heading) and, when that is not CUBIC, once more with " +
			"`-C cubic`: the two behave very differently on both paths, BBR pacing at the rate it has measured and CUBIC filling " +
			"whatever queue the path has (a CUBIC flow over the veth pair moves between about 10 and 30–45 Gbit/s from run to " +
			"run here); `ping -c N -i 0.01` (p50/p99 of its `time=` values), " +
			"and a TCP request/response test in the style of netperf's TCP_RR (`benchreport rr-client`: one byte each way, " +
			"TCP_NODELAY, one connection, 100 warm-up rounds, p50/p99 of the round trips). Ratios are TAP ÷ veth, run by run. " +
			"The daemon's CPU is its process's `/proc` time, idle (NIC attached, no traffic) and over each iperf3 transfer; " +
			"RSS is `VmRSS`. Then `netbench -json tapveth` (its own in-process guest, TAP attachment and Go TCP streamer, " +
			"one and four connections, and a mean request/response round trip) is run as it stands and tabulated.",
		run: runTap}
}

type tapPath struct {
	name, server, port string
}

var tapPaths = []tapPath{{"vmbusd TAP", "10.77.1.1", "5201"}, {"veth", "10.77.2.1", "5202"}}

// tapSetup is the namespaces, host, daemon and servers of the TAP row.
type tapSetup struct {
	e                 *env
	hns, gns          string
	root, state       string
	sim, daemon, rr   *bg
	iperfSrv          []*bg
	nsMade            []string
	simPid, daemonPid int
}

func runTap(ctx context.Context, e *env, s *section) error {
	if err := needRoot("the TAP and veth comparison"); err != nil {
		return err
	}
	if err := needCommands("ip", "ping"); err != nil {
		return err
	}
	_, iperfErr := lookPath("iperf3")
	vm, err := e.build(ctx, "vmbusd")
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	secs, pings, rounds, idle := 5, 200, 3000, 5*time.Second
	if e.quick {
		secs, pings, rounds, idle = 1, 20, 300, time.Second
	}
	t := &tapSetup{e: e}
	err = t.up(ctx, vm, self, iperfErr == nil)
	defer t.down()
	if err != nil {
		return err
	}
	s.ran("vmbusd sim --root R --test 0 --nic 1 --port tap:HOSTNS; vmbusd run --config FILE (root R, metrics off, one [[nic]]: device, attach = \"tap\", tap, netns = GUESTNS, address)")
	if iperfErr == nil {
		s.ran("ip netns exec HOSTNS iperf3 -s -B ADDR -p PORT --forceflush; ip netns exec GUESTNS iperf3 -c ADDR -p PORT -t %d -J", secs)
	}
	s.ran("ip netns exec GUESTNS ping -c %d -i 0.01 ADDR", pings)
	s.ran("ip netns exec HOSTNS benchreport rr-server; ip netns exec GUESTNS benchreport rr-client -addr ADDR:7001 -rounds %d", rounds)

	// The daemon at rest, NIC attached.
	c0, _ := procCPU(t.daemonPid)
	h0, _ := procCPU(t.simPid)
	t0 := time.Now()
	select {
	case <-time.After(idle):
	case <-ctx.Done():
		return ctx.Err()
	}
	c1, _ := procCPU(t.daemonPid)
	h1, _ := procCPU(t.simPid)
	idleEl := time.Since(t0).Seconds()
	idleRSS, _ := procRSS(t.daemonPid)

	defaultCC, alsoCubic := congestionControls()
	if iperfErr == nil && alsoCubic {
		s.ran("ip netns exec GUESTNS iperf3 -c ADDR -p PORT -t %d -J -C cubic", secs)
	}
	type pathRuns struct{ gbps, retr, rtt, cubic, pingP50, pingP99, rrP50, rrP99, dCPU, hCPU, rss runs }
	res := make([]pathRuns, len(tapPaths))
	for run := range e.runs {
		for i, p := range tapPaths {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			tag := fmt.Sprintf("%s-run%d", strings.ReplaceAll(p.name, " ", "-"), run+1)
			if iperfErr == nil {
				d0, _ := procCPU(t.daemonPid)
				s0, _ := procCPU(t.simPid)
				a := time.Now()
				r, err := t.iperf(ctx, p, secs, tag, "")
				el := time.Since(a).Seconds()
				d1, _ := procCPU(t.daemonPid)
				s1, _ := procCPU(t.simPid)
				if err != nil {
					s.fail("iperf3 %s run %d: %v", p.name, run+1, err)
				} else {
					res[i].gbps = append(res[i].gbps, r.gbps)
					res[i].retr = append(res[i].retr, r.retr)
					if r.cc != "" {
						defaultCC = r.cc // what the sender used
					}
					if r.rttUS > 0 {
						res[i].rtt = append(res[i].rtt, r.rttUS)
					}
					if i == 0 {
						res[i].dCPU = append(res[i].dCPU, (d1-d0)/el)
						res[i].hCPU = append(res[i].hCPU, (s1-s0)/el)
						rss, _ := procRSS(t.daemonPid)
						res[i].rss = append(res[i].rss, rss)
					}
				}
				if alsoCubic {
					if r, err := t.iperf(ctx, p, secs, tag+"-cubic", "cubic"); err != nil {
						s.fail("iperf3 -C cubic %s run %d: %v", p.name, run+1, err)
					} else {
						res[i].cubic = append(res[i].cubic, r.gbps)
					}
				}
			}
			if p50, p99, err := t.ping(ctx, p, pings, tag); err != nil {
				s.fail("ping %s run %d: %v", p.name, run+1, err)
			} else {
				res[i].pingP50, res[i].pingP99 = append(res[i].pingP50, p50), append(res[i].pingP99, p99)
			}
			if r, err := t.rrClient(ctx, self, p, rounds, tag); err != nil {
				s.fail("request/response %s run %d: %v", p.name, run+1, err)
			} else {
				res[i].rrP50, res[i].rrP99 = append(res[i].rrP50, r.P50us), append(res[i].rrP99, r.P99us)
			}
			e.progress("  %s: iperf3 %v Gbit/s, ping p50 %v µs, rr p50 %v µs", tag, lastOf(res[i].gbps), lastOf(res[i].pingP50), lastOf(res[i].rrP50))
		}
	}
	t.down()

	gb := func(r runs) string { return r.cell(sig3) }
	us := func(r runs) string { return r.cell(sig3) }
	var rows [][]string
	for i, p := range tapPaths {
		rows = append(rows, []string{p.name, gb(res[i].gbps), res[i].retr.cell(intf), us(res[i].rtt), gb(res[i].cubic),
			us(res[i].pingP50), us(res[i].pingP99), us(res[i].rrP50), us(res[i].rrP99)})
	}
	tp, vp := res[0], res[1]
	rows = append(rows, []string{"TAP ÷ veth", ratios(tp.gbps, vp.gbps).cell(times), "", ratios(tp.rtt, vp.rtt).cell(times), ratios(tp.cubic, vp.cubic).cell(times),
		ratios(tp.pingP50, vp.pingP50).cell(times), ratios(tp.pingP99, vp.pingP99).cell(times), ratios(tp.rrP50, vp.rrP50).cell(times), ratios(tp.rrP99, vp.rrP99).cell(times)})
	tcpHead := fmt.Sprintf("iperf3 TCP Gbit/s (%d s, 1 stream, %s: the kernel's default)", secs, defaultCC)
	cubicHead := "iperf3 TCP Gbit/s, CUBIC"
	switch {
	case defaultCC == "cubic":
		cubicHead += " (the default: as the first column)"
	case !alsoCubic:
		cubicHead += " (not run: the kernel has no CUBIC)"
	}
	if iperfErr != nil {
		tcpHead = "iperf3 TCP Gbit/s (skipped: iperf3 not installed)"
		s.fail("iperf3: skipped: not installed")
	}
	s.table([]string{"path", tcpHead, "iperf3 retransmits", "iperf3 sender's mean RTT µs", cubicHead, "ping p50 µs", "ping p99 µs", "TCP RR p50 µs", "TCP RR p99 µs"}, rows)
	if len(tp.gbps) > 0 {
		s.sum("TCP through the TAP attachment (iperf3, default config) vs veth, Gbit/s", sig3(tp.gbps.median()), sig3(vp.gbps.median()), ratios(tp.gbps, vp.gbps).cell(times))
	}
	if len(tp.cubic) > 0 {
		s.sum("TCP through the TAP attachment (iperf3 -C cubic) vs veth, Gbit/s", sig3(tp.cubic.median()), sig3(vp.cubic.median()), ratios(tp.cubic, vp.cubic).cell(times))
	}
	if len(tp.pingP50) > 0 {
		s.sum("ping round trip p50 through the TAP attachment vs veth, µs", sig3(tp.pingP50.median()), sig3(vp.pingP50.median()), ratios(tp.pingP50, vp.pingP50).cell(times))
	}
	if len(tp.rrP50) > 0 {
		s.sum("TCP request/response p50 through the TAP attachment vs veth, µs", sig3(tp.rrP50.median()), sig3(vp.rrP50.median()), ratios(tp.rrP50, vp.rrP50).cell(times))
	}

	mib := func(v float64) string { return sig3(v / (1 << 20)) }
	idleCPU := runs{(c1 - c0) / idleEl}
	costRows := [][]string{{fmt.Sprintf("idle, NIC attached to the TAP (%s)", idle), idleCPU.cell(pct), runs{(h1 - h0) / idleEl}.cell(pct), runs{idleRSS}.cell(mib)}}
	if len(tp.dCPU) > 0 {
		costRows = append(costRows, []string{fmt.Sprintf("iperf3 TCP through the TAP (%d s)", secs), tp.dCPU.cell(pct), tp.hCPU.cell(pct), tp.rss.cell(mib)})
	}
	s.para("Daemon cost (`vmbusd run`, one NIC, default configuration; the simulated host is another process on the same cores):")
	s.table([]string{"state", "daemon CPU (% of a core)", "simulated host CPU (% of a core)", "daemon RSS MiB"}, costRows)
	s.sum("daemon CPU with an idle NIC attached to a TAP, % of a core", pct(idleCPU.median()), "–", "–")

	return netbenchTapVeth(ctx, e, s)
}

func lastOf(r runs) any {
	if len(r) == 0 {
		return "–"
	}
	return sig3(r[len(r)-1])
}

func lookPath(name string) (string, error) {
	if err := needCommands(name); err != nil {
		return "", err
	}
	return name, nil
}

// ipNetns runs a command in a namespace through ip netns exec.
func ipNetns(ns string, argv ...string) []string {
	return append([]string{"netns", "exec", ns}, argv...)
}

func (t *tapSetup) up(ctx context.Context, vmbusd, self string, iperf bool) error {
	e := t.e
	id := fmt.Sprintf("br%d", os.Getpid()%1000000)
	t.hns, t.gns = id+"h", id+"g"
	dir := e.logDir("tap")
	ipc := func(args ...string) error {
		_, err := e.output(ctx, time.Minute, filepath.Join(dir, "ip"), nil, "ip", args...)
		return err
	}
	for _, ns := range []string{t.hns, t.gns} {
		if err := ipc("netns", "add", ns); err != nil {
			return err
		}
		t.nsMade = append(t.nsMade, ns)
		if err := ipc("-n", ns, "link", "set", "lo", "up"); err != nil {
			return err
		}
	}
	t.root = fmt.Sprintf("/dev/shm/benchreport-%d-tap", os.Getpid())
	os.RemoveAll(t.root)
	var err error
	t.sim, err = e.start(ctx, filepath.Join(dir, "sim"), nil, vmbusd, "sim", "--root", t.root, "--test", "0", "--nic", "1", "--port", "tap:"+t.hns)
	if err != nil {
		return err
	}
	t.simPid = t.sim.pid()
	nicLine, err := t.sim.out.waitFor(ctx, "nic ", time.Minute)
	if err != nil {
		return fmt.Errorf("vmbusd sim: %v: %s", err, tail(t.sim.err.text(), 300))
	}
	if _, err := t.sim.out.waitFor(ctx, "ready root", time.Minute); err != nil {
		return fmt.Errorf("vmbusd sim: %v: %s", err, tail(t.sim.err.text(), 300))
	}
	f := strings.Fields(nicLine)
	if len(f) < 2 {
		return notUnderstood("vmbusd sim's nic line %q", nicLine)
	}
	instance := f[1]
	if err := ipc("-n", t.hns, "addr", "add", "10.77.1.1/24", "dev", "vmbusd0"); err != nil {
		return err
	}
	if err := ipc("-n", t.hns, "link", "set", "vmbusd0", "up"); err != nil {
		return err
	}
	t.state = filepath.Join(e.work, "tap-state")
	os.RemoveAll(t.state)
	if err := os.MkdirAll(t.state, 0o700); err != nil {
		return err
	}
	cfg := fmt.Sprintf(`root = %q
state_dir = %q

[metrics]
listen = ""

[control]
socket = %q

[[nic]]
device = %q
attach = "tap"
tap = "vmbus0"
netns = %q
address = "10.77.1.2/24"
`, t.root, t.state, filepath.Join(t.state, "control.sock"), instance, t.gns)
	cfgPath := filepath.Join(t.state, "vmbusd.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return err
	}
	t.daemon, err = e.start(ctx, filepath.Join(dir, "daemon"), nil, vmbusd, "run", "--config", cfgPath)
	if err != nil {
		return err
	}
	t.daemonPid = t.daemon.pid()
	if _, err := t.daemon.err.waitFor(ctx, "vmbusd ready", 2*time.Minute); err != nil {
		return fmt.Errorf("vmbusd run: %v: %s", err, tail(t.daemon.err.text(), 400))
	}
	// The anchor: a veth pair between the same namespaces.
	if err := ipc("link", "add", "brva", "netns", t.hns, "type", "veth", "peer", "name", "brvb", "netns", t.gns); err != nil {
		return err
	}
	for _, x := range []struct{ ns, dev, addr string }{{t.hns, "brva", "10.77.2.1/24"}, {t.gns, "brvb", "10.77.2.2/24"}} {
		if err := ipc("-n", x.ns, "addr", "add", x.addr, "dev", x.dev); err != nil {
			return err
		}
		if err := ipc("-n", x.ns, "link", "set", x.dev, "up"); err != nil {
			return err
		}
	}
	// Both paths answer before anything is measured (neighbour
	// resolution, carrier).
	for _, p := range tapPaths {
		if err := t.waitPing(ctx, p.server, time.Minute); err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
	}
	if iperf {
		for _, p := range tapPaths {
			srv, err := e.start(ctx, filepath.Join(dir, "iperf3-server-"+p.port), nil, "ip", ipNetns(t.hns, "iperf3", "-s", "-B", p.server, "-p", p.port, "--forceflush")...)
			if err != nil {
				return err
			}
			t.iperfSrv = append(t.iperfSrv, srv)
			if _, err := srv.out.waitFor(ctx, "Server listening", time.Minute); err != nil {
				return fmt.Errorf("iperf3 server: %v: %s", err, tail(srv.err.text(), 200))
			}
		}
	}
	t.rr, err = e.start(ctx, filepath.Join(dir, "rr-server"), nil, "ip", ipNetns(t.hns, self, "rr-server", "-listen", "0.0.0.0:7001")...)
	if err != nil {
		return err
	}
	if _, err := t.rr.out.waitFor(ctx, "READY", time.Minute); err != nil {
		return fmt.Errorf("rr-server: %v: %s", err, tail(t.rr.err.text(), 200))
	}
	return nil
}

// waitPing pings addr from the guest namespace until it answers.
func (t *tapSetup) waitPing(ctx context.Context, addr string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		_, err := t.e.output(ctx, 10*time.Second, filepath.Join(t.e.logDir("tap"), "ping-wait"), nil, "ip", ipNetns(t.gns, "ping", "-c", "1", "-W", "1", addr)...)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("no answer to ping %s within %s: %v", addr, within, err)
		}
	}
}

// down stops everything up started, in reverse order; it may run twice.
func (t *tapSetup) down() {
	for _, p := range append([]*bg{t.rr}, t.iperfSrv...) {
		if p != nil {
			p.stop(5 * time.Second)
		}
	}
	if t.daemon != nil {
		t.daemon.stop(30 * time.Second)
	}
	if t.sim != nil {
		t.sim.stop(30 * time.Second)
	}
	for _, ns := range t.nsMade {
		t.e.output(context.Background(), time.Minute, filepath.Join(t.e.logDir("tap"), "ip-del"), nil, "ip", "netns", "del", ns)
	}
	t.nsMade = nil
	if t.root != "" {
		os.RemoveAll(t.root)
	}
}

// iperf runs one iperf3 client, with congestion control cc when not
// empty.
func (t *tapSetup) iperf(ctx context.Context, p tapPath, secs int, tag, cc string) (iperfResult, error) {
	argv := []string{"iperf3", "-c", p.server, "-p", p.port, "-t", strconv.Itoa(secs), "-J"}
	if cc != "" {
		argv = append(argv, "-C", cc)
	}
	out, err := t.e.output(ctx, time.Duration(secs)*time.Second+2*time.Minute, filepath.Join(t.e.logDir("tap"), "iperf3-"+tag), nil,
		"ip", ipNetns(t.gns, argv...)...)
	if err != nil {
		return iperfResult{}, err
	}
	return parseIperf3(out)
}

// congestionControls returns the kernel's default TCP congestion control
// and whether iperf3 should also be run with CUBIC (the default is
// something else and the kernel has CUBIC).
func congestionControls() (string, bool) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_congestion_control")
	if err != nil {
		return "unknown congestion control", false
	}
	def := strings.TrimSpace(string(b))
	avail, _ := os.ReadFile("/proc/sys/net/ipv4/tcp_available_congestion_control")
	return def, def != "cubic" && slices.Contains(strings.Fields(string(avail)), "cubic")
}

// iperfResult is what the TAP row reads of an iperf3 client's JSON.
type iperfResult struct {
	gbps, retr float64
	rttUS      float64 // the sender's mean smoothed RTT, averaged over the streams; 0 when absent
	cc         string  // the sender's congestion control
}

// parseIperf3 reads end.sum_received.bits_per_second,
// end.sum_sent.retransmits, end.streams[].sender.mean_rtt and
// end.sender_tcp_congestion of iperf3's JSON.
func parseIperf3(out string) (iperfResult, error) {
	var r struct {
		End struct {
			Streams []struct {
				Sender struct {
					MeanRTT float64 `json:"mean_rtt"`
				} `json:"sender"`
			} `json:"streams"`
			SumSent struct {
				Retransmits float64 `json:"retransmits"`
			} `json:"sum_sent"`
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
			CC string `json:"sender_tcp_congestion"`
		} `json:"end"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		return iperfResult{}, notUnderstood("iperf3 -J: %v", err)
	}
	if r.Error != "" {
		return iperfResult{}, fmt.Errorf("iperf3: %s", r.Error)
	}
	if r.End.SumReceived.BitsPerSecond <= 0 {
		return iperfResult{}, notUnderstood("iperf3 -J has no end.sum_received.bits_per_second")
	}
	res := iperfResult{gbps: r.End.SumReceived.BitsPerSecond / 1e9, retr: r.End.SumSent.Retransmits, cc: r.End.CC}
	var n float64
	for _, st := range r.End.Streams {
		if st.Sender.MeanRTT > 0 {
			res.rttUS += st.Sender.MeanRTT
			n++
		}
	}
	if n > 0 {
		res.rttUS /= n
	}
	return res, nil
}

func (t *tapSetup) ping(ctx context.Context, p tapPath, n int, tag string) (float64, float64, error) {
	out, err := t.e.output(ctx, time.Duration(n)*time.Second+time.Minute, filepath.Join(t.e.logDir("tap"), "ping-"+tag), nil,
		"ip", ipNetns(t.gns, "ping", "-c", strconv.Itoa(n), "-i", "0.01", "-W", "1", p.server)...)
	if err != nil {
		return 0, 0, err
	}
	return parsePing(out)
}

var pingTime = regexp.MustCompile(`time=([0-9.]+) ms`)

// parsePing returns the p50 and p99 of ping's round trips in µs.
func parsePing(out string) (float64, float64, error) {
	var v []float64
	for _, m := range pingTime.FindAllStringSubmatch(out, -1) {
		ms, err := strconv.ParseFloat(m[1], 64)
		if err == nil {
			v = append(v, ms*1000)
		}
	}
	if len(v) == 0 {
		return 0, 0, notUnderstood("ping printed no time= values")
	}
	slices.Sort(v)
	return percentile(v, 50), percentile(v, 99), nil
}

func (t *tapSetup) rrClient(ctx context.Context, self string, p tapPath, rounds int, tag string) (rrResult, error) {
	out, err := t.e.output(ctx, 5*time.Minute, filepath.Join(t.e.logDir("tap"), "rr-"+tag), nil,
		"ip", ipNetns(t.gns, self, "rr-client", "-addr", p.server+":7001", "-rounds", strconv.Itoa(rounds))...)
	if err != nil {
		return rrResult{}, err
	}
	var r rrResult
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &r); err != nil || r.Rounds == 0 {
		return rrResult{}, fmt.Errorf("rr-client printed %q", tail(out, 100))
	}
	return r, nil
}

// netbenchTapVeth runs `netbench -json tapveth` once per run and tabulates
// every figure it prints, grouped by its non-numeric fields.
func netbenchTapVeth(ctx context.Context, e *env, s *section) error {
	nb, err := e.build(ctx, "netbench")
	if err != nil {
		return err
	}
	dur := "3s"
	if e.quick {
		dur = "500ms"
	}
	s.ranTimes(e.runs, "out/bench/bin/netbench -json -dur %s tapveth", dur)
	var recs []jsonRecord
	for run := range e.runs {
		out, err := e.output(ctx, 10*time.Minute, filepath.Join(e.logDir("tap"), fmt.Sprintf("netbench-tapveth-run%d", run+1)), nil, nb, "-json", "-dur", dur, "tapveth")
		if err != nil {
			s.fail("netbench tapveth run %d: %v", run+1, err)
			continue
		}
		r := parseJSONLines(out, "tapveth")
		if len(r) == 0 {
			return notUnderstood("netbench -json tapveth printed no tapveth records")
		}
		recs = append(recs, r...)
	}
	if len(recs) == 0 {
		return nil
	}
	g := groupRecords(recs, []string{"path", "conns"}, []string{"gbps", "rr_us"})
	g.ratioKey, g.ratioAnchor = "path", "veth"
	s.para("`netbench tapveth` (in-process guest with the TAP attachment, the simulated host in a child process; Go TCP streamer for `-dur`, then 2000 one-byte round trips; every numeric field it prints):")
	s.table(g.header(), g.rows())
	return nil
}
