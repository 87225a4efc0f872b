package contrib_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// promtool comes with Debian's prometheus package, which .ci/run installs.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed: it comes with the prometheus package (apt-get install prometheus; .ci/run installs it)")
	}
	return p
}

func runPromtool(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, promtool(t), args...).CombinedOutput()
	return string(out), err
}

func TestPromtoolChecksTheRules(t *testing.T) {
	var rf ruleFile
	loadYAML(t, rulesFile, &rf)
	n := 0
	for _, g := range rf.Groups {
		n += len(g.Rules)
	}
	out, err := runPromtool(t, "check", "rules", rulesFile)
	if err != nil {
		t.Fatalf("promtool check rules %s: %v\n%s", rulesFile, err, out)
	}
	if want := fmt.Sprintf("SUCCESS: %d rules found", n); !strings.Contains(out, want) {
		t.Errorf("promtool said %q, want %q", out, want)
	}
}

func TestPromtoolRunsTheRuleTests(t *testing.T) {
	out, err := runPromtool(t, "test", "rules", ruleTestsFile)
	if err != nil || !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool test rules %s: %v\n%s", ruleTestsFile, err, out)
	}
}

// A rule test that expects the wrong thing must fail, so that a pass
// above means the expectations hold.
func TestPromtoolFailsAWrongExpectation(t *testing.T) {
	out, err := runPromtool(t, "test", "rules", "testdata/wrong-expectation_test.yml")
	if err == nil || !strings.Contains(out, "FAILED") {
		t.Fatalf("promtool passed a test that expects VmbusdDown too early: %v\n%s", err, out)
	}
	if !strings.Contains(out, "alertname: VmbusdDown, time: 4m") {
		t.Errorf("promtool failed for another reason:\n%s", out)
	}
}

// dashboardRules turns every query of a dashboard into a recording rule,
// Grafana's variables replaced by plain values, for promtool to parse.
func dashboardRules(d *dashboard) ([]byte, error) {
	type rec struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rules []rec
	replacer := strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")
	for i, q := range dashboardQueries(d) {
		expr := replacer.Replace(q.expr)
		expr = grafanaVar.ReplaceAllString(expr, "x")
		rules = append(rules, rec{fmt.Sprintf("vmbusd_dashboard:query_%d", i), expr})
	}
	return yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
}

func TestPromtoolParsesEveryDashboardQuery(t *testing.T) {
	promtool(t)
	for _, tc := range []struct {
		path string
		ok   bool
	}{
		{dashboardFile, true},
		{"testdata/dashboard-broken.json", false}, // an unbalanced parenthesis
	} {
		rules, err := dashboardRules(loadDashboard(t, tc.path))
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "dashboard-queries.yml")
		if err := os.WriteFile(path, rules, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := runPromtool(t, "check", "rules", path)
		if (err == nil) != tc.ok {
			t.Errorf("%s: promtool check rules: %v (want ok=%v)\n%s", tc.path, err, tc.ok, out)
		}
		if !tc.ok && !strings.Contains(out, "parse error") {
			t.Errorf("%s: promtool failed for another reason than the broken query:\n%s", tc.path, out)
		}
	}
}
