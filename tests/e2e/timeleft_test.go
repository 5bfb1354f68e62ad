package e2e

import (
	"fmt"
	"os/exec"
	"regexp"
	"strings"
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
// select.select sleeps in select(2) nearly all the time here; a crash that
// came between two selects (the replay then says of no call that the end
// was inside it) is tried again.
func TestEndInsideSelect(t *testing.T) {
	requireRoot(t)
	script := pythonScript(t, "select.py", pythonSelect)
	noted := regexp.MustCompile(`page 0x[0-9a-f]+ not compared: the interrupted (select|pselect6) wrote the time left of its timeout`)
	inside := regexp.MustCompile(`(?m)^verified: .*, inside (select|pselect6), `)
	forBackends(t, func(t *testing.T, backend string) {
		for attempt := 1; ; attempt++ {
			target, _, done := startTarget(t, "/usr/bin/python3", "-S", script)
			time.Sleep(300 * time.Millisecond)
			ck := crashThread(t, target, done, target.Process.Pid, 1500*time.Millisecond, "--backend", backend)
			out := replay(t, ck, "-v")
			if !inside.MatchString(out) {
				if attempt < 3 {
					t.Logf("attempt %d: the crash came between two selects; again", attempt)
					continue
				}
				t.Fatalf("in 3 attempts the end never fell inside select:\n%s", out[max(0, len(out)-2000):])
			}
			if !noted.MatchString(out) {
				t.Fatalf("the replay does not say which page it left out:\n%s", out[max(0, len(out)-2000):])
			}
			return
		}
	})
}

// coreutils' sleep crashed while it sleeps: the kernel resumes an
// interrupted relative clock_nanosleep through restart_syscall, so the
// recorded end is "about to call restart_syscall", with the remainder
// written into the program's struct timespec. The replay reaches the end
// at the clock_nanosleep entry, verifies it and says it was inside that call.
func TestEndInsideSleep(t *testing.T) {
	requireRoot(t)
	forBackends(t, func(t *testing.T, backend string) {
		target, _, done := startTarget(t, "/bin/sleep", "100")
		time.Sleep(200 * time.Millisecond)
		ck := crashThread(t, target, done, target.Process.Pid, 1200*time.Millisecond, "--backend", backend)
		if out := replay(t, ck); !strings.Contains(out, ", inside clock_nanosleep, signal SIGSEGV)") {
			t.Fatalf("the replay does not say the end was inside clock_nanosleep:\n%s", out)
		}
	})
}

// pythonPollWait waits in poll(2) without a timeout for a byte its child
// writes once a second, and checks the revents it gets.
const pythonPollWait = `
import os, select, time
r, w = os.pipe()
if os.fork() == 0:
    # Not holding the test's output pipes; SIGPIPE ends it with its parent.
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    while True:
        time.sleep(1)
        os.write(w, b"x")
p = select.poll()
p.register(r, select.POLLIN)
while True:
    ev = p.poll()
    if not ev or not ev[0][1] & select.POLLIN:
        raise SystemExit("bad revents %r" % (ev,))
    os.read(r, 1)
`

// python3 attached while it waits in poll, which the kernel resumes through
// restart_syscall after the attach's stop and after every boundary's, and
// crashed while it waits again. Each interval replays: the completion of
// the poll in progress at the attach holds its revents (the eBPF program
// did not see it start and is told at the interval's open; it used to log
// a restart_syscall, or a poll without revents, and the replay polled
// again), and the end inside the next poll is verified without the pollfd
// page, whose revents the interrupted call rewrote.
func TestAttachDuringPoll(t *testing.T) {
	requireRoot(t)
	script := pythonScript(t, "pollwait.py", pythonPollWait)
	noted := regexp.MustCompile(`page 0x[0-9a-f]+ not compared: the interrupted poll wrote the revents of its descriptors`)
	forBackends(t, func(t *testing.T, backend string) {
		t.Cleanup(func() { _ = exec.Command("pkill", "-f", script).Run() })
		for attempt := 1; ; attempt++ {
			target, _, done := startTarget(t, "/usr/bin/python3", "-S", script)
			time.Sleep(1400 * time.Millisecond)
			ck := crashThread(t, target, done, target.Process.Pid, 2500*time.Millisecond, "--backend", backend)
			allReplayable(t, ck)
			out := replay(t, ck, "-v")
			if !strings.Contains(out, " poll(") {
				t.Fatalf("the replay made no poll:\n%s", out)
			}
			if noted.MatchString(out) {
				return
			}
			// The crash came in the short moment each second between two
			// polls: the end was not inside one.
			if attempt == 3 {
				t.Fatalf("in 3 attempts the end never fell inside poll, or the replay does not say which page it left out:\n%s", out[max(0, len(out)-2000):])
			}
		}
	})
}

// pythonTimedWait waits 4 s for a lock it holds itself (a futex wait with
// an absolute timeout, which the kernel resumes through restart_syscall
// after each boundary's stop), while a thread computes for 3 s and ends (so
// that boundaries come: a process that does nothing has none); then it
// computes a little and crashes. The computation gives twelve boundaries at
// 250 ms, so that the window of eight does not reach back to the
// interval the program started in (not replayable: the dynamic loader reads
// the time stamp counter); with 2 s, on a machine two other programs kept
// busy, it did in 1 run of 6.
const pythonTimedWait = `
import os, signal, time
import _thread
def work():
    end = time.monotonic() + 3.0
    while time.monotonic() < end:
        sum(range(2000))
_thread.start_new_thread(work, ())
l = _thread.allocate_lock()
l.acquire()
l.acquire(True, 4.0)
n = sum(range(300000))
os.kill(os.getpid(), signal.SIGSEGV)
`

// A wait longer than the window that ends in it: every interval starts
// with the thread in the restart_syscall that resumes its futex, and the
// start state must re-issue the futex the log holds. On the ptrace backend
// it said restart_syscall from the second boundary on, and replays from
// those intervals diverged at their first call (a trial of xz -T2 cut its
// window so), leaving them not replayable.
func TestWaitAcrossBoundaries(t *testing.T) {
	requireRoot(t)
	script := pythonScript(t, "timedwait.py", pythonTimedWait)
	forBackends(t, func(t *testing.T, backend string) {
		ck, log := recordMinimizedWith(t, []string{"--all-starts"}, backend, "/usr/bin/python3", "-S", script)
		allReplayable(t, ck)
		if strings.Contains(log, "diverged") {
			t.Errorf("a trial replay diverged:\n%s", log)
		}
		ivs := intervalsIn(t, ck)
		if len(ivs) < 4 {
			t.Fatalf("want the window's intervals, got %d", len(ivs))
		}
		// From an interval that starts in the wait, a replay runs
		// through the futex's end.
		out := replay(t, ck, "--from", fmt.Sprint(ivs[1].Index), "-v")
		if !strings.Contains(out, "futex(") || !verifiedRe.MatchString(out) {
			t.Fatalf("the replay from interval %d did not verify through the futex:\n%s", ivs[1].Index, out[max(0, len(out)-3000):])
		}
	})
}
