// Command benchreport runs vmbusd's side-by-side benchmarks in one run and
// writes docs/performance.md: every comparison against its anchor (DPDK's
// ring code, DPDK's netvsc PMD, a veth pair, a Unix socket pair, busy
// polling), min/median/max over several runs, ratios, how each figure was
// measured, the machine and its load while it ran. `make bench` runs it.
//
//	benchreport [-runs N] [-quick] [-only ROW,...] [-out FILE] [-tools DIR] [-work DIR]
//	benchreport -check FILE
//	benchreport -list
//
// It builds the project's own tools (vmbusd, netbench, hvsockbench,
// ringbench) and the DPDK peers (ringpeer, testpmd's shims) and calls them
// as a user would, parsing what they print; a row whose tools are missing
// is reported as "skipped: reason". With -only, the other sections of an
// existing report are kept as they are. -check verifies that a report is
// well-formed and has every row.
package main
