#!/usr/bin/env bash
# The end search in the replayed process (BENCHMARKS.md, "The end search"):
# first the cost of one pass over a plain jmp and over a punned one
# (punjmp.S, the comparison copied into a test program, RUNS times), then
# tests/e2e/testdata/hungloop.c (a main thread hung in a loop beside a
# heartbeat thread) attached with the eBPF backend and killed from outside
# after 2 s, RUNS times: how long the dump's trial replay took (tpinspect's
# page set line), tpreplay --time's line, and how long gdb's continue takes
# to reach the SIGSEGV (given up after GDB_LIMIT seconds). Needs root,
# gcc, gdb and a build (make build).
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${RUNS:-3}
GDB_LIMIT=${GDB_LIMIT:-120}
work=$(mktemp -d /tmp/tprec-bench-endsearch.XXXXXX)
trap 'rm -rf "$work"' EXIT
gcc -O2 -o "$work/punjmp" scripts/bench/punjmp.c scripts/bench/punjmp.S 2>/dev/null
for r in $(seq "$RUNS"); do
	echo "punjmp: $("$work/punjmp")"
done
gcc -g -O1 -o "$work/hungloop" tests/e2e/testdata/hungloop.c -lpthread
for r in $(seq "$RUNS"); do
	out="$work/run$r"
	mkdir -p "$out"
	"$work/hungloop" &
	pid=$!
	sleep 0.3
	bin/tprec -q --backend ebpf --pid "$pid" -o "$out" >/dev/null 2>&1 &
	rec=$!
	sleep 2
	kill -SEGV "$pid"
	wait "$rec" || true
	wait "$pid" 2>/dev/null || true
	ck=$(ls "$out"/*.tpc)
	echo "hungloop run $r: $(bin/tpinspect "$ck" | grep 'page set' | sed 's/^ *//')"
	echo "hungloop run $r: $(bin/tpreplay --time "$ck" 2>&1 | grep -E 'timing|verified' | tr '\n' ' ')"
	start=$(date +%s.%N)
	if timeout "$GDB_LIMIT" gdb -batch -nx -ex 'set remotetimeout 30' \
		-ex "target remote | bin/tpreplay --gdb-stdio $ck" -ex continue "$work/hungloop" 2>&1 | grep -q SIGSEGV; then
		echo "hungloop run $r: gdb continue reached the SIGSEGV in $(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
	else
		echo "hungloop run $r: gdb continue did not reach the SIGSEGV within $GDB_LIMIT s"
	fi
done
