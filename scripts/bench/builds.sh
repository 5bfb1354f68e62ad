#!/usr/bin/env bash
# Two or more builds of tprec taking turns on one syscall-heavy workload, by
# the workload's own measure, and once unrecorded per round.
#   BINS="/tmp/old/bin ./bin" ROUNDS=4 WORKLOAD=dd bash scripts/bench/builds.sh
# WORKLOAD=dd: dd if=/dev/zero of=/dev/null bs=512 count=400000 launched by
#   tprec; prints dd's own time in seconds (lower is better).
# WORKLOAD=readloop: Debian's python3 opening and reading a 1.6 KB file for
#   4 s, tprec attached during its first second; prints the iterations
#   (higher is better).
# WORKLOAD=redis: redis-server under redis-benchmark -c 10 -r 100000 set,get,
#   tprec attached after 1 s; over 6 s from 2 s later prints the requests a
#   second (redis-cli INFO stats) and tprec's own CPU in percent of one CPU
#   (/proc/PID/stat), unrecorded: requests only. Needs redis-server.
#   CLIENTS sets redis-benchmark's -c (default 10, which keeps both CPUs of
#   a 2-CPU machine busy); CLIENTS=1 leaves CPU time free, as a server
#   machine with cores to spare has: the slowdown is then each request's
#   added latency. PIN=1 runs the server and its client on CPU 0 and tprec
#   on CPU 1: a machine with a CPU to spare for the recorder, where only the
#   recording's work in the server's own threads (the eBPF programs, the
#   boundaries' stops) can slow it. TPREC_ARGS adds options to tprec
#   (TPREC_ARGS="--max-memory 32M": a ring that packs every interval).
# WORKLOAD=dump: one redis-server checkpoint of scripts/bench/checkpoints.sh
#   (crashed with SIGSEGV under load, TPREC_DEBUG=1); prints the time from
#   the signal to the file, how long the process was held, and the dump's
#   steps (assemble, trial replay, final pages, write). No unrecorded run.
# Build an older commit with: git worktree add /tmp/old COMMIT && make -C /tmp/old build
# Needs root.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/lib/redis.sh
BINS=${BINS:-./bin}
ROUNDS=${ROUNDS:-3}
WORKLOAD=${WORKLOAD:-dd}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
printf 'some input line\n%.0s' $(seq 100) >"$WORK/input.txt"
cat >"$WORK/loop.py" <<PY
import time
print("ready", flush=True)
time.sleep(1.0)
t0 = time.monotonic(); i = 0
while time.monotonic() - t0 < 4.0:
    with open("$WORK/input.txt") as f:
        f.read()
    i += 1
print(i, flush=True)
PY
run() { # run BIN|none: one measurement
	local ck=$WORK/ck
	rm -rf "$ck" && mkdir "$ck"
	case $WORKLOAD in
	dd)
		local pre=()
		[ "$1" = none ] || pre=("$1/tprec" -q -o "$ck" --)
		"${pre[@]}" dd if=/dev/zero of=/dev/null bs=512 count=400000 2>&1 | grep -oE 'copied, [0-9.]+' | awk '{print $2}'
		;;
	readloop)
		/usr/bin/python3 -S "$WORK/loop.py" >"$WORK/out" &
		local p=$! r=
		until grep -q ready "$WORK/out" 2>/dev/null; do sleep 0.02; done
		if [ "$1" != none ]; then "$1/tprec" -q --pid "$p" -o "$ck" 2>/dev/null & r=$!; fi
		wait "$p"
		[ -n "$r" ] && { kill -INT "$r" 2>/dev/null; wait "$r" 2>/dev/null || true; }
		tail -1 "$WORK/out"
		;;
	redis)
		local port=7470 r= t0= t1= c0 c1 pin=()
		[ -z "${PIN:-}" ] || { pin=(taskset -c 1); LOAD_CPUS=0; }
		redis_load $port "${CLIENTS:-10}"
		local p=$SRV load=$LOAD
		sleep 1
		if [ "$1" != none ]; then "${pin[@]}" "$1/tprec" -q ${TPREC_ARGS:-} --pid "$p" -o "$ck" 2>/dev/null & r=$!; fi
		sleep 2
		cpu() { [ -n "$r" ] && awk '{print $14 + $15}' "/proc/$r/stat"; }
		c0=$(redis_requests $port) t0=$(cpu)
		sleep 6
		c1=$(redis_requests $port) t1=$(cpu)
		echo "req/s $(( (c1 - c0) / 6 ))${r:+ tprec_cpu% $(( (t1 - t0) * 100 / $(getconf CLK_TCK) / 6 ))}"
		[ -n "$r" ] && { kill -INT "$r" 2>/dev/null; wait "$r" 2>/dev/null || true; }
		kill "$load" "$p" 2>/dev/null || true
		wait "$load" "$p" 2>/dev/null || true
		;;
	dump)
		local logs=$WORK/logs
		rm -rf "$logs"
		BIN=$1 TPREC_DEBUG=1 LOGS=$logs RUNS=1 WORKLOADS=redis RAW=$WORK/raw DOC=$WORK/doc \
			bash scripts/bench/checkpoints.sh >/dev/null 2>&1 || true
		cat "$logs"/*.log 2>/dev/null | sed -nE \
			-e 's/.*, in ([0-9.]+[mµ]?s) \(the process was held ([0-9.]+[mµ]?s)\).*/signal-to-file \1 held \2/p' \
			-e 's/.*dump in the background: assemble, digests and loaded objects ([0-9.]+[mµ]?s).*trial replay ([0-9.]+[mµ]?s).*final pages ([0-9.]+[mµ]?s).*write ([0-9.]+[mµ]?s).*/assemble \1 trial \2 final \3 write \4/p' | tr '\n' ' '
		echo
		;;
	*) echo "unknown WORKLOAD $WORKLOAD" >&2; exit 2 ;;
	esac
}
for r in $(seq "$ROUNDS"); do
	for b in $([ "$WORKLOAD" = dump ] || echo none) $BINS; do
		echo "round $r $WORKLOAD $b $(run "$b")"
	done
done
