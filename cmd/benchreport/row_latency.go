package main

// Request/response round trips through the TAP attachment, per wait mode,
// broken down hop by hop (cmd/netbench latency, hoptrace).

import (
	"context"
	"fmt"
)

// latencyBusyPoll is the per-NIC busy-poll budget the row measures besides
// "off".
const latencyBusyPoll = "100us"

func latencyRow() row {
	return row{id: "latency", title: "Request/response round trips, hop by hop",
		how: "`netbench latency`: two fresh network namespaces; a simulated host in a child process whose vSwitch port is a " +
			"kernel TAP in the host namespace, and netbench's own guest NIC (one queue) attached to a TAP in the guest " +
			"namespace, opened once per wait mode (hybrid, interrupt, poll) and per busy-poll budget (`busy_poll`, off " +
			"and " + latencyBusyPoll + "); the anchor is a veth pair between the same namespaces. A UDP client in the guest " +
			"namespace and an echo server in the host namespace (both goroutines of netbench) exchange one-byte datagrams, " +
			"one in flight, back to back (netperf's UDP_RR), 200 warm-up rounds then the measured ones; p50/p90/p99 of " +
			"the round trips, and the CPU of the netbench process (guest driver, client and server) and of the host over " +
			"them. Every vmbusd round trip is traced: the client, the guest (`vmbus.Channel.SetTrace`, nictap's observer), " +
			"the simulated host and the echo server (when it reads the request after the host's TAP write has returned; " +
			"otherwise its wake-up is inside that write's hop) stamp each hop's first occurrence into a shared page (hoptrace, wall clock, " +
			"about 0.3 µs a stamp here); a hop's time is from the latest earlier hop, so the hops of one configuration " +
			"add up to its round trip (p50s need not). Signals and interrupts appear only when the peer was asleep " +
			"(n says how many rounds had the hop). The simulated host shares the machine's cores with the guest, the " +
			"client and server, and whatever else runs: read the load figure.",
		run: runLatency}
}

func runLatency(ctx context.Context, e *env, s *section) error {
	rounds := "3000"
	if e.quick {
		rounds = "300"
	}
	all, err := netbenchRuns(ctx, e, s, "latency", e.runs, "-json", "-rounds", rounds, "-modes", "hybrid,interrupt,poll",
		"-busy-poll", "0,"+latencyBusyPoll, "latency")
	if err != nil {
		return err
	}
	type rtt struct{ p50, p90, p99, cpu, host runs }
	type hop struct {
		name          string
		p50, p99, cnt runs
	}
	var configs []string
	rtts := map[string]*rtt{}
	hops := map[string]map[int]*hop{}
	maxOrder := 0
	name := func(r jsonRecord) string {
		if r.str("path") == "veth" {
			return "veth"
		}
		c := r.str("mode")
		if bp := r.str("busy_poll_us"); bp != "" && bp != "0" {
			c += ", busy_poll " + bp + " µs"
		}
		return c
	}
	for _, recs := range all {
		for _, r := range recs {
			c := name(r)
			switch r.str("kind") {
			case "rtt":
				v, err := need(r, "p50_us", "p90_us", "p99_us", "netbench_cpu", "host_cpu")
				if err != nil {
					return err
				}
				if rtts[c] == nil {
					rtts[c] = &rtt{}
					configs = append(configs, c)
				}
				f := rtts[c]
				f.p50, f.p90, f.p99 = append(f.p50, v[0]), append(f.p90, v[1]), append(f.p99, v[2])
				f.cpu, f.host = append(f.cpu, v[3]), append(f.host, v[4])
			case "hop":
				v, err := need(r, "order", "p50_us", "p99_us", "n")
				if err != nil {
					return err
				}
				o := int(v[0])
				maxOrder = max(maxOrder, o)
				if hops[c] == nil {
					hops[c] = map[int]*hop{}
				}
				h := hops[c][o]
				if h == nil {
					h = &hop{name: r.str("stage")}
					hops[c][o] = h
				}
				h.p50, h.p99, h.cnt = append(h.p50, v[1]), append(h.p99, v[2]), append(h.cnt, v[3])
			}
		}
	}
	veth := rtts["veth"]
	if veth == nil || len(configs) < 2 {
		return notUnderstood("netbench latency printed no veth or no vmbusd round trips")
	}
	var rows [][]string
	for _, c := range configs {
		f := rtts[c]
		path := "vmbusd TAP"
		if c == "veth" {
			path = "veth"
		}
		ratio := "–"
		if c != "veth" {
			ratio = ratios(f.p50, veth.p50).cell(times)
		}
		host := f.host.cell(pct)
		if c == "veth" {
			host = "–"
		}
		rows = append(rows, []string{path, c, f.p50.cell(sig3), f.p90.cell(sig3), f.p99.cell(sig3), ratio, f.cpu.cell(pct), host})
	}
	s.para("Round trips, µs:")
	s.table([]string{"path", "wait mode", "p50 µs", "p90 µs", "p99 µs", "p50 ÷ veth", "netbench CPU (% of a core)", "host CPU (% of a core)"}, rows)
	header := []string{"hop (time since the previous one)"}
	var traced []string
	for _, c := range configs {
		if hops[c] != nil {
			traced = append(traced, c)
			header = append(header, c+" p50 µs", c+" p99 µs", c+" n")
		}
	}
	rows = nil
	for o := 1; o <= maxOrder; o++ {
		row := []string{""}
		for _, c := range traced {
			h := hops[c][o]
			if h == nil {
				row = append(row, "–", "–", "0")
				continue
			}
			row[0] = h.name
			row = append(row, h.p50.cell(sig3), h.p99.cell(sig3), intf(h.cnt.median()))
		}
		if row[0] != "" {
			rows = append(rows, row)
		}
	}
	s.para("Where a round trip goes (each hop's p50 and p99 over the rounds of a run, then the median [min–max] over the runs; n is the median count of rounds that had the hop):")
	s.table(header, rows)
	for _, c := range configs {
		if c == "veth" {
			continue
		}
		f := rtts[c]
		s.sum(fmt.Sprintf("UDP request/response p50 through the TAP attachment, %s vs veth, µs", c), sig3(f.p50.median()),
			sig3(veth.p50.median()), ratios(f.p50, veth.p50).cell(times))
	}
	return nil
}
