package contrib_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const dashboardFile = "grafana/vmbusd-dashboard.json"

// grafanaSchemaVersion is the classic dashboard schema version the
// dashboard is written in: Grafana 12's, the last of the classic model.
const grafanaSchemaVersion = 42

// The part of Grafana's classic dashboard model the dashboard relies on.
// Fields it does not use are ignored; a field of the wrong JSON type (an
// old string datasource, a string width) fails to decode.
type dashboard struct {
	ID            *int       `json:"id"`
	UID           string     `json:"uid"`
	Title         string     `json:"title"`
	SchemaVersion int        `json:"schemaVersion"`
	Time          *timeRange `json:"time"`
	Panels        []panel    `json:"panels"`
	Templating    struct {
		List []variable `json:"list"`
	} `json:"templating"`
	Annotations struct {
		List []annotation `json:"list"`
	} `json:"annotations"`
}

type timeRange struct {
	From string `json:"from"`
	To   string `json:"to"`
}

type dsRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID          int      `json:"id"`
	Type        string   `json:"type"`
	Title       string   `json:"title"`
	Datasource  *dsRef   `json:"datasource"`
	GridPos     *gridPos `json:"gridPos"`
	Targets     []target `json:"targets"`
	Collapsed   bool     `json:"collapsed"`
	Panels      []panel  `json:"panels"` // a collapsed row's panels
	FieldConfig *struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
}

type gridPos struct {
	H int `json:"h"`
	W int `json:"w"`
	X int `json:"x"`
	Y int `json:"y"`
}

type target struct {
	RefID        string `json:"refId"`
	Expr         string `json:"expr"`
	LegendFormat string `json:"legendFormat"`
	Datasource   *dsRef `json:"datasource"`
}

type variable struct {
	Type       string          `json:"type"`
	Name       string          `json:"name"`
	Query      json.RawMessage `json:"query"`
	Definition string          `json:"definition"`
	Datasource *dsRef          `json:"datasource"`
}

type annotation struct {
	BuiltIn    int    `json:"builtIn"`
	Name       string `json:"name"`
	Datasource *dsRef `json:"datasource"`
	Expr       string `json:"expr"`
	TextFormat string `json:"textFormat"`
}

// datasourceVar is how every panel names its data source, so that the
// dashboard imports into any Grafana whatever its Prometheus is called.
var datasourceVar = dsRef{Type: "prometheus", UID: "${datasource}"}

var (
	// Core panel types of current Grafana. The Angular ones (graph,
	// singlestat, table-old) no longer load since Grafana 12.
	panelTypes   = []string{"row", "timeseries", "stat", "table", "state-timeline", "status-history", "bargauge", "gauge", "barchart", "heatmap", "text"}
	angularTypes = []string{"graph", "singlestat", "table-old", "grafana-piechart-panel"}
	// Grafana unit ids the dashboard may use.
	units         = []string{"", "none", "short", "percent", "percentunit", "bytes", "decbytes", "bits", "pps", "bps", "Bps", "cps", "ops", "s", "ms", "µs", "ns", "hertz"}
	variableTypes = []string{"query", "adhoc", "groupby", "constant", "datasource", "interval", "textbox", "custom", "switch"}
	builtinVars   = []string{"__rate_interval", "__interval", "__interval_ms", "__range", "__range_s", "__range_ms", "__from", "__to", "__dashboard", "__org", "__user"}
	uidPattern    = regexp.MustCompile(`^[A-Za-z0-9_-]{1,40}$`)
)

func decodeDashboard(data []byte) (*dashboard, error) {
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("contrib: decode the dashboard: %w", err)
	}
	return &d, nil
}

