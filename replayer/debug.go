package replayer

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync/atomic"

	"github.com/tprec/tprec/proc"

	"golang.org/x/sys/unix"
)

// Owners of an int3 byte: the engine's end-state search, the debugger, the
// end search's stop after a rep string instruction (repRun), and the stops
// of threads running at the end.
const (
	ownerEnd = 1 << iota
	ownerDbg
	ownerRep
	ownerStop // a thread's stop where the recording ended with it running (threads.go)
)

// int3 is one software breakpoint in the program's code.
type int3 struct {
	orig   byte
	owners int
	lifted bool // the original byte is back in memory for a step over it
}

// int3Table holds every int3 the replayer put into the program's code, whoever
// asked for it: one byte per address, removed when its last owner leaves. Reads
// through engine.readMem see the original bytes, so neither a debugger nor the
// end-state comparison ever sees an int3.
type int3Table struct{ at map[uint64]*int3 }

func (t *int3Table) set(mem *proc.Mem, addr uint64, owner int, on bool) error {
	b := t.at[addr]
	if on {
		if b != nil {
			b.owners |= owner
			return nil
		}
		var orig [1]byte
		if err := mem.ReadAt(orig[:], addr); err != nil {
			return err
		}
		if err := mem.WriteAt([]byte{0xcc}, addr); err != nil {
			return err
		}
		if t.at == nil {
			t.at = map[uint64]*int3{}
		}
		t.at[addr] = &int3{orig: orig[0], owners: owner}
		return nil
	}
	if b == nil || b.owners&owner == 0 {
		return nil
	}
	b.owners &^= owner
	if b.owners != 0 {
		return nil
	}
	delete(t.at, addr)
	if b.lifted {
		return nil
	}
	return mem.WriteAt([]byte{b.orig}, addr)
}

func (t *int3Table) has(addr uint64, owner int) bool {
	b := t.at[addr]
	return b != nil && b.owners&owner != 0
}

// lift puts the original byte back for one step over the instruction.
func (t *int3Table) lift(mem *proc.Mem, addr uint64) error {
	b := t.at[addr]
	if b == nil || b.lifted {
		return nil
	}
	b.lifted = true
	return mem.WriteAt([]byte{b.orig}, addr)
}

// drop rewrites the int3s lift took out.
func (t *int3Table) drop(mem *proc.Mem) error {
	for a, b := range t.at {
		if b.lifted {
			b.lifted = false
			if err := mem.WriteAt([]byte{0xcc}, a); err != nil {
				return err
			}
		}
	}
	return nil
}

// hide puts the original bytes into buf, read from memory at addr.
func (t *int3Table) hide(buf []byte, addr uint64) {
	for a, b := range t.at {
		if a >= addr && a < addr+uint64(len(buf)) && !b.lifted {
			buf[a-addr] = b.orig
		}
	}
}

// forget drops the int3s whose byte is no longer 0xcc: an address-space call
// replaced the mapping under them.
func (t *int3Table) forget(mem *proc.Mem) {
	for a, b := range t.at {
		var cur [1]byte
		if b.lifted {
			continue
		}
		if err := mem.ReadAt(cur[:], a); err != nil || cur[0] != 0xcc {
			delete(t.at, a)
		}
	}
}

// readMem reads the program's memory as the program has it: without the
// replayer's int3 bytes and the jmps of its searches in the process.
func (e *engine) readMem(buf []byte, addr uint64) error {
	if err := e.mem.ReadAt(buf, addr); err != nil {
		return err
	}
	e.int3s.hide(buf, addr)
	for _, s := range e.searches() {
		s.hide(buf, addr)
	}
	e.hideXTests(buf, addr)
	return nil
}

// WatchKind is what access triggers a watchpoint.
type WatchKind int

// Watchpoint kinds, in the x86 DR7 R/W encoding (there is no read-only kind:
// a read watchpoint is a read/write one).
const (
	WatchWrite  WatchKind = 1
	WatchRead   WatchKind = 2
	WatchAccess WatchKind = 3
)

// Watch is a hardware watchpoint: Len is 1, 2, 4 or 8 and Addr is aligned to it.
type Watch struct {
	Addr uint64
	Len  int
	Kind WatchKind
}

