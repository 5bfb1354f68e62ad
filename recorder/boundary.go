package recorder

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/proc"

	"golang.org/x/sys/unix"
)

// boundary ends the current interval and starts the next one. The target is in
// an event stop.
func (s *session) boundary() error {
	now := time.Now()
	snap, err := s.closeIntervalSnap(now, true)
	if err != nil {
		return err
	}
	t1 := time.Now()
	err = s.openIntervalFrom(now, snap)
	s.lastStop = time.Since(now)
	s.heldAll += s.lastStop
	if debugStops {
		s.logf("boundary: close %v, open %v", t1.Sub(now), time.Since(t1))
	}
	return err
}

// runDeferred does the work a boundary left for after the target resumed.
// After a boundary's, it sets how long the next interval lasts at least
// (stretchAfter) from the stop and the CPU time that work took: CPU time,
// not wall time, which would count the waits for a CPU on a busy machine (a
// redis boundary's saving took 20-40 ms of CPU and up to 110 ms of wall
// time with other load) and the push's wait for the ring's packing, which
// runs on its own goroutine.
func (s *session) runDeferred() {
	if len(s.deferred) == 0 {
		return
	}
	t := threadCPU()
	for len(s.deferred) > 0 {
		fn := s.deferred[0]
		s.deferred = s.deferred[1:]
		fn()
	}
	if s.lastStop > 0 {
		s.stretchAfter(s.lastStop, threadCPU()-t)
		s.lastStop = 0
	}
}

// stretchFactor: an interval lasts at least this many times what its
// opening boundary cost.
const (
	stretchFactor = 4
	// stretchMax bounds a stretched interval: the trial replay of a dump
	// re-executes the window, the last interval with it.
	stretchMax = 30 * time.Second
)

// stretchAfter sets the shortest length of the interval a boundary opened
// from what that boundary cost: the time it held the target and the CPU
// time tprec then took to save the originals of the pages the closed
// interval wrote. A program that writes hundreds of megabytes a quarter
// second (a JVM allocating: its young generation rewritten again and again) made
// boundaries that held it for 100-280 ms and left 1-1.5 s of saving, four
// times a second: it ran 13 times slower than unrecorded. Besides, each
// page it writes after a boundary costs it a copy-on-write fault, and
// tprec's saving competes with it for the CPUs. So once a boundary costs
// more than a whole interval, the intervals last at least four times what
// the boundary that opened each cost (at most stretchMax): the cost of
// boundaries stays under about a quarter of the time, whatever the
// program writes, and the intervals come back to Options.Interval when it
// writes less. A server that rewrites a few thousand pages an interval
// (redis under load: 2-3 ms of stop and 20-40 ms of saving) is not
// concerned. tprec says when intervals begin and stop being stretched, and
// the status line says by how much.
func (s *session) stretchAfter(stop, save time.Duration) {
	cost := stop + save
	want := time.Duration(0)
	// Stretching begins when a boundary cost a whole interval, and goes
	// on while four times the cost exceeds one: a busy machine that slows
	// one boundary does not start it.
	if cost > s.o.Interval || (s.stretch > 0 && stretchFactor*cost > s.o.Interval) {
		want = min(stretchMax, (stretchFactor * cost).Round(time.Millisecond))
	}
	s.costStop, s.costSave, s.costPages = stop, save, s.lastWritten
	switch {
	case want > 0 && s.stretch == 0:
		s.logf("boundaries of process %d cost %v (the program writes many pages each interval): intervals last at least %v, four times that, while it does", s.pid, cost.Round(time.Millisecond), want)
	case want == 0 && s.stretch > 0:
		s.logf("boundaries of process %d cost %v again: intervals back to %v", s.pid, cost.Round(time.Millisecond), s.o.Interval)
	}
	s.stretch = want
}

// stretchHolds reports whether the open interval is to go on at a tick:
// it has not lasted s.stretch yet, and, where the eBPF programs count the
// pages it touched so far, the boundary that would end it now would still
// cost more than a quarter of it, at the last boundary's cost per page. A
// program that stopped writing comes back to short intervals at once, not
// after a whole stretched one.
func (s *session) stretchHolds() bool {
	elapsed := time.Since(s.cur.meta.Start)
	if elapsed >= s.stretch {
		return false
	}
	if _, ok := s.src.(*ebpfSource); ok && s.costPages > 0 {
		_, pages := s.src.activity(s.calm.rseq)
		est := s.costStop + time.Duration(int64(s.costSave)*int64(pages)/int64(s.costPages))
		if stretchFactor*est <= elapsed {
			return false
		}
	}
	return true
}

// stepClock times the steps of a boundary; with TPREC_DEBUG the durations
// are logged in one line, so a long stop can be attributed to its step.
// With each step's time it gives the CPU time tprec and the children it
// waited for (a trial's replays) used in it, when that reached a
// millisecond: what a dump costs on a machine where something else needs
// the CPUs, and how much of its time it had them. The children's user time
// is also given apart: in a trial replay that is the replayed program
// computing again what it computed in the window, which no change to tprec
// can shorten. A target tprec launched is one of those children too: the
// step in which it is reaped counts all its CPU time.
type stepClock struct {
	t         time.Time
	cpu, user time.Duration
	faults    int64 // tprec's own minor page faults
	steps     []string
}

func newStepClock() *stepClock {
	if !debugStops {
		return nil
	}
	c := &stepClock{t: time.Now()}
	c.cpu, c.user, c.faults = cpuUsed()
	return c
}

