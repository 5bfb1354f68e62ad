package replayer

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/proc"
	"github.com/tprec/tprec/syscalls"

	"golang.org/x/sys/unix"
)

// breakpoint is the breakpoint at the recorded end rip, used to find the
// point where a signal from outside or a dump request hit the program. In a
// replay without a debugger it is a hardware execution breakpoint (DR0):
// a hit is one stop, before the instruction runs, and resuming runs it (the
// kernel sets RF). In a tight loop the end search is nearly all of a replay,
// and an int3 costs two stops a hit (the trap, then a single step over the
// original instruction with the int3 out). A debugger owns the debug
// registers for its watchpoints, so with one the breakpoint is an int3 from
// the table it shares.
type breakpoint struct {
	addr     uint64
	orig     byte
	hw       bool // DR0/DR7, not an int3
	armed    bool // the int3 is in memory, or DR7 enables DR0
	active   bool // the search is on
	syscall  bool // the instruction there is `syscall`: never single-step it
	stepping bool // single-stepping over the original instruction
	// rep describes a string instruction with a rep prefix there (0 size:
	// none); repStepping says the search is single-stepping its iterations
	// with the debug register off (repStep).
	rep         repString
	repStepping bool
	// repWatching: a debug register watches the memory the instruction
	// reaches shortly before the recorded end, so that only the last
	// iterations are single-stepped (repStep).
	repWatching bool
	// repRun: where the debug registers do not work, an int3 after the
	// rep string instruction (at addr + rep.length) stops it once it has
	// run the iterations in rcx; repRest iterations are then put back in
	// rcx with rip at the instruction again (repRun).
	repRun  bool
	repRest uint64
	hits    int
	// inproc: the search compares the registers in the process
	// (endsearch.go); a stop comes only when they all match. Under a
	// debugger, a search that stops at every pass tries again at each
	// continue until it could not for another reason than a breakpoint
	// (inprocFailed; dropped breakpoints reset it).
	inproc       *endInProcess
	inprocFailed bool
	// regsMatched counts hits where only memory differed; lastWhy says how.
	regsMatched int
	lastWhy     string
	memWhy      string // what differed the first time only memory did
	// lastDiffer is the end digest that differed at the last hit where
	// only memory did, compared first at the next one.
	lastDiffer int
}

// atLogEnd runs once the last recorded syscall has completed (or at the start
// when the window has none). It returns a result when the program already
// stands at the recorded end.
func (e *engine) atLogEnd(regs proc.Regs) (*Result, error) {
	if err := e.exitsFor(nil); err != nil {
		return nil, err
	}
	end := e.end
	if end.Kind == format.EndExit || e.realFault {
		return nil, nil // the exit_group entry or the fault will come
	}
	why := e.matchEnd(regs)
	if why == "" {
		return e.verified(regs.Rip), nil
	}
	if len(regsDiff(e.end.Regs, regs)) == 0 {
		if ok, res, err := e.passOnFromEnd(why, threadHeld); ok || err != nil {
			return res, err
		}
	}
	if err := e.startSearch(regs, "the recorded end rip"); err != nil {
		return nil, err
	}
	e.bp.lastWhy = "after the last syscall: " + why
	return nil, nil
}

// maxSignalPasses bounds the search for a signal's delivery point in user
// code: a loop that makes no syscall passes its instructions millions of
// times a second, and each pass is a stop here (tens of microseconds).
const maxSignalPasses = 200000

// goal is the state the breakpoint search looks for: where the recording
// delivered a signal in user code (sigSearch), else its end.
func (e *engine) goal() format.Regs {
	if e.sigSearch != nil {
		return e.sigSearch.Regs
	}
	return e.end.Regs
}

// startSearch arms the breakpoint at the goal's rip, where the program will
// be compared with it at every pass.
func (e *engine) startSearch(regs proc.Regs, what string) error {
	rip := e.goal().Rip
	code, err := e.instructionBytes(rip)
	if err != nil {
		return e.diverge(regs.Rip, e.lastSeq(), what+" is not mapped in the replay",
			fmt.Sprintf("code at %#x", rip), err.Error())
	}
	e.bp = breakpoint{addr: rip, orig: code[0], active: true, syscall: len(code) >= 2 && code[0] == 0x0f && code[1] == 0x05, hw: e.dbg == nil && e.hwbp,
		rep: decodeRepString(code)}
	var s *endInProcess
	if code[0] == 0xc3 {
		s, err = e.searchAfterRet(e.goal(), regs.Rip)
	}
	if s == nil && err == nil {
		s, err = e.searchInProcess(e.goal(), regs.Rip)
	}
	if err != nil || s != nil {
		// Compared in the process; a re-arm (none is expected) would
		// take DR0, which leaves the jmp there alone.
		e.bp.inproc, e.bp.armed = s, true
		return err
	}
	return e.armBreakpoint()
}

// instructionBytes reads up to 6 bytes of the instruction at rip, enough to
// tell a syscall or a rep string instruction: those in rip's page, and
// those of the next page only when the bytes so far are prefixes or an
// escape, so the instruction surely goes on there (running it touches that
// page anyway; a one-byte instruction at a page's end must not pull in a
// page the window never touched, or one that is not mapped).
func (e *engine) instructionBytes(rip uint64) ([]byte, error) {
	code := make([]byte, 6)
	n := min(len(code), pageSize-int(rip%pageSize))
	if err := e.touch(rip, n); err != nil {
		return nil, err
	}
	if err := e.mem.ReadAt(code[:n], rip); err != nil {
		return nil, err
	}
	if n < len(code) && unfinished(code[:n]) {
		next := rip + uint64(n)
		if e.touch(next, len(code)-n) == nil && e.mem.ReadAt(code[n:], next) == nil {
			n = len(code)
		}
	}
	return code[:n], nil
}

