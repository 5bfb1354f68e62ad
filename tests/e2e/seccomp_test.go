package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// sandboxed counts in a file, as counterLoop, under a seccomp filter that
// libseccomp's python3 bindings (Debian's python3-seccomp) install: at
// start, or after a second of counting when the mode starts with "later-".
// kill-clone kills the process on clone, kill-clock on the clock_gettime
// syscall (which the vDSO spares a program without tprec), kill-prctl on
// prctl (which names tprec's shadows), deny-socket fails socket() with
// EPERM.
const sandboxed = `import os, sys, time, seccomp
mode, counter = sys.argv[1], sys.argv[2]
def install():
    f = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    if mode.endswith("kill-clone"):
        f.add_rule(seccomp.KILL_PROCESS, "clone")
    elif mode.endswith("kill-clock"):
        f.add_rule(seccomp.KILL_PROCESS, "clock_gettime")
    elif mode.endswith("kill-prctl"):
        f.add_rule(seccomp.KILL_PROCESS, "prctl")
    else:
        f.add_rule(seccomp.ERRNO(1), "socket")
    f.load()
if not mode.startswith("later-"):
    install()
fd = os.open(counter, os.O_RDWR | os.O_CREAT, 0o644)
os.pwrite(fd, b"0", 0)
d = {}
t0 = time.time()
while True:
    n = int(os.pread(fd, 32, 0)) + 1
    os.pwrite(fd, str(n).encode(), 0)
    d[n % 4096] = str(n) * 8
    if mode.startswith("later-") and time.time() - t0 > 1.0:
        install()
        mode = "done"
    time.sleep(0.002)
`

// pythonWithSeccomp returns Debian's python3 once it has libseccomp's
// bindings (python3-seccomp).
func pythonWithSeccomp(t *testing.T) string {
	t.Helper()
	py := "/usr/bin/python3"
	if out, err := exec.Command(py, "-c", "import seccomp").CombinedOutput(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("python3-seccomp is not installed (.ci/run installs it): %v\n%s", err, out)
		}
		t.Skipf("python3-seccomp is not installed: %s", out)
	}
	return py
}

// counting requires the program counting in file counter to go on, and
// not traced any more.
func counting(t *testing.T, pid int, counter string) {
	t.Helper()
	before := readCount(counter)
	time.Sleep(500 * time.Millisecond)
	if after := readCount(counter); after <= before {
		t.Fatalf("the target stopped counting (%d, then %d); its threads:\n%s", before, after, threadStates(pid))
	}
	if st := status(pid); !strings.Contains(st, "TracerPid:\t0") {
		t.Fatalf("the target is still traced:\n%s", st)
	}
}

func status(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	return string(b)
}

