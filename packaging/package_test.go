package packaging_test

import (
	"bytes"
	"debug/elf"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// The package's version is pinned so the name and the Version field can be
// checked; git describe output of this shape becomes 1.2.3+4+gabcdef0.
const (
	describe   = "v1.2.3-4-gabcdef0"
	debVersion = "1.2.3+4+gabcdef0"
)

// built is what `make package` produced, once for every test.
var built struct {
	once sync.Once
	dir  string // the make OUT directory
	deb  string // the package, "" when dpkg-deb is missing
	bin  string // the binary make install copies
	err  error
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "vmbusd-packaging-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	built.dir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// runMake runs make in the repository with a clean make environment (the
// outer make's jobserver and flags are not this one's).
func runMake(t *testing.T, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("make", append([]string{"--no-print-directory", "-C", repoRoot(t)}, args...)...)
	for _, kv := range os.Environ() {
		switch strings.SplitN(kv, "=", 2)[0] {
		case "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES":
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("make %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

func need(t *testing.T, commands ...string) {
	t.Helper()
	for _, c := range commands {
		if _, err := exec.LookPath(c); err != nil {
			t.Skipf("%s is not installed", c)
		}
	}
}

// buildOnce runs `make package` (the one build of the binary) when
// dpkg-deb is there, or only builds the binary when it is not.
func buildOnce(t *testing.T) {
	t.Helper()
	need(t, "make", "go")
	built.once.Do(func() {
		out := filepath.Join(built.dir, "out")
		if _, err := exec.LookPath("dpkg-deb"); err != nil {
			built.bin = filepath.Join(out, "vmbusd")
			cmd := exec.Command("go", "build", "-o", built.bin, "./cmd/vmbusd")
			cmd.Dir = repoRoot(t)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if b, err := cmd.CombinedOutput(); err != nil {
				built.err = fmt.Errorf("go build: %v\n%s", err, b)
			}
			return
		}
		// gzip rather than xz: a quicker build, the same package.
		stdout := runMake(t, []string{"DEB_COMPRESS=gzip"}, "package", "OUT="+out, "VERSION="+describe)
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		built.deb = lines[len(lines)-1]
		built.bin = filepath.Join(out, "deb-bin", "vmbusd")
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
}

// tree lists every file and symbolic link under dir, relative to it.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(dir, path)
			files = append(files, "/"+rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// hostState says whether a path exists outside the staging tree and, if
// so, what it is (size and modification time).
func hostState(path string) string {
	fi, err := os.Lstat(path)
	if err != nil {
		return "absent"
	}
	return fmt.Sprintf("%v %d %v", fi.Mode(), fi.Size(), fi.ModTime())
}

func runs(t *testing.T, path string, args ...string) {
	t.Helper()
	if out, err := exec.Command(path, args...).CombinedOutput(); err != nil {
		t.Errorf("%s %s: %v\n%s", path, strings.Join(args, " "), err, out)
	}
}

// unitDocs returns the file paths the unit's Documentation= lines name.
func unitDocs(t *testing.T, unit string) []string {
	t.Helper()
	var docs []string
	for _, line := range strings.Split(unit, "\n") {
		if v, ok := strings.CutPrefix(line, "Documentation="); ok {
			for _, uri := range strings.Fields(v) {
				if p, ok := strings.CutPrefix(uri, "file:"); ok {
					docs = append(docs, p)
				}
			}
		}
	}
	if len(docs) == 0 {
		t.Errorf("the unit names no file in Documentation=")
	}
	return docs
}

// scripts returns the bring-up scripts the repository has.
func scripts(t *testing.T) []string {
	t.Helper()
	all, err := filepath.Glob(filepath.Join(repoRoot(t), "scripts", "vmbus-*"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range all {
		if n := filepath.Base(s); n != "vmbus-lib.sh" {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		t.Fatal("no scripts/vmbus-* found")
	}
	return names
}

// checkLayout checks the files `make install` or the package put under
// root for prefix, and runs the installed programs.
func checkLayout(t *testing.T, root, prefix, unitDir string) {
	t.Helper()
	want := []string{
		prefix + "/bin/vmbusd",
		prefix + "/lib/vmbusd/vmbus-lib.sh",
		unitDir + "/vmbusd.service",
		"/etc/vmbusd/vmbusd.toml.example",
		prefix + "/share/doc/vmbusd/README.md",
		prefix + "/share/doc/vmbusd/docs/install.md",
		prefix + "/share/doc/vmbusd/docs/protocol/netvsc.md",
		prefix + "/share/doc/vmbusd/contrib/systemd/README.md",
		prefix + "/share/doc/vmbusd/scripts/README.md",
		prefix + "/share/vmbusd/grafana/vmbusd-dashboard.json",
		prefix + "/share/vmbusd/prometheus/vmbusd-alerts.yml",
	}
	for _, s := range scripts(t) {
		want = append(want, prefix+"/bin/"+s, prefix+"/lib/vmbusd/"+s)
	}
	for _, p := range want {
		if _, err := os.Stat(root + p); err != nil {
			t.Errorf("not installed: %v", err)
		}
	}
	if _, err := os.Lstat(root + "/etc/vmbusd/vmbusd.toml"); err == nil {
		t.Errorf("/etc/vmbusd/vmbusd.toml installed: only the example may be")
	}
	matches, _ := filepath.Glob(root + "/*/modules-load.d/vmbusd.conf")
	more, _ := filepath.Glob(root + prefix + "/lib/modules-load.d/vmbusd.conf")
	if len(matches)+len(more) == 0 {
		t.Errorf("modules-load.d/vmbusd.conf not installed")
	}

	unit, err := os.ReadFile(root + unitDir + "/vmbusd.service")
	if err != nil {
		t.Fatal(err)
	}
	if want := "\nExecStart=" + prefix + "/bin/vmbusd run "; !strings.Contains(string(unit), want) {
		t.Errorf("the unit has no %q line", strings.TrimSpace(want))
	}
	if prefix != "/usr/local" && strings.Contains(string(unit), "/usr/local") {
		t.Errorf("the unit installed for %s still names /usr/local", prefix)
	}
	for _, doc := range unitDocs(t, string(unit)) {
		if _, err := os.Stat(root + doc); err != nil {
			t.Errorf("the unit's Documentation= file is not installed: %v", err)
		}
	}

	// The binary and a script through its link, which must still find
	// vmbus-lib.sh beside its target.
	runs(t, root+prefix+"/bin/vmbusd", "--help")
	runs(t, root+prefix+"/bin/vmbus-check", "--help")

	// Completion and man pages are there exactly when the binary can
	// write them.
	bin := root + prefix + "/bin/vmbusd"
	_, bashErr := os.Stat(root + prefix + "/share/bash-completion/completions/vmbusd")
	if err := exec.Command(bin, "completion", "bash").Run(); (err == nil) != (bashErr == nil) {
		t.Errorf("vmbusd completion bash: %v; bash completion installed: %v", err, bashErr == nil)
	}
	pages, _ := filepath.Glob(root + prefix + "/share/man/man[1-8]/vmbusd*")
	dir := t.TempDir()
	err = exec.Command(bin, "man", dir).Run()
	written, _ := filepath.Glob(dir + "/*.[1-8]")
	if err != nil {
		written = nil
	}
	if len(pages) != len(written) {
		t.Errorf("vmbusd man DIR wrote %d pages (%v); %d installed", len(written), err, len(pages))
	}
}

// TestInstallStaysInDestdir installs with a DESTDIR twice and checks that
// the second run changed nothing outside it, that the layout is the
// documented one, and that uninstall removes every file.
func TestInstallStaysInDestdir(t *testing.T) {
	buildOnce(t)
	// A prefix that exists nowhere, so a path missing DESTDIR would show.
	prefix := fmt.Sprintf("/opt/vmbusd-install-test-%d", os.Getpid())
	if _, err := os.Lstat(prefix); err == nil {
		t.Fatalf("%s exists", prefix)
	}
	vars := []string{"PREFIX=" + prefix, "BIN=" + built.bin, "NOBUILD=1", "OUT=" + built.dir}

	first := t.TempDir()
	runMake(t, nil, append(vars, "install", "DESTDIR="+first)...)
	files := tree(t, first)
	before := map[string]string{}
	for _, f := range files {
		before[f] = hostState(f)
	}

	dest := t.TempDir()
	runMake(t, nil, append(vars, "install", "DESTDIR="+dest)...)
	if got := tree(t, dest); !slices.Equal(got, files) {
		t.Fatalf("two installs differ:\n%q\n%q", files, got)
	}
	for _, f := range files {
		if after := hostState(f); after != before[f] {
			t.Errorf("make install DESTDIR=... changed %s outside DESTDIR: %s, was %s", f, after, before[f])
		}
	}
	if _, err := os.Lstat(prefix); err == nil {
		t.Errorf("make install DESTDIR=... created %s", prefix)
	}
	checkLayout(t, dest, prefix, prefix+"/lib/systemd/system")

	runMake(t, nil, append(vars, "uninstall", "DESTDIR="+dest)...)
	if left := tree(t, dest); len(left) != 0 {
		t.Errorf("make uninstall left %q", left)
	}
}

// dpkgRoot makes a throwaway root with an empty dpkg database and returns
// the dpkg arguments that install into it without touching the system's.
func dpkgRoot(t *testing.T) (string, []string) {
	t.Helper()
	root := t.TempDir()
	db := filepath.Join(root, "var/lib/dpkg")
	for _, d := range []string{"info", "updates", "triggers"} {
		if err := os.MkdirAll(filepath.Join(db, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"status", "available"} {
		if err := os.WriteFile(filepath.Join(db, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root, []string{
		"--root=" + root, "--admindir=" + db, "--log=" + filepath.Join(root, "dpkg.log"),
		// The dependencies are the real system's business; the scripts
		// run here with DPKG_ROOT set, as dpkg does for a foreign root.
		"--force-not-root", "--force-depends", "--force-script-chrootless",
		// An image that excludes documentation must not hide ours from
		// the checks.
		"--path-include=/usr/share/doc/vmbusd/*",
	}
}

func dpkg(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("dpkg", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("dpkg %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestPackageInstallsInThrowawayRoot builds the .deb, installs it into a
// fresh root, checks it there, verifies its unit and purges it.
func TestPackageInstallsInThrowawayRoot(t *testing.T) {
	need(t, "dpkg-deb", "dpkg")
	if os.Geteuid() != 0 {
		t.Skip("dpkg installs files owned by root: run as root")
	}
	buildOnce(t)
	arch, err := exec.Command("dpkg", "--print-architecture").Output()
	if err != nil {
		t.Fatal(err)
	}
	archName := strings.TrimSpace(string(arch))
	if base := filepath.Base(built.deb); base != "vmbusd_"+debVersion+"_"+archName+".deb" {
		t.Errorf("package file %q, want vmbusd_%s_%s.deb", base, debVersion, archName)
	}
	fields, err := exec.Command("dpkg-deb", "--field", built.deb, "Package", "Version", "Architecture", "Depends").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Package: vmbusd", "Version: " + debVersion, "Architecture: " + archName, "Depends: iproute2, kmod"} {
		if !strings.Contains(string(fields), want+"\n") {
			t.Errorf("control has no %q:\n%s", want, fields)
		}
	}

	root, opts := dpkgRoot(t)
	dpkg(t, append(opts, "--install", built.deb)...)
	status := dpkg(t, append(opts[:2:2], "--status", "vmbusd")...)
	for _, want := range []string{"Status: install ok installed", "/etc/vmbusd/vmbusd.toml.example "} {
		if !strings.Contains(status, want) {
			t.Errorf("dpkg --status has no %q:\n%s", want, status)
		}
	}
	checkLayout(t, root, "/usr", "/lib/systemd/system")

	// No shared library, so no Depends on one.
	f, err := elf.Open(root + "/usr/bin/vmbusd")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("the packaged binary is dynamically linked")
		}
	}
	f.Close()

	t.Run("systemd-analyze", func(t *testing.T) { verifyUnit(t, root) })

	// A purge takes the package's files and the enable link away and
	// leaves the administrator's configuration.
	links := filepath.Join(root, "etc/systemd/system/multi-user.target.wants")
	if err := os.MkdirAll(links, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(links, "vmbusd.service")
	if err := os.Symlink("/lib/systemd/system/vmbusd.service", link); err != nil {
		t.Fatal(err)
	}
	mine := filepath.Join(root, "etc/vmbusd/vmbusd.toml")
	if err := os.WriteFile(mine, []byte("root = \"/\"\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	dpkg(t, append(opts, "--purge", "vmbusd")...)
	for _, p := range []string{"/usr/bin/vmbusd", "/lib/systemd/system/vmbusd.service", "/etc/vmbusd/vmbusd.toml.example", "/usr/lib/vmbusd"} {
		if _, err := os.Lstat(root + p); err == nil {
			t.Errorf("%s is still there after the purge", p)
		}
	}
	if _, err := os.Lstat(link); err == nil {
		t.Errorf("the enable link is still there after the purge")
	}
	if _, err := os.Stat(mine); err != nil {
		t.Errorf("the purge removed the administrator's configuration: %v", err)
	}
}

// verifyUnit runs systemd-analyze verify on the installed unit, in root
// with the parts of a base system the unit refers to: systemd's own units
// (its targets) and /bin/kill (ExecReload=). A copy with a broken
// ExecStart= path must fail, so a verify that checks nothing would show.
func verifyUnit(t *testing.T, root string) {
	need(t, "systemd-analyze", "cp")
	units := "/lib/systemd/system"
	if _, err := os.Stat(units + "/sysinit.target"); err != nil {
		t.Skipf("no systemd units on this system to verify against: %v", err)
	}
	if _, err := os.Stat("/bin/kill"); err != nil {
		t.Skipf("no /bin/kill on this system: %v", err)
	}
	base := filepath.Join(root, "usr/lib/systemd/system")
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", units+"/.", base).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	if err := os.MkdirAll(filepath.Join(root, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "/bin/kill", filepath.Join(root, "bin/kill")).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}

	verify := func(unit string) (string, error) {
		out, err := exec.Command("systemd-analyze", "verify", "--root="+root, unit).CombinedOutput()
		var ours []string
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, "vmbusd") {
				ours = append(ours, line)
			}
		}
		return strings.Join(ours, "\n"), err
	}
	if out, err := verify("vmbusd.service"); err != nil || out != "" {
		t.Errorf("systemd-analyze verify vmbusd.service: %v\n%s", err, out)
	}

	unit, err := os.ReadFile(root + "/lib/systemd/system/vmbusd.service")
	if err != nil {
		t.Fatal(err)
	}
	broken := strings.ReplaceAll(string(unit), "ExecStart=/usr/bin/vmbusd", "ExecStart=/usr/bin/vmbusd-missing")
	if err := os.WriteFile(root+"/lib/systemd/system/vmbusd-broken.service", []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(root + "/lib/systemd/system/vmbusd-broken.service")
	if out, err := verify("vmbusd-broken.service"); err == nil && out == "" {
		t.Errorf("systemd-analyze verify passed a unit whose ExecStart= names no program")
	}
}

// TestInstallGeneratedFiles runs make install with a binary that has the
// completion and man commands (a shell stand-in for the CLI's generators,
// whose output is not what is checked here) and checks where install puts
// what they write, and that uninstall removes it.
func TestInstallGeneratedFiles(t *testing.T) {
	need(t, "make", "sh")
	dir := t.TempDir()
	bin := filepath.Join(dir, "vmbusd")
	script := `#!/bin/sh
case $1 in
completion) echo "# $2 completion" ;;
man) echo .TH VMBUSD 8 >"$2/vmbusd.8" && echo .TH VMBUSD-BIND 8 >"$2/vmbusd-bind.8" ;;
esac
`
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		prefix string
		want   map[string]string // path: first line
	}{
		{"/usr", map[string]string{
			"/usr/share/bash-completion/completions/vmbusd":    "# bash completion",
			"/usr/share/zsh/vendor-completions/_vmbusd":        "# zsh completion",
			"/usr/share/fish/vendor_completions.d/vmbusd.fish": "# fish completion",
			"/usr/share/man/man8/vmbusd.8":                     ".TH VMBUSD 8",
			"/usr/share/man/man8/vmbusd-bind.8":                ".TH VMBUSD-BIND 8",
		}},
		{"/usr/local", map[string]string{
			"/usr/local/share/bash-completion/completions/vmbusd":    "# bash completion",
			"/usr/local/share/zsh/site-functions/_vmbusd":            "# zsh completion",
			"/usr/local/share/fish/vendor_completions.d/vmbusd.fish": "# fish completion",
			"/usr/local/share/man/man8/vmbusd-bind.8":                ".TH VMBUSD-BIND 8",
		}},
	}
	for _, tt := range tests {
		t.Run(strings.TrimPrefix(tt.prefix, "/"), func(t *testing.T) {
			dest := t.TempDir()
			vars := []string{"PREFIX=" + tt.prefix, "BIN=" + bin, "NOBUILD=1", "OUT=" + dir, "DESTDIR=" + dest}
			runMake(t, nil, append(vars, "install")...)
			for path, first := range tt.want {
				b, err := os.ReadFile(dest + path)
				if err != nil {
					t.Errorf("not installed: %v", err)
					continue
				}
				if got, _, _ := strings.Cut(string(b), "\n"); got != first {
					t.Errorf("%s starts %q, want %q", path, got, first)
				}
			}
			runMake(t, nil, append(vars, "uninstall")...)
			if left := tree(t, dest); len(left) != 0 {
				t.Errorf("make uninstall left %q", left)
			}
		})
	}
}

// TestDebianVersion checks how build-deb turns git describe output into a
// Debian version, and, with dpkg, that the results sort as the commits do.
func TestDebianVersion(t *testing.T) {
	need(t, "bash")
	tests := []struct{ describe, want string }{
		{"v1.2.3", "1.2.3"},
		{"v1.2.3-4-gabcdef0", "1.2.3+4+gabcdef0"},
		{"v1.2.3-4-gabcdef0-dirty", "1.2.3+4+gabcdef0+dirty"},
		{"1.0", "1.0"},
		// No tag yet: a commit, which git may abbreviate to all digits.
		{"8400123", "0~git8400123"},
		{"abcdef0-dirty", "0~gitabcdef0+dirty"},
	}
	build := filepath.Join(repoRoot(t), "packaging", "build-deb")
	var got []string
	for _, tt := range tests {
		out, err := exec.Command(build, "--deb-version", tt.describe).Output()
		if err != nil {
			t.Fatalf("build-deb --deb-version %s: %v", tt.describe, err)
		}
		v := strings.TrimSpace(string(out))
		if v != tt.want {
			t.Errorf("%s: Debian version %q, want %q", tt.describe, v, tt.want)
		}
		got = append(got, v)
	}
	if _, err := exec.LookPath("dpkg"); err != nil {
		return
	}
	// Each pair is (earlier, later).
	for _, pair := range [][2]string{{got[0], got[1]}, {got[4], got[0]}, {got[5], got[3]}} {
		if err := exec.Command("dpkg", "--compare-versions", pair[0], "lt", pair[1]).Run(); err != nil {
			t.Errorf("dpkg does not sort %s before %s", pair[0], pair[1])
		}
	}
}