// validateDashboard checks what Grafana needs to import and lay out the
// dashboard: identity and schema, panels with a type, title, a grid
// position inside the 24 columns that overlaps no other, queries with
// refIds on the datasource variable, and the variables the queries use.
func validateDashboard(d *dashboard) []string {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if d.Title == "" {
		bad("dashboard: no title")
	}
	if !uidPattern.MatchString(d.UID) {
		bad("dashboard: uid %q is not 1-40 letters, digits, '-' or '_'", d.UID)
	}
	if d.ID != nil {
		bad("dashboard: id %d set: an importable dashboard has \"id\": null", *d.ID)
	}
	if d.SchemaVersion != grafanaSchemaVersion {
		bad("dashboard: schemaVersion %d, want %d", d.SchemaVersion, grafanaSchemaVersion)
	}
	if d.Time == nil || d.Time.From == "" || d.Time.To == "" {
		bad("dashboard: no time range")
	}

	defined := map[string]bool{}
	for _, v := range d.Templating.List {
		if v.Name == "" || defined[v.Name] {
			bad("variable %q: empty or duplicate name", v.Name)
		}
		defined[v.Name] = true
		if !slices.Contains(variableTypes, v.Type) {
			bad("variable %q: unknown type %q", v.Name, v.Type)
		}
		if v.Type == "query" {
			if v.Datasource == nil || *v.Datasource != datasourceVar {
				bad("variable %q: datasource %v, want %v", v.Name, v.Datasource, datasourceVar)
			}
			// The query as a string, which every Grafana version parses
			// into its editor's model; an object whose fields do not
			// match its qryType runs as label_values(undefined).
			var q string
			if v.Definition == "" || json.Unmarshal(v.Query, &q) != nil || q != v.Definition {
				bad("variable %q: query %s, want the string of its definition %q", v.Name, v.Query, v.Definition)
			}
		}
	}
	if !slices.ContainsFunc(d.Templating.List, func(v variable) bool {
		return v.Name == "datasource" && v.Type == "datasource" && string(v.Query) == `"prometheus"`
	}) {
		bad("templating: no datasource variable of type datasource querying prometheus")
	}
	checkVars := func(where, s string) {
		for _, m := range grafanaVar.FindAllStringSubmatch(s, -1) {
			if name := m[1] + m[2]; !defined[name] && !slices.Contains(builtinVars, name) {
				bad("%s: undefined variable $%s", where, name)
			}
		}
	}
	for _, v := range d.Templating.List {
		checkVars("variable "+v.Name, v.Definition)
	}
	for _, a := range d.Annotations.List {
		if a.BuiltIn == 1 {
			continue
		}
		if a.Datasource == nil || *a.Datasource != datasourceVar || a.Expr == "" {
			bad("annotation %q: want a query on %v", a.Name, datasourceVar)
		}
		checkVars("annotation "+a.Name, a.Expr)
	}

	if len(d.Panels) == 0 {
		bad("dashboard: no panels")
	}
	ids := map[int]bool{}
	var placed []panel
	var walk func(ps []panel, inCollapsed bool)
	walk = func(ps []panel, inCollapsed bool) {
		for _, p := range ps {
			where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
			if p.ID <= 0 || ids[p.ID] {
				bad("%s: missing or duplicate panel id", where)
			}
			ids[p.ID] = true
			switch {
			case slices.Contains(angularTypes, p.Type):
				bad("%s: type %q is an Angular panel Grafana no longer loads", where, p.Type)
			case !slices.Contains(panelTypes, p.Type):
				bad("%s: unknown panel type %q", where, p.Type)
			}
			if p.Title == "" {
				bad("%s: no title", where)
			}
			g := p.GridPos
			if g == nil {
				bad("%s: no gridPos", where)
			} else if g.H <= 0 || g.W <= 0 || g.W > 24 || g.X < 0 || g.X+g.W > 24 || g.Y < 0 {
				bad("%s: gridPos %+v outside the 24-column grid", where, *g)
			} else if !inCollapsed {
				for _, q := range placed {
					o := q.GridPos
					if g.X < o.X+o.W && o.X < g.X+g.W && g.Y < o.Y+o.H && o.Y < g.Y+g.H {
						bad("%s: gridPos overlaps panel %d %q", where, q.ID, q.Title)
					}
				}
				placed = append(placed, p)
			}
			if p.Type == "row" {
				if !p.Collapsed && len(p.Panels) > 0 {
					bad("%s: an open row carries its panels after it, not inside", where)
				}
				walk(p.Panels, true)
				continue
			}
			if p.Datasource == nil || *p.Datasource != datasourceVar {
				bad("%s: datasource %v, want %v", where, p.Datasource, datasourceVar)
			}
			if p.FieldConfig != nil && !slices.Contains(units, p.FieldConfig.Defaults.Unit) {
				bad("%s: unknown unit %q", where, p.FieldConfig.Defaults.Unit)
			}
			if len(p.Targets) == 0 {
				bad("%s: no queries", where)
			}
			refs := map[string]bool{}
			for _, t := range p.Targets {
				if t.RefID == "" || refs[t.RefID] {
					bad("%s: missing or duplicate refId %q", where, t.RefID)
				}
				refs[t.RefID] = true
				if strings.TrimSpace(t.Expr) == "" {
					bad("%s: query %s has no expression", where, t.RefID)
				}
				if t.Datasource != nil && *t.Datasource != datasourceVar {
					bad("%s: query %s: datasource %v, want %v", where, t.RefID, t.Datasource, datasourceVar)
				}
				checkVars(where, t.Expr)
			}
		}
	}
	walk(d.Panels, false)
	return errs
}

