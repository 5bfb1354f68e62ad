package e2e

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// pythonIdleThenCrash sleeps, then reads a file in a loop for a while, then
// dereferences NULL.
const pythonIdleThenCrash = `
import ctypes, time
time.sleep(3.5)
t0 = time.time()
while time.time() - t0 < 0.6:
    with open("/proc/self/stat") as f:
        f.read()
ctypes.string_at(0)
`

// A target that does nothing (no call, no fault, no CPU time) costs no
// boundary: the interval it sleeps in goes on until it does something, and
// that long interval replays and verifies like any other. Recorded from
// inside python3's sleep, the first interval spans the rest of the sleep
// instead of being cut every 250 ms.
func TestQuietTargetSkipsBoundaries(t *testing.T) {
	requireRoot(t)
	script := pythonScript(t, "idle.py", pythonIdleThenCrash)
	forBackends(t, func(t *testing.T, backend string) {
		launched := time.Now()
		target, _, done := startTarget(t, "/usr/bin/python3", "-S", script)
		time.Sleep(300 * time.Millisecond)
		dir := t.TempDir()
		rec := startTprec(t, "--pid", fmt.Sprint(target.Process.Pid), "--output", dir, "--keep", "100", "--backend", backend)
		rec.waitRecording(t)
		attached := time.Now()
		select {
		case err := <-done:
			ws, ok := target.ProcessState.Sys().(syscall.WaitStatus)
			if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGSEGV {
				t.Fatalf("target did not die of SIGSEGV: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("target did not crash; tprec:\n%s", rec.quit())
		}
		ck := oneCheckpoint(t, rec, dir, 60*time.Second)
		ivs := intervalsIn(t, ck)
		if len(ivs) < 2 {
			t.Fatalf("want the sleep's interval and the busy ones, got %d intervals\n%s", len(ivs), rec.stderr)
		}
		// The sleep went on for what was left of its 3.5 s when tprec
		// began (tprec takes a second or so to start on a loaded machine):
		// the first interval spans that, where every tick would cut it
		// after 250 ms.
		left := launched.Add(3500 * time.Millisecond).Sub(ivs[0].Start)
		if left < time.Second {
			t.Fatalf("tprec began recording %v before the sleep's end: too late to tell", left)
		}
		slept := ivs[1].Start.Sub(ivs[0].Start)
		if slept < left-400*time.Millisecond {
			t.Errorf("the first interval lasted %v of the %v the sleep had left: the boundaries during the sleep were not skipped\n%s", slept, left, rec.stderr)
		}
		if ivs[0].Start.Sub(attached) > 100*time.Millisecond {
			t.Errorf("the first interval starts %v after recording began", ivs[0].Start.Sub(attached))
		}
		t.Logf("%d intervals, the first %v long", len(ivs), slept)
		replay(t, ck)
	})
}

// An idle nginx worker (Debian's) waits in epoll_wait, which a boundary's
// interrupt makes return EINTR: the worker handles it and waits again. The
// recorder lets that echo of its own boundary settle, so the idle worker
// costs no boundary every 250 ms; requests then start intervals again, and
// the crash after them replays.
func TestIdleNginxSkipsBoundaries(t *testing.T) {
	requireRoot(t)
	forBackends(t, func(t *testing.T, backend string) {
		worker, base := startNginx(t)
		dir := t.TempDir()
		rec := startTprec(t, "--pid", strconv.Itoa(worker), "--output", dir, "--keep", "100", "--backend", backend)
		rec.waitRecording(t)
		time.Sleep(2 * time.Second)
		for i := 0; i < 20; i++ {
			if r, err := http.Get(base + "/"); err == nil {
				io.Copy(io.Discard, r.Body)
				r.Body.Close()
			}
		}
		time.Sleep(300 * time.Millisecond)
		ck := crashNginxWorker(t, worker, rec, dir)
		// 2.3 s of recording: ten intervals if every tick made a boundary.
		ivs := intervalsIn(t, ck)
		if len(ivs) > 5 {
			t.Errorf("%d intervals for 2 s of an idle worker and a few requests: boundaries were not skipped\n%s", len(ivs), rec.stderr)
		}
		t.Logf("%d intervals", len(ivs))
		if strings.Contains(rec.stderr.String(), "trial replay failed") {
			t.Errorf("the trial replay failed:\n%s", rec.stderr)
		}
		replay(t, ck)
	})
}
