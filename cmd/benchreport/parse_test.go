package main

import (
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func TestParseRingTable(t *testing.T) {
	cells, err := parseRingTable(readTestdata(t, "ringbench-bench.sh.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(cells) != 16 {
		t.Fatalf("%d cells, want 16 (2 modes × 2 sizes × 4 pairs)", len(cells))
	}
	c := cells[0]
	if c.mode != "full" || c.ring != "2M" || c.size != "64" || c.pair != "dpdk-dpdk" || !c.ok || c.errors != "0" {
		t.Errorf("first cell %+v", c)
	}
	for _, c := range cells {
		if c.mbps <= 0 || c.mbpsMin > c.mbps || c.mbpsMax < c.mbps {
			t.Errorf("cell %+v: median outside its range", c)
		}
	}
}

func TestParseRingTableRejectsOtherOutput(t *testing.T) {
	for _, out := range []string{"", "result op=recv pps=1\n", "| mode | ring/dir |\n|---|---|\n| full | 2M |\n"} {
		if _, err := parseRingTable(out); err == nil || !strings.Contains(err.Error(), errNotUnderstood.Error()) {
			t.Errorf("%q: err %v, want %q", out, err, errNotUnderstood)
		}
	}
}

func TestRingColumnsFoundByName(t *testing.T) {
	// A new column and a different order must not matter.
	out := "| sender->receiver | mode | extra | ring/dir | payload B | packets | Mpkt/s | MB/s | MB/s min-max | errors |\n" +
		"|---|---|---|---|---|---|---|---|---|---|\n" +
		"| go-go | x | 7 | 2M | 64 | 100 | 1.500 | 96 | 90-99 | 0 |\n"
	cells, err := parseRingTable(out)
	if err != nil {
		t.Fatal(err)
	}
	if c := cells[0]; c.pair != "go-go" || c.mode != "x" || c.mbps != 96 || c.mbpsMin != 90 || c.mbpsMax != 99 || c.mpps != 1.5 {
		t.Errorf("cell %+v", c)
	}
}

func TestHvsockSeries(t *testing.T) {
	h := newHvsockSeries()
	out := readTestdata(t, "hvsockbench.txt")
	for range 2 {
		if err := h.add(out); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"128B", "4K", "64K", "128B, 256K rings", "4K, 256K rings", "64K, 256K rings"}
	if strings.Join(h.writes, "|") != strings.Join(want, "|") {
		t.Fatalf("writes %q, want %q", h.writes, want)
	}
	for _, col := range []string{"hv_sock MB/s", "unix MB/s", "hv_sock CPU s/GB", "unix CPU s/GB"} {
		for _, w := range h.writes {
			if v := h.vals[col][w]; len(v) != 2 || v[0] <= 0 {
				t.Errorf("%s at %s: %v, want two positive values", col, w, v)
			}
		}
	}
	// Each ring size keeps its own figures (testdata: 2816 MB/s with the
	// default rings, 3033 with 256 KiB ones at 64 KiB).
	if a, b := h.vals["hv_sock MB/s"]["64K"][0], h.vals["hv_sock MB/s"]["64K, 256K rings"][0]; a != 2816 || b != 3033 {
		t.Errorf("64K hv_sock MB/s: default %v, 256K %v; want 2816, 3033", a, b)
	}
	for _, col := range []string{"hv_sock MB/s, 256K send ring", "hv_sock MB/s, 256K receive ring (host writer)"} {
		for _, w := range want[:3] {
			if v := h.vals[col][w]; len(v) != 2 || v[0] <= 0 {
				t.Errorf("%s at %s: %v, want two positive values", col, w, v)
			}
		}
	}
	var s section
	h.render(&s)
	body := s.body.String()
	if !strings.Contains(body, "hv_sock MB/s ÷ unix MB/s") || strings.Contains(body, "ratio ÷") {
		t.Errorf("render: want hv_sock ÷ unix columns and no ratio of a ratio, body:\n%s", body)
	}
	var sums []string
	for _, l := range s.summary {
		sums = append(sums, l.what)
	}
	wantSums := []string{
		"128B writes: hv_sock MB/s vs unix MB/s", "4K writes: hv_sock MB/s vs unix MB/s", "64K writes: hv_sock MB/s vs unix MB/s",
		"64K, 256K rings writes: hv_sock MB/s vs unix MB/s", "64K writes: hv_sock CPU s/GB vs unix CPU s/GB",
		"64K, 256K rings writes: hv_sock CPU s/GB vs unix CPU s/GB",
	}
	if strings.Join(sums, "|") != strings.Join(wantSums, "|") {
		t.Errorf("summary lines:\n%s\nwant:\n%s", strings.Join(sums, "\n"), strings.Join(wantSums, "\n"))
	}
}

func TestHvsockSeriesNeedsUnixTable(t *testing.T) {
	out := "## Ring sizes\n\n| send ring | 64K |\n|---|---|\n| 256K (256K) | 1/2/3/4 |\n"
	if err := newHvsockSeries().add(out); err == nil || !strings.Contains(err.Error(), errNotUnderstood.Error()) {
		t.Errorf("err %v, want %q", err, errNotUnderstood)
	}
}

func TestStatsScannerAnyChunking(t *testing.T) {
	log := readTestdata(t, "testpmd-txonly.log")
	want := []uint64{2048, 2757479, 5964399, 8999567} // the periodic blocks, not the final summary
	for _, step := range []int{1, 7, 100, 4096, len(log)} {
		var sc statsScanner
		var got []uint64
		for i := 0; i < len(log); i += step {
			got = append(got, sc.feed(log[i:min(i+step, len(log))])...)
		}
		if len(got) != len(want) {
			t.Fatalf("chunks of %d: %v, want %v", step, got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("chunks of %d: %v, want %v", step, got, want)
				break
			}
		}
	}
}

func TestTxFromSamples(t *testing.T) {
	t0 := time.Unix(1000, 0)
	s := []txSample{
		{t0, 0, 1, 1},
		{t0.Add(time.Second), 1000, 2, 1.5},
		{t0.Add(3 * time.Second), 3_001_000, 4, 2.5},
	}
	m, err := txFromSamples(s)
	if err != nil {
		t.Fatal(err)
	}
	if !near(m.pps, 1.5e6) || !near(m.cpuPerM, 2.0/3) || !near(m.hostCPUPerM, 1.0/3) {
		t.Errorf("%+v, want 1.5 Mpps, 0.667 and 0.333 CPU-s/Mpkt", m)
	}
	if _, err := txFromSamples(s[:2]); err == nil {
		t.Error("one sample with traffic gave a rate")
	}
}

func TestSimHostLines(t *testing.T) {
	out := readTestdata(t, "sim-host.out")
	if v, ok := hostViolations(out); !ok || v != 0 {
		t.Errorf("violations %d %v", v, ok)
	}
	if g := hostGPAShare(out); g < 0 || g > 1 {
		t.Errorf("GPA share %v", g)
	}
	if _, ok := hostViolations("nothing"); ok {
		t.Error("found violations in nothing")
	}
	if g := hostGPAShare("nic x sends 10 (section 6, gpa-direct 4; dropped 0, errors 0)"); !near(g, 0.4) {
		t.Errorf("GPA share %v, want 0.4", g)
	}
}

func TestParseBenchOutput(t *testing.T) {
	lines := parseBenchOutput(readTestdata(t, "gotest-bench.txt"))
	if len(lines) != 4 {
		t.Fatalf("%d lines, want 4", len(lines))
	}
	l := lines[0]
	if l.pkg != "github.com/vmbusd/vmbusd/netvsc" || l.name != "BenchmarkNetvscRxBurst/64B" || l.metrics["allocs/op"] != 0 || l.metrics["pkts/s"] <= 0 {
		t.Errorf("%+v", l)
	}
	h, rows := benchTable(append(lines, lines...))
	if h[0] != "benchmark" || !contains(h, "Mpkts/s") || len(rows) != 4 {
		t.Errorf("header %q, %d rows", h, len(rows))
	}
	h, rows = queueRates(lines)
	if len(rows) != 4 || len(h) != len(rows[0]) {
		t.Fatalf("queueRates: header %q, rows %q", h, rows)
	}
	// TxBurst/1514B: 1000 ÷ 359.1 = 2.78 Mpps, × 1514 B × 8 = 33.7 Gbit/s.
	if r := rows[3]; r[0] != "NetvscTxBurst/1514B" || r[2] != "359" || r[3] != "2.78" || r[4] != "33.7" || r[5] != "0.482" {
		t.Errorf("queueRates row %q", r)
	}
	if h, rows := queueRates(lines[:0]); len(rows) != 0 {
		t.Errorf("queueRates of nothing: %q %q", h, rows)
	}
}

func TestFrameSize(t *testing.T) {
	for name, want := range map[string]int{"BenchmarkNetvscRxBurst/64B": 64, "BenchmarkX/a/1514B": 1514,
		"BenchmarkX": 0, "BenchmarkX/64": 0, "BenchmarkX/B": 0, "BenchmarkX/-1B": 0} {
		if got := frameSize(name); got != want {
			t.Errorf("frameSize(%q) = %d, want %d", name, got, want)
		}
	}
}

func TestTrimProcs(t *testing.T) {
	for in, want := range map[string]string{"BenchmarkX-2": "BenchmarkX", "BenchmarkX/64B-16": "BenchmarkX/64B", "BenchmarkX/a-b": "BenchmarkX/a-b", "BenchmarkX": "BenchmarkX"} {
		if got := trimProcs(in); got != want {
			t.Errorf("trimProcs(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestBenchstatUnits(t *testing.T) {
	// benchstat writes a unit in ns as sec: the gobench row asks for
	// guest-sec/pkt, and must find it.
	st := "goos: linux\n\n      │ a │\n      │ guest-sec/pkt │\nX-2   1.0n\n\n      │ a │\n      │ signals/pkt │\nX-2   1\n"
	if got := benchstatUnits(st, "guest-sec/pkt"); !strings.Contains(got, "guest-sec/pkt") || strings.Contains(got, "signals") {
		t.Errorf("guest-sec/pkt table not kept alone:\n%s", got)
	}

	got := benchstatUnits(readTestdata(t, "benchstat.txt"), "sec/op", "allocs/op")
	if !strings.HasPrefix(got, "goos: linux") || !strings.Contains(got, "sec/op") || !strings.Contains(got, "allocs/op") {
		t.Errorf("lost the header or a kept table:\n%s", got)
	}
	if strings.Contains(got, "B/s") || strings.Contains(got, "signals/pkt") {
		t.Errorf("kept a table it should drop:\n%s", got)
	}
}

func TestParsePingAndIperf3(t *testing.T) {
	p50, p99, err := parsePing(readTestdata(t, "ping.txt"))
	if err != nil || p50 <= 0 || p99 < p50 {
		t.Errorf("ping p50 %v p99 %v err %v", p50, p99, err)
	}
	if _, _, err := parsePing("PING x\n"); err == nil {
		t.Error("no replies gave a latency")
	}
	r, err := parseIperf3(readTestdata(t, "iperf3.json"))
	if err != nil || !near(r.gbps, 0.5213282594459211) || r.retr < 0 || r.rttUS != 8788 || r.cc != "bbr" {
		t.Errorf("iperf3 %+v, want 0.5213 Gbit/s, mean RTT 8788 µs, bbr; err %v", r, err)
	}
	if _, err := parseIperf3(`{"error": "unable to connect to server"}`); err == nil || !strings.Contains(err.Error(), "unable to connect") {
		t.Errorf("err %v", err)
	}
}

func TestParseStatCPU(t *testing.T) {
	// The command name may hold spaces and parentheses.
	line := "1234 (a) b (c) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0 100 1000 10\n"
	v, err := parseStatCPU(line)
	if err != nil || !near(v, 3.0) {
		t.Errorf("%v %v, want 3 s", v, err)
	}
	if _, err := parseStatCPU("garbage"); err == nil {
		t.Error("parsed garbage")
	}
}

func TestGroupRecords(t *testing.T) {
	recs := parseJSONLines(readTestdata(t, "netbench-tapveth.jsonl"), "tapveth")
	recs = append(recs, parseJSONLines(readTestdata(t, "netbench-tapveth.jsonl"), "tapveth")...)
	// A field added later (another figure) becomes a column.
	recs = append(recs, jsonRecord{"test": "tapveth", "path": "veth", "conns": 1.0, "gso": false, "mode": "hybrid", "gbps": 7.0, "rr_us": 20.0, "rr_p99_us": 40.0})
	g := groupRecords(recs, []string{"path", "conns"}, []string{"gbps", "rr_us"})
	g.ratioKey, g.ratioAnchor = "path", "veth"
	h := g.header()
	if strings.Join(h[:4], ",") != "path,conns,gso,mode" || h[4] != "gbps" || h[5] != "rr_us" || !contains(h, "rr_p99_us") {
		t.Errorf("header %q", h)
	}
	rows := g.rows()
	if len(rows) != 6 {
		t.Fatalf("%d rows, want 4 groups and 2 ratio rows: %q", len(rows), rows)
	}
	if rows[4][0] != "vmbusd-tap ÷ veth" || !strings.HasSuffix(rows[4][4], "×") {
		t.Errorf("ratio row %q", rows[4])
	}
}

func TestMarkdownTables(t *testing.T) {
	text := "# h\n\ncaption line\n\n| a | b |\n|---|--:|\n| 1 | 2 |\n| 3 |\nno table\n| x |\n"
	ts := parseMarkdownTables(text)
	if len(ts) != 1 {
		t.Fatalf("%d tables, want 1", len(ts))
	}
	if ts[0].heading != "h" || ts[0].caption != "caption line" || len(ts[0].rows) != 2 || ts[0].rows[1][1] != "" || ts[0].col("B") != 1 {
		t.Errorf("%+v", ts[0])
	}
}