func (c *stepClock) mark(name string) {
	if c == nil {
		return
	}
	now := time.Now()
	cpu, user, faults := cpuUsed()
	step := fmt.Sprintf("%s %v", name, now.Sub(c.t).Round(time.Microsecond))
	var notes []string
	if d, u := cpu-c.cpu, user-c.user; u >= time.Millisecond {
		notes = append(notes, fmt.Sprintf("cpu %v, of which children's user time %v", d.Round(time.Millisecond), u.Round(time.Millisecond)))
	} else if d >= time.Millisecond {
		notes = append(notes, fmt.Sprintf("cpu %v", d.Round(time.Millisecond)))
	}
	if f := faults - c.faults; f >= 100 {
		notes = append(notes, fmt.Sprintf("%d page faults", f))
	}
	if len(notes) > 0 {
		step += " (" + strings.Join(notes, ", ") + ")"
	}
	c.steps = append(c.steps, step)
	c.t, c.cpu, c.user, c.faults = now, cpu, user, faults
}

// cpuUsed is the user and system time of this process and of its children
// waited for, the children's user time alone, and this process's minor
// page faults (each a few microseconds of system time in a VM).
func cpuUsed() (total, childUser time.Duration, faults int64) {
	for _, who := range []int{unix.RUSAGE_SELF, unix.RUSAGE_CHILDREN} {
		var ru unix.Rusage
		if unix.Getrusage(who, &ru) == nil {
			total += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
			if who == unix.RUSAGE_CHILDREN {
				childUser = time.Duration(ru.Utime.Nano())
			} else {
				faults = ru.Minflt
			}
		}
	}
	return total, childUser, faults
}

func (c *stepClock) log(s *session, what string) {
	if c != nil {
		s.logf("%s: %s", what, strings.Join(c.steps, ", "))
	}
}

// openInterval records the state at the interval start and creates its shadow.
func (s *session) openInterval(now time.Time) error {
	return s.openIntervalFrom(now, nil)
}

// openIntervalFrom opens an interval; snap, when not nil, is the target's
// pagemap read by the closeIntervalSnap of this same stop, and saves reading
// it again: nothing changed the target's pages in between (killing the old
// shadow and forking the new one leave every page of the target where it was).
func (s *session) openIntervalFrom(now time.Time, snap *pageSnapshot) error {
	clk := newStepClock()
	defer clk.log(s, "open")
	threads, err := s.threadStates()
	if err != nil {
		return err
	}
	clk.mark("regs")
	if snap == nil {
		maps, err := s.readMaps()
		if err != nil {
			return err
		}
		clk.mark("maps")
		if snap, err = s.readSnapshot(maps); err != nil {
			return err
		}
		clk.mark("pagemap")
	}
	maps := snap.maps
	present := snap.present()
	iv := &interval{
		meta: format.Interval{
			Index:      s.nextIndex,
			Start:      now,
			FirstSeq:   s.seq + 1,
			Threads:    threads,
			Maps:       maps,
			Replayable: true,
		},
		present: present,
		shared:  snap.shared,
	}
	for _, m := range maps {
		if m.Path == "[uprobes]" {
			// The kernel maps it once a uprobe has run in the process: a
			// probe's breakpoint then sits in the code the checkpoint
			// holds, and on eBPF the exits of its trampoline calls look
			// like rt_sigreturn.
			iv.meta.Replayable = false
			iv.meta.Reason = "uprobes have run in the process (it has an [uprobes] mapping): their breakpoints sit in its code"
		}
	}
	s.nextIndex++
	// A seccomp filter installed since the last look (the eBPF programs'
	// signal for it may be blocked) that would refuse the patched time
	// calls or the shadow's: recording ends here (seccomp.go).
	if err := s.seccompAllowsRecording(s.vdso.insn + 2); err != nil {
		return fmt.Errorf("process %d: %w; tprec stops recording and leaves it as it was", s.pid, err)
	}
	s.reapZombie(false)
	clk.mark("reap")
	var sh *shadow
	if s.kept != nil {
		sh, s.kept = s.kept, nil
	} else if s.shadowWait > 0 {
		s.shadowWait--
		s.withoutShadow(iv, "shadows killed", "the last ones were killed (out of memory), and tprec waits a few intervals before the next, so as not to call the OOM killer at every interval", "")
	} else if why := s.shadowNoRoom(); why != "" {
		s.withoutShadow(iv, "memory cgroup near its limit", why, fmt.Sprintf("no shadow: %s; recording goes on, but an interval without a shadow cannot start a replay; tprec makes one again when there is room", why))
	} else if sh, err = s.createShadow(); sh != nil {
		sh.maps = maps
		s.unnamed = sh
	}
	if refused := (cloneRefused{}); errors.As(err, &refused) {
		s.withoutShadow(iv, "clone refused", refused.Error(), fmt.Sprintf("%v; recording goes on, but an interval without a shadow cannot start a replay; trying again at each boundary", refused))
		err = nil
	} else if err != nil {
		return err
	} else if sh != nil && s.noShadow > 0 {
		s.errorf("process %d: its shadow was made again, after %d intervals without one", s.pid, s.noShadow)
		s.noShadow, s.noShadowKind = 0, ""
	}
	clk.mark("clone")
	s.shadow = sh
	s.cur = iv
	err = s.src.opened(s)
	clk.mark("opened")
	s.resetCalm()
	return err
}

