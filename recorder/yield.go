package recorder

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// cpuYield moves every thread of tprec to the SCHED_IDLE policy while a
// crashed process's handler runs, and back. The checkpoint of the crash is
// written in the background meanwhile, on one or two CPUs (the trial
// replay, the compression), and a thread of tprec that woke on the CPU of
// the handler preempted it. A preempted thread whose rseq area holds
// garbage is killed by the kernel on its way back (its critical-section
// pointer no longer points anywhere): redis-server's crash report tests
// its memory, that area among it, and was cut off in 4 runs of 8 by a
// SIGSEGV from the kernel's return to user mode after a reschedule IPI
// (bpftrace on signal_generate), never without tprec. An idle-policy
// thread never preempts a normal one at its wakeup. Threads made meanwhile
// inherit the policy; off puts every thread back at ownSched (not at the
// policy of the thread that called on, which may itself have inherited
// SCHED_IDLE: a yield turned on from there left every thread at it).
type cpuYield struct {
	yielding bool
}

func (y *cpuYield) on() {
	if y.yielding {
		return
	}
	y.yielding = true
	yielding.Store(true)
	applySched(&unix.SchedAttr{Policy: unix.SCHED_IDLE})
}

func (y *cpuYield) off() {
	if !y.yielding {
		return
	}
	y.yielding = false
	yielding.Store(false)
	a := ownSched
	applySched(&a)
}

// yielding is true while a cpuYield is on: a lowered thread raised then
// stays at SCHED_IDLE.
var yielding atomic.Bool

// applySched sets the scheduling attributes of every thread of tprec, but
// those lowered (lowered.lower), which stay at SCHED_IDLE, and of every
// thread of the trial replays under way (trialStubs).
func applySched(a *unix.SchedAttr) {
	setThreadsSched("/proc/self/task", a, func(tid int) bool {
		_, low := loweredTids.Load(tid)
		return low && a.Policy != unix.SCHED_IDLE
	})
	trialStubs.Lock()
	defer trialStubs.Unlock()
	for pid := range trialStubs.pids {
		setThreadsSched(fmt.Sprintf("/proc/%d/task", pid), a, nil)
	}
}

// setThreadsSched sets a on every thread listed in dir (a /proc task
// directory) but those skip reports, and again on threads that appeared
// meanwhile (made from a thread not yet set, they inherited the policy it
// had), until a look finds none.
func setThreadsSched(dir string, a *unix.SchedAttr, skip func(tid int) bool) {
	done := map[int]bool{}
	for {
		ents, err := os.ReadDir(dir)
		if err != nil {
			return
		}
		more := false
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil || done[tid] {
				continue
			}
			done[tid], more = true, true
			if skip == nil || !skip(tid) {
				attr := *a
				unix.SchedSetAttr(tid, &attr, 0)
			}
		}
		if !more {
			return
		}
	}
}

// trialStubs holds the pids of the trial replays' processes under way
// (trialStub). Their threads follow tprec's own policy: SCHED_IDLE while a
// cpuYield is on, so that a replay does not preempt the crash handler
// either, and tprec's own policy again once it is off. A process inherits
// the policy of the thread that starts it, so a trial started while
// redis-server's crash handler ran replayed the whole window at SCHED_IDLE,
// long after the handler had ended, behind any other thread that wanted
// its CPU.
// The lock is held while their policy is set, so that a pid taken off the
// list is not used after: the process is killed and reaped right after,
// and the pid may then name another.
var trialStubs = struct {
	sync.Mutex
	pids map[int]bool
}{pids: map[int]bool{}}

// trialStub is the trial replays' replayer.Options.Stub.
func trialStub(pid int, alive bool) {
	trialStubs.Lock()
	defer trialStubs.Unlock()
	if !alive {
		delete(trialStubs.pids, pid)
		return
	}
	trialStubs.pids[pid] = true
	// A cpuYield that turns on or off after yielding is read here sets
	// the process too once this returns (it changes yielding first, then
	// applySched waits for the lock).
	attr := ownSched
	if yielding.Load() {
		attr = unix.SchedAttr{Policy: unix.SCHED_IDLE}
	}
	setThreadsSched(fmt.Sprintf("/proc/%d/task", pid), &attr, nil)
}

