package main

// netvsc vs DPDK's netvsc PMD: testpmd's txonly mode (Debian's binary,
// unmodified, through the dpdk-guest harness) and netbench's txonly test,
// each against its own `vmbusd sim` with a discarding port and the same
// flags, back to back.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

func dpdkRow() row {
	return row{id: "dpdk-netvsc", title: "netvsc transmit vs DPDK's netvsc PMD",
		how: "Both guests transmit against `vmbusd sim --abs-links --test 0 --nic 1 --port sink --memory proc` (a host in its " +
			"own process whose vSwitch port counts and drops every frame), one fresh host per measurement, the DPDK " +
			"measurement and the vmbusd one back to back. **DPDK**: Debian's `dpdk-testpmd` (DPDK 22.11's netvsc PMD, " +
			"unmodified) through `../shared/tools/dpdk-guest/run.sh` with `FWD=txonly TXPKTS=<frame> QUEUES=<queues>`, i.e. " +
			"`--forward-mode=txonly --txpkts=<frame> --rxq/--txq=<queues> --stats-period 1 -l 0-1`: one busy-polling " +
			"forwarding lcore (pinned to CPU 1) serves every queue. Its rate is the growth of the port's `TX-packets` " +
			"between the first and the last once-a-second statistics block with traffic, over the time between them; its " +
			"CPU is `utime+stime` of the `dpdk-testpmd` process (all threads) from `/proc/<pid>/stat`, read when each block " +
			"appears, over the same window. **vmbusd**: `netbench txonly -root R` drives the same host's NIC with " +
			"`netvsc.Config{Queues: <queues>}` (defaults otherwise: hybrid waiting), `-workers 1` and `-rx=false`: one goroutine serves every " +
			"queue in turn, as testpmd's one forwarding lcore does (a goroutine per queue would compete for this machine's two " +
			"cores with the simulated host's per-channel threads, which a real host does not), calling " +
			"`AllocBurst`/`TxBurst` with 32 frames per queue as fast as the rings take them, and no goroutine polls a receive " +
			"queue, as testpmd's txonly polls none: `TxBurst` and `WaitTx` reap the host's send completions themselves. The same " +
			"netbench with `-rx=true` (a hybrid `Wait`/`RxBurst` loop per queue beside the transmitter, as an application that " +
			"also receives runs) is measured third, against a fresh host, and shown in its own columns: on these two cores those loops take " +
			"CPU from the transmitter and the host. netbench reports frames accepted per second and " +
			"process CPU (getrusage) over a window after a 300 ms warm-up. The host's CPU is its process's `/proc` time " +
			"over the same windows. Rate ratio and CPU ratio are vmbusd ÷ DPDK, run by run; DPDK counts frames its ring " +
			"refused as dropped and does not retry them, vmbusd waits for ring space; both count only frames the driver " +
			"accepted. From the simulated host's closing line: the share of sends that were GPA-direct (the host reads those frames " +
			"from the guest's memory, here through `/proc/<pid>/mem`, instead of a send-buffer section) and its count of " +
			"guest protocol violations (`guest violations total`). DPDK 22.11 packs frames of up to 512 B eight to a " +
			"send section and sends larger ones GPA-direct, which this host reads from the guest's memory with a system " +
			"call per range: at 1024 B the GPA-direct and host CPU columns show how much of DPDK's figure is the " +
			"simulated host's cost rather than the driver's.",
		run: runDPDK}
}

type txPoint struct{ size, queues int }

// txMeasure is one transmit measurement.
type txMeasure struct {
	pps, cpuPerM, hostCPUPerM float64
	violations                int
	gpaShare                  float64 // of the host's sends, GPA-direct; -1 when not printed
}

