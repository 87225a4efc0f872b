package main

// The machine a report was measured on, and its load while it ran.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

type machine struct {
	cpu, flags, cores, memory, kernel, goVersion, dpdk, commit, virt string
	memcpy                                                           [][]string // region, GB/s
}

// memcpyFlags are the CPU features that decide how fast a large copy runs
// (the ring's payload copy, glibc's and Go's memmove).
var memcpyFlags = []string{"sse2", "ssse3", "sse4_2", "avx", "avx2", "avx512f", "avx512bw", "avx512vl", "erms", "fsrm", "fzrm", "fsrs", "fsrc", "movdiri", "movdir64b", "rep_good"}

func describeMachine(ctx context.Context, e *env) machine {
	m := machine{cpu: "unknown", flags: "unknown", virt: "no hypervisor flag", goVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		var hv bool
		m.cpu, m.flags, hv = parseCPUInfo(string(b))
		if hv {
			m.virt = "virtual machine (hypervisor flag set)"
		}
	}
	online := strings.TrimSpace(readFile("/sys/devices/system/cpu/online"))
	m.cores = fmt.Sprintf("%d online CPUs (%s), GOMAXPROCS %d", runtime.NumCPU(), online, runtime.GOMAXPROCS(0))
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		m.memory = fmt.Sprintf("%.1f GiB", float64(si.Totalram)*float64(si.Unit)/(1<<30))
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.kernel = unix.ByteSliceToString(u.Sysname[:]) + " " + unix.ByteSliceToString(u.Release[:]) + " " + unix.ByteSliceToString(u.Machine[:])
	}
	if out, err := exec.CommandContext(ctx, "pkg-config", "--modversion", "libdpdk").Output(); err == nil {
		m.dpdk = "DPDK " + strings.TrimSpace(string(out)) + " (Debian packages: ringpeer, dpdk-testpmd)"
	} else {
		m.dpdk = "not installed"
	}
	if out, err := exec.CommandContext(ctx, "git", "-C", e.repo, "rev-parse", "--short=12", "HEAD").Output(); err == nil {
		m.commit = strings.TrimSpace(string(out))
		st, _ := exec.CommandContext(ctx, "git", "-C", e.repo, "status", "--porcelain", "--untracked-files=no").Output()
		var dirty []string
		for _, l := range strings.Split(strings.TrimSpace(string(st)), "\n") {
			if l != "" && !strings.HasSuffix(l, "docs/performance.md") {
				dirty = append(dirty, strings.TrimSpace(l[2:]))
			}
		}
		if len(dirty) > 0 {
			m.commit += fmt.Sprintf(" with uncommitted changes to %d files", len(dirty))
		}
	}
	m.memcpy = memcpyBaseline(ctx, e)
	return m
}

