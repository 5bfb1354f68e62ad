#!/usr/bin/env bash
# The originals of a busy redis-server stored whole (s2) and as deltas
# against the previous original of their address (ARCHITECTURE.md, "The
# ring and the dump"): records redis-server under redis-benchmark -r 100000
# with --all-starts (every interval's originals kept), crashes it, and
# measures the file's originals with scripts/bench/deltas.
#   sudo bash scripts/bench/deltas.sh
# Needs root and apt-get install redis-server.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-$PWD/bin}
PORT=${PORT:-7460}
WORK=$(mktemp -d)
trap 'kill $LOAD $TPID 2>/dev/null || true; rm -rf "$WORK"' EXIT
redis-server --port "$PORT" --save "" --appendonly no >/dev/null 2>&1 &
TPID=$!
until redis-cli -p "$PORT" ping >/dev/null 2>&1; do sleep 0.1; done
redis-benchmark -p "$PORT" -n 100000000 -c 10 -r 100000 -t set,get -q >/dev/null 2>&1 &
LOAD=$!
sleep 1
"$BIN/tprec" -q --pid "$TPID" --all-starts -o "$WORK" &
REC=$!
sleep 3.5
kill -SEGV "$TPID"
wait "$REC" || true
go run ./scripts/bench/deltas "$WORK"/*.tpc
