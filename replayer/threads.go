package replayer

import (
	"fmt"
	"slices"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/proc"

	"golang.org/x/sys/unix"
)

// Several threads. The recording orders every thread's syscalls in one
// sequence; replay runs one thread at a time and switches only at syscall
// entries, so that the calls complete in that order. The threads a replay
// makes are the one the checkpoint ends in and every thread with a call in
// the window or that was not waiting in a call at its start; a thread
// blocked in the same call from start to end (an idle worker) is left
// out, as it changes nothing the others see.
//
// The schedule is eager: a thread that completes a call runs on to its next
// syscall entry and waits there (parked) until the log says that call is
// next. At the start every thread runs to its first entry. So each thread's
// code between two calls runs as soon as the call before it returned, in
// log order: what one thread stored before a call (a futex wake, a write to
// a pipe) is in memory when another thread's call that the recording saw
// after it returns. The thread the checkpoint ends in is the exception
// after its last call: it waits at that call's exit until every other
// thread's calls are done, then runs to the recorded end.
//
// Threads that communicate through memory without a syscall in between (a
// flag one sets and another polls, a spin lock, a lock-free queue) may see
// each other's stores at other points than in the recording: such a replay
// can take another path, which the checks at every call and at the end
// report as a divergence, never as a verified end.

// rthread is one thread of the replay.
type rthread struct {
	rec   format.Thread // its state at the start of the window
	tid   int           // its thread id in the replay process
	state threadState
	// skipExit is engine.skipExit of a thread that is not current: left
	// at the entry of a call completed under PTRACE_SYSEMU, it reports
	// that call's exit when resumed with PTRACE_SYSCALL.
	skipExit bool
}

type threadState int

const (
	threadFresh   threadState = iota // not run yet: at the window's start
	threadRunning                    // the one the engine runs (e.cur)
	threadParked                     // stopped at a syscall entry not handled yet
	threadHeld                       // the end thread after its last call, at that call's exit
)

// planThreads picks the threads the replay runs, from the start interval
// iv and the log.
func (e *engine) planThreads(iv format.Interval) error {
	e.cur = &rthread{rec: e.thread, state: threadRunning}
	e.threads = map[int]*rthread{e.thread.Tid: e.cur}
	endHasCalls := false
	for _, s := range e.log {
		if s.Tid == e.thread.Tid {
			endHasCalls = true
			continue
		}
		if e.threads[s.Tid] != nil {
			continue
		}
		t, err := iv.Thread(s.Tid)
		if err != nil {
			return fmt.Errorf("syscall #%d belongs to thread %d, which did not exist at the start of interval %d: replay does not create threads", s.Seq, s.Tid, iv.Index)
		}
		e.threads[s.Tid] = &rthread{rec: t}
		e.others = append(e.others, t)
	}
	// A thread that was not waiting in a call at the start ran, even
	// when no call of it completed: it runs to the entry of the call it
	// was in at the end.
	for _, t := range iv.Threads {
		if !t.InSyscall && e.threads[t.Tid] == nil {
			e.threads[t.Tid] = &rthread{rec: t}
			e.others = append(e.others, t)
		}
	}
	if len(e.others) == 0 {
		return nil
	}
	slices.SortFunc(e.others, func(a, b format.Thread) int { return a.Tid - b.Tid })
	if len(e.sigs) > 0 {
		s := e.sigs[0]
		return fmt.Errorf("signal %s delivered to thread %d after syscall #%d: a replay of several threads (%d make syscalls in this window) does not deliver signals",
			signalName(s.Signo), s.Tid, s.Seq, len(e.threads))
	}
	// Every thread with calls first runs to its first entry; the end
	// thread, when it has none, waits for the end of the log.
	if endHasCalls {
		e.startQ = append(e.startQ, e.cur)
	} else {
		e.cur.state = threadFresh
	}
	for _, t := range e.others {
		e.startQ = append(e.startQ, e.threads[t.Tid])
	}
	if e.opts.Verbose {
		var left []int
		for _, t := range iv.Threads {
			if e.threads[t.Tid] == nil {
				left = append(left, t.Tid)
			}
		}
		e.logf("%d threads run in the window; threads left out (waiting in one call throughout): %v", len(e.threads), left)
	}
	return nil
}

// stubTids lists the replay's ids of its threads, the current one first.
func (e *engine) stubTids() []int {
	out := []int{e.stub.tid}
	for _, t := range e.threads {
		if t.tid != 0 && t.tid != e.stub.tid {
			out = append(out, t.tid)
		}
	}
	return out
}

// multi reports whether the replay runs several threads.
func (e *engine) multi() bool { return len(e.threads) > 1 }

// endThread is the thread the checkpoint ends in.
func (e *engine) endThread() *rthread { return e.threads[e.thread.Tid] }

