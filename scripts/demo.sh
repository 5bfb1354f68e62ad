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
$sudo bin/tpinspect "$ckpt" | head -40
echo
echo "== replay: tpreplay $(basename "$ckpt")"
$sudo bin/tpreplay "$ckpt"
