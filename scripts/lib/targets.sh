# Shared by the scripts that crash real programs under tprec
# (scripts/soak.sh, scripts/bench/checkpoints.sh). Source it after setting
# WORK (a scratch directory). The running target is TPID, its load LOAD,
# and OWNER the process that started it when that is not the script.

TPID= LOAD= REC= OWNER=
cleanup() {
	for p in $REC $LOAD $TPID $OWNER; do kill -KILL "$p" 2>/dev/null || true; done
	rm -rf "$WORK"
}
trap cleanup EXIT

# $WORK/tgkill PID sends SIGSEGV to PID's main thread. A fault lands in the
# thread that runs; a kill from outside may land in any thread of a
# multi-threaded target (redis-server's idle background threads too).
gcc -O2 -o "$WORK/tgkill" -x c - <<'C'
#include <signal.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(int argc, char **argv) { int p = atoi(argv[1]); return syscall(SYS_tgkill, p, p, SIGSEGV) != 0; }
C

waitfor() { # waitfor SECONDS CMD...: poll until CMD succeeds
	local n=$(($1 * 20))
	shift
	for _ in $(seq "$n"); do "$@" && return 0; sleep 0.05; done
	return 1
}

# start_redis PORT: redis-server on PORT (TPID) under redis-benchmark over
# 100,000 keys (LOAD).
. "$(dirname "${BASH_SOURCE[0]}")/redis.sh"
start_redis() {
	redis_load "$1"
	TPID=$SRV
}

# words_file FILE MB: MB megabytes of random words for gzip: compressible,
# and slow enough (about 30 MB/s here) that gzip is still running when it
# is crashed.
words_file() {
	python3 - "$1" "$2" <<'EOF'
import random, sys
r = random.Random(1)
words = ["".join(r.choice("abcdefghijklmnop") for _ in range(r.randint(2, 9))) for _ in range(5000)]
chunks = [" ".join(r.choices(words, k=700000)).encode() + b"\n" for _ in range(8)]
with open(sys.argv[1], "wb") as f:
    left = int(sys.argv[2]) << 20
    while left > 0:
        c = r.choice(chunks)[:left]
        f.write(c)
        left -= len(c)
EOF
}

# stop: ends the load and the target.
stop() {
	[ -n "$LOAD" ] && { kill "$LOAD" 2>/dev/null || true; wait "$LOAD" 2>/dev/null || true; }
	kill -KILL "$TPID" 2>/dev/null || true
	wait "$TPID" 2>/dev/null || true
	# OWNER: a process that started the target (nginx's master), which
	# takes its new children down with it on SIGTERM.
	[ -n "$OWNER" ] && { kill -TERM "$OWNER" 2>/dev/null || true; wait "$OWNER" 2>/dev/null || true; }
	LOAD= TPID= OWNER=
}
