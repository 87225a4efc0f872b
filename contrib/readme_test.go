package contrib_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var backquoted = regexp.MustCompile("`([^`]+)`")

// readmeTable returns the rows of the Markdown table that follows heading
// in the README, each as its cells.
func readmeTable(t *testing.T, readme, heading string) [][]string {
	t.Helper()
	i := strings.Index(readme, heading+"\n")
	if i < 0 {
		t.Fatalf("README: no %q section", heading)
	}
	var rows [][]string
	for _, line := range strings.Split(readme[i:], "\n")[1:] {
		if !strings.HasPrefix(line, "|") {
			if len(rows) > 0 {
				break
			}
			continue
		}
		if strings.HasPrefix(line, "|---") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		rows = append(rows, cells)
	}
	if len(rows) < 2 {
		t.Fatalf("README: no table under %q", heading)
	}
	return rows[1:] // without the header
}

// TestREADMEMatchesTheAssets keeps contrib/README.md's tables true: the
// alerts table lists every alert, and the series table lists every
// metric the assets use with exactly the panels and alerts that read it.
func TestREADMEMatchesTheAssets(t *testing.T) {
	data, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(data)
	var rf ruleFile
	loadYAML(t, rulesFile, &rf)
	d := loadDashboard(t, dashboardFile)

	// Who reads each metric.
	panelsOf, alertsOf := map[string][]string{}, map[string][]string{}
	add := func(m map[string][]string, expr, who string) {
		q, err := scanPromQL(expr)
		if err != nil {
			t.Fatalf("%s: %v", who, err)
		}
		for _, s := range q.selectors {
			if !slices.Contains(m[s.metric], who) {
				m[s.metric] = append(m[s.metric], who)
			}
		}
	}
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			for _, tg := range p.Targets {
				add(panelsOf, tg.Expr, p.Title)
			}
		}
	}
	walk(d.Panels)
	for _, r := range rf.alerts() {
		add(alertsOf, r.Expr, r.Alert)
	}

	var tabled []string
	for _, row := range readmeTable(t, readme, "## The alerts") {
		tabled = append(tabled, strings.Trim(row[0], "`"))
	}
	for _, r := range rf.alerts() {
		if !slices.Contains(tabled, r.Alert) {
			t.Errorf("README: alert %s is not in the alerts table", r.Alert)
		}
	}

	documented := map[string]bool{}
	for _, row := range readmeTable(t, readme, "## Which series feed which panel and alert") {
		if len(row) != 3 {
			t.Errorf("README: series row %q has %d cells", row, len(row))
			continue
		}
		var metrics, wantPanels, wantAlerts []string
		for _, m := range backquoted.FindAllStringSubmatch(row[0], -1) {
			metrics = append(metrics, m[1])
			documented[m[1]] = true
			for _, p := range panelsOf[m[1]] {
				if !slices.Contains(wantPanels, p) {
					wantPanels = append(wantPanels, p)
				}
			}
			for _, a := range alertsOf[m[1]] {
				if !slices.Contains(wantAlerts, a) {
					wantAlerts = append(wantAlerts, a)
				}
			}
		}
		var panels []string
		for _, p := range strings.Split(row[1], ";") {
			p = strings.TrimSpace(p)
			if i := strings.Index(p, " ("); i > 0 {
				p = p[:i] // a remark
			}
			if p != "" && !strings.HasPrefix(p, "the ") { // "the nic variable", "the NIC resets annotation"
				panels = append(panels, p)
			}
		}
		var alerts []string
		for _, m := range backquoted.FindAllStringSubmatch(row[2], -1) {
			alerts = append(alerts, m[1])
		}
		for _, l := range [][]string{panels, wantPanels, alerts, wantAlerts} {
			slices.Sort(l)
		}
		if !slices.Equal(panels, wantPanels) {
			t.Errorf("README: %v: panels %q, the dashboard has %q", metrics, panels, wantPanels)
		}
		if !slices.Equal(alerts, wantAlerts) {
			t.Errorf("README: %v: alerts %q, the rules have %q", metrics, alerts, wantAlerts)
		}
	}
	for _, m := range [](map[string][]string){panelsOf, alertsOf} {
		for metric := range m {
			if !documented[metric] {
				t.Errorf("README: %s is used but not in the series table", metric)
			}
		}
	}
}
