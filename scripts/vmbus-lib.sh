# shellcheck shell=bash
# vmbus-lib.sh: shared by the vmbusd bring-up scripts (sourced, not run).
#
# VMBUSD names the vmbusd binary that vmbus-bind, vmbus-unbind and
# vmbus-check hand their work to ("none": their bash fallback; see
# find_vmbusd).
#
# Everything lives under a root directory standing for "/":
#   VMBUSD_ROOT       the sysfs/proc root (default /); a simulated host's tree works
#   VMBUSD_STATE_DIR  binding records (default $VMBUSD_ROOT/run/vmbusd = /run/vmbusd)
#   VMBUSD_TIMEOUT    seconds to wait for each kernel step (default 10)
#
# The binding record (bind-<uuid>.json in the state directory) has the
# layout internal/bind writes (json.MarshalIndent, two spaces, one key per
# line), so `vmbusd restore` gives back what vmbus-bind took and vice versa.

# shellcheck disable=SC2034 # globals for the scripts that source this file
ROOT=${VMBUSD_ROOT:-/}
while [[ $ROOT == */ ]]; do ROOT=${ROOT%/}; done # "/" -> "", "/x/" -> "/x"
STATE_DIR=${VMBUSD_STATE_DIR:-$ROOT/run/vmbusd}
TIMEOUT=${VMBUSD_TIMEOUT:-10}
BUS=$ROOT/sys/bus/vmbus
UIO_DRV=uio_hv_generic
NETVSC_DRV=hv_netvsc
NET_CLASS=f8615163-df3e-46c5-913f-f2d2f965ed0e
PROG=${0##*/}

die() {
	printf '%s: %s\n' "$PROG" "$*" >&2
	exit 1
}
warn() { printf '%s: warning: %s\n' "$PROG" "$*" >&2; }
say() { printf '%s\n' "$*"; }

# --- handing the work to vmbusd ----------------------------------------------
#
# Bring-up has one implementation, internal/bind behind `vmbusd bind`,
# `unbind` and `check`. vmbus-bind, vmbus-unbind and vmbus-check hand their
# work to that binary when one is found; their own bash steps are the
# fallback for a system without it (a rescue shell, an image built without
# Go, before the package is installed).

# find_vmbusd: sets VMBUSD_BIN to the vmbusd binary to run, "" for the bash
# fallback: $VMBUSD (a path or a command name; "none" forces the fallback),
# else vmbusd on $PATH, else a vmbusd beside the script.
find_vmbusd() {
	VMBUSD_BIN=
	local want=${VMBUSD:-} found dir
	case $want in
	none) return 0 ;;
	"")
		if found=$(command -v vmbusd); then
			VMBUSD_BIN=$found
			return 0
		fi
		dir=$(dirname -- "$(readlink -f -- "$0")")
		if [[ -f $dir/vmbusd && -x $dir/vmbusd ]]; then
			VMBUSD_BIN=$dir/vmbusd
		fi
		;;
	*)
		found=$(command -v -- "$want") || found=
		if [[ -z $found || ! -f $found || ! -x $found ]]; then
			printf '%s: VMBUSD=%s: no such executable (VMBUSD=none runs the bash fallback)\n' "$PROG" "$want" >&2
			exit 2
		fi
		VMBUSD_BIN=$found
		;;
	esac
}

# hand_over COMMAND ARGS...: replace this script with `vmbusd COMMAND --root
# ROOT [--state-dir DIR] ARGS...`; its exit status (3 busy among them) is
# the script's.
hand_over() {
	local cmd=$1
	shift
	local args=(--root "${ROOT:-/}")
	if [[ $cmd != check && -n ${VMBUSD_STATE_DIR:-} ]]; then
		args+=(--state-dir "$VMBUSD_STATE_DIR")
	fi
	exec "$VMBUSD_BIN" "$cmd" "${args[@]}" "$@"
}

# is_real_root: true when working on the running system (netlink, /proc/PID,
# modprobe and udev mean something).
is_real_root() { [[ -z $ROOT ]]; }

