#!/usr/bin/env bash
# Record the bundled example until it crashes, replay the checkpoint, and show
# that the replay reaches the same crash.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d /tmp/tprec-demo.XXXXXX)
trap 'rm -rf "$work"' EXIT
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"

gcc -g -O1 -o "$work/crashy" examples/crashy.c
echo "== recording: tprec -- crashy 2   (it crashes by itself after ~2 s)"
$sudo bin/tprec --output "$work" -- "$work/crashy" 2 >/dev/null
ckpt=$(ls "$work"/tp-*.tpc)
echo
echo "== what the checkpoint holds: tpinspect $(basename "$ckpt")"
$sudo bin/tpinspect "$ckpt" | sed -n 1,40p
echo
echo "== replay: tpreplay $(basename "$ckpt")"
$sudo bin/tpreplay "$ckpt"
# Where that is in the source (the binary is here, so gdb can say).
sym=$($sudo bin/tpreplay "$ckpt" | sed -n 's/.* in \([A-Za-z_][A-Za-z0-9_]*+0x[0-9a-f]*\),.*/\1/p')
if [ -n "$sym" ] && command -v gdb >/dev/null; then
	echo
	echo "== $sym in the source:"
	gdb -batch -nx -ex "info line *($sym)" -ex "list *($sym),*($sym)" "$work/crashy" 2>/dev/null | sed 's|^|  |'
fi
