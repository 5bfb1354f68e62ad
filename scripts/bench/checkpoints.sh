#!/usr/bin/env bash
# Checkpoint benchmarks (part of make bench; can run alone:
# sudo bash scripts/bench/checkpoints.sh). For each workload, RUNS times: start
# it, attach tprec (default backend, --interval $INTERVAL --keep $KEEP), let it
# run SECS seconds, crash it with SIGSEGV to its main thread, and measure
#   - the checkpoint's size per second of recorded history (tpinspect --json:
#     dump time - start of the oldest retained interval),
#   - how long the process was held and how long from the fatal signal to the
#     renamed file (tprec's "wrote" line), and the trial replay's share of it,
#   - how long tpreplay takes to load the file and to replay it (tpreplay
#     --time), against the recorded time it covers;
# then, on a fresh process of the same kind at the same point (same load,
# same time since start, unrecorded), a full image with CRIU (criu dump
# --leave-running; scripts/bench/criu.sh finds one that runs on this
# kernel) and one with gdb's gcore: their size and how long each took. A
# CRIU dump that fails is reported with CRIU's error.
# Medians of the runs go to BENCHMARKS.md between the "checkpoints" markers;
# every run's figures go to $RAW.
# BIN names the directory of the tprec to run (default ./bin); LOGS, a
# directory that keeps each run's tprec log (with TPREC_DEBUG=1, the dump's
# steps: assemble, digests, trial replay, write; with GODEBUG=gctrace=1, the
# Go collector's cycles); CKS, a directory that keeps each run's checkpoint.
# BUSY_AFTER=N starts N CPU hogs 0.3 s after each crash, for 15 s (a
# supervisor restarting the crashed service keeps the CPUs busy so).
# To measure without touching BENCHMARKS.md:
# RAW=/tmp/raw.txt DOC=/tmp/table.md.
# Needs root, gcc, gdb (gcore), /usr/bin/python3, gzip, redis-server and
# redis-benchmark.
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${RUNS:-5}
SECS=${SECS:-3}
INTERVAL=${INTERVAL:-250ms}
KEEP=${KEEP:-8}
HEAP_MB=${HEAP_MB:-512}
GZIP_MB=${GZIP_MB:-400}
BUSY_AFTER=${BUSY_AFTER:-0}
RAW=${RAW:-bench-checkpoints.txt}
# The block of BENCHMARKS.md holds every workload: a run of some of them
# writes its table there only when DOC is given.
DOC_GIVEN=${DOC:+yes}
DOC=${DOC:-BENCHMARKS.md}
ALL_WORKLOADS="redis redis1 python gzip"
WORKLOADS=${WORKLOADS:-$ALL_WORKLOADS}
for w in $WORKLOADS; do
	[[ " $ALL_WORKLOADS " == *" $w "* ]] || { echo "checkpoints: no workload $w (there are: $ALL_WORKLOADS)" >&2; exit 2; }
done
PORT=${PORT:-6411}
BIN=${BIN:-$PWD/bin}
LOGS=${LOGS:-}
CKS=${CKS:-}
PY=/usr/bin/python3
WORK=$(mktemp -d)
. scripts/lib/targets.sh
. scripts/bench/criu.sh
criu_find
[ -x "$BIN/tprec" ] || make -s build

median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

# ms DURATION: a Go duration ("1m2.5s", "160ms", "512µs") in milliseconds.
ms() {
	awk -v d="$1" 'BEGIN {
		t = 0
		while (match(d, /^[0-9.]+(h|ms|µs|us|ns|m|s)/)) {
			tok = substr(d, 1, RLENGTH); d = substr(d, RLENGTH + 1)
			match(tok, /[a-zµ]+$/); u = substr(tok, RSTART); v = substr(tok, 1, RSTART - 1) + 0
			if (u == "h") t += v * 3600000; else if (u == "m") t += v * 60000; else if (u == "s") t += v * 1000
			else if (u == "ms") t += v; else if (u == "µs" || u == "us") t += v / 1000; else t += v / 1e6
		}
		printf "%.1f", t
	}'
}

cat >"$WORK/heap.py" <<'EOF'
import os, sys, time
d, mb = sys.argv[1], int(sys.argv[2])
blob = os.urandom(mb << 20)          # a large heap nothing can deduplicate
path = os.path.join(d, "input.txt")
with open(path, "w") as f:
    f.write("some input line\n" * 100)