// unfinished reports whether code holds only instruction prefixes, REX or
// the 0x0f escape: no opcode yet.
func unfinished(code []byte) bool {
	for _, b := range code {
		switch {
		case b == 0xf3 || b == 0xf2 || b == 0x66 || b == 0xf0 || b == 0x0f || segmentOrAddrPrefix(b) || rex(b):
		default:
			return false
		}
	}
	return true
}

// segmentOrAddrPrefix reports a segment override or the address-size prefix.
func segmentOrAddrPrefix(b byte) bool {
	return b == 0x67 || b == 0x2e || b == 0x3e || b == 0x26 || b == 0x64 || b == 0x65 || b == 0x36
}

// rex reports a REX prefix (0x40-0x4f).
func rex(b byte) bool { return b >= 0x40 && b <= 0x4f }

// searchSignals goes on from a point where every signal the recording
// delivered after the last syscall where a syscall returns is delivered: a
// signal it delivered in user code next is delivered here if the program
// stands at that point, else searched for (startSearch). It returns the
// registers, which a delivery changes, and whether a search is on.
func (e *engine) searchSignals(regs proc.Regs) (proc.Regs, bool, error) {
	for e.nextSig < len(e.sigs) {
		ev := &e.sigs[e.nextSig]
		if ev.Seq != e.ownLastSeq() || ev.AtSyscallExit() {
			return regs, false, nil
		}
		var why string
		var err error
		if regs, why, err = e.deliveryDiffer(ev, regs); err != nil {
			return regs, false, err
		}
		if why != "" {
			e.sigSearch = ev
			return regs, true, e.startSearch(regs, signalName(ev.Signo)+"'s delivery rip")
		}
		if regs, err = e.deliver(ev, regs); err != nil {
			return regs, false, err
		}
		e.nextSig++
		if regs, err = e.deliverAfter(ev.Seq, regs); err != nil {
			return regs, false, err
		}
	}
	return regs, false, nil
}

// startSignals delivers, when thread t of several first runs, the signals
// the recording delivered to it before its first call of the window.
func (e *engine) startSignals(t *rthread) error {
	if len(e.sigQ[t.rec.Tid]) == 0 {
		return nil
	}
	regs, err := proc.GetRegs(t.tid)
	if err != nil {
		return err
	}
	return e.signalsAtStart(regs)
}

// signalsAtStart delivers the current thread's signals the recording
// delivered before its first call of the window, the thread standing at
// regs, its start.
func (e *engine) signalsAtStart(regs proc.Regs) error {
	regs, err := e.deliverAfter(e.c.Intervals[e.k].FirstSeq-1, regs)
	if err != nil {
		return err
	}
	_, _, err = e.searchSignals(regs)
	return err
}

// rewound: the recording delivered a signal to a thread that a stop had
// interrupted in a call the kernel resumes, right after the stop and before
// the call ran again. The kernel had by then moved the thread back onto the
// syscall instruction with the number to issue in rax (restart_syscall's,
// or the call's own), and rcx, r11 as the instruction left them. A replay
// that makes the call once stands there with the call's number, but with
// the rcx and r11 its previous call left. It returns regs with the recorded
// values of those registers (the handler's frame saves them, and its return
// restores them), when ev is such a signal and regs stand there.
//
// Two cases. The stop was the boundary that began ev's interval: the
// interval's start state re-issues the call, and may have restart_syscall's
// number in rax. Or the thread, back in user code, took the signal on the
// syscall instruction (orig_rax -1: an interrupt, or a signal left pending
// by a handler's return; the ptrace backend's stops of every thread between
// boundaries interrupt calls too): there rcx and r11 are dead, the
// instruction overwrites them, and the search for the delivery point, which
// ends at the thread's next call, passes that instruction once, so the
// other registers and the digests place it.
func (e *engine) rewound(ev *format.SignalEvent, regs proc.Regs) (proc.Regs, bool) {
	r := ev.Regs
	if regs.Rip != r.Rip || r.Rcx != r.Rip+2 || (r.Rax != regs.Rax && r.Rax != format.SysRestartSyscall) {
		return regs, false
	}
	if r.Rax == regs.Rax && r.Rcx == regs.Rcx && r.R11 == regs.R11 {
		return regs, false // nothing to take
	}
	if !ev.AtSyscallExit() && r.Rax == regs.Rax {
		var code [2]byte
		if e.readMem(code[:], r.Rip) == nil && code == [2]byte{0x0f, 0x05} {
			regs.Rcx, regs.R11 = r.Rcx, r.R11
			return regs, true
		}
	}
	for _, iv := range e.c.Intervals {
		// The thread made no call in that interval before the signal
		// (with several threads, ev.Seq is its own last call:
		// threadSignals).
		if iv.Index != ev.Interval || ev.Seq >= iv.FirstSeq {
			continue
		}
		for _, t := range iv.Threads {
			if t.Tid == ev.Tid && t.InSyscall && t.Regs.Rip == r.Rip && t.Regs.Rax == regs.Rax {
				regs.Rax, regs.Rcx, regs.R11 = r.Rax, r.Rcx, r.R11
				return regs, true
			}
		}
	}
	return regs, false
}

// deliveryDiffer says how the program, standing at regs, differs from the
// state the recording delivered ev in ("" when it does not). When it stands
// where a rewound call is re-issued (rewound), that state is put in place
// and the registers returned are the new ones.
func (e *engine) deliveryDiffer(ev *format.SignalEvent, regs proc.Regs) (proc.Regs, string, error) {
	why := e.signalDiffer(ev, regs)
	if why == "" {
		return regs, "", nil
	}
	at, ok := e.rewound(ev, regs)
	if !ok || e.signalDiffer(ev, at) != "" {
		return regs, why, nil
	}
	if at.Rax == format.SysRestartSyscall {
		e.restartAs = int(regs.Rax)
	}
	return at, "", proc.SetRegs(e.stub.tid, at)
}