func (w Watch) overlaps(addr uint64, n int) bool {
	return addr < w.Addr+uint64(w.Len) && w.Addr < addr+uint64(n)
}

// tracker counts the arrivals at one address since the current stretch (the
// run of instructions since the last completed syscall) began. clean says the
// int3 has been there since the stretch began, so the count is exact.
//
// At the end search's address, while the process compares its passes there
// itself (endsearch.go), a tracker that is not a breakpoint of the
// debugger's counts with the process instead of an int3 (search): the
// arrivals are the passes the code counted since the stretch began (off
// then) and those the engine saw by single steps (stepped), which the
// code, lifted for each step, does not count. An int3 there would make
// each of the passes a stop: going back from the end of a loop crashed
// from outside (a lua loop: 764,244 passes) counted them all, twice.
type tracker struct {
	count int
	clean bool
	// search counts the passes, nil for an int3; stepped and off as above.
	search       *endInProcess
	stepped, off int
}

// countsInProcess returns the end search a tracker at addr can count with:
// one compared in the process with a jmp at addr that displaces the
// instruction there alone (a punned one too: a jump to the next
// instruction, whose bytes it shares, runs that instruction, and only a
// pass at addr takes the jmp).
func (e *engine) countsInProcess(addr uint64) *endInProcess {
	s := e.bp.inproc
	if s == nil || !e.bp.active || s.displaced[0] != addr || s.ret != 0 || len(s.interior) > 0 {
		return nil
	}
	return s
}

// refreshCounts brings the counts kept by the process up to date.
func (d *debugState) refreshCounts() {
	for _, t := range d.track {
		if t.search != nil {
			t.count = t.stepped + t.search.passes() - t.off
		}
	}
}

// debugState is the engine's state when a debugger drives it.
type debugState struct {
	track   map[uint64]*tracker // addresses whose arrivals are counted (all hold an int3)
	user    map[uint64]bool     // of those, where the debugger stops
	keep    map[uint64]bool     // tracked for a position, not pruned at stretch starts
	watches []Watch
	// softVals: where the debug registers do not work, the watched bytes
	// as last seen; the program then runs by single steps while a
	// watchpoint is set, and a write watchpoint fires when they change.
	softVals [][]byte
	dr7      uint64 // what the watchpoints enable in DR7
	hits     int    // watchpoint triggers since the stretch began
	catch    catchSet
	// atEntry: stopped at a syscall-entry stop the engine already handled;
	// entryRegs are the registers the program had there.
	atEntry   bool
	entryRegs proc.Regs
	// With several threads: entryDue is the entry of a parked thread the
	// engine handled when it made that thread current, to be reported as
	// the next event; sysAt is the address of the last syscall
	// instruction any thread executed; entry says, for the last entry
	// reported, what ran just before it (Session.beforeEntry).
	entryDue   *event
	holdDue    *event      // the current thread stands at its stop: held at the next resume
	from       resumePoint // where the last resume started
	sysAt      uint64
	entry      entryMark
	stepping   bool         // the last resume was a single step of ours
	interrupt  *atomic.Bool // a stop was requested from outside
	ended      *Result
	watchClean bool // the watchpoints have been there since the stretch began
	fresh      bool // no instruction of the stretch has run yet
	// snap is called at each stretch start, to leave a snapshot behind.
	snap func(*engine)
	// limit bounds the arrivals counted at one address by a re-execution
	// the debugger did not ask for (going back), 0 for none: see
	// MaxReverseArrivals.
	limit int
}

// resumePoint is a thread and the address it was resumed from.
type resumePoint struct {
	tid int
	rip uint64
}

// catchSet says which syscalls the debugger wants to see.
type catchSet struct {
	on  bool
	all bool
	nrs map[int]bool
}

func (c catchSet) wants(nr int) bool { return c.on && (c.all || c.nrs[nr]) }

// entryMark describes what ran just before the entry of the call that
// ends stretch k: nothing of the stretch (fresh: the entry came with the
// switch at the stretch's start), or the syscall instruction at sysAt,
// executed by the thread itself or by one that parked there.
type entryMark struct {
	k     int
	sysAt uint64
	fresh bool
	ok    bool
}