// shadowDied reports why sh died during its interval, if it did: nothing
// but the OOM killer kills a shadow with SIGKILL while tprec lives (it has
// the highest OOM score, cloneShadow), and its originals are gone with it.
// The first such death of a run is reported.
func (s *session) shadowDied(sh *shadow) string {
	st, ok, err := proc.WaitNoHang(sh.pid)
	if err != nil || !ok || !st.Exited() {
		return ""
	}
	why := fmt.Sprintf("its shadow died during the interval (%v)", st)
	if st.Status.Signaled() && st.Status.Signal() == unix.SIGKILL {
		why = "its shadow was killed during the interval (SIGKILL: the OOM killer, the target's memory cgroup or the machine out of memory)"
		// Each shadow made while memory stays short calls the OOM
		// killer again, and each call is a chance for it to take the
		// target (one whose shadow is being torn down, or not made
		// yet): after k kills in a row, the next 2^(k-1) intervals (at
		// most maxShadowWait) open without one.
		s.oomStreak++
		s.shadowWait = min(1<<min(s.oomStreak-1, 10), maxShadowWait)
		if s.shadowRoom >= 0 {
			// It needed more than the room it was made with.
			s.lastCopies, s.copiesKnown = max(s.lastCopies, s.shadowRoom), true
		}
	}
	s.shadowsDied++
	if s.shadowsDied == 1 {
		s.errorf("process %d: %s; the shadow, which holds the originals of the pages the process writes, goes first so that the process does not; such an interval cannot start a replay", s.pid, why)
	}
	return why
}

// maxShadowWait bounds the intervals opened without a shadow after shadows
// were killed (shadowDied): 8 s at the default interval.
const maxShadowWait = 32

// withoutShadow opens iv without a shadow, for why: the kernel refused the
// clone in the target, the target's memory cgroup has no room for one, or
// the last ones were killed. Recording goes on, and the target with it; iv
// cannot start a replay (no originals of the pages it writes). tell, when
// not empty, is said on stderr when a run of such intervals of that kind
// begins, and openIntervalFrom says when a shadow is made again; kind names
// the cause in the status line.
func (s *session) withoutShadow(iv *interval, kind, why, tell string) {
	if kind != s.noShadowKind && tell != "" {
		s.errorf("process %d: %s", s.pid, tell)
	}
	s.noShadow++
	s.noShadowKind = kind
	iv.meta.Replayable = false
	iv.meta.Reason = "no shadow: " + why
}

// resetCalm starts what skipTick compares with afresh, at an interval start
// (after the boundary's own injected calls, whose CPU time is the target's),
// and notes the pages of the threads' rseq areas.
func (s *session) resetCalm() {
	s.calm.stops, s.calm.settled, s.calm.cpuOK, s.calm.rseq = 0, false, false, s.calm.rseq[:0]
	for _, t := range s.cur.meta.Threads {
		if t.Rseq.Addr != 0 {
			s.calm.rseq = append(s.calm.rseq, t.Rseq.Addr&^(format.PageSize-1))
		}
	}
	if cpu, err := proc.CPUTicks(s.pid); err == nil {
		s.calm.last, s.calm.cpuOK = activity{cpu: cpu}, true
	}
}

// activity is what skipTick compares: the calls and stops of the open
// interval so far, the pages it wrote, and the target's CPU time.
type activity struct {
	calls, pages int
	cpu          uint64
}

// echoPerThread bounds, per thread, the calls and the pages written that
// skipTick takes for a boundary's echo: a thread blocked in epoll_wait
// returns EINTR from the boundary's interrupt, and the program handles it
// and waits again (an idle nginx worker: 4 calls and 7 pages).
const echoPerThread = 16

// skipTick reports whether the boundary of a tick can wait because the
// target is idle, and notes what it saw. The target counts as idle when
// nothing changed since the last look (the interval's start, or the tick
// that let an echo settle): no stop reached the recorder (with the ptrace
// backend every call is two), the source has no new call or fault of it,
// and its CPU time did not grow. A first tick that finds only as much as a
// boundary's own echo (at most echoPerThread calls and pages a thread, one
// clock tick of CPU) lets it settle: it is skipped too, and the next
// compares with what it saw. The interval then goes on.
//
// The target's memory is still what the interval's shadow holds (after the
// shadow's fork every first write to a page faults), so an idle process
// costs no stop, fork or pagemap scan; such boundaries cost a sleeping
// python3 of 1 GB 4% of a CPU and tprec 20-25% (BENCHMARKS.md). Skipping is
// safe whatever the answer: a longer interval is closed and saved like any
// other, and a target that only looked idle (a thread that computed less
// than a clock tick without a call or a fault) or did a little after the
// echo makes one interval longer.
func (s *session) skipTick() bool {
	if s.cur == nil || !s.calm.cpuOK {
		return false
	}
	var now activity
	now.calls, now.pages = s.src.activity(s.calm.rseq)
	now.calls += s.calm.stops
	cpu, err := proc.CPUTicks(s.pid)
	if err != nil {
		return false
	}
	now.cpu = cpu
	switch {
	case now == s.calm.last:
		return true
	case !s.calm.settled && now.cpu <= s.calm.last.cpu+1 &&
		now.calls <= echoPerThread*len(s.cur.meta.Threads) && now.pages <= echoPerThread*len(s.cur.meta.Threads):
		s.calm.settled, s.calm.last = true, now
		return true
	}
	return false
}

