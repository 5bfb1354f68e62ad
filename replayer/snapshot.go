package replayer

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"sync/atomic"

	"github.com/tprec/tprec/proc"

	"golang.org/x/sys/unix"
)

// Snapshots of a debugger-driven replay. Going back re-executes the window
// up to the position wanted; without snapshots that is from the start, so on
// a busy server's window (hundreds of thousands of syscalls) every reverse
// step costs seconds. While a Session's engine runs forward, it leaves a
// snapshot behind every snapshotStride syscalls: a fork of the replay
// process, stopped at the start of a stretch and never resumed, with a copy
// of the engine's state. Going back then starts from the latest snapshot at
// or before the position's stretch: the snapshot is forked again (it stays
// as it is, for the next time), and the copy runs on from there exactly as a
// fresh replay would, the replay being deterministic.
//
// The fork is a clone injected through the stub's syscall instruction (the
// seccomp filter allows clone from there only), with CLONE_PARENT so that
// tpreplay itself is the parent and reaps it. The child gets the thread's
// registers; memory, FPU state, signal handlers and mask, rseq and the
// seccomp filter come with the fork. What does not: the debug registers
// (set again by whoever needs watchpoints) and pending signals (a snapshot
// is taken only where none is about to be delivered). Nor do the other
// threads of a replay of several: copyThreads makes them again.

const (
	// maxSnapshots bounds the stopped forks a session keeps.
	maxSnapshots = 48
	// minSnapshotStride is the fewest syscalls between two snapshots.
	minSnapshotStride = 200
)

// snapshotStride is the number of syscalls between two snapshots of a
// window of n syscalls.
func snapshotStride(n int) int {
	return max(minSnapshotStride, (n+maxSnapshots-1)/maxSnapshots)
}

// snapshotReady reports whether e stands where a snapshot can be taken and
// resumed as if nothing had happened: at a syscall exit, with nothing of the
// engine's in flight (a call, a signal to deliver there or to search for, the
// end-state search, output files).
func (e *engine) snapshotReady() bool {
	return e.threadsCopyable() && e.pend == nil && e.again == nil && e.sigAtExit == nil && e.sigSearch == nil &&
		!e.emu && !e.skipExit && !e.bp.active && !e.bp.armed && e.out == nil && e.dbg != nil &&
		e.dbg.ended == nil && len(e.dbg.watches) == 0
}

