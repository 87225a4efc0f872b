package main

// Readers for what the tools print: markdown tables, JSON lines,
// `go test -bench` lines.

import (
	"bufio"
	"encoding/json"
	"strconv"
	"strings"
)

// mdTableData is a markdown table from a tool's output, with the heading
// and the last line of prose above it.
type mdTableData struct {
	heading, caption string
	header           []string
	rows             [][]string
}

// col finds a column by its header (case and spacing ignored), or -1.
func (t *mdTableData) col(name string) int {
	norm := func(s string) string { return strings.ToLower(strings.Join(strings.Fields(s), " ")) }
	for i, h := range t.header {
		if norm(h) == norm(name) {
			return i
		}
	}
	return -1
}

// parseMarkdownTables finds every pipe table in text.
func parseMarkdownTables(text string) []mdTableData {
	var out []mdTableData
	var heading, caption string
	ls := strings.Split(text, "\n")
	for i := 0; i < len(ls); i++ {
		l := strings.TrimSpace(ls[i])
		switch {
		case strings.HasPrefix(l, "#"):
			heading, caption = strings.TrimSpace(strings.TrimLeft(l, "#")), ""
			continue
		case !strings.HasPrefix(l, "|"):
			if l != "" {
				caption = l
			}
			continue
		}
		if i+1 >= len(ls) || !separatorRow.MatchString(strings.TrimSpace(ls[i+1])) {
			continue
		}
		t := mdTableData{heading: heading, caption: caption, header: splitRow(l)}
		j := i + 2
		for ; j < len(ls) && strings.HasPrefix(strings.TrimSpace(ls[j]), "|"); j++ {
			r := splitRow(strings.TrimSpace(ls[j]))
			for len(r) < len(t.header) {
				r = append(r, "")
			}
			t.rows = append(t.rows, r)
		}
		out = append(out, t)
		i = j - 1
	}
	return out
}

func splitRow(l string) []string {
	l = strings.TrimSuffix(strings.TrimPrefix(l, "|"), "|")
	var cells []string
	for _, c := range strings.Split(l, "|") {
		cells = append(cells, strings.TrimSpace(c))
	}
	return cells
}

// jsonRecord is one JSON line a tool printed (netbench -json).
type jsonRecord map[string]any

func (r jsonRecord) num(k string) (float64, bool) {
	v, ok := r[k].(float64)
	return v, ok
}

func (r jsonRecord) str(k string) string {
	switch v := r[k].(type) {
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(v)
	}
	return ""
}

// parseJSONLines reads the lines of out that are JSON objects with
// "test" equal to test.
func parseJSONLines(out, test string) []jsonRecord {
	var recs []jsonRecord
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(l, "{") {
			continue
		}
		var r jsonRecord
		if json.Unmarshal([]byte(l), &r) == nil && r.str("test") == test {
			recs = append(recs, r)
		}
	}
	return recs
}

// benchLine is one result line of `go test -bench`.
type benchLine struct {
	pkg, name string
	iters     float64
	metrics   map[string]float64
	units     []string // in the order printed
}

// parseBenchOutput reads `go test -bench` output: "pkg:" lines and
// "BenchmarkName-N  iterations  value unit  value unit ...".
func parseBenchOutput(out string) []benchLine {
	var res []benchLine
	pkg := ""
	for _, l := range strings.Split(out, "\n") {
		if p, ok := strings.CutPrefix(l, "pkg: "); ok {
			pkg = strings.TrimSpace(p)
			continue
		}
		f := strings.Fields(l)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		n, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		b := benchLine{pkg: pkg, name: trimProcs(f[0]), iters: n, metrics: map[string]float64{}}
		ok := true
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				ok = false
				break
			}
			b.metrics[f[i+1]] = v
			b.units = append(b.units, f[i+1])
		}
		if ok {
			res = append(res, b)
		}
	}
	return res
}

// trimProcs drops the "-GOMAXPROCS" suffix of a benchmark name.
func trimProcs(name string) string {
	if i := strings.LastIndexByte(name, '-'); i > 0 {
		if _, err := strconv.Atoi(name[i+1:]); err == nil {
			return name[:i]
		}
	}
	return name
}
