#!/usr/bin/env bash
# Soak test: records real programs again and again, crashing each at a random
# moment, and checks every checkpoint the way a user relies on it: the dump's
# trial replay succeeded (the file holds the touched pages, not every page),
# and tpreplay verifies the crash. The moment of the crash decides where the
# window begins and ends, what the last calls are and where the end rip
# lies, so repeating it finds what one fixed run of the e2e tests does not.
#
#   sudo bash scripts/soak.sh                  # ROUNDS=5 of every workload
#   ROUNDS=20 WORKLOADS="redis bash" BACKENDS=ptrace bash scripts/soak.sh
#
# WORKLOADS: redis (redis-server under redis-benchmark), memcached (four
# workers, a python3 client), nginx (its worker, under a python3 HTTP client
# that also opens a connection per request), python (computes, reads a
# file, takes a 7 ms SIGALRM), lua (Debian's lua5.4: tables, strings, a
# file, the time), gzip (compresses random words), bash (a loop of forks
# and execs), perl (hashes, regular expressions, a file, the time), sqlite3
# (statements from a pipe against a database file: inserts, deletes,
# queries, its journal), jq (transforms a stream of JSON objects from a
# pipe). BACKENDS: the tprec backends taken in turn (default "ebpf
# ptrace").
# A run that fails keeps its checkpoint and tprec's log in KEEP_DIR (default
# /tmp/tprec-soak). Exits 1 if any run failed. Needs root and the programs.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
WORKLOADS=${WORKLOADS:-redis memcached nginx python lua gzip bash perl sqlite3 jq}
BACKENDS=${BACKENDS:-ebpf ptrace}
KEEP_DIR=${KEEP_DIR:-/tmp/tprec-soak}
BIN=${BIN:-$PWD/bin}
PORT=${PORT:-6412}
WORK=$(mktemp -d)
. scripts/lib/targets.sh
[ -x "$BIN/tprec" ] || make -s build
mkdir -p "$KEEP_DIR"

cat >"$WORK/compute.py" <<'EOF'
import hashlib, signal, sys
n = 0
def on_alarm(sig, frame):
    global n
    n += 1
signal.signal(signal.SIGALRM, on_alarm)
signal.setitimer(signal.ITIMER_REAL, 0.007, 0.007)
h, i = b"", 0
print("ready", flush=True)
while True:
    h = hashlib.sha256(h + str(i).encode()).digest()
    i += 1
    if i % 500 == 0:
        with open(sys.argv[1], "rb") as f:
            f.read()
EOF
cat >"$WORK/httpclient.py" <<'EOF'
import http.client, sys, time
port = int(sys.argv[1])
keep = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
i = 0
while True:
    path = ["/", "/big.txt", "/missing%d" % (i % 7)][i % 3]
    try:
        if i % 4 == 0:  # a connection per request, as well
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", path)
            c.getresponse().read()
            c.close()
        else:
            keep.request("GET", path)
            keep.getresponse().read()
    except Exception:
        keep = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    i += 1
    time.sleep(0.0005)
EOF
cat >"$WORK/work.lua" <<'EOF'
-- Computes on a table and strings, rereads a file and asks the time.
local t, n, parts = {}, 0, {}
print("ready")
io.stdout:flush()
while true do
	for i = 1, 1000 do
		local k = i % 500 + 1
		t[k] = (t[k] or 0) + i * n
	end
	parts[n % 64 + 1] = string.rep("x", n % 100) .. n
	n = n + 1
	if n % 50 == 0 then
		local f = io.open(arg[1], "rb")
		f:read("a")
		f:close()
		t[0] = os.time()
	end
end
EOF
cat >"$WORK/mcclient.py" <<'EOF'
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
i = 0
while True:
    v = str(i).encode()
    s.sendall(b"set k%d 0 0 %d\r\n%s\r\n" % (i % 1000, len(v), v))
    s.recv(64)
    s.sendall(b"get k%d\r\n" % ((i * 7) % 1000))
    s.recv(256)
    i += 1
    time.sleep(0.0005)