is_guid() { [[ $1 =~ ^[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$ ]]; }

# valid_ifname NAME: the kernel's dev_valid_name.
valid_ifname() {
	[[ -n $1 && ${#1} -le 15 && $1 != . && $1 != .. && $1 != */* && $1 != *:* && $1 != *[[:space:]]* ]]
}

check_timeout() {
	if ! [[ $TIMEOUT =~ ^[0-9]+$ ]] || ((TIMEOUT == 0)); then
		die "VMBUSD_TIMEOUT=$TIMEOUT: want whole seconds > 0"
	fi
}

# attr FILE: a sysfs attribute without its trailing newline; fails when absent.
attr() {
	[[ -r $1 ]] || return 1
	local v
	v=$(<"$1") || return 1
	printf '%s' "$v"
}

# sysfs_write FILE VALUE: `echo -n VALUE > FILE`, failing (quietly) when the
# kernel refuses the write. A simulated tree accepts every write, so callers
# verify the outcome.
sysfs_write() {
	{ printf '%s' "$2" >"$1"; } 2>/dev/null
}

# now_us: microseconds since the epoch.
now_us() { printf '%s' "${EPOCHREALTIME/./}"; }

# wait_until WHAT CMD...: run CMD until it succeeds, at most $TIMEOUT seconds.
wait_until() {
	local what=$1 deadline
	shift
	deadline=$(($(now_us) + TIMEOUT * 1000000))
	until "$@"; do
		if (($(now_us) > deadline)); then
			warn "timed out after ${TIMEOUT}s waiting for $what"
			return 1
		fi
		sleep 0.02
	done
}

# resolve NAME: sets DEV (lowercase instance uuid) and DEV_DIR from an
# instance uuid (braces allowed) or a kernel interface name
# (sys/class/net/NAME/device, DPDK's recipe).
resolve() {
	local name=$1 target
	name=${name#\{}
	name=${name%\}}
	if is_guid "$name"; then
		DEV=${name,,}
		DEV_DIR=$BUS/devices/$DEV
		[[ -e $DEV_DIR ]] || die "no VMBus device $DEV"
		return 0
	fi
	valid_ifname "$1" || die "'$1' is neither a device uuid nor an interface name"
	[[ -e $ROOT/sys/class/net/$1 ]] || die "no interface or device '$1'"
	target=$(readlink -f -- "$ROOT/sys/class/net/$1/device" 2>/dev/null) ||
		die "interface $1 has no device (virtual?): not a VMBus device"
	DEV=${target##*/}
	if ! is_guid "$DEV" || [[ $(readlink -f -- "$BUS/devices/$DEV" 2>/dev/null) != "$target" ]]; then
		die "interface $1 is not a VMBus device (${target##*/})"
	fi
	DEV_DIR=$BUS/devices/$DEV
}

# class_of DIR: the class uuid without braces.
class_of() {
	local c
	c=$(attr "$1/class_id") || return 1
	c=${c#\{}
	printf '%s' "${c%\}}"
}

# class_name UUID: the short name of a device class (vmbus/guid.go's names).
class_name() {
	case $1 in
	f8615163-df3e-46c5-913f-f2d2f965ed0e) echo netvsc ;;
	ba6163d9-04a1-4d29-b605-72e2ffb1dc7f) echo storvsc ;;
	32412632-86cb-44a2-9b5c-50d1417354f5) echo ide ;;
	2f9bcc4a-0069-4af3-b76b-6fd0be528cda) echo synthfc ;;
	8c2eaf3d-32a7-4b09-ab99-bd1f1c86b501) echo nd ;;
	44c4f61d-4444-4400-9d52-802e27ede19f) echo pci ;;
	34d14be3-dee4-41c8-9ae7-6b174977c192) echo fcopy ;;
	a9a0f4e7-5a45-4d96-b827-8a841e8c03e6) echo kvp ;;
	35fa2e29-ea23-4236-96ae-3a6ebacba440) echo vss ;;
	0e0b6031-5213-4934-818b-38d90ced39db) echo shutdown ;;
	9527e630-d0ae-497b-adce-e80ab0175caf) echo timesync ;;
	57164f39-9115-4e78-ab55-382f3bd5422d) echo heartbeat ;;
	525074dc-8985-46e2-8057-a307dc18a502) echo balloon ;;
	da0a7802-e377-4aac-8e77-0558eb1073f8) echo video ;;
	f912ad6d-2b17-48ea-bd65-f927a61c7684) echo keyboard ;;
	cfa8b69e-5b4a-4cc0-b98b-8ba1a1f3f95a) echo mouse ;;
	6a2d0bba-7d1c-4c0e-9e37-5bd1a0c4e2f1) echo vmbusd-test ;;
	*-facb-11e6-bd58-64006a7986d3) echo hv_sock ;;
	*) echo unknown ;;
	esac
}

