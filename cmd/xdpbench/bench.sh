#!/usr/bin/env bash
# cmd/xdpbench/bench.sh: vmbusd's AF_XDP data path (package afxdp) against DPDK
# 22.11's net_af_xdp PMD (dpdk-testpmd), on the same veth pair, in one run.
#
#   cmd/xdpbench/bench.sh [SECONDS]    (root; default 5 s per window; or: make afxdp-bench SECS=5)
#   env: SIZES="64 1514"  REPEAT=3  OUT=DIR  RING=2048  PROFILE=1 (pprof of vmbusd's side)
#
# For each frame size it measures four things, each over the same window:
#   rx  DPDK   testpmd --forward-mode=rxonly on A; xdpbench gen floods from B
#   rx  vmbusd xdpbench rx (afxdp.Port, Wait+Recv) on A; the same flood
#   tx  DPDK   testpmd --forward-mode=txonly on A; xdpbench count drops+counts on B
#   tx  vmbusd xdpbench tx (afxdp.Socket.Send) on A; the same counter
# "Delivered" is what the application received (rx) or what reached B (tx),
# per second of the window; "CPU" is the user+system seconds of the
# process under test during the window, from /proc/PID/stat (the kernel's
# work in softirq is charged to whichever process runs it). Both sides run
# with their defaults: copy mode on veth, need-wakeup, one queue; DPDK
# polls, vmbusd sleeps in Wait when its ring is empty. The process under
# test runs on CPU 1 (testpmd's forwarding lcore; xdpbench under taskset),
# the traffic source or counter on CPU 0. The four runs are interleaved
# REPEAT times and each cell is the median, as the machine may be shared.
set -euo pipefail
cd "$(dirname "$0")/../.."

SECS=${1:-5}
SIZES=${SIZES:-64 1514}
REPEAT=${REPEAT:-3}
RING=${RING:-2048}
OUT=${OUT:-$(mktemp -d /tmp/xdpbench.XXXXXX)}
mkdir -p "$OUT"

[ "$(id -u)" = 0 ] || { echo "bench.sh: needs root (veth, XDP)" >&2; exit 2; }
if ! command -v dpdk-testpmd >/dev/null || ! dpkg -s librte-net-af-xdp23 >/dev/null 2>&1; then
	echo "bench.sh: installing dpdk, dpdk-dev, librte-net-af-xdp23" >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y dpdk dpdk-dev librte-net-af-xdp23 >"$OUT/apt.log" 2>&1 ||
		{ echo "bench.sh: apt-get failed, see $OUT/apt.log" >&2; exit 2; }
fi
go build -o "$OUT/xdpbench" ./cmd/xdpbench
XB=$OUT/xdpbench

A=axbA$$
B=axbB$$
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill -INT "$p" 2>/dev/null || true; done
	sleep 0.5
	for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
	ip link del "$A" 2>/dev/null || true
	rm -rf "/var/run/dpdk/afxdpbench$$"
	exec 7>&- 2>/dev/null || true
}
trap cleanup EXIT
ip link add "$A" numtxqueues 1 numrxqueues 1 type veth peer name "$B" numtxqueues 1 numrxqueues 1
for i in "$A" "$B"; do
	echo 1 >"/proc/sys/net/ipv6/conf/$i/disable_ipv6"
	ip link set "$i" up
done
AMAC=$(cat "/sys/class/net/$A/address")

# cpu PID: user+system seconds of a process, all threads.
TCK=$(getconf CLK_TCK)
cpu() { awk -v t="$TCK" '{printf "%.3f", ($14+$15)/t}' "/proc/$1/stat"; }

# wait_for FILE PATTERN: until a log line matches (30 s at most).
wait_for() {
	for _ in $(seq 300); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
	echo "bench.sh: timed out waiting for '$2' in $1" >&2; tail -20 "$1" >&2; return 1
}

rm -f "$OUT/stdin"
mkfifo "$OUT/stdin"
exec 7<>"$OUT/stdin" # testpmd waits on stdin for Enter; keep it open

# testpmd MODE SIZE LOG: starts testpmd on A in the background, sets TP.
testpmd() {
	stdbuf -oL dpdk-testpmd --no-huge -m 512 --iova-mode=va --no-pci --no-shconf \
		--file-prefix "afxdpbench$$" -l 0-1 \
		--vdev "net_af_xdp0,iface=$A,start_queue=0,queue_count=1" -- \
		--forward-mode="$1" --txpkts="$2" --total-num-mbufs=16384 \
		--eth-peer=0,02:00:00:00:00:02 <"$OUT/stdin" >"$3" 2>&1 &
	TP=$!
	PIDS+=("$TP")
	wait_for "$3" "Press enter to exit"
	sleep 1 # past the port start
}

# stop PID: SIGINT, then wait for it to print its totals and exit.
stop() {
	kill -INT "$1" 2>/dev/null || true
	for _ in $(seq 100); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
	kill -KILL "$1" 2>/dev/null || true
}

# rx_window PID: floods A from B for SECS; sets CPU, GENSENT, GENSECS.
rx_window() {
	local c0 c1 g
	c0=$(cpu "$1")
	g=$(taskset -c 0 "$XB" gen -i "$B" -size "$SIZE" -dst "$AMAC" -seconds "$SECS" -ring "$RING")
	c1=$(cpu "$1")
	CPU=$(echo "$c1 - $c0" | bc -l)
	GENSENT=$(sed -n 's/.*sent=\([0-9]*\).*/\1/p' <<<"$g")
	GENSECS=$(sed -n 's/.*elapsed=\([0-9.]*\).*/\1/p' <<<"$g")
	sleep 0.3 # frames in flight
}