func runDPDK(ctx context.Context, e *env, s *section) error {
	if err := needRoot("testpmd (private mount namespace)"); err != nil {
		return err
	}
	if e.tools == "" {
		return skipf("the DPDK tools (dpdk-guest) were not found: pass -tools DIR or TOOLS=DIR")
	}
	runsh := filepath.Join(e.tools, "dpdk-guest", "run.sh")
	if !exists(runsh) {
		return skipf("no %s", runsh)
	}
	if err := needCommands("dpdk-testpmd", "unshare", "cc", "pkg-config", "python3"); err != nil {
		return err
	}
	vm, err := e.build(ctx, "vmbusd")
	if err != nil {
		return err
	}
	nb, err := e.build(ctx, "netbench")
	if err != nil {
		return err
	}
	points := []txPoint{{64, 1}, {64, 2}, {1024, 1}, {1024, 2}}
	secs, dur := 14, 8*time.Second
	if e.quick {
		points, secs, dur = []txPoint{{64, 1}, {1024, 2}}, 9, 2*time.Second
	}
	s.ran(`OUT=DIR R=/dev/shm/… FWD=txonly TXPKTS=<frame> QUEUES=<queues> HOST_CMD='exec out/bench/bin/vmbusd sim --root "$R" --abs-links --test 0 --nic 1 --port sink --memory proc' ../shared/tools/dpdk-guest/run.sh %d`, secs)
	s.ran("out/bench/bin/vmbusd sim --root R --abs-links --test 0 --nic 1 --port sink --memory proc & out/bench/bin/netbench -json -root R -host-pid PID -queues <queues> -workers 1 -rx=<false, then true> -size <frame> -dur %s txonly", dur)

	// rx pairs vmbusd's rate with receive loops running and DPDK's from
	// the same run, kept apart so that a failure of that extra
	// measurement does not cost the run its headline pair.
	type result struct {
		dpdk, vm []txMeasure
		rxV, rxD runs
	}
	res := map[txPoint]*result{}
	for _, p := range points {
		res[p] = &result{}
	}
	for run := range e.runs {
		for _, p := range points {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			name := fmt.Sprintf("%dB-%dq-run%d", p.size, p.queues, run+1)
			d, derr := testpmdTx(ctx, e, runsh, vm, p, secs, name)
			if derr != nil {
				s.fail("testpmd txonly %d B, %d queue(s), run %d: %v", p.size, p.queues, run+1, derr)
			}
			v, verr := netbenchTx(ctx, e, vm, nb, p, dur, false, name)
			if verr != nil {
				s.fail("netbench txonly %d B, %d queue(s), run %d: %v", p.size, p.queues, run+1, verr)
			}
			vr, rerr := netbenchTx(ctx, e, vm, nb, p, dur, true, name+"-rx")
			if rerr != nil {
				s.fail("netbench txonly -rx %d B, %d queue(s), run %d: %v", p.size, p.queues, run+1, rerr)
			}
			e.progress("  %s: vmbusd %.3g pps (%v), with receive loops %.3g pps (%v), DPDK %.3g pps (%v)", name, v.pps, verr, vr.pps, rerr, d.pps, derr)
			if derr == nil && verr == nil {
				res[p].dpdk = append(res[p].dpdk, d)
				res[p].vm = append(res[p].vm, v)
			}
			if derr == nil && rerr == nil {
				res[p].rxV = append(res[p].rxV, vr.pps)
				res[p].rxD = append(res[p].rxD, d.pps)
			}
		}
	}
	var rows [][]string
	measured := 0
	for _, p := range points {
		r := res[p]
		var vp, dp, vc, dc, vh, dh, vg, dg runs
		vv, dv := 0, 0
		for i := range r.vm {
			vp, dp = append(vp, r.vm[i].pps), append(dp, r.dpdk[i].pps)
			vc, dc = append(vc, r.vm[i].cpuPerM), append(dc, r.dpdk[i].cpuPerM)
			vh, dh = append(vh, r.vm[i].hostCPUPerM), append(dh, r.dpdk[i].hostCPUPerM)
			if r.vm[i].gpaShare >= 0 {
				vg = append(vg, r.vm[i].gpaShare)
			}
			if r.dpdk[i].gpaShare >= 0 {
				dg = append(dg, r.dpdk[i].gpaShare)
			}
			vv += r.vm[i].violations
			dv += r.dpdk[i].violations
		}
		measured += len(r.vm)
		viol := "–"
		if len(r.vm) > 0 {
			viol = fmt.Sprintf("%d / %d", vv, dv)
		}
		rows = append(rows, []string{strconv.Itoa(p.size), strconv.Itoa(p.queues),
			vp.cell(scaled(1e6)), dp.cell(scaled(1e6)), ratios(vp, dp).cell(times),
			r.rxV.cell(scaled(1e6)), ratios(r.rxV, r.rxD).cell(times),
			vc.cell(sig3), dc.cell(sig3), ratios(vc, dc).cell(times),
			vh.cell(sig3), dh.cell(sig3), vg.cell(pct) + " / " + dg.cell(pct), viol})
		if len(vp) > 0 {
			s.sum(fmt.Sprintf("netvsc transmit (txonly), %d B, %d queue(s), Mpps", p.size, p.queues), scaled(1e6)(vp.median()), scaled(1e6)(dp.median()), ratios(vp, dp).cell(times))
			if p == points[0] {
				s.sum(fmt.Sprintf("netvsc transmit guest CPU-s per Mpkt, %d B, %d queue", p.size, p.queues), sig3(vc.median()), sig3(dc.median()), ratios(vc, dc).cell(times))
			}
		}
	}
	if measured == 0 {
		return fmt.Errorf("no measurement succeeded: %s", strings.Join(s.failures, "; "))
	}
	s.table([]string{"frame B", "queues", "vmbusd Mpps", "DPDK Mpps", "rate vmbusd ÷ DPDK",
		"vmbusd Mpps, receive loops running", "rate with receive loops ÷ DPDK", "vmbusd guest CPU-s/Mpkt", "DPDK guest CPU-s/Mpkt",
		"CPU vmbusd ÷ DPDK", "host CPU-s/Mpkt (vmbusd)", "host CPU-s/Mpkt (DPDK)", "GPA-direct sends vmbusd / DPDK", "host-counted violations vmbusd / DPDK"}, rows)
	return nil
}

