package main

// Figures over several runs: min, median and max, and how they are
// written into table cells.

import (
	"math"
	"slices"
	"strconv"
)

// runs holds one figure's value from each run.
type runs []float64

func (r runs) sorted() []float64 { return slices.Sorted(slices.Values(r)) }

func (r runs) min() float64 { return r.sorted()[0] }
func (r runs) max() float64 { s := r.sorted(); return s[len(s)-1] }

// median is the middle value (the mean of the two middle ones for an even
// count).
func (r runs) median() float64 {
	s := r.sorted()
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// cell writes "median [min–max]" with f, or one value when there is one
// run (or all runs agree), or "–" when there is none.
func (r runs) cell(f func(float64) string) string {
	if len(r) == 0 {
		return "–"
	}
	m := f(r.median())
	lo, hi := f(r.min()), f(r.max())
	if len(r) == 1 || (lo == m && hi == m) {
		return m
	}
	return m + " [" + lo + "–" + hi + "]"
}

// ratios divides a by b run by run (the i-th runs were measured side by
// side).
func ratios(a, b runs) runs {
	var out runs
	for i := range min(len(a), len(b)) {
		if b[i] != 0 {
			out = append(out, a[i]/b[i])
		}
	}
	return out
}

// pooledCell writes a's sum over b's, for figures measured in pairs
// (a[i] beside b[i]), with the range of the pairs' own ratios: "r
// [min–max]", or "–" when there is no pair. Over many pairs whose
// ratios scatter widely from measurement to measurement, the ratio of
// the sums varies less from report to report than their median.
func pooledCell(a, b runs, f func(float64) string) string {
	r := ratios(a, b)
	var sa, sb float64
	for i := range min(len(a), len(b)) {
		if b[i] != 0 {
			sa, sb = sa+a[i], sb+b[i]
		}
	}
	if len(r) == 0 || sb == 0 {
		return "–"
	}
	m := f(sa / sb)
	if len(r) == 1 {
		return m
	}
	return m + " [" + f(r.min()) + "–" + f(r.max()) + "]"
}

// ratioOfMedians divides a's median by b's, for figures that were not
// measured in pairs.
func ratioOfMedians(a, b runs) runs {
	if len(a) == 0 || len(b) == 0 || b.median() == 0 {
		return nil
	}
	return runs{a.median() / b.median()}
}

// sig3 writes v with three significant digits (whole numbers from 100
// up), without an exponent for ordinary magnitudes and without trailing
// zeros below 1.
func sig3(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "–"
	}
	// Round first, so 9.9996 is written as 10.0, not 10.00.
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 3, 64), 64)
	a := math.Abs(r)
	switch {
	case r == 0:
		return "0"
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(r, 'f', 1, 64)
	case a >= 1:
		return strconv.FormatFloat(r, 'f', 2, 64)
	}
	return strconv.FormatFloat(r, 'g', 3, 64)
}

// scaled returns a formatter dividing by div first.
func scaled(div float64) func(float64) string {
	return func(v float64) string { return sig3(v / div) }
}

// times writes a ratio as "1.23×".
func times(v float64) string { return sig3(v) + "×" }

// pct writes a fraction (of a core, of a count) as a percentage.
func pct(v float64) string { return sig3(v*100) + " %" }

// intf writes a count.
func intf(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }
