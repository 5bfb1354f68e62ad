#!/usr/bin/env bash
# Records a program, crashes it, and replays the checkpoint from every
# replayable interval: a check of a real program end to end, by hand (root).
#
#   bash scripts/replay-every-start.sh [TPREC-FLAGS...] -- COMMAND [ARGS...]
#
# COMMAND runs for WARMUP seconds (default 0.8), is recorded by bin/tprec
# with the flags given for SECS seconds (default 1.7), then killed with
# SIGSEGV. Prints the checkpoint's size (or why the trial replay failed) and
# every `tpreplay --from K` that did not verify; a checkpoint that failed is
# kept in $KEEP (default /tmp/tprec-failed). Example (a loop that makes
# syscalls: one that makes none for seconds cannot be verified in time, see
# README, "Current limits"):
#   bash scripts/replay-every-start.sh --all-starts -- perl -e 'my %h; for (1..1e9) { $h{$_ % 5000} = "x" x ($_ % 300); time unless $_ % 1000 }'
set -uo pipefail
cd "$(dirname "$0")/.."
flags=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do flags+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
[ $# -gt 0 ] || { echo "usage: $0 [TPREC-FLAGS...] -- COMMAND [ARGS...]" >&2; exit 2; }
BIN=$PWD/bin
KEEP=${KEEP:-/tmp/tprec-failed}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
[ -x "$BIN/tprec" ] || make -s build
"$@" >/dev/null 2>&1 &
P=$!
sleep "${WARMUP:-0.8}"
"$BIN/tprec" --pid "$P" "${flags[@]}" -o "$WORK" 2>"$WORK/log" &
R=$!
sleep "${SECS:-1.7}"
kill -SEGV "$P"
wait "$R" 2>/dev/null
F=$(ls "$WORK"/*.tpc 2>/dev/null)
if [ -z "$F" ]; then
	echo "no checkpoint: $(tail -2 "$WORK/log")"
	exit 1
fi
grep -oE "trial replay failed.*|[0-9]+ bytes, in [^ ]+" "$WORK/log"
bad=0
for k in $("$BIN/tpinspect" --json "$F" | python3 -c 'import json, sys; print(" ".join(str(i["index"]) for i in json.load(sys.stdin)["intervals"] if i["replayable"]))'); do
	out=$("$BIN/tpreplay" --from "$k" "$F" 2>&1)
	if ! grep -q "^verified" <<<"$out"; then
		echo "--from $k: $(head -3 <<<"$out" | tr '\n' ' ')"
		bad=1
	fi
done
if [ $bad = 1 ]; then
	mkdir -p "$KEEP" && cp "$F" "$KEEP/"
	echo "kept $KEEP/$(basename "$F")"
	exit 1
fi
echo "every start verified"