// testpmdTx runs testpmd txonly once and measures it from its statistics
// blocks and /proc.
func testpmdTx(ctx context.Context, e *env, runsh, vmbusd string, p txPoint, secs int, name string) (txMeasure, error) {
	dir := e.freshLogDir("dpdk-netvsc", "testpmd-"+name)
	root := fmt.Sprintf("/dev/shm/benchreport-%d-testpmd", os.Getpid())
	os.RemoveAll(root)
	defer os.RemoveAll(root)
	hostCmd := fmt.Sprintf(`exec %s sim --root "$R" --abs-links --test 0 --nic 1 --port sink --memory proc`, vmbusd)
	envs := []string{"FWD=txonly", "TXPKTS=" + strconv.Itoa(p.size), "QUEUES=" + strconv.Itoa(p.queues), "OUT=" + dir, "R=" + root, "HOST_CMD=" + hostCmd}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second+3*time.Minute)
	defer cancel()
	cmd := command(ctx, e.repo, envs, "bash", runsh, strconv.Itoa(secs))
	logf, err := os.Create(filepath.Join(dir, "run.out"))
	if err != nil {
		return txMeasure{}, err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return txMeasure{}, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	var samples []txSample
	var sc statsScanner
	blocks := 0
	var tp, host int
	var off int64
	logPath := filepath.Join(dir, "testpmd.log")
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var runErr error
poll:
	for {
		select {
		case runErr = <-done:
			break poll
		case <-tick.C:
		}
		if tp == 0 {
			tp = findProc(func(_ string, argv, environ []string) bool {
				return filepath.Base(argv[0]) == "dpdk-testpmd" && contains(environ, "VMBUSD_ROOT="+root)
			})
		}
		if host == 0 {
			host = findProc(func(_ string, argv, _ []string) bool {
				return argv[0] == vmbusd && len(argv) > 1 && argv[1] == "sim" && contains(argv, root)
			})
		}
		chunk, n := readFrom(logPath, off)
		off += n
		for _, tx := range sc.feed(chunk) {
			blocks++
			if tp == 0 {
				continue
			}
			c, err1 := procCPU(tp)
			h, err2 := procCPU(host)
			if err1 == nil && err2 == nil {
				samples = append(samples, txSample{time.Now(), tx, c, h})
			}
		}
	}
	killGroup(cmd)
	if ctx.Err() != nil {
		return txMeasure{}, fmt.Errorf("run.sh timed out (logs in %s)", e.rel(dir))
	}
	m, err := txFromSamples(samples)
	if err != nil {
		return txMeasure{}, fmt.Errorf("%v (%d blocks seen, testpmd pid %d, host pid %d; run.sh: %v; logs in %s)", err, blocks, tp, host, runErr, e.rel(dir))
	}
	hostOut, _ := os.ReadFile(filepath.Join(dir, "host.out"))
	v, ok := hostViolations(string(hostOut))
	if !ok {
		return txMeasure{}, fmt.Errorf("the host printed no \"guest violations total\" line (logs in %s)", e.rel(dir))
	}
	m.violations = v
	m.gpaShare = hostGPAShare(string(hostOut))
	return m, nil
}

var sendsLine = regexp.MustCompile(`sends (\d+) \(section \d+, gpa-direct (\d+);`)

// hostGPAShare reads the share of the guest's sends that were GPA-direct
// from the simulated host's closing NIC line, or -1.
func hostGPAShare(out string) float64 {
	m := sendsLine.FindStringSubmatch(out)
	if m == nil {
		return -1
	}
	sends, _ := strconv.ParseFloat(m[1], 64)
	gpa, _ := strconv.ParseFloat(m[2], 64)
	if sends == 0 {
		return -1
	}
	return gpa / sends
}

// readFrom returns what path holds from off on.
func readFrom(path string, off int64) (string, int64) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return "", 0
	}
	b, _ := io.ReadAll(f)
	return string(b), int64(len(b))
}

// txSample is testpmd's cumulative TX count when a statistics block
// appeared, with the CPU seconds of testpmd and of the host then.
type txSample struct {
	t            time.Time
	tx           uint64
	cpu, hostCPU float64
}

