package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A python3 that reads a cached 32 KB file in a loop writes several hundred
// MB a second of read results into the eBPF ring buffer, more than the
// reader takes. The programs then stop the thread (SIGURG) and tprec holds
// it until the reader has caught up: the program slows down, nothing is
// lost, and the checkpoint verifies. When the program blocks SIGURG, no stop
// can be sent: the records that do not fit are lost, and tprec says so
// instead of writing a log with holes.
const readLoopScript = `
import os, signal, sys
if sys.argv[2] == "block":
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGURG})
path = os.path.join(sys.argv[1], "input.txt")
with open(path, "w") as f:
    f.write("x" * 32768)
print("ready", flush=True)
while True:
    with open(path) as f:
        f.read()
`

func TestRingBufferCatchUp(t *testing.T) {
	requireRoot(t)
	for _, mode := range []string{"held", "sigurg-blocked"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			script := pythonScript(t, "readloop.py", readLoopScript)
			arg := "run"
			if mode == "sigurg-blocked" {
				arg = "block"
			}
			target, _, done := startTarget(t, "/usr/bin/python3", "-S", script, dir, arg)
			waitFile(t, filepath.Join(dir, "input.txt"), 32768)
			// A ring buffer of 256 KB fills in well under a millisecond.
			ck, stderr := crashWith(t, target, done, 1500*time.Millisecond, func(pid int) error { return syscall.Kill(pid, syscall.SIGSEGV) }, "--backend", "ebpf", "--ringbuf-size", "256K")
			switch mode {
			case "held":
				allReplayable(t, ck)
				if strings.Contains(stderr, "lost") {
					t.Fatalf("tprec lost records although the program could be held:\n%s", stderr)
				}
				if !strings.Contains(stderr, "for the ring buffer reader to catch up") {
					t.Fatalf("tprec does not say it held the program:\n%s", stderr)
				}
				replay(t, ck)
			case "sigurg-blocked":
				if !strings.Contains(stderr, "eBPF ring buffer lost") {
					t.Fatalf("tprec does not report the records it lost:\n%s", stderr)
				}
				// The intervals with a hole say so; a replay may still
				// start after the last of them.
				lossy := 0
				for _, iv := range intervalsIn(t, ck) {
					if !iv.Replayable && strings.Contains(iv.Reason, "ring buffer lost") {
						lossy++
					}
				}
				if lossy == 0 {
					t.Fatalf("no interval of the checkpoint names the lost records:\n%s", stderr)
				}
			}
		})
	}
}

// waitFile waits until path holds size bytes.
func waitFile(t *testing.T, path string, size int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if st, err := os.Stat(path); err == nil && st.Size() == size {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s was not written", path)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A python3 loop reading a small text file logs tens of MB a quarter second:
// more than a small --max-memory holds unpacked, but its reads pack many
// times over. The ring packs such an interval instead of dropping every
// older one for it, and keeps the history --keep asks for. A loop reading
// random bytes packs to nothing smaller: there the ring has to drop older
// intervals, and tprec says so while it records.
func TestRingHistoryUnderMemoryBound(t *testing.T) {
	requireRoot(t)
	const script = `
import os, sys, time
path = os.path.join(sys.argv[1], "input.txt")
with open(path, "w") as f:
    f.write("some input line\n" * 100)
print("ready", flush=True)
if sys.argv[2] == "random":
    fd = os.open("/dev/urandom", os.O_RDONLY)
    while True:
        os.read(fd, 1 << 16)
while True:
    with open(path) as f:
        f.read()
    time.time()
`
	for _, kind := range []string{"text", "random"} {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			prog := pythonScript(t, "loop.py", script)
			target, out, done := startTarget(t, "/usr/bin/python3", "-S", prog, dir, kind)
			waitReady(t, out)
			const keep = 6
			ck, stderr := crashWith(t, target, done, 2500*time.Millisecond, func(pid int) error { return syscall.Kill(pid, syscall.SIGSEGV) },
				"--interval", "250ms", "--keep", fmt.Sprint(keep), "--max-memory", "24M", "--full-pages")
			ivs := intervalsIn(t, ck)
			dropped := strings.Contains(stderr, "older interval(s) to stay within --max-memory")
			switch kind {
			case "text":
				if len(ivs) != keep || dropped {
					t.Fatalf("the checkpoint holds %d intervals, want %d (--keep); tprec:\n%s", len(ivs), keep, stderr)
				}
				replay(t, ck)
			case "random":
				if !dropped || len(ivs) >= keep {
					t.Fatalf("%d intervals kept of %d reading random bytes into a 24 MiB ring, and tprec told of dropped intervals: %v:\n%s", len(ivs), keep, dropped, stderr)
				}
			}
		})
	}
}