EOF
cat >"$WORK/work.pl" <<'EOF'
# Counts words in hashes, matches and rewrites strings, rereads a file and
# asks the time.
use strict;
my (%h, $n);
$| = 1;
print "ready\n";
while (1) {
	my $s = join(" ", map { "w" . (($n * 7 + $_) % 911) } 1 .. 20);
	$h{$1}++ while $s =~ /(w\d*3)\b/g;
	$s =~ s/w(\d+)/$1 * 2/ge;
	$h{len} = length $s;
	if (++$n % 2000 == 0) {
		open(my $f, "<", $ARGV[0]) or die;
		local $/;
		$h{file} = <$f>;
		close $f;
		$h{time} = time;
		%h = (time => $h{time}) if keys %h > 5000;
	}
}
EOF
cat >"$WORK/gensql.py" <<'EOF'
import sys
out = sys.stdout
out.write("PRAGMA journal_mode=DELETE;\nCREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT, c REAL);\n")
i = 0
while True:
    out.write("BEGIN;\n")
    for j in range(50):
        out.write("INSERT INTO t VALUES(%d, 'row %d ' || hex(randomblob(8)), %d * 0.5);\n" % (i, i, i))
        i += 1
    out.write("DELETE FROM t WHERE a < %d;\nCOMMIT;\nSELECT count(*), sum(c), max(length(b)) FROM t WHERE b LIKE '%%7%%';\n" % (i - 2000))
EOF
cat >"$WORK/genjson.py" <<'EOF'
import json, sys
i = 0
while True:
    print(json.dumps({"id": i, "name": "n%d" % (i * 7919 % 1000), "v": [i % 13, i % 7, i * 0.25], "tags": ["a", "b%d" % (i % 5)]}))
    i += 1
EOF
words_file "$WORK/words.txt" 400

# start WORKLOAD: starts the target (TPID) and its load (LOAD).
start() {
	LOAD=
	case $1 in
	redis)
		start_redis "$PORT"
		;;
	memcached)
		memcached -u root -p "$PORT" -U 0 -t 4 -o no_lru_crawler,no_lru_maintainer,no_hashexpand,no_slab_reassign,no_slab_automove >/dev/null 2>&1 &
		TPID=$!
		waitfor 10 bash -c "exec 3<>/dev/tcp/127.0.0.1/$PORT" 2>/dev/null
		python3 "$WORK/mcclient.py" "$PORT" 2>/dev/null &
		LOAD=$!
		;;
	nginx)
		local d=$WORK/nginx
		rm -rf "$d" && mkdir -p "$d/html"
		# The worker runs as www-data: it must reach the document root.
		chmod 755 "$WORK" "$d" "$d/html"
		echo hello >"$d/html/index.html"
		python3 -c 'print("0123456789abcdef\n" * 2000, end="")' >"$d/html/big.txt"
		chmod 644 "$d/html/"*
		cat >"$d/nginx.conf" <<EOF
daemon off;
master_process on;
worker_processes 1;
pid $d/nginx.pid;
error_log $d/error.log;
events { worker_connections 256; }
http {
  access_log $d/access.log;
  client_body_temp_path $d/body;
  proxy_temp_path $d/proxy;
  fastcgi_temp_path $d/fastcgi;
  uwsgi_temp_path $d/uwsgi;
  scgi_temp_path $d/scgi;
  server { listen 127.0.0.1:$PORT; root $d/html; }
}
EOF
		nginx -p "$d" -c "$d/nginx.conf" >/dev/null 2>&1 &
		OWNER=$!
		waitfor 10 python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=1)' "http://127.0.0.1:$PORT/" 2>/dev/null
		TPID=$(pgrep -P "$OWNER" | head -1)
		python3 "$WORK/httpclient.py" "$PORT" 2>/dev/null &
		LOAD=$!
		;;
	lua)
		lua5.4 "$WORK/work.lua" /etc/hostname >"$WORK/lua.out" &
		TPID=$!
		waitfor 20 grep -q ready "$WORK/lua.out"
		;;
	python)
		python3 -S "$WORK/compute.py" /etc/hostname >"$WORK/py.out" &
		TPID=$!
		waitfor 20 grep -q ready "$WORK/py.out"
		;;
	gzip)
		gzip -c "$WORK/words.txt" >/dev/null &
		TPID=$!
		;;
	perl)
		perl "$WORK/work.pl" /etc/hostname >"$WORK/pl.out" &
		TPID=$!
		waitfor 20 grep -q ready "$WORK/pl.out"
		;;
	sqlite3 | jq)
		# The generator writes into a fifo the target reads: both pids
		# are known (the generator is the load).
		rm -f "$WORK/fifo" "$WORK/t.db" "$WORK/t.db-journal"
		mkfifo "$WORK/fifo"
		if [ "$1" = sqlite3 ]; then
			python3 "$WORK/gensql.py" >"$WORK/fifo" 2>/dev/null &
			LOAD=$!
			sqlite3 "$WORK/t.db" <"$WORK/fifo" >/dev/null &
		else
			python3 "$WORK/genjson.py" >"$WORK/fifo" 2>/dev/null &
			LOAD=$!
			jq -c '{id, key: (.name | ascii_upcase), sum: (.v | add), tags: (.tags | join(","))}' <"$WORK/fifo" >/dev/null &
		fi
		TPID=$!
		;;
	bash)
		bash -c 'i=0; while :; do /bin/true; i=$((i+1)); echo $i >/dev/null; done' &
		TPID=$!
		;;
	esac
}

