package replayer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/proc"
	"github.com/tprec/tprec/syscalls"

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
// after it returns. A thread waits at the exit of a call instead in a few
// cases afterCall lists (the thread the checkpoint ends in after its last
// call, until every other thread's calls are done). Threads the window
// starts are made at the entry of the call that starts them
// (startAtEntry), and end at their exit (atExit).
//
// The late schedule (format.ScheduleLate) is the other way round: a thread
// that completes a call waits at its exit (held) until its next call is the
// log's next, and only then runs its code up to that call. Each thread's
// code between two calls then runs as late as the log allows. Where two
// threads' stretches overlap in the log (A's call, B's call, B's next, A's
// next), eager runs A's first and late B's first; the recording ran them at
// the same time, and a store of one the other reads between its calls
// (memcached's main thread storing the clock a worker copies) lands on one
// side or the other. The dump's trial replay tries the late schedule when
// an eager one of several threads diverges, and the file says which one
// verified (Header.Schedule).
//
// Threads that communicate through memory without a syscall in between (a
// flag one sets and another polls, a spin lock, a lock-free queue) may see
// each other's stores at other points than in the recording: such a replay
// can take another path, which the checks at every call and at the end
// report as a divergence, never as a verified end.

// rthread is one thread of the replay.
type rthread struct {
	rec   format.Thread // its state at the start of the window, or where it started
	tid   int           // its thread id in the replay process
	state threadState
	// ctid is where the kernel clears the thread's id when it ends
	// (CLONE_CHILD_CLEARTID), for a thread the window starts; 0 if unknown.
	ctid uint64
	// skipExit is engine.skipExit of a thread that is not current: left
	// at the entry of a call completed under PTRACE_SYSEMU, it reports
	// that call's exit when resumed with PTRACE_SYSCALL.
	skipExit bool
	// stop: where the recording ended with this thread running between
	// two calls, after its last one; DR3 of the thread is set on stop.Rip
	// (armStop) until it stands there with these registers; stopPasses
	// counts its passes there.
	stop       *format.Regs
	stopPasses int
	// atStop: held at its stop with the recorded registers (holdNow),
	// where the end may find it at an earlier pass than the recording's
	// (passOnFromStop).
	atStop bool
	// endDiffs are end pages that differed with the thread held at an
	// earlier pass over its stop: the search of its passes in the process
	// compares a word of each too (watchWord).
	endDiffs []format.PageRef
	// stopWhy says why the process could not compare the passes over stop
	// itself (engine.stopSearch, with DR3 off), once it tried; a
	// divergence's hint names it.
	stopWhy string
	// nextSig is engine.nextSig of a thread that is not current, its
	// position in its signals (engine.sigQ).
	nextSig int
}

type threadState int

const (
	threadFresh   threadState = iota // not run yet: at the window's start, or where it started
	threadRunning                    // the one the engine runs (e.cur)
	threadParked                     // stopped at a syscall entry not handled yet
	threadHeld                       // waiting at the exit of a call (afterCall)
	threadExiting                    // at the entry of its exit, waiting for a join (yieldAt)
	threadGone                       // ended after its last call (exitThread)
)