print("ready", flush=True)
i = total = 0
while True:
    with open(path) as f:
        total += len(f.read())
    total += blob[(i * 7919) % (1 << 20)]  # reads spread over the first MB
    i += 1
    time.time()
EOF

if [[ " $WORKLOADS " == *" gzip "* ]]; then
	words_file "$WORK/big.txt" "$GZIP_MB"
fi

# start WORKLOAD: starts the target (TPID) and its load (LOAD), returns when
# the target is ready.
start() {
	LOAD=
	case $1 in
	redis)
		start_redis "$PORT"
		;;
	redis1)
		REDIS_KEYS=1 start_redis "$PORT"
		;;
	python)
		rm -f "$WORK/py.out"
		$PY -S "$WORK/heap.py" "$WORK" "$HEAP_MB" >"$WORK/py.out" &
		TPID=$!
		waitfor 60 grep -q ready "$WORK/py.out"
		;;
	gzip)
		gzip -c "$WORK/big.txt" >/dev/null &
		TPID=$!
		;;
	esac
}

# record WORKLOAD RUN: one recorded run, crashed after SECS; appends a row.
record() {
	local w=$1 run=$2 dir=$WORK/ck log=$WORK/tprec.log
	rm -rf "$dir" && mkdir "$dir"
	start "$w"
	local t0=$(date +%s.%N)
	"$BIN/tprec" --pid "$TPID" --interval "$INTERVAL" --keep "$KEEP" -o "$dir" 2>"$log" &
	REC=$!
	if ! waitfor 20 grep -q 'recording process' "$log"; then
		echo "$w run $run: tprec did not start: $(cat "$log")" >&2
		kill -INT "$REC" 2>/dev/null || true; wait "$REC" 2>/dev/null || true; REC=
		stop
		return
	fi
	local t1=$(date +%s.%N)
	sleep "$SECS"
	"$WORK/tgkill" "$TPID"
	local hogs=()
	if [ "$BUSY_AFTER" -gt 0 ]; then
		sleep 0.3
		for _ in $(seq "$BUSY_AFTER"); do
			timeout 15 sh -c 'while :; do :; done' &
			hogs+=($!)
		done
	fi
	wait "$TPID" 2>/dev/null || true
	wait "$REC" 2>/dev/null || true
	REC=
	[ ${#hogs[@]} -eq 0 ] || { kill "${hogs[@]}" 2>/dev/null || true; wait "${hogs[@]}" 2>/dev/null || true; }
	[ -z "$LOGS" ] || { mkdir -p "$LOGS" && cp "$log" "$LOGS/$w-$run.log"; }
	local since=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a + '"$SECS"'}')
	stop
	local line
	line=$(grep ' wrote ' "$log" || true)
	if [ -z "$line" ]; then
		echo "$w run $run: no checkpoint: $(cat "$log")" >&2
		return
	fi
	local f=${line#*wrote }
	f=${f%%: *}
	[ -z "$CKS" ] || { mkdir -p "$CKS" && cp "$f" "$CKS/$w-$run.tpc"; }
	# "N intervals, M syscalls, ..., B bytes, in D (the process was held H)"
	local sys bytes dump held
	read -r sys bytes dump held < <(sed -E 's/.* ([0-9]+) syscalls, .* ([0-9]+) bytes, in ([^ ]+) \(the process was held ([^)]+)\).*/\1 \2 \3 \4/' <<<"$line")
	local window trial
	read -r window trial < <("$BIN/tpinspect" --json "$f" | $PY -c '
import json, sys, re
from datetime import datetime
def t(s):  # RFC 3339 with up to 9 fractional digits
    m = re.match(r"(.*T\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-].*)$", s)
    base = datetime.fromisoformat(m.group(1) + (m.group(3) if m.group(3) != "Z" else "+00:00"))
    return base.timestamp() + float(m.group(2) or 0)
j = json.load(sys.stdin)
w = t(j["process"]["dump"]) - t(j["intervals"][0]["start"])
m = re.search(r"pages, ([^,()]+)\)", j["process"].get("page_set_note", ""))
print("%.3f" % w, m.group(1) if m else "0s")')
	local rline load replay verified=yes
	rline=$("$BIN/tpreplay" --time "$f" 2>&1 >/dev/null | grep 'timing:' || true)
	"$BIN/tpreplay" "$f" >/dev/null 2>&1 || verified=no
	load=$(sed -E 's/.*load ([^,]+),.*/\1/' <<<"$rline")
	replay=$(sed -E 's/.*, replay ([^ ]+) .*/\1/' <<<"$rline")
	[ -n "$rline" ] || { load=0s replay=0s verified=no; }
	# A fresh process of the same kind, same load, same time since its start:
	# a full image with gcore.
	start "$w"
	sleep "$since"
	local criu_bytes=0 criu_ms=0
	if [ -n "$CRIU" ]; then
		rm -rf "$WORK/criu" && mkdir "$WORK/criu"
		local c0=$(date +%s.%N)
		if $CRIU dump --leave-running --shell-job --tcp-established -t "$TPID" -D "$WORK/criu" -o dump.log >/dev/null 2>&1; then
			local c1=$(date +%s.%N)
			criu_ms=$(awk -v a="$c0" -v b="$c1" 'BEGIN {printf "%.1f", (b - a) * 1000}')
			criu_bytes=$(du -sb "$WORK/criu" | awk '{print $1}')
		else
			local why
			why=$({ criu_error <"$WORK/criu/dump.log"; } 2>/dev/null || true)
			echo "# criu-failed $w ${why:-no error in its log}" >>"$RAW"
		fi
		rm -rf "$WORK/criu"
	fi
	local g0=$(date +%s.%N)
	gcore -o "$WORK/core" "$TPID" >/dev/null 2>&1 || true
	local g1=$(date +%s.%N)
	local core=0
	[ -f "$WORK/core.$TPID" ] && core=$(stat -c %s "$WORK/core.$TPID")
	rm -f "$WORK"/core.*
	stop
	printf '%s %d %.3f %d %d %.0f %s %s %s %s %s %s %d %s %s %d %s %s\n' "$w" "$run" "$window" "$sys" "$bytes" \
		"$(awk -v b="$bytes" -v w="$window" 'BEGIN {print b / w}')" "$(ms "$held")" "$(ms "$dump")" "$(ms "$trial")" \
		"$(ms "$load")" "$(ms "$replay")" "$verified" "$core" \
		"$(awk -v a="$g0" -v b="$g1" 'BEGIN {printf "%.1f", (b - a) * 1000}')" \
		"$(awk -v c="$core" -v b="$bytes" 'BEGIN {printf "%.2f", c / b}')" \
		"$criu_bytes" "$criu_ms" "$(awk -v c="$criu_bytes" -v b="$bytes" 'BEGIN {printf "%.2f", c / b}')" | tee -a "$RAW"
}

# TABLE_ONLY=1 makes the table from an existing $RAW without running anything.
if [ -z "${TABLE_ONLY:-}" ]; then
{
	echo "# $(date -u +%FT%TZ) $(uname -r) $(nproc) CPUs, runs=$RUNS, secs=$SECS, interval=$INTERVAL, keep=$KEEP, heap=${HEAP_MB}MB, gzip input=${GZIP_MB}MB"
	echo "# workload run window_s syscalls bytes bytes_per_s held_ms dump_ms trial_ms load_ms replay_ms verified gcore_bytes gcore_ms gcore_over_checkpoint criu_bytes criu_ms criu_over_checkpoint (0: the dump failed, a criu-failed line says why)"
} >"$RAW"
for w in $WORKLOADS; do
	for i in $(seq "$RUNS"); do record "$w" "$i"; done
done
fi

col() { awk -v w="$1" -v c="$2" '$1 == w {print $c}' "$RAW" | median; }
# okcol W C: the median of column C over the runs of W whose CRIU dump
# succeeded.
okcol() { awk -v w="$1" -v c="$2" '$1 == w && $16 > 0 {print $c}' "$RAW" | median; }
table() {
	echo "Measured $(date -u +%F) on $(uname -r), $(nproc) CPUs: median of $RUNS runs, each recorded"
	echo "for ${SECS} s with --interval $INTERVAL --keep $KEEP (default backend), then crashed with"
	echo "SIGSEGV to its main thread. Raw figures: \`$RAW\`."
	echo
	echo "| workload | history | syscalls | checkpoint | per second of history | held | signal to file | of which trial replay | load | replay (rebuild + re-execution) | replay / history | verified | CRIU image | CRIU time | CRIU / checkpoint | gcore image | gcore time | gcore / checkpoint |"
	echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
	for w in $WORKLOADS; do
		grep -q "^$w " "$RAW" || continue
		local win sys bytes bps held dump trial load replay core gms ratio ver
		win=$(col "$w" 3) sys=$(col "$w" 4) bytes=$(col "$w" 5) bps=$(col "$w" 6) held=$(col "$w" 7)
		dump=$(col "$w" 8) trial=$(col "$w" 9) load=$(col "$w" 10) replay=$(col "$w" 11)
		core=$(col "$w" 13) gms=$(col "$w" 14) ratio=$(col "$w" 15)
		ver="$(awk -v w="$w" '$1 == w && $12 == "yes"' "$RAW" | wc -l)/$(awk -v w="$w" '$1 == w' "$RAW" | wc -l)"
		local criu="failed | | "
		if [ "$(awk -v w="$w" '$1 == w && $16 > 0' "$RAW" | wc -l)" -gt 0 ]; then
			criu=$(awk -v b="$(okcol "$w" 16)" -v t="$(okcol "$w" 17)" -v r="$(okcol "$w" 18)" 'BEGIN {printf "%.1f MB | %.0f ms | %.2fx", b / 1e6, t, r}')
		elif [ -z "$CRIU" ]; then
			criu="- | | "
		fi
		case $w in
		redis) name="redis-server 7, redis-benchmark -c 10 -r 100000 set,get (loopback)" ;;
		redis1) name="redis-server 7, the same on one key (-r 1)" ;;
		python) name="python3, ${HEAP_MB} MB heap, file read + time.time() loop" ;;
		gzip) name="gzip -c, ${GZIP_MB} MB of text" ;;
		esac
		awk -v n="$name" -v win="$win" -v sys="$sys" -v b="$bytes" -v bps="$bps" -v held="$held" -v dump="$dump" \
			-v trial="$trial" -v ld="$load" -v rep="$replay" -v ver="$ver" -v core="$core" -v gms="$gms" -v ratio="$ratio" -v criu="$criu" 'BEGIN {
			printf "| %s | %.2f s | %d | %.2f MB | %.2f MB/s | %.0f ms | %.0f ms | %.0f ms | %.0f ms | %.0f ms | %.2fx | %s | %s | %.1f MB | %.0f ms | %.2fx |\n",
				n, win, sys, b / 1e6, bps / 1e6, held, dump, trial, ld, rep, rep / 1000 / win, ver, criu, core / 1e6, gms, ratio
		}'
	done
	echo
	echo "Full images: $CRIU_NOTE; gdb's gcore beside it."
	local w why
	for w in $WORKLOADS; do
		why=$(awk -v w="$w" '$1 == "#" && $2 == "criu-failed" && $3 == w {$1 = $2 = $3 = ""; sub(/^ +/, ""); print; exit}' "$RAW")
		[ -z "$why" ] || echo "CRIU's dump of $w failed: $why."
	done
}

block=$(table)
echo "$block"
begin='<!-- checkpoints:begin (scripts/bench/checkpoints.sh writes this block) -->'
end='<!-- checkpoints:end -->'
if [ -z "$DOC_GIVEN" ] && [ "$(echo $WORKLOADS)" != "$ALL_WORKLOADS" ]; then
	echo "checkpoints: $DOC left as it is: its table holds every workload ($ALL_WORKLOADS), this run measured $(echo $WORKLOADS) (DOC=file writes its table there)" >&2
elif grep -qF "$begin" "$DOC"; then
	BLOCK=$block $PY - "$DOC" "$begin" "$end" <<'EOF'
import os, sys
p, b, e = sys.argv[1:4]
s = open(p).read()
i, j = s.index(b) + len(b), s.index(e)
open(p, "w").write(s[:i] + "\n" + os.environ["BLOCK"] + "\n" + s[j:])
EOF
else
	printf '\n## Checkpoints: size, dump latency, replay\n\nHow to rerun: `sudo make bench`, or this part alone: `sudo bash scripts/bench/checkpoints.sh`.\n\n%s\n%s\n%s\n' "$begin" "$block" "$end" >>"$DOC"
fi
