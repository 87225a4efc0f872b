package main

import (
	"testing"
	"time"
)

func TestRuns(t *testing.T) {
	for _, tc := range []struct {
		in            runs
		min, med, max float64
	}{
		{runs{3}, 3, 3, 3},
		{runs{5, 1, 3}, 1, 3, 5},
		{runs{4, 1, 3, 2}, 1, 2.5, 4},
	} {
		if tc.in.min() != tc.min || tc.in.median() != tc.med || tc.in.max() != tc.max {
			t.Errorf("%v: %v %v %v", tc.in, tc.in.min(), tc.in.median(), tc.in.max())
		}
	}
	if got := (runs{5, 1, 3}).cell(sig3); got != "3.00 [1.00–5.00]" {
		t.Errorf("cell %q", got)
	}
	if got := (runs{2, 2}).cell(sig3); got != "2.00" {
		t.Errorf("cell of equal runs %q", got)
	}
	if got := (runs{}).cell(sig3); got != "–" {
		t.Errorf("empty cell %q", got)
	}
}

func TestPooledCell(t *testing.T) {
	for _, tc := range []struct {
		a, b runs
		want string
	}{
		// Sums 9 and 12 (the pair with b = 0 is left out); the
		// pairs' ratios 0.5, 1 and 0.667 give the range.
		{runs{1, 4, 4, 7}, runs{2, 4, 6, 0}, "0.75× [0.5×–1.00×]"},
		{runs{3}, runs{2}, "1.50×"},
		{runs{1}, runs{0}, "–"},
		{nil, nil, "–"},
	} {
		if got := pooledCell(tc.a, tc.b, times); got != tc.want {
			t.Errorf("pooledCell(%v, %v) = %q, want %q", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestRatios(t *testing.T) {
	r := ratios(runs{2, 6, 1}, runs{1, 3, 0})
	if len(r) != 2 || r[0] != 2 || r[1] != 2 {
		t.Errorf("%v", r)
	}
	if r := ratioOfMedians(runs{1, 9, 4}, runs{2}); len(r) != 1 || r[0] != 2 {
		t.Errorf("%v", r)
	}
	if r := ratioOfMedians(runs{1}, runs{0}); r != nil {
		t.Errorf("%v", r)
	}
}

func TestSig3(t *testing.T) {
	for v, want := range map[float64]string{
		0: "0", 1234.6: "1235", 123.45: "123", 12.345: "12.3", 1.2345: "1.23", 9.9996: "10.0", 99.96: "100",
		0.12345: "0.123", 0.0012345: "0.00123", 0.001: "0.001", 4.2e-5: "4.2e-05", -2.5: "-2.50",
	} {
		if got := sig3(v); got != want {
			t.Errorf("sig3(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestPercentile(t *testing.T) {
	v := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if percentile(v, 50) != 5 || percentile(v, 99) != 10 || percentile(v, 1) != 1 || percentile([]int{7}, 99) != 7 {
		t.Error("nearest-rank percentiles wrong")
	}
	r := summarizeRTT([]time.Duration{3 * time.Microsecond, time.Microsecond, 2 * time.Microsecond})
	if r.Rounds != 3 || r.P50us != 2 || r.P99us != 3 || r.MeanUs != 2 {
		t.Errorf("%+v", r)
	}
}

func TestLoadStats(t *testing.T) {
	l := &loadSampler{}
	t0 := time.Unix(100, 0)
	for i, v := range []float64{1, 5, 3, 9} {
		l.samples = append(l.samples, loadSample{t0.Add(time.Duration(i) * time.Second), v})
	}
	st := l.between(t0.Add(500*time.Millisecond), t0.Add(2500*time.Millisecond))
	if st.n != 2 || st.min != 3 || st.max != 5 || st.mean != 4 {
		t.Errorf("%+v", st)
	}
	// An interval with no sample inside it takes the last one before.
	st = l.between(t0.Add(3100*time.Millisecond), t0.Add(3200*time.Millisecond))
	if st.n != 1 || st.min != 9 {
		t.Errorf("%+v", st)
	}
}

func TestSameMachine(t *testing.T) {
	st := func(before, after float64) machineState { return machineState{xcore: [2]float64{before, after}} }
	busy := func(m machineState, other float64) machineState { m.other, m.hasOther = other, true; return m }
	for _, c := range []struct {
		name string
		h, p machineState
		want string
	}{
		{"one slow state", st(430, 470), st(455, 500), xcoreSlow},
		{"one fast state", st(112, 160), st(120, 140), xcoreFast},
		{"fast readings spread by 2x", st(86, 100), st(100, 166), xcoreFast},
		{"changed between the modes", st(457, 151), st(164, 112), ""},
		{"changed during one", st(139, 459), st(450, 460), ""},
		{"a reading far off", st(460, 1144), st(498, 475), ""},
		{"older netbench, no readings", st(0, 0), st(0, 0), ""},
		{"one reading missing", st(450, 0), st(450, 450), ""},
		{"quiet machine", busy(st(430, 440), 0.03), busy(st(450, 445), 0.05), xcoreSlow},
		{"a build beside the hybrid run", busy(st(430, 440), 1.07), busy(st(450, 445), 0.02), ""},
		{"a build beside the poll run", busy(st(430, 440), 0.02), busy(st(450, 445), 0.3), ""},
	} {
		if got := sameMachine(c.h, c.p); got != c.want {
			t.Errorf("%s: sameMachine(%+v, %+v) = %q, want %q", c.name, c.h, c.p, got, c.want)
		}
	}
}
