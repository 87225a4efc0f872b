package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/vmbusd/vmbusd/internal/daemon"
)

func runStats(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlagSet(out, "stats", "stats [--control PATH] [--json | --ethtool | --xstats | --watch [INTERVAL] [--count N]]")
	sock := controlFlag(fs)
	asJSON := fs.Bool("json", false, "print the Stats document (docs/control-api.md)")
	ethtool := fs.Bool("ethtool", false, "print the counters under Linux hv_netvsc's ethtool -S names")
	xstats := fs.Bool("xstats", false, "print the counters under DPDK's ethdev xstats names, as testpmd's 'show port xstats'")
	watch := fs.Duration("watch", 0, "print rates (packets, bytes and drops per second) every INTERVAL (--watch alone: every second) until interrupted")
	fs.Lookup("watch").NoOptDefVal = "1s"
	count := fs.IntP("count", "c", 0, "with --watch: stop after this many reports (0: until interrupted)")
	if err := parseArgs(fs, args); err != nil {
		return usageErr(err)
	}
	// --watch 2s as well as --watch=2s: stats takes no other argument.
	if flagSet(fs, "watch") && fs.NArg() == 1 && *watch == time.Second && !strings.HasPrefix(fs.Arg(0), "-") {
		d, err := time.ParseDuration(fs.Arg(0))
		if err != nil {
			return fmt.Errorf("%w: --watch %q: %v", errUsage, fs.Arg(0), err)
		}
		*watch = d
	} else if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	views := 0
	for _, v := range []bool{*asJSON, *ethtool, *xstats, flagSet(fs, "watch")} {
		if v {
			views++
		}
	}
	switch {
	case views > 1:
		return fmt.Errorf("%w: --json, --ethtool, --xstats and --watch are different views: give one", errUsage)
	case flagSet(fs, "watch") && *watch <= 0:
		return fmt.Errorf("%w: --watch %s: the interval must be positive", errUsage, *watch)
	case *count < 0 || (*count > 0 && !flagSet(fs, "watch")):
		return fmt.Errorf("%w: --count is a positive number of --watch reports", errUsage)
	}
	fetch := func(ctx context.Context) (daemon.Stats, error) {
		var st daemon.Stats
		err := getJSON(ctx, *sock, "/v1/stats", &st)
		return st, err
	}
	if flagSet(fs, "watch") {
		t := time.NewTicker(*watch)
		defer t.Stop()
		return watchStats(ctx, out, fetch, t.C, *count)
	}
	st, err := fetch(ctx)
	if err != nil {
		return err
	}
	switch {
	case *asJSON:
		return printJSON(out, st)
	case *ethtool:
		printCounters(out, st, func(n daemon.NICStats) []daemon.Counter { return n.Ethtool })
	case *xstats:
		printCounters(out, st, func(n daemon.NICStats) []daemon.Counter { return n.Xstats })
	default:
		printStats(out, st)
	}
	return nil
}

// sortedQueues returns a NIC's queues by index, whatever order the
// document has them in.
func sortedQueues(n daemon.NICStats) []daemon.QueueStats {
	return slices.SortedFunc(slices.Values(n.Queues), func(a, b daemon.QueueStats) int { return a.Queue - b.Queue })
}

// printStats prints each NIC's totals (both paths) and its synthetic
// queues, then its violations by check name and its data paths.
func printStats(out io.Writer, st daemon.Stats) {
	for _, n := range st.NICs {
		fmt.Fprintf(out, "%s (%s): interrupts %d\n", n.Name, n.State, n.Interrupts)
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "QUEUE\tRX PKTS\tRX BYTES\tTX PKTS\tTX BYTES\tRX DROP\tTX DROP\tTX COPY\tTX GPA\tTX SEG\tSEND FULL\tTX BUSY\tSIGNALS\tWAKEUPS\tMISSED\tPOLL s\tSLEEP s\t")
		qs := sortedQueues(n)
		var sum daemon.QueueStats
		for _, q := range qs {
			sum.TxCopied += q.TxCopied
			sum.TxGPA += q.TxGPA
			sum.TxSegmented += q.TxSegmented
			sum.TxSendFull += q.TxSendFull
			sum.TxBusy += q.TxBusy
			sum.Channel.TxSignals += q.Channel.TxSignals + q.Channel.RxSignals
			sum.Channel.Wakeups += q.Channel.Wakeups
			sum.Channel.MissedWakeups += q.Channel.MissedWakeups
			sum.PollSeconds += q.PollSeconds
			sum.SleepSeconds += q.SleepSeconds
		}
		// The totals row counts both paths (VF included); the ring and
		// send columns exist on the synthetic path only.
		t := n.Totals
		fmt.Fprintf(tw, "total\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.1f\t%.1f\t\n", t.RxPackets, t.RxBytes,
			t.TxPackets, t.TxBytes, t.RxDropped, t.TxDropped, sum.TxCopied, sum.TxGPA, sum.TxSegmented, sum.TxSendFull, sum.TxBusy,
			sum.Channel.TxSignals, sum.Channel.Wakeups, sum.Channel.MissedWakeups, sum.PollSeconds, sum.SleepSeconds)
		for _, q := range qs {
			fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.1f\t%.1f\t\n", q.Queue, q.RxPackets, q.RxBytes,
				q.TxPackets, q.TxBytes, q.RxNoMemory+q.RxTooBig, q.TxTooBig+q.TxDropOversize, q.TxCopied, q.TxGPA, q.TxSegmented,
				q.TxSendFull, q.TxBusy, q.Channel.TxSignals+q.Channel.RxSignals, q.Channel.Wakeups, q.Channel.MissedWakeups,
				q.PollSeconds, q.SleepSeconds)
		}
		tw.Flush()
		for _, check := range slices.Sorted(maps.Keys(n.Violations)) {
			if v := n.Violations[check]; v > 0 {
				fmt.Fprintf(out, "  protocol violations %s: %d\n", check, v)
			}
		}
		if n.ControlFailures > 0 {
			fmt.Fprintf(out, "  control requests the host failed: %d\n", n.ControlFailures)
		}
		printPaths(out, n.VF)
	}
}