// txFromSamples measures between the first and the last sample with
// traffic.
func txFromSamples(samples []txSample) (txMeasure, error) {
	var live []txSample
	for _, x := range samples {
		if x.tx > 0 {
			live = append(live, x)
		}
	}
	if len(live) < 2 {
		return txMeasure{}, fmt.Errorf("testpmd printed %d statistics blocks with traffic; two are needed", len(live))
	}
	a, b := live[0], live[len(live)-1]
	el := b.t.Sub(a.t).Seconds()
	pk := float64(b.tx - a.tx)
	if el <= 0 || pk <= 0 {
		return txMeasure{}, fmt.Errorf("no traffic between statistics blocks")
	}
	return txMeasure{pps: pk / el, cpuPerM: (b.cpu - a.cpu) / (pk / 1e6), hostCPUPerM: (b.hostCPU - a.hostCPU) / (pk / 1e6)}, nil
}

// statsScanner finds port 0's TX-packets in testpmd's periodic "NIC
// statistics for port 0" blocks as its log grows.
type statsScanner struct {
	partial string
	inBlock bool
}

var txPackets = regexp.MustCompile(`TX-packets:\s+(\d+)`)

// feed takes the log's next bytes and returns the TX counts of the blocks
// completed in them.
func (sc *statsScanner) feed(chunk string) []uint64 {
	var out []uint64
	text := sc.partial + chunk
	i := strings.LastIndexByte(text, '\n')
	if i < 0 {
		sc.partial = text
		return nil
	}
	sc.partial = text[i+1:]
	s := bufio.NewScanner(strings.NewReader(text[:i]))
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		l := s.Text()
		switch {
		case strings.Contains(l, "NIC statistics for port 0"):
			sc.inBlock = true
		case sc.inBlock && strings.Contains(l, "TX-packets:"):
			if m := txPackets.FindStringSubmatch(l); m != nil {
				v, _ := strconv.ParseUint(m[1], 10, 64)
				out = append(out, v)
			}
			sc.inBlock = false
		}
	}
	return out
}

var violationsLine = regexp.MustCompile(`(?m)^guest violations total (\d+)$`)

// hostViolations reads the simulated host's closing count of guest
// protocol violations.
func hostViolations(out string) (int, bool) {
	m := violationsLine.FindStringSubmatch(out)
	if m == nil {
		return 0, false
	}
	v, err := strconv.Atoi(m[1])
	return v, err == nil
}

// netbenchTx runs netbench txonly once against a fresh `vmbusd sim`, with
// a receive loop per queue when rx is set.
func netbenchTx(ctx context.Context, e *env, vmbusd, netbench string, p txPoint, dur time.Duration, rx bool, name string) (txMeasure, error) {
	dir := e.freshLogDir("dpdk-netvsc", "vmbusd-"+name)
	root := fmt.Sprintf("/dev/shm/benchreport-%d-netbench", os.Getpid())
	os.RemoveAll(root)
	defer os.RemoveAll(root)
	sim, err := e.start(ctx, filepath.Join(dir, "sim"), nil, vmbusd, "sim", "--root", root, "--abs-links", "--test", "0", "--nic", "1", "--port", "sink", "--memory", "proc")
	if err != nil {
		return txMeasure{}, err
	}
	defer sim.stop(10 * time.Second)
	if _, err := sim.out.waitFor(ctx, "ready root", time.Minute); err != nil {
		return txMeasure{}, fmt.Errorf("vmbusd sim: %v: %s", err, tail(sim.err.text(), 300))
	}
	out, err := e.output(ctx, dur+2*time.Minute, filepath.Join(dir, "netbench"), nil, netbench, "-json", "-root", root, "-host-pid", strconv.Itoa(sim.pid()),
		"-queues", strconv.Itoa(p.queues), "-workers", "1", "-rx="+strconv.FormatBool(rx), "-size", strconv.Itoa(p.size), "-dur", dur.String(), "txonly")
	if err != nil {
		return txMeasure{}, err
	}
	sim.stop(10 * time.Second)
	recs := parseJSONLines(out, "txonly")
	if len(recs) != 1 {
		return txMeasure{}, notUnderstood("netbench txonly printed %d txonly records", len(recs))
	}
	var m txMeasure
	var ok1, ok2, ok3 bool
	m.pps, ok1 = recs[0].num("pps")
	m.cpuPerM, ok2 = recs[0].num("guest_cpu_s_per_mpkt")
	m.hostCPUPerM, ok3 = recs[0].num("host_cpu_s_per_mpkt")
	if !ok1 || !ok2 || !ok3 {
		return txMeasure{}, notUnderstood("netbench txonly record lacks pps, guest_cpu_s_per_mpkt or host_cpu_s_per_mpkt: %v", recs[0])
	}
	v, ok := hostViolations(sim.out.text())
	if !ok {
		return txMeasure{}, fmt.Errorf("vmbusd sim printed no \"guest violations total\" line")
	}
	m.violations = v
	m.gpaShare = hostGPAShare(sim.out.text())
	return m, nil
}
