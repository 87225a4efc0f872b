package main

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vmbusd/vmbusd/internal/daemon"
)

// statsDoc is a Stats document of one NIC with two queues, listed out of
// order, whose counters are n times a base.
func statsDoc(at time.Time, n uint64) daemon.Stats {
	q := func(i int, k uint64) daemon.QueueStats {
		return daemon.QueueStats{Queue: i, RxPackets: 10 * k, RxBytes: 1000 * k, TxPackets: 5 * k, TxBytes: 500 * k, RxNoMemory: k}
	}
	return daemon.Stats{SchemaVersion: daemon.SchemaVersion, Time: at, NICs: []daemon.NICStats{{
		Name: "eth1", State: "up",
		Violations: map[string]uint64{"vmbus_len8": 2, "netvsc_bad_message_length": 1, "rndis_bad_type": 0},
		Queues:     []daemon.QueueStats{q(1, 2*n), q(0, n)},
		Totals:     daemon.NICTotals{RxPackets: 30 * n, RxBytes: 3000 * n, TxPackets: 15 * n, TxBytes: 1500 * n, RxDropped: 3 * n},
		VF:         daemon.VFStatus{Mode: "off"},
	}}}
}

func TestWatchStatsPrintsRatesFromTheDocumentsTimes(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	// Two seconds between the first two readings, half a second between
	// the next: the rates follow the documents' times, not the ticks.
	docs := []daemon.Stats{statsDoc(t0, 1), statsDoc(t0.Add(2*time.Second), 3), statsDoc(t0.Add(2500*time.Millisecond), 4)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fetches := 0
	fetch := func(ctx context.Context) (daemon.Stats, error) {
		if fetches == len(docs) {
			cancel() // Ctrl-C
			return daemon.Stats{}, ctx.Err()
		}
		fetches++
		return docs[fetches-1], nil
	}
	ticks := make(chan time.Time, 3)
	for range 3 {
		ticks <- time.Time{}
	}
	var out bytes.Buffer
	if err := watchStats(ctx, &out, fetch, ticks, 0); err != nil {
		t.Fatalf("an interrupted watch: %v", err)
	}
	// Report 1: counters doubled over 2 s: total rx 30 pkts/s, 3000 B/s,
	// tx 15/1500, rx drops 3/s; queue 0 (first, though listed second)
	// 10 rx/s, queue 1 20 rx/s.
	// Report 2: one more base over 0.5 s: twice the base per second.
	want := [][]string{
		{"01:00:02,", "over", "2.00", "s"},
		{"eth1", "total", "30", "3000", "15", "1500", "3", "0"},
		{"eth1", "0", "10", "1000", "5", "500", "1", "0"},
		{"eth1", "1", "20", "2000", "10", "1000", "2", "0"},
		{"01:00:02,", "over", "0.50", "s"},
		{"eth1", "total", "60", "6000", "30", "3000", "6", "0"},
		{"eth1", "0", "20", "2000", "10", "1000", "2", "0"},
		{"eth1", "1", "40", "4000", "20", "2000", "4", "0"},
	}
	var rows [][]string
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if f := strings.Fields(line); f[0] != "NIC" {
			rows = append(rows, f)
		}
	}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d:\n%s", len(rows), len(want), out.String())
	}
	for i := range want {
		if strings.Join(rows[i], " ") != strings.Join(want[i], " ") {
			t.Errorf("row %d: %q, want %q", i, rows[i], want[i])
		}
	}
}

func TestWatchStatsStopsAfterCount(t *testing.T) {
	t0 := time.Unix(0, 0)
	n := uint64(0)
	fetch := func(context.Context) (daemon.Stats, error) {
		n++
		return statsDoc(t0.Add(time.Duration(n)*time.Second), n), nil
	}
	ticks := make(chan time.Time, 5)
	for range 5 {
		ticks <- time.Time{}
	}
	var out bytes.Buffer
	if err := watchStats(context.Background(), &out, fetch, ticks, 2); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(out.String(), "over 1.00 s"); got != 2 || n != 3 {
		t.Fatalf("%d reports from %d readings, want 2 from 3:\n%s", got, n, out.String())
	}
}

func TestWatchStatsReportsAFailedReading(t *testing.T) {
	broken := errors.New("connection refused")
	calls := 0
	fetch := func(context.Context) (daemon.Stats, error) {
		calls++
		if calls == 2 {
			return daemon.Stats{}, broken
		}
		return statsDoc(time.Unix(int64(calls), 0), 1), nil
	}
	ticks := make(chan time.Time, 1)
	ticks <- time.Time{}
	if err := watchStats(context.Background(), &bytes.Buffer{}, fetch, ticks, 0); !errors.Is(err, broken) {
		t.Fatalf("got %v, want %v", err, broken)
	}
}

func TestRateCountsAResetCounterFromZero(t *testing.T) {
	for _, c := range []struct {
		prev, cur uint64
		dt, want  float64
	}{
		{100, 300, 2, 100},
		{300, 300, 1, 0},
		{1000, 50, 0.5, 100}, // the daemon restarted: 50 since
	} {
		if got := rate(c.prev, c.cur, c.dt); got != c.want {
			t.Errorf("rate(%d, %d, %g) = %g, want %g", c.prev, c.cur, c.dt, got, c.want)
		}
	}
}

func TestPrintStatsOrder(t *testing.T) {
	var out bytes.Buffer
	printStats(&out, statsDoc(time.Unix(0, 0), 1))
	s := out.String()
	// The totals first, the queues by index (the document lists queue 1
	// first), the violations by name.
	order := []string{`QUEUE`, `\n\s+total\s+30\s`, `\n\s+0\s+10\s`, `\n\s+1\s+20\s`,
		`netvsc_bad_message_length: 1`, `vmbus_len8: 2`, `data path:`}
	at := 0
	for _, w := range order {
		loc := regexp.MustCompile(w).FindStringIndex(s[at:])
		if loc == nil {
			t.Fatalf("%s missing or out of order in:\n%s", w, s)
		}
		at += loc[1]
	}
	if strings.Contains(s, "rndis_bad_type") {
		t.Errorf("a zero violation count printed:\n%s", s)
	}
}

func TestPrintCountersXstats(t *testing.T) {
	st := statsDoc(time.Unix(0, 0), 1)
	st.NICs[0].Xstats = []daemon.Counter{{Name: "rx_good_packets", Value: 30}, {Name: "rx_q0_packets", Value: 10}, {Name: "tx_q0_packets", Value: 5}}
	var out bytes.Buffer
	printCounters(&out, st, func(n daemon.NICStats) []daemon.Counter { return n.Xstats })
	want := "eth1 (up):\n     rx_good_packets: 30\n     rx_q0_packets:   10\n     tx_q0_packets:   5\n"
	if out.String() != want {
		t.Fatalf("got\n%q\nwant\n%q", out.String(), want)
	}
}