func newDebugState() *debugState {
	return &debugState{track: map[uint64]*tracker{}, user: map[uint64]bool{}, keep: map[uint64]bool{}, interrupt: &atomic.Bool{}}
}

// trackAddr starts counting arrivals at addr; clean when the stretch has not
// run yet.
func (e *engine) trackAddr(addr uint64, clean bool) error {
	d := e.dbg
	if t, ok := d.track[addr]; ok {
		if t.search == nil || !d.user[addr] {
			return nil
		}
		// A breakpoint of the debugger's now: it stops at each arrival,
		// counted by its int3 from here on.
		d.refreshCounts()
		t.search = nil
		if err := e.endSearchStops(); err != nil {
			return err
		}
		return e.int3s.set(e.mem, addr, ownerDbg, true)
	}
	if s := e.countsInProcess(addr); s != nil && !d.user[addr] {
		d.track[addr] = &tracker{clean: clean, search: s, off: s.passes()}
		return nil
	}
	if s := e.bp.inproc; s != nil && underJmp(s.displaced[0], s.size, addr) {
		// A breakpoint under the end search's jmp, or on the bytes of the
		// next instruction a punned one shares: the search stops at
		// every pass from now on.
		if err := e.endSearchStops(); err != nil {
			return err
		}
	}
	if err := e.int3s.set(e.mem, addr, ownerDbg, true); err != nil {
		return fmt.Errorf("breakpoint at %#x: %w", addr, err)
	}
	d.track[addr] = &tracker{clean: clean}
	return nil
}

func (e *engine) untrackAddr(addr uint64) error {
	t := e.dbg.track[addr]
	delete(e.dbg.track, addr)
	if t != nil && t.search != nil {
		return nil
	}
	e.bp.inprocFailed = false
	return e.int3s.set(e.mem, addr, ownerDbg, false)
}

// stretchStart runs when a stretch begins (after a syscall completed, or at
// the start): counts restart, every count becomes exact, and addresses no
// longer wanted stop being tracked.
func (e *engine) stretchStart(rip uint64) error {
	d := e.dbg
	e.int3s.forget(e.mem)
	for a, t := range d.track {
		if !d.user[a] && !d.keep[a] || t.search == nil && !e.int3s.has(a, ownerDbg) {
			if err := e.untrackAddr(a); err != nil {
				return err
			}
		}
	}
	for a := range d.user {
		if err := e.trackAddr(a, true); err != nil {
			return err
		}
	}
	for _, t := range d.track {
		t.count, t.clean = 0, true
		if t.search != nil {
			t.stepped, t.off = 0, t.search.passes()
		}
	}
	d.hits = 0
	d.watchClean = true
	d.fresh = true
	e.arrive(rip)
	return nil
}

// overLimit fails a re-execution that has counted more than d.limit
// arrivals at one address, each a stop.
func (d *debugState) overLimit() error {
	if d == nil || d.limit == 0 {
		return nil
	}
	for a, t := range d.track {
		if t.search == nil && t.count > d.limit {
			return fmt.Errorf("going back from here means a stop at each of more than %d passes over %#x since the last syscall (a loop that makes no call): set a breakpoint nearer, or go back from a syscall or an earlier stop", d.limit, a)
		}
	}
	return nil
}

// arrive counts the thread standing at rip.
func (e *engine) arrive(rip uint64) {
	if t, ok := e.dbg.track[rip]; ok {
		t.count++
		if t.search != nil {
			t.stepped++
		}
	}
}

