package main

// The environment the rows run in: built binaries, log files, child
// processes (each in its own process group, so a timeout or Ctrl-C ends
// everything it started), and what /proc says about them.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

type env struct {
	repo  string // repository root
	work  string // binaries and logs
	tools string // DPDK peer sources; "" when not found
	quick bool
	runs  int
	out   io.Writer // progress
	load  *loadSampler

	mu   sync.Mutex
	bins map[string]string
}

func newEnv(repo, tools, work string, quick bool, runs int, progress io.Writer) (*env, error) {
	if work == "" {
		work = filepath.Join(repo, "out", "bench")
	}
	work, err := filepath.Abs(work)
	if err != nil {
		return nil, err
	}
	if tools == "" {
		if st, err := os.Stat(filepath.Join(repo, "..", "shared", "tools")); err == nil && st.IsDir() {
			tools = filepath.Join(repo, "..", "shared", "tools")
		}
	}
	if tools != "" {
		if tools, err = filepath.Abs(tools); err != nil {
			return nil, err
		}
	}
	if quick {
		runs = 1
	}
	if err := os.MkdirAll(filepath.Join(work, "logs"), 0o755); err != nil {
		return nil, err
	}
	e := &env{repo: repo, work: work, tools: tools, quick: quick, runs: runs, out: progress, bins: map[string]string{}}
	e.load = startLoadSampler(2 * time.Second)
	return e, nil
}

func (e *env) close() { e.load.stop() }

func (e *env) progress(format string, args ...any) {
	fmt.Fprintf(e.out, "benchreport: "+format+"\n", args...)
}

func (e *env) logRoot() string { return filepath.Join(e.work, "logs") }

// logDir returns (and makes) a directory for one row's logs.
func (e *env) logDir(parts ...string) string {
	d := filepath.Join(append([]string{e.logRoot()}, parts...)...)
	os.MkdirAll(d, 0o755)
	return d
}

// freshLogDir is logDir emptied first, for a tool that appends to or
// tails its files.
func (e *env) freshLogDir(parts ...string) string {
	d := filepath.Join(append([]string{e.logRoot()}, parts...)...)
	os.RemoveAll(d)
	return e.logDir(parts...)
}

// rel shows path relative to the repository when it is inside it.
func (e *env) rel(path string) string {
	if r, err := filepath.Rel(e.repo, path); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return path
}

// build compiles ./cmd/name into the work directory once per run.
func (e *env) build(ctx context.Context, name string) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if p, ok := e.bins[name]; ok {
		return p, nil
	}
	p := filepath.Join(e.work, "bin", name)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", p, "./cmd/"+name)
	cmd.Dir = e.repo
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/%s: %v: %s", name, err, tail(string(out), 400))
	}
	e.bins[name] = p
	return p, nil
}

// skipError marks a row (or part of one) that could not run here.
type skipError struct{ reason string }

func (s skipError) Error() string { return "skipped: " + s.reason }

func skipf(format string, args ...any) error { return skipError{fmt.Sprintf(format, args...)} }

// errNotUnderstood marks output that no longer has the shape the parser
// expects: the tool changed what it prints. The smoke test fails on it.
var errNotUnderstood = errors.New("output not understood")

func notUnderstood(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errNotUnderstood, fmt.Sprintf(format, args...))
}

// needRoot is a skip unless the process runs as root.
func needRoot(what string) error {
	if os.Geteuid() != 0 {
		return skipf("%s needs root (network namespaces, mounts)", what)
	}
	return nil
}

// needCommands is a skip naming the first command that is not on PATH.
func needCommands(names ...string) error {
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			return skipf("%s not installed", n)
		}
	}
	return nil
}

// command prepares name with args in its own process group; ctx's end
// terminates the whole group.
func command(ctx context.Context, dir string, extraEnv []string, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), extraEnv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// killGroup ends whatever is left of a finished command's process group.
func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}

// output runs a command to completion within timeout, logging its stdout
// and stderr to logBase.out and logBase.err, and returns its stdout.
func (e *env) output(ctx context.Context, timeout time.Duration, logBase string, extraEnv []string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := command(ctx, e.repo, extraEnv, name, args...)
	// The logs are written as the output comes, so a long run can be
	// followed with tail -f.
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	if f, err := os.Create(logBase + ".out"); err == nil {
		defer f.Close()
		cmd.Stdout = io.MultiWriter(&so, f)
	}
	if f, err := os.Create(logBase + ".err"); err == nil {
		defer f.Close()
		cmd.Stderr = io.MultiWriter(&se, f)
	}
	err := cmd.Run()
	killGroup(cmd)
	if err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			err = fmt.Errorf("timed out after %s", timeout)
		}
		return so.String(), fmt.Errorf("%s: %v: %s (log %s.err)", filepath.Base(name), err, tail(se.String(), 300), e.rel(logBase))
	}
	return so.String(), nil
}

