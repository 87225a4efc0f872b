package pcapfilter

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/net/bpf"
)

// fuzzFrames is a small slice of the corpus, enough to run each fuzzed
// program over every kind of frame quickly.
func fuzzFrames() []frame {
	var out []frame
	for i, f := range corpus() {
		if i < len(baseFrames()) || i%7 == 0 {
			out = append(out, f)
		}
	}
	return out
}

// FuzzCompile feeds arbitrary text to the compiler: it must never panic,
// must fail only with an *Error, and any program it produces must pass
// validation (x/net/bpf's and the kernel-style one) and run the same in
// this package's interpreter and in x/net/bpf's VM.
func FuzzCompile(f *testing.F) {
	for _, e := range expressions {
		f.Add(e)
	}
	for _, e := range []string{"(", ")", "not", "!!!tcp", "host (10.0.0.1 or not 10.0.0.2)", "ether[-1:4]=0",
		"ip[0:2] % 0 = 1", "1-2", "\\", "::", "vlan vlan vlan", "tcp[1:1:1]", "len-1 = 0", "((ether[0]))=1"} {
		f.Add(e)
	}
	frames := fuzzFrames()
	f.Fuzz(func(t *testing.T, expr string) {
		prog, err := Compile(expr, LinkEthernet, 0)
		if err != nil {
			var fe *Error
			if !errors.As(err, &fe) {
				t.Fatalf("Compile(%q): error %T %v is not *Error", expr, err, err)
			}
			if !strings.HasPrefix(err.Error(), "filter: ") {
				t.Fatalf("Compile(%q): error %q lacks the filter: prefix", expr, err)
			}
			return
		}
		raw, err := bpf.Assemble(prog)
		if err != nil {
			t.Fatalf("Compile(%q): x/net/bpf cannot assemble it: %v", expr, err)
		}
		if len(raw) > MaxInstructions {
			t.Fatalf("Compile(%q): %d instructions", expr, len(raw))
		}
		verdicts(t, fmt.Sprintf("%q", expr), raw, frames)
	})
}

// FuzzAgainstTcpdump compiles each input with tcpdump too and, when both
// accept it, requires the same verdict on every frame, except where the
// program that rejects did so by reading past the end of the frame:
// libpcap's optimiser also reorders tests, so on a truncated frame it can
// skip a load this compiler's program makes ("not port 0 or not port 1"
// tests the source port against 1 before the destination port against 0
// and never reads the destination port of a frame cut after the source).
// It runs tcpdump once per input, so its seeds are few; the verdict table
// requires exact equality on every frame.
func FuzzAgainstTcpdump(f *testing.F) {
	path := needTcpdump(f)
	for _, e := range []string{"udp and port 53", "tcp[13] & 2 != 0", "vlan and host 10.0.0.1", "not port 9 or arp",
		"ip[2:2] - len > 3", "ether proto 100 or icmp6"} {
		f.Add(e)
	}
	frames := corpus()
	f.Fuzz(func(t *testing.T, expr string) {
		if strings.HasPrefix(strings.TrimSpace(expr), "-") {
			return // tcpdump would read it as an option
		}
		ours, err := compileRaw(expr, LinkEthernet, 0)
		if err != nil {
			return
		}
		theirs, terr := tcpdumpCompile(path, expr)
		got := verdicts(t, "ours", ours, frames)
		var want []bool
		switch {
		case errors.Is(terr, errRejectsAll):
			want = make([]bool, len(frames))
		case terr != nil:
			return // tcpdump refuses what we accept: not a verdict to compare
		default:
			want = verdicts(t, "tcpdump", theirs, frames)
		}
		for i, fr := range frames {
			if got[i] == want[i] {
				continue
			}
			rejecter := ours
			if !want[i] {
				rejecter = theirs
			}
			if _, aborted := refRun(rejecter, fr.b); aborted && len(rejecter) > 0 {
				continue
			}
			t.Fatalf("%q on %s: ours %v, tcpdump %v", expr, fr.name, got[i], want[i])
		}
	})
}

// FuzzRun runs the table's filters over arbitrary frames in this
// package's interpreter and in x/net/bpf's VM.
func FuzzRun(f *testing.F) {
	for _, fr := range baseFrames() {
		f.Add(uint8(0), fr.b)
	}
	type compiled struct {
		f  *Filter
		vm *bpf.VM
	}
	var filters []compiled
	for _, expr := range expressions {
		prog, err := Compile(expr, LinkEthernet, 0)
		if isRejectsAll(err) {
			continue
		}
		if err != nil {
			f.Fatal(err)
		}
		fl, err := New(expr, LinkEthernet, 0)
		if err != nil {
			f.Fatal(err)
		}
		var vm *bpf.VM
		if !hasNeg(fl.Program()) {
			if vm, err = bpf.NewVM(prog); err != nil {
				f.Fatal(err)
			}
		}
		filters = append(filters, compiled{fl, vm})
	}
	f.Fuzz(func(t *testing.T, which uint8, frame []byte) {
		c := filters[int(which)%len(filters)]
		got := c.f.Run(frame)
		if c.vm == nil {
			return
		}
		want, err := c.vm.Run(frame)
		if err != nil {
			t.Fatal(err)
		}
		if uint32(want) != got {
			t.Fatalf("%q on %x: interpreter %d, x/net/bpf %d", c.f, frame, got, want)
		}
	})
}

// FuzzOptimizer checks the optimiser against the plain code generator:
// where the unoptimised program runs to a return, the optimised one must
// return the same. (Where it aborts on a short frame, the optimised one
// may accept: it drops loads whose value cannot matter, as libpcap does.)
// Both are checked against the reference interpreter too.
func FuzzOptimizer(f *testing.F) {
	for i, e := range expressions {
		fr := baseFrames()[i%len(baseFrames())]
		f.Add(e, fr.b)
	}
	f.Fuzz(func(t *testing.T, expr string, frame []byte) {
		plain, err := compileWith(expr, LinkEthernet, 0, false)
		if err != nil {
			return
		}
		opt, err := compileWith(expr, LinkEthernet, 0, true)
		if isRejectsAll(err) {
			opt = []bpf.RawInstruction{{Op: clsRET | retK}}
		} else if err != nil {
			t.Fatalf("%q compiles only without the optimiser: %v", expr, err)
		}
		want, aborted := refRun(plain, frame)
		got, _ := refRun(opt, frame)
		if fl, err := FromProgram(opt); err != nil {
			t.Fatalf("%q: optimised program invalid: %v", expr, err)
		} else if r := fl.Run(frame); r != got {
			t.Fatalf("%q on %x: Run %d, reference interpreter %d", expr, frame, r, got)
		}
		if !aborted && got != want {
			t.Fatalf("%q on %x: optimised returns %d, unoptimised %d", expr, frame, got, want)
		}
	})
}