// setWatches loads the watchpoints into DR0-DR3 and DR7, or where those do
// not work, takes the watched bytes for single-step comparison.
func (e *engine) setWatches(ws []Watch) error {
	if len(ws) > 4 {
		return fmt.Errorf("%d watchpoints: the CPU has 4 debug address registers", len(ws))
	}
	if !e.hwbp {
		for _, w := range ws {
			if w.Kind != WatchWrite {
				return fmt.Errorf("read and access watchpoints need the debug registers, which do not work on this machine (%s); write watchpoints work, by single steps", e.noHW)
			}
		}
		e.dbg.watches = append([]Watch(nil), ws...)
		return e.syncSoftWatches()
	}
	var dr7 uint64
	for i, w := range ws {
		var ln uint64
		switch w.Len {
		case 1:
			ln = 0
		case 2:
			ln = 1
		case 4:
			ln = 3
		case 8:
			ln = 2
		default:
			return fmt.Errorf("watchpoint of %d bytes: x86 watches 1, 2, 4 or 8", w.Len)
		}
		rw := uint64(w.Kind)
		if w.Kind == WatchRead {
			rw = 3 // x86 has no read-only data breakpoint
		}
		dr7 |= 1<<(2*i) | (rw|ln<<2)<<(16+4*i)
	}
	// Every thread of the replay watches (the registers are per thread).
	// DR3 may hold a thread's stop (threads.go).
	stops := false
	for _, t := range e.threads {
		stops = stops || t.stop != nil
	}
	if stops && len(ws) > 3 {
		return fmt.Errorf("%d watchpoints: one of the 4 debug address registers stops a thread where the recording ended with it running; use at most 3", len(ws))
	}
	e.dbg.dr7 = dr7
	for _, pid := range e.stubTids() {
		// Disable first: the kernel checks each address against the
		// enabled lengths in DR7.
		if err := proc.SetDebugReg(pid, 7, 0); err != nil {
			return err
		}
		for i, w := range ws {
			if err := proc.SetDebugReg(pid, i, w.Addr); err != nil {
				return err
			}
		}
		if err := proc.SetDebugReg(pid, 7, e.dr7For(pid)); err != nil {
			return err
		}
	}
	e.dbg.watches = append([]Watch(nil), ws...)
	return nil
}

// syncSoftWatches takes the bytes software watchpoints compare with (their
// pages served first: a lazy page reads as zeros until then).
func (e *engine) syncSoftWatches() error {
	d := e.dbg
	if e.hwbp {
		return nil
	}
	d.softVals = d.softVals[:0]
	for _, w := range d.watches {
		if err := e.touch(w.Addr, w.Len); err != nil {
			return err
		}
		b := make([]byte, w.Len)
		if err := e.readMem(b, w.Addr); err != nil {
			return fmt.Errorf("watchpoint at %#x: %w", w.Addr, err)
		}
		d.softVals = append(d.softVals, b)
	}
	return nil
}

// softWatching reports that the program must run by single steps for the
// watchpoints to be seen.
func (e *engine) softWatching() bool { return !e.hwbp && len(e.dbg.watches) > 0 }

// watchTriggered reads and clears DR6 and returns the watchpoint that fired;
// without debug registers, it compares the watched bytes.
func (e *engine) watchTriggered() (Watch, bool, error) {
	if len(e.dbg.watches) == 0 {
		return Watch{}, false, nil
	}
	if !e.hwbp {
		d := e.dbg
		for i, w := range d.watches {
			b := make([]byte, w.Len)
			if err := e.readMem(b, w.Addr); err != nil {
				return Watch{}, false, fmt.Errorf("watchpoint at %#x: %w", w.Addr, err)
			}
			if !bytes.Equal(b, d.softVals[i]) {
				d.softVals[i] = b
				return w, true, nil
			}
		}
		return Watch{}, false, nil
	}
	dr6, err := proc.GetDebugReg(e.stub.tid, 6)
	if err != nil {
		return Watch{}, false, err
	}
	if dr6&0xf == 0 {
		return Watch{}, false, nil
	}
	if err := proc.SetDebugReg(e.stub.tid, 6, 0); err != nil {
		return Watch{}, false, err
	}
	for i, w := range e.dbg.watches {
		if dr6&(1<<i) != 0 {
			return w, true, nil
		}
	}
	return Watch{}, false, nil
}

// claim is the debugger's trap intercept.
func (e *engine) claim(regs proc.Regs, sig int, info []byte) bool {
	d := e.dbg
	if sig == int(unix.SIGSTOP) && d.interrupt.Load() {
		return true
	}
	if sig != int(unix.SIGTRAP) {
		return false
	}
	code := int32(le32(info[8:]))
	switch {
	case d.stepping:
		return true
	case code == 4: // TRAP_HWBKPT: a watchpoint
		return true
	case code == 0x80: // SI_KERNEL: an int3
		_, ok := e.int3s.at[regs.Rip-1]
		return ok
	}
	return false
}

