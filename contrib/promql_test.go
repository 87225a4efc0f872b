package contrib_test

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// A small PromQL scanner: enough to list the metric names, matcher labels,
// grouping labels and Grafana variables an expression uses, so that the
// assets can be checked against what the daemon exports. Syntax is
// promtool's business (see promtool_test.go); this only has to find names.

type tok struct {
	kind byte // 'i' identifier, 's' string, 'n' number or duration, 'v' variable, 'p' punctuation
	text string
}

func lexPromQL(s string) ([]tok, error) {
	var out []tok
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for j < len(s) && s[j] != c {
				if s[j] == '\\' && c != '`' {
					j++
				}
				j++
			}
			if j >= len(s) {
				return nil, fmt.Errorf("unterminated string at %d", i)
			}
			out = append(out, tok{'s', s[i+1 : j]})
			i = j + 1
		case c == '$':
			j := i + 1
			if j < len(s) && s[j] == '{' {
				for j < len(s) && s[j] != '}' {
					j++
				}
				j++
			} else {
				for j < len(s) && isIdent(s[j], false) {
					j++
				}
			}
			out = append(out, tok{'v', s[i:min(j, len(s))]})
			i = j
		case isIdent(c, true):
			j := i
			for j < len(s) && isIdent(s[j], false) {
				j++
			}
			out = append(out, tok{'i', s[i:j]})
			i = j
		case c >= '0' && c <= '9' || c == '.':
			j := i
			for j < len(s) && (isIdent(s[j], false) || s[j] == '.' ||
				(s[j] == '+' || s[j] == '-') && (s[j-1] == 'e' || s[j-1] == 'E')) {
				j++
			}
			out = append(out, tok{'n', s[i:j]})
			i = j
		default:
			if i+1 < len(s) && slices.Contains([]string{"==", "!=", "=~", "!~", ">=", "<="}, s[i:i+2]) {
				out = append(out, tok{'p', s[i : i+2]})
				i += 2
				continue
			}
			if !strings.ContainsRune("(){}[],=<>+-*/%^@:", rune(c)) {
				return nil, fmt.Errorf("unexpected %q at %d", c, i)
			}
			out = append(out, tok{'p', string(c)})
			i++
		}
	}
	return out, nil
}

func isIdent(c byte, first bool) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || !first && c >= '0' && c <= '9'
}

// selector is one metric a query reads.
type selector struct {
	metric string
	labels []string // names in its matcher braces
	fn     string   // the function it is the first argument of, if any
}

// queryNames is what a query refers to by name.
type queryNames struct {
	selectors []selector
	grouping  []string // labels in by, without, on, ignoring, group_left, group_right
	by        []string // labels in by and group_left/group_right: what an aggregated result keeps
	vars      []string // Grafana variables
}

var (
	aggregators = []string{"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
		"bottomk", "topk", "quantile", "limitk", "limit_ratio"}
	groupers = []string{"by", "without", "on", "ignoring", "group_left", "group_right"}
	keywords = []string{"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan", "Inf", "NaN"}
	// counterFuncs only make sense on counters.
	counterFuncs = []string{"rate", "irate", "increase", "resets"}
	grafanaVar   = regexp.MustCompile(`\$(?:\{(\w+)(?::[^}]*)?\}|(\w+))`)
)

func scanPromQL(expr string) (queryNames, error) {
	var q queryNames
	for _, m := range grafanaVar.FindAllStringSubmatch(expr, -1) {
		q.vars = append(q.vars, m[1]+m[2])
	}
	ts, err := lexPromQL(expr)
	if err != nil {
		return q, err
	}
	next := func(i int) tok {
		if i+1 < len(ts) {
			return ts[i+1]
		}
		return tok{}
	}
	for i := 0; i < len(ts); i++ {
		t := ts[i]
		switch {
		case t.kind == 'p' && t.text == "[": // a range or subquery: durations and variables only
			for i < len(ts) && ts[i].text != "]" {
				i++
			}
		case t.kind == 'p' && t.text == "{":
			return q, fmt.Errorf("a selector without a metric name")
		case t.kind != 'i' || slices.Contains(aggregators, t.text) || slices.Contains(keywords, t.text):
		case slices.Contains(groupers, t.text):
			if next(i).text != "(" {
				continue
			}
			kind := t.text
			for i += 2; i < len(ts) && ts[i].text != ")"; i++ {
				if ts[i].kind == 'i' {
					q.grouping = append(q.grouping, ts[i].text)
					if kind == "by" || kind == "group_left" || kind == "group_right" {
						q.by = append(q.by, ts[i].text)
					}
				}
			}
		case next(i).text == "(": // a function call
		default:
			sel := selector{metric: t.text}
			if i >= 2 && ts[i-1].text == "(" && ts[i-2].kind == 'i' && !slices.Contains(keywords, ts[i-2].text) {
				sel.fn = ts[i-2].text
			}
			if next(i).text == "{" {
				for i += 2; i < len(ts) && ts[i].text != "}"; i++ {
					if ts[i].kind != 'i' {
						return q, fmt.Errorf("%s: a matcher without a label name", sel.metric)
					}
					if i+2 >= len(ts) || !slices.Contains([]string{"=", "!=", "=~", "!~"}, ts[i+1].text) || ts[i+2].kind != 's' {
						return q, fmt.Errorf("%s: malformed matcher at %q", sel.metric, ts[i].text)
					}
					sel.labels = append(sel.labels, ts[i].text)
					i += 2
					if next(i).text == "," {
						i++
					}
				}
			}
			q.selectors = append(q.selectors, sel)
		}
	}
	if len(q.selectors) == 0 {
		return q, fmt.Errorf("no metric in %q", expr)
	}
	return q, nil
}

