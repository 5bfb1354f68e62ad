package e2e

import (
	"strings"
	"testing"
	"time"
)

// pythonForks forks a child that exits at once, and waits for it, every few
// milliseconds between file reads (a server's background save, a shell-out),
// each fork ending with a SIGCHLD the program leaves at its default.
const pythonForks = pythonWork + `
import os
def fork(n):
    if n % 200 == 0:
        pid = os.fork()
        if pid == 0:
            os._exit(7)
        _, st = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(st) == 7
work(fork)
`

// A fork is replayed as its result: the child is another process, and the
// parent learns of it only through its own logged calls. The window runs
// through the forks and their SIGCHLDs.
func TestForksInWindow(t *testing.T) {
	requireRoot(t)
	py := "/usr/bin/python3"
	script := pythonScript(t, "forks.py", pythonForks)
	forBackends(t, func(t *testing.T, backend string) {
		target, _, done := startTarget(t, py, "-S", script)
		time.Sleep(300 * time.Millisecond)
		ck := crashThread(t, target, done, target.Process.Pid, 1500*time.Millisecond, "--backend", backend)
		ivs := intervalsIn(t, ck)
		for _, iv := range ivs {
			if !iv.Replayable {
				t.Errorf("interval %d: %s", iv.Index, iv.Reason)
			}
		}
		if len(ivs) < 5 {
			t.Errorf("%d intervals in the checkpoint, want most of the 8 kept: %+v", len(ivs), ivs)
		}
		out, code := runTool(t, "tpinspect", "--syscalls", ck)
		if code != 0 || !strings.Contains(out, "clone(") {
			t.Fatalf("no fork in the checkpoint's log (exit %d)", code)
		}
		replay(t, ck)
	})
}
