package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// A machine that other programs keep busy: tprec's ring buffer reader and
// its saving of originals run at SCHED_IDLE (recorder/yield.go, lowered),
// where every busy program comes first, and are raised when the process
// waits for them or they have waited too long. Recorded next to twice as
// many CPU hogs as CPUs, Debian's python3 reading files in a loop must lose
// no event, keep every interval replayable, and be held less than half a
// second for its checkpoint (a reader lowered again after each time the
// watchdog raised it fell behind until the process was held 916 ms: the
// build before the lowering, 8-40 ms), and its crash must verify.
func TestBusyMachine(t *testing.T) {
	requireRoot(t)
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Fatal("python3 is not installed (.ci/run installs it)")
	}
	startHogs(t, 2*runtime.NumCPU())
	heldRe := regexp.MustCompile(`the process was held ([0-9.]+)(ms|s|µs)\)`)
	forBackends(t, func(t *testing.T, backend string) {
		dir := t.TempDir()
		script := filepath.Join(dir, "loop.py")
		if err := os.WriteFile(script, []byte(pythonLoop), 0o644); err != nil {
			t.Fatal(err)
		}
		target, _, done := startTarget(t, py, script, dir)
		ck, log := crashWith(t, target, done, 2*time.Second, func(pid int) error { return syscall.Kill(pid, syscall.SIGSEGV) }, "--backend", backend)
		var v struct {
			Lost uint64 `json:"lost_events"`
		}
		inspectJSON(t, ck, &v)
		if v.Lost != 0 {
			t.Errorf("%d events lost", v.Lost)
		}
		allReplayable(t, ck)
		m := heldRe.FindStringSubmatch(log)
		if m == nil {
			t.Fatalf("no hold time in tprec's log:\n%s", log)
		}
		held, _ := time.ParseDuration(m[1] + m[2])
		if held > 500*time.Millisecond {
			t.Errorf("the process was held %v for its checkpoint", held)
		}
		t.Logf("held %v; tprec:\n%s", held, log)
		replay(t, ck)
	})
}
