package main

// hv_sock vs a Unix stream socket pair: cmd/hvsockbench's vsunix table
// (default rings) and its ringsize table at the largest ring, both from
// the same process run.

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

func hvsockRow() row {
	return row{id: "hvsock", title: "hv_sock vs a Unix stream socket pair",
		how: "`hvsockbench` runs vmbusd's user-space hv_sock transport against the simulated host in its own process " +
			"(guest writer, host reader, one connection per transfer) and a Unix stream socket pair in the same process, " +
			"alternately, one transfer of each per run at 128 B, 4 KiB and 64 KiB writes. MB/s is 10^6 bytes per second over " +
			"the transfer; CPU s/GB is the process's user+system CPU (both ends, and for hv_sock the simulated host) per " +
			"10^9 bytes. Its `vsunix` table uses the default rings; its `ringsize` table, from the same run, gives hv_sock " +
			"with the largest ring the transport allows (256 KiB) on the writer's side (send ring, guest writer) and on the " +
			"reader's side (receive ring, host writer). Every column `hvsockbench` prints is shown; ratios divide hv_sock by " +
			"the Unix socket pair of the same run. Then the tables of the kernel seeds hvsockbench reproduces (the send " +
			"loop and the ring-size sweep) follow as it prints them, from one run of `-iterations N` (each cell is its " +
			"min/max/avg/median over the iterations).",
		run: runHvsock}
}

func runHvsock(ctx context.Context, e *env, s *section) error {
	hb, err := e.build(ctx, "hvsockbench")
	if err != nil {
		return err
	}
	size := "1G"
	if e.quick {
		size = "16M"
	}
	args := []string{"-table", "vsunix,ringsize", "-iterations", "1", "-vsunix-size", size, "-ringsize-size", size, "-rings", "256K", "-writes", "128,4K,64K"}
	s.ranTimes(e.runs, "out/bench/bin/hvsockbench %s", shellArgs(args))
	h := newHvsockSeries()
	for run := range e.runs {
		out, err := e.output(ctx, 30*time.Minute, filepath.Join(e.logDir("hvsock"), fmt.Sprintf("run%d", run+1)), nil, hb, args...)
		if err != nil {
			s.fail("hvsockbench run %d: %v", run+1, err)
			continue
		}
		if err := h.add(out); err != nil {
			return err
		}
	}
	if len(h.writes) == 0 {
		return fmt.Errorf("no hvsockbench run succeeded: %s", strings.Join(s.failures, "; "))
	}
	h.render(s)
	return hvsockSeeds(ctx, e, s)
}

// hvsockSeeds runs hvsockbench's seed tables once with -iterations runs
// and carries every table it prints into the report, each with its
// heading and the line above it.
func hvsockSeeds(ctx context.Context, e *env, s *section) error {
	hb, err := e.build(ctx, "hvsockbench")
	if err != nil {
		return err
	}
	loop, cell := "1G", "256M"
	if e.quick {
		loop, cell = "16M", "4M"
	}
	args := []string{"-table", "sendloop,ringsize", "-iterations", strconv.Itoa(e.runs), "-sendloop-size", loop, "-ringsize-size", cell}
	s.ranTimes(1, "out/bench/bin/hvsockbench %s", shellArgs(args))
	out, err := e.output(ctx, 2*time.Hour, filepath.Join(e.logDir("hvsock"), "seeds"), nil, hb, args...)
	if err != nil {
		s.fail("hvsockbench seed tables: %v", err)
		return nil
	}
	tables := parseMarkdownTables(out)
	if len(tables) == 0 {
		return notUnderstood("hvsockbench -table sendloop,ringsize printed no table")
	}
	for _, t := range tables {
		s.para("*%s* — %s", t.heading, strings.TrimSuffix(t.caption, ":"))
		s.table(t.header, t.rows)
	}
	return nil
}

// hvsockSeries collects every figure hvsockbench printed, by column and
// write size.
type hvsockSeries struct {
	writes []string // write-size labels, in order
	cols   []string // series names, in order
	vals   map[string]map[string]runs
}

func newHvsockSeries() *hvsockSeries { return &hvsockSeries{vals: map[string]map[string]runs{}} }

func (h *hvsockSeries) put(col, write string, v float64) {
	if h.vals[col] == nil {
		h.vals[col] = map[string]runs{}
		h.cols = append(h.cols, col)
	}
	if !contains(h.writes, write) {
		h.writes = append(h.writes, write)
	}
	h.vals[col][write] = append(h.vals[col][write], v)
}