// owner is the thread that runs next: the one of the next record, or at the
// end of the log the end thread.
func (e *engine) owner() *rthread {
	if e.next < len(e.log) {
		return e.threads[e.log[e.next].Tid]
	}
	return e.endThread()
}

// makeThreads creates the other threads in the stub, stopped, each with its
// recorded state at the start of the window. The first thread already has
// the end thread's state and the seccomp filter, which clone copies.
func (e *engine) makeThreads() error {
	leader := e.stub.pid
	e.cur.tid = leader
	if !e.multi() {
		return nil
	}
	opts := unix.PTRACE_O_TRACESYSGOOD | unix.PTRACE_O_EXITKILL
	if err := proc.SetOptions(leader, opts|unix.PTRACE_O_TRACECLONE); err != nil {
		return fmt.Errorf("make threads: %w", err)
	}
	defer proc.SetOptions(leader, opts)
	const flags = unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_THREAD | unix.CLONE_SYSVSEM
	for _, t := range e.others {
		res, err := proc.Inject(leader, e.stub.gadget, unix.SYS_CLONE, flags, 0, 0, 0, 0)
		if res.Child > 0 {
			e.stub.threads = append(e.stub.threads, res.Child)
		}
		if err != nil {
			return fmt.Errorf("make thread for %d: %w", t.Tid, err)
		}
		if res.Ret < 0 || res.Child <= 0 {
			return fmt.Errorf("make thread for %d: clone failed: %v", t.Tid, unix.Errno(-res.Ret))
		}
		// A new tracee starts in a stop of its own.
		for {
			st, err := proc.Wait(res.Child)
			if err != nil {
				return fmt.Errorf("make thread for %d: %w", t.Tid, err)
			}
			if st.Exited() {
				return fmt.Errorf("make thread for %d: it died at once (%v)", t.Tid, st)
			}
			if st.Status.Stopped() {
				break
			}
		}
		if err := proc.SetOptions(res.Child, opts); err != nil {
			return fmt.Errorf("make thread for %d: %w", t.Tid, err)
		}
		rt := e.threads[t.Tid]
		rt.tid = res.Child
		if err := setThreadState(res.Child, t); err != nil {
			return fmt.Errorf("thread %d: %w", t.Tid, err)
		}
	}
	e.switchTo(e.startQ[0])
	e.startQ = e.startQ[1:]
	return nil
}

// setThreadState gives thread tid of the stub a recorded thread's state.
func setThreadState(tid int, t format.Thread) error {
	r := t.Regs
	r.OrigRax = ^uint64(0)
	if err := proc.SetRegs(tid, r); err != nil {
		return fmt.Errorf("set registers: %w", err)
	}
	if err := proc.SetXState(tid, t.XState); err != nil {
		return err
	}
	if err := proc.SetSigmask(tid, t.SigMask); err != nil {
		return fmt.Errorf("set signal mask: %w", err)
	}
	return nil
}

// switchTo makes t the thread the engine runs.
func (e *engine) switchTo(t *rthread) {
	if e.cur.state == threadRunning {
		e.cur.state = threadParked
	}
	e.cur.skipExit, e.skipExit, t.skipExit = e.skipExit, t.skipExit, false
	// t is stopped at an entry or exit stop of PTRACE_SYSCALL, or after a
	// call completed under PTRACE_SYSEMU: its next stop is handled as
	// PTRACE_SYSCALL's.
	e.emu = false
	e.cur = t
	t.state = threadRunning
	e.stub.tid = t.tid
}

// yieldAt is called at a syscall entry of the current thread, before it is
// handled. When another thread runs next, the current one is parked there
// and the other one taken to where it left off; yieldAt then reports true,
// with what handling the other one came to.
func (e *engine) yieldAt() (bool, *Result, error) {
	if !e.multi() {
		return false, nil, nil
	}
	if len(e.startQ) > 0 {
		e.switchTo(e.startQ[0])
		e.startQ = e.startQ[1:]
		return true, nil, nil
	}
	o := e.owner()
	if o == e.cur {
		return false, nil, nil
	}
	res, err := e.resumeThread(o)
	return true, res, err
}

// resumeThread makes t current and goes on with it: the entry a parked
// thread stopped at is handled now; the end thread, held after its last
// call or never run, meets the end of the log.
func (e *engine) resumeThread(t *rthread) (*Result, error) {
	was := t.state
	e.switchTo(t)
	regs, err := proc.GetRegs(t.tid)
	if err != nil {
		return nil, err
	}
	switch {
	case was == threadParked:
		return e.onEntry(regs, int(regs.OrigRax), [6]uint64{regs.Rdi, regs.Rsi, regs.Rdx, regs.R10, regs.R8, regs.R9})
	case was == threadHeld && e.next < len(e.log):
		return nil, nil // it runs on from the exit it waited at
	case t == e.endThread() && e.next == len(e.log):
		return e.atLogEnd(regs)
	}
	return nil, fmt.Errorf("thread %d is due at syscall #%d but never stopped at an entry", t.rec.Tid, e.lastSeq()+1)
}