# driver_of DIR: the bound driver's name, "" when unbound.
driver_of() {
	local t
	t=$(readlink -- "$1/driver" 2>/dev/null) || return 0
	printf '%s' "${t##*/}"
}

# override_of DIR: driver_override, "" when "(null)"; fails when absent.
override_of() {
	local v
	v=$(attr "$1/driver_override") || return 1
	[[ $v == "(null)" ]] && v=
	printf '%s' "$v"
}

# netdev_of DIR: the device's kernel netdev (net/NAME), "" when none.
netdev_of() {
	local n
	for n in "$1"/net/*; do
		[[ -e $n ]] || continue
		printf '%s' "${n##*/}"
		return 0
	done
}

# uio_of DIR: the device's uio node (uio/uioN), "" when none.
uio_of() {
	local n
	for n in "$1"/uio/uio[0-9]*; do
		[[ -e $n ]] || continue
		printf '%s' "${n##*/}"
		return 0
	done
}

# module_state: loaded, builtin, available or missing (dpdk-devbind's
# test: /sys/module or modules.builtin; plus the driver directory, and an
# installed .ko for "available").
module_state() {
	local rel
	if [[ -e $ROOT/sys/module/$UIO_DRV || -e $BUS/drivers/$UIO_DRV ]]; then
		echo loaded
		return
	fi
	rel=$(attr "$ROOT/proc/sys/kernel/osrelease") || rel=
	if [[ -n $rel ]] && grep -qs "/$UIO_DRV\.ko$" "$ROOT/lib/modules/$rel/modules.builtin"; then
		echo builtin
	elif [[ -n $rel ]] && grep -qs "/$UIO_DRV\.ko[^:]*:" "$ROOT/lib/modules/$rel/modules.dep"; then
		echo available
	else
		echo missing
	fi
}

# require_module: uio_hv_generic loaded (modprobe on a real root).
require_module() {
	local st
	st=$(module_state)
	case $st in
	loaded | builtin) return 0 ;;
	available)
		if is_real_root; then
			modprobe -q "$UIO_DRV" || die "modprobe $UIO_DRV failed"
			[[ $(module_state) == loaded ]] && return 0
		fi
		die "$UIO_DRV is installed but not loaded (modprobe $UIO_DRV)"
		;;
	*) die "$UIO_DRV not found (kernel built without CONFIG_UIO_HV_GENERIC?)" ;;
	esac
}

# --- routes (/proc/net/route, /proc/net/ipv6_route) -------------------------

# default_route_ifaces: interfaces carrying a usable default route, IPv4 or
# IPv6, one per line, sorted.
default_route_ifaces() {
	{
		local iface dst flags mask plen rest
		if [[ -r $ROOT/proc/net/route ]]; then
			while read -r iface dst _ flags _ _ _ mask rest; do
				[[ $iface == Iface || $dst != 00000000 || $mask != 00000000 ]] && continue
				route_usable "$iface" "$flags" && echo "$iface"
			done <"$ROOT/proc/net/route"
		fi
		if [[ -r $ROOT/proc/net/ipv6_route ]]; then
			while read -r dst plen _ _ _ _ _ _ flags iface; do
				[[ $dst == 00000000000000000000000000000000 && $plen == 00 ]] || continue
				route_usable "$iface" "$flags" && echo "$iface"
			done <"$ROOT/proc/net/ipv6_route"
		fi
	} | sort -u
}

