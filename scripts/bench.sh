#!/usr/bin/env bash
# Recording overhead benchmarks (make bench). Every figure is the median of
# RUNS runs; each recorded run is compared with an unrecorded baseline
# measured in the same invocation. Writes bench-results.txt; BENCHMARKS.md
# holds the interpretation. Needs root (tprec, strace -p), gcc, python3,
# redis-server and redis-benchmark (apt-get install redis-server), gdb.
# MODES picks the recorders to measure (the unrecorded baseline always runs);
# ebpf-idle runs the workload unrecorded while tprec's programs are attached
# for another, idle process: what every other process of the machine pays;
# TPREC another tprec binary (to compare builds); PRIO a prefix for the
# measured programs, e.g. PRIO="nice -n -20" to shield them from other load.
# The modes take turns within each round of runs (interleaved).
# WORKLOADS picks the workloads (default: all of dd py heavy vdso spawn
# redis boundary gdb idle), e.g. WORKLOADS=py RUNS=15 for the CPU-bound figure
# alone with more rounds.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-5}
DD_COUNT=${DD_COUNT:-400000}
INTERVAL=${INTERVAL:-250ms}
OUT=${OUT:-bench-results.txt}
TPREC=${TPREC:-$PWD/bin/tprec}
MODES="none ${MODES:-ebpf ebpf-idle ptrace strace}"
MODES=${MODES/none none/none}
PRIO=${PRIO:-}
ALL_WORKLOADS="dd py heavy vdso spawn redis boundary gdb idle"
WORKLOADS=" ${WORKLOADS:-$ALL_WORKLOADS} "
want() { [[ $WORKLOADS == *" $1 "* ]]; }
WORK=$(mktemp -d)
IDLE=
trap 'rm -rf "$WORK"; [ -n "${REDIS_PID:-}" ] && kill "$REDIS_PID" 2>/dev/null; [ -n "$IDLE" ] && kill "$IDLE" 2>/dev/null; true' EXIT
make -s build
gcc -O2 -o "$WORK/boundary" scripts/bench/boundary.c

median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
log() { echo "$*" | tee -a "$OUT"; }
: > "$OUT"
log "# $(date -u +%FT%TZ) $(uname -r) $(nproc) CPUs, runs=$RUNS, interval=$INTERVAL, modes=$MODES, prio=${PRIO:-none}, load $(cut -d' ' -f1-3 /proc/loadavg)"

# idle_start: tprec recording an idle process (its programs run for every
# task of the machine); returns once it records. idle_stop ends it.
idle_start() {
	"$TPREC" --backend ebpf --interval "$INTERVAL" -o "$WORK" -- sleep 3600 2>"$WORK/idle.log" &
	IDLE=$!
	for _ in $(seq 200); do
		# Settled: the same second the recorded modes wait.
		grep -q 'recording process' "$WORK/idle.log" && sleep 1 && return 0
		sleep 0.05
	done
	echo "ebpf-idle: tprec did not start recording: $(cat "$WORK/idle.log")" >&2
	return 1
}
# (tprec detaches on SIGINT and waits for the command it launched.)
idle_stop() {
	kill -INT "$IDLE" 2>/dev/null
	sleep 0.2
	pkill -P "$IDLE" sleep 2>/dev/null
	wait "$IDLE" 2>/dev/null || true
	IDLE=
}

# run MODE CMD...: runs CMD unrecorded or under a recorder; the command
# measures itself (dd reports its own time) so recorder start-up is excluded.
run() {
	local mode=$1
	shift
	case $mode in
	none) $PRIO "$@" ;;
	ebpf | ptrace) "$TPREC" -q --backend "$mode" --interval "$INTERVAL" -o "$WORK" -- $PRIO "$@" ;;
	ebpf-idle) idle_start && { $PRIO "$@"; idle_stop; } ;;
	strace) strace -f -o /dev/null $PRIO "$@" ;;
	esac
}

