package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// fakeReport renders a report where every row has the given status, each
// ok row with a table and a summary line.
func fakeReport(status func(id string) string) string {
	rep := &report{started: time.Unix(1_700_000_000, 0), elapsed: time.Minute, runs: 5,
		machine: machine{cpu: "cpu", flags: "erms", cores: "2", kernel: "Linux", goVersion: "go1.26", commit: "abc"}}
	for _, r := range allRows() {
		s := &section{id: r.id, title: r.title, how: r.how, status: status(r.id), started: rep.started}
		if s.status == "ok" {
			s.table([]string{"x", "vmbusd", "anchor"}, [][]string{{"a | b", "1", "2"}})
			s.sum("comparison "+r.id, "1", "2", "0.5×")
			s.ran("tool -x %s", r.id)
		}
		rep.sections = append(rep.sections, s)
	}
	return rep.render(nil)
}

func TestRenderedReportChecks(t *testing.T) {
	text := fakeReport(func(id string) string {
		switch id {
		case "ring":
			return "skipped: ringpeer not built"
		case "tap":
			return "failed: iperf3 timed out"
		}
		return "ok"
	})
	problems, warnings := checkReport(text)
	if len(problems) > 0 {
		t.Fatalf("problems %q in\n%s", problems, text)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "tap") {
		t.Errorf("warnings %q, want the failed tap row", warnings)
	}
	if n := strings.Count(text, "| comparison ") - 1; n != len(allRows())-2 { // less the header
		t.Errorf("%d summary lines, want %d", n, len(allRows())-2)
	}
}

func TestCheckFindsBrokenReports(t *testing.T) {
	good := fakeReport(func(string) string { return "ok" })
	for _, tc := range []struct {
		name, want string
		edit       func(string) string
	}{
		{"missing row", "row hvsock is missing", func(s string) string {
			sec := splitSections(s)["hvsock"]
			return strings.Replace(s, sec, "", 1)
		}},
		{"cell count", "cells, header has", func(s string) string {
			return strings.Replace(s, "| a \\| b | 1 | 2 |", "| a | b | 1 | 2 |", 1)
		}},
		{"no separator", "without a separator", func(s string) string {
			return strings.Replace(s, "|---|---:|---:|\n| a", "| a", 1)
		}},
		{"parser broke", "not understood", func(s string) string {
			return strings.Replace(s, "Status: ok", "Status: failed: output not understood: no table", 1)
		}},
		{"no status", "no status line", func(s string) string { return strings.Replace(s, "Status: ok", "Status ok", 1) }},
		{"no machine", "no \"## Machine\"", func(s string) string { return strings.Replace(s, "## Machine\n", "## Mach\n", 1) }},
		{"ok without table", "has no table", func(s string) string {
			sec := splitSections(s)["idle"]
			i := strings.Index(sec, "| x |")
			j := strings.Index(sec, "Commands:")
			return strings.Replace(s, sec, sec[:i]+sec[j:], 1)
		}},
	} {
		problems, _ := checkReport(tc.edit(good))
		if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tc.want) }) {
			t.Errorf("%s: problems %q, want one containing %q", tc.name, problems, tc.want)
		}
	}
}

func TestOnlyKeepsOtherSections(t *testing.T) {
	old := fakeReport(func(string) string { return "ok" })
	rep := &report{started: time.Unix(1_800_000_000, 0), runs: 1}
	s := &section{id: "hvsock", title: "new hvsock", how: "how", status: "ok", started: rep.started}
	s.table([]string{"a"}, [][]string{{"1"}})
	s.sum("fresh figure", "9", "3", "3×")
	rep.sections = []*section{s}
	text := rep.render(splitSections(old))
	if problems, _ := checkReport(text); len(problems) > 0 {
		t.Fatalf("problems %q", problems)
	}
	got := splitSections(text)
	for _, r := range allRows() {
		if r.id == "hvsock" {
			if !strings.Contains(got[r.id], "new hvsock") {
				t.Errorf("hvsock section not replaced")
			}
			continue
		}
		if got[r.id] != splitSections(old)[r.id] {
			t.Errorf("section %s changed", r.id)
		}
	}
	if !strings.Contains(text, "| fresh figure | 9 | 3 | 3× |") || !strings.Contains(text, "| comparison ring | 1 | 2 | 0.5× |") {
		t.Errorf("summary lacks the new or a kept line:\n%s", text)
	}
	if strings.Contains(text, "| comparison hvsock |") {
		t.Errorf("summary kept the replaced section's line")
	}
}

func TestOnlyWithoutOldReport(t *testing.T) {
	rep := &report{started: time.Unix(1_800_000_000, 0), runs: 1}
	text := rep.render(nil)
	if problems, _ := checkReport(text); len(problems) > 0 {
		t.Fatalf("problems %q", problems)
	}
	if n := strings.Count(text, "Status: skipped: not selected"); n != len(allRows()) {
		t.Errorf("%d rows marked not selected, want %d", n, len(allRows()))
	}
}

func TestSelectRows(t *testing.T) {
	rows, err := selectRows("tap, ring")
	if err != nil || len(rows) != 2 || rows[0].id != "ring" || rows[1].id != "tap" {
		t.Errorf("%v %v", rows, err)
	}
	if _, err := selectRows("ring,nosuch"); err == nil || !strings.Contains(err.Error(), "nosuch") {
		t.Errorf("err %v", err)
	}
	all, _ := selectRows("")
	if len(all) != len(allRows()) {
		t.Errorf("%d rows", len(all))
	}
}

func TestRowIDsUnique(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range allRows() {
		if seen[r.id] || r.id == "" || r.how == "" || r.run == nil {
			t.Errorf("row %q: duplicate or incomplete", r.id)
		}
		seen[r.id] = true
	}
}

func TestSkipAndNotUnderstoodErrors(t *testing.T) {
	var s skipError
	if err := fmt.Errorf("wrapped: %w", skipf("x %d", 1)); !errors.As(err, &s) || s.reason != "x 1" {
		t.Errorf("%v", err)
	}
	if err := notUnderstood("y"); !errors.Is(err, errNotUnderstood) {
		t.Errorf("%v", err)
	}
}
