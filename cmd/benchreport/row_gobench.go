package main

// In-process Go benchmarks of the data paths (go test -bench), with
// benchstat's tables.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

func gobenchRow() row {
	return row{id: "gobench", title: "In-process benchmarks: netvsc bursts and the VMBus ring",
		how: "`go test -run '^$' -bench REGEX -benchmem -count N` in each package: the guest and the simulated host run in " +
			"one process (so their CPU is shared, and every figure includes the host's work). `BenchmarkNetvscRxBurst` " +
			"(host→guest from a generator port, one queue, hybrid) and `BenchmarkNetvscTxBurst` (guest→host) use 2 MiB rings, " +
			"31 MiB receive and 16 MiB send buffers; their `guest-ns/pkt` is the CPU time of the guest's own thread (the benchmark " +
			"goroutine is locked to it) per packet, so 1000 ÷ guest-ns/pkt is the Mpps one queue would reach if the simulated " +
			"host cost nothing; " +
			"`BenchmarkRingSendBurst`, `BenchmarkRingCrossCore` and " +
			"`BenchmarkChannelEcho` measure the ring alone, across two spinning goroutines, and a channel end to end. The " +
			"table gives every metric the benchmarks report, `median [min–max]` over the N counts (at least 6, so benchstat " +
			"can give a confidence interval); benchstat's summary of sec/op, pkts/s, guest-ns/pkt and allocs/op (median ± 95 % confidence " +
			"interval) follows each table.",
		run: runGobench}
}

var gobenchSets = []struct{ name, pkg, regex string }{
	{"netvsc", "./netvsc", "NetvscRxBurst|NetvscTxBurst"},
	{"vmbus", "./vmbus", "RingSendBurst|RingCrossCore|ChannelEcho"},
}

func runGobench(ctx context.Context, e *env, s *section) error {
	for _, set := range gobenchSets {
		// benchstat needs six samples for a confidence interval.
		count := e.runs
		if !e.quick {
			count = max(count, 6)
		}
		args := []string{"test", "-run", "^$", "-bench", set.regex, "-benchmem", "-count", strconv.Itoa(count)}
		if e.quick {
			args = append(args, "-benchtime", "100ms")
		}
		args = append(args, set.pkg)
		s.ran("go %s", shellArgs(args))
		base := filepath.Join(e.logDir("gobench"), set.name)
		out, err := e.output(ctx, time.Hour, base, nil, "go", args...)
		if err != nil {
			s.fail("go test -bench %s: %v", set.pkg, err)
			continue
		}
		lines := parseBenchOutput(out)
		if len(lines) == 0 {
			return notUnderstood("go test -bench '%s' %s printed no benchmark results (renamed benchmarks?)", set.regex, set.pkg)
		}
		s.para("`%s`:", set.pkg)
		s.table(benchTable(lines))
		raw := base + ".txt"
		os.WriteFile(raw, []byte(out), 0o644)
		st, err := e.output(ctx, 10*time.Minute, base+"-benchstat", nil, "go", "run", "golang.org/x/perf/cmd/benchstat@latest", set.name+"="+raw)
		if err != nil {
			s.para("benchstat could not run: %s", oneLine(err.Error()))
			continue
		}
		s.code(benchstatUnits(st, "sec/op", "pkts/s", "guest-ns/pkt", "allocs/op"))
	}
	if len(s.failures) == len(gobenchSets) {
		return fmt.Errorf("no package's benchmarks ran: %s", strings.Join(s.failures, "; "))
	}
	s.ran("go run golang.org/x/perf/cmd/benchstat@latest NAME=FILE")
	return nil
}

// benchTable turns benchmark lines into one row per benchmark and one
// column per unit, min/median/max over the counts.
func benchTable(lines []benchLine) ([]string, [][]string) {
	var names, units []string
	vals := map[string]map[string]runs{}
	for _, l := range lines {
		if vals[l.name] == nil {
			vals[l.name] = map[string]runs{}
			names = append(names, l.name)
		}
		for _, u := range l.units {
			if !contains(units, u) {
				units = append(units, u)
			}
			vals[l.name][u] = append(vals[l.name][u], l.metrics[u])
		}
	}
	header := []string{"benchmark"}
	for _, u := range units {
		if u == "pkts/s" {
			header = append(header, "Mpkts/s")
		} else {
			header = append(header, u)
		}
	}
	var rows [][]string
	for _, n := range names {
		row := []string{strings.TrimPrefix(n, "Benchmark")}
		for _, u := range units {
			f := sig3
			if u == "pkts/s" {
				f = scaled(1e6)
			}
			row = append(row, vals[n][u].cell(f))
		}
		rows = append(rows, row)
	}
	return header, rows
}

// benchstatUnits keeps benchstat's header lines (goos, pkg, cpu) and the
// tables of the given units: each table is a paragraph whose second line
// names its unit.
func benchstatUnits(out string, units ...string) string {
	ls := strings.Split(strings.TrimSpace(out), "\n")
	i := 0
	for i < len(ls) && !strings.Contains(ls[i], "│") {
		i++
	}
	keep := []string{strings.Join(ls[:i], "\n")}
	for _, para := range strings.Split(strings.Join(ls[i:], "\n"), "\n\n") {
		pl := strings.Split(para, "\n")
		if len(pl) < 2 {
			continue
		}
		unit := strings.TrimSpace(strings.Trim(strings.TrimSpace(pl[1]), "│"))
		if contains(units, unit) {
			keep = append(keep, para)
		}
	}
	return strings.Join(keep, "\n\n")
}