// evKind says what a debugger-driven execution met.
type evKind int

const (
	dStep      evKind = iota // one instruction done
	dArrive                  // standing at a tracked address (count updated)
	dWatch                   // a watchpoint fired
	dEntry                   // at a syscall entry (already handled)
	dExit                    // a syscall completed: a new stretch began
	dEnd                     // the recorded end is reached
	dInterrupt               // stopped from outside
)

// dEvent is one thing a debugger-driven execution met.
type dEvent struct {
	kind  evKind
	addr  uint64 // dArrive: the address
	watch Watch  // dWatch
	nr    int    // dEntry, dExit
	res   *Result
	regs  proc.Regs
}

// execOpts drive exec: every event goes to onEvent, which says whether to
// stop there.
type execOpts struct {
	step    bool // one instruction, then stop
	onEvent func(ev dEvent) bool
}

// exec runs the program until onEvent asks to stop (or one instruction, with
// step). It returns the event stopped at.
func (e *engine) exec(o execOpts) (dEvent, error) {
	for {
		ev, done, err := e.execOne(o.step)
		if err != nil {
			return ev, err
		}
		e.dbg.refreshCounts()
		if err := e.dbg.overLimit(); err != nil {
			return ev, err
		}
		if ev.kind == dEnd || ev.kind == dInterrupt {
			return ev, nil
		}
		stop := o.onEvent != nil && o.onEvent(ev)
		if stop || (o.step && done) {
			return ev, nil
		}
	}
}

// execOne advances to the next event. done reports that one instruction
// completed (for a step: the step is over once done is true).
func (e *engine) execOne(step bool) (dEvent, bool, error) {
	d := e.dbg
	pid := e.stub.tid
	if d.ended != nil {
		return dEvent{kind: dEnd, res: d.ended}, true, nil
	}
	if d.atEntry {
		// Leave the syscall-entry stop: the exit must be a syscall stop.
		d.atEntry = false
		return e.finishSyscall()
	}
	if d.entryDue != nil {
		return e.takeEntry(step)
	}
	if d.holdDue != nil {
		ev := *d.holdDue
		d.holdDue = nil
		held, err := e.holdNow(ev)
		if err != nil {
			return dEvent{}, false, err
		}
		return e.after(held, step)
	}
	regs, err := proc.GetRegs(pid)
	if err != nil {
		return dEvent{}, false, err
	}
	d.from = resumePoint{tid: pid, rip: regs.Rip}
	var insn [2]byte
	isSyscall := e.readMem(insn[:], regs.Rip) == nil && insn[0] == 0x0f && insn[1] == 0x05
	_, onInt3 := e.int3s.at[regs.Rip]
	if t := d.track[regs.Rip]; t != nil && t.search != nil && t.search == e.bp.inproc {
		// Standing on the jmp of a search that counts the arrivals here:
		// this one is counted, so the jmp is lifted for a step first, as an
		// int3 would be.
		onInt3 = true
	}
	d.fresh = false
	if isSyscall {
		// Never single-step a syscall instruction: it would run for real.
		// PTRACE_SYSCALL stops at its entry, where the engine takes it over.
		if err := e.int3s.lift(e.mem, regs.Rip); err != nil {
			return dEvent{}, false, err
		}
		ev, err := e.advance(unix.PTRACE_SYSCALL, e.claim)
		if derr := e.int3s.drop(e.mem); derr != nil && err == nil {
			err = derr
		}
		if err == nil {
			// The call's outputs are reported by outputHitsWatch.
			err = e.syncSoftWatches()
		}
		if err != nil {
			return dEvent{}, false, err
		}
		return e.after(ev, step)
	}
	req := unix.PTRACE_SYSCALL
	var under *endInProcess // the end search's jmp, lifted for a step
	if step || onInt3 || e.softWatching() {
		req = unix.PTRACE_SINGLESTEP
		if err := e.int3s.lift(e.mem, regs.Rip); err != nil {
			return dEvent{}, false, err
		}
		if s := e.bp.inproc; s != nil && s.under(regs.Rip) {
			if err := e.mem.WriteAt(s.orig, s.displaced[0]); err != nil {
				return dEvent{}, false, err
			}
			under = s
		}
		d.stepping = true
	}
	if req == unix.PTRACE_SYSCALL {
		if err := e.endInProcessAgain(regs); err != nil {
			return dEvent{}, false, err
		}
	}
	ev, err := e.advance(req, e.claim)
	d.stepping = false
	if derr := e.int3s.drop(e.mem); derr != nil && err == nil {
		err = derr
	}
	if under != nil && e.bp.inproc == under {
		if werr := e.mem.WriteAt(under.patched, under.displaced[0]); err == nil {
			err = werr
		}
	}
	if err != nil {
		return dEvent{}, false, err
	}
	if ev.kind == evTrap && le32(ev.info[0:]) == uint32(unix.SIGSTOP) {
		if ev.regs, err = e.leaveSearchCode(ev.regs); err != nil {
			return dEvent{}, false, err
		}
		d.interrupt.Store(false)
		if step {
			return dEvent{kind: dStep, regs: ev.regs}, false, nil // not done: step again
		}
		return dEvent{kind: dInterrupt, regs: ev.regs}, true, nil
	}
	if req == unix.PTRACE_SINGLESTEP && ev.kind == evTrap {
		// One instruction done: a watchpoint may have fired on it, and the
		// thread now stands somewhere.
		w, fired, err := e.watchTriggered()
		if err != nil {
			return dEvent{}, false, err
		}
		if fired {
			return e.watchFired(w, ev.regs)
		}
		return e.landed(ev.regs, true)
	}
	return e.after(ev, false)
}

