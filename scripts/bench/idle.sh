#!/usr/bin/env bash
# What recording an idle process costs: the CPU time tprec and its target
# use over SECS seconds while the target sleeps, for two or more builds
# taking turns.
#   BINS="/tmp/old/bin ./bin" ROUNDS=3 bash scripts/bench/idle.sh
# TARGETS="python-1g sleep nginx redis" chooses the targets.
# Targets: Debian's python3 holding 1 GB it wrote, asleep in time.sleep;
# coreutils' sleep; an nginx worker with no client (in epoll_wait, which
# each boundary's interrupt makes return EINTR); redis-server with no client
# (its timer wakes it ten times a second: a nearly idle server).
# A target whose program is missing is skipped, with a line saying so.
# Prints, per target and build, tprec's and the target's CPU in percent of
# one CPU (/proc/PID/stat, utime + stime), and the intervals tprec reports.
# Build an older commit with: git worktree add /tmp/old COMMIT && make -C /tmp/old build
# Needs root.
set -euo pipefail
cd "$(dirname "$0")/../.."
BINS=${BINS:-./bin}
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-10}
PY=${PY:-/usr/bin/python3}
WORK=$(mktemp -d)
TP= REC= OWN=
cleanup() {
	[ -n "$REC" ] && kill -INT "$REC" 2>/dev/null && wait "$REC" 2>/dev/null
	[ -n "$OWN" ] && kill "$OWN" 2>/dev/null && wait "$OWN" 2>/dev/null
	rm -rf "$WORK"
}
trap cleanup EXIT
ticks() { awk '{ n = split($0, f, ")"); split(f[n], g, " "); print g[12] + g[13] }' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

start() { # start TARGET: sets TP, the process to record, once it is idle, and OWN, the one to stop
	case $1 in
	python-1g)
		"$PY" -c 'import time; b = bytearray(1 << 30); print("ready", flush=True); time.sleep(3600)' >"$WORK/py.out" &
		TP=$! OWN=$!
		for _ in $(seq 300); do grep -q ready "$WORK/py.out" 2>/dev/null && break; sleep 0.1; done ;;
	sleep)
		sleep 3600 & TP=$! OWN=$! ;;
	nginx)
		mkdir -p "$WORK/ng"
		cat >"$WORK/ng/nginx.conf" <<NG
daemon off;
master_process on;
worker_processes 1;
pid $WORK/ng/nginx.pid;
error_log $WORK/ng/error.log;
events { worker_connections 64; }
http {
  access_log off;
  client_body_temp_path $WORK/ng/b; proxy_temp_path $WORK/ng/p; fastcgi_temp_path $WORK/ng/f;
  uwsgi_temp_path $WORK/ng/u; scgi_temp_path $WORK/ng/s;
  server { listen 127.0.0.1:8097; root $WORK/ng; }
}
NG
		nginx -p "$WORK/ng" -c "$WORK/ng/nginx.conf" &
		OWN=$!
		for _ in $(seq 100); do TP=$(pgrep -P "$OWN" | head -1) && [ -n "$TP" ] && break; sleep 0.1; done ;;
	redis)
		redis-server --port 6395 --save "" --appendonly no --daemonize no >/dev/null 2>&1 &
		TP=$! OWN=$!
		for _ in $(seq 100); do redis-cli -p 6395 ping >/dev/null 2>&1 && break; sleep 0.1; done ;;
	esac
	sleep 1
}

measure() { # measure TARGET BIN
	start "$1"
	"$2/tprec" --pid "$TP" --status 1s -o "$WORK" 2>"$WORK/rec.log" &
	REC=$!
	for _ in $(seq 100); do grep -q 'recording process' "$WORK/rec.log" && break; sleep 0.1; done
	sleep 1
	local r0 t0 r1 t1
	r0=$(ticks "$REC") t0=$(ticks "$TP")
	sleep "$SECS"
	r1=$(ticks "$REC") t1=$(ticks "$TP")
	kill -INT "$REC"; wait "$REC" 2>/dev/null || true; REC=
	kill "$OWN"; wait "$OWN" 2>/dev/null || true
	TP= OWN=
	local status
	status=$(grep 'of history in' "$WORK/rec.log" | tail -1 | sed -E 's/.*: ([0-9.]+ s of history in [0-9]+ intervals).*/\1/')
	printf '%-10s %-24s tprec %5.1f%%  target %5.1f%%  (%s)\n' "$1" "$2" \
		"$(awk -v a="$r0" -v b="$r1" -v h="$hz" -v s="$SECS" 'BEGIN {print (b - a) * 100 / h / s}')" \
		"$(awk -v a="$t0" -v b="$t1" -v h="$hz" -v s="$SECS" 'BEGIN {print (b - a) * 100 / h / s}')" "$status"
}

echo "# $(date -u +%FT%TZ) $(uname -r) $(nproc) CPUs, rounds=$ROUNDS, secs=$SECS"
for r in $(seq "$ROUNDS"); do
	for target in ${TARGETS:-python-1g sleep nginx redis}; do
		need=$target
		case $target in python-1g) need=$PY ;; redis) need=redis-server ;; esac
		if ! command -v "$need" >/dev/null; then
			echo "$target: $need missing: skipped"
			continue
		fi
		for b in $BINS; do
			measure "$target" "$b"
		done
	done
done
