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
			"31 MiB receive and 16 MiB send buffers. Their `guest-ns/pkt` is all the CPU time of the guest's own thread (the " +
			"benchmark goroutine is locked to it) per packet: the driver's work plus the time a hybrid queue spends polling " +
			"inside `Wait`/`WaitTx` for a host that has not kept up (under full load it keeps polling through the host's " +
			"rounds instead of sleeping). `work-ns/pkt` leaves the waits out: the thread's CPU time (CLOCK_THREAD_CPUTIME_ID) " +
			"sampled around every `Wait`/`WaitTx` call is subtracted, and so is the cost of those samples (`clock-ns/pkt`, " +
			"measured by the benchmark; `waits/pkt` says how rarely they come). It is the figure a queue's rate depends on " +
			"when the host keeps up: the per-queue table below gives 1000 ÷ work-ns/pkt as Mpps and, at that rate, the " +
			"frames' Gbit/s. One caveat: `WaitTx` also reaps the send completions that arrive while it polls " +
			"(`wait-reaps/pkt` per packet); that reaping is the driver's work but is counted as waiting, so the transmit " +
			"work-ns/pkt is a little low and its Mpps a little high. " +
			"`BenchmarkRingSendBurst`, `BenchmarkRingCrossCore` and " +
			"`BenchmarkChannelEcho` measure the ring alone, across two spinning goroutines, and a channel end to end. The " +
			"tables give every metric the benchmarks report, `median [min–max]` over the N counts (at least 6, so benchstat " +
			"can give a confidence interval); benchstat's summary of sec/op, pkts/s, guest-ns/pkt, work-ns/pkt (which benchstat " +
			"writes as guest-sec/pkt and work-sec/pkt) and allocs/op (median ± 95 % confidence interval) follows each table.",
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
		if h, rows := queueRates(lines); len(rows) > 0 {
			s.para("Per queue, from work-ns/pkt (what one queue would move if the host kept up), beside the rate measured:")
			s.table(h, rows)
		}
		raw := base + ".txt"
		os.WriteFile(raw, []byte(out), 0o644)
		st, err := e.output(ctx, 10*time.Minute, base+"-benchstat", nil, "go", "run", "golang.org/x/perf/cmd/benchstat@latest", set.name+"="+raw)
		if err != nil {
			s.para("benchstat could not run: %s", oneLine(err.Error()))
			continue
		}
		// benchstat scales units in ns to seconds: guest-ns/pkt is its
		// guest-sec/pkt.
		s.code(benchstatUnits(st, "sec/op", "pkts/s", "guest-sec/pkt", "work-sec/pkt", "allocs/op"))
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

// queueRates gives, for each benchmark that reports work-ns/pkt, the rate
// one queue would reach if the guest's work were all that limited it:
// 1000 ÷ work-ns/pkt Mpps and, for the frame size its name ends in
// ("/64B"), those frames' Gbit/s; min/median/max over the counts.
func queueRates(lines []benchLine) ([]string, [][]string) {
	var names []string
	guest, work, mpps, gbps, measured := map[string]runs{}, map[string]runs{}, map[string]runs{}, map[string]runs{}, map[string]runs{}
	for _, l := range lines {
		w, ok := l.metrics["work-ns/pkt"]
		if !ok || w <= 0 {
			continue
		}
		if _, seen := work[l.name]; !seen {
			names = append(names, l.name)
		}
		work[l.name] = append(work[l.name], w)
		guest[l.name] = append(guest[l.name], l.metrics["guest-ns/pkt"])
		mpps[l.name] = append(mpps[l.name], 1000/w)
		measured[l.name] = append(measured[l.name], l.metrics["pkts/s"]/1e6)
		if size := frameSize(l.name); size > 0 {
			gbps[l.name] = append(gbps[l.name], 1000/w*float64(size)*8/1000)
		}
	}
	header := []string{"benchmark", "guest-ns/pkt", "work-ns/pkt", "Mpps per queue (1000 ÷ work-ns/pkt)",
		"Gbit/s per queue", "Mpps measured"}
	var rows [][]string
	for _, n := range names {
		rows = append(rows, []string{strings.TrimPrefix(n, "Benchmark"), guest[n].cell(sig3), work[n].cell(sig3),
			mpps[n].cell(sig3), gbps[n].cell(sig3), measured[n].cell(sig3)})
	}
	return header, rows
}

// frameSize reads the frame size a benchmark's name ends in ("X/1514B"),
// 0 if none.
func frameSize(name string) int {
	last := name[strings.LastIndexByte(name, '/')+1:]
	n, err := strconv.Atoi(strings.TrimSuffix(last, "B"))
	if err != nil || !strings.HasSuffix(last, "B") || n <= 0 {
		return 0
	}
	return n
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
