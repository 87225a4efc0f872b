package contrib_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// daemonMetricsSource is where the daemon declares its series.
const daemonMetricsSource = "../internal/daemon/metrics.go"

// metric is one series family a vmbusd scrape holds.
type metric struct {
	kind   string   // counter, gauge, summary, histogram, untyped
	labels []string // the daemon's own labels, without the target's
}

// targetLabels are the labels Prometheus attaches to every series it
// scrapes (the daemon's own instance label becomes exported_instance).
var targetLabels = []string{"instance", "job"}

// catalog maps a metric name to what the daemon exports under it.
type catalog map[string]metric

// hasLabel reports whether series of m carry the label after a scrape.
func (c catalog) hasLabel(name, label string) bool {
	return slices.Contains(targetLabels, label) || slices.Contains(c[name].labels, label)
}

// daemonCatalog is every series a vmbusd scrape holds: the daemon's own
// (read from the source, so that a renamed metric or label fails here),
// the process and Go collectors it registers, and Prometheus's own `up`.
func daemonCatalog(t testing.TB) catalog {
	t.Helper()
	c, err := parseDaemonMetrics(daemonMetricsSource)
	if err != nil {
		t.Fatal(err)
	}
	if err := addCollectorMetrics(c); err != nil {
		t.Fatal(err)
	}
	c["up"] = metric{kind: "gauge"}
	return c
}

// parseDaemonMetrics reads the newDesc(name, help, kind, labels...) calls
// of the daemon's metrics file.
func parseDaemonMetrics(path string) (catalog, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, 0)
	if err != nil {
		return nil, fmt.Errorf("contrib: parse %s: %w", path, err)
	}
	// Package-level []string{...} variables, for `qLabels...` arguments.
	lists := map[string][]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok {
			return true
		}
		for i, name := range vs.Names {
			if i < len(vs.Values) {
				if l, ok := stringList(vs.Values[i]); ok {
					lists[name.Name] = l
				}
			}
		}
		return true
	})
	c := catalog{}
	var errs []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		if id, ok := call.Fun.(*ast.Ident); !ok || id.Name != "newDesc" {
			return true
		}
		pos := fset.Position(call.Pos())
		if len(call.Args) < 3 {
			errs = append(errs, fmt.Sprintf("%s: newDesc with %d arguments", pos, len(call.Args)))
			return true
		}
		name, ok := stringLit(call.Args[0])
		if !ok {
			errs = append(errs, fmt.Sprintf("%s: newDesc's name is not a string literal", pos))
			return true
		}
		var m metric
		switch sel, _ := call.Args[2].(*ast.SelectorExpr); {
		case sel != nil && sel.Sel.Name == "CounterValue":
			m.kind = "counter"
		case sel != nil && sel.Sel.Name == "GaugeValue":
			m.kind = "gauge"
		case sel != nil && sel.Sel.Name == "UntypedValue":
			m.kind = "untyped"
		default:
			errs = append(errs, fmt.Sprintf("%s: %s: cannot read the value type", pos, name))
			return true
		}
		for i, a := range call.Args[3:] {
			if s, ok := stringLit(a); ok {
				m.labels = append(m.labels, s)
				continue
			}
			id, ok := a.(*ast.Ident)
			if !ok || !call.Ellipsis.IsValid() || i != len(call.Args)-4 || lists[id.Name] == nil {
				errs = append(errs, fmt.Sprintf("%s: %s: cannot read label argument %d", pos, name, i))
				return true
			}
			m.labels = append(m.labels, lists[id.Name]...)
		}
		c[name] = m
		return true
	})
	if len(errs) > 0 {
		return nil, fmt.Errorf("contrib: %s", strings.Join(errs, "; "))
	}
	if len(c) == 0 {
		return nil, fmt.Errorf("contrib: no newDesc(...) calls in %s: the catalogue reader needs updating", path)
	}
	return c, nil
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

func stringList(e ast.Expr) ([]string, bool) {
	cl, ok := e.(*ast.CompositeLit)
	if !ok {
		return nil, false
	}
	if at, ok := cl.Type.(*ast.ArrayType); !ok || at.Len != nil {
		return nil, false
	}
	var out []string
	for _, el := range cl.Elts {
		s, ok := stringLit(el)
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

// addCollectorMetrics gathers the process and Go collectors the daemon
// registers beside its own, as they run on this machine.
func addCollectorMetrics(c catalog) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
	mfs, err := reg.Gather()
	if err != nil {
		return fmt.Errorf("contrib: gather the process and Go collectors: %w", err)
	}
	for _, mf := range mfs {
		var labels []string
		if len(mf.Metric) > 0 {
			for _, lp := range mf.Metric[0].Label {
				labels = append(labels, lp.GetName())
			}
		}
		name := mf.GetName()
		switch mf.GetType().String() {
		case "COUNTER":
			c[name] = metric{kind: "counter", labels: labels}
		case "GAUGE":
			c[name] = metric{kind: "gauge", labels: labels}
		case "SUMMARY":
			c[name] = metric{kind: "summary", labels: append(slices.Clone(labels), "quantile")}
			c[name+"_sum"] = metric{kind: "counter", labels: labels}
			c[name+"_count"] = metric{kind: "counter", labels: labels}
		case "HISTOGRAM":
			c[name+"_bucket"] = metric{kind: "counter", labels: append(slices.Clone(labels), "le")}
			c[name+"_sum"] = metric{kind: "counter", labels: labels}
			c[name+"_count"] = metric{kind: "counter", labels: labels}
		default:
			c[name] = metric{kind: "untyped", labels: labels}
		}
	}
	return nil
}

func TestCatalogReadsTheDaemonsMetrics(t *testing.T) {
	c := daemonCatalog(t)
	// A few the assets rely on, with the labels docs/metrics.md documents.
	for name, want := range map[string]metric{
		"vmbusd_netvsc_up":                        {"gauge", []string{"device"}},
		"vmbusd_netvsc_receive_packets_total":     {"counter", []string{"device", "queue"}},
		"vmbusd_netvsc_protocol_violations_total": {"counter", []string{"device", "check"}},
		"vmbusd_vmbus_ring_used_bytes":            {"gauge", []string{"device", "queue", "ring"}},
		"vmbusd_hvsock_bytes_total":               {"counter", []string{"forward", "direction"}},
		"process_cpu_seconds_total":               {"counter", nil},
		"go_memstats_heap_inuse_bytes":            {"gauge", nil},
	} {
		got, ok := c[name]
		if !ok {
			t.Errorf("%s: not in the catalogue", name)
			continue
		}
		if got.kind != want.kind || !slices.Equal(got.labels, want.labels) {
			t.Errorf("%s: %s %v, want %s %v", name, got.kind, got.labels, want.kind, want.labels)
		}
	}
}

func TestCatalogRejectsAnUnreadableSource(t *testing.T) {
	for _, path := range []string{"testdata/metrics-unreadable.go.txt", "testdata/metrics-none.go.txt"} {
		if c, err := parseDaemonMetrics(path); err == nil {
			t.Errorf("%s: read %d metrics, want an error", path, len(c))
		}
	}
}