// goalHit compares the program, standing at the breakpoint's address, with
// the goal. On the recorded end it returns the result; on a signal's
// delivery point it delivers (done, with the search over, or the next one
// started).
func (e *engine) goalHit(regs proc.Regs) (res *Result, done bool, err error) {
	ev := e.sigSearch
	if ev == nil {
		return e.endBreakpointHit(regs), false, nil
	}
	e.bp.hits++
	regs, why, err := e.deliveryDiffer(ev, regs)
	if err != nil {
		return nil, true, err
	}
	if why != "" {
		e.bp.lastWhy = why
		if e.bp.hits >= maxSignalPasses {
			return nil, true, e.diverge(regs.Rip, e.lastSeq(), fmt.Sprintf("%s's delivery point not found in %d passes over its instruction", signalName(ev.Signo), e.bp.hits),
				fmt.Sprintf("delivery at rip %#x", ev.Regs.Rip), "last difference: "+why)
		}
		return nil, false, nil
	}
	if err := e.disarmBreakpoint(); err != nil {
		return nil, true, err
	}
	passes := e.bp.hits
	e.bp = breakpoint{}
	e.sigSearch = nil
	if e.opts.Verbose {
		e.logf("%s: delivery point found in user code (pass %d over its instruction)", signalName(ev.Signo), passes)
	}
	if regs, err = e.deliver(ev, regs); err != nil {
		return nil, true, err
	}
	e.nextSig++
	if regs, err = e.deliverAfter(ev.Seq, regs); err != nil {
		return nil, true, err
	}
	regs, searching, err := e.searchSignals(regs)
	if err != nil || searching {
		return nil, true, err
	}
	if e.cur != e.endThread() && !e.hasCalls(e.cur) {
		// As after a thread's last call (afterCall, which the search
		// put off): it stops where the recording ended with it running,
		// and the end is another thread's to reach.
		return nil, true, e.armStop(e.cur)
	}
	if e.next == len(e.log) {
		res, err = e.atLogEnd(regs)
	}
	return res, true, err
}

// repString is what the end search needs to know of a string instruction
// with a rep prefix (movs, stos, lods, cmps, scas, ins, outs): its element
// size, and which pointer registers it advances.
type repString struct {
	size     uint64 // bytes per iteration; 0: not a rep string instruction
	rsi, rdi bool
	length   uint64 // bytes of the instruction
	cond     bool   // cmps, scas: the flags can end it before rcx does
}

// decodeRepString decodes the prefixes and opcode at the start of code.
func decodeRepString(code []byte) repString {
	var r repString
	rep, opsize, w := false, false, false
	for i, b := range code {
		switch {
		case b == 0xf3 || b == 0xf2:
			rep = true
			continue
		case b == 0x66:
			opsize = true
			continue
		case segmentOrAddrPrefix(b):
			continue
		case rex(b): // last before the opcode
			w = b&8 != 0
			continue
		}
		if !rep {
			return r
		}
		wide := uint64(4)
		if w {
			wide = 8
		} else if opsize {
			wide = 2
		}
		switch b {
		case 0xa4, 0xa5: // movs
			r.rsi, r.rdi = true, true
		case 0xa6, 0xa7: // cmps
			r.rsi, r.rdi = true, true
		case 0xaa, 0xab, 0xae, 0xaf, 0x6c, 0x6d: // stos, scas, ins
			r.rdi = true
		case 0xac, 0xad, 0x6e, 0x6f: // lods, outs
			r.rsi = true
		default:
			return r
		}
		r.size = 1
		if b&1 == 1 {
			r.size = wide
		}
		r.length = uint64(i) + 1
		r.cond = b == 0xa6 || b == 0xa7 || b == 0xae || b == 0xaf
		return r
	}
	return r
}

// repMargin is how far before the recorded end, in bytes, a rep string
// instruction's memory is watched; the iterations from there are single
// steps. Fast-string operation may move a group of bytes per iteration and
// report the watchpoint only after the group, so the margin must exceed a
// group: the watch must fire while the end is still ahead.
const repMargin = 4096

// repApproach resumes a rep string instruction whose recorded end lies
// ahead (repStep): single steps when it is near or the debug registers do
// not work here, else a debug register (DR1, reads and writes of one byte)
// at the address the advancing pointer reaches repMargin bytes before the
// end, then single steps.
func (e *engine) repApproach(regs proc.Regs) (int, error) {
	r, want := e.bp.rep, e.goal()
	if !e.hwbp && !r.cond {
		return e.repRun(regs, want.Rcx)
	}
	if !e.hwbp || (regs.Rcx-want.Rcx)*r.size <= repMargin {
		e.bp.repStepping = true
		return unix.PTRACE_SINGLESTEP, nil
	}
	ptr := want.Rdi
	if !r.rdi {
		ptr = want.Rsi
	}
	watch := ptr - repMargin
	if regs.Eflags&0x400 != 0 {
		watch = ptr + repMargin
	}
	if err := proc.SetDebugReg(e.stub.tid, 1, watch); err != nil {
		return 0, err
	}
	// DR7: L1 (bit 2), RW1 = 11 read or write (bits 20-21), LEN1 = 00 one byte.
	if err := proc.SetDebugReg(e.stub.tid, 7, 1<<2|3<<20); err != nil {
		return 0, err
	}
	e.bp.repWatching = true
	return unix.PTRACE_SYSCALL, nil
}

// repRun runs the rep string instruction the thread stands at (its
// breakpoint lifted) until rest iterations are left, with rcx lowered by
// rest and an int3 right after the instruction: the iterations run are the
// same, and at the int3 the thread is put back at the instruction with rcx
// raised again (repRunOver). rest 0 runs the instruction out. Not for cmps
// and scas, which the flags can end early.
func (e *engine) repRun(regs proc.Regs, rest uint64) (int, error) {
	next := e.bp.addr + e.bp.rep.length
	if err := e.touch(next, 1); err != nil {
		return 0, err
	}
	if err := e.int3s.set(e.mem, next, ownerRep, true); err != nil {
		return 0, fmt.Errorf("breakpoint after the rep string instruction: %w", err)
	}
	if rest > 0 {
		regs.Rcx -= rest
		if err := proc.SetRegs(e.stub.tid, regs); err != nil {
			return 0, err
		}
	}
	e.bp.repRun, e.bp.repRest = true, rest
	return unix.PTRACE_SYSCALL, nil
}

