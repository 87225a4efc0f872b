package owner

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSecondOwnerIsRefusedWhileADaemonLives(t *testing.T) {
	dir := t.TempDir()
	l, err := Acquire(dir, Info{Command: CommandRun, Control: "/run/x.sock"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetDevices([]string{"F8615163-DF3E-46C5-913F-F2D2F965ED0E"}); err != nil {
		t.Fatal(err)
	}
	// A daemon is not waited for, however long the caller would wait.
	done := make(chan error, 1)
	go func() {
		_, err := Acquire(dir, Info{Command: CommandRestore}, time.Hour)
		done <- err
	}()
	var be *BusyError
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatal("Acquire waited for a live daemon")
	}
	if !errors.Is(err, ErrBusy) || !errors.As(err, &be) {
		t.Fatalf("second Acquire: %v, want a BusyError", err)
	}
	if be.Owner.PID != os.Getpid() || be.Owner.Command != CommandRun || !be.Owner.Owns("f8615163-df3e-46c5-913f-f2d2f965ed0e") {
		t.Fatalf("busy owner %+v", be.Owner)
	}
	if !strings.Contains(err.Error(), "`vmbusd run` (pid ") {
		t.Fatalf("message %q does not say who owns it", err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	l2, err := Acquire(dir, Info{Command: CommandRestore}, 0)
	if err != nil {
		t.Fatalf("after Release: %v", err)
	}
	defer l2.Release()
	if p := l2.Previous(); p.PID != 0 {
		t.Fatalf("a clean release left %+v", p)
	}
}

func TestACommandIsWaitedFor(t *testing.T) {
	dir := t.TempDir()
	l, err := Acquire(dir, Info{Command: CommandBind}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Acquire(dir, Info{Command: CommandRun}, 0); !errors.Is(err, ErrBusy) {
		t.Fatalf("without waiting: %v, want busy", err)
	}
	done := make(chan error, 1)
	go func() {
		l2, err := Acquire(dir, Info{Command: CommandRun}, time.Minute)
		if err == nil {
			l2.Release()
		}
		done <- err
	}()
	l.Release()
	if err := <-done; err != nil {
		t.Fatalf("Acquire after the command finished: %v", err)
	}
}

// TestADeadOwnerLeavesItsInfo: the kernel drops the lock of a killed
// owner; the next owner gets it at once and reads what the dead one left.
func TestADeadOwnerLeavesItsInfo(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHoldLock$")
	cmd.Env = append(os.Environ(), "OWNER_HELPER_DIR="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "locked" {
	}
	if _, err := Acquire(dir, Info{Command: CommandRestore}, 0); !errors.Is(err, ErrBusy) {
		t.Fatalf("while the helper lives: %v", err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	l, err := Acquire(dir, Info{Command: CommandRestore}, 0)
	if err != nil {
		t.Fatalf("after kill -9: %v", err)
	}
	defer l.Release()
	if p := l.Previous(); p.PID != cmd.Process.Pid || p.Control != "/run/dead.sock" || p.Command != CommandRun {
		t.Fatalf("previous owner %+v", p)
	}
	if _, err := os.Stat(filepath.Join(dir, lockName)); err != nil {
		t.Fatalf("lock file: %v", err)
	}
}

func TestHelperHoldLock(t *testing.T) {
	dir := os.Getenv("OWNER_HELPER_DIR")
	if dir == "" {
		t.Skip("helper for TestADeadOwnerLeavesItsInfo")
	}
	if _, err := Acquire(dir, Info{Command: CommandRun, Control: "/run/dead.sock"}, 0); err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("locked\n")
	select {}
}

func TestStaleRunInfoDoesNotRefuse(t *testing.T) {
	dir := t.TempDir()
	// owner.json of a daemon whose pid is gone and which holds no lock.
	os.WriteFile(filepath.Join(dir, infoName), []byte(`{"pid": 2147483646, "command": "run"}`), 0o644)
	l, err := Acquire(dir, Info{Command: CommandRun}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if l.Previous().PID != 2147483646 {
		t.Fatalf("previous %+v", l.Previous())
	}
}
