package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// newCgroup makes a cgroup with controller (cgroup v1's
// /sys/fs/cgroup/CONTROLLER, else a cgroup v2 hierarchy that offers it) and
// returns its directory and whether it is v2; the cleanup moves what is
// left in it back to the parent and removes it.
func newCgroup(t *testing.T, controller string) (string, bool) {
	t.Helper()
	var parent string
	v2 := false
	if fi, err := os.Stat("/sys/fs/cgroup/" + controller + "/cgroup.procs"); err == nil && !fi.IsDir() {
		parent = "/sys/fs/cgroup/" + controller
	} else {
		for _, root := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
			b, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
			if err == nil && strings.Contains(" "+strings.TrimSpace(string(b))+" ", " "+controller+" ") {
				os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("+"+controller), 0)
				parent, v2 = root, true
				break
			}
		}
	}
	if parent == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no cgroup hierarchy with the %s controller: CI machines have one", controller)
		}
		t.Skipf("no cgroup hierarchy with the %s controller", controller)
	}
	dir := filepath.Join(parent, fmt.Sprintf("tprec-e2e-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil {
			for _, pid := range strings.Fields(string(b)) {
				os.WriteFile(filepath.Join(parent, "cgroup.procs"), []byte(pid), 0)
			}
		}
		os.Remove(dir)
	})
	return dir, v2
}

// countingInCgroup starts Debian's python3 on a script that counts in the
// file named by its argument, inside a new cgroup of controller, and
// returns the cgroup's directory, whether it is cgroup v2, the target, its
// done channel and what the file says.
func countingInCgroup(t *testing.T, controller, script string) (string, bool, *exec.Cmd, chan error, func() int) {
	t.Helper()
	cg, v2 := newCgroup(t, controller)
	counter := filepath.Join(t.TempDir(), "count")
	target, _, done := startTarget(t, "/usr/bin/python3", "-S", pythonScript(t, "count.py", script), counter)
	cgroupWrite(t, cg, "cgroup.procs", strconv.Itoa(target.Process.Pid))
	return cg, v2, target, done, func() int { return readCount(counter) }
}

// readCount is the number a counting program last wrote into file.
func readCount(file string) int {
	b, _ := os.ReadFile(file)
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

func cgroupWrite(t *testing.T, dir, file, value string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0); err != nil {
		t.Fatalf("write %s into %s: %v", value, file, err)
	}
}

// counterLoop counts in a file as it goes (read, add one, write back) and
// sleeps a little between counts.
const counterLoop = `import os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
os.pwrite(fd, b"0", 0)
d = {}
while True:
    n = int(os.pread(fd, 32, 0)) + 1
    os.pwrite(fd, str(n).encode(), 0)
    d[n % 4096] = str(n) * 8
    time.sleep(0.002)
`

