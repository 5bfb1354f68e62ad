package e2e

import (
	"strings"
	"testing"
	"time"
)

const pythonSubprocess = `
import subprocess, time
while True:
    subprocess.run(["/bin/true"], capture_output=True)
    time.sleep(0.01)
`

// Programs that start other programs through a vfork child are recorded
// and replayed: python3's subprocess (vfork) and glibc's system()
// (posix_spawn: clone3 with CLONE_VM|CLONE_VFORK). The child runs in its
// parent's memory until it calls exec, and what it wrote there (errno in the
// shared thread-local storage, frames on the parent's stack) is the call's
// output in the log. Without it python3's replay diverges at the end; before
// vfork children were followed, every interval with one was not replayable.
func TestVforkChildren(t *testing.T) {
	requireRoot(t)
	script := pythonScript(t, "spawner.py", pythonSubprocess)
	spawn := cc(t, "testdata/spawnloop.c", t.TempDir())
	for _, tc := range []struct {
		name, call string
		argv       []string
	}{
		{"python3-subprocess", "vfork() = ", []string{"/usr/bin/python3", "-S", script}},
		{"system", "clone3(", []string{spawn}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forBackends(t, func(t *testing.T, backend string) {
				target, _, done := startTarget(t, tc.argv[0], tc.argv[1:]...)
				time.Sleep(300 * time.Millisecond)
				ck := crashThread(t, target, done, target.Process.Pid, 1500*time.Millisecond, "--backend", backend)
				allReplayable(t, ck)
				if ivs := intervalsIn(t, ck); len(ivs) < 3 {
					t.Errorf("%d intervals in the checkpoint, want the whole window", len(ivs))
				}
				out := replay(t, ck, "-v")
				if n := strings.Count(out, tc.call); n < 10 {
					t.Errorf("the replay made %d calls %q, want one every 10 ms or so", n, tc.call)
				}
			})
		})
	}
}