// fork returns a copy of e whose process is a fork of e's, stopped where e
// is. e's thread must be stopped where injection is allowed (a syscall exit,
// or a stop of its own), and stays there.
func (e *engine) fork() (*engine, error) {
	pid := e.stub.tid
	regs, err := proc.GetRegs(pid)
	if err != nil {
		return nil, err
	}
	opts := unix.PTRACE_O_TRACESYSGOOD | unix.PTRACE_O_EXITKILL
	if err := proc.SetOptions(pid, opts|unix.PTRACE_O_TRACECLONE); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	// Exit signal 0: the stopped parent must not get a SIGCHLD when a
	// copy ends (it would stop on it at its next injection).
	res, err := proc.Inject(pid, e.stub.gadget, unix.SYS_CLONE, unix.CLONE_PARENT, 0, 0, 0, 0)
	if rerr := proc.SetOptions(pid, opts); err == nil && rerr != nil {
		err = rerr
	}
	child := res.Child
	cleanup := func() {
		if child > 0 {
			killAndReap(child)
		}
	}
	if err != nil {
		cleanup()
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	if res.Ret < 0 || child <= 0 {
		return nil, fmt.Errorf("snapshot: clone failed: %v", unix.Errno(-res.Ret))
	}
	// The child is attached automatically and starts in a stop of its
	// own (the SIGSTOP of an automatic attach).
	for {
		st, err := proc.Wait(child)
		if err != nil {
			cleanup()
			return nil, fmt.Errorf("snapshot: %w", err)
		}
		if st.Exited() {
			return nil, fmt.Errorf("snapshot: the copy died at once (%v)", st)
		}
		if st.Status.Stopped() {
			break
		}
	}
	if err := proc.SetOptions(child, opts); err != nil {
		cleanup()
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	if err := proc.SetRegs(child, regs); err != nil {
		cleanup()
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	p, err := os.FindProcess(child)
	if err != nil {
		cleanup()
		return nil, err
	}
	c := *e
	c.stub = &stub{pid: child, tid: child, base: e.stub.base, gadget: e.stub.gadget, cpu: e.stub.cpu, proc: p}
	if c.mem, err = proc.OpenMem(child); err != nil {
		c.stub.kill()
		return nil, err
	}
	c.stopReq = new(atomic.Int32)
	// The current thread is the fork's; the others are made again in it
	// (copyThreads); the threads the window has still to start are the
	// fork's to start.
	cur := *e.cur
	cur.tid = child
	cur.endDiffs = slices.Clone(e.cur.endDiffs)
	c.cur = &cur
	c.threads = map[int]*rthread{cur.rec.Tid: c.cur}
	c.born = maps.Clone(e.born)
	c.peeked = maps.Clone(e.peeked)
	c.lazy = maps.Clone(e.lazy)
	c.served = maps.Clone(e.served)
	c.guards = guardSet{g: append([]guard(nil), e.guards.g...)}
	c.xtests = maps.Clone(e.xtests)
	c.int3s = int3Table{}
	if e.int3s.at != nil {
		c.int3s.at = make(map[uint64]*int3, len(e.int3s.at))
		for a, b := range e.int3s.at {
			cb := *b
			c.int3s.at[a] = &cb
		}
	}
	c.dbg = nil
	if e.multi() {
		err := c.copyThreads(e)
		// Nor are the debug registers: the threads' stops go back.
		for _, t := range c.threads {
			if err == nil && t.stop != nil && c.hwbp {
				err = c.setStop(t)
			}
		}
		if err != nil {
			c.stub.kill()
			c.mem.Close()
			return nil, fmt.Errorf("snapshot: %w", err)
		}
	}
	return &c, nil
}

// threadsCopyable reports whether fork can make the replay's threads again
// in the copy: the current one stands at a syscall exit, none is left at
// an entry the engine handled and the debugger has not seen (entryDue),
// and the current one is not a thread that ends in the window (it becomes
// the copy's first thread, whose end the kernel reports only once the
// others are gone). The others are made again as they wait: not run yet,
// at an exit (held), or at an entry the engine has not handled (parked,
// or waiting at its exit call).
func (e *engine) threadsCopyable() bool {
	if !e.multi() {
		return true
	}
	if e.dbg == nil || e.dbg.entryDue != nil || e.ends(e.cur) || e.cur.state != threadRunning {
		return false
	}
	for _, t := range e.threads {
		if t != e.cur && t.skipExit {
			return false
		}
	}
	return true
}

// copyThreads makes in c, a fork of e with e's current thread only, the
// other threads of e, each with its registers, extended state and signal
// mask. A thread stopped at a syscall entry is put back on its syscall
// instruction and run to the same entry stop: the stop comes before the
// seccomp filter, so the call does not run.
func (c *engine) copyThreads(e *engine) error {
	tids := make([]int, 0, len(e.threads))
	for tid := range e.threads {
		tids = append(tids, tid)
	}
	slices.Sort(tids)
	mine := map[*rthread]*rthread{e.cur: c.cur}
	for _, tid := range tids {
		t := e.threads[tid]
		if t == e.cur {
			continue
		}
		st, err := readThreadState(t.tid)
		if err != nil {
			return fmt.Errorf("thread %d: %w", tid, err)
		}
		atEntry := t.state == threadParked || t.state == threadExiting
		nr := st.Regs.OrigRax
		if atEntry {
			st.Regs.Rip -= 2
			st.Regs.Rax = nr
		}
		var extra uint64
		if t.ctid != 0 {
			extra = unix.CLONE_CHILD_CLEARTID
		}
		child, err := c.cloneStub(c.stub.tid, extra, t.ctid)
		if err != nil {
			return fmt.Errorf("thread %d: %w", tid, err)
		}
		if err := setThreadState(child, st, nil); err != nil {
			return fmt.Errorf("thread %d: %w", tid, err)
		}
		if atEntry {
			if err := c.backToEntry(child, st.Regs.Rip, nr); err != nil {
				return fmt.Errorf("thread %d: %w", tid, err)
			}
		}
		nt := *t
		nt.tid = child
		nt.endDiffs = slices.Clone(t.endDiffs)
		c.threads[tid] = &nt
		mine[t] = &nt
	}
	c.startQ = make([]*rthread, len(e.startQ))
	for i, t := range e.startQ {
		c.startQ[i] = mine[t]
	}
	c.others = slices.Clone(e.others)
	return nil
}

// backToEntry resumes thread tid, standing on a syscall instruction at rip,
// to the entry stop of that call, nr.
func (c *engine) backToEntry(tid int, rip, nr uint64) error {
	if err := c.int3s.lift(c.mem, rip); err != nil {
		return err
	}
	defer c.int3s.drop(c.mem)
	if err := proc.Resume(unix.PTRACE_SYSCALL, tid, 0); err != nil {
		return err
	}
	st, err := proc.Wait(tid)
	if err != nil {
		return err
	}
	if !st.SyscallStop() {
		return fmt.Errorf("back to the entry of syscall %d: %v", nr, st)
	}
	info, err := proc.GetSyscallInfo(tid)
	if err != nil {
		return err
	}
	if info.Op != proc.SyscallEntry || info.Nr != nr {
		return fmt.Errorf("back to the entry of syscall %d: stopped at syscall %d (op %d)", nr, info.Nr, info.Op)
	}
	return nil
}

// maybeSnapshot leaves a snapshot of e behind when e stands at the start of a
// stretch a stride past the last snapshot before it. Failing to take one
// costs only speed: it is logged, never an error.
func (s *Session) maybeSnapshot(e *engine) {
	if s.noSnapshots || e.next == 0 || !e.snapshotReady() {
		return
	}
	stride := snapshotStride(len(e.log))
	i := sort.Search(len(s.snaps), func(i int) bool { return s.snaps[i].next > e.next })
	if i > 0 && e.next-s.snaps[i-1].next < stride {
		return
	}
	if i < len(s.snaps) && s.snaps[i].next-e.next < stride {
		return
	}
	if len(s.snaps) >= maxSnapshots {
		return
	}
	c, err := e.fork()
	if err != nil {
		s.noSnapshots = true
		s.SnapshotErr = err
		return
	}
	s.snaps = append(s.snaps, nil)
	copy(s.snaps[i+1:], s.snaps[i:])
	s.snaps[i] = c
}

// engineAt returns an engine standing at the start of a stretch not later
// than stretch, ready for reach: a copy of the latest snapshot there, or a
// fresh replay at the start of the window. user are breakpoints counted from
// there.
func (s *Session) engineAt(stretch int, user map[uint64]bool) (e *engine, err error) {
	// Every engine made here re-executes for going back: its counts are
	// bounded until it becomes the session's (swap).
	defer func() {
		if e != nil {
			e.dbg.limit = MaxReverseArrivals
		}
	}()
	i := sort.Search(len(s.snaps), func(i int) bool { return s.snaps[i].next > stretch })
	for i > 0 {
		snap := s.snaps[i-1]
		var c *engine
		err := s.tr.Do(func() error {
			var err error
			if c, err = snap.fork(); err != nil {
				return err
			}
			// The debugger's int3s of the moment the snapshot was
			// taken go: the copy's debugger state starts empty.
			for a, b := range c.int3s.at {
				if b.owners&ownerDbg != 0 {
					if err := c.int3s.set(c.mem, a, ownerDbg, false); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err == nil {
			c.dbg = newDebugState()
			c.dbg.interrupt = s.interrupt
			c.dbg.snap = s.maybeSnapshot
			for a := range user {
				c.dbg.user[a] = true
			}
			err = s.tr.Do(func() error {
				regs, err := proc.GetRegs(c.stub.tid)
				if err != nil {
					return err
				}
				return c.stretchStart(regs.Rip)
			})
		}
		if err == nil {
			s.FromSnapshot++
			return c, nil
		}
		if c != nil {
			_ = s.tr.Do(func() error { s.killEngine(c); return nil })
		}
		// A snapshot that cannot be forked is dropped.
		_ = s.tr.Do(func() error { s.killEngine(snap); return nil })
		s.snaps = append(s.snaps[:i-1], s.snaps[i:]...)
		i--
	}
	s.Reexecutions++
	return s.newEngine(user)
}

// snapshotIn returns the stretch of the latest snapshot in [lo, hi].
func (s *Session) snapshotIn(lo, hi int) (int, bool) {
	i := sort.Search(len(s.snaps), func(i int) bool { return s.snaps[i].next > hi })
	if i > 0 && s.snaps[i-1].next >= lo {
		return s.snaps[i-1].next, true
	}
	return 0, false
}

// Snapshots is the number of snapshots the session keeps.
func (s *Session) Snapshots() int { return len(s.snaps) }

// dropSnapshots kills every snapshot.
func (s *Session) dropSnapshots() {
	for _, e := range s.snaps {
		s.killEngine(e)
	}
	s.snaps = nil
}