# tx_window PID: counts what reaches B for SECS; sets CPU, DELIV.
tx_window() {
	local c0 c1 g n s
	c0=$(cpu "$1")
	g=$(taskset -c 0 "$XB" count -i "$B" -seconds "$SECS")
	c1=$(cpu "$1")
	CPU=$(echo "$c1 - $c0" | bc -l)
	n=$(sed -n 's/.*count=\([0-9]*\).*/\1/p' <<<"$g")
	s=$(sed -n 's/.*elapsed=\([0-9.]*\).*/\1/p' <<<"$g")
	DELIV=$(echo "$n / $s" | bc -l)
}

# testpmd_rx LOG: RX-packets of port 0 in testpmd's final statistics.
testpmd_rx() { grep -E 'RX-packets:' "$1" | tail -1 | sed -E 's/.*RX-packets: *([0-9]+).*/\1/'; }

declare -A R # R[size,dir,side,rate|cpu] = space-separated samples
add() { R[$1]="${R[$1]:-} $2"; }
median() { tr ' ' '\n' <<<"${R[$1]}" | grep . | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

echo "bench.sh: veth $A<->$B, ${SECS}s windows x $REPEAT, logs in $OUT"
for rep in $(seq "$REPEAT"); do
	for SIZE in $SIZES; do
		L=$OUT/$SIZE-$rep
		# --- rx, DPDK
		testpmd rxonly "$SIZE" "$L-tp-rx.log"
		rx_window "$TP"
		stop "$TP"
		add "$SIZE,rx,DPDK,rate" "$(echo "$(testpmd_rx "$L-tp-rx.log") / $GENSECS" | bc -l)"
		add "$SIZE,rx,DPDK,cpu" "$CPU"
		add "$SIZE,rx,DPDK,offered" "$(echo "$GENSENT / $GENSECS" | bc -l)"

		# --- rx, vmbusd
		prof=()
		[ "${PROFILE:-0}" = 1 ] && prof=(-cpuprofile "$L-rx.pprof")
		taskset -c 1 "$XB" rx -i "$A" -ring "$RING" "${prof[@]}" >"$L-vm-rx.log" 2>&1 &
		VM=$!
		PIDS+=("$VM")
		wait_for "$L-vm-rx.log" ready
		rx_window "$VM"
		stop "$VM"
		add "$SIZE,rx,vmbusd,rate" "$(echo "$(sed -n 's/.*received=\([0-9]*\).*/\1/p' "$L-vm-rx.log") / $GENSECS" | bc -l)"
		add "$SIZE,rx,vmbusd,cpu" "$CPU"
		add "$SIZE,rx,vmbusd,offered" "$(echo "$GENSENT / $GENSECS" | bc -l)"
		MODES=$(grep -o 'attach=[a-z]* bind=[a-z-]*' "$L-vm-rx.log")

		# --- tx, DPDK
		testpmd txonly "$SIZE" "$L-tp-tx.log"
		tx_window "$TP"
		stop "$TP"
		add "$SIZE,tx,DPDK,rate" "$DELIV"
		add "$SIZE,tx,DPDK,cpu" "$CPU"

		# --- tx, vmbusd
		prof=()
		[ "${PROFILE:-0}" = 1 ] && prof=(-cpuprofile "$L-tx.pprof")
		taskset -c 1 "$XB" tx -i "$A" -size "$SIZE" -ring "$RING" "${prof[@]}" >"$L-vm-tx.log" 2>&1 &
		VM=$!
		PIDS+=("$VM")
		wait_for "$L-vm-tx.log" ready
		sleep 0.5
		tx_window "$VM"
		stop "$VM"
		add "$SIZE,tx,vmbusd,rate" "$DELIV"
		add "$SIZE,tx,vmbusd,cpu" "$CPU"
	done
done

echo "vmbusd: $MODES, ring $RING; DPDK: net_af_xdp defaults (libxdp program, copy mode on veth)"
printf '%-5s %-3s %-7s %12s %9s %14s %s\n' size dir side delivered cpu-s "pps/cpu-s" "(rx: offered pps)"
for SIZE in $SIZES; do
	for dir in rx tx; do
		for side in DPDK vmbusd; do
			k=$SIZE,$dir,$side
			rate=$(median "$k,rate")
			c=$(median "$k,cpu")
			off=""
			[ "$dir" = rx ] && off=$(printf '%.0f' "$(median "$k,offered")")
			printf '%-5s %-3s %-7s %12.0f %9.2f %14.0f %s\n' "$SIZE" "$dir" "$side" "$rate" "$c" "$(echo "$rate / ($c + 0.000001)" | bc -l)" "$off"
		done
	done
done
echo
for SIZE in $SIZES; do
	for dir in rx tx; do
		vr=$(median "$SIZE,$dir,vmbusd,rate"); vc=$(median "$SIZE,$dir,vmbusd,cpu")
		dr=$(median "$SIZE,$dir,DPDK,rate"); dc=$(median "$SIZE,$dir,DPDK,cpu")
		printf 'RATIO %-5s %s vmbusd/DPDK: delivered %.2fx  cpu %.2fx  pps-per-cpu-s %.2fx\n' "$SIZE" "$dir" \
			"$(echo "$vr / $dr" | bc -l)" "$(echo "$vc / ($dc + 0.000001)" | bc -l)" \
			"$(echo "($vr / ($vc + 0.000001)) / ($dr / ($dc + 0.000001))" | bc -l)"
	done
done