// repRunOver handles the int3 after the instruction repRun ran: at the
// goal's iteration count, compare; else, or after a mismatch, the
// instruction is run out and the search goes on.
func (e *engine) repRunOver(regs proc.Regs) (*Result, int, error) {
	next := e.bp.addr + e.bp.rep.length
	e.bp.repRun = false
	if err := e.int3s.set(e.mem, next, ownerRep, false); err != nil {
		return nil, 0, err
	}
	regs.Rip = next
	if rest := e.bp.repRest; rest > 0 {
		e.bp.repRest = 0
		regs.Rip, regs.Rcx = e.bp.addr, regs.Rcx+rest
		if err := proc.SetRegs(e.stub.tid, regs); err != nil {
			return nil, 0, err
		}
		res, done, err := e.goalHit(regs)
		if res != nil {
			e.logf("the end lies inside a rep string instruction, with %d iterations left: reached by running the ones before", regs.Rcx)
		}
		if res != nil || done || err != nil {
			return res, unix.PTRACE_SYSCALL, err
		}
		next, err := e.repRun(regs, 0)
		return nil, next, err
	}
	if err := proc.SetRegs(e.stub.tid, regs); err != nil {
		return nil, 0, err
	}
	return nil, unix.PTRACE_SYSCALL, e.armBreakpoint()
}

// repStep reports whether a stop at the end address, before a rep string
// instruction, is the same execution of that instruction as the recorded
// end, which a signal from outside interrupted between two iterations: the
// instruction restarts at the same rip with fewer iterations left (rcx) and
// its pointers advanced to match, everything else equal. Only single steps
// reach that point: a breakpoint fires once, before the first iteration, and
// a resumed instruction runs all of them.
func (e *engine) repStep(regs proc.Regs) bool {
	r, want := e.bp.rep, e.goal()
	if r.size == 0 || regs.Rcx <= want.Rcx {
		return false
	}
	dist := (regs.Rcx - want.Rcx) * r.size
	if regs.Eflags&0x400 != 0 { // DF: the pointers go down
		dist = -dist
	}
	if (r.rdi && want.Rdi-regs.Rdi != dist) || (!r.rdi && want.Rdi != regs.Rdi) ||
		(r.rsi && want.Rsi-regs.Rsi != dist) || (!r.rsi && want.Rsi != regs.Rsi) {
		return false
	}
	// The flags too: cmps and scas set them at every iteration.
	same := regs
	same.Rcx, same.Rsi, same.Rdi, same.Eflags = want.Rcx, want.Rsi, want.Rdi, want.Eflags
	return len(regsDiff(want, same)) == 0
}

// DR7 bits for DR0: local enable; kind (bits 16-17) 00 is execution and
// length (bits 18-19) must then be 00.
const dr7ExecDR0 = 1

// armBreakpoint and disarmBreakpoint go through the engine's int3 table,
// which a debugger's breakpoints share: one int3 byte per address, whoever
// wants it.
func (e *engine) armBreakpoint() error {
	if e.bp.hw {
		if err := proc.SetDebugReg(e.stub.tid, 0, e.bp.addr); err != nil {
			return err
		}
		if err := proc.SetDebugReg(e.stub.tid, 7, dr7ExecDR0); err != nil {
			return err
		}
		e.bp.armed = true
		return nil
	}
	if err := e.int3s.set(e.mem, e.bp.addr, ownerEnd, true); err != nil {
		return fmt.Errorf("set breakpoint: %w", err)
	}
	e.bp.armed = true
	return nil
}

func (e *engine) disarmBreakpoint() error {
	if !e.bp.armed {
		return nil
	}
	if e.bp.hw {
		if err := proc.SetDebugReg(e.stub.tid, 7, 0); err != nil {
			return err
		}
		e.bp.armed = false
		return nil
	}
	if err := e.int3s.set(e.mem, e.bp.addr, ownerEnd, false); err != nil {
		return fmt.Errorf("clear breakpoint: %w", err)
	}
	e.bp.armed = false
	return nil
}

// endBreakpointHit compares the program, standing at the end breakpoint's
// address, with the recorded end. It returns the result on a match.
//
// A search in a loop whose registers repeat meets memory that differs at
// most hits (an interpreter's loop: tclsh, 7,670 of 39,168 hits in 30 s).
// So memory is compared page by page only until one differs, starting with
// the page that differed at the hit before, and only the first such hit
// says every page that differs and how; the others name one page.
func (e *engine) endBreakpointHit(regs proc.Regs) *Result {
	e.bp.hits++
	var why string
	if diffs := regsDiff(e.end.Regs, regs); len(diffs) > 0 {
		why = strings.Join(diffs, ", ")
	} else if i := e.firstEndDiffer(); i >= 0 {
		e.bp.regsMatched++
		e.bp.lastDiffer = i
		e.watchEndWord(e.end.Digests[i])
		if e.bp.memWhy == "" {
			why = e.digestsDiffer(e.end.Digests, e.rseqs, e.end.Regs.Rsp, true, endExplain)
			e.bp.memWhy = why
		} else {
			why = e.digestsDiffer(e.end.Digests[i:i+1], e.rseqs, e.end.Regs.Rsp, false, endExplain)
		}
	} else if n := e.sigsLeft(); n > 0 {
		why = fmt.Sprintf("%d recorded signals not delivered yet", n)
	} else {
		return e.verified(regs.Rip)
	}
	e.bp.lastWhy = why
	return nil
}