# interleaved NAME FUNC: runs FUNC MODE RUNS times for every mode, the modes
# taking turns within each round, so that a drift in the machine's speed
# (other tenants: a CPU-bound loop here takes 1.0 s or 1.9 s from one minute
# to the next) weighs on every column alike. NAME[mode] gets the median,
# NAME_R[mode] the median over rounds of the ratio to the unrecorded run of
# the same round (value/none; pass "inverse" as a third argument for
# none/value, for throughputs).
interleaved() {
	local -n res=$1 rat=${1}_R
	local f=$2 inv=${3:-} i m
	local -A all=()
	for i in $(seq "$RUNS"); do
		for m in $MODES; do all[$m]+="$($f "$m") "; done
	done
	local -a base=(${all[none]})
	for m in $MODES; do
		res[$m]=$(printf '%s\n' ${all[$m]} | median)
		local -a v=(${all[$m]})
		rat[$m]=$(for i in "${!v[@]}"; do
			awk -v a="${v[$i]}" -v b="${base[$i]}" -v inv="$inv" 'BEGIN {if (a + 0 > 0 && b + 0 > 0) print (inv ? b / a : a / b)}'
		done | median)
	done
}

# --- syscall-heavy: dd with 512-byte blocks (2 syscalls per block)
dd_secs() { run "$1" dd if=/dev/zero of=/dev/null bs=512 count="$DD_COUNT" 2>&1 | awk '/copied/ {for (i=1;i<=NF;i++) if ($i ~ /^s,?$/) print $(i-1)}'; }
declare -A DD DD_R
want dd && interleaved DD dd_secs
want dd && for m in $MODES; do
	log "dd bs=512 count=$DD_COUNT $m: $(printf %.3f "${DD[$m]}") s, ratio $(printf %.2f "${DD_R[$m]}"), added per syscall $(awk -v a="${DD[$m]}" -v b="${DD[none]}" -v n="$DD_COUNT" 'BEGIN{printf "%.0f", (a-b)/(2*n)*1e9}') ns"
done