// lowered is a thread of tprec that does work nothing waits for at the
// SCHED_IDLE policy, until something does: tprec's ring buffer reader and
// the saving of a boundary's originals after the target resumed. At that
// policy a thread of tprec runs only on a CPU nothing else wants, and a
// CPU that runs only such threads counts as idle where the kernel places
// a waking task. On a redis-server under redis-benchmark, which keep both
// CPUs of a 2-CPU machine busy, tprec's threads at the normal policy took
// the CPU the waking client or server would have had: the two ended on one
// CPU, each waiting for it 15% of the time while the other CPU was idle
// 39% of it (/proc/PID/task/*/schedstat, /proc/stat), and redis served 35%
// fewer requests than unrecorded; with the reader and the saving lowered,
// BENCHMARKS.md. The thread goes back to tprec's own policy (raise) when
// the target waits for it (a boundary's drain of the ring buffer), or when
// it has waited too long for a CPU: a machine that other work keeps busy
// would otherwise starve it, and the ring buffer would fill and lose
// records (watchdog).
type lowered struct {
	mu    sync.Mutex
	tid   int
	since time.Time // when it was lowered; zero while it is not
	held  int       // holds (hold) under way: lower waits for them
	// starved is when the watchdog last raised it (rescue): for
	// starvedHold after, it stays raised.
	starved time.Time
	rescues int // how many times the watchdog raised it
	// wake, when set (session.watchdog), is told of each lowering: the
	// watchdog then looks every watchPeriod again.
	wake chan struct{}
}

// starvedHold is how long a thread the watchdog had to raise stays at
// tprec's own policy: on a machine other programs keep busy, a reader
// lowered again after every pass fell an eighth of its ring behind between
// two looks of the watchdog, and each boundary then held the target while
// it caught up (python3 reading files in a loop among four CPU hogs on two
// CPUs: boundaries of 421 ms instead of a few).
const starvedHold = time.Second

// loweredTids are the threads lowered now.
var loweredTids sync.Map

// lower puts the calling thread, which the caller locked to its goroutine
// (runtime.LockOSThread), at SCHED_IDLE.
func (l *lowered) lower() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.since.IsZero() || l.held > 0 || time.Since(l.starved) < starvedHold || !raisable() {
		return
	}
	l.tid = unix.Gettid()
	if unix.SchedSetAttr(0, &unix.SchedAttr{Policy: unix.SCHED_IDLE}, 0) == nil {
		l.since = time.Now()
		loweredTids.Store(l.tid, true)
		select {
		case l.wake <- struct{}{}:
		default: // nil, or a wake already waiting
		}
	}
}

// raise puts the thread back at tprec's own policy (SCHED_IDLE still while
// a cpuYield is on). Any goroutine may call it.
func (l *lowered) raise() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.raiseLocked()
}

// rescue raises a thread that waited too long for a CPU, for at least
// starvedHold.
func (l *lowered) rescue() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.starved = time.Now()
	if !l.since.IsZero() {
		l.rescues++
	}
	l.raiseLocked()
}

// hold raises the thread and keeps it raised until unhold: the target
// waits for it meanwhile.
func (l *lowered) hold() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held++
	l.raiseLocked()
}

func (l *lowered) unhold() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held--
}

func (l *lowered) raiseLocked() {
	if l.since.IsZero() {
		return
	}
	l.since = time.Time{}
	loweredTids.Delete(l.tid)
	if !yielding.Load() {
		attr := ownSched
		unix.SchedSetAttr(l.tid, &attr, 0)
	}
}

// lowFor returns how long the thread has been lowered (0 if it is not).
func (l *lowered) lowFor() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.since.IsZero() {
		return 0
	}
	return time.Since(l.since)
}

// raisable reports whether a thread of tprec may go back from SCHED_IDLE
// to its own policy: that takes CAP_SYS_NICE, or a RLIMIT_NICE that allows
// the thread's nice value (sched(7)), which a tprec given only CAP_BPF,
// CAP_PERFMON and CAP_SYS_PTRACE lacks. Without it, nothing is lowered. A
// thread of its own tries it; it ends with its goroutine, whatever policy
// the try left it at.
var raisable = sync.OnceValue(func() bool {
	ok := make(chan bool)
	go func() {
		runtime.LockOSThread() // never unlocked
		if unix.SchedSetAttr(0, &unix.SchedAttr{Policy: unix.SCHED_IDLE}, 0) != nil {
			ok <- false
			return
		}
		attr := ownSched
		ok <- unix.SchedSetAttr(0, &attr, 0) == nil
	}()
	return <-ok
})

// ownSched is the policy tprec was started with.
var ownSched = func() unix.SchedAttr {
	if a, err := unix.SchedGetAttr(0, 0); err == nil {
		return *a
	}
	return unix.SchedAttr{Policy: unix.SCHED_NORMAL}
}()

// watchPeriod is how often the watchdog looks at the lowered threads while
// there is something to watch, and lowWait how long the saving may wait at
// SCHED_IDLE. With nothing to watch (the ring buffer empty, the saving not
// waiting), the watchdog looks half as often each time, down to once every
// watchIdlePeriod: a look every 10 ms took 2% of a CPU while tprec recorded
// an idle `sleep` (0.8% with the looks spaced out, scripts/bench/idle.sh).
const (
	watchPeriod     = 10 * time.Millisecond
	watchIdlePeriod = 80 * time.Millisecond
	lowWait         = 20 * time.Millisecond
)

// rescued returns how many times the watchdog raised the thread.
func (l *lowered) rescued() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rescues
}
