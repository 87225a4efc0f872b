package pcapfilter

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/bpf"
)

// tcpdump is the reference compiler: "tcpdump -ddd -y EN10MB EXPR" prints
// the program libpcap compiles for an Ethernet capture.

var (
	tcpdumpOnce sync.Once
	tcpdumpPath string
)

// needTcpdump returns tcpdump's path or skips the test.
func needTcpdump(tb testing.TB) string {
	tcpdumpOnce.Do(func() {
		tcpdumpPath, _ = exec.LookPath("tcpdump")
	})
	if tcpdumpPath == "" {
		tb.Skip("tcpdump is not installed (apt-get install tcpdump): skipping the comparison with libpcap's compiler")
	}
	return tcpdumpPath
}

// errRejectsAll is libpcap's refusal of an expression its optimiser
// proves matches nothing.
var errRejectsAll = errors.New("tcpdump: expression rejects all packets")

// tcpdumpCompile runs tcpdump on expr and parses its -ddd output.
func tcpdumpCompile(path, expr string) ([]bpf.RawInstruction, error) {
	args := []string{"-ddd", "-y", "EN10MB"}
	if expr != "" {
		args = append(args, "--", expr)
	}
	// libpcap's optimiser can take very long on some expressions; such
	// an expression is not one to compare on.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, args...).CombinedOutput()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("tcpdump %q: %w", expr, ctx.Err())
	}
	if err != nil {
		msg := strings.TrimSpace(string(out))
		if strings.Contains(msg, "rejects all packets") {
			return nil, errRejectsAll
		}
		return nil, fmt.Errorf("tcpdump %q: %s", expr, msg)
	}
	return parseDDD(string(out))
}

// tcpdumpCompileAll runs tcpdump on each expression, a few at a time.
func tcpdumpCompileAll(path string, exprs []string) ([][]bpf.RawInstruction, []error) {
	progs := make([][]bpf.RawInstruction, len(exprs))
	errs := make([]error, len(exprs))
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for i, e := range exprs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			progs[i], errs[i] = tcpdumpCompile(path, e)
			<-sem
		}()
	}
	wg.Wait()
	return progs, errs
}

// parseDDD reads tcpdump -ddd output: a count line, then one
// "code jt jf k" line per instruction, all decimal.
func parseDDD(s string) ([]bpf.RawInstruction, error) {
	sc := bufio.NewScanner(strings.NewReader(s))
	if !sc.Scan() {
		return nil, errors.New("empty -ddd output")
	}
	n, err := strconv.Atoi(strings.TrimSpace(sc.Text()))
	if err != nil {
		return nil, fmt.Errorf("-ddd count line %q: %v", sc.Text(), err)
	}
	var prog []bpf.RawInstruction
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) != 4 {
			return nil, fmt.Errorf("-ddd line %q: want 4 fields", sc.Text())
		}
		var v [4]uint64
		for i := range f {
			if v[i], err = strconv.ParseUint(f[i], 10, 32); err != nil {
				return nil, fmt.Errorf("-ddd line %q: %v", sc.Text(), err)
			}
		}
		prog = append(prog, bpf.RawInstruction{Op: uint16(v[0]), Jt: uint8(v[1]), Jf: uint8(v[2]), K: uint32(v[3])})
	}
	if len(prog) != n {
		return nil, fmt.Errorf("-ddd output has %d instructions, its count line says %d", len(prog), n)
	}
	return prog, nil
}

func hasNeg(prog []bpf.RawInstruction) bool {
	for _, r := range prog {
		if r.Op == clsALU|aluNEG {
			return true
		}
	}
	return false
}

// verdicts runs a program over the corpus in this package's interpreter
// and, when it can (x/net/bpf has no NEG), in x/net/bpf's VM, and fails
// if the two disagree.
func verdicts(tb testing.TB, what string, prog []bpf.RawInstruction, frames []frame) []bool {
	tb.Helper()
	f, err := FromProgram(prog)
	if err != nil {
		tb.Fatalf("%s: FromProgram: %v", what, err)
	}
	var vm *bpf.VM
	if !hasNeg(prog) {
		ins, ok := bpf.Disassemble(prog)
		if !ok {
			tb.Fatalf("%s: x/net/bpf cannot disassemble the program", what)
		}
		if vm, err = bpf.NewVM(ins); err != nil {
			tb.Fatalf("%s: x/net/bpf rejects the program: %v", what, err)
		}
	}
	out := make([]bool, len(frames))
	for i, fr := range frames {
		got := f.Run(fr.b)
		if vm != nil {
			want, err := vm.Run(fr.b)
			if err != nil {
				tb.Fatalf("%s: x/net/bpf on %s: %v", what, fr.name, err)
			}
			if uint32(want) != got {
				tb.Fatalf("%s: on %s the interpreter returns %d, x/net/bpf %d", what, fr.name, got, want)
			}
		}
		out[i] = got != 0
	}
	return out
}