// A process whose pids cgroup is at its limit (a container full of
// workers): the kernel refuses the clone that makes each interval's
// shadow. tprec used to fail at its first boundary and, the target already
// stopped for it, wait for a stop that never came: tprec hung and the
// server stayed stopped until tprec was killed. Now recording goes on
// without shadows (those intervals cannot start a replay), the target runs
// on, a requested dump is still written, the shadow comes back when the
// limit allows it, and a crash with the limit reached again is dumped from
// the held process itself and verifies.
func TestShadowCloneRefused(t *testing.T) {
	requireRoot(t)
	forBackends(t, func(t *testing.T, backend string) {
		cg, _, target, done, count := countingInCgroup(t, "pids", counterLoop)
		pid := target.Process.Pid
		cgroupWrite(t, cg, "pids.max", "1")
		// progress requires the target to count on, not stopped by tprec.
		progress := func(what string) {
			t.Helper()
			before := count()
			time.Sleep(300 * time.Millisecond)
			if after := count(); after <= before {
				t.Fatalf("%s: the target stopped counting (%d, then %d); its threads:\n%s", what, before, after, threadStates(pid))
			}
		}
		dir := t.TempDir()
		rec := startTprec(t, "--pid", strconv.Itoa(pid), "--backend", backend, "-o", dir, "--status", "500ms")
		rec.waitRecording(t)
		waitLog := func(what string) {
			t.Helper()
			deadline := time.Now().Add(10 * time.Second)
			for !strings.Contains(rec.stderr.String(), what) {
				if time.Now().After(deadline) {
					t.Fatalf("tprec did not say %q; stderr:\n%s", what, rec.quit())
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		waitLog("refused the clone")
		progress("shadow refused")
		waitLog("no shadow for the last")

		// A requested dump with no shadow anywhere: written from the held
		// target, every page (nothing can start a replay), and the
		// target goes on.
		if out, code := runTool(t, "tprec", "dump", "--pid", strconv.Itoa(pid)); code != 0 {
			t.Fatalf("tprec dump: exit %d\n%s", code, out)
		}
		waitLog("wrote ")
		progress("after a dump without a dump shadow")
		requested := checkpoints(t, dir)
		if len(requested) != 1 {
			t.Fatalf("want the requested checkpoint, got %v\n%s", requested, rec.stderr)
		}
		insp, code := runTool(t, "tpinspect", requested[0])
		if code != 0 || !strings.Contains(insp, "no shadow") {
			t.Fatalf("tpinspect should give the intervals' reason (no shadow): exit %d\n%s", code, insp)
		}
		os.Remove(requested[0])

		// The limit raised: shadows again, and a history to replay.
		cgroupWrite(t, cg, "pids.max", "64")
		waitLog("its shadow was made again")
		time.Sleep(2500 * time.Millisecond)

		// The limit reached again just before a crash: the dump shadow
		// is refused, and the file is made from the held target.
		// The target's own task only: its shadows leave the cgroup.
		cgroupWrite(t, cg, "pids.max", "1")
		if err := unix.Tgkill(pid, pid, unix.SIGSEGV); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			ws, ok := err.(interface{ Sys() any })
			if !ok || !ws.Sys().(syscall.WaitStatus).Signaled() || ws.Sys().(syscall.WaitStatus).Signal() != syscall.SIGSEGV {
				t.Fatalf("target did not die of SIGSEGV: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("target did not die; its threads:\n%s\ntprec stderr (with its goroutines):\n%s", threadStates(pid), rec.quit())
		}
		if err := rec.wait(t, 60*time.Second); err != nil {
			t.Fatalf("tprec: %v\n%s", err, rec.stderr)
		}
		log := rec.stderr.String()
		t.Logf("tprec:\n%s", log)
		if !strings.Contains(log, "received SIGSEGV") || !strings.Contains(log[strings.Index(log, "received SIGSEGV"):], "no dump shadow") {
			t.Fatalf("want the crash dumped without a dump shadow:\n%s", log)
		}
		cks := checkpoints(t, dir)
		if len(cks) != 1 {
			t.Fatalf("want one checkpoint of the crash, got %v", cks)
		}
		if crash := log[strings.Index(log, "received SIGSEGV"):]; strings.Contains(crash, "every present page") || !strings.Contains(crash, "touched pages (") {
			keepFailed(t, cks[0])
			t.Fatalf("the crash's trial replay failed:\n%s", log)
		}
		replay(t, cks[0])
	})
}

// bigRewrite keeps 200 MB in a bytearray and writes a byte of each of its
// pages every 50 ms, counting its rounds in a file.
const bigRewrite = `import os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
buf = bytearray(200 << 20)
n = 0
while True:
    n += 1
    for off in range(0, len(buf), 4096):
        buf[off] = n & 0xff
    os.pwrite(fd, str(n).encode(), 0)
    time.sleep(0.05)
`

// A process in a memory cgroup with room for itself but not for a second
// copy of what it rewrites (a container at its limit): each shadow keeps
// the originals of the pages the target writes, charged to the same
// cgroup, and the OOM killer had the target and its shadow to choose from.
// tprec now gives every shadow the highest OOM score: the killer takes the
// shadow, the target counts on, and tprec says the interval lost its
// originals. A CI run then had the target killed right after its shadow:
// the shadow's memory was still charged while tprec read it, so a shadow
// whose cgroup is short of room is now read and collected before the
// target resumes.
func TestShadowTakesTheOOMKill(t *testing.T) {
	requireRoot(t)
	forBackends(t, func(t *testing.T, backend string) {
		pid, done, count := inMemoryLimit(t, bigRewrite, 300<<20)
		deadline := time.Now().Add(20 * time.Second)
		for count() < 3 {
			if time.Now().After(deadline) {
				t.Fatal("the target did not start rewriting its memory")
			}
			time.Sleep(50 * time.Millisecond)
		}
		rec := startTprec(t, "--pid", strconv.Itoa(pid), "--backend", backend, "-o", t.TempDir())
		rec.waitRecording(t)
		before := count()
		start := time.Now()
		// Where fresh pages are dear, boundaries of this target take
		// 0.3-0.7 s and tprec makes intervals four times as long (a CI
		// run on a PVM host had one boundary in 3 s, and no second shadow
		// to refuse): the recording lasts until tprec refuses one, up to
		// 30 s, and at least 3 s.
		rec.saidWithin("no shadow: its memory cgroup has", 30*time.Second)
		time.Sleep(3*time.Second - time.Since(start))
		// It rewrote 22-35 times in those 3 s here; a CI run saw 2, on
		// a machine other tests kept busy while the cgroup reclaimed.
		// What matters is that it goes on: 5 rounds within 20 s more.
		for wait := time.Now().Add(20 * time.Second); count() < before+5 && time.Now().Before(wait); {
			time.Sleep(100 * time.Millisecond)
		}
		select {
		case err := <-done:
			t.Fatalf("the target died while recorded: %v; tprec:\n%s", err, rec.quit())
		default:
		}
		after := count()
		t.Logf("the target rewrote its memory %d times in %v recorded", after-before, time.Since(start).Round(time.Millisecond))
		if after < before+5 {
			t.Fatalf("the target stopped rewriting (%d rounds, then %d); tprec:\n%s", before, after, rec.quit())
		}
		log := interruptRecording(t, rec)
		// The first shadow is made before tprec knows what the target
		// writes: the OOM killer usually takes it within its interval.
		// When the boundary comes first, tprec reads its copies and
		// collects it while the target is stopped (boundary.go). Either
		// way no shadow is made after it while the room stays what it
		// was (memroom.go): the OOM killer is not called again.
		if !strings.Contains(log, "no shadow: its memory cgroup has") {
			t.Errorf("want tprec to stop making shadows for want of room (else the test proves nothing):\n%s", log)
		}
		if strings.Contains(log, "its shadow was killed during the interval (SIGKILL") {
			t.Log("the OOM killer took the first shadow")
		}
		select {
		case err := <-done:
			t.Fatalf("the target died: %v", err)
		default:
		}
	})
}

// inMemoryLimit starts the counting python3 script in a memory cgroup
// limited to limit bytes, and returns its pid, its end and its count.
func inMemoryLimit(t *testing.T, script string, limit int) (int, chan error, func() int) {
	t.Helper()
	cg, v2, target, done, count := countingInCgroup(t, "memory", script)
	file := "memory.limit_in_bytes"
	if v2 {
		file = "memory.max"
	}
	cgroupWrite(t, cg, file, strconv.Itoa(limit))
	return target.Process.Pid, done, count
}

// interruptRecording stops a tprec recording with SIGINT and returns its
// log.
func interruptRecording(t *testing.T, rec *recording) string {
	t.Helper()
	rec.cmd.Process.Signal(os.Interrupt)
	if err := rec.wait(t, 30*time.Second); err != nil {
		t.Fatalf("tprec: %v\n%s", err, rec.stderr)
	}
	log := rec.stderr.String()
	t.Logf("tprec:\n%s", log)
	return log
}

// growThenRewrite rewrites 80 MB every 50 ms, counting its rounds in a
// file; from its 10th round on it also grows by 4 MB a round, up to 130 MB
// more, which it leaves alone.
const growThenRewrite = `import os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
buf = bytearray(80 << 20)
more = []
n = 0
while True:
    n += 1
    if n >= 10 and len(more) < 32:
        b = bytearray(4 << 20)
        for off in range(0, len(b), 4096):
            b[off] = 1
        more.append(b)
    for off in range(0, len(buf), 4096):
        buf[off] = n & 0xff
    os.pwrite(fd, str(n).encode(), 0)
    time.sleep(0.05)
`

// A process that grows toward its memory cgroup's limit (the leak an
// on-call engineer records until it crashes): its shadows fit at first,
// then the room left is smaller than the copies a shadow keeps. tprec
// stops making shadows before the OOM killer has to take one: none is
// killed, the target counts on, and tprec says why its intervals cannot
// start a replay.
func TestShadowWaitsForMemoryRoom(t *testing.T) {
	requireRoot(t)
	forBackends(t, func(t *testing.T, backend string) {
		// Before the growth: 80 MB, 160 MB of copies (one shadow's, and
		// the next one's while the first is read) and python3's own
		// 10-15 MB fit. tprec wants 196 MB of room for a shadow, so it
		// stops making them after 30-40 MB of growth, and the 20 MB an
		// interval adds keep the last one's copies in. At the end the
		// room is about 100 MB.
		pid, done, count := inMemoryLimit(t, growThenRewrite, 320<<20)
		rec := startTprec(t, "--pid", strconv.Itoa(pid), "--backend", backend, "-o", t.TempDir())
		rec.waitRecording(t)
		deadline := time.Now().Add(30 * time.Second)
		for count() < 50 {
			if time.Now().After(deadline) {
				t.Fatalf("the target did not get to its 50th round; tprec:\n%s", rec.quit())
			}
			select {
			case err := <-done:
				t.Fatalf("the target died while recorded: %v; tprec:\n%s", err, rec.quit())
			case <-time.After(50 * time.Millisecond):
			}
		}
		// Boundaries that take long (fresh pages at 12 us on a PVM
		// host: intervals of 1-3 s) may not have come to the growth yet.
		rec.saidWithin("no shadow: its memory cgroup has", 20*time.Second)
		log := interruptRecording(t, rec)
		if !strings.Contains(log, "no shadow: its memory cgroup has") {
			t.Errorf("want tprec to stop making shadows once they would not fit:\n%s", log)
		}
		if strings.Contains(log, "its shadow was killed") {
			t.Errorf("the OOM killer took a shadow: tprec should have made none:\n%s", log)
		}
		select {
		case err := <-done:
			t.Fatalf("the target died: %v", err)
		default:
		}
	})
}

// threadEach starts and joins a thread per round, counting rounds in a
// file, a round every 200 ms: often enough that a shadow holding a slot
// of its pids cgroup meets the next thread within a second, and seldom
// enough that the thread of a round, or its zombie until the tracer
// collects its exit, seldom holds the slot when a boundary makes a shadow
// (a CI run with the unit tests alongside found it held at all 12 of 12
// boundaries with a round every 50 ms).
const threadEach = `import os, sys, threading, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
n = 0
while True:
    t = threading.Thread(target=time.sleep, args=(0.002,))
    t.start()
    t.join()
    n += 1
    os.pwrite(fd, str(n).encode(), 0)
    time.sleep(0.2)
`

// A process whose pids cgroup leaves little room beyond the threads it runs
// (a container's pids.max): a shadow made in that cgroup took the slot of
// the program's next thread, and python3 died of "can't start new thread".
// Shadows now leave the target's pids cgroup as soon as they are made.
func TestShadowTakesNoTaskSlot(t *testing.T) {
	requireRoot(t)
	forBackends(t, func(t *testing.T, backend string) {
		cg, _, target, done, _ := countingInCgroup(t, "pids", threadEach)
		pid := target.Process.Pid
		// The main thread and one more (a traced thread that ended waits
		// for its tracer to collect its exit: the 200 ms between threads
		// leave tprec the time to).
		cgroupWrite(t, cg, "pids.max", "2")
		rec := startTprec(t, "--pid", strconv.Itoa(pid), "--backend", backend, "-o", t.TempDir())
		rec.waitRecording(t)
		time.Sleep(3 * time.Second)
		select {
		case err := <-done:
			t.Fatalf("the target died while recorded: %v; tprec:\n%s", err, rec.quit())
		default:
		}
		if err := unix.Tgkill(pid, pid, unix.SIGSEGV); err != nil {
			t.Fatal(err)
		}
		<-done
		if err := rec.wait(t, 60*time.Second); err != nil {
			t.Fatalf("tprec: %v\n%s", err, rec.stderr)
		}
		log := rec.stderr.String()
		t.Logf("tprec:\n%s", log)
		// An interval's shadow refused and never made again; a dump
		// shadow refused (the crash met a thread of a round, or its
		// zombie) proves no less.
		if strings.Contains(log, "trying again at each boundary") && !strings.Contains(log, "made again") {
			t.Fatalf("no shadow was ever made (the test proves nothing):\n%s", log)
		}
	})
}