// threadStates reads the state of every thread at an interval start (the
// others held by holdOthers), the leader first.
func (s *session) threadStates() (threads []format.Thread, err error) {
	tids := make([]int, 0, len(s.threads))
	for tid, t := range s.threads {
		if tid != s.pid && !t.exiting {
			tids = append(tids, tid)
		}
	}
	slices.Sort(tids)
	tids = append([]int{s.pid}, tids...)
	for _, tid := range tids {
		t := s.threads[tid]
		regs, err := proc.GetRegs(tid)
		if err != nil {
			return nil, fmt.Errorf("registers of thread %d: %w", tid, err)
		}
		xs, err := proc.GetXState(tid)
		if err != nil {
			return nil, err
		}
		mask, err := proc.GetSigmask(tid)
		if err != nil {
			return nil, err
		}
		nregs, inSys := normalizeThread(t, regs)
		if t != nil {
			// Stopped inside a call: the call the thread enters next is
			// that call resumed (skipTick).
			t.reentry = inSys
		}
		if inSys && int64(regs.Rax) == -516 && s.restarts[tid] == nil {
			// Stopped in a call the kernel resumes through restart_syscall,
			// whose entry the recorder did not see (it attached during the
			// call). Stopped again in that restart_syscall (a poll waiting
			// across several boundaries), the call is the one noted at the
			// first stop; the registers still hold its arguments, and the
			// start state re-issues it.
			call := &proc.SyscallInfo{Op: proc.SyscallEntry, Nr: regs.OrigRax,
				Args: [6]uint64{regs.Rdi, regs.Rsi, regs.Rdx, regs.R10, regs.R8, regs.R9}}
			if regs.OrigRax == unix.SYS_RESTART_SYSCALL && s.src.name() == "ebpf" {
				call = s.restartOrig[tid]
				if call != nil {
					nregs.Rax = call.Nr
				}
			} else if regs.OrigRax != unix.SYS_RESTART_SYSCALL {
				s.restartOrig[tid] = call
			}
			if call != nil {
				s.restarts[tid] = call
			}
		} else if inSys && regs.OrigRax == unix.SYS_RESTART_SYSCALL && s.restarts[tid] != nil && s.src.name() != "ebpf" {
			// Stopped again in the restart_syscall that finishes a call
			// the ptrace backend saw interrupted (syscallExit noted it): the
			// start state re-issues that call, as the log holds it, and
			// not restart_syscall, which a replay's kernel would answer
			// with EINTR (xz -T2's main thread, waiting in futex across
			// several boundaries: a trial diverged at the window's first call).
			nregs.Rax = s.restarts[tid].Nr
		}
		threads = append(threads, format.Thread{Tid: tid, Regs: nregs, XState: xs, SigMask: mask, InSyscall: inSys, Rseq: s.threadRseq(tid, regs.FsBase)})
	}
	return threads, nil
}

// normalizeThread gives the registers of thread t, stopped, as a start
// state holds them (normalize), and whether it is in a syscall.
func normalizeThread(t *thread, regs format.Regs) (format.Regs, bool) {
	if t != nil && t.entry != nil && t.held {
		// Held at a syscall-entry stop (ptrace backend): about to
		// execute the call.
		regs.Rax, regs.Rip, regs.OrigRax = regs.OrigRax, regs.Rip-2, ^uint64(0)
		return regs, true
	}
	return normalize(regs)
}

// endThreads is the state of the threads other than the one the process
// ends in (EndState.Threads): registers only, which is what a replay of
// several threads uses. A thread that did not stop (an uninterruptible
// sleep outlasting holdTimeout) is left out.
func (s *session) endThreads(endTid int) []format.Thread {
	var out []format.Thread
	for tid, t := range s.threads {
		if tid == endTid || t.exiting {
			continue
		}
		regs, err := proc.GetRegs(tid)
		if err != nil {
			continue
		}
		nregs, inSys := normalizeThread(t, regs)
		out = append(out, format.Thread{Tid: tid, Regs: nregs, InSyscall: inSys})
	}
	slices.SortFunc(out, func(a, b format.Thread) int { return a.Tid - b.Tid })
	return out
}