// add parses one hvsockbench output: the table with a Unix MB/s column
// (rows: write sizes), and the ring-size tables' 256K rows.
func (h *hvsockSeries) add(out string) error {
	tables := parseMarkdownTables(out)
	found := false
	for _, t := range tables {
		if unixCol(t.header, "MB/s") < 0 {
			continue
		}
		found = true
		rings := -1
		for i, c := range t.header {
			if strings.EqualFold(c, "rings") {
				rings = i
			}
		}
		for _, r := range t.rows {
			// A row per write size and ring size: rows with other than
			// the default rings are a series of their own, so that each
			// hv_sock figure is paired with the Unix run of its own row.
			write := r[0]
			if rings > 0 && rings < len(r) && !strings.Contains(r[rings], "default") {
				if f := strings.Fields(r[rings]); len(f) > 0 {
					write += ", " + f[0] + " rings"
				}
			}
			for i := 1; i < len(t.header) && i < len(r); i++ {
				if i == rings {
					continue
				}
				if v, ok := leadingFloat(r[i]); ok {
					h.put(t.header[i], write, v)
				}
			}
		}
	}
	if !found {
		return notUnderstood("hvsockbench printed no table with a Unix MB/s column (the vsunix table)")
	}
	for _, t := range tables {
		if len(t.header) == 0 {
			continue
		}
		var name string
		switch first := strings.ToLower(t.header[0]); {
		case strings.Contains(first, "send ring"):
			name = "hv_sock MB/s, 256K send ring"
		case strings.Contains(first, "recv ring"), strings.Contains(first, "receive ring"):
			name = "hv_sock MB/s, 256K receive ring (host writer)"
		default:
			continue
		}
		for _, r := range t.rows {
			if !strings.HasPrefix(r[0], "256K") {
				continue
			}
			for i := 1; i < len(t.header) && i < len(r); i++ {
				// A cell is min/max/avg/median; the median is last.
				f := strings.Split(r[i], "/")
				if v, ok := leadingFloat(f[len(f)-1]); ok {
					h.put(name, t.header[i], v)
				}
			}
		}
	}
	return nil
}

// unixCol finds the Unix socket's column whose header also names unit.
func unixCol(header []string, unit string) int {
	for i, c := range header {
		l := strings.ToLower(c)
		if strings.Contains(l, "unix") && strings.Contains(l, strings.ToLower(unit)) {
			return i
		}
	}
	return -1
}

// leadingFloat reads the number a cell starts with ("1394", "0.714 s").
func leadingFloat(s string) (float64, bool) {
	f := strings.Fields(strings.ReplaceAll(s, ",", ""))
	if len(f) == 0 {
		return 0, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	return v, err == nil
}

func (h *hvsockSeries) render(s *section) {
	unixMB, unixCPU := "", ""
	for _, c := range h.cols {
		l := strings.ToLower(c)
		switch {
		case strings.Contains(l, "unix") && strings.Contains(l, "mb/s"):
			unixMB = c
		case strings.Contains(l, "unix") && strings.Contains(l, "cpu"):
			unixCPU = c
		}
	}
	header := []string{"write"}
	header = append(header, h.cols...)
	type ratioCol struct{ num, den string }
	var rc []ratioCol
	for _, c := range h.cols {
		l := strings.ToLower(c)
		if strings.Contains(l, "unix") || strings.Contains(l, "ratio") {
			continue // hvsockbench's own ratio columns are not rates to divide
		}
		switch {
		case strings.Contains(l, "mb/s") && unixMB != "":
			rc = append(rc, ratioCol{c, unixMB})
		case strings.Contains(l, "cpu") && unixCPU != "":
			rc = append(rc, ratioCol{c, unixCPU})
		}
	}
	for _, r := range rc {
		header = append(header, r.num+" ÷ "+r.den)
	}
	// The ring-size tables' columns were measured apart from the Unix
	// runs, so they are divided median by median, not run by run.
	ratio := func(r ratioCol, w string) runs {
		a, b := h.vals[r.num][w], h.vals[r.den][w]
		if strings.Contains(r.num, " ring") {
			return ratioOfMedians(a, b)
		}
		return ratios(a, b)
	}
	var rows [][]string
	for _, w := range h.writes {
		row := []string{w}
		for _, c := range h.cols {
			row = append(row, h.vals[c][w].cell(sig3))
		}
		for _, r := range rc {
			row = append(row, ratio(r, w).cell(times))
		}
		rows = append(rows, row)
	}
	s.table(header, rows)
	for _, r := range rc {
		if strings.Contains(r.num, " ring") {
			continue
		}
		cpu := !strings.Contains(strings.ToLower(r.num), "mb/s")
		for _, w := range h.writes {
			a, b := h.vals[r.num][w], h.vals[r.den][w]
			// The summary keeps throughput at every size with the default
			// rings and at 64 KiB with the largest rings (the large-write
			// goal), and CPU per GB at 64 KiB (no worse than Unix).
			large, defaultRings := strings.HasPrefix(w, "64K"), !strings.Contains(w, " rings")
			if len(a) == 0 || len(b) == 0 || (!defaultRings && !large) || (cpu && !large) {
				continue
			}
			s.sum(fmt.Sprintf("%s writes: %s vs %s", w, r.num, r.den), sig3(a.median()), sig3(b.median()), ratio(r, w).cell(times))
		}
	}
}
