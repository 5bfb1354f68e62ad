package e2e

import (
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// nodeLoop builds strings into an object's slots for ever, on a timer's
// event loop: V8's heap, which it marks MADV_DONTFORK, is written all the
// time.
const nodeLoop = `let a = {}; let i = 0; setInterval(() => {}, 5);
(function f() { for (let k = 0; k < 100000; k++) { a[i++ % 50000] = "x".repeat(i % 50) } setImmediate(f) })()`

// Debian's node, its V8 kept to the main thread (--single-threaded
// --v8-pool-size=0: V8's own threads meet through memory), attached and
// crashed from outside. A shadow made by fork has none of the heap, whose
// ranges node marks MADV_DONTFORK, and every original saved from it read
// as zeros: the trial replay crashed at the window's first instructions,
// loading an object's map, and kept every page. tprec now lets the shadow
// have them; the trial verifies, and so does tpreplay. The trial must
// verify from the window's start: the madvise calls tprec injects after
// each shadow's clone wrote its trampoline's data in the vDSO, that page
// counted as written, and its end digest differed from any replay's
// whenever the registers tprec injected with did (2 of 20 subtests cut
// the window to one interval; every trial from the dump's page copy did).
func TestNodeHeapDontFork(t *testing.T) {
	requireRoot(t)
	node := needTool(t, "node")
	forBackends(t, func(t *testing.T, backend string) {
		target, _, done := startTarget(t, node, "--single-threaded", "--v8-pool-size=0", "-e", nodeLoop)
		time.Sleep(500 * time.Millisecond)
		ck, log := crashWith(t, target, done, 1500*time.Millisecond, func(pid int) error { return unix.Tgkill(pid, pid, unix.SIGSEGV) }, "--backend", backend)
		if strings.Contains(log, "every present page") || !strings.Contains(log, "touched pages (") {
			keepFailed(t, ck)
			t.Fatalf("want a checkpoint minimized by a trial replay that verified:\n%s", log)
		}
		if strings.Contains(log, "the window now starts after") {
			t.Errorf("the trial replay from the window's start diverged:\n%s", log)
		}
		out := replay(t, ck)
		if !verifiedRe.MatchString(out) {
			t.Fatalf("the replay did not verify:\n%s", out)
		}
	})
}

// The same node launched by tprec: V8 marks its heap MADV_DONTFORK after
// the first shadow, while it starts. tprec looked for such ranges again only
// every eighth shadow once a look had found none, so the next shadows had
// none of the heap and a crash in node's first two seconds left a window
// whose every trial replay crashed in V8's code (CI saw it with an attach
// that came while node, slowed by the other tests, was still starting).
// The madvise in the log now makes the next shadow look.
func TestNodeHeapDontForkLaunched(t *testing.T) {
	requireRoot(t)
	node := needTool(t, "node")
	forBackends(t, func(t *testing.T, backend string) {
		dir := t.TempDir()
		rec := startTprec(t, "--backend", backend, "-o", dir, "--", node, "--single-threaded", "--v8-pool-size=0", "-e", nodeLoop)
		rec.waitRecording(t)
		time.Sleep(1500 * time.Millisecond)
		ck, log := crashRecorded(t, rec, node, dir)
		t.Logf("tprec:\n%s", log)
		wantMinimized(t, ck, log)
		out := replay(t, ck)
		if !verifiedRe.MatchString(out) {
			keepFailed(t, ck)
			t.Fatalf("the replay did not verify:\n%s", out)
		}
	})
}