// closeIntervalSnap closes the interval and returns the target's pagemap it
// read to do so (nil when it read none), for the interval that opens next.
// What needs the target stopped happens now: the syscall log, the pagemap and
// the written set. Reading the originals of the written pages from the
// interval's shadow, hashing and compressing them (tens of milliseconds for a
// server that rewrites 2,000 pages an interval) needs only the shadow, which
// nothing changes: with later, that part and the ring push wait in
// s.deferred until the target runs again (runDeferred, right after the stop
// is handled, before the next one).
func (s *session) closeIntervalSnap(now time.Time, later bool) (snap *pageSnapshot, err error) {
	iv := s.cur
	if iv == nil {
		return nil, nil
	}
	s.nameNewShadow()
	s.runDeferred() // the previous interval is in the ring before this one
	clk := newStepClock()
	s.clockStepOut()
	if err := s.src.sync(s); err != nil {
		s.notReplayable("syscall log incomplete: " + err.Error())
	}
	s.resolveMmaps()
	s.sayUnsupported()
	clk.mark("sync")
	s.cur = nil
	iv.meta.End = now
	sh := s.shadow
	s.shadow = nil
	// keep: sh serves the next interval too (kept.go); it is not retired.
	keep := false
	retire := func() {
		if sh != nil && !keep {
			s.retire(sh)
		}
		sh = nil
	}
	finish := func() {
		recordingMemory(iv.syscalls.bytes) // before push: a pack may take the log
		s.ring.push(iv, later)             // a dump's close (not later) keeps the whole ring for the dump
		s.noteMemoryDrops(time.Now())
		clk.mark("push")
		retire()
		clk.mark("kill")
		clk.log(s, "close")
	}
	if sh == nil {
		finish()
		return nil, s.markLost(iv, "no shadow for this interval")
	}
	fail := func(err error) error {
		finish()
		return s.markLost(iv, err.Error())
	}
	if why := s.shadowDied(sh); why != "" {
		finish()
		iv.meta.Replayable, iv.meta.Reason = false, why
		return nil, nil
	}
	s.oomStreak = 0
	maps, err := s.readMaps()
	if err != nil {
		return nil, fail(err)
	}
	if snap, err = s.readSnapshot(maps); err != nil {
		return nil, fail(err)
	}
	clk.mark("maps+pagemap")
	written, fresh, err := s.writtenAndFresh(iv.meta.Maps, snap, sh)
	if err != nil {
		return snap, fail(err)
	}
	diverging := written // before the rules below change it: keepShadow
	// A shadow kept from an earlier interval (kept.go): the pages it no
	// longer shared at the start held what was read then, not zeros; one
	// that is now in neither process was dropped during the interval.
	div := sh.div
	if div != nil {
		fresh = withoutPages(fresh, div.addrs)
		written = mergePages(written, div.addrs)
	}
	clk.mark(fmt.Sprintf("pagemap (%d written, %d of them fresh)", len(written), len(fresh)))
	// The diverged pages are written in place, without a fault.
	s.src.checkWritten(s, iv.meta.Maps, written, div.addrsOrNil())
	written = mergePages(written, vanishedPages(iv.meta.Maps, iv.present, snap.maps, iv.remapped()))
	// The shadow shares the target's shared mappings: their start content
	// is the copy this interval's open took.
	sharedOrig, written, appeared := iv.shared.originals(snap.shared, written, freshShared(iv.meta.Maps, snap.maps))
	if appeared != 0 && iv.meta.Replayable {
		iv.meta.Replayable = false
		iv.meta.Reason = fmt.Sprintf("a page of a shared writable mapping (%#x) was first mapped during the interval: its content at the start is unknown", appeared)
	}
	// Anonymous pages that were not mapped at the interval start (the stack
	// grew into them on a fault, or a memory call of the interval made
	// them: brk, mmap) started as nothing, which a replay sees as zeros.
	// The shadow's map does not cover them, so the comparison above cannot
	// see them; without their zero originals a replay from this interval,
	// or from an earlier one where they were not mapped or not present,
	// would find them holding a later interval's content or their final one.
	grown := newPages(iv.meta.Maps, snap)
	written = withoutPages(written, fresh) // zeros at the start: nothing to read
	var next *diverged
	if later && s.o.KeepShadow {
		var why string
		if next, why = s.keepShadow(snap, sh, diverging, slices.Equal(iv.meta.Maps, snap.maps)); next != nil {
			keep = true
			clk.mark(fmt.Sprintf("shadow kept (%d diverged pages read)", len(next.addrs)))
		} else {
			clk.mark("shadow not kept: " + why)
		}
	}
	s.lastWritten = len(written)
	if s.oomStreak == 0 {
		// What the shadow kept: the room the next one needs
		// (shadowNoRoom), known before the open that follows.
		s.lastCopies, s.copiesKnown = int64(len(written))*format.PageSize, true
	}
	// readPart reads the originals of part into dst: from the shadow, or
	// for a diverged page of a kept shadow from what was read at the start.
	readPart := func(part []uint64, dst []byte) {
		if div != nil {
			var rest []uint64
			var at []int
			for i, a := range part {
				if c := div.find(a); c != nil {
					copy(dst[i*format.PageSize:], c)
				} else {
					rest, at = append(rest, a), append(at, i)
				}
			}
			if len(rest) < len(part) {
				if cap(s.restBuf) < len(rest)*format.PageSize {
					s.restBuf = nil
					s.restBuf = make([]byte, (len(rest)+len(rest)/4)*format.PageSize)
					s.noteKeptBuffers()
				}
				buf := s.restBuf[:len(rest)*format.PageSize]
				s.readShadow(iv, sh, rest, buf)
				for j, i := range at {
					part[i] = rest[j]
					copy(dst[i*format.PageSize:], buf[j*format.PageSize:(j+1)*format.PageSize])
				}
				return
			}
		}
		s.readShadow(iv, sh, part, dst)
	}
	// A diverged page that holds at the end what it held at the start was
	// not written (or was written back): no original.
	dropUnchanged := func() {
		if same := unchanged(written, div, next); len(same) > 0 {
			written = withoutPages(written, same)
		}
		s.divSeen, s.divChanged = 0, 0
		if div != nil && next != nil {
			s.divSeen, s.divChanged = len(div.addrs), countIn(div.addrs, written)
		}
	}
	var buf []byte
	read := func() {
		dropUnchanged()
		s.ring.beginOriginals(len(written) + len(sharedOrig))
		buf = s.ring.originalsBuf(len(written))
		readPart(written, buf)
		// Nothing more is read from it: its copies go now, not after
		// the hashing and compressing below, while the next shadow's
		// are already growing.
		retire()
		clk.mark("read")
	}
	// storePart stores the originals of part, read into buf.
	storePart := func(part []uint64, buf []byte) {
		for i, a := range part {
			if a != 0 {
				s.ring.addPage(iv, a, buf[i*format.PageSize:(i+1)*format.PageSize])
			}
		}
	}
	storeRest := func() {
		for _, a := range slices.Concat(fresh, grown) {
			iv.meta.Written = append(iv.meta.Written, format.PageRef{Addr: a, Hash: format.ZeroHash})
		}
		for _, p := range sharedOrig {
			s.ring.addPage(iv, p.addr, p.data)
		}
		clk.mark("store")
	}
	store := func() {
		storePart(written, buf)
		buf = nil
		storeRest()
		finish()
	}
	// stream reads and stores the originals a part at a time, when there
	// are more than the ring keeps as delta sources (then no stored page
	// refers to the buffer after its addPage): a program rewriting a
	// gigabyte an interval had tprec hold a buffer of all its originals
	// besides the ring, 0.8-1 GB resident. The shadow lives until the last
	// part is read.
	stream := func() {
		dropUnchanged()
		s.ring.beginOriginals(len(written) + len(sharedOrig))
		part := s.ring.originalsBuf(maxDeltaSources)
		for lo := 0; lo < len(written); lo += maxDeltaSources {
			addrs := written[lo:min(lo+maxDeltaSources, len(written))]
			readPart(addrs, part)
			storePart(addrs, part)
		}
		retire()
		clk.mark("read and store, a part at a time")
		storeRest()
		finish()
	}
	if !later {
		// A dump's close, the target held: a part at a time too when
		// there are many, in one buffer instead of one page fault per
		// page in a new one. shuf, which had moved its 600 MB buffer
		// (every page of the old place an original), was held 5.3 s
		// while 186,000 pages were read into a new buffer and stored.
		if len(written) > maxDeltaSources {
			stream()
		} else {
			read()
			store()
		}
		return snap, nil
	}
	if keep {
		// The next interval's open takes it (openIntervalFrom); the
		// deferred work below reads div, not this.
		sh.div = next
		s.kept = sh
	}
	if why, _ := s.roomShort(); !keep && why != "" {
		// The target's memory cgroup is short of room: while this shadow
		// lives, each page the target writes that it still shares with
		// it costs a new one, and the OOM killer may take the shadow as
		// tprec reads it. The kernel frees a killed process's memory
		// only when its last user lets go of it, here the read, and
		// the OOM killer, seeing its victim gone from the cgroup with
		// the memory still charged, took the target (twice in one CI
		// run). So the shadow is read, killed and collected while the
		// target is still stopped: its copies are uncharged before the
		// target writes again.
		read()
		s.reapZombie(true)
		clk.mark("reaped")
		s.deferred = append(s.deferred, store)
	} else if len(written) > maxDeltaSources {
		s.deferred = append(s.deferred, stream)
	} else {
		s.deferred = append(s.deferred, func() { read(); store() })
	}
	if keep {
		n := len(next.addrs)
		s.deferred = append(s.deferred, func() { s.growDivergedBuf(n) })
	}
	return snap, nil
}