// afterCall decides, once a call of the current thread completed (regs:
// its registers at the exit), who goes on. As a rule the thread itself, up
// to its next entry. It waits at this exit instead (held) while other
// threads' calls come before its next one, in three cases: the end thread
// after its last call, until the end of the log; another thread after its
// last call when the recording ended with it at that exit
// (EndState.Threads); and a thread that woke another one through a futex
// and whose next call is a futex wake, until that call (wakeUnderLock).
func (e *engine) afterCall(regs proc.Regs) (bool, *Result, error) {
	end := e.cur == e.endThread()
	if !e.multi() || (end && e.next == len(e.log)) || (e.next < len(e.log) && e.owner() == e.cur) {
		return true, nil, nil
	}
	last, more := true, false
	for _, s := range e.log[e.next:] {
		if s.Tid == e.cur.rec.Tid {
			last, more = false, wakeUnderLock(&e.log[e.next-1], &s)
			break
		}
	}
	if !more && !(last && (end || e.endedAtExit(regs))) {
		return true, nil, nil
	}
	if e.opts.Verbose && last && !end {
		e.logf("thread %d stays at the exit of its last call #%d, where the recording ended", e.cur.rec.Tid, e.log[e.next-1].Seq)
	}
	e.cur.state = threadHeld
	res, err := e.resumeThread(e.owner())
	return false, res, err
}

// endedAtExit reports whether the recording ended with the current thread
// at the exit of a call, with registers regs: stopped there by the end
// (a blocking call the end interrupted returns, and the thread stops before
// running on), it must not run past it in replay either.
func (e *engine) endedAtExit(regs proc.Regs) bool {
	for _, t := range e.endThreads() {
		if t.Tid == e.cur.rec.Tid {
			return !t.InSyscall && t.Regs.Rip == regs.Rip && t.Regs.Rsp == regs.Rsp && t.Regs.Rax == regs.Rax
		}
	}
	return false
}

// wakeUnderLock recognizes a condition variable signalled with its mutex
// held, the woken thread then waiting for the mutex: call done woke a
// thread through a futex, and next, the same thread's next call, is a futex
// wake too, the mutex's unlock, which the kernel sees only because the
// woken thread found the mutex held. In the recording the woken thread ran
// before the unlock; so it does in replay, where the waker is held until
// its unlock is due.
func wakeUnderLock(done, next *format.Syscall) bool {
	return futexWake(done) && done.Ret > 0 && futexWake(next)
}

// futexWake reports whether s is a futex call that wakes waiters.
func futexWake(s *format.Syscall) bool {
	if s.Nr != unix.SYS_FUTEX {
		return false
	}
	// The command, without FUTEX_PRIVATE_FLAG and FUTEX_CLOCK_REALTIME:
	// FUTEX_WAKE, FUTEX_WAKE_OP, FUTEX_WAKE_BITSET (linux/futex.h).
	switch s.Args[1] & 0x7f {
	case 1, 5, 10:
		return true
	}
	return false
}

// lastOfEnd reports whether the next record is the end thread's last one
// with calls of other threads after it (its exit must be a real stop, as
// the thread waits there: no PTRACE_SYSEMU).
func (e *engine) lastOfEnd() bool {
	if !e.multi() || e.next >= len(e.log) || e.log[e.next].Tid != e.thread.Tid {
		return false
	}
	for _, s := range e.log[e.next+1:] {
		if s.Tid == e.thread.Tid {
			return false
		}
	}
	return e.next+1 < len(e.log)
}

// endThreads is the recorded state of the threads where the replay ends:
// at the end, or at the start of interval until.
func (e *engine) endThreads() []format.Thread {
	if e.until < len(e.c.Intervals) {
		return e.c.Intervals[e.until].Threads
	}
	return e.c.End.Threads
}

// threadsHint explains a divergence of a replay of several threads: what
// the threads exchange through memory between their calls is not ordered.
// When the recording ended with another thread running between two calls,
// it says so: replay runs that thread on to its next call, and what it
// writes on the way makes the end state differ.
func (e *engine) threadsHint() string {
	var running []int
	for _, t := range e.endThreads() {
		rt := e.threads[t.Tid]
		if !t.InSyscall && rt != nil && rt != e.endThread() && rt.state != threadHeld {
			running = append(running, t.Tid)
		}
	}
	h := fmt.Sprintf("%d threads ran: replay keeps the recorded order of their syscalls, not of what they exchange through memory between calls (a contended lock, a flag one sets and another polls)", len(e.threads))
	if len(running) > 0 {
		h += fmt.Sprintf("; where the recording ends, thread(s) %v were running between two calls, where replay does not stop them", running)
	}
	return h
}
