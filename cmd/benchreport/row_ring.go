package main

// VMBus ring vs DPDK's ring code: cmd/ringbench/bench.sh, which pairs
// ringbench (vmbusd's ring) and ringpeer (DPDK 22.11's ring code) as
// sender and receiver on one ring file.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

func ringRow() row {
	return row{id: "ring", title: "VMBus ring vs DPDK's ring code",
		how: "`cmd/ringbench/bench.sh` runs every sender→receiver pairing of `ringbench` (vmbusd's `vmbus` ring) and " +
			"`ringpeer` (DPDK 22.11's own VMBus ring code from Debian's packages) on one ring file in `/dev/shm`, sender " +
			"pinned to CPU 0 and receiver to CPU 1, both spinning. Throughput is payload MB/s (10^6 bytes) on the receiver's " +
			"clock; `full` mode generates and verifies a pattern in every payload, `x` mode stamps only a sequence word (the " +
			"ring's own cost). bench.sh repeats each cell and prints the median and range, which this table shows; a run moves at most 2 million packets, and at most 1 GB of payload in `full` mode or 10 GB in `x` mode (the packets column of the log). Ratios " +
			"divide medians by DPDK→DPDK's. Signals per packet are the sender's would-be hypercalls (the ring went from empty " +
			"to non-empty with the reader's interrupt mask clear).",
		run: runRing}
}

var ringBuild struct {
	sync.Mutex
	path string
	err  error
	done bool
}

