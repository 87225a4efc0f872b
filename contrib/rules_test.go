package contrib_test

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

const (
	rulesFile     = "prometheus/vmbusd-alerts.yml"
	ruleTestsFile = "prometheus/vmbusd-alerts_test.yml"
)

// The parts of a Prometheus rule file and a promtool test file the
// checks below read.
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type rule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

type ruleTests struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		InputSeries []struct {
			Series string `yaml:"series"`
			Values string `yaml:"values"`
		} `yaml:"input_series"`
		AlertRuleTests []struct {
			EvalTime  string `yaml:"eval_time"`
			Alertname string `yaml:"alertname"`
			ExpAlerts []struct {
				ExpLabels      map[string]string `yaml:"exp_labels"`
				ExpAnnotations map[string]string `yaml:"exp_annotations"`
			} `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

func loadYAML(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func (rf *ruleFile) alerts() []rule {
	var out []rule
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, r)
			}
		}
	}
	return out
}

var (
	severities = []string{"critical", "warning", "info"}
	alertName  = regexp.MustCompile(`^Vmbusd[A-Z][A-Za-z]+$`)
)

// checkRules checks each alert's form (name, severity, summary and
// description) and its query and annotations against the catalogue.
func checkRules(c catalog, rf *ruleFile) []string {
	var errs []string
	seen := map[string]bool{}
	for _, r := range rf.alerts() {
		where := "alert " + r.Alert
		if !alertName.MatchString(r.Alert) || seen[r.Alert] {
			errs = append(errs, fmt.Sprintf("%s: name not VmbusdCamelCase, or used twice", where))
		}
		seen[r.Alert] = true
		if !slices.Contains(severities, r.Labels["severity"]) {
			errs = append(errs, fmt.Sprintf("%s: severity %q, want one of %v", where, r.Labels["severity"], severities))
		}
		for _, a := range []string{"summary", "description"} {
			if strings.TrimSpace(r.Annotations[a]) == "" {
				errs = append(errs, fmt.Sprintf("%s: no %s annotation", where, a))
			}
		}
		errs = append(errs, checkQuery(c, where, r.Expr, annotationLabels(r.Annotations["summary"]+r.Annotations["description"]))...)
	}
	if len(seen) == 0 {
		errs = append(errs, "no alerts")
	}
	return errs
}

// checkRuleTests checks that every alert has a case where it fires and
// one where it stays quiet, and that every input series has exactly the
// labels a scrape of the daemon gives it.
func checkRuleTests(c catalog, rf *ruleFile, rt *ruleTests) []string {
	var errs []string
	fires, quiet := map[string]bool{}, map[string]bool{}
	for i, tg := range rt.Tests {
		for _, in := range tg.InputSeries {
			where := fmt.Sprintf("test %d series %s", i, in.Series)
			name, labels, err := parseSeries(in.Series)
			if err != nil {
				errs = append(errs, fmt.Sprintf("%s: %v", where, err))
				continue
			}
			m, ok := c[name]
			if !ok {
				errs = append(errs, fmt.Sprintf("%s: %s is not a metric vmbusd exports", where, name))
				continue
			}
			want := append(slices.Clone(m.labels), targetLabels...)
			slices.Sort(want)
			slices.Sort(labels)
			if !slices.Equal(labels, want) {
				errs = append(errs, fmt.Sprintf("%s: labels %v, a scrape gives %v", where, labels, want))
			}
		}
		for _, at := range tg.AlertRuleTests {
			if len(at.ExpAlerts) > 0 {
				fires[at.Alertname] = true
			} else {
				quiet[at.Alertname] = true
			}
		}
	}
	names := map[string]bool{}
	for _, r := range rf.alerts() {
		names[r.Alert] = true
		if !fires[r.Alert] {
			errs = append(errs, fmt.Sprintf("alert %s: no test case where it fires", r.Alert))
		}
		if !quiet[r.Alert] {
			errs = append(errs, fmt.Sprintf("alert %s: no test case where it stays quiet", r.Alert))
		}
	}
	for n := range fires {
		if !names[n] {
			errs = append(errs, fmt.Sprintf("tests name alert %s, which the rules do not have", n))
		}
	}
	for n := range quiet {
		if !names[n] {
			errs = append(errs, fmt.Sprintf("tests name alert %s, which the rules do not have", n))
		}
	}
	slices.Sort(errs)
	return errs
}

// parseSeries reads a promtool series, `name{label="value",...}`, and
// returns its name and label names.
func parseSeries(s string) (string, []string, error) {
	ts, err := lexPromQL(s)
	if err != nil {
		return "", nil, err
	}
	if len(ts) == 0 || ts[0].kind != 'i' {
		return "", nil, fmt.Errorf("no metric name")
	}
	var labels []string
	if len(ts) == 1 {
		return ts[0].text, nil, nil
	}
	if ts[1].text != "{" || ts[len(ts)-1].text != "}" {
		return "", nil, fmt.Errorf("want name{label=\"value\",...}")
	}
	body := ts[2 : len(ts)-1]
	for i := 0; i < len(body); i += 4 {
		if i+2 >= len(body) || body[i].kind != 'i' || body[i+1].text != "=" || body[i+2].kind != 's' ||
			i+3 < len(body) && body[i+3].text != "," {
			return "", nil, fmt.Errorf("want name{label=\"value\",...}")
		}
		labels = append(labels, body[i].text)
	}
	return ts[0].text, labels, nil
}

func TestRulesUseOnlyWhatTheDaemonExports(t *testing.T) {
	var rf ruleFile
	loadYAML(t, rulesFile, &rf)
	for _, e := range checkRules(daemonCatalog(t), &rf) {
		t.Error(e)
	}
}

func TestEveryAlertIsTestedBothWays(t *testing.T) {
	var rf ruleFile
	var rt ruleTests
	loadYAML(t, rulesFile, &rf)
	loadYAML(t, ruleTestsFile, &rt)
	if !slices.Equal(rt.RuleFiles, []string{"vmbusd-alerts.yml"}) {
		t.Errorf("the tests load %v, want the shipped rules", rt.RuleFiles)
	}
	for _, e := range checkRuleTests(daemonCatalog(t), &rf, &rt) {
		t.Error(e)
	}
}

// The checks must catch rules and tests that drifted from the daemon.
func TestRuleCheckersRejectBadRules(t *testing.T) {
	c := daemonCatalog(t)
	var rf ruleFile
	var rt ruleTests
	loadYAML(t, "testdata/bad-alerts.yml", &rf)
	loadYAML(t, "testdata/bad-alerts_test.yml", &rt)
	got := strings.Join(append(checkRules(c, &rf), checkRuleTests(c, &rf, &rt)...), "\n")
	for _, want := range []string{
		"alert VmbusdNICDown: vmbusd_nic_up is not a metric vmbusd exports",
		`alert VmbusdNICDown: severity "page", want one of`,
		`alert VmbusdQueueDrops: template label "queue" is aggregated away (by [instance device])`,
		"alert VmbusdQueueDrops: no description annotation",
		`alert VmbusdRingBusy: rate(vmbusd_vmbus_ring_used_bytes): vmbusd_vmbus_ring_used_bytes is a gauge`,
		`alert VmbusdRingBusy: grouping label "reason" is on none`,
		`alert dropsHigh: name not VmbusdCamelCase`,
		"alert VmbusdNICDown: no test case where it stays quiet",
		"alert VmbusdRingBusy: no test case where it fires",
		"tests name alert VmbusdGone, which the rules do not have",
		`vmbusd_netvsc_receive_dropped_total{instance="vm1:9464",job="vmbusd",device="eth1"}: labels [device instance job], a scrape gives [device instance job queue]`,
		"vmbusd_nic_up{instance=\"vm1:9464\",job=\"vmbusd\",device=\"eth1\"}: vmbusd_nic_up is not a metric",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no error %q in:\n%s", want, got)
		}
	}
}

func TestParseSeries(t *testing.T) {
	name, labels, err := parseSeries(`up{instance="vm1:9464",job="vmbusd"}`)
	if err != nil || name != "up" || !slices.Equal(labels, []string{"instance", "job"}) {
		t.Errorf("got %s %v %v", name, labels, err)
	}
	for _, bad := range []string{`{job="x"}`, `up{job}`, `up{job="x" instance="y"}`, `up{job=~"x"}`} {
		if _, _, err := parseSeries(bad); err == nil {
			t.Errorf("%s: parsed", bad)
		}
	}
}