# route_usable IFACE FLAGS: RTF_UP, not RTF_REJECT, not loopback.
route_usable() {
	[[ $1 != lo && $2 =~ ^[0-9a-fA-F]+$ ]] || return 1
	((16#$2 & 0x1)) && ! ((16#$2 & 0x200))
}

# ipv4_le A.B.C.D: the address as /proc/net/route prints it, as a number
# (a big-endian u32 printed in host order; little-endian hosts).
ipv4_le() {
	local a b c d
	IFS=. read -r a b c d <<<"$1"
	printf '%d' $(((d << 24) | (c << 16) | (b << 8) | a))
}

# ipv6_hex ADDR: the address as 32 hex digits, as /proc/net/ipv6_route
# prints it.
ipv6_hex() {
	local a=${1%%\%*} head tail out='' g i n
	local -a h=() t=()
	if [[ $a == *::* ]]; then
		head=${a%%::*} tail=${a#*::}
	else
		head=$a tail=
	fi
	[[ -n $head ]] && IFS=: read -ra h <<<"$head"
	[[ -n $tail ]] && IFS=: read -ra t <<<"$tail"
	n=$((8 - ${#h[@]} - ${#t[@]}))
	for g in "${h[@]}"; do out+=$(printf '%04x' "0x$g"); done
	for ((i = 0; i < n; i++)); do out+=0000; done
	for g in "${t[@]}"; do out+=$(printf '%04x' "0x$g"); done
	printf '%s' "$out"
}

# route_iface_for ADDR: the interface the kernel sends to ADDR through
# (longest prefix, then lowest metric), "" when none.
route_iface_for() {
	local addr=$1 best='' bits=-1 metric=0 iface dst flags m mask plen rest n
	addr=${addr#::ffff:}
	if [[ $addr == *.*.*.* ]]; then
		[[ -r $ROOT/proc/net/route ]] || return 0
		local a
		a=$(ipv4_le "$addr")
		while read -r iface dst _ flags _ _ m mask rest; do
			[[ $iface == Iface ]] && continue
			route_usable "$iface" "$flags" || continue
			(((a & 16#$mask) == 16#$dst)) || continue
			n=$(popcount $((16#$mask)))
			if ((n > bits || (n == bits && m < metric))); then
				best=$iface bits=$n metric=$m
			fi
		done <"$ROOT/proc/net/route"
	else
		[[ -r $ROOT/proc/net/ipv6_route ]] || return 0
		local hx nib rem mk
		hx=$(ipv6_hex "$addr")
		while read -r dst plen _ _ _ m _ _ flags iface; do
			route_usable "$iface" "$flags" || continue
			n=$((16#$plen)) nib=$((n / 4)) rem=$((n % 4))
			[[ ${hx:0:nib} == "${dst:0:nib}" ]] || continue
			if ((rem)); then
				mk=$(((0xf << (4 - rem)) & 0xf))
				(((16#${hx:nib:1} & mk) == (16#${dst:nib:1} & mk))) || continue
			fi
			if ((n > bits || (n == bits && 16#$m < metric))); then
				best=$iface bits=$n metric=$((16#$m))
			fi
		done <"$ROOT/proc/net/ipv6_route"
	fi
	printf '%s' "$best"
}

popcount() {
	local v=$1 c=0
	while ((v)); do
		((c += v & 1)) || true
		((v >>= 1)) || true
	done
	printf '%d' "$c"
}

# management_reason IFACE: why IFACE must not be taken from the kernel, ""
# when nothing: the default route; the SSH session (SSH_CONNECTION): the
# route to its client, or (real root) the server address on IFACE.
management_reason() {
	local ifc=$1 why=() client server
	if default_route_ifaces | grep -qxF -- "$ifc"; then
		why+=("it carries the default route")
	fi
	if [[ -n ${SSH_CONNECTION:-} ]]; then
		read -r client _ server _ <<<"$SSH_CONNECTION"
		if [[ $(route_iface_for "$client") == "$ifc" ]]; then
			why+=("the SSH session from $client runs over it")
		elif is_real_root && ip -o addr show dev "$ifc" 2>/dev/null | awk -v s="${server#::ffff:}" '{split($4, a, "/"); if (a[1] == s) f = 1} END {exit !f}'; then
			why+=("it holds $server, the SSH session's server address")
		fi
	fi
	local IFS=';'
	printf '%s' "${why[*]}"
}

# --- the binding record ----------------------------------------------------

record_path() { printf '%s/bind-%s.json' "$STATE_DIR" "$1"; }

json_str() {
	local s=$1
	s=${s//\\/\\\\}
	s=${s//\"/\\\"}
	printf '"%s"' "$s"
}

# record_write: writes the record of $DEV from the REC_* variables (CLASS,
# DRIVER, OVERRIDE, IFACE, MAC, MTU, UP, ADDRS array) atomically.
record_write() {
	local tmp f i
	: "${REC_CLASS?}" "${REC_DRIVER?}" "${REC_OVERRIDE?}" "${REC_IFACE?}" "${REC_MAC?}" "${REC_UP?}"
	f=$(record_path "$DEV")
	mkdir -p -- "$STATE_DIR" || return 1
	tmp=$(mktemp "$STATE_DIR/.bind-XXXXXX") || return 1
	{
		printf '{\n'
		printf '  "version": 1,\n'
		printf '  "device": %s,\n' "$(json_str "$DEV")"
		printf '  "class": %s,\n' "$(json_str "$REC_CLASS")"
		printf '  "root": %s,\n' "$(json_str "${ROOT:-/}")"
		printf '  "by": "vmbus-bind",\n'
		printf '  "time": "%s",\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
		printf '  "original_driver": %s,\n' "$(json_str "$REC_DRIVER")"
		printf '  "original_override": %s,\n' "$(json_str "$REC_OVERRIDE")"
		printf '  "interface": %s,\n' "$(json_str "$REC_IFACE")"
		printf '  "mac": %s,\n' "$(json_str "$REC_MAC")"
		printf '  "mtu": %d,\n' "${REC_MTU:-0}"
		printf '  "up": %s,\n' "$REC_UP"
		if ((${#REC_ADDRS[@]} == 0)); then
			printf '  "addresses": []\n'
		else
			printf '  "addresses": [\n'
			for ((i = 0; i < ${#REC_ADDRS[@]}; i++)); do
				printf '    %s' "$(json_str "${REC_ADDRS[i]}")"
				((i + 1 < ${#REC_ADDRS[@]})) && printf ','
				printf '\n'
			done
			printf '  ]\n'
		fi
		printf '}\n'
	} >"$tmp" || {
		rm -f -- "$tmp"
		return 1
	}
	if ! chmod 0644 "$tmp" || ! mv -f -- "$tmp" "$f"; then
		rm -f -- "$tmp"
		return 1
	fi
}

# record_get FILE KEY: a scalar value of the record (strings unquoted).
record_get() {
	local v
	v=$(sed -n "s/^  \"$2\": \(.*\)\$/\1/p" "$1" | head -n 1)
	v=${v%,}
	if [[ $v == \"*\" ]]; then
		v=${v#\"}
		v=${v%\"}
		v=${v//\\\"/\"}
		v=${v//\\\\/\\}
	fi
	[[ $v == null ]] && v=
	printf '%s' "$v"
}

# record_addresses FILE: the recorded addresses, one per line.
record_addresses() {
	awk '/^  "addresses": \[$/ {on = 1; next} on && /^  \]/ {on = 0} on {gsub(/[",[:space:]]/, ""); if ($0 != "") print}' "$1"
}

# record_by_interface NAME: the uuid of the device whose record names NAME.
record_by_interface() {
	local f
	for f in "$STATE_DIR"/bind-*.json; do
		[[ -e $f ]] || continue
		if [[ $(record_get "$f" interface) == "$1" ]]; then
			record_get "$f" device
			return 0
		fi
	done
	return 1
}

# check_owner: refuse, with exit 3, to touch $DEV while a live vmbusd daemon
# owns the state directory and drives the device: it holds the owner lock
# (flock on STATE_DIR/vmbusd.lock) and lists the device in
# owner.json (internal/owner). Devices the daemon does not drive are free.
check_owner() {
	local lock=$STATE_DIR/vmbusd.lock info=$STATE_DIR/owner.json pid
	[[ -e $lock ]] && command -v flock >/dev/null || return 0
	flock -n "$lock" true 2>/dev/null && return 0 # no owner
	grep -q '"command": "run"' "$info" 2>/dev/null || return 0
	if grep -qi "\"$DEV\"" "$info"; then
		pid=$(sed -n 's/^ *"pid": *\([0-9]*\).*/\1/p' "$info")
		printf '%s: busy: the vmbusd daemon (pid %s) drives device %s; stop it first, or remove the device from its configuration and reload\n' \
			"$PROG" "$pid" "$DEV" >&2
		exit 3
	fi
}

# lock_state: the state directory's lock, shared with internal/bind (flock
# on bind.lock), held until the script exits.
lock_state() {
	mkdir -p -- "$STATE_DIR" || die "cannot create $STATE_DIR"
	exec 9>>"$STATE_DIR/bind.lock" || die "cannot open $STATE_DIR/bind.lock"
	if command -v flock >/dev/null; then
		flock -w "$TIMEOUT" 9 || die "$STATE_DIR/bind.lock held by another process for ${TIMEOUT}s"
	else
		warn "flock not installed: not serialising with other binders"
	fi
}

# --- kernel steps ----------------------------------------------------------

has_driver() { [[ $(driver_of "$DEV_DIR") == "$1" ]]; }
has_netdev() { [[ -n $(netdev_of "$DEV_DIR") ]]; }
has_uio_node() {
	local n
	n=$(uio_of "$DEV_DIR")
	[[ -n $n && -e $ROOT/dev/$n ]]
}

# unbind_current: unbind $DEV from its driver and wait until it is gone
# (binding right after an unbind can fail with EBUSY).
unbind_current() {
	local cur
	cur=$(driver_of "$DEV_DIR")
	[[ -z $cur ]] && return 0
	sysfs_write "$BUS/drivers/$cur/unbind" "$DEV" || true # raced: the wait decides
	wait_until "$cur to release $DEV" has_driver ""
}

# bind_to DRIVER: ask DRIVER to take $DEV (drivers_probe when the kernel
# refuses the bind write) and wait until it has.
bind_to() {
	if ! sysfs_write "$BUS/drivers/$1/bind" "$DEV"; then
		sysfs_write "$BUS/drivers_probe" "$DEV" || warn "$1/bind and drivers_probe refused $DEV"
	fi
	wait_until "$1 to claim $DEV" has_driver "$1"
}

# set_override VALUE: driver_override (empty clears it).
set_override() {
	local v=$1
	[[ -z $v ]] && v=$'\n'
	sysfs_write "$DEV_DIR/driver_override" "$v"
}

# node_holders NODE: pids holding NODE open (real root only).
node_holders() {
	local fd pids=()
	for fd in /proc/[0-9]*/fd/*; do
		if [[ $(readlink -- "$fd" 2>/dev/null) == "$1" ]]; then
			fd=${fd#/proc/}
			pids+=("${fd%%/*}")
		fi
	done
	printf '%s' "${pids[*]}"
}

# give_back DRIVER OVERRIDE IFACE MTU UP ADDRS...: return $DEV to DRIVER
# with OVERRIDE; for hv_netvsc wait for the netdev and, on a real root,
# restore its name, MTU, addresses and up state. Prints the final netdev.
give_back() {
	local drv=$1 ov=$2 ifc=$3 mtu=$4 up=$5 cur new a
	shift 5
	cur=$(driver_of "$DEV_DIR")
	if [[ -n $cur && $cur != "$drv" ]]; then
		unbind_current || return 1
		cur=
	fi
	if [[ $(override_of "$DEV_DIR") != "$ov" ]]; then
		set_override "$ov" || { warn "cannot restore driver_override of $DEV"; return 1; }
	fi
	if [[ -n $drv && $cur != "$drv" ]]; then
		bind_to "$drv" || return 1
	fi
	[[ $drv == "$NETVSC_DRV" ]] || return 0
	wait_until "the netdev of $DEV to come back" has_netdev || return 1
	new=$(netdev_of "$DEV_DIR")
	if is_real_root && [[ -n $ifc ]]; then
		if [[ $new != "$ifc" && ! -e /sys/class/net/$ifc ]]; then
			ip link set dev "$new" down && ip link set dev "$new" name "$ifc" && new=$ifc
		fi
		if [[ -n $mtu && $mtu != 0 && $(attr "/sys/class/net/$new/mtu") != "$mtu" ]]; then
			ip link set dev "$new" mtu "$mtu" || warn "cannot restore MTU $mtu on $new"
		fi
		for a in "$@"; do
			ip addr replace "$a" dev "$new" || warn "cannot restore address $a on $new"
		done
		if [[ $up == true ]]; then
			ip link set dev "$new" up || warn "cannot set $new up"
		fi
	fi
	printf '%s' "$new"
}