// tail returns the last n bytes of s on one line.
func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return strings.Join(strings.Fields(s), " ")
}

// bg is a background process whose output lines can be waited for.
type bg struct {
	cmd        *exec.Cmd
	out, err   *lines
	done       chan struct{}
	waitErr    error
	stopOnce   sync.Once
	stopResult error
}

// start runs a background process, logging to logBase.out/.err.
func (e *env) start(ctx context.Context, logBase string, extraEnv []string, name string, args ...string) (*bg, error) {
	cmd := command(context.WithoutCancel(ctx), e.repo, extraEnv, name, args...)
	so, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	se, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", filepath.Base(name), err)
	}
	p := &bg{cmd: cmd, out: newLines(so, logBase+".out"), err: newLines(se, logBase+".err"), done: make(chan struct{})}
	go func() {
		<-p.out.eof
		<-p.err.eof
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *bg) pid() int { return p.cmd.Process.Pid }

// stop sends SIGTERM to the process group, waits up to timeout, then
// kills it.
func (p *bg) stop(timeout time.Duration) error {
	p.stopOnce.Do(func() {
		syscall.Kill(-p.pid(), syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(timeout):
			syscall.Kill(-p.pid(), syscall.SIGKILL)
			<-p.done
		}
		killGroup(p.cmd)
		p.stopResult = p.waitErr
	})
	return p.stopResult
}

// lines collects a stream's lines and lets callers wait for one.
type lines struct {
	mu     sync.Mutex
	all    []string
	notify chan struct{}
	eof    chan struct{}
}

func newLines(r io.Reader, logPath string) *lines {
	l := &lines{notify: make(chan struct{}), eof: make(chan struct{})}
	f, _ := os.Create(logPath)
	go func() {
		defer close(l.eof)
		if f != nil {
			defer f.Close()
		}
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			t := sc.Text()
			if f != nil {
				fmt.Fprintln(f, t)
			}
			l.mu.Lock()
			l.all = append(l.all, t)
			close(l.notify)
			l.notify = make(chan struct{})
			l.mu.Unlock()
		}
		io.Copy(io.Discard, r)
	}()
	return l
}

func (l *lines) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.all, "\n")
}

// waitFor returns the first line containing substr, waiting until
// timeout, the stream's end or ctx's end.
func (l *lines) waitFor(ctx context.Context, substr string, timeout time.Duration) (string, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	seen := 0
	for {
		l.mu.Lock()
		for ; seen < len(l.all); seen++ {
			if strings.Contains(l.all[seen], substr) {
				s := l.all[seen]
				l.mu.Unlock()
				return s, nil
			}
		}
		ch := l.notify
		l.mu.Unlock()
		select {
		case <-ch:
		case <-l.eof:
			l.mu.Lock()
			found := ""
			for _, s := range l.all[seen:] {
				if strings.Contains(s, substr) {
					found = s
					break
				}
			}
			l.mu.Unlock()
			if found != "" {
				return found, nil
			}
			return "", fmt.Errorf("output ended without %q", substr)
		case <-deadline.C:
			return "", fmt.Errorf("no %q within %s", substr, timeout)
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// clockTick is USER_HZ, the unit of /proc/<pid>/stat's times (100 on
// every Linux architecture Go supports).
const clockTick = 100

// procCPU returns a process's user+system CPU seconds so far (all its
// threads).
func procCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(string(b))
}

// parseStatCPU reads utime and stime (fields 14 and 15) of a
// /proc/<pid>/stat line; the command name may contain spaces and
// parentheses, so fields are counted after its last ')'.
func parseStatCPU(s string) (float64, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 > len(s) {
		return 0, fmt.Errorf("stat %q: no command name", tail(s, 60))
	}
	f := strings.Fields(s[i+2:])
	if len(f) < 13 {
		return 0, fmt.Errorf("stat: %d fields", len(f))
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	k, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("stat: utime %q stime %q", f[11], f[12])
	}
	return float64(u+k) / clockTick, nil
}

// procRSS returns a process's resident set size in bytes.
func procRSS(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) >= 1 {
				kb, err := strconv.ParseFloat(f[0], 64)
				return kb * 1024, err
			}
		}
	}
	return 0, errors.New("no VmRSS")
}

// findProc returns the pid of a process for which match(comm, argv,
// environ) holds, or 0.
func findProc(match func(comm string, argv, environ []string) bool) int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, d := range ents {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil {
			continue
		}
		argv, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		environ, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if match(strings.TrimSpace(string(comm)), splitNul(argv), splitNul(environ)) {
			return pid
		}
	}
	return 0
}

func splitNul(b []byte) []string {
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
