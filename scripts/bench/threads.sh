#!/usr/bin/env bash
# Replay speed of windows of several threads (BENCHMARKS.md, "Replay of
# several threads"): records tests/e2e/testdata/pipeworkers.c (three
# threads exchanging jobs through pipes, attached, crashed in its main
# thread after 2.5 s) and spawner.c (a thread per job, launched, crashing
# itself after 2.5 s) with the eBPF backend, RUNS times each, and prints tpreplay's timing and
# verified lines. Then tests/e2e/testdata/busyworker.c built with -DTIGHT,
# crashed in its main thread while its worker computes in a tight loop:
# where the worker was running at the end, replay stops it at the recorded
# instruction, and tpreplay -v says after how many passes there; a run
# where it was in a call shows the replay time without that search. Last,
# Debian's xz -T2 crashed while both workers compress (below). Needs root,
# xz and a build (make build).
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${RUNS:-3}
work=$(mktemp -d /tmp/tprec-bench-threads.XXXXXX)
trap 'rm -rf "$work"' EXIT
for p in pipeworkers spawner; do
	gcc -g -O1 -o "$work/$p" "tests/e2e/testdata/$p.c"
done
gcc -g -O1 -DTIGHT -o "$work/busyworker" tests/e2e/testdata/busyworker.c
# crash_attached PROG OUT SECS: starts PROG, attaches tprec writing into
# OUT, and after SECS sends SIGSEGV to PROG's main thread (tgkill: a kill
# of the process may land in another thread).
crash_attached() {
	"$1" &
	local pid=$! rec
	sleep 0.3
	bin/tprec -q --backend ebpf --pid "$pid" -o "$2" >/dev/null 2>&1 &
	rec=$!
	sleep "$3"
	python3 -c "import ctypes, sys; ctypes.CDLL(None).syscall(234, int(sys.argv[1]), int(sys.argv[1]), 11)" "$pid"
	wait "$rec" || true
	wait "$pid" 2>/dev/null || true
}
for p in pipeworkers spawner; do
	for i in $(seq "$RUNS"); do
		out="$work/out-$p-$i"
		mkdir -p "$out"
		if [ "$p" = spawner ]; then
			bin/tprec -q --backend ebpf -o "$out" -- "$work/spawner" 2.5 >/dev/null 2>&1 || true
		else
			crash_attached "$work/pipeworkers" "$out" 2.5
		fi
		bin/tpreplay --time "$out"/*.tpc >"$work/replay.out" 2>"$work/replay.err" || true
		echo "$p run $i: $(sed -n 's/.*timing: //p' "$work/replay.err")"
		tail -1 "$work/replay.out"
	done
done
for i in $(seq "$RUNS"); do
	out="$work/out-busyworker-$i"
	mkdir -p "$out"
	crash_attached "$work/busyworker" "$out" 1
	bin/tpreplay -v --time "$out"/*.tpc >"$work/replay.out" 2>"$work/replay.err" || true
	passes=$(sed -n 's/.*running (pass \([0-9]*\) there).*/\1/p' "$work/replay.err")
	echo "busyworker -DTIGHT run $i: ${passes:-no} passes at the worker's stop; $(sed -n 's/.*timing: //p' "$work/replay.err")"
	tail -1 "$work/replay.out"
done
# Debian's xz -T2 compressing 48 MiB of text, crashed from outside while
# both workers compress: replay stops each worker where the recording found
# it, the process comparing the passes over its stop (ARCHITECTURE.md,
# "Threads"). Recorded with --full-pages so that the dump does not run the
# trial replay; tpreplay -v then says at which pass each worker stood.
python3 -c '
import random, sys
r = random.Random(1)
w = "the of and to in is was that for on with as by at from his her they this had not are but which be or an were all have one their".split()
out, n = [], 0
while n < 48 << 20:
    s = r.choice(w) + ("\n" if r.randrange(12) == 0 else " ")
    out.append(s); n += len(s)
open(sys.argv[1], "w").write("".join(out))
' "$work/text"
for i in $(seq "$RUNS"); do
	out="$work/out-xz-$i"
	mkdir -p "$out"
	xz -T2 -c "$work/text" >/dev/null &
	pid=$!
	sleep 0.3
	bin/tprec -q --full-pages --backend ebpf --pid "$pid" -o "$out" >/dev/null 2>&1 &
	rec=$!
	sleep 1.5
	kill -SEGV "$pid"
	wait "$rec" || true
	wait "$pid" 2>/dev/null || true
	bin/tpreplay -v --time "$out"/*.tpc >"$work/replay.out" 2>"$work/replay.err" || true
	passes=$(sed -n 's/.*running (pass \([0-9]*\) there).*/\1/p' "$work/replay.err" | paste -sd, -)
	echo "xz -T2 run $i: passes at the workers' stops ${passes:-none}; $(sed -n 's/.*timing: //p' "$work/replay.err")"
	tail -1 "$work/replay.out"
done