// parseCPUInfo returns the first CPU's model (with vendor, family and
// model numbers), which of memcpyFlags it has, and whether it runs under a
// hypervisor.
func parseCPUInfo(s string) (model, flags string, hypervisor bool) {
	kv := map[string]string{}
	for _, l := range strings.Split(s, "\n") {
		if l == "" && len(kv) > 0 {
			break
		}
		k, v, ok := strings.Cut(l, ":")
		if ok {
			kv[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	model = kv["model name"]
	if model == "" {
		model = "unknown"
	}
	model = fmt.Sprintf("%s (%s, family %s, model %s)", model, kv["vendor_id"], kv["cpu family"], kv["model"])
	have := map[string]bool{}
	for _, f := range strings.Fields(kv["flags"]) {
		have[f] = true
	}
	var yes, no []string
	for _, f := range memcpyFlags {
		if have[f] {
			yes = append(yes, f)
		} else {
			no = append(no, f)
		}
	}
	flags = strings.Join(yes, " ")
	if len(no) > 0 {
		flags += "; absent: " + strings.Join(no, " ")
	}
	return model, flags, have["hypervisor"]
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

// memcpyBaseline runs the DPDK tools' memcpy_bw (glibc memcpy of 64 KiB
// blocks, one core) into three destination sizes, when it is built.
func memcpyBaseline(ctx context.Context, e *env) [][]string {
	bin := filepath.Join(e.work, "dpdk", "memcpy_bw")
	if _, err := ensureRingpeer(ctx, e); err != nil {
		return [][]string{{"skipped: " + strings.TrimPrefix(err.Error(), "skipped: "), "–"}}
	}
	total := "4294967296"
	if e.quick {
		total = "268435456"
	}
	var rows [][]string
	for _, reg := range []struct{ name, bytes string }{{"64 KiB (L1/L2)", "65536"}, {"4 MiB (a 2 MiB ring pair)", "4194304"}, {"256 MiB (DRAM)", "268435456"}} {
		var v runs
		for range e.runs {
			out, err := exec.CommandContext(ctx, bin, "65536", reg.bytes, total).Output()
			if err != nil {
				break
			}
			if g, ok := kvField(string(out), "GBps"); ok {
				v = append(v, g)
			}
		}
		rows = append(rows, []string{reg.name, v.cell(sig3)})
	}
	return rows
}

// kvField reads "key=value" from a line of fields.
func kvField(s, key string) (float64, bool) {
	for _, f := range strings.Fields(s) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			x, err := strconv.ParseFloat(v, 64)
			return x, err == nil
		}
	}
	return 0, false
}

func (rep *report) renderMachine(measured []string) string {
	m := rep.machine
	var b strings.Builder
	b.WriteString("## Machine\n\n")
	mode := fmt.Sprintf("%d runs per figure", rep.runs)
	if rep.quick {
		mode = "-quick: one short run per figure (a smoke test of the harness; the figures mean little)"
	}
	rows := [][]string{
		{"Date", fmt.Sprintf("%s UTC, %s for the rows measured in this run (%s); %s", rep.started.UTC().Format("2006-01-02 15:04"), rep.elapsed.Round(time.Second), strings.Join(measured, ", "), mode)},
		{"Commit", m.commit},
		{"CPU", m.cpu},
		{"memcpy-related CPU flags", m.flags},
		{"Cores", m.cores},
		{"Memory", m.memory},
		{"Virtualisation", m.virt},
		{"Kernel", m.kernel},
		{"Go", m.goVersion},
		{"DPDK", m.dpdk},
		{"Load average", fmt.Sprintf("1-minute load average sampled every 2 s during the run: %s (each section gives its own)", rep.load)},
	}
	for _, r := range rows {
		if strings.TrimSpace(r[1]) == "" {
			r[1] = "unknown"
		}
	}
	b.WriteString(mdTable([]string{"what", "this run"}, rows))
	b.WriteString("\n")
	b.WriteString("Sections kept from an earlier run (with `-only`) carry their own date and load in their status line.\n\n")
	if len(m.memcpy) > 0 {
		b.WriteString("memcpy baseline, one core, glibc `memcpy` of 64 KiB blocks into a destination of the given size " +
			"(`memcpy_bw` from the DPDK tools, GB/s):\n\n")
		b.WriteString(mdTable([]string{"destination", "GB/s"}, m.memcpy))
		b.WriteString("\n")
	}
	return b.String()
}

// loadSampler reads /proc/loadavg periodically.
type loadSampler struct {
	mu      sync.Mutex
	samples []loadSample
	done    chan struct{}
	wg      sync.WaitGroup
}

type loadSample struct {
	t    time.Time
	load float64
}

func startLoadSampler(every time.Duration) *loadSampler {
	l := &loadSampler{done: make(chan struct{})}
	l.sample()
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				l.sample()
			case <-l.done:
				return
			}
		}
	}()
	return l
}

func (l *loadSampler) sample() {
	f := strings.Fields(readFile("/proc/loadavg"))
	if len(f) == 0 {
		return
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return
	}
	l.mu.Lock()
	l.samples = append(l.samples, loadSample{time.Now(), v})
	l.mu.Unlock()
}

func (l *loadSampler) stop() {
	close(l.done)
	l.wg.Wait()
}

// between summarises the samples taken from a to b (and one just before,
// so a short interval has at least one).
func (l *loadSampler) between(a, b time.Time) loadStats {
	l.sample()
	l.mu.Lock()
	defer l.mu.Unlock()
	var v runs
	var before *loadSample
	for i := range l.samples {
		s := l.samples[i]
		switch {
		case s.t.Before(a):
			before = &l.samples[i]
		case !s.t.After(b):
			v = append(v, s.load)
		}
	}
	if len(v) == 0 && before != nil {
		v = append(v, before.load)
	}
	st := loadStats{n: len(v)}
	if len(v) > 0 {
		var sum float64
		for _, x := range v {
			sum += x
		}
		st.min, st.max, st.mean = v.min(), v.max(), sum/float64(len(v))
	}
	return st
}

type loadStats struct {
	n              int
	min, max, mean float64
}

func (s loadStats) String() string {
	if s.n == 0 {
		return "not sampled"
	}
	return fmt.Sprintf("%.1f–%.1f, mean %.1f (%d samples, %d CPUs)", s.min, s.max, s.mean, s.n, runtime.NumCPU())
}
