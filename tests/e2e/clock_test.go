package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tprec/tprec/format"

	"golang.org/x/sys/unix"
)

// pythonClockLoop reads a small file, then the clock three times, over and
// over: runs of time calls between ordinary ones.
const pythonClockLoop = `
import os, sys, time
p = os.path.join(sys.argv[1], "data.txt")
with open(p, "w") as f:
    f.write("x" * 100)
print("ready", flush=True)
n = 0
while True:
    with open(p) as f:
        n += len(f.read())
    time.time()
    time.monotonic()
    time.perf_counter()
`

var inProcessRe = regexp.MustCompile(`re-execution of (\d+) syscalls from interval \d+, (\d+) of them clock reads the process completed itself`)

// The calls of the vDSO's time functions are completed inside the replayed
// process, without a ptrace stop (replayer/clock.go). python3 crashed in
// such a loop replays with them completed there; the same replay without
// that path (TPREPLAY_NO_CLOCK_PATH) verifies the same calls; and a
// checkpoint with one argument of one such call changed still fails at that
// call, as with a ptrace stop per call.
func TestClockReadsInProcess(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	prog := pythonScript(t, "clock.py", pythonClockLoop)
	forBackends(t, func(t *testing.T, backend string) {
		target, _, done := startTarget(t, "/usr/bin/python3", "-S", prog, dir)
		time.Sleep(300 * time.Millisecond)
		ck := attachAndCrash(t, target, done, 1200*time.Millisecond, "--backend", backend)

		out := replay(t, ck, "--time")
		m := inProcessRe.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("tpreplay --time did not report clock reads completed in the process:\n%s", out)
		}
		calls, _ := strconv.Atoi(m[1])
		inProcess, _ := strconv.Atoi(m[2])
		if inProcess < calls/4 || inProcess >= calls {
			t.Fatalf("%d of %d calls completed in the process: want about half (three clock reads an iteration)", inProcess, calls)
		}

		plain, err := tpreplayEnv(t, []string{"TPREPLAY_NO_CLOCK_PATH=1"}, "--time", ck)
		if err != nil || !verifiedRe.MatchString(plain) {
			t.Fatalf("replay without the clock path: %v\n%s", err, plain)
		}
		if strings.Contains(plain, "clock reads") || !strings.Contains(plain, fmt.Sprintf("re-execution of %d syscalls", calls)) {
			t.Fatalf("replay without the clock path did not replay the same %d calls with a stop each:\n%s", calls, plain)
		}

		bad, seq := changeClockArg(t, ck)
		out, err = tpreplayEnv(t, nil, bad)
		if err == nil {
			t.Fatalf("a changed argument of clock_gettime #%d was not a divergence:\n%s", seq, out)
		}
		if !strings.Contains(out, "argument 1 of clock_gettime differs") || !strings.Contains(out, fmt.Sprintf("#%d", seq)) {
			t.Fatalf("want the divergence at clock_gettime #%d's first argument, got:\n%s", seq, out)
		}
	})
}

// tpreplayEnv runs tpreplay with extra environment and returns its output.
func tpreplayEnv(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(tools(t), "tpreplay"), args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// changeClockArg writes a copy of checkpoint ck in which one clock_gettime
// call late in the window, one the replay completes in the process (the
// same thread's call follows it), has another clock id, and returns the
// copy and that call's sequence number.
func changeClockArg(t *testing.T, ck string) (string, uint64) {
	t.Helper()
	f, err := format.Open(ck)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := f.Checkpoint
	for i := len(c.Syscalls) - 20; i > 0; i-- {
		s := &c.Syscalls[i]
		if s.Nr == unix.SYS_CLOCK_GETTIME && c.Syscalls[i+1].Tid == s.Tid && c.Syscalls[i-1].Nr == unix.SYS_CLOCK_GETTIME {
			s.Args[0] ^= 1
			bad := filepath.Join(t.TempDir(), "changed.tpc")
			if err := format.Write(bad, c, f); err != nil {
				t.Fatal(err)
			}
			return bad, s.Seq
		}
	}
	t.Fatalf("no clock_gettime call to change in %s", ck)
	return "", 0
}

// Four threads of a test program read the clock between calls of their own,
// their runs interleaved in the log: the replay completes each thread's
// runs in the process while the others wait, and verifies.
func TestClockReadsInProcessThreads(t *testing.T) {
	requireRoot(t)
	prog := cc(t, "testdata/clockthreads.c", t.TempDir())
	forBackends(t, func(t *testing.T, backend string) {
		target, out, done := startTarget(t, prog)
		for i := 0; i < 200 && !strings.Contains(out.String(), "ready"); i++ {
			time.Sleep(10 * time.Millisecond)
		}
		ck := attachAndCrash(t, target, done, 1200*time.Millisecond, "--backend", backend)
		res := replay(t, ck, "--time")
		if n := threadsVerified(t, res); n != 4 {
			t.Errorf("the replay ran %d threads, want 4", n)
		}
		m := inProcessRe.FindStringSubmatch(res)
		if m == nil {
			t.Fatalf("tpreplay --time did not report clock reads completed in the process:\n%s", res)
		}
		if n, _ := strconv.Atoi(m[2]); n == 0 {
			t.Fatalf("no clock read completed in the process:\n%s", res)
		}
	})
}