// printCounters prints one named-counter view per NIC, in the document's
// order (which is the naming tool's own order).
func printCounters(out io.Writer, st daemon.Stats, view func(daemon.NICStats) []daemon.Counter) {
	for _, n := range st.NICs {
		fmt.Fprintf(out, "%s (%s):\n", n.Name, n.State)
		tw := tabwriter.NewWriter(out, 0, 0, 1, ' ', 0)
		for _, c := range view(n) {
			fmt.Fprintf(tw, "     %s:\t%d\n", c.Name, c.Value)
		}
		tw.Flush()
	}
}

// watchStats prints rates every tick until ctx ends or count reports were
// printed (0: no limit). Each rate is the difference of two documents'
// counters over the difference of their times, so that a late tick or a
// slow answer skews nothing.
func watchStats(ctx context.Context, out io.Writer, fetch func(context.Context) (daemon.Stats, error), ticks <-chan time.Time, count int) error {
	prev, err := fetch(ctx)
	if err != nil {
		return err
	}
	for n := 0; count == 0 || n < count; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-ticks:
		}
		cur, err := fetch(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil // interrupted: Ctrl-C is how a watch ends
			}
			return err
		}
		printRates(out, prev, cur)
		prev = cur
	}
	return nil
}

// rate is the per-second change of a counter between two readings dt
// seconds apart. A counter that went down was reset (the daemon
// restarted): it counted cur since.
func rate(prev, cur uint64, dt float64) float64 {
	if cur < prev {
		return float64(cur) / dt
	}
	return float64(cur-prev) / dt
}

// printRates prints one report of --watch: per NIC a totals row, then a
// row per queue, both directions' packets and bytes per second, and drops
// per second.
func printRates(out io.Writer, prev, cur daemon.Stats) {
	dt := cur.Time.Sub(prev.Time).Seconds()
	if dt <= 0 {
		fmt.Fprintf(out, "%s: no time passed between two readings\n", cur.Time.Format(time.TimeOnly))
		return
	}
	fmt.Fprintf(out, "%s, over %.2f s\n", cur.Time.Format(time.TimeOnly), dt)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "NIC\tQUEUE\tRX PKT/s\tRX BYTES/s\tTX PKT/s\tTX BYTES/s\tRX DROP/s\tTX DROP/s\t")
	row := func(nic, queue string, p, c [6]uint64) {
		fmt.Fprintf(tw, "%s\t%s", nic, queue)
		for i := range c {
			fmt.Fprintf(tw, "\t%.0f", rate(p[i], c[i], dt))
		}
		fmt.Fprintln(tw, "\t")
	}
	totals := func(t daemon.NICTotals) [6]uint64 {
		return [6]uint64{t.RxPackets, t.RxBytes, t.TxPackets, t.TxBytes, t.RxDropped, t.TxDropped}
	}
	queue := func(q daemon.QueueStats) [6]uint64 {
		return [6]uint64{q.RxPackets, q.RxBytes, q.TxPackets, q.TxBytes, q.RxNoMemory + q.RxTooBig, q.TxTooBig + q.TxDropOversize}
	}
	for _, n := range cur.NICs {
		// A NIC or queue missing from the previous reading counts from 0.
		var pn daemon.NICStats
		for _, p := range prev.NICs {
			if p.Name == n.Name {
				pn = p
			}
		}
		row(n.Name, "total", totals(pn.Totals), totals(n.Totals))
		for _, q := range sortedQueues(n) {
			var pq daemon.QueueStats
			for _, p := range pn.Queues {
				if p.Queue == q.Queue {
					pq = p
				}
			}
			row(n.Name, fmt.Sprint(q.Queue), queue(pq), queue(q))
		}
	}
	tw.Flush()
}
