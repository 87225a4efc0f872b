package contrib_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// fakeDaemon serves a scrape like vmbusd's, with the daemon's names and
// labels: eth1 is not up, eth2 carries traffic and counts a protocol
// violation at every scrape after the first.
func fakeDaemon(t *testing.T) *httptest.Server {
	var scrapes atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := scrapes.Add(1)
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprintf(w, `# TYPE vmbusd_build_info gauge
vmbusd_build_info{version="v0.0.0-test",goversion="go1.26"} 1
# TYPE vmbusd_netvsc_up gauge
vmbusd_netvsc_up{device="eth1"} 0
vmbusd_netvsc_up{device="eth2"} 1
# TYPE vmbusd_netvsc_link_up gauge
vmbusd_netvsc_link_up{device="eth1"} 0
vmbusd_netvsc_link_up{device="eth2"} 1
# TYPE vmbusd_netvsc_protocol_violations_total counter
vmbusd_netvsc_protocol_violations_total{device="eth2",check="vmbus_len8"} %d
# TYPE vmbusd_netvsc_receive_packets_total counter
vmbusd_netvsc_receive_packets_total{device="eth2",queue="0"} %d
# TYPE vmbusd_hvsock_connections_active gauge
vmbusd_hvsock_connections_active{forward="hvsock:2761"} 1
`, n-1, 1000*n)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startPrometheus runs a Prometheus server that scrapes target as job
// vmbusd every second and evaluates the shipped rules every second.
func startPrometheus(t *testing.T, target string) (addr string) {
	t.Helper()
	prom, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus not installed (apt-get install prometheus; .ci/run installs it)")
	}
	rules, err := filepath.Abs(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: vmbusd
    static_configs:
      - targets: [%q]
`, rules, target)), 0o644); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	addr = freePort(t)
	cmd := exec.Command(prom, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+addr)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		logFile.Close()
		if t.Failed() {
			log, _ := os.ReadFile(logFile.Name())
			t.Logf("prometheus log:\n%s", log)
		}
	})
	return addr
}

// promAPI GETs a Prometheus API path into v; it reports whether the
// server answered with status success.
func promAPI(addr, path string, v any) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
		return false, fmt.Errorf("contrib: decode %s: %w", path, err)
	}
	if env.Status != "success" {
		return false, fmt.Errorf("contrib: %s: %s", path, env.Error)
	}
	return true, json.Unmarshal(env.Data, v)
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %s", what, detail)
		}
		<-tick.C
	}
}

type promRules struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Name           string    `json:"name"`
			Health         string    `json:"health"`
			LastError      string    `json:"lastError"`
			LastEvaluation time.Time `json:"lastEvaluation"`
		} `json:"rules"`
	} `json:"groups"`
}

type promAlerts struct {
	Alerts []struct {
		Labels map[string]string `json:"labels"`
		State  string            `json:"state"`
	} `json:"alerts"`
}

// TestPrometheusLoadsTheRules has a real Prometheus server load the rule
// file, evaluate every rule against a scrape shaped like the daemon's,
// raise the alerts that scrape calls for, and answer every dashboard
// query.
func TestPrometheusLoadsTheRules(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Prometheus server")
	}
	target := fakeDaemon(t)
	targetAddr := strings.TrimPrefix(target.URL, "http://")
	addr := startPrometheus(t, targetAddr)

	var rf ruleFile
	loadYAML(t, rulesFile, &rf)
	var want []string
	for _, r := range rf.alerts() {
		want = append(want, r.Alert)
	}
	slices.Sort(want)

	// Every rule loaded, evaluated twice or more, healthy.
	waitFor(t, "every rule to be evaluated", func() (bool, string) {
		var r promRules
		if _, err := promAPI(addr, "/api/v1/rules", &r); err != nil {
			return false, err.Error()
		}
		var names, pending []string
		for _, g := range r.Groups {
			for _, rule := range g.Rules {
				names = append(names, rule.Name)
				if rule.Health != "ok" || rule.LastEvaluation.IsZero() {
					pending = append(pending, fmt.Sprintf("%s (%s %s)", rule.Name, rule.Health, rule.LastError))
				}
			}
		}
		slices.Sort(names)
		if !slices.Equal(names, want) {
			return false, fmt.Sprintf("rules %v, want %v", names, want)
		}
		return len(pending) == 0, fmt.Sprintf("not evaluated or unhealthy: %v", pending)
	})

	// The alerts the scrape calls for: a violation fires at once, the NIC
	// that is not up waits out its five minutes as pending. The target is
	// up and is vmbusd, so neither daemon alert is raised.
	waitFor(t, "the violation to fire and the NIC alert to be pending", func() (bool, string) {
		var a promAlerts
		if _, err := promAPI(addr, "/api/v1/alerts", &a); err != nil {
			return false, err.Error()
		}
		var got []string
		for _, al := range a.Alerts {
			got = append(got, fmt.Sprintf("%s/%s/%s", al.Labels["alertname"], al.Labels["device"], al.State))
		}
		slices.Sort(got)
		return slices.Equal(got, []string{
			"VmbusdNICNotUp/eth1/pending",
			"VmbusdProtocolViolation/eth2/firing",
		}), fmt.Sprintf("alerts %v", got)
	})

	// Every dashboard query, with the variables a user would pick.
	d := loadDashboard(t, dashboardFile)
	vars := strings.NewReplacer("$__rate_interval", "1m", "$__range", "5m", "$instance", targetAddr, "$nic", ".*", "$forward", ".*")
	nics := ""
	for _, q := range dashboardQueries(d) {
		expr := vars.Replace(q.expr)
		label := ""
		if strings.HasPrefix(q.where, "variable ") && len(q.templates) == 1 {
			// label_values(SELECTOR, LABEL): SELECTOR's series grouped by LABEL.
			label = legendLabels(q.templates[0])[0]
			expr = fmt.Sprintf("group by (%s) (%s)", label, expr)
		}
		var res struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
			} `json:"result"`
		}
		if _, err := promAPI(addr, "/api/v1/query?query="+url.QueryEscape(expr), &res); err != nil {
			t.Errorf("%s: %s: %v", q.where, expr, err)
			continue
		}
		if q.where == "variable nic" {
			for _, r := range res.Result {
				nics += r.Metric[label] + " "
			}
		}
	}
	if nics != "eth1 eth2 " && nics != "eth2 eth1 " {
		t.Errorf("the nic variable lists %q, want eth1 and eth2", nics)
	}
}