// leaveSearchCode steps a thread that an interrupt stopped in the end
// search's code (endsearch.go) back into the program's, where a debugger
// may look at it.
func (e *engine) leaveSearchCode(regs proc.Regs) (proc.Regs, error) {
	s := e.bp.inproc
	for n := 0; s != nil && s.inCode(regs.Rip) && n < 100; n++ {
		if err := proc.Resume(unix.PTRACE_SINGLESTEP, e.stub.tid, 0); err != nil {
			return regs, err
		}
		if _, err := proc.Wait(e.stub.tid); err != nil {
			return regs, err
		}
		var err error
		if regs, err = proc.GetRegs(e.stub.tid); err != nil {
			return regs, err
		}
	}
	return regs, nil
}

// endInProcessAgain has the process compare the end search's passes again
// before a debugger's continue, where it stopped at every pass: a
// breakpoint under the jmp that is gone now, or one that came after the
// search began (endSearchStops).
func (e *engine) endInProcessAgain(regs proc.Regs) error {
	if !e.bp.active || !e.bp.armed || e.bp.inproc != nil || e.bp.inprocFailed || e.bp.hw || e.bp.syscall || e.bp.rep.size > 0 || e.sigSearch != nil || e.inproc == nil {
		return nil
	}
	hits := e.bp.hits
	if err := e.disarmBreakpoint(); err != nil {
		return err
	}
	s, err := e.searchInProcess(e.goal(), regs.Rip)
	if err != nil {
		return err
	}
	if s == nil {
		// Failed for good, unless a breakpoint there is the reason: it
		// may go.
		e.bp.inprocFailed = !e.int3UnderJmp(e.bp.addr, 5)
		return e.armBreakpoint()
	}
	binary.LittleEndian.PutUint64(s.data[idEndPasses:], uint64(hits))
	e.bp.inproc, e.bp.armed = s, true
	return nil
}

// endSearchStops takes the end search's jmp out of the program, and the
// search goes on with a breakpoint: a stop at every pass.
func (e *engine) endSearchStops() error {
	s := e.bp.inproc
	if err := s.remove(e); err != nil {
		return err
	}
	e.logf("the end search stops at every pass from now on: a debugger's breakpoint lies under its jmp at %#x", s.displaced[0])
	return e.searchByBreakpoint(s.passes())
}

