#!/usr/bin/env bash
# Two or more builds of tprec taking turns on one syscall-heavy workload, by
# the workload's own measure, and once unrecorded per round.
#   BINS="/tmp/old/bin ./bin" ROUNDS=4 WORKLOAD=dd bash scripts/bench/builds.sh
# WORKLOAD=dd: dd if=/dev/zero of=/dev/null bs=512 count=400000 launched by
#   tprec; prints dd's own time in seconds (lower is better).
# WORKLOAD=readloop: Debian's python3 opening and reading a 1.6 KB file for
#   4 s, tprec attached during its first second; prints the iterations
#   (higher is better).
# Build an older commit with: git worktree add /tmp/old COMMIT && make -C /tmp/old build
# Needs root.
set -euo pipefail
cd "$(dirname "$0")/../.."
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
	*) echo "unknown WORKLOAD $WORKLOAD" >&2; exit 2 ;;
	esac
}
for r in $(seq "$ROUNDS"); do
	for b in none $BINS; do
		echo "round $r $WORKLOAD $b $(run "$b")"
	done
done