// dashboardQueries lists every PromQL query in a dashboard with where it
// is and the templates that render its result.
type dashboardQuery struct {
	where, expr string
	templates   []string
}

var labelValues = regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_]\w*)\)$`)

func dashboardQueries(d *dashboard) []dashboardQuery {
	var out []dashboardQuery
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			for _, t := range p.Targets {
				out = append(out, dashboardQuery{fmt.Sprintf("panel %q query %s", p.Title, t.RefID), t.Expr, []string{t.LegendFormat}})
			}
		}
	}
	walk(d.Panels)
	for _, a := range d.Annotations.List {
		if a.Expr != "" {
			out = append(out, dashboardQuery{fmt.Sprintf("annotation %q", a.Name), a.Expr, []string{a.TextFormat}})
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		// label_values(SELECTOR, LABEL) reads LABEL of SELECTOR's series.
		if m := labelValues.FindStringSubmatch(v.Definition); m != nil {
			out = append(out, dashboardQuery{"variable " + v.Name, m[1], []string{"{{" + m[2] + "}}"}})
		} else {
			out = append(out, dashboardQuery{"variable " + v.Name, v.Definition, nil})
		}
	}
	return out
}

func loadDashboard(t *testing.T, path string) *dashboard {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d, err := decodeDashboard(data)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestDashboardIsImportable(t *testing.T) {
	d := loadDashboard(t, dashboardFile)
	for _, e := range validateDashboard(d) {
		t.Error(e)
	}
	for _, name := range []string{"datasource", "instance", "nic"} {
		if !slices.ContainsFunc(d.Templating.List, func(v variable) bool { return v.Name == name }) {
			t.Errorf("no %q variable", name)
		}
	}
}

// The checker must catch a dashboard Grafana would not load or lay out.
func TestDashboardCheckerRejectsABrokenDashboard(t *testing.T) {
	d := loadDashboard(t, "testdata/dashboard-broken.json")
	got := strings.Join(validateDashboard(d), "\n")
	for _, want := range []string{
		`uid "" is not`,
		"schemaVersion 16, want",
		`"id": null`,
		"no time range",
		"no datasource variable",
		`panel 1 "Packets": type "graph" is an Angular panel`,
		`panel 1 "Packets": datasource &{prometheus P1809F7CD0C75ACF3}`,
		`panel 2 "": no title`,
		`panel 2 "": gridPos {H:8 W:30 X:0 Y:8} outside`,
		`panel 3 "Drops": missing or duplicate refId ""`,
		`panel 3 "Drops": undefined variable $node`,
		`panel 3 "Drops": gridPos overlaps panel 1 "Packets"`,
		`panel 3 "Drops": missing or duplicate panel id`,
		`panel 4 "Bytes": no gridPos`,
		`panel 4 "Bytes": unknown unit "bytes/s"`,
		`panel 5 "Ring": no queries`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no error %q in:\n%s", want, got)
		}
	}
	// An old-style string datasource does not even decode.
	if _, err := decodeDashboard([]byte(`{"panels":[{"id":1,"datasource":"Prometheus"}]}`)); err == nil {
		t.Error("a string datasource decoded")
	}
}

// Each mutation of the shipped dashboard must be reported.
func TestDashboardCheckerCatchesEachMutation(t *testing.T) {
	orig, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	firstPanel := func(m map[string]any) map[string]any {
		for _, p := range m["panels"].([]any) {
			if p := p.(map[string]any); p["type"] != "row" {
				return p
			}
		}
		panic("no panel")
	}
	tests := []struct {
		name   string
		mutate func(m map[string]any)
		want   string
	}{
		{"no uid", func(m map[string]any) { delete(m, "uid") }, "uid"},
		{"old schema", func(m map[string]any) { m["schemaVersion"] = 27 }, "schemaVersion 27"},
		{"too wide", func(m map[string]any) { firstPanel(m)["gridPos"].(map[string]any)["w"] = 25 }, "outside the 24-column grid"},
		{"overlap", func(m map[string]any) { firstPanel(m)["gridPos"].(map[string]any)["y"] = 0 }, "overlaps"},
		{"no title", func(m map[string]any) { firstPanel(m)["title"] = "" }, "no title"},
		{"graph panel", func(m map[string]any) { firstPanel(m)["type"] = "graph" }, "Angular"},
		{"fixed datasource", func(m map[string]any) {
			firstPanel(m)["datasource"] = map[string]any{"type": "prometheus", "uid": "P1809F7CD0C75ACF3"}
		}, "datasource"},
		{"no refId", func(m map[string]any) {
			firstPanel(m)["targets"].([]any)[0].(map[string]any)["refId"] = ""
		}, "refId"},
		{"undefined variable", func(m map[string]any) {
			firstPanel(m)["targets"].([]any)[0].(map[string]any)["expr"] = `vmbusd_netvsc_up{node="$node"}`
		}, "undefined variable $node"},
		{"object variable query", func(m map[string]any) {
			for _, v := range m["templating"].(map[string]any)["list"].([]any) {
				if v := v.(map[string]any); v["name"] == "nic" {
					v["query"] = map[string]any{"qryType": 1, "query": v["definition"], "refId": "V"}
				}
			}
		}, `variable "nic": query {`},
		{"no datasource variable", func(m map[string]any) {
			tl := m["templating"].(map[string]any)
			tl["list"] = tl["list"].([]any)[1:]
		}, "no datasource variable"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var m map[string]any
			if err := json.Unmarshal(orig, &m); err != nil {
				t.Fatal(err)
			}
			tc.mutate(m)
			data, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			d, err := decodeDashboard(data)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(validateDashboard(d), "\n"); !strings.Contains(got, tc.want) {
				t.Errorf("errors %q, want one with %q", got, tc.want)
			}
		})
	}
}

// The file is what json.MarshalIndent would write, so that a re-export
// from Grafana or a hand edit shows as a small diff.
func TestDashboardIsIndentedJSON(t *testing.T) {
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, data, "", "  "); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(bytes.TrimSpace(buf.Bytes()), bytes.TrimSpace(data)) {
		t.Error("not indented with two spaces: reformat with `jq . FILE`")
	}
}

// checkDashboardQueries checks every query of a dashboard against the
// catalogue (see checkQuery).
func checkDashboardQueries(c catalog, d *dashboard) []string {
	var errs []string
	for _, q := range dashboardQueries(d) {
		var labels []string
		for _, tpl := range q.templates {
			labels = append(labels, legendLabels(tpl)...)
		}
		errs = append(errs, checkQuery(c, q.where, q.expr, labels)...)
	}
	return errs
}

func TestDashboardUsesOnlyWhatTheDaemonExports(t *testing.T) {
	d := loadDashboard(t, dashboardFile)
	qs := dashboardQueries(d)
	if len(qs) < 20 {
		t.Fatalf("found %d queries: the dashboard reader is missing some", len(qs))
	}
	for _, e := range checkDashboardQueries(daemonCatalog(t), d) {
		t.Error(e)
	}
}

// The check must catch a dashboard that drifted from the daemon's series.
func TestDashboardQueryCheckRejectsUnknownSeries(t *testing.T) {
	d := loadDashboard(t, "testdata/dashboard-unknown-metrics.json")
	if errs := validateDashboard(d); len(errs) > 0 {
		t.Fatalf("the example must be a valid dashboard, to fail only on its series: %v", errs)
	}
	got := strings.Join(checkDashboardQueries(daemonCatalog(t), d), "\n")
	for _, want := range []string{
		`panel "Received packets" query A: vmbusd_netvsc_rx_packets_total is not a metric vmbusd exports`,
		`panel "NIC state" query A: rate(vmbusd_netvsc_up): vmbusd_netvsc_up is a gauge, not a counter`,
		`panel "Drops by reason" query A: grouping label "reason" is on none of the query's metrics`,
		`panel "Drops by reason" query B: template label "reason" is aggregated away`,
		`panel "Ring usage" query A: vmbusd_vmbus_ring_used_bytes has no label "direction"`,
		`panel "Ring usage" query B: template label "side" is on none of the query's metrics`,
		`annotation "Resets": vmbusd_netvsc_reset_total is not a metric vmbusd exports`,
		`variable nic: vmbusd_netvsc_up has no label "nic"`,
		`variable nic: template label "nic" is on none of the query's metrics`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no error %q in:\n%s", want, got)
		}
	}
}