// landed handles the thread standing at a new address after an instruction.
func (e *engine) landed(regs proc.Regs, done bool) (dEvent, bool, error) {
	e.arrive(regs.Rip)
	res, moved, err := e.atEndAddr(regs)
	if res != nil || err != nil {
		return dEvent{kind: dEnd, res: res, regs: regs}, true, err
	}
	if moved {
		// A signal was delivered here: the thread stands in its handler.
		if regs, err = proc.GetRegs(e.stub.tid); err != nil {
			return dEvent{}, false, err
		}
		e.arrive(regs.Rip)
	}
	return e.standAt(regs, done)
}

// standAt reports the thread standing at regs, its arrival there counted:
// an arrival at a tracked address, else a step.
func (e *engine) standAt(regs proc.Regs, done bool) (dEvent, bool, error) {
	if _, ok := e.dbg.track[regs.Rip]; ok {
		return dEvent{kind: dArrive, addr: regs.Rip, regs: regs}, done, nil
	}
	return dEvent{kind: dStep, regs: regs}, done, nil
}

// watchFired handles the thread right after an instruction that triggered w.
func (e *engine) watchFired(w Watch, regs proc.Regs) (dEvent, bool, error) {
	e.dbg.hits++
	e.arrive(regs.Rip)
	if res, _, err := e.atEndAddr(regs); res != nil || err != nil {
		return dEvent{kind: dEnd, res: res, regs: regs}, true, err
	}
	return dEvent{kind: dWatch, watch: w, regs: regs}, true, nil
}

// atEndAddr runs the comparison with the goal (the end, or where a signal
// was delivered in user code) when the thread stands at the breakpoint's
// address; moved reports a delivery.
func (e *engine) atEndAddr(regs proc.Regs) (res *Result, moved bool, err error) {
	if !e.bp.active || !e.bp.armed || regs.Rip != e.bp.addr {
		return nil, false, nil
	}
	res, done, err := e.goalHit(regs)
	if res != nil {
		e.dbg.ended = res
	}
	if res != nil || done || err != nil {
		return res, done && res == nil, err
	}
	if e.bp.syscall {
		// As in onSignal: the next stop is that syscall's entry, which is
		// itself a divergence.
		e.bp.active = false
		return nil, false, e.disarmBreakpoint()
	}
	return nil, false, nil
}

// takeEntry reports the entry a parked thread stood at when it became
// current, which the engine handled then.
func (e *engine) takeEntry(step bool) (dEvent, bool, error) {
	ev := *e.dbg.entryDue
	e.dbg.entryDue = nil
	return e.after(ev, step)
}

// finishSyscall resumes from a syscall-entry stop to the exit.
func (e *engine) finishSyscall() (dEvent, bool, error) {
	ev, err := e.advance(unix.PTRACE_SYSCALL, e.claim)
	if err == nil {
		err = e.syncSoftWatches()
	}
	if err != nil {
		return dEvent{}, false, err
	}
	return e.after(ev, true)
}

