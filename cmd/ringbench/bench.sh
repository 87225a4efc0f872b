#!/bin/bash
# Side-by-side VMBus ring benchmark: ringpeer (DPDK 22.11's ring code) and
# ringbench (vmbusd's vmbus package) as sender and receiver in every pairing,
# on one ring file in /dev/shm, same mode, same pinning, same packet counts.
# Prints one markdown table of medians, measured on the receiver's clock.
#
# usage: RINGPEER=/path/to/ringpeer cmd/ringbench/bench.sh [opts]
#   -r RUNS      runs per cell (default 3); the table shows medians
#   -s "SIZES"   payload sizes (default "64 256 1024 4096 16384 65536")
#   -g "RINGS"   ring sizes per direction (default "2M 256K")
#   -m "MODES"   full (payload pattern generated and checked) and/or x (-x:
#                sequence word only, ring cost only) (default "full x")
#   -p "PAIRS"   sender-receiver pairs (default "dpdk-dpdk go-go go-dpdk dpdk-go");
#                "base" names a second ringbench, for before/after in one run
#   -n MAX       packets per run: min(MAX, BYTES/SIZE) (default 2000000)
#   -b BYTES     full mode's payload bytes per run at most (default
#                10000000000, as x mode's); generating and checking every
#                payload runs at 0.1-2 GB/s, so a smaller cap shortens a sweep
#   -u           unpinned (default: sender on CPU 0, receiver on CPU 1)
# env: RINGPEER (required) the ringpeer binary (tools/ringpeer/build.sh OUTDIR);
#      RINGBENCH the ringbench binary (default: go build it into a temp dir);
#      RINGBENCH_BASE the ringbench binary that "base" in PAIRS runs, e.g. one
#      built from an earlier commit.
set -euo pipefail
runs=3 sizes="64 256 1024 4096 16384 65536" rings="2M 256K" modes="full x"
pairs="dpdk-dpdk go-go go-dpdk dpdk-go" maxn=2000000 maxb=10000000000 scpu=(-c 0) rcpu=(-c 1)
while getopts "r:s:g:m:p:n:b:u" o; do
	case $o in
	r) runs=$OPTARG ;;
	s) sizes=$OPTARG ;;
	g) rings=$OPTARG ;;
	m) modes=$OPTARG ;;
	p) pairs=$OPTARG ;;
	n) maxn=$OPTARG ;;
	b) maxb=$OPTARG ;;
	u) scpu=() rcpu=() ;;
	*) sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
	esac
done
: "${RINGPEER:?set RINGPEER to the ringpeer binary (tools/ringpeer/build.sh OUTDIR)}"
tmp=$(mktemp -d)
file=/dev/shm/ringbench-bench.$$
trap 'rm -rf "$tmp" "$file"' EXIT
if [[ -z ${RINGBENCH:-} ]]; then
	RINGBENCH=$tmp/ringbench
	(cd "$(dirname "$0")" && go build -o "$RINGBENCH" .)
fi
bin() {
	case $1 in
	go) echo "$RINGBENCH" ;;
	dpdk) echo "$RINGPEER" ;;
	base) echo "${RINGBENCH_BASE:?set RINGBENCH_BASE to use base in PAIRS}" ;;
	*) echo "unknown peer $1 in PAIRS" >&2; exit 2 ;;
	esac
}
median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
range() { sort -g | awk '{v[NR] = $1} END {printf "%.0f-%.0f", v[1], v[NR]}'; }
field() { sed -n "s/^result .* $1=\([^ ]*\).*/\1/p" "$2"; }

echo "| mode | ring/dir | payload B | sender->receiver | packets | Mpkt/s | MB/s | MB/s min-max | sender signals/pkt | sender full-waits/pkt | errors |"
echo "|---|---|---|---|---|---:|---:|---|---:|---:|---:|"
for mode in $modes; do
	opt=()
	[[ $mode == x ]] && opt=(-x)
	for ring in $rings; do
		total=$(($(numfmt --from=iec "$ring") * 2))
		for size in $sizes; do
			n=$((10000000000 / size))
			[[ $mode == full ]] && n=$((maxb / size))
			((n > maxn)) && n=$maxn
			((n < 1)) && n=1
			for pair in $pairs; do
				snd=$(bin "${pair%-*}") rcv=$(bin "${pair#*-}")
				: >"$tmp/pps"
				: >"$tmp/mbps"
				: >"$tmp/sig"
				: >"$tmp/wait"
				errs=0 failed=0
				for ((i = 0; i < runs; i++)); do
					"$RINGPEER" init "$file" "$total"
					"$rcv" "${opt[@]}" -r host "${rcpu[@]}" recv "$file" "$n" >"$tmp/r" 2>"$tmp/r.err" &
					rp=$!
					"$snd" "${opt[@]}" -r guest "${scpu[@]}" send "$file" "$n" "$size" >"$tmp/s" 2>"$tmp/s.err" || failed=$((failed + 1))
					wait "$rp" || failed=$((failed + 1))
					if [[ -z $(field pps "$tmp/r") || -z $(field waits "$tmp/s") ]]; then
						failed=$((failed + 1))
						cat "$tmp/r.err" "$tmp/s.err" >&2
						continue
					fi
					field pps "$tmp/r" >>"$tmp/pps"
					field MBps "$tmp/r" >>"$tmp/mbps"
					awk -v s="$(field signals "$tmp/s")" -v n="$n" 'BEGIN {print s / n}' >>"$tmp/sig"
					awk -v s="$(field waits "$tmp/s")" -v n="$n" 'BEGIN {print s / n}' >>"$tmp/wait"
					errs=$((errs + $(field errors "$tmp/r")))
				done
				status=$errs
				((failed > 0)) && status="$errs, $failed FAILED"
				if [[ ! -s $tmp/pps ]]; then
					printf "| %s | %s | %s | %s | %s | - | - | - | - | - | %s |\n" "$mode" "$ring" "$size" "$pair" "$n" "$status"
					continue
				fi
				printf "| %s | %s | %s | %s | %s | %.3f | %.0f | %s | %.3f | %.3f | %s |\n" \
					"$mode" "$ring" "$size" "$pair" "$n" \
					"$(median <"$tmp/pps" | awk '{print $1 / 1e6}')" "$(median <"$tmp/mbps")" \
					"$(range <"$tmp/mbps")" "$(median <"$tmp/sig")" "$(median <"$tmp/wait")" "$status"
			done
		done
	done
done
