#!/bin/bash
# Check FORMAT.md against real checkpoints: an independent reader written
# from FORMAT.md alone (tpcread.py) decodes checkpoints tprec writes, and its
# decoding is compared field by field with `tpinspect --json --syscalls`
# (compare.py). Corrupted copies must be rejected by the reader and by
# tpreplay (exit 2).
#
# Run as root:  bash tests/formatdoc/check.sh
# Environment:  TPBIN=DIR  use the tprec/tpreplay/tpinspect in DIR instead of
#                          running `make build` and using bin/
#               KEEP=1     keep the work directory (checkpoints, JSON)
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PY=/usr/bin/python3   # Debian's python3, where python3-zstandard is installed

fail() { echo "check.sh: FAIL: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || fail "must run as root (tprec attaches to processes)"
"$PY" -c 'import zstandard' 2>/dev/null || fail "$PY lacks zstandard: apt-get install -y python3-zstandard"

if [ -z "${TPBIN:-}" ]; then
	make -C "$ROOT" build >/dev/null
	TPBIN=$ROOT/bin
fi
for t in tprec tpreplay tpinspect; do [ -x "$TPBIN/$t" ] || fail "no $TPBIN/$t"; done

WORK=$(mktemp -d /tmp/formatdoc.XXXXXX)
OURPIDS=()
cleanup() {
	local p
	for p in "${OURPIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
	if [ "${KEEP:-0}" = 1 ]; then echo "check.sh: work directory kept: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

# The workload: file I/O, clock reads, getpid, and a SIGUSR1 handler.
cat >"$WORK/workload.py" <<'EOF'
import os, signal, sys, threading, time
d = sys.argv[1]
hits = [0]
def on_usr1(signo, frame):
    hits[0] += 1
signal.signal(signal.SIGUSR1, on_usr1)
fn = os.path.join(d, "data.txt")
with open(fn, "w") as f:
    f.write("formatdoc line\n" * 200)
# Two descriptors read alternately with the same call and length: a repeated
# output must repeat the last output of its own descriptor, not of the number.
for name, ch in (("a.txt", "A"), ("b.txt", "B")):
    with open(os.path.join(d, name), "w") as f:
        f.write(ch * 64 + "\n")
with open(os.path.join(d, "c.txt"), "w") as f:
    f.write("A" * 64 + "\n")
fresh = []
fa = os.open(os.path.join(d, "a.txt"), os.O_RDONLY)
fb = os.open(os.path.join(d, "b.txt"), os.O_RDONLY)
def other():
    while True:
        os.pread(fb, 65, 0)
        time.sleep(0.01)
if sys.argv[2] == "2":
    threading.Thread(target=other, daemon=True, name="reader2").start()
i = 0
while True:
    with open(fn) as f:
        s = f.read()
    with open(os.path.join(d, "out.txt"), "w") as f:
        f.write("%d %f %f %d\n" % (i, time.time(), time.monotonic(), hits[0]))
    os.pread(fa, 65, 0)
    # a descriptor never read before, same bytes as a.txt: its repeat comes
    # from the list by number (the last pread64 output, fa's)
    fc = os.open(os.path.join(d, "c.txt"), os.O_RDONLY)
    os.pread(fc, 65, 0)
    fresh.append(fc)
    if len(fresh) > 900:
        for x in fresh: os.close(x)
        fresh.clear()
    os.pread(fb, 65, 0)
    os.getpid()
    os.stat(fn)
    i += 1
    time.sleep(0.002)
EOF
head -c 6000000 "$(readlink -f /usr/bin/python3)" >"$WORK/input.bin"

# record_attach NAME THREADS TPREC-OPTIONS...: record the workload (1 or 2
# threads), send it SIGUSR1 three times, then SIGSEGV; leaves the checkpoint
# in $WORK/NAME/. The workload runs in a subshell whose stderr is discarded,
# so that bash's "Segmentation fault" job report does not clutter the output.
record_attach() {
	local name=$1 threads=$2; shift 2
	mkdir -p "$WORK/$name"
	{ "$PY" "$WORK/workload.py" "$WORK/$name" "$threads" 2>"$WORK/$name.workload.log" &
		echo $! >"$WORK/$name.pid"; wait; } 2>/dev/null &
	local sub=$!
	OURPIDS+=("$sub")
	while [ ! -s "$WORK/$name.pid" ]; do sleep 0.05; done
	local p
	p=$(cat "$WORK/$name.pid")
	OURPIDS+=("$p")
	sleep 0.5
	timeout 120 "$TPBIN/tprec" -q "$@" --pid "$p" -o "$WORK/$name" >"$WORK/$name.tprec.log" 2>&1 & local r=$!
	OURPIDS+=("$r")
	sleep 0.6
	for _ in 1 2 3; do kill -USR1 "$p"; sleep 0.25; done
	sleep 0.2
	kill -SEGV "$p"
	local rc=0
	wait "$r" || rc=$?
	wait "$sub" 2>/dev/null || true
	[ "$rc" = 0 ] || { cat "$WORK/$name.tprec.log" >&2; fail "$name: tprec exited $rc"; }
}

# record_run NAME TPREC-OPTIONS... -- COMMAND...: record a command to its exit.
record_run() {
	local name=$1; shift
	mkdir -p "$WORK/$name"
	local rc=0
	(cd "$WORK" && timeout 120 "$TPBIN/tprec" -q --on-exit -o "$WORK/$name" "$@" >/dev/null 2>"$WORK/$name.tprec.log") || rc=$?
	[ "$rc" = 0 ] || { cat "$WORK/$name.tprec.log" >&2; fail "$name: tprec exited $rc"; }
}

tpc_of() {
	local f
	f=$(ls "$WORK/$1"/*.tpc 2>/dev/null) || fail "$1: no checkpoint written"
	[ "$(echo "$f" | wc -l)" = 1 ] || fail "$1: more than one checkpoint: $f"
	echo "$f"
}

START=$SECONDS
record_attach ebpf 1 --backend ebpf
record_attach ptrace 1 --backend ptrace
record_attach allstarts 1 --backend ebpf --all-starts
record_attach fullpages 1 --backend ebpf --full-pages
record_attach threads 2 --backend ptrace
record_run gzip -- gzip -6 -c input.bin
record_run sha256 --backend ptrace -- sha256sum input.bin
echo "check.sh: recorded 7 checkpoints in $((SECONDS - START))s"

FAILED=0
for name in ebpf ptrace allstarts fullpages threads gzip sha256; do
	f=$(tpc_of "$name")
	if ! "$PY" "$HERE/tpcread.py" --syscalls "$f" >"$WORK/$name.mine.json" 2>"$WORK/$name.mine.err"; then
		echo "check.sh: $name: the independent reader rejects tprec's file: $(cat "$WORK/$name.mine.err")"
		FAILED=1
		continue
	fi
	"$TPBIN/tpinspect" --json --syscalls "$f" >"$WORK/$name.tpinspect.json" || fail "$name: tpinspect failed"
	mins=(--min-syscalls 50 --min-pages 10 --min-outputs 10)
	case $name in
	ebpf | ptrace | allstarts | fullpages | threads) mins+=(--min-signals 1) ;;
	esac
	"$PY" "$HERE/compare.py" "$WORK/$name.mine.json" "$WORK/$name.tpinspect.json" "$name" "${mins[@]}" || FAILED=1
done

# Properties of the kinds of file FORMAT.md describes.
"$PY" - "$WORK" <<'EOF' || FAILED=1
import json, sys
w = sys.argv[1]
bad = []
def load(n): return json.load(open("%s/%s.mine.json" % (w, n)))
for n in ("ebpf", "ptrace", "allstarts", "fullpages", "threads", "gzip", "sha256"):
    m = load(n)
    if m["version"] != "7.2": bad.append("%s: version %s" % (n, m["version"]))
    if m["pages"]["unindexed_pages"]: bad.append("%s: %d pages in blocks but not in PGIDX" % (n, m["pages"]["unindexed_pages"]))
m = load("allstarts")
om = [iv["index"] for iv in m["intervals"] if iv["start_omitted"]]
if om: bad.append("allstarts: intervals %s have start omitted" % om)
m = load("ebpf")
if sum(1 for iv in m["intervals"] if not iv["start_omitted"]) != 1:
    bad.append("ebpf: a minimized file should store exactly one start")
if not load("fullpages")["header"]["full_pages"]: bad.append("fullpages: HEADR full pages is 0")
for n in ("gzip", "sha256"):
    if load(n)["end"]["kind"] != "exit": bad.append("%s: end kind %s" % (n, load(n)["end"]["kind"]))
for n in ("ebpf", "ptrace"):
    e = load(n)["end"]
    if (e["kind"], e["signo"]) != ("signal", 11): bad.append("%s: end %s %s" % (n, e["kind"], e["signo"]))
for n in ("ebpf", "ptrace", "allstarts", "fullpages", "threads", "gzip", "sha256"):
    m = load(n)
    for note in m["notes"]: bad.append("%s: %s" % (n, note))
    p = m["pages"]
    if p["word_base_unreferenced"] or p["word_base_not_first"]:
        bad.append("%s: %d pages stored relative to an address that does not refer to them, %d to one "
                   "that is not the first" % (n, p["word_base_unreferenced"], p["word_base_not_first"]))
    if m["syscall_output_kinds"]["repeat_outputs"] == 0 and n in ("ebpf", "ptrace"):
        bad.append("%s: no repeated output decoded" % n)
    if m["syscall_output_kinds"]["words_outputs"] == 0 and n in ("ebpf", "ptrace"):
        bad.append("%s: no output decoded from time words" % n)
m = load("threads")
if max(iv["threads"] for iv in m["intervals"]) < 2 or m["end"]["threads"] < 1:
    bad.append("threads: the workload's second thread is in no interval or not in ENDST")
if load("sha256")["pages"]["syscall_pages"] == 0:
    bad.append("sha256: no mmap page in the syscall log")
for b in bad: print("check.sh: DIFF", b)
sys.exit(1 if bad else 0)
EOF

# Corrupted copies: the reader and tpreplay must both reject them (exit 2).
src=$(tpc_of ebpf)
"$PY" - "$src" "$WORK/ebpf.mine.json" "$WORK/corrupt" <<'EOF'
import json, os, sys
src, summ, out = sys.argv[1:4]
os.makedirs(out, exist_ok=True)
data = open(src, "rb").read()
secs = {s["name"]: s for s in json.load(open(summ))["sections"]}
def put(name, b):
    open(os.path.join(out, name + ".tpc"), "wb").write(b)
def flip(off):
    b = bytearray(data); b[off] ^= 0x40; return bytes(b)
for s in ("HEADR", "INTVL", "SYSCL", "ENDST", "PGIDX", "PAGES"):
    put("flip-" + s, flip(secs[s]["offset"] + 16 + secs[s]["bytes"] // 2))
put("flip-sechdr-SYSCL-crc", flip(secs["SYSCL"]["offset"] + 12))
put("flip-filehdr-flags", flip(13))
put("flip-directory", flip(secs["DIRCT"]["offset"] + 16 + 9))
put("flip-trailer-length", flip(len(data) - 24))
put("truncated-100", data[:-100])
put("truncated-half", data[:len(data) // 2])
put("extended", data + bytes(16))
EOF
for c in "$WORK"/corrupt/*.tpc; do
	n=$(basename "$c" .tpc)
	rc=0; "$PY" "$HERE/tpcread.py" --quiet "$c" 2>"$WORK/corrupt/$n.reader" || rc=$?
	if [ "$rc" != 2 ]; then echo "check.sh: DIFF corrupt $n: reader exited $rc, want 2"; FAILED=1; fi
	rc=0; timeout 120 "$TPBIN/tpreplay" "$c" >"$WORK/corrupt/$n.replay" 2>&1 || rc=$?
	if [ "$rc" != 2 ]; then echo "check.sh: DIFF corrupt $n: tpreplay exited $rc, want 2"; FAILED=1; fi
	echo "check.sh: corrupt $n: rejected: reader: $(head -c 160 "$WORK/corrupt/$n.reader") | tpreplay: $(grep -m1 -i -e checkpoint -e format -e error "$WORK/corrupt/$n.replay" | head -c 160)"
done

if [ "$FAILED" != 0 ]; then
	KEEP=1
	fail "differences found (see DIFF lines above)"
fi
echo "check.sh: PASS in $((SECONDS - START))s"