// A process under a seccomp filter (a daemon that sandboxes itself, a
// systemd unit's SystemCallFilter=) meets tprec's injected calls and the
// time calls its vDSO patch makes syscalls, as its own: a python3 whose
// filter kills it on clone died of SIGSYS at tprec's first boundary. tprec
// now reads the filters and evaluates them on each such call: a process it
// cannot record without being killed is left alone, with the reason; one
// whose filter allows what tprec needs is recorded and its crash replays;
// and a filter installed during the recording ends it before the thread
// that installed it runs on.
func TestSeccompSandboxedTarget(t *testing.T) {
	requireRoot(t)
	py := pythonWithSeccomp(t)
	script := pythonScript(t, "sandboxed.py", sandboxed)
	forBackends(t, func(t *testing.T, backend string) {
		for _, mode := range []string{"kill-clone", "kill-clock"} {
			t.Run("refused "+mode, func(t *testing.T) {
				counter := filepath.Join(t.TempDir(), "count")
				target, _, _ := startTarget(t, py, script, mode, counter)
				pid := target.Process.Pid
				time.Sleep(700 * time.Millisecond)
				rec := startTprec(t, "--pid", strconv.Itoa(pid), "--backend", backend, "-o", t.TempDir())
				err := rec.wait(t, 30*time.Second)
				log := rec.stderr.String()
				if err == nil || !strings.Contains(log, "cannot be recorded: its seccomp filter would kill the process") {
					t.Fatalf("want tprec to refuse with the filter's reason (exit %v):\n%s", err, log)
				}
				t.Logf("tprec:\n%s", log)
				counting(t, pid, counter)
			})
		}
		t.Run("allowed", func(t *testing.T) {
			counter := filepath.Join(t.TempDir(), "count")
			target, _, done := startTarget(t, py, script, "deny-socket", counter)
			time.Sleep(700 * time.Millisecond)
			ck, log := crashWith(t, target, done, 1500*time.Millisecond, func(pid int) error { return unix.Tgkill(pid, pid, unix.SIGSEGV) }, "--backend", backend)
			if strings.Contains(log, "every present page") || !strings.Contains(log, "touched pages (") {
				keepFailed(t, ck)
				t.Fatalf("want a checkpoint minimized by a trial replay that verified:\n%s", log)
			}
			replay(t, ck)
		})
		// The call that names a shadow (prctl) is one the shadow makes:
		// a filter that kills on it leaves the shadows their name, says
		// so once, and kills none of them.
		t.Run("prctl refused", func(t *testing.T) {
			counter := filepath.Join(t.TempDir(), "count")
			target, _, done := startTarget(t, py, script, "kill-prctl", counter)
			time.Sleep(700 * time.Millisecond)
			ck, log := crashWith(t, target, done, 1500*time.Millisecond, func(pid int) error { return unix.Tgkill(pid, pid, unix.SIGSEGV) }, "--backend", backend)
			if strings.Count(log, "the shadows keep the process's name") != 1 || strings.Contains(log, "its shadow was killed") || strings.Contains(log, "its shadow died") {
				t.Fatalf("want one line saying the shadows keep their name, and no shadow killed:\n%s", log)
			}
			if strings.Contains(log, "every present page") || !strings.Contains(log, "touched pages (") {
				keepFailed(t, ck)
				t.Fatalf("want a checkpoint minimized by a trial replay that verified:\n%s", log)
			}
			allReplayable(t, ck)
			replay(t, ck)
		})
		t.Run("installed while recorded", func(t *testing.T) {
			dir := t.TempDir()
			counter := filepath.Join(dir, "count")
			rec := startTprec(t, "--backend", backend, "-o", dir, "--", py, script, "later-kill-clock", counter)
			rec.waitRecording(t)
			var pid int
			deadline := time.Now().Add(10 * time.Second)
			for !strings.Contains(rec.stderr.String(), "detached") {
				if time.Now().After(deadline) {
					t.Fatalf("tprec did not stop recording at the filter; stderr:\n%s", rec.quit())
				}
				time.Sleep(20 * time.Millisecond)
			}
			if m := regexp.MustCompile(`recording process (\d+)`).FindStringSubmatch(rec.stderr.String()); m != nil {
				pid, _ = strconv.Atoi(m[1])
			}
			if pid == 0 {
				t.Fatalf("no pid in tprec's log:\n%s", rec.stderr)
			}
			counting(t, pid, counter)
			syscall.Kill(pid, syscall.SIGTERM)
			err := rec.wait(t, 30*time.Second)
			log := rec.stderr.String()
			t.Logf("tprec:\n%s", log)
			if err == nil || !strings.Contains(log, "installed a seccomp filter: its seccomp filter would kill the process on the time call") {
				t.Fatalf("want tprec to end with the filter's reason (exit %v):\n%s", err, log)
			}
		})
	})
}

// asService runs a program under the seccomp filter of a systemd unit:
// default action kill, the syscalls listed in the file argv[1] allowed,
// clone only without namespace flags and clone3 refused with ENOSYS
// (RestrictNamespaces=true), native architecture only; then execs argv[2:].
const asService = `import errno, os, sys, seccomp
f = seccomp.SyscallFilter(defaction=seccomp.KILL_PROCESS)
for name in open(sys.argv[1]).read().split():
    if name.startswith("#") or name in ("clone", "clone3"):
        continue
    try:
        f.add_rule(seccomp.ALLOW, name)
    except Exception:
        pass  # not a syscall of this architecture
namespaces = 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000 | 0x00020000 | 0x00000080
f.add_rule(seccomp.ALLOW, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, namespaces, 0))
f.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
f.load()
os.execv(sys.argv[2], sys.argv[2:])
`

// Debian's redis-server under the filter its own systemd unit sets
// (SystemCallFilter=@system-service ~@privileged @resources,
// RestrictNamespaces=true: 345 syscalls allowed, clone checked on its
// flags, the rest killing the process): tprec's evaluation of the filter
// lets everything it needs through, so the server is recorded under load,
// crashed, and its replay verifies.
func TestRedisUnderItsServiceFilter(t *testing.T) {
	requireRoot(t)
	py := pythonWithSeccomp(t)
	list, err := filepath.Abs("testdata/redis-service-syscalls.txt")
	if err != nil {
		t.Fatal(err)
	}
	via := []string{py, pythonScript(t, "service.py", asService), list}
	forBackends(t, func(t *testing.T, backend string) {
		target, done := redisUnderLoadVia(t, via, map[string]string{"ebpf": "6441", "ptrace": "6442"}[backend])
		pid := target.Process.Pid
		if st := status(pid); !strings.Contains(st, "Seccomp:\t2") {
			t.Fatalf("redis-server runs under no seccomp filter (the test would prove nothing):\n%s", st)
		}
		ck := crashThread(t, target, done, pid, 2*time.Second, "--backend", backend)
		replay(t, ck)
	})
}
