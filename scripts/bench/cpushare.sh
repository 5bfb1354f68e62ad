#!/usr/bin/env bash
# Where the CPUs go when redis-server under redis-benchmark is recorded:
# requests a second, and the CPU time of the server, the client, the third
# party (tprec, or a plain CPU hog) and the idle CPUs, over the same window,
# each also per request. Modes take turns in every round:
#   none      unrecorded
#   tprec     recorded (BIN/tprec attached)
#   nice19    recorded by a tprec started under nice -n 19
#   hog       unrecorded, with scripts/bench/hog.c keeping HOG percent of one
#             CPU busy in periods of HOG_PERIOD microseconds (default 22 and
#             1000: about what tprec takes here)
#   hogidle   the same hog at SCHED_IDLE (chrt --idle 0)
#   hogbatch  the same hog at SCHED_BATCH (chrt --batch 0)
#   batch     recorded by a tprec started at SCHED_BATCH
#   cpu1      recorded by a tprec kept to CPU 1 (taskset -c 1); with
#             LOAD_CPUS=0 the server and its client share CPU 0, and tprec
#             has a CPU of its own
#   ROUNDS=5 bash scripts/bench/cpushare.sh          (MODES="none tprec" ...)
# CPU times come from /proc (utime + stime of each process, /proc/stat for
# idle), in percent of one CPU. Needs root, redis-server, redis-benchmark, gcc.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/lib/redis.sh
BIN=${BIN:-./bin}
ROUNDS=${ROUNDS:-3}
MODES=${MODES:-none tprec nice19 hog hogidle}
HOG=${HOG:-22}
HOG_PERIOD=${HOG_PERIOD:-1000}
WINDOW=${WINDOW:-6}
CLIENTS=${CLIENTS:-10}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
gcc -O2 -o "$WORK/hog" scripts/bench/hog.c
hz=$(getconf CLK_TCK)
ticks() { # ticks PID...: utime + stime of the processes, all threads
	local sum=0 p
	for p in "$@"; do
		[ -n "$p" ] && [ -r "/proc/$p/stat" ] && sum=$((sum + $(awk '{print $14 + $15}' "/proc/$p/stat")))
	done
	echo "$sum"
}
idle() { awk '/^cpu / {print $5 + $6}' /proc/stat; }
run() { # run MODE: one measurement, one line
	local port=7471 third= c0 c1 s0 s1 b0 b1 t0 t1 i0 i1
	redis_load $port "$CLIENTS"
	local srv=$SRV load=$LOAD
	sleep 1
	local pre=() what=
	case $1 in
	tprec) what=tprec ;;
	nice19) what=tprec pre=(nice -n 19) ;;
	batch) what=tprec pre=(chrt --batch 0) ;;
	cpu1) what=tprec pre=(taskset -c 1) ;;
	hog) what=hog ;;
	hogidle) what=hog pre=(chrt --idle 0) ;;
	hogbatch) what=hog pre=(chrt --batch 0) ;;
	none) ;;
	*) echo "unknown mode $1" >&2; exit 2 ;;
	esac
	case $what in
	tprec) "${pre[@]}" "$BIN/tprec" -q --pid "$srv" -o "$WORK" 2>/dev/null & third=$! ;;
	hog) "${pre[@]}" "$WORK/hog" "$HOG" "$HOG_PERIOD" & third=$! ;;
	esac
	sleep 2
	c0=$(redis_requests $port) s0=$(ticks $srv) b0=$(ticks $load) t0=$(ticks $third) i0=$(idle)
	sleep "$WINDOW"
	c1=$(redis_requests $port) s1=$(ticks $srv) b1=$(ticks $load) t1=$(ticks $third) i1=$(idle)
	case $what in
	tprec) kill -INT "$third" 2>/dev/null; wait "$third" 2>/dev/null || true ;;
	hog) kill "$third"; wait "$third" 2>/dev/null || true ;;
	esac
	kill "$load" "$srv" 2>/dev/null || true
	wait "$load" "$srv" 2>/dev/null || true
	awk -v m="$1" -v n=$((c1 - c0)) -v w="$WINDOW" -v hz="$hz" -v s=$((s1 - s0)) -v b=$((b1 - b0)) -v t=$((t1 - t0)) -v i=$((i1 - i0)) 'BEGIN {
		printf "%s req/s %d server%% %.0f client%% %.0f third%% %.0f idle%% %.0f server_us %.2f client_us %.2f third_us %.2f\n",
			m, n / w, 100 * s / hz / w, 100 * b / hz / w, 100 * t / hz / w, 100 * i / hz / w,
			1e6 * s / hz / n, 1e6 * b / hz / n, 1e6 * t / hz / n }'
}
for r in $(seq "$ROUNDS"); do
	for m in $MODES; do
		echo "round $r $(run "$m")"
	done
done | tee "$WORK/raw"
echo
echo "medians of $ROUNDS rounds ($(nproc) CPUs, redis-benchmark -c $CLIENTS -r 100000 -t set,get; CPU in % of one CPU, per request in us):"
printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' mode "req/s" "vs none" server client third idle "server us/req" "client us/req" "third us/req"
echo "|---|---|---|---|---|---|---|---|---|---|"
med() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
col() { awk -v m="$1" -v k="$2" '$3 == m {for (i = 4; i < NF; i++) if ($i == k) print $(i + 1)}' "$WORK/raw" | med; }
base=$(col none req/s)
for m in $MODES; do
	rq=$(col "$m" req/s)
	printf '| %s | %.0f | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$m" "$rq" \
		"$(awk -v a="${base:-0}" -v b="$rq" 'BEGIN {if (a > 0 && b > 0) printf "%.2fx", a / b; else print "-"}')" \
		"$(col "$m" server%)" "$(col "$m" client%)" "$(col "$m" third%)" "$(col "$m" idle%)" \
		"$(col "$m" server_us)" "$(col "$m" client_us)" "$(col "$m" third_us)"
done