// ensureRingpeer builds ringpeer and memcpy_bw from the DPDK tools once.
func ensureRingpeer(ctx context.Context, e *env) (string, error) {
	ringBuild.Lock()
	defer ringBuild.Unlock()
	if ringBuild.done {
		return ringBuild.path, ringBuild.err
	}
	ringBuild.done = true
	script := filepath.Join(e.tools, "ringpeer", "build.sh")
	switch {
	case e.tools == "":
		ringBuild.err = skipf("the DPDK tools (ringpeer) were not found: pass -tools DIR or TOOLS=DIR")
	case !exists(script):
		ringBuild.err = skipf("no %s", script)
	case !exists("/usr/include/dpdk/rte_bus_vmbus.h"):
		ringBuild.err = skipf("libdpdk-dev is not installed (apt-get install libdpdk-dev librte-bus-vmbus23, or run %s once)", script)
	default:
		dir := filepath.Join(e.work, "dpdk")
		if _, err := e.output(ctx, 5*time.Minute, filepath.Join(e.logDir("build"), "ringpeer"), nil, script, dir); err != nil {
			ringBuild.err = fmt.Errorf("build ringpeer: %w", err)
		} else {
			ringBuild.path = filepath.Join(dir, "ringpeer")
		}
	}
	return ringBuild.path, ringBuild.err
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func runRing(ctx context.Context, e *env, s *section) error {
	peer, err := ensureRingpeer(ctx, e)
	if err != nil {
		return err
	}
	rb, err := e.build(ctx, "ringbench")
	if err != nil {
		return err
	}
	args := []string{"-r", strconv.Itoa(e.runs)}
	if e.quick {
		args = append(args, "-s", "64 65536", "-g", "2M", "-n", "20000")
	} else {
		// Full mode generates and checks every payload at 0.1–2 GB/s here;
		// 1 GB per run keeps each cell to seconds and the sweep to ~20 min.
		args = append(args, "-b", "1000000000")
	}
	script := filepath.Join(e.repo, "cmd", "ringbench", "bench.sh")
	s.ran("RINGPEER=%s RINGBENCH=%s cmd/ringbench/bench.sh %s", e.rel(peer), e.rel(rb), shellArgs(args))
	out, err := e.output(ctx, 3*time.Hour, filepath.Join(e.logDir("ring"), "bench"), []string{"RINGPEER=" + peer, "RINGBENCH=" + rb}, "bash", append([]string{script}, args...)...)
	if err != nil {
		return err
	}
	cells, err := parseRingTable(out)
	if err != nil {
		return err
	}
	renderRing(s, cells)
	return nil
}

// shellArgs quotes arguments the shell would split or expand, for the
// report.
func shellArgs(args []string) string {
	var q []string
	for _, a := range args {
		if a == "" || strings.ContainsAny(a, " \t|^$*?\"'&;<>()[]{}") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		q = append(q, a)
	}
	return strings.Join(q, " ")
}

// ringCell is one line of bench.sh's table: one pairing at one size.
type ringCell struct {
	mode, ring, size, pair string
	mpps, mbps             float64
	mbpsMin, mbpsMax       float64
	signals                float64
	errors                 string
	ok                     bool
}

// parseRingTable reads bench.sh's markdown table, finding its columns by
// their header names.
func parseRingTable(out string) ([]ringCell, error) {
	tables := parseMarkdownTables(out)
	var t *mdTableData
	for i := range tables {
		if tables[i].col("sender->receiver") >= 0 {
			t = &tables[i]
			break
		}
	}
	if t == nil {
		return nil, notUnderstood("bench.sh printed no table with a \"sender->receiver\" column")
	}
	need := map[string]int{}
	for _, name := range []string{"mode", "ring/dir", "payload B", "sender->receiver", "Mpkt/s", "MB/s", "MB/s min-max", "errors"} {
		if need[name] = t.col(name); need[name] < 0 {
			return nil, notUnderstood("bench.sh's table has no %q column (header %q)", name, t.header)
		}
	}
	sigCol := t.col("sender signals/pkt")
	var cells []ringCell
	for _, r := range t.rows {
		c := ringCell{mode: r[need["mode"]], ring: r[need["ring/dir"]], size: r[need["payload B"]], pair: r[need["sender->receiver"]], errors: r[need["errors"]]}
		var err1, err2 error
		c.mpps, err1 = strconv.ParseFloat(r[need["Mpkt/s"]], 64)
		c.mbps, err2 = strconv.ParseFloat(r[need["MB/s"]], 64)
		if lo, hi, ok := strings.Cut(r[need["MB/s min-max"]], "-"); ok {
			c.mbpsMin, _ = strconv.ParseFloat(lo, 64)
			c.mbpsMax, _ = strconv.ParseFloat(hi, 64)
		}
		if sigCol >= 0 {
			c.signals, _ = strconv.ParseFloat(r[sigCol], 64)
		}
		c.ok = err1 == nil && err2 == nil
		cells = append(cells, c)
	}
	if len(cells) == 0 {
		return nil, notUnderstood("bench.sh's table has no rows")
	}
	return cells, nil
}

var ringPairs = []struct{ id, name string }{{"dpdk-dpdk", "DPDK→DPDK"}, {"go-go", "Go→Go"}, {"go-dpdk", "Go→DPDK"}, {"dpdk-go", "DPDK→Go"}}

func renderRing(s *section, cells []ringCell) {
	type key struct{ mode, ring, size string }
	var keys []key
	byKey := map[key]map[string]ringCell{}
	for _, c := range cells {
		k := key{c.mode, c.ring, c.size}
		if byKey[k] == nil {
			byKey[k] = map[string]ringCell{}
			keys = append(keys, k)
		}
		byKey[k][c.pair] = c
		if !c.ok || (c.errors != "0" && c.errors != "") {
			s.fail("ring %s %s %s B %s: errors %s", c.mode, c.ring, c.size, c.pair, c.errors)
		}
	}
	mb := func(c ringCell, ok bool) string {
		if !ok || !c.ok {
			return "–"
		}
		if c.mbpsMin == c.mbpsMax || c.mbpsMax == 0 {
			return sig3(c.mbps)
		}
		return fmt.Sprintf("%s [%s–%s]", sig3(c.mbps), sig3(c.mbpsMin), sig3(c.mbpsMax))
	}
	header := []string{"mode", "ring/dir", "payload B"}
	for _, p := range ringPairs {
		header = append(header, p.name+" MB/s")
	}
	header = append(header, "Go→Go ÷ DPDK→DPDK", "Go→DPDK ÷ DPDK→DPDK", "DPDK→Go ÷ DPDK→DPDK")
	var rows, sigRows [][]string
	for _, k := range keys {
		m := byKey[k]
		r := []string{k.mode, k.ring, k.size}
		sr := []string{k.mode, k.ring, k.size}
		for _, p := range ringPairs {
			c, ok := m[p.id]
			r = append(r, mb(c, ok))
			if ok && c.ok {
				sr = append(sr, sig3(c.signals)+" / "+sig3(c.mpps))
			} else {
				sr = append(sr, "–")
			}
		}
		base, bok := m["dpdk-dpdk"]
		for _, p := range ringPairs[1:] {
			c, ok := m[p.id]
			if ok && bok && c.ok && base.ok && base.mbps > 0 {
				r = append(r, times(c.mbps/base.mbps))
			} else {
				r = append(r, "–")
			}
		}
		rows = append(rows, r)
		sigRows = append(sigRows, sr)
	}
	s.para("Receiver MB/s, `median [min–max]` over the runs of each cell:")
	s.table(header, rows)
	sh := []string{"mode", "ring/dir", "payload B"}
	for _, p := range ringPairs {
		sh = append(sh, p.name)
	}
	s.para("Sender signals per packet / receiver Mpkt/s (medians):")
	s.table(sh, sigRows)

	for _, want := range []struct{ mode, size, pair, what string }{
		{"x", "64", "go-go", "ring only (`-x`), 64 B, Go→Go vs DPDK→DPDK"},
		{"x", "65536", "go-go", "ring only (`-x`), 64 KiB, Go→Go vs DPDK→DPDK"},
		{"x", "65536", "go-dpdk", "ring only (`-x`), 64 KiB, Go sender → DPDK reader vs DPDK→DPDK"},
		{"full", "65536", "go-go", "verified payloads, 64 KiB, Go→Go vs DPDK→DPDK"},
	} {
		for _, k := range keys {
			if k.mode != want.mode || k.size != want.size || k.ring != "2M" {
				continue
			}
			c, ok := byKey[k][want.pair]
			base, bok := byKey[k]["dpdk-dpdk"]
			if ok && bok && c.ok && base.ok && base.mbps > 0 {
				s.sum(want.what+", 2 MiB ring", sig3(c.mbps)+" MB/s", sig3(base.mbps)+" MB/s", times(c.mbps/base.mbps))
			}
		}
	}
}
