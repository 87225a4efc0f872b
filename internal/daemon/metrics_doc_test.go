package daemon

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

var descName = regexp.MustCompile(`fqName: "([a-z_]+)"`)

// TestEveryMetricIsDocumented keeps docs/metrics.md complete:
// each series the collector can emit is named there (a family written as
// `vmbusd_x_a_total`, `_b_total` counts for both).
func TestEveryMetricIsDocumented(t *testing.T) {
	readme, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(readme)
	for _, m := range allDescs {
		name := descName.FindStringSubmatch(m.d.String())
		if name == nil {
			t.Fatalf("cannot read the name of %s", m.d)
		}
		n := name[1]
		short := "_" + n[strings.Index(n[len("vmbusd_"):], "_")+len("vmbusd_")+1:]
		if !strings.Contains(doc, "`"+n+"`") && !strings.Contains(doc, "`"+short+"`") {
			t.Errorf("metric %s is not in docs/metrics.md", n)
		}
	}
}