# --- CPU-bound: a Python loop with almost no syscalls
# The loop also notes the CPU time it used itself (user and system, its
# process_time) in $WORK/pycpu.MODE, one line a run in the order of the
# rounds: a recorded loop that used no more CPU than the unrecorded one
# lost its time waiting (boundary stops, a CPU taken by something else).
py_secs() { run "$1" python3 -c 'import sys, time
t=time.perf_counter(); c=time.process_time(); s=0
for i in range(15000000): s+=i*i
print(time.perf_counter()-t)
print(time.process_time()-c, file=open(sys.argv[1], "a"))' "$WORK/pycpu.$1"; }
declare -A PY PY_R
want py && interleaved PY py_secs
want py && for m in $MODES; do
	cpu=$(median <"$WORK/pycpu.$m")
	cpur=$(paste -d' ' "$WORK/pycpu.$m" "$WORK/pycpu.none" | awk '$1 > 0 && $2 > 0 {print $1 / $2}' | median)
	log "python3 loop $m: $(printf %.3f "${PY[$m]}") s, ratio $(printf %.3f "${PY_R[$m]}"); its own CPU $(printf %.3f "$cpu") s, ratio $(printf %.3f "$cpur")"
done

# --- heavy writer: python3 rewriting 256 MB over and over (every page of it
# each pass: what a JVM allocating does to its young generation), passes a
# second for HEAVY_SECS seconds; intervals stretch under it
# (ARCHITECTURE.md, "Intervals that stretch").
HEAVY_SECS=${HEAVY_SECS:-6}
heavy_rate() { run "$1" python3 -c 'import sys, time
n = 256 << 20
a = bytearray(n); b = bytearray(b"x" * n)
t = time.perf_counter(); k = 0
while time.perf_counter() - t < float(sys.argv[1]):
    a[:] = b; k += 1
print(k / (time.perf_counter() - t))' "$HEAVY_SECS"; }
declare -A HW HW_R
want heavy && interleaved HW heavy_rate inverse
want heavy && for m in $MODES; do
	[ "$m" = ebpf-idle ] && continue
	log "python3 rewriting 256 MB $m: $(printf %.1f "${HW[$m]}") passes/s, $(printf %.2f "${HW_R[$m]}")x slower"
done

# --- vDSO patch: clock_gettime becomes a real syscall under tprec
vdso_ns() { run "$1" python3 -c 'import time
n=200000; t=time.perf_counter()
for i in range(n): time.monotonic()
print((time.perf_counter()-t)/n*1e9)'; }
want vdso && for m in $MODES; do
	[ "$m" = strace ] || [ "$m" = ebpf-idle ] && continue
	log "clock_gettime via python time.monotonic $m: $(for i in $(seq "$RUNS"); do vdso_ns "$m"; done | median | xargs printf %.0f) ns per call"
done

# --- vfork children: python3's subprocess.run, whose child runs in the
# parent's memory until its exec (the recorder stops the parent twice per
# call to log what the child wrote there)
spawn_us() { run "$1" python3 -c 'import subprocess, time
n=200; t=time.perf_counter()
for i in range(n): subprocess.run(["/bin/true"])
print((time.perf_counter()-t)/n*1e6)'; }
declare -A SP SP_R
want spawn && interleaved SP spawn_us
want spawn && for m in $MODES; do
	[ "$m" = ebpf-idle ] && continue
	log "python3 subprocess.run(/bin/true) $m: $(printf %.0f "${SP[$m]}") us per call, ratio $(printf %.2f "${SP_R[$m]}")"
done

# --- server: redis-server on loopback as Debian ships it (its main thread,
# three background-job threads and jemalloc's), recorded by attaching to it.
# A run whose recorder is not recording when the load starts counts as a
# failure, not as a figure.
if ! want redis; then
	:
elif command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null; then
	# REDIS_KEYS: how many keys the load spreads over (redis-benchmark -r);
	# empty: the one key redis-benchmark uses by default.
	redis_rps() {
		local mode=$1 port=6399 rec=
		$PRIO redis-server --port $port --save "" --appendonly no --daemonize no >/dev/null 2>&1 &
		REDIS_PID=$!
		for i in $(seq 50); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.1; done
		case $mode in
		ebpf | ptrace) "$TPREC" -q --backend "$mode" --interval "$INTERVAL" -o "$WORK" --pid $REDIS_PID & rec=$!; sleep 1 ;;
		strace) strace -f -p $REDIS_PID -o /dev/null & rec=$!; sleep 1 ;;
		ebpf-idle) idle_start && rec=$IDLE ;; # waits its second
		esac
		if [ -n "$rec" ] && ! kill -0 $rec 2>/dev/null; then
			echo "redis: the $mode recorder exited before the load started" >&2
			echo nan
		else
			redis-benchmark -p $port -n 100000 -c "${REDIS_CLIENTS:-10}" ${REDIS_KEYS:+-r $REDIS_KEYS} -t set,get -q 2>/dev/null | awk '/requests per second/ {for (i=1;i<=NF;i++) if ($i ~ /^[0-9.]+$/) {s+=$i; n++; break}} END {printf "%.0f\n", s/n}'
		fi
		if [ "$mode" = ebpf-idle ]; then
			[ -n "$rec" ] && idle_stop
		else
			[ -n "$rec" ] && kill -INT $rec 2>/dev/null && wait $rec 2>/dev/null || true
		fi
		kill $REDIS_PID 2>/dev/null; wait $REDIS_PID 2>/dev/null || true
		REDIS_PID=
	}
	declare -A RD RD_R
	REDIS_KEYS= interleaved RD redis_rps inverse
	for m in $MODES; do
		log "redis-benchmark set+get $m: ${RD[$m]} req/s, slowdown $(printf %.3f "${RD_R[$m]}")"
	done
	# The same load over 100,000 keys, as the checkpoints bench runs it:
	# redis then writes about 2,400 heap pages per interval instead of a
	# few dozen, and each is saved and copied on write once an interval.
	declare -A RK RK_R
	REDIS_KEYS=100000 interleaved RK redis_rps inverse
	for m in $MODES; do
		log "redis-benchmark -r 100000 set+get $m: ${RK[$m]} req/s, slowdown $(printf %.3f "${RK_R[$m]}")"
	done
	# One client: the server and its client leave CPU time free, as on a
	# server machine with cores to spare, and the slowdown is what the
	# recording adds to each request, not tprec's CPU taken from them.
	declare -A R1 R1_R
	REDIS_CLIENTS=1 REDIS_KEYS=100000 interleaved R1 redis_rps inverse
	for m in $MODES; do
		log "redis-benchmark -c 1 -r 100000 set+get $m: ${R1[$m]} req/s, slowdown $(printf %.3f "${R1_R[$m]}")"
	done
else
	log "redis: redis-server or redis-benchmark missing (apt-get install redis-server): skipped"
fi

# --- interval boundary as seen by the target, and written-page rate
want boundary && for mb in 10 100 1024; do
	for m in $MODES; do
		[ "$m" = strace ] || [ "$m" = ebpf-idle ] && continue
		r=$(run "$m" "$WORK/boundary" "$mb" 3)
		log "boundary ${mb} MB resident $m: $r"
	done
done
if want boundary; then
	out=$(TPREC_DEBUG=1 "$TPREC" --backend ebpf --interval "$INTERVAL" -o "$WORK" -- "$WORK/boundary" 100 3 2>&1 >/dev/null | grep -E "fault stream vs pagemap over" || true)
	log "written pages (eBPF fault stream, boundary 100 MB): ${out#tprec: }"
	out=$("$TPREC" --backend ebpf --interval "$INTERVAL" -o "$WORK" -- dd if=/dev/zero of=/dev/null bs=512 count="$DD_COUNT" 2>&1 | grep -E "fault stream vs pagemap over" || true)
	log "written pages (eBPF fault stream, dd): ${out#tprec: }"
fi

# --- gdb's record full on a small dd run
if want gdb && command -v gdb >/dev/null; then
	small=2000
	t0=$(date +%s.%N); dd if=/dev/zero of=/dev/null bs=512 count=$small 2>/dev/null; t1=$(date +%s.%N)
	gdb -q -batch -ex 'set pagination off' -ex starti -ex 'record full' -ex 'set record full insn-number-max unlimited' -ex continue \
		--args dd if=/dev/zero of=/dev/null bs=512 count=$small >/dev/null 2>&1 || true
	t2=$(date +%s.%N)
	t3=$(date +%s.%N); "$TPREC" -q --backend ebpf -o "$WORK" -- dd if=/dev/zero of=/dev/null bs=512 count=$small 2>/dev/null; t4=$(date +%s.%N)
	log "dd count=$small: unrecorded $(awk -v a=$t0 -v b=$t1 'BEGIN{printf "%.3f", b-a}') s, gdb record full $(awk -v a=$t1 -v b=$t2 'BEGIN{printf "%.3f", b-a}') s, tprec eBPF (with start-up) $(awk -v a=$t3 -v b=$t4 'BEGIN{printf "%.3f", b-a}') s"
fi

# --- what an idle process costs recorded (BENCHMARKS.md, "Idle processes"):
# tprec's and the target's CPU while it sleeps; IDLE=no leaves it out.
if want idle && [ "${IDLE:-yes}" != no ]; then
	BINS="$(dirname "$TPREC")" ROUNDS="$RUNS" SECS=5 bash scripts/bench/idle.sh | grep -v '^#' | while read -r line; do
		log "idle: $line"
	done
fi

# Checkpoint size, dump latency and replay time (its own section of
# BENCHMARKS.md); CHECKPOINTS=no leaves it out. Its workloads are redis
# (over 100,000 keys and on one), python (py here) and gzip: a run of some
# of ours measures those of them it names (redis, py), and all of them when
# it runs every workload.
if [ "${CHECKPOINTS:-yes}" != no ]; then
	ck=
	if [ "$(echo $WORKLOADS)" != "$(echo $ALL_WORKLOADS)" ]; then
		want redis && ck="$ck redis redis1"
		want py && ck="$ck python"
		[ -n "$ck" ] || log "checkpoints: none of their workloads (redis, py) among these"
	fi
	if [ -n "$ck" ] || [ "$(echo $WORKLOADS)" = "$(echo $ALL_WORKLOADS)" ]; then
		WORKLOADS=$ck bash scripts/bench/checkpoints.sh
	fi
fi
