#!/usr/bin/env bash
# Replay speed of windows of several threads (BENCHMARKS.md, "Replay of
# several threads"): records tests/e2e/testdata/pipeworkers.c (three
# threads exchanging jobs through pipes, attached, crashed after 2.5 s)
# and spawner.c (a thread per job, launched, crashing itself after 2.5 s)
# with the eBPF backend, RUNS times each, and prints tpreplay's timing and
# verified lines. Then tests/e2e/testdata/busyworker.c built with -DTIGHT,
# crashed in its main thread while its worker computes in a tight loop:
# where the worker was running at the end, replay stops it at the recorded
# instruction, and tpreplay -v says after how many passes there; a run
# where it was in a call shows the replay time without that search. Needs
# root and a build (make build).
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${RUNS:-3}
work=$(mktemp -d /tmp/tprec-bench-threads.XXXXXX)
trap 'rm -rf "$work"' EXIT
for p in pipeworkers spawner; do
	gcc -g -O1 -o "$work/$p" "tests/e2e/testdata/$p.c"
done
gcc -g -O1 -DTIGHT -o "$work/busyworker" tests/e2e/testdata/busyworker.c
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
for i in $(seq "$RUNS"); do
	out="$work/out-busyworker-$i"
	mkdir -p "$out"
	"$work/busyworker" &
	pid=$!
	sleep 0.3
	bin/tprec -q --backend ebpf --pid "$pid" -o "$out" >/dev/null 2>&1 &
	rec=$!
	sleep 1
	# To the main thread (tgkill): a kill of the process may land in the worker.
	python3 -c "import ctypes, sys; ctypes.CDLL(None).syscall(234, int(sys.argv[1]), int(sys.argv[1]), 11)" "$pid"
	wait "$rec" || true
	wait "$pid" 2>/dev/null || true
	ck=$(ls "$out"/*.tpc)
	bin/tpreplay -v --time "$ck" >"$work/replay.out" 2>"$work/replay.err" || true
	passes=$(sed -n 's/.*running (pass \([0-9]*\) there).*/\1/p' "$work/replay.err")
	echo "busyworker -DTIGHT run $i: ${passes:-no} passes at the worker's stop; $(sed -n 's/.*timing: //p' "$work/replay.err")"
	tail -1 "$work/replay.out"
done