// firstEndDiffer returns the index of an end digest the program's memory
// does not have, or -1 when it has them all. It compares the one that
// differed at the last hit first, and says nothing of how it differs.
func (e *engine) firstEndDiffer() int {
	ds := e.end.Digests
	if len(ds) == 0 {
		return -1
	}
	first := min(e.bp.lastDiffer, len(ds)-1)
	for k := range ds {
		i := (first + k) % len(ds)
		if e.digestsDiffer(ds[i:i+1], e.rseqs, e.end.Regs.Rsp, false, endQuiet) != "" {
			return i
		}
	}
	return -1
}

// onSignal handles a signal-delivery stop. It returns the ptrace request to
// resume with when the replay goes on.
func (e *engine) onSignal(regs proc.Regs, sig int) (*Result, int, error) {
	pid := e.stub.tid
	if sig == int(unix.SIGSTOP) && e.stopReq.Load() != 0 {
		reason := "did not reach the recorded end state"
		if ev := e.sigSearch; ev != nil {
			reason = fmt.Sprintf("did not reach where the recording delivered %s", signalName(ev.Signo))
		}
		if e.stopReq.Load() == stopDeadline {
			reason += fmt.Sprintf(" within %v", e.timeout)
		} else {
			reason = "replay canceled"
		}
		actual := fmt.Sprintf("still running at rip %#x", regs.Rip)
		if e.bp.inproc != nil {
			e.bp.hits = e.bp.inproc.passes()
		}
		switch {
		case e.bp.regsMatched > 0:
			actual += fmt.Sprintf("; the registers matched at %d of %d breakpoint hits, but %s differed", e.bp.regsMatched, e.bp.hits, e.bp.memWhy)
		case e.bp.hits > 0:
			actual += fmt.Sprintf("; %d breakpoint hits, the registers never matched", e.bp.hits)
		case e.bp.active:
			actual += "; the recorded end rip was never reached"
		}
		d := e.diverge(regs.Rip, e.lastSeq(), reason, fmt.Sprintf("end at rip %#x", e.end.Regs.Rip), actual)
		d.Timeout = e.stopReq.Load() == stopDeadline
		// A search the process ran itself passed the end as fast as the
		// program runs, so running out of time there means no pass was
		// the end; one of ptrace stops may just have been slow (a
		// handler's loop of 3 million passes, searched by stops because
		// signals were left to deliver). Registers that matched with
		// other memory are a divergence either way.
		d.EndPassed = e.bp.regsMatched > 0 || e.bp.inproc != nil && e.bp.hits > 0
		return nil, 0, d
	}
	if s := e.bp.inproc; sig == int(unix.SIGTRAP) && e.bp.active && s != nil {
		if regs.Rip == s.trap+1 {
			// Every general register matches: compare the rest.
			e.bp.hits = s.passes() - 1 // goalHit counts this one
			at := s.rewindRet(s.regsAt(regs, s.displaced[0]), e.bp.addr)
			if res, done, err := e.goalHit(at); res != nil || done || err != nil {
				if res != nil && err == nil {
					// Stand where the recording ended (before the ret), in
					// the program's own code, for a debugger to look at.
					if err = proc.SetRegs(pid, at); err == nil {
						err = s.remove(e)
					}
					e.bp.inproc = nil
				}
				return res, unix.PTRACE_SYSCALL, err
			}
			return nil, unix.PTRACE_SYSCALL, nil // on through the code's miss path
		}
		if k := slices.Index(s.interior, regs.Rip); k >= 0 {
			if s.mayPun && s.retargeted == 0 {
				return nil, unix.PTRACE_SYSCALL, e.punEndSearch(s, regs.Rip)
			}
			// A jump to a displaced instruction: to its copy.
			e.retargetCall(s, k, regs.Rsp)
			return nil, unix.PTRACE_SYSCALL, s.redirect(pid, k, regs)
		}
	}
	if sig == int(unix.SIGTRAP) && e.bp.active && e.bp.repRun && regs.Rip == e.bp.addr+e.bp.rep.length+1 {
		return e.repRunOver(regs)
	}
	if sig == int(unix.SIGTRAP) && e.bp.active && e.bp.repWatching {
		// The watched byte was reached: step the iterations left.
		e.bp.repWatching = false
		if err := proc.SetDebugReg(e.stub.tid, 7, 0); err != nil {
			return nil, 0, err
		}
		if regs.Rip == e.bp.addr && regs.Rcx > e.goal().Rcx {
			e.bp.repStepping = true
			return nil, unix.PTRACE_SINGLESTEP, nil
		}
		if regs.Rip == e.bp.addr && regs.Rcx == e.goal().Rcx {
			if res, done, err := e.goalHit(regs); res != nil || done || err != nil {
				return res, unix.PTRACE_SYSCALL, err
			}
		}
		return nil, unix.PTRACE_SYSCALL, e.armBreakpoint()
	}
	if sig == int(unix.SIGTRAP) && e.bp.active && e.bp.repStepping {
		// One iteration further: compare where the recorded end stood, step
		// on while it is still ahead, else resume the search.
		if regs.Rip == e.bp.addr && regs.Rcx > e.goal().Rcx {
			return nil, unix.PTRACE_SINGLESTEP, nil
		}
		e.bp.repStepping = false
		if regs.Rip == e.bp.addr && regs.Rcx == e.goal().Rcx {
			if res, done, err := e.goalHit(regs); res != nil || done || err != nil {
				if res != nil {
					e.logf("the end lies inside a rep string instruction, with %d iterations left: reached by single steps", regs.Rcx)
				}
				return res, unix.PTRACE_SYSCALL, err
			}
		}
		return nil, unix.PTRACE_SYSCALL, e.armBreakpoint()
	}
	if sig == int(unix.SIGTRAP) && e.bp.active && e.bp.hw && e.bp.armed && regs.Rip == e.bp.addr {
		// Stopped before the instruction: compare, then resume into it
		// (nothing to step over; a `syscall` there enters as usual), or
		// step through its iterations when the end lies among them.
		if res, done, err := e.goalHit(regs); res != nil || done || err != nil {
			return res, unix.PTRACE_SYSCALL, err
		}
		if e.repStep(regs) {
			if err := e.disarmBreakpoint(); err != nil {
				return nil, 0, err
			}
			next, err := e.repApproach(regs)
			return nil, next, err
		}
		return nil, unix.PTRACE_SYSCALL, nil
	}
	if sig == int(unix.SIGTRAP) && e.bp.active {
		if e.bp.stepping {
			e.bp.stepping = false
			return nil, unix.PTRACE_SYSCALL, e.armBreakpoint()
		}
		if e.bp.armed && regs.Rip == e.bp.addr+1 {
			if err := e.disarmBreakpoint(); err != nil {
				return nil, 0, err
			}
			regs.Rip = e.bp.addr
			if err := proc.SetRegs(pid, regs); err != nil {
				return nil, 0, err
			}
			if res, done, err := e.goalHit(regs); res != nil || done || err != nil {
				return res, unix.PTRACE_SYSCALL, err
			}
			if e.repStep(regs) {
				next, err := e.repApproach(regs)
				return nil, next, err
			}
			if e.bp.rep.size > 0 {
				// Stepping over it would run one iteration a stop.
				next, err := e.repRun(regs, 0)
				return nil, next, err
			}
			if e.bp.syscall {
				// The next stop is that syscall's entry, which is itself a
				// divergence: no need to find the place again.
				e.bp.active = false
				return nil, unix.PTRACE_SYSCALL, nil
			}
			e.bp.stepping = true
			return nil, unix.PTRACE_SINGLESTEP, nil
		}
	}
	info, err := proc.GetSiginfo(pid)
	if err != nil {
		return nil, 0, fmt.Errorf("read siginfo: %w", err)
	}
	code := int32(le32(info[8:]))
	addr := le64(info[16:])
	if sig == int(unix.SIGSEGV) && code > 0 {
		// First touch of a lazy page: serve it and restart the instruction,
		// single-stepped again where the search was stepping it. Resumed
		// instead, a rep string instruction whose last iterations were
		// being stepped ran out past the recorded end (a copy from a file
		// mapping, whose pages the trial serves as the copy reaches them:
		// TestEndInsideRepString/mapped).
		if ok, err := e.serve(addr); err != nil || ok {
			if e.bp.active && e.bp.repStepping {
				return nil, unix.PTRACE_SINGLESTEP, err
			}
			return nil, unix.PTRACE_SYSCALL, err
		}
	}
	end := e.end
	atEnd := e.realFault && e.next == len(e.log) && e.sigsLeft() == 0 && sig == end.Signo
	var wantCode int32
	var wantAddr uint64
	if atEnd {
		wantCode, wantAddr = int32(le32(end.Siginfo[8:])), le64(end.Siginfo[16:])
		if code == wantCode && addr == wantAddr {
			if why := e.matchEnd(regs); why != "" {
				return nil, 0, e.diverge(regs.Rip, e.lastSeq(), signalName(sig)+" raised in another state", "the recorded end state", why)
			}
			return e.verified(regs.Rip), 0, nil
		}
	}
	// A fault on a page replay keeps inaccessible explains itself better than
	// any comparison with the recorded end.
	if sig == int(unix.SIGSEGV) && code > 0 {
		if g, ok := e.guards.find(addr); ok {
			reason := g.reason
			if reason == "" {
				reason = fmt.Sprintf("touched page %#x not in the checkpoint", pageDown(addr))
			}
			return nil, 0, e.diverge(regs.Rip, e.lastSeq(), reason, "", fmt.Sprintf("access to %#x", addr))
		}
	}
	if atEnd {
		return nil, 0, e.diverge(regs.Rip, e.lastSeq(), signalName(sig)+" with another cause",
			fmt.Sprintf("si_code %d, address %#x", wantCode, wantAddr), fmt.Sprintf("si_code %d, address %#x", code, addr))
	}
	expected := "no signal"
	if e.next < len(e.log) {
		expected = "syscall " + e.describe(e.log[e.next].Nr, e.log[e.next].Args)
	} else if end.Kind == format.EndSignal {
		expected = fmt.Sprintf("%s at rip %#x", signalName(end.Signo), end.Regs.Rip)
	}
	d := e.diverge(regs.Rip, e.lastSeq(), "unexpected signal", expected,
		fmt.Sprintf("%s (si_code %d, address %#x)", signalName(sig), code, addr))
	if sig == int(unix.SIGILL) {
		// The instruction is at rip (a SIGILL is a fault: rip has not
		// moved past it), on a page the replay has run.
		// At most 15 bytes, not past the end of its page (the next one
		// may not be mapped).
		inst := make([]byte, min(15, pageSize-regs.Rip%pageSize))
		if e.mem.ReadAt(inst, regs.Rip) == nil {
			missing, _ := missingISA(e.c.Header.CPUFlags)
			d.Hint = illegalHint(inst, missing)
		}
	}
	return nil, 0, d
}

