package e2e

import (
	"regexp"
	"testing"
	"time"
)

const pythonSelect = `
import select
while True:
    select.select([], [], [], 0.2)
`

// A process crashed while it waits in select: the kernel wrote the time
// left of the timeout into the program's struct timeval when the signal
// interrupted the call, a write no record holds. The replay verifies the
// end all the same, leaving out only that page, and says so. python3's
// select.select sleeps in select(2) nearly all the time here.
func TestEndInsideSelect(t *testing.T) {
	requireRoot(t)
	script := pythonScript(t, "select.py", pythonSelect)
	noted := regexp.MustCompile(`page 0x[0-9a-f]+ not compared: the interrupted (select|pselect6) wrote the time left of its timeout`)
	forBackends(t, func(t *testing.T, backend string) {
		target, _, done := startTarget(t, "/usr/bin/python3", "-S", script)
		time.Sleep(300 * time.Millisecond)
		ck := crashThread(t, target, done, target.Process.Pid, 1500*time.Millisecond, "--backend", backend)
		out := replay(t, ck, "-v")
		if !noted.MatchString(out) {
			t.Errorf("the replay does not say which page it left out:\n%s", out[max(0, len(out)-2000):])
		}
	})
}

// coreutils' sleep crashed while it sleeps: the kernel resumes an
// interrupted relative clock_nanosleep through restart_syscall, so the
// recorded end is "about to call restart_syscall", with the remainder
// written into the program's struct timespec. The replay reaches the end
// at the clock_nanosleep entry and verifies it.
func TestEndInsideSleep(t *testing.T) {
	requireRoot(t)
	forBackends(t, func(t *testing.T, backend string) {
		target, _, done := startTarget(t, "/bin/sleep", "100")
		time.Sleep(200 * time.Millisecond)
		ck := crashThread(t, target, done, target.Process.Pid, 1200*time.Millisecond, "--backend", backend)
		replay(t, ck)
	})
}