var (
	legendLabel     = regexp.MustCompile(`\{\{\s*([a-zA-Z_]\w*)\s*\}\}`)
	annotationLabel = regexp.MustCompile(`\$labels\.([a-zA-Z_]\w*)`)
)

// legendLabels lists the labels a Grafana legend ({{device}}) shows.
func legendLabels(s string) []string { return submatches(legendLabel, s) }

// annotationLabels lists the labels a Prometheus alert template
// ({{ $labels.device }}) reads.
func annotationLabels(s string) []string { return submatches(annotationLabel, s) }

func submatches(re *regexp.Regexp, s string) []string {
	var out []string
	for _, m := range re.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}

// checkQuery checks one query, and the labels the templates rendering
// its result read, against the catalogue: every metric exists, every
// matcher label is on its metric, rate-like functions read counters,
// every grouping label is on at least one of the query's metrics, and
// every template label is one the result can carry: a `by` or
// group_left label when the query aggregates, else one of its metrics'.
func checkQuery(c catalog, where, expr string, templateLabels []string) []string {
	q, err := scanPromQL(expr)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", where, err)}
	}
	var errs []string
	available := slices.Clone(targetLabels)
	for _, s := range q.selectors {
		m, ok := c[s.metric]
		if !ok {
			errs = append(errs, fmt.Sprintf("%s: %s is not a metric vmbusd exports", where, s.metric))
			continue
		}
		available = append(available, m.labels...)
		for _, l := range s.labels {
			if !c.hasLabel(s.metric, l) {
				errs = append(errs, fmt.Sprintf("%s: %s has no label %q", where, s.metric, l))
			}
		}
		if slices.Contains(counterFuncs, s.fn) && m.kind != "counter" {
			errs = append(errs, fmt.Sprintf("%s: %s(%s): %s is a %s, not a counter", where, s.fn, s.metric, s.metric, m.kind))
		}
	}
	for _, l := range q.grouping {
		if !slices.Contains(available, l) {
			errs = append(errs, fmt.Sprintf("%s: grouping label %q is on none of the query's metrics", where, l))
		}
	}
	for _, l := range templateLabels {
		switch {
		case len(q.by) > 0 && !slices.Contains(q.by, l):
			errs = append(errs, fmt.Sprintf("%s: template label %q is aggregated away (by %v)", where, l, q.by))
		case !slices.Contains(available, l):
			errs = append(errs, fmt.Sprintf("%s: template label %q is on none of the query's metrics", where, l))
		}
	}
	return errs
}