// matchEnd compares the stopped program with the recorded end state: the
// general registers (orig_rax aside: it describes the kernel's view, not the
// program's), fs_base/gs_base, the arithmetic flags, and the digests of the
// recorded end pages. It returns "" on a match, else what differs.
func (e *engine) matchEnd(regs proc.Regs) string {
	diffs := regsDiff(e.end.Regs, regs)
	if len(diffs) > 0 {
		return strings.Join(diffs, ", ")
	}
	return e.digestsDiffer(e.end.Digests, e.rseqs, e.end.Regs.Rsp, true, endExplain)
}

// matchEndInCall is matchEnd for a recording that ended inside the call nr,
// interrupted and set up to run again (regs normalized to "about to execute
// the syscall"). select, pselect6, ppoll, nanosleep and relative
// clock_nanosleep write the time left of their timeout back when they are
// interrupted, and no record holds that write: a page that differs only
// there is not counted as a difference, and the replay says so.
func (e *engine) matchEndInCall(regs proc.Regs, nr int, args [6]uint64) string {
	if diffs := regsDiff(e.end.Regs, regs); len(diffs) > 0 {
		return strings.Join(diffs, ", ")
	}
	addr, size := timeLeftOut(nr, args)
	pfds, pfdsLen := reventsOut(nr, args)
	var diffs []string
	for _, d := range e.end.Digests {
		why := e.digestsDiffer([]format.PageRef{d}, e.rseqs, e.end.Regs.Rsp, true, endExplain)
		switch {
		case why == "":
		case size > 0 && d.Addr < addr+size && addr < d.Addr+pageSize:
			e.logf("page %#x not compared: the interrupted %s wrote the time left of its timeout at %#x, which no record holds", d.Addr, syscalls.Name(nr), addr)
		case pfdsLen > 0 && d.Addr < pfds+pfdsLen && pfds < d.Addr+pageSize:
			e.logf("page %#x not compared: the interrupted %s wrote the revents of its descriptors at %#x, which no record holds", d.Addr, syscalls.Name(nr), pfds)
		default:
			diffs = append(diffs, why)
		}
	}
	return strings.Join(diffs, ", ")
}