// vanishedPages lists the pages of mappings that existed at the interval
// start and are gone at its end, or now hold something else (unmapped,
// replaced by another mapping, moved), or were unmapped or replaced during
// the interval (remapped: the ranges its calls mapped, unmapped or moved),
// even if the same file is mapped there again at the end: those present at
// the start, and for a file mapping of at most maxMappedAll bytes all its
// pages (a page the program first touches later in the window is read from
// the file). Nothing wrote them, but nothing can give their start content at
// the dump either: the final state may no longer have them. The shadow still
// does, so they are saved as originals like written pages (a program that
// maps a file, reads it and unmaps it in a loop has such a mapping at most
// interval starts).
func vanishedPages(start []format.Mapping, present []pageRun, now []format.Mapping, remapped []format.Span) []uint64 {
	// Sorted by start, so that a page looks up the spans that may hold it
	// rather than all of them (a malloc-heavy program maps and unmaps
	// thousands of times an interval, and this runs during the stop).
	remapped = slices.Clone(remapped)
	slices.SortFunc(remapped, func(a, b format.Span) int { return cmp.Compare(a.Lo, b.Lo) })
	reach := make([]uint64, len(remapped)) // reach[i]: highest hi of spans 0..i
	for i, r := range remapped {
		reach[i] = r.Hi
		if i > 0 {
			reach[i] = max(reach[i], reach[i-1])
		}
	}
	inRemapped := func(a uint64) bool {
		// Some span covers a if one starting at or below a ends above it:
		// reach gives the furthest end among those.
		i := sort.Search(len(remapped), func(i int) bool { return remapped[i].Lo > a }) - 1
		return i >= 0 && reach[i] > a
	}
	gone := func(a uint64) bool {
		was := mappingAt(start, a)
		if was == nil || !recorded(*was) {
			return false
		}
		if is := mappingAt(now, a); is == nil || !sameBacking(*was, *is, a) {
			return true
		}
		return inRemapped(a)
	}
	var out []uint64
	for _, r := range present {
		for a := r.start; a < r.end; a += format.PageSize {
			if gone(a) {
				out = append(out, a)
			}
		}
	}
	for _, m := range start {
		if m.Inode == 0 || m.End-m.Start > maxMappedAll || !recorded(m) {
			continue
		}
		for a := m.Start; a < m.End; a += format.PageSize {
			if gone(a) {
				out = append(out, a)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// mappingAt returns the mapping of a sorted list that holds addr.
func mappingAt(maps []format.Mapping, addr uint64) *format.Mapping {
	i := sort.Search(len(maps), func(i int) bool { return maps[i].End > addr })
	if i < len(maps) && maps[i].Start <= addr {
		return &maps[i]
	}
	return nil
}

// sameBacking reports whether addr is backed by the same thing in both
// mappings: the same file at the same offset (or the same kind of anonymous
// memory), shared or private alike.
func sameBacking(a, b format.Mapping, addr uint64) bool {
	return a.Path == b.Path && a.Inode == b.Inode && a.Dev == b.Dev && a.Shared == b.Shared &&
		a.Offset+(addr-a.Start) == b.Offset+(addr-b.Start)
}

// mergePages merges two ascending page lists, without duplicates.
func mergePages(a, b []uint64) []uint64 {
	if len(b) == 0 {
		return a
	}
	out := make([]uint64, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || i < len(a) && a[i] < b[j]:
			out = append(out, a[i])
			i++
		case i == len(a) || b[j] < a[i]:
			out = append(out, b[j])
			j++
		default:
			out = append(out, a[i])
			i, j = i+1, j+1
		}
	}
	return out
}

// newPages lists the present pages of anonymous private mappings now that
// no mapping covered at the interval start.
func newPages(start []format.Mapping, now *pageSnapshot) []uint64 {
	var out []uint64
	for i, m := range now.maps {
		if !m.AnonymousPrivate() || now.ents[i] == nil {
			continue
		}
		if k := sort.Search(len(start), func(k int) bool { return start[k].End > m.Start }); k < len(start) &&
			start[k].Start <= m.Start && start[k].End >= m.End {
			continue // inside one mapping of the start: the usual case
		}
		for j, e := range now.ents[i] {
			a := m.Start + uint64(j)*format.PageSize
			if e&(proc.PMPresent|proc.PMSwapped) != 0 && !format.Mapped(start, a) {
				out = append(out, a)
			}
		}
	}
	return out
}

func (s *session) markLost(iv *interval, why string) error {
	iv.meta.Replayable = false
	if iv.meta.Reason == "" {
		iv.meta.Reason = "page originals lost: " + why
	}
	return nil
}

func (s *session) notReplayable(why string) {
	if s.cur != nil && s.cur.meta.Replayable {
		s.cur.meta.Replayable = false
		s.cur.meta.Reason = why
	}
}

// recorded reports whether a mapping's pages are part of the checkpoint.
func recorded(m format.Mapping) bool {
	return m.Prot&format.ProtRead != 0 && !proc.Special(m)
}

// pageSnapshot is the target's pagemap over its mappings, read once per
// boundary: the close compares it with the shadow's, and the interval that
// opens in the same stop takes its present pages from it. Reading the
// pagemap walks the page tables (12 ms for 1 GB resident here).
type pageSnapshot struct {
	maps   []format.Mapping
	ents   [][]uint64 // per mapping, one entry per page; nil for special ones
	shared *sharedPages
}

// readSnapshot reads the target's pagemap over maps: the recorded mappings
// (present pages) and the private ones (written pages).
func (s *session) readSnapshot(maps []format.Mapping) (*pageSnapshot, error) {
	snap, err := s.readSnapshotOf(maps, func(m format.Mapping) bool { return !proc.Special(m) })
	if err != nil {
		return nil, err
	}
	snap.shared = s.readShared(snap)
	return snap, nil
}

func (s *session) readSnapshotOf(maps []format.Mapping, keep func(format.Mapping) bool) (*pageSnapshot, error) {
	snap := &pageSnapshot{maps: maps, ents: make([][]uint64, len(maps))}
	for i, m := range maps {
		if !keep(m) {
			continue
		}
		e, err := s.pm.Range(m.Start, m.End)
		if err != nil {
			return nil, err
		}
		snap.ents[i] = e
	}
	return snap, nil
}

// entry returns the entry of the page at addr, false where the snapshot has
// no mapping or no entries.
func (p *pageSnapshot) entry(addr uint64) (uint64, bool) {
	i := sort.Search(len(p.maps), func(i int) bool { return p.maps[i].End > addr })
	if i == len(p.maps) || p.maps[i].Start > addr || p.ents[i] == nil {
		return 0, false
	}
	return p.ents[i][(addr-p.maps[i].Start)/format.PageSize], true
}

// rangeOf returns the entries of [start, end), zero (not present) where the
// snapshot has no mapping, as the pagemap itself reports holes.
func (p *pageSnapshot) rangeOf(start, end uint64) []uint64 {
	i := sort.Search(len(p.maps), func(i int) bool { return p.maps[i].End > start })
	if i < len(p.maps) && p.maps[i].Start == start && p.maps[i].End == end && p.ents[i] != nil {
		return p.ents[i]
	}
	out := make([]uint64, (end-start)/format.PageSize)
	for ; i < len(p.maps) && p.maps[i].Start < end; i++ {
		m := p.maps[i]
		if p.ents[i] == nil {
			continue
		}
		lo, hi := max(m.Start, start), min(m.End, end)
		copy(out[(lo-start)/format.PageSize:], p.ents[i][(lo-m.Start)/format.PageSize:(hi-m.Start)/format.PageSize])
	}
	return out
}

// present lists the pages of recorded mappings that are in memory (or
// swapped out): the pages a replay from this interval may need.
func (p *pageSnapshot) present() []pageRun {
	var runs []pageRun
	for mi, m := range p.maps {
		if !recorded(m) {
			continue
		}
		for i, e := range p.ents[mi] {
			if e&(proc.PMPresent|proc.PMSwapped) == 0 {
				continue
			}
			a := m.Start + uint64(i)*format.PageSize
			if n := len(runs); n > 0 && runs[n-1].end == a {
				runs[n-1].end = a + format.PageSize
			} else {
				runs = append(runs, pageRun{a, a + format.PageSize})
			}
		}
	}
	return runs
}

// writtenPages compares the target's page frames (from its pagemap now)
// with the shadow's over the private mappings that existed at the interval
// start. A page is written when the two no longer share a frame (the
// copy-on-write broke), when an anonymous page appeared in the target only,
// or when it disappeared from the target.
//
// Every page is compared, not only those whose frame changed in the target
// since the interval start: a fork does not always share a page with the
// child (a page that may be pinned is copied, mm/memory.c:
// copy_present_page), and with the previous shadow still dying during the
// fork that happened here to pages that were not exclusive before it; the
// target then writes such a page in place.
func (s *session) writtenPages(maps []format.Mapping, now *pageSnapshot, sh *shadow) ([]uint64, error) {
	written, _, err := s.writtenAndFresh(maps, now, sh)
	return written, err
}

// writtenAndFresh is writtenPages that also returns, apart, the written
// pages that started as zeros: pages of anonymous private memory the
// shadow has no page for (neither in memory nor swapped out), which the
// program first touched during the interval. Reading them from the shadow
// would only fault zero pages into it, 11 us each here: a program that
// filled 350 MB of fresh memory in one interval made the next boundary's
// save take 1.0 s, and the boundary after that wait for it with the
// target stopped. Both lists are ascending.
//
// The vDSO is left out: the program never writes it, but tprec does, at
// boundaries, after the shadow's clone (the madvise calls that make a
// process's MADV_DONTFORK ranges so again): its trampoline's data area
// then holds the registers of the thread tprec injected through. Counted
// as written, that page went into the end digests with content no replay
// reproduces, and node's trial replays diverged at their end (always from
// the dump's page copy, when the registers differed from the dump shadow).
func (s *session) writtenAndFresh(maps []format.Mapping, now *pageSnapshot, sh *shadow) (written, fresh []uint64, err error) {
	for _, m := range maps {
		if m.Shared || proc.Special(m) || m.Path == "[vdso]" {
			continue
		}
		t := now.rangeOf(m.Start, m.End)
		shEnts, err := sh.pm.Range(m.Start, m.End)
		if err != nil {
			return nil, nil, err
		}
		anon := m.AnonymousPrivate()
		for i := range t {
			if pageWritten(t[i], shEnts[i]) {
				a := m.Start + uint64(i)*format.PageSize
				written = append(written, a)
				if anon && shEnts[i]&(proc.PMPresent|proc.PMSwapped) == 0 {
					fresh = append(fresh, a)
				}
			}
		}
	}
	return written, fresh, nil
}

// withoutPages returns the pages of a that are not in b (both ascending).
func withoutPages(a, b []uint64) []uint64 {
	if len(b) == 0 {
		return a
	}
	out := make([]uint64, 0, len(a))
	j := 0
	for _, p := range a {
		for j < len(b) && b[j] < p {
			j++
		}
		if j < len(b) && b[j] == p {
			continue
		}
		out = append(out, p)
	}
	return out
}

// pageWritten applies the rule of writtenPages to one page's target and
// shadow entries.
func pageWritten(t, sh uint64) bool {
	if sameFrame(t, sh) {
		return false
	}
	if t&proc.PMPresent != 0 && t&proc.PMFile != 0 && sh&(proc.PMPresent|proc.PMSwapped) == 0 {
		// The target maps a page that is not its own anonymous copy (a
		// file's page, or the shared zero page) where the shadow has
		// nothing yet: fork does not copy page tables of file mappings
		// without private copies (mm/memory.c: vma_needs_copy). The
		// content is what the shadow would fault in: not written.
		return false
	}
	return true
}

func sameFrame(a, b uint64) bool {
	const in = proc.PMPresent | proc.PMSwapped
	if a&in == 0 && b&in == 0 {
		return true
	}
	if a&in != b&in {
		return false
	}
	return a&proc.PMPFNMask == b&proc.PMPFNMask
}

// abandonIntervals forgets the ring and the current interval (exec replaced
// the address space, or recording stops).
func (s *session) abandonIntervals() {
	s.killShadow()
	if s.cur != nil {
		s.cur.closeFiles()
	}
	s.cur = nil
	s.ring.reset()
	s.dropMarked()
}

// threadRseq reads the rseq registration of thread tid, whose thread
// pointer is fsBase; the zero value if it has none or neither the kernel nor
// glibc can say. A kernel before Linux 5.13 cannot be asked: the area is
// then where the process's glibc keeps it (proc.GlibcRseq). Left out, the
// kernel's updates of the area (the CPU the thread runs on) showed as
// memory differing at the end of a replay (TestRecordOnOtherKernels, Debian
// 12's gzip on Debian 11's kernel).
func (s *session) threadRseq(tid int, fsBase uint64) format.Rseq {
	addr, n, sig, err := proc.GetRseq(tid)
	if err == nil {
		return format.Rseq{Addr: addr, Len: n, Sig: sig}
	}
	if !errors.Is(err, unix.EIO) || fsBase == 0 {
		return format.Rseq{}
	}
	if s.glibcRseq == nil {
		var g glibcRseq
		if maps, err := proc.ReadMaps(s.pid); err == nil {
			g.offset, g.size, g.ok = proc.GlibcRseq(s.pid, maps)
		}
		s.glibcRseq = &g
	}
	if !s.glibcRseq.ok {
		return format.Rseq{}
	}
	return format.Rseq{Addr: fsBase + uint64(s.glibcRseq.offset), Len: s.glibcRseq.size, Sig: proc.RseqSig}
}

// glibcRseq is what proc.GlibcRseq found, looked up once per process.
type glibcRseq struct {
	offset int64
	size   uint32
	ok     bool
}

// threadCPU is the CPU time of the calling thread (the tracer's, locked to
// it), 0 if unknown.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// readShadow reads the originals of part into dst from the shadow sh of
// interval iv. A page it cannot give (beyond the end of a file mapping, for
// instance) is left out (its address in part zeroed), and replay reports
// it if used.
func (s *session) readShadow(iv *interval, sh *shadow, part []uint64, dst []byte) {
	if err := proc.ReadPages(sh.pid, part, dst); err != nil {
		// Read one by one.
		for i, a := range part {
			// A page read short is left out too: the buffer
			// holds an earlier boundary's page there.
			if n, err := proc.ReadBytes(sh.pid, a, dst[i*format.PageSize:(i+1)*format.PageSize]); err != nil || n < format.PageSize {
				part[i] = 0
			}
		}
		// A shadow killed after the close looked (the OOM killer, as
		// the target ran on and wrote) gives none: the interval has
		// no originals.
		if why := s.shadowDied(sh); why != "" && iv.meta.Replayable {
			iv.meta.Replayable = false
			iv.meta.Reason = why + ", before its originals were read"
		}
	}
}