// planThreads picks the threads the replay runs, from the start interval
// iv and the log.
func (e *engine) planThreads(iv format.Interval) error {
	e.cur = &rthread{rec: e.thread, state: threadRunning}
	e.threads = map[int]*rthread{e.thread.Tid: e.cur}
	e.born = map[int]bool{}
	endHasCalls := false
	made := map[int]bool{} // what the clones of the window returned
	e.lastAt = map[int]int{}
	for i, s := range e.log {
		if cloneCall(s.Nr) && s.Ret > 0 {
			made[int(s.Ret)] = true
		}
		e.lastAt[s.Tid] = i
	}
	for _, s := range e.log {
		if s.Tid == e.thread.Tid {
			endHasCalls = true
		} else if e.threads[s.Tid] == nil && !e.born[s.Tid] {
			if t, err := iv.Thread(s.Tid); err == nil {
				e.threads[s.Tid] = &rthread{rec: t}
				e.others = append(e.others, t)
			} else if made[s.Tid] {
				e.born[s.Tid] = true // made where that clone returns (startThread)
			} else {
				return fmt.Errorf("syscall #%d belongs to thread %d, which did not exist at the start of interval %d and which no call in the window started", s.Seq, s.Tid, iv.Index)
			}
		}
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
	// A thread the window started that made no call yet is there at the
	// end all the same, in user code: it runs too.
	for _, t := range e.endThreads() {
		if made[t.Tid] && e.threads[t.Tid] == nil {
			e.born[t.Tid] = true
		}
	}
	if len(e.others) == 0 && len(e.born) == 0 {
		for _, s := range e.sigs {
			if s.Tid != e.thread.Tid {
				return fmt.Errorf("signal %s delivered to thread %d after syscall #%d: replay runs thread %d",
					signalName(s.Signo), s.Tid, s.Seq, e.thread.Tid)
			}
		}
		return nil
	}
	slices.SortFunc(e.others, func(a, b format.Thread) int { return a.Tid - b.Tid })
	if err := e.threadSignals(iv); err != nil {
		return err
	}
	if len(e.others) == 0 {
		return nil // one thread until the first it starts
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

// threadSignals gives each thread its own signals (engine.sigQ), each
// placed after the last call of its thread that completed before it. The
// recording numbers a delivery after the last call of the whole process it
// had seen, which another thread's calls may have passed while this one
// stood at its delivery: the thread's own last call is where the delivery
// happened, on the way out of that call or interrupting the thread's next
// one, or in user code between that call and the thread's next one, found
// as in a replay of one thread (searchSignals) while the thread runs alone
// on that stretch. A thread's signals run in its own order; the threads
// meet, as for their calls, in the log's order.
func (e *engine) threadSignals(iv format.Interval) error {
	e.sigQ = map[int][]format.SignalEvent{}
	for _, s := range e.sigs {
		if e.threads[s.Tid] == nil && !e.born[s.Tid] {
			return fmt.Errorf("signal %s delivered to thread %d after syscall #%d: the replay does not run that thread (it waits in one call throughout the window)",
				signalName(s.Signo), s.Tid, s.Seq)
		}
		// The log is numbered without a gap from the window's first call.
		at := iv.FirstSeq - 1
		for i := min(int(s.Seq+1-iv.FirstSeq), len(e.log)) - 1; i >= 0; i-- {
			if e.log[i].Tid == s.Tid {
				at = e.log[i].Seq
				break
			}
		}
		s.Seq = at
		e.sigQ[s.Tid] = append(e.sigQ[s.Tid], s)
	}
	e.sigs, e.nextSig = e.sigQ[e.thread.Tid], 0
	return nil
}

// ownLastSeq is the seq of the current thread's last completed call (the
// window's start when it has none yet).
func (e *engine) ownLastSeq() uint64 {
	if !e.multi() {
		return e.lastSeq()
	}
	for i := e.next - 1; i >= 0; i-- {
		if e.log[i].Tid == e.cur.rec.Tid {
			return e.log[i].Seq
		}
	}
	return e.c.Intervals[e.k].FirstSeq - 1
}

// sigsLeft counts the recorded signals not delivered yet, of every thread.
func (e *engine) sigsLeft() int {
	if e.sigQ == nil {
		return len(e.sigs) - e.nextSig
	}
	n := 0
	for tid, q := range e.sigQ {
		switch t := e.threads[tid]; {
		case t == e.cur:
			n += len(q) - e.nextSig
		case t != nil:
			n += len(q) - t.nextSig
		default:
			n += len(q) // not started yet
		}
	}
	return n
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
	if e.next >= len(e.log) {
		if t := e.signalDue(); t != nil {
			return t
		}
		return e.endThread()
	}
	tid := e.log[e.next].Tid
	if t := e.threads[tid]; t != nil {
		return t
	}
	// A thread still to start: the one that starts it goes first, to
	// that call's entry (yieldAt).
	for _, s := range e.log[e.next:] {
		if cloneCall(s.Nr) && int(s.Ret) == tid {
			return e.threads[s.Tid]
		}
	}
	return nil
}

// signalDue finds, once the log is over, a thread parked at the entry of a
// call that a signal interrupted in the recording: the signal is its last
// step (a thread the recording ended in its handler), which its next
// record, the usual reason to resume it, does not come to ask for.
func (e *engine) signalDue() *rthread {
	for _, tid := range slices.Sorted(maps.Keys(e.sigQ)) {
		t := e.threads[tid]
		if t == nil || t == e.cur || t == e.endThread() || t.state != threadParked || t.nextSig >= len(e.sigQ[tid]) {
			continue
		}
		if ev := &e.sigQ[tid][t.nextSig]; ev.Interrupted() && ev.Seq <= e.lastSeq() {
			return t
		}
	}
	return nil
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
	for _, t := range e.others {
		rt := e.threads[t.Tid]
		var extra uint64
		if e.ends(rt) {
			// It ends in the window: as in the recording, its end
			// clears its id for a pthread_join.
			if rt.ctid = e.clearTid(t); rt.ctid != 0 {
				extra = unix.CLONE_CHILD_CLEARTID
			}
		}
		child, err := e.cloneStub(leader, extra, rt.ctid)
		if err != nil {
			return fmt.Errorf("make thread for %d: %w", t.Tid, err)
		}
		rt.tid = child
		if err := setThreadState(child, t, e.xsave); err != nil {
			return fmt.Errorf("thread %d: %w", t.Tid, err)
		}
		if !e.hasCalls(rt) {
			if err := e.armStop(rt); err != nil {
				return err
			}
		}
	}
	if err := e.switchTo(e.startQ[0]); err != nil {
		return err
	}
	e.startQ = e.startQ[1:]
	return nil
}

// stubOptions are the ptrace options of the stub's threads.
const stubOptions = unix.PTRACE_O_TRACESYSGOOD | unix.PTRACE_O_EXITKILL

// cloneStub makes one more thread in the stub, through thread on (stopped
// where it can take an injected call), and returns it stopped in its first
// stop. With extra CLONE_CHILD_CLEARTID, ctid is where the kernel clears
// its id when it ends, as for the program's own threads.
func (e *engine) cloneStub(on int, extra, ctid uint64) (int, error) {
	if err := proc.SetOptions(on, stubOptions|unix.PTRACE_O_TRACECLONE); err != nil {
		return 0, err
	}
	defer proc.SetOptions(on, stubOptions)
	const flags = unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_THREAD | unix.CLONE_SYSVSEM
	res, err := proc.Inject(on, e.stub.gadget, unix.SYS_CLONE, flags|extra, 0, 0, ctid, 0)
	if res.Child > 0 {
		e.stub.threads = append(e.stub.threads, res.Child)
	}
	if err != nil {
		return 0, err
	}
	if res.Ret < 0 || res.Child <= 0 {
		return 0, fmt.Errorf("clone failed: %v", unix.Errno(-res.Ret))
	}
	// A new tracee starts in a stop of its own.
	for {
		st, err := proc.Wait(res.Child)
		if err != nil {
			return 0, err
		}
		if st.Exited() {
			return 0, fmt.Errorf("it died at once (%v)", st)
		}
		if st.Status.Stopped() {
			break
		}
	}
	return res.Child, proc.SetOptions(res.Child, stubOptions)
}

// cloneCall reports whether nr makes a thread or a process.
func cloneCall(nr int) bool { return nr == unix.SYS_CLONE || nr == unix.SYS_CLONE3 }

// startsThread reports whether rec is the call that starts a thread the
// window runs.
func (e *engine) startsThread(rec *format.Syscall) bool {
	return cloneCall(rec.Nr) && rec.Ret > 0 && e.born[int(rec.Ret)]
}

// startAtEntry starts, at the entry of the current thread's call rec, the
// thread rec started in the recording, whose own calls may complete before
// rec does: the call is skipped to its exit stop, where the thread is made
// (startThread), and the caller put back on its syscall instruction, held
// there; it makes the call again when resumed, and completes it when the log
// says. The new thread goes first, to its first entry.
func (e *engine) startAtEntry(rec *format.Syscall) error {
	a := e.cur
	regs, err := proc.GetRegs(a.tid)
	if err != nil {
		return err
	}
	nr := regs.OrigRax
	regs.OrigRax = ^uint64(0)
	if err := proc.SetRegs(a.tid, regs); err != nil {
		return err
	}
	if err := proc.Resume(unix.PTRACE_SYSCALL, a.tid, 0); err != nil {
		return fmt.Errorf("resume replay: %w", err)
	}
	st, err := proc.Wait(a.tid)
	if err != nil {
		return err
	}
	if !st.SyscallStop() {
		return fmt.Errorf("syscall #%d: skipping %s to start its thread: %v", rec.Seq, syscalls.Name(rec.Nr), st)
	}
	if regs, err = proc.GetRegs(a.tid); err != nil {
		return err
	}
	t, err := e.startThread(rec, regs)
	if err != nil {
		return err
	}
	regs.Rip -= 2
	regs.Rax = nr
	if err := proc.SetRegs(a.tid, regs); err != nil {
		return err
	}
	a.state = threadHeld
	if err := e.switchTo(t); err != nil {
		return err
	}
	e.startQ = slices.DeleteFunc(e.startQ, func(x *rthread) bool { return x == t })
	return nil
}

// nextOwn is the next record of thread t in the log, nil if none.
func (e *engine) nextOwn(t *rthread) *format.Syscall {
	for i := e.next; i < len(e.log); i++ {
		if e.log[i].Tid == t.rec.Tid {
			return &e.log[i]
		}
	}
	return nil
}

// startThread makes in the stub the thread that rec, a call of the current
// thread, started in the recording (regs: the caller's registers at that
// call's exit): the caller's registers but rax 0, the stack and TLS the
// call gave, the caller's extended state and signal mask. The ids the call
// writes (CLONE_PARENT_SETTID, CLONE_CHILD_SETTID) are the recorded one.
func (e *engine) startThread(rec *format.Syscall, regs proc.Regs) (*rthread, error) {
	tid := int(rec.Ret)
	var flags, stack, ptid, ctid, tls uint64
	switch rec.Nr {
	case unix.SYS_CLONE:
		flags, stack, ptid, ctid, tls = rec.Args[0], rec.Args[1], rec.Args[2], rec.Args[3], rec.Args[4]
	default:
		// struct clone_args (linux/sched.h): flags, pidfd, child_tid,
		// parent_tid, exit_signal, stack, stack_size, tls.
		b := make([]byte, 64)
		if rec.Args[1] < uint64(len(b)) {
			return nil, fmt.Errorf("syscall #%d: clone3 with %d bytes of arguments", rec.Seq, rec.Args[1])
		}
		if err := e.touch(rec.Args[0], len(b)); err != nil {
			return nil, err
		}
		if err := e.readMem(b, rec.Args[0]); err != nil {
			return nil, fmt.Errorf("syscall #%d: clone3 arguments: %w", rec.Seq, err)
		}
		flags, ctid, ptid, tls = le64(b[0:]), le64(b[16:]), le64(b[24:]), le64(b[56:])
		if stack = le64(b[40:]); stack != 0 {
			stack += le64(b[48:])
		}
	}
	if flags&unix.CLONE_THREAD == 0 {
		return nil, e.diverge(regs.Rip, rec.Seq, fmt.Sprintf("%s returned %d, a thread with calls in the window, but does not start a thread", syscalls.Name(rec.Nr), tid), "", fmt.Sprintf("flags %#x", flags))
	}
	var extra uint64
	if flags&unix.CLONE_CHILD_CLEARTID != 0 {
		extra = unix.CLONE_CHILD_CLEARTID
	}
	child, err := e.cloneStub(e.stub.tid, extra, ctid)
	if err != nil {
		return nil, fmt.Errorf("syscall #%d: start thread %d: %w", rec.Seq, tid, err)
	}
	var id [4]byte
	binary.LittleEndian.PutUint32(id[:], uint32(tid))
	for _, w := range []struct {
		flag uint64
		addr uint64
	}{{unix.CLONE_PARENT_SETTID, ptid}, {unix.CLONE_CHILD_SETTID, ctid}} {
		if flags&w.flag == 0 {
			continue
		}
		if err := e.touch(w.addr, 4); err != nil {
			return nil, err
		}
		if err := e.mem.WriteAt(id[:], w.addr); err != nil {
			return nil, fmt.Errorf("syscall #%d: write thread id at %#x: %w", rec.Seq, w.addr, err)
		}
	}
	t, err := readThreadState(e.stub.tid)
	if err != nil {
		return nil, err
	}
	t.Tid, t.Regs = tid, regs
	t.Regs.Rax = 0
	if stack != 0 {
		t.Regs.Rsp = stack
	}
	if flags&unix.CLONE_SETTLS != 0 {
		t.Regs.FsBase = tls
	}
	if err := setThreadState(child, t, nil); err != nil {
		return nil, fmt.Errorf("thread %d: %w", tid, err)
	}
	rt := &rthread{rec: t, tid: child, state: threadFresh}
	if extra != 0 {
		rt.ctid = ctid
	}
	e.threads[tid] = rt
	e.others = append(e.others, t)
	e.startQ = append(e.startQ, rt)
	delete(e.born, tid)
	if e.opts.Verbose {
		e.logf("thread %d started by #%d", tid, rec.Seq)
	}
	if !e.hasCalls(rt) {
		if err := e.armStop(rt); err != nil {
			return nil, err
		}
	}
	if e.dbg != nil && e.hwbp && len(e.dbg.watches) > 0 {
		return rt, e.setWatches(e.dbg.watches)
	}
	return rt, nil
}

// exitThread lets thread t, stopped at the entry of its exit after its last
// recorded call, end as it did in the recording (the kernel clears its id
// for a pthread_join, CLONE_CHILD_CLEARTID).
func (e *engine) exitThread(t *rthread) error {
	if err := proc.Resume(unix.PTRACE_SYSCALL, t.tid, 0); err != nil {
		return fmt.Errorf("thread %d exits: %w", t.rec.Tid, err)
	}
	for {
		st, err := proc.Wait(t.tid)
		if err != nil {
			return fmt.Errorf("thread %d exits: %w", t.rec.Tid, err)
		}
		if st.Exited() {
			break
		}
		if err := proc.Resume(unix.PTRACE_SYSCALL, t.tid, 0); err != nil {
			return fmt.Errorf("thread %d exits: %w", t.rec.Tid, err)
		}
	}
	e.stub.threads = slices.DeleteFunc(e.stub.threads, func(x int) bool { return x == t.tid })
	delete(e.threads, t.rec.Tid)
	e.others = slices.DeleteFunc(e.others, func(x format.Thread) bool { return x.Tid == t.rec.Tid })
	e.ended++
	t.state = threadGone
	if e.opts.Verbose {
		e.logf("thread %d exits after its last call", t.rec.Tid)
	}
	return nil
}

// atExit handles the current thread at the entry of its exit after its
// last recorded call. When a later call waits on its id (a pthread_join
// that found it still running), it waits there until that call completes
// (exitsFor); otherwise it ends now. The thread whose call is next goes on.
func (e *engine) atExit() (*Result, error) {
	t := e.cur
	if t.ctid != 0 && e.waitedOn(t) {
		t.state = threadExiting
	} else if err := e.exitThread(t); err != nil {
		return nil, err
	}
	return e.resumeThread(e.owner())
}

// waitedOn reports whether a call left in the log waits on thread t's id:
// a futex wait at its address for its value (a later thread that reuses
// the same stack waits at the same address for another id).
func (e *engine) waitedOn(t *rthread) bool {
	for _, s := range e.log[e.next:] {
		if waitsFor(&s, t) {
			return true
		}
	}
	return false
}

// waitsFor reports whether s is a futex wait on thread t's id.
func waitsFor(s *format.Syscall, t *rthread) bool {
	return s.Nr == unix.SYS_FUTEX && s.Args[0] == t.ctid && uint32(s.Args[2]) == uint32(t.rec.Tid)
}

// exitsFor ends the threads waiting at their exit whose id rec, a futex
// call about to complete, waits on; all of them with rec nil (the end of the
// log, where the recording had them gone).
func (e *engine) exitsFor(rec *format.Syscall) error {
	if rec != nil && rec.Nr != unix.SYS_FUTEX {
		return nil
	}
	for _, t := range e.threads {
		if t.state == threadExiting && (rec == nil || waitsFor(rec, t)) {
			if err := e.exitThread(t); err != nil {
				return err
			}
		}
	}
	return nil
}

// readThreadState reads the state setThreadState gives: registers,
// extended state and signal mask of thread tid of the stub.
func readThreadState(tid int) (format.Thread, error) {
	var t format.Thread
	var err error
	if t.Regs, err = proc.GetRegs(tid); err != nil {
		return t, err
	}
	if t.XState, err = proc.GetXState(tid); err != nil {
		return t, err
	}
	if t.SigMask, err = proc.GetSigmask(tid); err != nil {
		return t, fmt.Errorf("signal mask: %w", err)
	}
	return t, nil
}

// setThreadState gives thread tid of the stub a thread's state: one
// recorded on a CPU that lays XSAVE images out as from says, or, with from
// nil, one readThreadState read here.
func setThreadState(tid int, t format.Thread, from *proc.XSaveLayout) error {
	r := t.Regs
	r.OrigRax = ^uint64(0)
	if err := proc.SetRegs(tid, r); err != nil {
		return fmt.Errorf("set registers: %w", err)
	}
	if err := proc.SetXState(tid, t.XState, from); err != nil {
		return err
	}
	if err := proc.SetSigmask(tid, t.SigMask); err != nil {
		return fmt.Errorf("set signal mask: %w", err)
	}
	return nil
}

// switchTo makes t the thread the engine runs.
func (e *engine) switchTo(t *rthread) error {
	if err := e.softStops(e.cur, t); err != nil {
		return err
	}
	if e.cur.state == threadRunning {
		e.cur.state = threadParked
	}
	e.cur.skipExit, e.skipExit, t.skipExit = e.skipExit, t.skipExit, false
	if e.sigQ != nil {
		e.cur.nextSig = e.nextSig
		e.sigs, e.nextSig = e.sigQ[t.rec.Tid], t.nextSig
	}
	// t is stopped at an entry or exit stop of PTRACE_SYSCALL, or after a
	// call completed under PTRACE_SYSEMU: its next stop is handled as
	// PTRACE_SYSCALL's.
	e.emu = false
	e.cur = t
	t.state, t.atStop = threadRunning, false
	e.stub.tid = t.tid
	return nil
}

// softStops moves the int3 of a thread's stop, where the debug registers
// do not work, from the thread that ran (from) to the one that runs now
// (to): only the thread that runs needs its stop (replay runs one thread at
// a time), and xz's two workers, stopped in the same compression loop, each
// passed the other's int3 a hundred thousand times, every pass a ptrace
// stop. A stop whose passes the process compares has its jmp there
// instead (softStopInProcess).
func (e *engine) softStops(from, to *rthread) error {
	if e.hwbp || from == to {
		return nil
	}
	if from != nil && from.stop != nil && e.stopThread != from {
		if err := e.int3s.set(e.mem, from.stop.Rip, ownerStop, false); err != nil {
			return err
		}
	}
	if to.stop == nil || e.stopThread == to || e.underSearchJmp(to.stop.Rip) {
		return nil
	}
	return e.int3s.set(e.mem, to.stop.Rip, ownerStop, true)
}

// underSearchJmp reports whether the jmp of a search in the process lies
// over addr: an int3 there would take the jmp's byte for the program's.
func (e *engine) underSearchJmp(addr uint64) bool {
	return slices.ContainsFunc(e.searches(), func(s *endInProcess) bool { return s.under(addr) })
}

// yieldAt is called at a syscall entry of the current thread, before it is
// handled. When another thread runs next, the current one is parked there
// and the other one taken to where it left off; yieldAt then reports true,
// with what handling the other one came to.
func (e *engine) yieldAt(nr int) (bool, *Result, error) {
	if e.sigSearch != nil {
		// The current thread reached a call before the point where a
		// signal was delivered to it: onEntry reports that.
		return false, nil, nil
	}
	if cloneCall(nr) && len(e.born) > 0 {
		if rec := e.nextOwn(e.cur); rec != nil && e.startsThread(rec) {
			return true, nil, e.startAtEntry(rec)
		}
	}
	if !e.multi() {
		return false, nil, nil
	}
	for len(e.startQ) > 0 {
		t := e.startQ[0]
		e.startQ = e.startQ[1:]
		if t != e.cur {
			if err := e.switchTo(t); err != nil {
				return true, nil, err
			}
			return true, nil, e.startSignals(t)
		}
	}
	o := e.owner()
	if o == e.cur {
		return false, nil, nil
	}
	if nr == unix.SYS_EXIT && e.cur != e.endThread() && !e.hasCalls(e.cur) {
		res, err := e.atExit()
		return true, res, err
	}
	res, err := e.resumeThread(o)
	return true, res, err
}

// resumeThread makes t current and goes on with it: the entry a parked
// thread stopped at is handled now; the end thread, held after its last
// call or never run, meets the end of the log.
func (e *engine) resumeThread(t *rthread) (*Result, error) {
	was := t.state
	if err := e.switchTo(t); err != nil {
		return nil, err
	}
	regs, err := proc.GetRegs(t.tid)
	if err != nil {
		return nil, err
	}
	switch {
	case was == threadParked:
		nr := int(regs.OrigRax)
		res, err := e.onEntry(regs, nr, [6]uint64{regs.Rdi, regs.Rsi, regs.Rdx, regs.R10, regs.R8, regs.R9})
		if err == nil && e.sigAtExit != nil {
			// A call a signal interrupted (interruptedEntry): the
			// delivery, which a debugger sees next.
			ev, err := e.interrupted(event{kind: evEntry, nr: nr, regs: regs})
			if e.dbg != nil && err == nil {
				e.dbg.entryDue = &ev
			}
			return ev.res, err
		}
		if e.dbg != nil && res == nil && err == nil {
			// A debugger sees this entry as an event of its own, next.
			e.dbg.entryDue = &event{kind: evEntry, nr: nr, regs: regs}
		}
		return res, err
	case t == e.endThread() && e.next == len(e.log):
		return e.atLogEnd(regs)
	case was == threadHeld || was == threadFresh:
		// It runs on from the exit it waited at, or from its start.
		e.startQ = slices.DeleteFunc(e.startQ, func(x *rthread) bool { return x == t })
		if was == threadFresh {
			return nil, e.startSignals(t)
		}
		return nil, nil
	}
	return nil, fmt.Errorf("thread %d is due at syscall #%d but never stopped at an entry", t.rec.Tid, e.lastSeq()+1)
}

// afterCall decides, once a call of the current thread completed (regs:
// its registers at the exit), who goes on. As a rule the thread itself, up
// to its next entry. It waits at this exit instead (held) while other
// threads' calls come before its next one, in three cases: the end thread
// after its last call, until the end of the log and until the threads with
// a signal still to take after it have taken it (signalDue); another thread after its
// last call when the recording ended with it at that exit
// (EndState.Threads); and a thread that woke another one through a futex
// and whose next call is a futex wake, until that call (wakeUnderLock).
// Under the late schedule every thread waits so until its next call is due.
func (e *engine) afterCall(regs proc.Regs) (bool, *Result, error) {
	end := e.cur == e.endThread()
	if !e.multi() || (end && e.next == len(e.log) && e.owner() == e.cur) || (e.next < len(e.log) && e.owner() == e.cur) || e.owner() == nil {
		// (No owner: the next call is of a thread this one has still to
		// start.)
		return true, nil, nil
	}
	last, more := true, false
	for i, s := range e.log[e.next:] {
		if s.Tid == e.cur.rec.Tid {
			under := wakeUnderLock(&e.log[e.next-1], &s) && !releasedBefore(&s, e.log[e.next:e.next+i])
			last, more = false, e.sched == format.ScheduleLate || under || e.endsBefore(e.next+i)
			break
		}
	}
	if !more && !(last && (end || e.endedAtExit(regs))) {
		if last && !end {
			// It may have been running where the recording ended.
			if err := e.armStop(e.cur); err != nil {
				return false, nil, err
			}
		}
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

// endsBefore reports whether a thread that ends in the window makes its
// last call before position i of the log: it ends after it, and the current
// thread, whose next call is at i, may look for that end (pthread_join
// reads the id the kernel clears) and must run after it.
func (e *engine) endsBefore(i int) bool {
	for _, t := range e.threads {
		if t == e.cur || t.ctid == 0 || !e.ends(t) || t.state == threadGone {
			continue
		}
		if last, ok := e.lastAt[t.rec.Tid]; ok && last >= e.next && last < i {
			return true
		}
	}
	return false
}

// ends reports whether thread t ends before the replay does: it is not
// among the threads recorded where the replay ends.
func (e *engine) ends(t *rthread) bool {
	if t == e.endThread() {
		return false
	}
	for _, o := range e.endThreads() {
		if o.Tid == t.rec.Tid {
			return false
		}
	}
	return true
}

// clearTid finds where the kernel clears the id of thread t, a thread that
// existed at the start of the window, when it ends (CLONE_CHILD_CLEARTID:
// the address is not recorded). Thread libraries keep the id in the
// thread's control block at the thread pointer (fs_base), at one offset for
// every thread: the offset where both t's block and the end thread's hold
// their own ids (glibc stores the first thread's through
// set_tid_address), in the first page. 0 when there is none.
func (e *engine) clearTid(t format.Thread) uint64 {
	a, b := e.thread.Regs.FsBase, t.Regs.FsBase
	if a == 0 || b == 0 || a == b {
		return 0
	}
	const span = 4096
	pa, pb := make([]byte, span), make([]byte, span)
	for _, r := range []struct {
		buf  []byte
		addr uint64
	}{{pa, a}, {pb, b}} {
		if e.touch(r.addr, span) != nil || e.readMem(r.buf, r.addr) != nil {
			return 0
		}
	}
	for off := 0; off+4 <= span; off += 4 {
		if binary.LittleEndian.Uint32(pa[off:]) == uint32(e.thread.Tid) && binary.LittleEndian.Uint32(pb[off:]) == uint32(t.Tid) {
			return b + uint64(off)
		}
	}
	return 0
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

// releasedBefore reports whether one of between, the calls of other
// threads before wake, waited for the futex wake wakes and is logged
// before it: it found the value changed (EAGAIN), the mutex unlocked
// before the wait and only the unlock's wake later; or it returned 0, woken
// by that very wake, whose waker the ptrace backend happened to collect
// after the woken thread. Either way the mutex was free when the waiting
// thread went on. A waker held for the woken thread to run first
// (wakeUnderLock) would still hold the mutex when that thread tries again:
// it runs on instead (redis-server's main thread signalling jemalloc's
// background thread).
func releasedBefore(wake *format.Syscall, between []format.Syscall) bool {
	for i := range between {
		if s := &between[i]; s.Args[0] == wake.Args[0] && finishedWait(s) {
			return true
		}
	}
	return false
}

// finishedWait reports whether s is a futex wait (FUTEX_WAIT 0,
// FUTEX_WAIT_BITSET 9) that was woken or found the value changed: not one
// that timed out or was interrupted.
func finishedWait(s *format.Syscall) bool {
	if s.Nr != unix.SYS_FUTEX {
		return false
	}
	if c := futexCommand(s); c != 0 && c != 9 {
		return false
	}
	return s.Ret == 0 || s.Ret == -int64(unix.EAGAIN)
}

// futexWake reports whether s is a futex call that wakes waiters.
func futexWake(s *format.Syscall) bool {
	if s.Nr != unix.SYS_FUTEX {
		return false
	}
	// FUTEX_WAKE, FUTEX_WAKE_OP, FUTEX_WAKE_BITSET (linux/futex.h).
	switch futexCommand(s) {
	case 1, 5, 10:
		return true
	}
	return false
}

// futexCommand is the command of futex call s, without FUTEX_PRIVATE_FLAG
// and FUTEX_CLOCK_REALTIME.
func futexCommand(s *format.Syscall) uint64 { return s.Args[1] & 0x7f }

// hasCalls reports whether thread t has calls left in the log.
func (e *engine) hasCalls(t *rthread) bool {
	for _, s := range e.log[e.next:] {
		if s.Tid == t.rec.Tid {
			return true
		}
	}
	return false
}

// lastOfThread reports whether the record at position i of the log is its
// thread's last one in the window. Its exit must then be a real stop, not a
// completion at a PTRACE_SYSEMU entry: the end thread waits there when calls
// of others follow, and what comes after a thread's last call may serve lazy
// pages (the page of the recorded end's rip, where the search is armed, or
// of a thread's stop), which the injected mprotect cannot do from an entry
// stop.
func (e *engine) lastOfThread(i int) bool {
	for _, s := range e.log[i+1:] {
		if s.Tid == e.log[i].Tid {
			return false
		}
	}
	return true
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
// When the recording ended with another thread running between two calls
// and replay did not stop it there (armStop), it says so: what that thread
// wrote on its way to its next call makes the end state differ.
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
		h += fmt.Sprintf("; where the recording ends, thread(s) %v were running between two calls, and replay did not find them there with their recorded registers before their next call", running)
		for _, tid := range running {
			if t := e.threads[tid]; t.stopWhy != "" {
				h += fmt.Sprintf(" (thread %d's passes there could not be compared in the process: %s)", tid, t.stopWhy)
			}
		}
	}
	other := format.ScheduleLate
	if e.sched == other {
		other = format.ScheduleEager
	}
	return h + fmt.Sprintf("; this replay ran their code between calls on the %v schedule, tpreplay --schedule %v runs the other order", e.sched, other)
}

// severalThreads reports whether the window runs several threads, at some
// point of it.
func (e *engine) severalThreads() bool { return len(e.threads)+len(e.born)+e.ended > 1 }

// Threads running where the recording ended. The recording stops every
// thread at once: one that was between two calls then, after its last call
// of the window, stood at some instruction of its code, which its recorded
// registers name. Replay would run it on to its next call, past that point,
// and what it writes on the way would make the end state differ. So such a
// thread gets an execution breakpoint of its own, in DR3 (the debug
// registers are per thread), on the instruction it stood at; at every pass
// its registers are compared with the recorded ones, and when they match it
// waits there, held, as it did in the recording. Where the debug registers
// do not work the breakpoint is an int3 in the shared code, there while
// the thread runs (softStops), which this thread with other registers, or
// another that shares the address, steps over (atSoftStop), until the
// process compares the passes itself (softStopInProcess).

// dr7StopDR3 enables DR3 as an execution breakpoint (L3; RW3 and LEN3 0).
const dr7StopDR3 = 1 << 6

// runningAtEnd returns where the recording ended with thread t running
// between two calls, other than the end thread.
func (e *engine) runningAtEnd(t *rthread) (format.Regs, bool) {
	if t == e.endThread() {
		return format.Regs{}, false
	}
	for _, o := range e.endThreads() {
		if o.Tid == t.rec.Tid && !o.InSyscall {
			return o.Regs, true
		}
	}
	return format.Regs{}, false
}

// armStop sets thread t's breakpoint on where the recording ended with it
// running, when it did (t has no calls left). Where the debug registers do
// not work it is an int3, never on a syscall instruction (stepping over
// one would run the call).
func (e *engine) armStop(t *rthread) error {
	r, ok := e.runningAtEnd(t)
	if !ok {
		return nil
	}
	if e.hwbp {
		t.stop = &r
		return e.setStop(t)
	}
	code := make([]byte, 2)
	if e.touch(r.Rip, len(code)) != nil || e.readMem(code, r.Rip) != nil || code[0] == 0x0f && code[1] == 0x05 {
		return nil
	}
	t.stop = &r
	if t != e.cur || e.underSearchJmp(r.Rip) {
		return nil // set when t runs (softStops)
	}
	return e.int3s.set(e.mem, r.Rip, ownerStop, true)
}

// setStop loads thread t's stop into its debug registers.
func (e *engine) setStop(t *rthread) error {
	if err := proc.SetDebugReg(t.tid, 3, t.stop.Rip); err != nil {
		return fmt.Errorf("thread %d: %w", t.rec.Tid, err)
	}
	return e.setDR7(t)
}

// setDR7 enables in thread t's DR7 the debugger's watchpoints and t's stop.
func (e *engine) setDR7(t *rthread) error {
	if err := proc.SetDebugReg(t.tid, 7, e.dr7For(t.tid)); err != nil {
		return fmt.Errorf("thread %d: %w", t.rec.Tid, err)
	}
	return nil
}

// dr7For is the DR7 of the stub's thread tid: the debugger's watchpoints,
// and the thread's stop.
func (e *engine) dr7For(tid int) uint64 {
	var dr7 uint64
	if e.dbg != nil {
		dr7 = e.dbg.dr7
	}
	for _, t := range e.threads {
		if t.tid == tid && t.stop != nil && t != e.stopThread {
			dr7 |= dr7StopDR3
		}
		if t.tid == tid && t == e.stopThread {
			dr7 |= e.stopSearch.dr7()
		}
	}
	return dr7
}

// stopTrap handles a SIGTRAP at regs that a thread's stop raised: DR3 of
// the current thread, or outside a debugger (which steps over the int3s of
// the table itself) a stop's int3 that is not also the end search's.
func (e *engine) stopTrap(ev event, regs proc.Regs, debugger bool) (event, bool, error) {
	if s := e.stopSearch; s != nil && regs.Rip == s.trap+1 {
		ev, err := e.atStopInProcess(ev, regs)
		return ev, true, err
	}
	if s := e.stopSearch; s != nil && e.cur == e.stopThread {
		if k := slices.Index(s.interior, regs.Rip); k >= 0 {
			ev.kind = evOther
			return ev, true, e.stopJumpInside(s, k, regs)
		}
	}
	if e.hwbp {
		hit, err := e.stopHit(regs)
		if !hit || err != nil {
			return ev, hit, err
		}
		ev, err = e.atStop(ev)
		return ev, true, err
	}
	if debugger || !e.int3s.has(regs.Rip-1, ownerStop) || e.bp.armed && e.bp.addr == regs.Rip-1 {
		return ev, false, nil
	}
	ev, err := e.atSoftStop(ev)
	return ev, true, err
}

// atOwnStop reports whether the current thread stands at its stop with the
// recorded registers.
func (e *engine) atOwnStop(regs proc.Regs) bool {
	t := e.cur
	return t.stop != nil && t.stop.Rip == regs.Rip && len(regsDiff(*t.stop, regs)) == 0
}

// stopHit reports whether the current thread, stopped by SIGTRAP at regs,
// hit its stop breakpoint (DR6 says DR3 fired).
func (e *engine) stopHit(regs proc.Regs) (bool, error) {
	t := e.cur
	if t.stop == nil || regs.Rip != t.stop.Rip {
		return false, nil
	}
	dr6, err := proc.GetDebugReg(t.tid, 6)
	if err != nil || dr6&(1<<3) == 0 {
		return false, err
	}
	return true, proc.SetDebugReg(t.tid, 6, 0)
}

// atStop handles the current thread at its stop breakpoint: it runs on
// unless its registers are the recorded ones; then it waits there and the
// thread whose call is next goes on.
func (e *engine) atStop(ev event) (event, error) {
	ev.kind = evOther
	e.cur.stopPasses++
	if !e.atOwnStop(ev.regs) {
		return ev, e.stopInProcess()
	}
	return e.holdAtStop(ev)
}

// stopInProcess has the process compare the current thread's passes over
// its stop itself from now on, as the end search does (endsearch.go), when
// it can: a worker crashed from outside in the middle of a computation
// passes its stop hundreds of thousands of times (xz -T2: 497,621 stops
// before the one that matched), each a ptrace stop. One such search at a
// time, not with the end search; the jmp displaces one instruction, since
// the other threads run the same code and only this one's debug registers
// could move a jump into the others.
func (e *engine) stopInProcess() error {
	t := e.cur
	if !e.maySearchStop(t) {
		return nil
	}
	// Not at a rep string instruction: the recording may have stopped it
	// among its iterations, which the code, comparing at its start only,
	// would never see.
	if code, err := e.instructionBytes(t.stop.Rip); err != nil || decodeRepString(code).size > 0 {
		t.stopWhy = "a rep string instruction"
		return nil
	}
	s, err := e.compareInProcess(*t.stop, t.stop.Rip)
	if s == nil || err != nil {
		// Tried once: each try would cost as much as a pass.
		t.stopWhy = "no jmp could be placed there, or the code is not patched"
		e.logf("thread %d: its passes over %#x are ptrace stops: %s", t.rec.Tid, t.stop.Rip, t.stopWhy)
		return err
	}
	e.stopSearch, e.stopThread = s, t
	e.logf("thread %d: the passes over its stop at %#x are compared in the process", t.rec.Tid, t.stop.Rip)
	for _, d := range t.endDiffs {
		e.watchWord(s, d, fmt.Sprintf("thread %d's stop search", t.rec.Tid))
	}
	if !e.hwbp {
		return nil // the stop was an int3, which softStopInProcess took out
	}
	return e.setDR7(t)
}

// maySearchStop reports whether thread t's passes over its stop may be
// compared in the process from now on (stopInProcess): one such search at a
// time, not with the end search's, not under a debugger, and tried once.
func (e *engine) maySearchStop(t *rthread) bool {
	return e.stopSearch == nil && e.bp.inproc == nil && e.dbg == nil && t.stop != nil && t.stopWhy == ""
}

// softStopInProcess is stopInProcess where the debug registers do not work
// and thread t's stop is an int3, at which t stands with other registers
// than the recorded ones: the int3 makes room for the search's jmp, and
// comes back when no jmp can be placed there. Not while another thread's
// stop shares the int3. It reports whether the search runs.
func (e *engine) softStopInProcess(t *rthread) (bool, error) {
	at := t.stop.Rip
	if !e.maySearchStop(t) {
		return false, nil
	}
	for _, o := range e.threads {
		if o != t && o.stop != nil && o.stop.Rip == at {
			return false, nil
		}
	}
	if err := e.int3s.set(e.mem, at, ownerStop, false); err != nil {
		return false, err
	}
	err := e.stopInProcess()
	if e.stopThread == t {
		return true, err
	}
	return false, errors.Join(err, e.int3s.set(e.mem, at, ownerStop, true))
}

// stopJumpInside handles the stop search's thread at interior[k] of the
// search s (a debug register trap): a jump to one of the instructions it
// displaces after the first. The search moves to a punned jmp that
// displaces the first alone (punInstead), else the jump goes to that
// instruction's copy, at a stop each time (calls are not made to go to the
// copy, as the end search does: the other threads run on once the stop is
// found, and the copy goes with the search). Where the punned jmp cannot
// be placed after all, DR3 stops at each pass again.
func (e *engine) stopJumpInside(s *endInProcess, k int, regs proc.Regs) error {
	t := e.stopThread
	if !s.mayPun {
		return s.redirect(t.tid, k, regs)
	}
	t.stopPasses += s.passes()
	e.stopSearch = nil // one search at a time (patchInProcess): s leaves
	moved, err := e.punInstead(s, regs.Rip)
	if err != nil {
		return err
	}
	if moved != nil {
		binary.LittleEndian.PutUint64(moved.data[idEndPasses:], 0) // counted in stopPasses
		e.stopSearch = moved
		return nil
	}
	t.stopWhy = "a jump into the instructions after the one there, and no punned jmp for it alone"
	e.logf("thread %d: its passes over %#x are ptrace stops: %s", t.rec.Tid, t.stop.Rip, t.stopWhy)
	e.stopSearch, e.stopThread = nil, nil
	return e.setStop(t) // DR3 may have watched a displaced instruction
}

// atStopInProcess handles a thread at the int3 of the stop search in the
// process: every general register matched. When it is the search's thread
// and the rest matches too, the jmp is taken out and the thread stands at
// its stop, held there; any other pass goes on through the code's miss
// path (another thread whose registers happened to match).
func (e *engine) atStopInProcess(ev event, regs proc.Regs) (event, error) {
	ev.kind = evOther
	s, t := e.stopSearch, e.stopThread
	if t != e.cur || t.stop == nil {
		return ev, nil
	}
	t.stopPasses += s.passes()
	at := s.regsAt(regs, t.stop.Rip)
	if !e.atOwnStop(at) {
		binary.LittleEndian.PutUint64(s.data[idEndPasses:], 0)
		return ev, nil
	}
	if err := s.remove(e); err != nil {
		return ev, err
	}
	e.stopSearch, e.stopThread = nil, nil
	if err := proc.SetRegs(t.tid, at); err != nil {
		return ev, err
	}
	ev.regs = at
	return e.holdAtStop(ev)
}

// atSoftStop handles a thread that ran into a stop's int3 (outside a
// debugger, which steps over int3s itself): the current thread at its own
// stop with the recorded registers waits there; any other pass steps over.
func (e *engine) atSoftStop(ev event) (event, error) {
	ev.kind = evOther
	regs := ev.regs
	regs.Rip--
	if err := proc.SetRegs(e.cur.tid, regs); err != nil {
		return ev, err
	}
	ev.regs = regs
	if e.cur.stop != nil && e.cur.stop.Rip == regs.Rip {
		e.cur.stopPasses++
	}
	if e.atOwnStop(regs) {
		return e.holdAtStop(ev)
	}
	if t := e.cur; t.stop != nil && t.stop.Rip == regs.Rip {
		// A stop in the program's hot code: its passes are compared
		// in the process from here on, when they can be.
		if searching, err := e.softStopInProcess(t); searching || err != nil {
			return ev, err
		}
	}
	st, err := e.stepOver(e.cur.tid, regs.Rip)
	if err != nil {
		return ev, err
	}
	if sig := st.Signal(); sig != int(unix.SIGTRAP) {
		// Something else came (a stop request, a fault of the
		// instruction): handled as any signal.
		if ev.regs, err = proc.GetRegs(e.cur.tid); err != nil {
			return ev, err
		}
		ev.kind = evSignal
		ev.res, ev.next, err = e.onSignal(ev.regs, sig)
	}
	return ev, err
}

// stepOver single-steps thread tid over the instruction at rip, an int3 of
// the table there taken out for the step, and returns the stop it came to.
func (e *engine) stepOver(tid int, rip uint64) (proc.Stop, error) {
	if err := e.int3s.lift(e.mem, rip); err != nil {
		return proc.Stop{}, err
	}
	err := proc.Resume(unix.PTRACE_SINGLESTEP, tid, 0)
	var st proc.Stop
	if err == nil {
		st, err = proc.Wait(tid)
	}
	if err == nil && st.Signal() == int(unix.SIGILL) {
		// An xtest this CPU lacks: patched, stepped again (xtest.go).
		var patched bool
		if patched, err = e.patchXTest(rip); patched && err == nil {
			if err = proc.Resume(unix.PTRACE_SINGLESTEP, tid, 0); err == nil {
				st, err = proc.Wait(tid)
			}
		}
	}
	if derr := e.int3s.drop(e.mem); err == nil {
		err = derr
	}
	return st, err
}

// holdAtStop makes the current thread, standing at its stop with the
// recorded registers, wait there; the thread whose call is next goes on.
//
// Under a debugger the thread first stands there as at any other point, so
// that the point is one a debugger can stop at and go back to (the one
// before the next thread's first event); the next resume holds it
// (execOne). A thread resumed from that very point, which a debugger saw
// already (a single step lands on the stop before its breakpoint fires),
// is held at once.
func (e *engine) holdAtStop(ev event) (event, error) {
	if d := e.dbg; d != nil && !(d.from.tid == e.cur.tid && d.from.rip == ev.regs.Rip) {
		ev.kind, ev.standing = evOther, true
		due := ev
		d.holdDue = &due
		return ev, nil
	}
	return e.holdNow(ev)
}

// holdNow holds the current thread at its stop (holdAtStop).
func (e *engine) holdNow(ev event) (event, error) {
	t := e.cur
	at := t.stop.Rip
	t.stop = nil
	if e.hwbp {
		if err := e.setDR7(t); err != nil {
			return ev, err
		}
	} else if err := e.int3s.set(e.mem, at, ownerStop, false); err != nil {
		return ev, err // only the current thread's stop is set (softStops)
	}
	if e.opts.Verbose {
		e.logf("thread %d waits at %#x, where the recording ended with it running (pass %d there)", t.rec.Tid, ev.regs.Rip, t.stopPasses)
	}
	o := e.owner()
	if o == nil {
		return ev, fmt.Errorf("thread %d stopped where the recording ended, and no thread is due", t.rec.Tid)
	}
	t.state = threadHeld
	t.atStop = true
	if e.dbg != nil {
		// What ran last before the next thread's first event: this
		// thread, standing at its stop (Session.beforeEntry).
		e.dbg.sysAt = at
	}
	var err error
	ev.standing, ev.switched = false, true
	ev.res, err = e.resumeThread(o)
	return ev, err
}

// passOnFromEnd is for the end thread standing at the recorded end with its
// recorded registers, where only memory differs (why), other threads held at
// their stops. A stop holds a thread at the first pass where its registers
// are the recorded ones, and code can pass an instruction with the same
// registers many times, its progress kept in memory (a counter bumped with
// `lock add`; V8's allocation code in node, where a crash was delivered to
// another thread and the main thread ran on while tprec took the signal's
// stop). When one thread waits at its stop, it goes on to its next such
// pass (passOnFromStop), the end thread waiting (in state wait), and the
// end is compared again there. Its search in the process then compares a
// word of each page that differed too (endDiffs), so that the passes it
// stops at are few. When no pass matches, it runs into a call past the
// log: a divergence, which says how often the end thread stood at the end.
// Not under a debugger: there every pass is a ptrace stop (no search runs
// in the process, stopInProcess), and a count that ran for a second before
// the end would keep gdb's continue for hours; the divergence says that a
// replay without a debugger takes the thread on (heldAtFirstPass).
func (e *engine) passOnFromEnd(why string, wait threadState) (bool, *Result, error) {
	var held []*rthread
	for _, t := range e.threads {
		if t.atStop {
			held = append(held, t)
		}
	}
	if len(held) != 1 {
		return false, nil, nil
	}
	t := held[0]
	if e.dbg != nil {
		e.heldAtFirstPass = t.rec.Tid
		return false, nil, nil
	}
	if i := e.firstEndDiffer(); i >= 0 && !slices.ContainsFunc(t.endDiffs, func(d format.PageRef) bool { return d.Addr == e.end.Digests[i].Addr }) {
		t.endDiffs = append(t.endDiffs, e.end.Digests[i])
	}
	if ok, err := e.passOnFromStop(t); err != nil || !ok {
		return false, nil, err
	}
	e.passedOn++
	if e.passedOnWhy == "" {
		e.passedOnWhy = why
	}
	if e.opts.Verbose {
		e.logf("the end differs in memory with thread %d at pass %d over its stop: it goes on to its next pass", t.rec.Tid, t.stopPasses)
	}
	e.cur.state = wait
	res, err := e.resumeThread(t)
	return true, res, err
}

// passOnFromStop runs thread t, held at its stop, over the instruction
// there, and arms the stop again for its next pass. It reports false, and
// does nothing, when that instruction is a syscall (a step would make the
// call).
func (e *engine) passOnFromStop(t *rthread) (bool, error) {
	r, ok := e.runningAtEnd(t)
	if !ok {
		return false, nil
	}
	code := make([]byte, 2)
	if err := e.readMem(code, r.Rip); err != nil || code[0] == 0x0f && code[1] == 0x05 {
		return false, nil
	}
	st, err := e.stepOver(t.tid, r.Rip)
	if err != nil {
		return false, err
	}
	if sig := st.Signal(); sig != int(unix.SIGTRAP) {
		if sig == int(unix.SIGSTOP) && e.stopReq.Load() != 0 {
			// The time is up (or an interrupt): the divergence says
			// so, from the end thread's standpoint.
			if regs, err := proc.GetRegs(e.stub.tid); err == nil {
				if _, _, err := e.onSignal(regs, sig); err != nil {
					return false, err
				}
			}
		}
		return false, fmt.Errorf("thread %d: a step from its stop at %#x stopped with signal %d", t.rec.Tid, r.Rip, sig)
	}
	t.atStop = false
	return true, e.armStop(t)
}

// lockFutex reports whether rec, the current thread's next record, which
// the thread did not make (it made another call), is the futex call of a
// lock contended in the recording: a wait that returned without a signal
// (woken, or the word had changed), or a wake. Replay runs a thread's code
// between two calls at once, so a lock one thread holds between two of its
// calls is free again before another thread asks for it: the holder's
// release finds no one to wake, the other thread takes it without waiting,
// and neither makes its futex call (a pthread mutex, memcached's LRU
// maintainer and a worker). What the lock protects is the same, and the end
// state is still compared; a wait or wake the thread does make is compared
// with the record as any call.
func (e *engine) lockFutex(rec *format.Syscall) bool {
	if rec.Nr != unix.SYS_FUTEX || !e.multi() {
		return false
	}
	// FUTEX_WAKE 1, FUTEX_WAKE_BITSET 10.
	if c := futexCommand(rec); !finishedWait(rec) && c != 1 && c != 10 {
		return false
	}
	// A signal delivered to the thread after this call and before its next
	// one is placed by the calls: keep it a divergence then.
	next := e.end.LastSeq + 1
	for i := e.next + 1; i < len(e.log); i++ {
		if e.log[i].Tid == rec.Tid {
			next = e.log[i].Seq
			break
		}
	}
	for _, ev := range e.c.Signals {
		if ev.Tid == rec.Tid && ev.Seq >= rec.Seq && ev.Seq < next {
			return false
		}
	}
	return true
}