runs=0 failed=0 late=0
# one WORKLOAD BACKEND RUN: one recorded run, crashed after a random 1-3 s.
one() {
	local w=$1 b=$2 run=$3 dir=$WORK/ck log=$WORK/tprec.log
	rm -rf "$dir" && mkdir "$dir"
	start "$w"
	"$BIN/tprec" --backend "$b" --pid "$TPID" -o "$dir" 2>"$log" &
	REC=$!
	local after
	after=$(awk -v r=$RANDOM 'BEGIN {printf "%.2f", 1 + 2 * r / 32767}')
	local why= to
	if ! waitfor 20 grep -q 'recording process' "$log"; then
		why="tprec did not start"
		kill -INT "$REC" 2>/dev/null || true
	else
		sleep "$after"
		# Odd runs fault the main thread; even runs send the signal to the
		# process, as a watchdog or a supervisor does: the kernel gives it
		# to whichever thread it picks (a background thread of redis,
		# jemalloc's, was one).
		if [ $((run % 2)) -eq 1 ]; then
			to="main thread"
			"$WORK/tgkill" "$TPID" || true
		else
			to="process"
			kill -SEGV "$TPID" 2>/dev/null || true
		fi
	fi
	# tprec must end with the process: one waiting for ever keeps the
	# crashed process a zombie, its sockets open.
	if [ -z "$why" ] && ! waitfor 60 sh -c "! kill -0 $REC 2>/dev/null"; then
		why="tprec did not end within 60 s of the crash"
		ls "/proc/$TPID/task" 2>/dev/null | while read -r t; do
			echo "    thread $t: $(cut -d' ' -f2-3 "/proc/$TPID/task/$t/stat" 2>/dev/null), wchan $(cat "/proc/$TPID/task/$t/wchan" 2>/dev/null)"
		done >>"$log"
		kill -QUIT "$REC" 2>/dev/null || true
	fi
	wait "$TPID" 2>/dev/null || true
	wait "$REC" 2>/dev/null || true
	REC=
	stop
	local ck
	ck=$(ls "$dir"/*.tpc 2>/dev/null | head -1 || true)
	if [ -z "$why" ] && [ -z "$ck" ]; then
		why="no checkpoint"
	elif [ -z "$why" ] && ! grep -q 'touched pages (' "$log"; then
		why="the trial replay failed"
	elif [ -z "$why" ] && ! "$BIN/tpreplay" "$ck" >"$WORK/replay.out" 2>&1; then
		why="tpreplay did not verify"
	fi
	runs=$((runs + 1))
	# The trial's eager replay of several threads diverged and the late
	# one verified (ARCHITECTURE.md, "Threads": memcached's clock race).
	local sched=
	if grep -q 'it verified under the late schedule' "$log"; then
		late=$((late + 1))
		sched=", under the late schedule"
	fi
	if [ -n "$why" ]; then
		failed=$((failed + 1))
		local keep="$KEEP_DIR/$w-$b-$run"
		mkdir -p "$keep"
		cp "$log" "$keep/tprec.log"
		[ -z "$ck" ] || cp "$ck" "$keep/"
		[ ! -s "$WORK/replay.out" ] || cp "$WORK/replay.out" "$keep/"
		echo "$w $b run $run (SIGSEGV to the $to after ${after}s): $why; kept in $keep"
		grep -E 'trial replay failed|diverged|error' "$log" | head -3 | sed 's/^/    /' || true
	else
		echo "$w $b run $run (SIGSEGV to the $to after ${after}s): verified$sched, $(sed -nE 's/.* ([0-9]+ syscalls), ([0-9]+ touched pages \([0-9]+ present at the end\)).*/\1, \2/p' "$log")"
	fi
	rm -f "$WORK/replay.out"
}

for run in $(seq "$ROUNDS"); do
	for w in $WORKLOADS; do
		for b in $BACKENDS; do
			one "$w" "$b" "$run"
		done
	done
done
echo "soak: $runs runs, $failed failed, $late verified under the late schedule"
[ "$failed" -eq 0 ]