// reventsOut is the pollfd array an interrupted poll or ppoll writes the
// revents of (fs/select.c do_sys_poll copies them back whatever the
// result), 8 bytes a descriptor; select leaves its sets alone then.
func reventsOut(nr int, args [6]uint64) (addr, size uint64) {
	if (nr == unix.SYS_POLL || nr == unix.SYS_PPOLL) && args[1] <= 1<<20 {
		return args[0], args[1] * 8
	}
	return 0, 0
}

// timeLeftOut is where an interrupted nr writes the time left of its
// timeout (fs/select.c poll_select_finish, kernel/time/hrtimer.c
// nanosleep_copyout): a struct timeval or timespec, 16 bytes.
func timeLeftOut(nr int, args [6]uint64) (addr, size uint64) {
	switch nr {
	case unix.SYS_SELECT, unix.SYS_PSELECT6:
		addr = args[4]
	case unix.SYS_PPOLL:
		addr = args[2]
	case unix.SYS_NANOSLEEP:
		addr = args[1]
	case unix.SYS_CLOCK_NANOSLEEP:
		if args[1]&unix.TIMER_ABSTIME == 0 {
			addr = args[3]
		}
	}
	if addr == 0 {
		return 0, 0
	}
	return addr, 16
}

// endDigests says what digestsDiffer compares with.
type endDigests int

const (
	notEnd     endDigests = iota // digests of another point (a signal's delivery)
	endQuiet                     // the end's, only whether they differ
	endExplain                   // the end's, saying how a page differs
)

// digestsDiffer compares the program's memory with recorded digests
// (format.DigestPage), reading pages not served yet without serving them.
// It names every page that differs, or with all false the first. With the
// end's digests, a page that differs only in the dead part of another
// thread's stack does not count (deadStacksOnly); with endExplain, when the
// checkpoint holds the content a page had there and that content has the
// recorded digest, it also says which bytes differ (recordedEndPage).
func (e *engine) digestsDiffer(digests []format.PageRef, rseqs []format.Rseq, rsp uint64, all bool, end endDigests) string {
	var diffs []string
	page := make([]byte, pageSize)
	for _, d := range digests {
		data, lazy, err := e.peek(d.Addr)
		if err != nil {
			return err.Error()
		}
		if !lazy {
			// The program's own bytes where an int3 or a search's jmp
			// lies: a page of code the last intervals mapped is
			// compared too (its pages count as written).
			if err := e.readMem(page, d.Addr); err != nil {
				return fmt.Sprintf("page %#x unreadable", d.Addr)
			}
			data = page
		}
		if got := format.DigestMasked(d.Addr, data, rseqs, rsp); format.HashPage(got) != d.Hash {
			if end != notEnd && e.deadStacksOnly(d, got, rseqs, rsp, end == endExplain) {
				continue
			}
			why := fmt.Sprintf("page %#x content", d.Addr)
			if end == endExplain {
				if rec := e.recordedEndPage(d.Addr); rec != nil {
					if want := format.DigestMasked(d.Addr, rec, rseqs, rsp); format.HashPage(want) == d.Hash {
						why += " (" + bytesDiffer(d.Addr, want, got) + ")"
					}
				}
			}
			diffs = append(diffs, why)
			if !all {
				break
			}
		}
	}
	return strings.Join(diffs, ", ")
}

// deadStacksOnly reports whether the end page d, as replayed (got, masked
// as its digest is), differs from the recorded one only in the dead part of
// the stack of a thread other than the one the replay ends in: below its
// stack pointer and its red zone, down to the start of its stack's mapping,
// at most format.DeadStack. A digest masks that part of the ending thread's
// stack only, and a thread that waited for a contended lock in the
// recording and found it free in the replay (racing.c lock) left the lock
// call's frames there in the recording alone: a return address and a 1,
// where the replay has zeros, failed 5 of 20 trial replays on a loaded
// machine. It takes the recorded content, when the checkpoint holds it (the
// recorder keeps such pages: minimize) and it has the recorded digest; log
// says so once per page.
func (e *engine) deadStacksOnly(d format.PageRef, got []byte, rseqs []format.Rseq, rsp uint64, log bool) bool {
	var in []format.Span
	for _, r := range e.otherDeadStacks() {
		if r.Overlaps(d.Addr, d.Addr+pageSize) {
			in = append(in, r)
		}
	}
	if len(in) == 0 {
		return false
	}
	rec := e.recordedEndPage(d.Addr)
	if rec == nil {
		return false
	}
	want := format.DigestMasked(d.Addr, rec, rseqs, rsp)
	if format.HashPage(want) != d.Hash {
		return false
	}
	for i := range got {
		a := d.Addr + uint64(i)
		if got[i] == want[i] {
			continue
		}
		if !slices.ContainsFunc(in, func(r format.Span) bool { return r.Contains(a) }) {
			return false
		}
	}
	if log && !e.deadLogged[d.Addr] {
		if e.deadLogged == nil {
			e.deadLogged = map[uint64]bool{}
		}
		e.deadLogged[d.Addr] = true
		e.logf("page %#x differs from the recording only below another thread's stack pointer (the dead part of its stack): not counted", d.Addr)
	}
	return true
}