// after turns what advance reported into a debugger event.
func (e *engine) after(ev event, step bool) (dEvent, bool, error) {
	d := e.dbg
	if ev.counted {
		// At the pass reach asked the search's code to stop at, rewound
		// to stand at its address: an arrival there.
		e.arrive(ev.regs.Rip)
		return e.standAt(ev.regs, true)
	}
	if ev.delivered {
		return e.landed(ev.regs, true)
	}
	if ev.standing {
		// At its stop, held at the next resume: an arrival there.
		e.arrive(ev.regs.Rip)
		return e.standAt(ev.regs, true)
	}
	if ev.res != nil {
		d.ended = ev.res
		switch {
		case ev.kind == evEntry:
			// The recorded exit: stand at its entry.
			d.atEntry, d.entryRegs = true, ev.regs
			d.entry = entryMark{k: e.next, sysAt: d.sysAt, fresh: d.fresh, ok: true}
		case ev.kind == evExit || ev.switched:
			// The end came with the call's exit, or with a switch to the
			// end thread where it waited (after its last call, which
			// other threads' calls may have followed). After an exit a
			// stretch began with nothing of it run yet; after a switch
			// the thread arrives where it waited, as below. Either way
			// the end is named like any other point.
			regs, err := proc.GetRegs(e.stub.tid)
			if err != nil {
				return dEvent{}, false, err
			}
			if ev.kind == evExit {
				if err := e.stretchStart(regs.Rip); err != nil {
					return dEvent{}, false, err
				}
			} else {
				e.arrive(regs.Rip)
			}
			ev.regs = regs
		case ev.kind == evSignal:
			// Found by the search in the process: the thread was moved
			// from its code to where the recording ended.
			regs, err := proc.GetRegs(e.stub.tid)
			if err != nil {
				return dEvent{}, false, err
			}
			ev.regs = regs
		}
		return dEvent{kind: dEnd, res: ev.res, regs: ev.regs}, true, nil
	}
	if ev.switched {
		// The thread that ran parked at a syscall entry: the one now
		// current either stood parked at the entry due now, or runs on
		// from where it waited, arriving there.
		if d.entryDue != nil {
			return e.takeEntry(step)
		}
		regs, err := proc.GetRegs(e.stub.tid)
		if err != nil {
			return dEvent{}, false, err
		}
		return e.landed(regs, true)
	}
	switch ev.kind {
	case evEntry:
		d.atEntry = true
		d.entryRegs = ev.regs
		d.entry = entryMark{k: e.next, sysAt: d.sysAt, fresh: d.fresh, ok: true}
		if step {
			d.atEntry = false
			return e.finishSyscall()
		}
		return dEvent{kind: dEntry, nr: ev.nr, regs: ev.regs}, false, nil
	case evExit:
		regs, err := proc.GetRegs(e.stub.tid)
		if err != nil {
			return dEvent{}, false, err
		}
		if err := e.stretchStart(regs.Rip); err != nil {
			return dEvent{}, false, err
		}
		if res, _, err := e.atEndAddr(regs); res != nil || err != nil {
			return dEvent{kind: dEnd, res: res, regs: regs}, true, err
		}
		if regs.Rip != ev.regs.Rip && d.user[regs.Rip] {
			// A signal delivered where the call returned, to a handler
			// whose first instruction has a breakpoint.
			return dEvent{kind: dArrive, addr: regs.Rip, regs: regs}, true, nil
		}
		if d.snap != nil {
			d.snap(e)
		}
		return dEvent{kind: dExit, nr: ev.nr, regs: regs}, true, nil
	case evTrap:
		if le32(ev.info[0:]) == uint32(unix.SIGSTOP) {
			d.interrupt.Store(false)
			return dEvent{kind: dInterrupt, regs: ev.regs}, true, nil
		}
		code := int32(le32(ev.info[8:]))
		if code == 4 {
			w, fired, err := e.watchTriggered()
			if err != nil {
				return dEvent{}, false, err
			}
			if fired {
				return e.watchFired(w, ev.regs)
			}
			return dEvent{kind: dStep, regs: ev.regs}, true, nil
		}
		// An int3 of the table: the thread stands at its address.
		regs := ev.regs
		regs.Rip--
		if err := proc.SetRegs(e.stub.tid, regs); err != nil {
			return dEvent{}, false, err
		}
		if e.atOwnStop(regs) {
			ev.regs = regs
			held, err := e.holdAtStop(ev)
			if err != nil {
				return dEvent{}, false, err
			}
			return e.after(held, step)
		}
		return e.landed(regs, false)
	}
	return dEvent{kind: dStep, regs: ev.regs}, false, nil
}

// outputHitsWatch reports a write watchpoint over memory the last replayed
// syscall wrote (the kernel wrote it in the recording; replay writes it from
// outside, which no debug register sees).
func (e *engine) outputHitsWatch() (Watch, bool) {
	if e.next == 0 {
		return Watch{}, false
	}
	rec := e.log[e.next-1]
	for _, w := range e.dbg.watches {
		if w.Kind == WatchRead {
			continue
		}
		for _, o := range rec.Out {
			if w.overlaps(o.Addr, len(o.Data)) {
				return w, true
			}
		}
	}
	return Watch{}, false
}