func TestScanPromQL(t *testing.T) {
	tests := []struct {
		expr     string
		metrics  []string
		labels   [][]string
		fns      []string
		grouping []string
		vars     []string
	}{
		{
			expr:    `up{job="vmbusd"} == 0`,
			metrics: []string{"up"}, labels: [][]string{{"job"}}, fns: []string{""},
		},
		{
			expr:     `sum by (device, queue) (rate(vmbusd_netvsc_receive_packets_total{instance=~"$instance",device=~"${nic}"}[$__rate_interval]))`,
			metrics:  []string{"vmbusd_netvsc_receive_packets_total"},
			labels:   [][]string{{"instance", "device"}},
			fns:      []string{"rate"},
			grouping: []string{"device", "queue"},
			vars:     []string{"instance", "nic", "__rate_interval"},
		},
		{
			expr:     "a_total / on (instance, job) group_left (mac) b{x!~'y'} > 0.01 * c offset 5m",
			metrics:  []string{"a_total", "b", "c"},
			labels:   [][]string{nil, {"x"}, nil},
			fns:      []string{"", "", ""},
			grouping: []string{"instance", "job", "mac"},
		},
		{
			expr:    `absent(vmbusd_build_info{job="vmbusd"}) or (up == 1 unless on (instance) sum(x) by (instance))`,
			metrics: []string{"vmbusd_build_info", "up", "x"}, labels: [][]string{{"job"}, nil, nil},
			fns: []string{"absent", "", "sum"}, grouping: []string{"instance", "instance"},
		},
		{
			expr:    `max_over_time(m[1h:5m]) + 1e3 + 2.5e-3`,
			metrics: []string{"m"}, labels: [][]string{nil}, fns: []string{"max_over_time"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.expr, func(t *testing.T) {
			q, err := scanPromQL(tc.expr)
			if err != nil {
				t.Fatal(err)
			}
			var metrics, fns []string
			var labels [][]string
			for _, s := range q.selectors {
				metrics, fns, labels = append(metrics, s.metric), append(fns, s.fn), append(labels, s.labels)
			}
			if !slices.Equal(metrics, tc.metrics) || !slices.Equal(fns, tc.fns) ||
				!slices.EqualFunc(labels, tc.labels, slices.Equal) || !slices.Equal(q.grouping, tc.grouping) ||
				!slices.Equal(q.vars, tc.vars) {
				t.Errorf("got metrics %v fns %q labels %v grouping %v vars %v", metrics, fns, labels, q.grouping, q.vars)
			}
		})
	}
	for _, bad := range []string{`{__name__="up"}`, `up{job}`, `sum(rate(x[5m])) "unterminated`, `1 + 2`} {
		if _, err := scanPromQL(bad); err == nil {
			t.Errorf("%s: scanned without an error", bad)
		}
	}
}

func TestCheckQueryFindsWhatTheDaemonDoesNotExport(t *testing.T) {
	c := daemonCatalog(t)
	tests := []struct {
		expr, legend string
		want         string // "" for no error
	}{
		{`sum by (device, queue) (rate(vmbusd_netvsc_receive_packets_total{device=~"$nic"}[5m]))`, "{{device}} q{{queue}}", ""},
		{`rate(vmbusd_netvsc_rx_packets_total[5m])`, "", "vmbusd_netvsc_rx_packets_total is not a metric"},
		{`vmbusd_netvsc_up{queue="0"}`, "", `vmbusd_netvsc_up has no label "queue"`},
		{`rate(vmbusd_netvsc_up[5m])`, "", "vmbusd_netvsc_up is a gauge, not a counter"},
		{`sum by (reason) (rate(vmbusd_netvsc_receive_dropped_total[5m]))`, "", `grouping label "reason"`},
		{`vmbusd_hvsock_connections_active`, "{{ring}}", `template label "ring"`},
		{`sum by (device) (rate(vmbusd_netvsc_receive_dropped_total[5m]))`, "{{device}} q{{queue}}", `template label "queue" is aggregated away`},
		{`sum by (device) (x_total) / on (device) group_left (mac) vmbusd_netvsc_info`, "{{mac}}", "x_total is not a metric"},
		{`sum by (device) (vmbusd_netvsc_queues) * on (device) group_left (mac) vmbusd_netvsc_info`, "{{device}} {{mac}}", ""},
		{`vmbusd_netvsc_resets_total > 0`, "{{ $labels.check }}", `template label "check"`},
		{`rate(process_cpu_seconds_total[1m]) and on (instance, job) vmbusd_build_info`, "{{version}}", ""},
	}
	for _, tc := range tests {
		errs := checkQuery(c, "q", tc.expr, append(legendLabels(tc.legend), annotationLabels(tc.legend)...))
		switch {
		case tc.want == "" && len(errs) > 0:
			t.Errorf("%s: %v", tc.expr, errs)
		case tc.want != "" && !strings.Contains(strings.Join(errs, "\n"), tc.want):
			t.Errorf("%s: got %v, want an error with %q", tc.expr, errs, tc.want)
		}
	}
}

// FuzzScanPromQL: the scanner and the series parser take any text
// without panicking, and every selector they return names a metric.
func FuzzScanPromQL(f *testing.F) {
	for _, s := range []string{
		`sum by (device, queue) (rate(vmbusd_netvsc_receive_packets_total{instance=~"$instance"}[$__rate_interval]))`,
		`absent(up{job="vmbusd"}) or (up == 1 unless on (instance, job) vmbusd_build_info)`,
		`a / on (x) group_left (y) b{c!~'d'} > 0.01 * e offset 5m`,
		`up{instance="vm1:9464",job="vmbusd"}`,
		"${x:raw} `raw` 1e-3 [5m:1m]",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if q, err := scanPromQL(s); err == nil {
			for _, sel := range q.selectors {
				if sel.metric == "" || !isIdent(sel.metric[0], true) {
					t.Fatalf("%q: selector %+v", s, sel)
				}
			}
		}
		if name, _, err := parseSeries(s); err == nil && name == "" {
			t.Fatalf("%q: a series without a name", s)
		}
	})
}
