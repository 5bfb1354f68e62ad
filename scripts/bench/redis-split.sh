#!/usr/bin/env bash
# Where a recorded redis-server's slowdown goes (by hand, as root; figures in
# BENCHMARKS.md, "Where redis's slowdown goes"). Each round runs, in turn, a
# fresh redis-server (as Debian ships it: four background threads besides the
# main one) under redis-benchmark (300,000 requests,
# -c 10 -r 100000, SET and GET) in these modes and prints requests/s:
#   none       not recorded
#   novdso     not recorded, its clock calls made as syscalls (an LD_PRELOAD
#              shim), as a recording makes them
#   rec        recorded (eBPF backend, default interval)
#   nice       recorded by a tprec at nice 19
#   rec1s      recorded with --interval 1s --keep 2
#   rec5s      recorded with --interval 5s --keep 2
# For the recorded modes it also prints the CPU time tprec used (user and
# system, from /proc) for the whole run: a figure that, unlike the
# throughput, the noise of a shared machine hardly moves. BIN names the
# directory of the tprec to run (default: ./bin), so two builds can take
# turns.
# Usage: ROUNDS=3 MODES="none rec rec1s" bash scripts/bench/redis-split.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${ROUNDS:-3}
MODES=${MODES:-none novdso rec nice rec1s rec5s}
PORT=${PORT:-6413}
BIN=${BIN:-$PWD/bin}
WORK=$(mktemp -d)
trap 'pkill -f "redis-server \*:$PORT" 2>/dev/null || true; rm -rf "$WORK"' EXIT
[ -x "$BIN/tprec" ] || make -s build
cat >"$WORK/novdso.c" <<'C'
#define _GNU_SOURCE
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
int clock_gettime(clockid_t c, struct timespec *ts) { return syscall(SYS_clock_gettime, c, ts); }
int gettimeofday(struct timeval *tv, void *tz) { return syscall(SYS_gettimeofday, tv, tz); }
C
gcc -O2 -shared -fPIC -o "$WORK/novdso.so" "$WORK/novdso.c"

one() {
	local mode=$1 pre= rec=() r=
	case $mode in
	novdso) pre=$WORK/novdso.so ;;
	rec) rec=("$BIN/tprec") ;;
	nice) rec=(nice -n 19 "$BIN/tprec") ;;
	rec1s) rec=("$BIN/tprec" --interval 1s --keep 2) ;;
	rec5s) rec=("$BIN/tprec" --interval 5s --keep 2) ;;
	esac
	LD_PRELOAD="$pre" redis-server --port "$PORT" --save "" --appendonly no --daemonize no >/dev/null 2>&1 &
	local s=$!
	for _ in $(seq 100); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.05; done
	if [ ${#rec[@]} -gt 0 ]; then
		"${rec[@]}" --pid "$s" -q -o "$WORK" &
		r=$!
		sleep 1
	fi
	local v
	v=$(redis-benchmark -p "$PORT" -n 300000 -c 10 -r 100000 -t set,get -q 2>/dev/null | tr '\r' '\n' |
		awk '/requests per second/ {s += $2; n++} END {printf "%.0f", s / n}')
	local cpu=
	if [ -n "$r" ]; then
		cpu=" tprec-cpu-s $(awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($14 + $15) / hz}' "/proc/$r/stat")"
		kill -INT "$r"
		wait "$r" 2>/dev/null || true
	fi
	kill "$s"
	wait "$s" 2>/dev/null || true
	echo "$mode $v$cpu"
}

for round in $(seq "$ROUNDS"); do
	for m in $MODES; do
		echo "round $round $(one "$m")"
	done
done
