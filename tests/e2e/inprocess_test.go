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

var inProcessRe = regexp.MustCompile(`re-execution of (\d+) syscalls from interval \d+, (\d+) of them completed by the replayed process itself`)

// Calls are completed inside the replayed process, without a ptrace stop
// (replayer/inprocess.go): those of glibc's wrappers (openat, fstat, close
// here) and of the vDSO's time functions. python3 crashed in such a loop
// replays with most of its calls completed there; the same replay with a
// stop per call (TPREPLAY_NO_IN_PROCESS) verifies the same calls; and a
// checkpoint with one argument of one such call changed, a clock_gettime or
// a close, still fails at that call.
func TestCallsInProcess(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	prog := pythonScript(t, "rewrite.py", rewriteScript) // pages_test.go: reads a file and the clock in a loop
	forBackends(t, func(t *testing.T, backend string) {
		target, _, done := startTarget(t, "/usr/bin/python3", "-S", prog, dir)
		time.Sleep(300 * time.Millisecond)
		ck := attachAndCrash(t, target, done, 1200*time.Millisecond, "--backend", backend)

		out := replay(t, ck, "--time")
		m := inProcessRe.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("tpreplay --time did not report calls completed in the process:\n%s", out)
		}
		calls, _ := strconv.Atoi(m[1])
		inProcess, _ := strconv.Atoi(m[2])
		if inProcess < calls/2 || inProcess >= calls {
			t.Fatalf("%d of %d calls completed in the process: want most of them (python3 reads without a mov before its syscall)", inProcess, calls)
		}

		plain, err := tpreplayEnv(t, []string{"TPREPLAY_NO_IN_PROCESS=1"}, "--time", ck)
		if err != nil || !verifiedRe.MatchString(plain) {
			t.Fatalf("replay with a stop per call: %v\n%s", err, plain)
		}
		if strings.Contains(plain, "completed by the replayed process") || !strings.Contains(plain, fmt.Sprintf("re-execution of %d syscalls", calls)) {
			t.Fatalf("replay with a stop per call did not replay the same %d calls:\n%s", calls, plain)
		}

		for _, nr := range []int{unix.SYS_CLOCK_GETTIME, unix.SYS_CLOSE} {
			name := map[int]string{unix.SYS_CLOCK_GETTIME: "clock_gettime", unix.SYS_CLOSE: "close"}[nr]
			bad, seq := changeFirstArg(t, ck, nr)
			out, err = tpreplayEnv(t, nil, bad)
			if err == nil {
				t.Fatalf("a changed argument of %s #%d was not a divergence:\n%s", name, seq, out)
			}
			if !strings.Contains(out, "argument 1 of "+name+" differs") || !strings.Contains(out, fmt.Sprintf("#%d", seq)) {
				t.Fatalf("want the divergence at %s #%d's first argument, got:\n%s", name, seq, out)
			}
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

// changeFirstArg writes a copy of checkpoint ck in which one call of number
// nr late in the window, one the replay completes in the process (a call
// of the same thread after it), has another first argument, and returns the
// copy and that call's sequence number. A replay that took the call over
// without comparing its arguments would go on as recorded and verify.
func changeFirstArg(t *testing.T, ck string, nr int) (string, uint64) {
	t.Helper()
	bad := filepath.Join(t.TempDir(), "changed.tpc")
	var seq uint64
	rewriteCheckpoint(t, ck, bad, func(c *format.Checkpoint) {
		for i := len(c.Syscalls) - 20; i > 0 && seq == 0; i-- {
			if s := &c.Syscalls[i]; s.Nr == nr && c.Syscalls[i+1].Tid == s.Tid {
				s.Args[0] ^= 1
				seq = s.Seq
			}
		}
	})
	if seq == 0 {
		t.Fatalf("no call %d to change in %s", nr, ck)
	}
	return bad, seq
}

// Four threads of a test program take turns reading the clock between calls
// of their own (a read from a pipe, a sleep, a write to the next thread's
// pipe), their runs alternating in the log: the replay completes each
// thread's runs in the process while the others wait, and verifies. The
// turns make the log's shape the same on both backends and under any load;
// a run is six calls, of which at least the three time calls and the ones
// before them of the same thread can be completed in the process.
func TestCallsInProcessThreads(t *testing.T) {
	requireRoot(t)
	prog := cc(t, "testdata/clockthreads.c", t.TempDir())
	forBackends(t, func(t *testing.T, backend string) {
		target, out, done := startTarget(t, prog)
		waitReady(t, out)
		ck := attachAndCrash(t, target, done, 1200*time.Millisecond, "--backend", backend)
		res := replay(t, ck, "--time")
		if n := threadsVerified(t, res); n != 4 {
			t.Errorf("the replay ran %d threads, want 4", n)
		}
		m := inProcessRe.FindStringSubmatch(res)
		if m == nil {
			t.Fatalf("tpreplay --time did not report calls completed in the process:\n%s", res)
		}
		calls, _ := strconv.Atoi(m[1])
		if n, _ := strconv.Atoi(m[2]); n < calls/2 {
			t.Fatalf("%d of %d calls completed in the process, want at least half:\n%s", n, calls, res)
		}
	})
}
