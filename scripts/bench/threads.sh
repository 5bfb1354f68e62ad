#!/usr/bin/env bash
# Replay speed of windows of several threads (BENCHMARKS.md, "Replay of
# several threads"): records tests/e2e/testdata/pipeworkers.c (three
# threads exchanging jobs through pipes, attached, crashed after 2.5 s)
# and spawner.c (a thread per job, launched, crashing itself after 2.5 s)
# with the eBPF backend, RUNS times each, and prints tpreplay's timing and
# verified lines. Needs root and a build (make build).
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${RUNS:-3}
work=$(mktemp -d /tmp/tprec-bench-threads.XXXXXX)
trap 'rm -rf "$work"' EXIT
for p in pipeworkers spawner; do
	gcc -g -O1 -o "$work/$p" "tests/e2e/testdata/$p.c"
done
for p in pipeworkers spawner; do
	for i in $(seq "$RUNS"); do
		out="$work/out-$p-$i"
		mkdir -p "$out"
		if [ "$p" = spawner ]; then
			bin/tprec -q --backend ebpf -o "$out" -- "$work/spawner" 2.5 >/dev/null 2>&1 || true
		else
			"$work/pipeworkers" &
			pid=$!
			sleep 0.3
			bin/tprec -q --backend ebpf --pid "$pid" -o "$out" >/dev/null 2>&1 &
			rec=$!
			sleep 2.5
			kill -SEGV "$pid"
			wait "$rec" || true
			wait "$pid" 2>/dev/null || true
		fi
		ck=$(ls "$out"/*.tpc)
		bin/tpreplay --time "$ck" >"$work/replay.out" 2>"$work/replay.err" || true
		echo "$p run $i: $(sed -n 's/.*timing: //p' "$work/replay.err")"
		tail -1 "$work/replay.out"
	done
done
