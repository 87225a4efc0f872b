package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "rr-server":
			os.Exit(rrServerMain(os.Args[2:]))
		case "rr-client":
			os.Exit(rrClientMain(os.Args[2:]))
		}
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("benchreport", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", false, "one short run of every row (the smoke test: the report's shape, not its figures)")
	runs := fs.Int("runs", 5, "runs per measurement (min/median/max over them)")
	only := fs.String("only", "", "comma-separated rows to run; the other sections of -out are kept (see -list)")
	out := fs.String("out", "docs/performance.md", "report to write (relative to the repository root)")
	tools := fs.String("tools", os.Getenv("TOOLS"), "DPDK peer sources (ringpeer, dpdk-guest); default ../shared/tools beside the repository (env TOOLS)")
	work := fs.String("work", "", "directory for built binaries and logs (default out/bench in the repository)")
	check := fs.String("check", "", "verify that FILE is a well-formed report with every row, and exit")
	list := fs.Bool("list", false, "list the rows and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "benchreport: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if *list {
		for _, r := range allRows() {
			fmt.Fprintf(stdout, "%-12s %s\n", r.id, r.title)
		}
		return 0
	}
	if *check != "" {
		b, err := os.ReadFile(*check)
		if err != nil {
			fmt.Fprintf(stderr, "benchreport: %v\n", err)
			return 1
		}
		problems, warnings := checkReport(string(b))
		for _, w := range warnings {
			fmt.Fprintf(stderr, "benchreport: %s: warning: %s\n", *check, w)
		}
		for _, p := range problems {
			fmt.Fprintf(stderr, "benchreport: %s: %s\n", *check, p)
		}
		if len(problems) > 0 {
			return 1
		}
		fmt.Fprintf(stdout, "%s: well-formed, %d rows\n", *check, len(allRows()))
		return 0
	}
	if *runs < 1 {
		fmt.Fprintln(stderr, "benchreport: -runs must be at least 1")
		return 2
	}
	selected, err := selectRows(*only)
	if err != nil {
		fmt.Fprintf(stderr, "benchreport: %v\n", err)
		return 2
	}
	repo, err := repoRoot()
	if err != nil {
		fmt.Fprintf(stderr, "benchreport: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	e, err := newEnv(repo, *tools, *work, *quick, *runs, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "benchreport: %v\n", err)
		return 1
	}
	defer e.close()
	outPath := *out
	if !filepath.IsAbs(outPath) {
		outPath = filepath.Join(repo, outPath)
	}
	var old map[string]string
	if *only != "" {
		if b, err := os.ReadFile(outPath); err == nil {
			old = splitSections(string(b))
		}
	}
	rep := measure(ctx, e, selected)
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "benchreport: interrupted; the report is not written")
		return 1
	}
	text := rep.render(old)
	if err := writeFileAtomic(outPath, []byte(text)); err != nil {
		fmt.Fprintf(stderr, "benchreport: %v\n", err)
		return 1
	}
	fmt.Fprintf(stderr, "benchreport: wrote %s in %s (logs in %s)\n", outPath, rep.elapsed.Round(time.Second), e.logRoot())
	if problems, _ := checkReport(text); len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintf(stderr, "benchreport: %s: %s\n", outPath, p)
		}
		return 1
	}
	return 0
}

// selectRows returns the rows named in only (all when empty).
func selectRows(only string) ([]row, error) {
	all := allRows()
	if strings.TrimSpace(only) == "" {
		return all, nil
	}
	want := map[string]bool{}
	for _, id := range strings.Split(only, ",") {
		if id = strings.TrimSpace(id); id != "" {
			want[id] = true
		}
	}
	var sel []row
	for _, r := range all {
		if want[r.id] {
			sel = append(sel, r)
			delete(want, r.id)
		}
	}
	if len(want) > 0 {
		var ids []string
		for _, r := range all {
			ids = append(ids, r.id)
		}
		var bad []string
		for id := range want {
			bad = append(bad, id)
		}
		return nil, fmt.Errorf("unknown row %s (rows: %s)", strings.Join(bad, ", "), strings.Join(ids, ", "))
	}
	return sel, nil
}

// repoRoot finds the module root above the working directory.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && strings.Contains(string(b), "module github.com/vmbusd/vmbusd\n") {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("benchreport: run it inside the vmbusd repository (no go.mod of github.com/vmbusd/vmbusd above " + dir + ")")
		}
	}
}

func writeFileAtomic(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
