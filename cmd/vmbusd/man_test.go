package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestManPages: vmbusd man DIR writes a page per command, each listing
// the flags the command parses, and man renders them.
func TestManPages(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "man1")
	var out, errs bytes.Buffer
	if code := run([]string{"man", dir}, &out, &errs); code != exitOK {
		t.Fatalf("vmbusd man: exit %d\n%s", code, errs.String())
	}
	pages := map[string][]string{
		"vmbusd.1":         {".TH \"VMBUSD\" \"1\"", "vmbusd-bind(1)", "vmbusd [--version] COMMAND", "--version", "Exit codes"},
		"vmbusd-bind.1":    {"\\fBvmbusd bind [--force] [--root DIR] DEVICE|IFACE\\fP", "--root", "--state-dir", "VMBUSD_ROOT", "Exit codes"},
		"vmbusd-stats.1":   {"--xstats", "--watch", "--ethtool"},
		"vmbusd-capture.1": {"-Q", "--direction", "--snapshot-length"},
		"vmbusd-check.1":   {"--json"},
	}
	for _, c := range commands() {
		if _, ok := pages["vmbusd-"+c.name+".1"]; !ok {
			pages["vmbusd-"+c.name+".1"] = []string{".SH OPTIONS", "--help"}
		}
	}
	for name, want := range pages {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("no page %s: %v", name, err)
			continue
		}
		for _, w := range want {
			if !bytes.Contains(b, []byte(w)) {
				t.Errorf("%s lacks %q", name, w)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "vmbusd-man.1")); err == nil {
		t.Error("the hidden man command has a page")
	}
	if code := run([]string{"man"}, &out, &errs); code != exitUsage {
		t.Errorf("vmbusd man without DIR: exit %d, want %d", code, exitUsage)
	}

	man, err := exec.LookPath("man")
	if err != nil {
		t.Skip("man not installed: pages not rendered")
	}
	cmd := exec.Command(man, "-l", filepath.Join(dir, "vmbusd-bind.1"))
	cmd.Env = append(os.Environ(), "MANWIDTH=100", "MANPAGER=cat", "PAGER=cat")
	rendered, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("man -l vmbusd-bind.1: %v\n%s", err, rendered)
	}
	for _, w := range []string{"NAME", "vmbusd-bind - hand a synthetic NIC", "SYNOPSIS", "OPTIONS", "--force"} {
		if !strings.Contains(string(rendered), w) {
			t.Errorf("man -l vmbusd-bind.1 lacks %q:\n%s", w, rendered)
		}
	}
}
