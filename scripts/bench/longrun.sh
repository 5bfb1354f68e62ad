#!/usr/bin/env bash
# A long recording: does tprec's own footprint stay flat? A server that
# crashes once a week is recorded for days, so whatever tprec keeps growing
# with time (memory, descriptors, threads, stray shadows) ends the
# recording or the machine. This records redis-server under
# redis-benchmark's ten clients (100,000 keys) for SECS seconds (default
# 600) and samples, every EVERY seconds (default 30):
#   - tprec's resident memory (VmRSS) and its Go heap's share of it (the
#     status line's ring size),
#   - its open descriptors and threads,
#   - the target's children (the interval's shadow, plus zombies not yet
#     collected),
# then asks for a checkpoint, which must verify, and says how much each
# figure moved between the first sample after the ring filled (60 s in) and
# the last. Needs root, redis-server and redis-benchmark.
# Run: sudo bash scripts/bench/longrun.sh   (SECS=3600 for an hour)
set -euo pipefail
cd "$(dirname "$0")/../.."
SECS=${SECS:-600}
EVERY=${EVERY:-30}
PORT=${PORT:-6419}
BIN=${BIN:-$PWD/bin}
WORK=$(mktemp -d)
. scripts/lib/targets.sh
[ -x "$BIN/tprec" ] || make -s build

start_redis "$PORT"
"$BIN/tprec" --pid "$TPID" -o "$WORK" --status "${EVERY}s" 2>"$WORK/tprec.log" &
REC=$!
waitfor 20 grep -q "recording process" "$WORK/tprec.log"

field() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status"; }
sample() { # t rss_kb fds threads children ring_mib
	local t=$1 kids ring
	kids=$(cat /proc/"$TPID"/task/*/children 2>/dev/null | wc -w)
	ring=$(grep -o 'ring [0-9.]* of' "$WORK/tprec.log" | tail -1 | awk '{print $2}')
	echo "$t $(field "$REC" VmRSS) $(ls /proc/"$REC"/fd | wc -l) $(field "$REC" Threads) $kids ${ring:-0}"
}

echo "# t(s) tprec_rss_kB fds threads target_children ring_MiB" | tee "$WORK/samples"
start=$SECONDS
while [ $((SECONDS - start)) -lt "$SECS" ]; do
	sleep "$EVERY"
	kill -0 "$REC" 2>/dev/null || { cat "$WORK/tprec.log" >&2; echo "longrun: tprec ended" >&2; exit 1; }
	sample $((SECONDS - start)) | tee -a "$WORK/samples"
done

kill -USR2 "$REC"
waitfor 60 grep -q " wrote " "$WORK/tprec.log" || { tail "$WORK/tprec.log" >&2; echo "longrun: no checkpoint" >&2; exit 1; }
kill -INT "$REC"
wait "$REC" || { tail "$WORK/tprec.log" >&2; echo "longrun: tprec exited $?" >&2; exit 1; }
REC=
"$BIN/tpreplay" "$WORK"/*.tpc | tail -1

# From the first sample at 60 s or later (the ring full, the Go heap grown
# to its working size) to the last.
awk 'NR > 1 && $1 >= 60 && !f {f = 1; r = $2; d = $3; th = $4; k = $5}
	NR > 1 {lr = $2; ld = $3; lth = $4; lk = $5; lt = $1}
	END {
		if (!f) { print "longrun: too short to compare (SECS >= 120)"; exit 1 }
		printf "longrun: from 60 s to %d s: tprec resident %d -> %d kB (%+.1f%%), descriptors %d -> %d, threads %d -> %d, children of the target %d -> %d\n",
			lt, r, lr, 100 * (lr - r) / r, d, ld, th, lth, k, lk
	}' "$WORK/samples"