// otherDeadStacks lists the dead parts of the stacks of the threads other
// than the ending one, where the replay is to end (deadStacksOnly).
func (e *engine) otherDeadStacks() []format.Span {
	return e.c.DeadStacksAt(e.until, e.end.Tid)
}

// recordedEndPage is the content the page at addr had where the replay is to
// end, when the checkpoint holds it: at the end of the window, its final
// content; at an interval start (Options.Until), the version that start
// saw. Else nil. Only a divergence asks for it (digestsDiffer).
func (e *engine) recordedEndPage(addr uint64) []byte {
	if data, ok := e.endPages[addr]; ok {
		return data
	}
	data := e.readEndPage(addr)
	if e.endPages == nil {
		e.endPages = map[uint64][]byte{}
	}
	e.endPages[addr] = data
	return data
}

// readEndPage reads what recordedEndPage returns from the checkpoint.
func (e *engine) readEndPage(addr uint64) []byte {
	var h format.Hash
	found := false
	if e.until < len(e.c.Intervals) {
		if e.c.Intervals[e.until].StartOmitted {
			return nil
		}
		if e.untilState == nil {
			e.untilState = e.c.StartState(e.until)
		}
		h, found = e.untilState[addr]
	} else if i := sort.Search(len(e.c.Final), func(i int) bool { return e.c.Final[i].Addr >= addr }); i < len(e.c.Final) && e.c.Final[i].Addr == addr {
		h, found = e.c.Final[i].Hash, true
	}
	if !found {
		return nil
	}
	if h == format.ZeroHash {
		return make([]byte, pageSize)
	}
	data, err := e.pages.Page(h)
	if err != nil {
		return nil
	}
	return data
}

// bytesDiffer says where a page as replayed (got) differs from the same page
// as recorded (rec): how many bytes, and the 8-byte words holding the first
// two runs of them.
func bytesDiffer(addr uint64, rec, got []byte) string {
	n, runs := 0, 0
	var shown []string
	for i := 0; i < len(got); {
		if rec[i] == got[i] {
			i++
			continue
		}
		j := i
		for j < len(got) && rec[j] != got[j] {
			j++
		}
		n += j - i
		if runs < 2 {
			lo := i &^ 7
			hi := min((j+7)&^7, lo+16)
			shown = append(shown, fmt.Sprintf("at %#x recorded % x, replayed % x", addr+uint64(lo), rec[lo:hi], got[lo:hi]))
		}
		runs++
		i = j
	}
	what := fmt.Sprintf("%d bytes differ in %d places", n, runs)
	switch {
	case n == 1:
		what = "1 byte differs"
	case runs == 1:
		what = fmt.Sprintf("%d bytes differ", n)
	}
	what += ": " + strings.Join(shown, "; ")
	if runs > len(shown) {
		what += "; ..."
	}
	return what
}

// signalDiffer compares the program with the point where the recording
// delivered ev in user code: registers, then the digests taken there.
func (e *engine) signalDiffer(ev *format.SignalEvent, regs proc.Regs) string {
	if diffs := regsDiff(ev.Regs, regs); len(diffs) > 0 {
		return strings.Join(diffs, ", ")
	}
	var rseqs []format.Rseq
	for _, iv := range e.c.Intervals {
		if iv.Index == ev.Interval {
			for _, t := range iv.Threads {
				if t.Rseq.Len != 0 {
					rseqs = append(rseqs, t.Rseq)
				}
			}
		}
	}
	digests := ev.Handler.Digests
	if e.sigQ != nil {
		// With several threads the pages the interval had written when
		// the signal came depend on where the other threads were: only
		// the thread's own stack page is compared, with the whole set of
		// registers, on the stretch of the thread from its last call to
		// its next (the search ends at that call's entry).
		digests = slices.DeleteFunc(slices.Clone(digests), func(d format.PageRef) bool { return d.Addr != ev.Regs.Rsp&^(pageSize-1) })
	}
	return e.digestsDiffer(digests, rseqs, ev.Regs.Rsp, false, notEnd)
}

// regsDiff lists the registers of regs that differ from the recorded want:
// the general registers (orig_rax aside), fs_base/gs_base and the
// arithmetic flags.
func regsDiff(want, regs proc.Regs) []string {
	var diffs []string
	cmp := func(name string, w, g uint64) {
		if w != g {
			diffs = append(diffs, fmt.Sprintf("%s %#x (recorded %#x)", name, g, w))
		}
	}
	cmp("rip", want.Rip, regs.Rip)
	cmp("rsp", want.Rsp, regs.Rsp)
	cmp("rax", want.Rax, regs.Rax)
	cmp("rbx", want.Rbx, regs.Rbx)
	cmp("rcx", want.Rcx, regs.Rcx)
	cmp("rdx", want.Rdx, regs.Rdx)
	cmp("rsi", want.Rsi, regs.Rsi)
	cmp("rdi", want.Rdi, regs.Rdi)
	cmp("rbp", want.Rbp, regs.Rbp)
	cmp("r8", want.R8, regs.R8)
	cmp("r9", want.R9, regs.R9)
	cmp("r10", want.R10, regs.R10)
	cmp("r11", want.R11, regs.R11)
	cmp("r12", want.R12, regs.R12)
	cmp("r13", want.R13, regs.R13)
	cmp("r14", want.R14, regs.R14)
	cmp("r15", want.R15, regs.R15)
	cmp("fs_base", want.FsBase, regs.FsBase)
	cmp("gs_base", want.GsBase, regs.GsBase)
	// CF PF AF ZF SF DF OF: what the program computed. TF and RF belong to
	// the debugger's handling of the stop.
	const arith = 0xcd5
	cmp("eflags", want.Eflags&arith, regs.Eflags&arith)
	return diffs
}
