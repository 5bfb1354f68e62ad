package replayer

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/internal/x86"
	"github.com/tprec/tprec/proc"

	"golang.org/x/arch/x86/x86asm"
	"golang.org/x/sys/unix"
)

// The end search in the replayed process.
//
// Where the recording ended between two calls (a signal from outside, a
// dump request, the start of the next piece of a trial replay), replay
// finds the end by stopping at every pass over the recorded rip and
// comparing the registers (startSearch). In a loop that makes no call, the
// rip is passed thousands of times a millisecond, and each pass is a ptrace
// stop of tens of microseconds: the search was most of the replay of a
// program crashed in a computation (gzip files here: 8,065 to 71,590 passes).
//
// When the replayed process has its region (inprocess.go), the search
// (run by the end thread alone: the replay runs one thread at a time)
// overwrites the instructions at the end rip with a jmp to code
// in the region that compares the general registers with the recorded
// end's and executes an int3 only when all of them match; otherwise it
// runs the instructions it displaced, moved there (rip-relative
// displacements adjusted, jumps kept going where they went), and jumps
// back after them. The engine then compares the rest (flags, memory
// digests) as at any pass. A call among the displaced instructions would
// push the copy's address: a `call rel32` is moved as a push of its own
// return address and a jmp to its target (other calls are not moved); the
// addresses of the ones
// after the first, where a jump elsewhere in the program could land, are
// watched by the debug registers, which move such a jump to their copy, a
// stop each time; the first such jump moves the search to a punned jmp
// that displaces the first instruction alone (punInstead, punTarget): its
// last bytes are the next instruction's, which stays in place.
// Only code mapped from a file and not writable is patched (JIT code may be
// rewritten or read), only with no signal left to deliver, and not at a
// rep string instruction or a `syscall`, which the search treats apart;
// otherwise the search stops at every pass. Under a debugger the jmp
// displaces one instruction (the debug registers are the debugger's), is
// hidden from its reads (engine.readMem), lifted for a step over it, and
// gives way to a breakpoint set under it (debug.go, endSearchStops).

//
// Some loops pass the end rip with the same registers every time, their
// state in memory (openssl speed counts its iterations on the stack), and
// every pass stopped: 664,125 in 35 s, where the recording had made
// millions. So the code also compares up to endWords memory words with
// the recorded end's: each time a stop finds the registers right and a
// page different, the first word that differs, where the checkpoint holds
// the page as the recording ended it, joins them (watchEndWord). The real
// end has those words too, so no pass that could be it is skipped.

// Data of the search, in the region's data part (before the records).
const (
	idEndRax    = 128 // rax at entry
	idEndAx     = 136 // ax after lahf; seto al: the flags at entry
	idEndPasses = 144 // passes over the end rip
	idEndRegs   = 152 // the goal's registers, in endRegs order, then rax
	idEndWords  = 288 // endWords of: the word's address, its recorded value
	idEndStopAt = 352 // the pass the code stops at whatever the registers, 0 for none (countStop)
	endWords    = 4
)

// endRegs are the registers the code compares before rax: their number in
// the ModRM reg field and their value in a register set.
var endRegs = []struct {
	n   byte
	get func(r *format.Regs) uint64
}{
	{4, func(r *format.Regs) uint64 { return r.Rsp }},
	{1, func(r *format.Regs) uint64 { return r.Rcx }},
	{2, func(r *format.Regs) uint64 { return r.Rdx }},
	{6, func(r *format.Regs) uint64 { return r.Rsi }},
	{7, func(r *format.Regs) uint64 { return r.Rdi }},
	{3, func(r *format.Regs) uint64 { return r.Rbx }},
	{5, func(r *format.Regs) uint64 { return r.Rbp }},
	{8, func(r *format.Regs) uint64 { return r.R8 }},
	{9, func(r *format.Regs) uint64 { return r.R9 }},
	{10, func(r *format.Regs) uint64 { return r.R10 }},
	{11, func(r *format.Regs) uint64 { return r.R11 }},
	{12, func(r *format.Regs) uint64 { return r.R12 }},
	{13, func(r *format.Regs) uint64 { return r.R13 }},
	{14, func(r *format.Regs) uint64 { return r.R14 }},
	{15, func(r *format.Regs) uint64 { return r.R15 }},
}

// endCode is where a view's search code goes: its code part's last page,
// which no site's entry uses (setupInProcess).
const endCode = ipCodeSize - pageSize

// endInProcess is a search set up in the process.
type endInProcess struct {
	trap       uint64   // the int3's address
	dataAddr   uint64   // where the code sees the data part
	words      []uint64 // addresses of the words compared (watchEndWord)
	interior   []uint64 // the displaced instructions after the first
	relocated  []uint64 // where each displaced instruction was moved
	data       []byte   // the region's data part
	redirects  int      // jumps moved to a displaced instruction's copy
	retargeted int      // calls made to go to the copy themselves (retargetCall)
	// displaced: the addresses the displaced instructions span, the first
	// where the code compares.
	displaced [2]uint64
	// ret, when the goal is a `ret` and the code compares where it returns
	// to (searchAfterRet), is the address of the return address on the
	// stack at the goal.
	ret uint64
	// punned is where the punned jmp at the goal lands (punTarget), 0 for
	// a plain one.
	punned uint64
	// orig: the bytes the jmp overwrote, at displaced[0]; patched: the
	// jmp's; size: the bytes it takes or reads (a padded punned jmp's
	// rel32 ends in the code after it).
	orig, patched []byte
	size          int
	// code: where the search's code lies (a debugger never sees a thread
	// stand there: leaveCode).
	code [2]uint64
	// goal is what the code compares with.
	goal format.Regs
	// mayPun: several instructions are displaced, and a punned jmp could
	// displace the first alone (punInstead).
	mayPun bool
}

// passes returns how many times the program reached the end rip.
func (s *endInProcess) passes() int {
	return int(binary.LittleEndian.Uint64(s.data[idEndPasses:]))
}

// countStop has the code stop at pass n whatever the registers, 0 at none:
// a debugger's position named by the arrivals at the end rip is found by
// the process counting them itself (engine.trackAddr).
func (s *endInProcess) countStop(n int) {
	binary.LittleEndian.PutUint64(s.data[idEndStopAt:], uint64(n))
}

// countStopDue reports whether the code stopped at the pass countStop
// named.
func (s *endInProcess) countStopDue() bool {
	n := binary.LittleEndian.Uint64(s.data[idEndStopAt:])
	return n != 0 && int(n) == s.passes()
}

// standAtPass rewinds the thread the search's code stopped at the pass
// countStop named to the search's address, as the program had it there,
// with that pass no longer counted by the code (the engine counts it as an
// arrival, and the jmp is lifted for the step that leaves it).
func (e *engine) standAtPass(s *endInProcess, regs proc.Regs) (proc.Regs, error) {
	at := s.regsAt(regs, s.displaced[0])
	if err := proc.SetRegs(e.stub.tid, at); err != nil {
		return regs, err
	}
	binary.LittleEndian.PutUint64(s.data[idEndPasses:], uint64(s.passes()-1))
	s.countStop(0)
	return at, nil
}

// report fills in r what the search in the process did.
func (s *endInProcess) report(r *Result) {
	r.EndPasses = s.passes()
	r.EndWords = slices.Clone(s.words)
	if s.ret != 0 {
		r.EndWords = append(r.EndWords, s.ret)
	}
	r.endRedirects, r.endRetargeted, r.endAfterRet, r.endPunned = s.redirects, s.retargeted, s.ret != 0, s.punned != 0
}

// searchAfterRet sets up the end search in the process where the goal, a
// `ret`, returns to, when that is known: the return address the recording
// ended with on the stack, in the content the checkpoint holds for that
// page. A pass there with the registers of the goal but rsp 8 higher is a
// pass over the `ret` one instruction later, which changed nothing else:
// rewound (rewindRet), it is compared with the goal as any pass. A `ret`
// ends a function, often followed within the five bytes of the jmp by the
// start of another one, which the loop then enters through the copy at a
// stop per call when the call is indirect (openssl speed: a stop per hash,
// two million in 30 s).
func (e *engine) searchAfterRet(goal format.Regs, now uint64) (*endInProcess, error) {
	if e.sigSearch != nil || goal.Rsp%pageSize > pageSize-8 {
		return nil, nil
	}
	page := e.recordedEndPage(pageDown(goal.Rsp))
	if page == nil {
		return nil, nil
	}
	to := goal
	to.Rip = binary.LittleEndian.Uint64(page[goal.Rsp%pageSize:])
	to.Rsp += 8
	if to.Rip == goal.Rip || now == to.Rip {
		return nil, nil
	}
	s, err := e.searchInProcess(to, now)
	if s != nil {
		s.ret = goal.Rsp
		e.logf("the end is a ret: the search compares where it returns to, %#x", to.Rip)
	}
	return s, err
}

// rewindRet turns the registers of a pass at the search's address into
// those of the pass over the goal: the same, or, when the search is where
// the goal's `ret` returns to, those before that `ret`.
func (s *endInProcess) rewindRet(regs proc.Regs, goal uint64) proc.Regs {
	if s.ret != 0 {
		regs.Rip, regs.Rsp = goal, regs.Rsp-8
	}
	return regs
}

// mappingAt returns the mapping holding addr where the replay is to end, as
// the recording gives it: the map at the start of interval until for a
// replay that ends there, else the one at the start of the last interval
// replayed (what that interval mapped is not in it).
func (e *engine) mappingAt(addr uint64) (format.Mapping, bool) {
	maps := e.c.Intervals[e.until-1].Maps
	if e.until < len(e.c.Intervals) {
		maps = e.c.Intervals[e.until].Maps
	}
	if m, ok := findMapping(maps, addr); ok {
		return m, true
	}
	return findMapping(e.c.Intervals[e.until-1].Maps, addr)
}

// readableAtEnd reports whether the replayed process can read addr as it
// stands at the end: by the recorded map, else by its own (the heap that
// brk grew during the last interval, which no recorded map holds).
func (e *engine) readableAtEnd(addr uint64) bool {
	if m, ok := e.mappingAt(addr); ok {
		return m.Prot&format.ProtRead != 0
	}
	maps, err := proc.ReadMaps(e.stub.pid)
	if err != nil {
		return false
	}
	m, ok := findMapping(maps, addr)
	return ok && m.Prot&format.ProtRead != 0
}

func findMapping(maps []format.Mapping, addr uint64) (format.Mapping, bool) {
	for _, m := range maps {
		if addr >= m.Start && addr < m.End {
			return m, true
		}
	}
	return format.Mapping{}, false
}

// endCompares reports whether the end compares a page of [lo, hi]: code
// there must not be changed for good (retargetCall; the jmp of a search,
// which readMem hides, comes out again).
func (e *engine) endCompares(lo, hi uint64) bool {
	for _, d := range e.end.Digests {
		if pageDown(lo) == d.Addr || pageDown(hi) == d.Addr {
			return true
		}
	}
	return false
}

// regsAt returns the program's registers at the int3: rax and the flags
// as they were at the end rip, and rip there.
func (s *endInProcess) regsAt(regs proc.Regs, rip uint64) proc.Regs {
	le := binary.LittleEndian
	regs.Rax = le.Uint64(s.data[idEndRax:])
	ax := le.Uint16(s.data[idEndAx:])
	const arith = 0xd5 | 0x800 // SF ZF AF PF CF, and OF
	regs.Eflags = regs.Eflags&^arith | uint64(ax>>8)&0xd5 | uint64(ax&1)<<11
	regs.Rip = rip
	return regs
}

// searchInProcess sets up the end search at rip in the process, whose
// thread stands at now. It returns nil, with no error, when the search must
// stop at every pass instead.
func (e *engine) searchInProcess(goal format.Regs, now uint64) (*endInProcess, error) {
	if e.bp.syscall || e.bp.rep.size > 0 {
		return nil, nil
	}
	return e.compareInProcess(goal, now)
}

// compareInProcess sets up the comparison with goal in the process, for the
// end search or a thread's stop (threads.go, stopInProcess), whose thread
// stands at now: displacing several instructions if it can, else one.
func (e *engine) compareInProcess(goal format.Regs, now uint64) (*endInProcess, error) {
	if e.dbg == nil && e.hwbp {
		// A debugger's watchpoints take the debug registers that would
		// watch the displaced instructions after the first; where the
		// registers do not work (HardwareBreakpoints), nothing would.
		if s, err := e.patchInProcess(goal, now, displaceSeveral); s != nil || err != nil {
			return s, err
		}
	}
	return e.patchInProcess(goal, now, displaceOne)
}

// displacing says how many instructions the jmp of a search in the process
// may displace.
type displacing int

const (
	// displaceOne: the instruction at the goal alone, by a punned jmp when
	// it is shorter than 5 bytes, once a jump into the instructions after
	// it came (punInstead), or when they cannot be displaced.
	displaceOne displacing = iota
	// displaceSeveral: as many as make the jmp's 5 bytes, the jumps into
	// those after the first moved to their copies by DR1-DR3 of the
	// searching thread, the only one that runs until the search ends (the
	// replay runs one thread at a time). The fast way: a punned jmp costs each pass
	// 10 ns more on this project's VM (13-15 against 3.5 ns, by hand), the
	// processor decoding the bytes it shares with the next instruction
	// both ways in turn.
	displaceSeveral
)

// displaced reads the size bytes of code at rip and decodes the
// instructions a jmp there would displace, which make at least its 5
// bytes; nil when they run past size or one cannot be moved.
func (e *engine) displaced(rip uint64, size int) (code []byte, insts []x86asm.Inst, n int) {
	code = make([]byte, size)
	if e.touch(rip, size) != nil || e.mem.ReadAt(code, rip) != nil {
		return nil, nil, 0
	}
	for n < 5 {
		inst, err := x86.Decode(code[n:])
		if err != nil || !relocatable(inst) {
			return nil, nil, 0
		}
		insts = append(insts, inst)
		n += inst.Len
	}
	return code, insts, n
}

// patchInProcess sets up the comparison with goal in the process,
// displacing the instructions at the goal as d says.
func (e *engine) patchInProcess(goal format.Regs, now uint64, d displacing) (*endInProcess, error) {
	rip := goal.Rip
	c := e.inproc
	if c == nil || e.sigSearch != nil || e.sigsLeft() > 0 || e.stopSearch != nil || d == displaceSeveral && !e.hwbp {
		return nil, nil
	}
	// Only the code of a file the program does not write: JIT code may be
	// rewritten, or read, at the end rip.
	m, ok := e.mappingAt(rip)
	if !ok || m.Inode == 0 || m.Prot&format.ProtWrite != 0 || m.Prot&format.ProtExec == 0 {
		return nil, nil
	}
	// The displaced instructions: whole, in rip's mapping, from rip on for
	// at least the 5 bytes of the jmp. Read from rip's page first, and
	// from the next page too only when they run into it: a busyworker
	// replay whose worker was to stop at the last 4 bytes of a page (an
	// instruction crossing into the next) compared its every pass there
	// at a ptrace stop.
	inPage := min(32, pageSize-int(rip%pageSize))
	code, insts, n := e.displaced(rip, inPage)
	if end := min(32, int(m.End-rip)); insts == nil && end > inPage {
		code, insts, n = e.displaced(rip, end)
	}
	if insts == nil {
		return nil, nil
	}
	// A first instruction shorter than the jmp, displaced alone: a punned
	// jmp, when a page is free where it can land.
	var pun punned
	mayPun := false
	if l := insts[0].Len; l < 5 && punJumps {
		pun = punTarget(rip, code, l, e.punBusy())
		if mayPun = pun.to != 0; d == displaceOne && mayPun {
			insts, n = insts[:1], l
		} else {
			pun = punned{}
		}
	}
	if d == displaceOne && len(insts) > 1 {
		return nil, nil
	}
	// The bytes the jmp takes or reads: its own, or for a padded punned
	// one the code's after them that make its rel32.
	size := max(n, 5+pun.pad)
	for sys, site := range c.sites {
		if at := site.patchAt(sys); rip < sys+2 && at < rip+uint64(size) {
			return nil, nil
		}
	}
	if len(insts) > 4 || now > rip && now < rip+uint64(n) {
		// DR1-DR3 watch the instructions after the first; the thread must
		// not stand among them.
		return nil, nil
	}
	if e.int3UnderJmp(rip, size) {
		return nil, nil // a debugger's breakpoint, or a thread's stop
	}
	view, ok := c.viewNear(rip)
	if !ok {
		return nil, nil
	}
	base := view + endCode
	a := newAsm(view, base)
	a.Label("entry")
	a.dataRef(idEndRax, []byte{0x48, 0x89, 0x05})    // mov [rax], rax
	a.Emit(0x9f)                                     // lahf
	a.Emit(0x0f, 0x90, 0xc0)                         // seto al
	a.dataRef(idEndAx, []byte{0x66, 0x89, 0x05})     // mov [ax], ax
	a.dataRef(idEndPasses, []byte{0x48, 0xff, 0x05}) // inc qword [passes]
	a.dataRef(idEndPasses, []byte{0x48, 0x8b, 0x05}) // mov rax, [passes]
	a.dataRef(idEndStopAt, cmpRIP(0))                // cmp rax, [stop at]
	a.jump("trap", 0x0f, 0x84)                       // je trap
	for i, r := range endRegs {
		a.dataRef(idEndRegs+8*i, cmpRIP(r.n)) // cmp REG, [goal REG]
		a.jump("miss", 0x0f, 0x85)            // jne miss
	}
	a.dataRef(idEndRax, []byte{0x48, 0x8b, 0x05})  // mov rax, [rax]
	a.dataRef(idEndRegs+8*len(endRegs), cmpRIP(0)) // cmp rax, [goal rax]
	a.jump("miss", 0x0f, 0x85)                     // jne miss
	for k := range endWords {
		a.dataRef(idEndWords+16*k, []byte{0x48, 0x8b, 0x05}) // mov rax, [word address]
		a.Emit(0x48, 0x8b, 0x00)                             // mov rax, [rax]
		a.dataRef(idEndWords+16*k+8, cmpRIP(0))              // cmp rax, [recorded value]
		a.jump("miss", 0x0f, 0x85)                           // jne miss
	}
	trap := len(a.B)
	a.Label("trap")
	a.Emit(0xcc) // int3: the engine compares the rest
	a.Label("miss")
	a.dataRef(idEndAx, []byte{0x66, 0x8b, 0x05})  // mov ax, [ax]
	a.Emit(0x04, 0x7f)                            // add al, 0x7f: OF = (al == 1)
	a.Emit(0x9e)                                  // sahf
	a.dataRef(idEndRax, []byte{0x48, 0x8b, 0x05}) // mov rax, [rax]
	s := &endInProcess{trap: base + uint64(trap), dataAddr: view + ipCodeSize, data: c.data(), goal: goal, mayPun: mayPun && len(insts) > 1}
	at := rip
	for i, inst := range insts {
		moved := a.Here()
		b, ok := moveInstruction(code[at-rip:at-rip+uint64(inst.Len)], inst, at, moved)
		if !ok {
			return nil, nil
		}
		a.Emit(b...)
		s.relocated = append(s.relocated, moved)
		if i > 0 {
			s.interior = append(s.interior, at)
		}
		at += uint64(inst.Len)
	}
	s.displaced = [2]uint64{rip, at}
	back := int64(at) - int64(a.Here()+5)
	if back != int64(int32(back)) {
		return nil, nil
	}
	a.Emit(0xe9)
	a.Emit(u32le(uint32(int32(back)))...) // jmp back, after the displaced instructions
	if err := a.Resolve(); err != nil {
		return nil, err // a label not set: the code above is wrong
	}
	if len(a.B) > pageSize {
		return nil, nil
	}
	there := int64(base) - int64(rip+5)
	if pun.to == 0 && there != int64(int32(there)) {
		return nil, nil
	}
	// The goal, then the code, then the debug registers, then the jmp.
	le := binary.LittleEndian
	for i, r := range endRegs {
		le.PutUint64(s.data[idEndRegs+8*i:], r.get(&goal))
	}
	le.PutUint64(s.data[idEndRegs+8*len(endRegs):], goal.Rax)
	le.PutUint64(s.data[idEndPasses:], 0)
	le.PutUint64(s.data[idEndStopAt:], 0)
	for k := range endWords {
		// Until used, a slot compares its own value with itself.
		le.PutUint64(s.data[idEndWords+16*k:], s.dataAddr+uint64(idEndWords+16*k+8))
	}
	copy(c.buf[ipDataSize+c.viewIndex(view)*ipCodeSize+endCode:], a.B)
	// Without working debug registers the jmp displaces one instruction
	// (displaceOne): nothing after it to watch.
	if e.hwbp {
		for k, addr := range s.interior {
			if err := proc.SetDebugReg(e.stub.tid, k+1, addr); err != nil {
				return nil, err
			}
		}
		if err := proc.SetDebugReg(e.stub.tid, 7, e.dr7For(e.stub.tid)|s.dr7()); err != nil {
			return nil, err
		}
	}
	jmp := append([]byte{0xe9}, u32le(uint32(int32(there)))...)
	if pun.to != 0 {
		// A page there, with a jmp to the code; then the jmp's own bytes,
		// its rel32's last ones being the code's already.
		page := pageDown(pun.to)
		if !c.landings[page] {
			if _, err := e.stub.injectOK(fmt.Sprintf("end search: map %#x", page), unix.SYS_MMAP, page, pageSize,
				unix.PROT_READ|unix.PROT_EXEC, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED_NOREPLACE, ^uint64(0), 0); err != nil {
				return nil, err
			}
			if c.landings == nil {
				c.landings = map[uint64]bool{}
			}
			c.landings[page] = true
		}
		abs := append([]byte{0xff, 0x25, 0, 0, 0, 0}, u64le(base)...) // jmp [rip+0]
		if err := e.mem.WriteAt(abs, pun.to); err != nil {
			return nil, fmt.Errorf("end search: write %#x: %w", pun.to, err)
		}
		jmp = pun.bytes(n)
		s.punned = pun.to
		e.logf("the jmp of the search in the process at %#x lands at %#x: its last %d bytes are the code's own (%d prefixes)", rip, pun.to, 5+pun.pad-n, pun.pad)
	}
	s.orig, s.patched, s.size = slices.Clone(code[:len(jmp)]), jmp, size
	s.code = [2]uint64{base, a.Here()}
	if err := e.mem.WriteAt(jmp, rip); err != nil {
		return nil, fmt.Errorf("end search: patch %#x: %w", rip, err)
	}
	return s, nil
}

// dr7 enables the execution breakpoints DR1-DR3 that watch the
// instructions displaced after the first.
func (s *endInProcess) dr7() uint64 {
	if s == nil {
		return 0
	}
	var dr7 uint64
	for k := range s.interior {
		dr7 |= 1 << (2 * (k + 1)) // local enable, execution
	}
	return dr7
}

// hide puts the program's own bytes where the jmp lies into buf, read
// from memory at addr (engine.readMem).
func (s *endInProcess) hide(buf []byte, addr uint64) {
	for i, b := range s.orig {
		if a := s.displaced[0] + uint64(i); a >= addr && a < addr+uint64(len(buf)) {
			buf[a-addr] = b
		}
	}
}

// under reports whether the jmp overwrote the byte at addr.
func (s *endInProcess) under(addr uint64) bool {
	return addr >= s.displaced[0] && addr < s.displaced[0]+uint64(len(s.orig))
}

// inCode reports whether rip lies in the search's code or on its punned
// jmp's landing.
func (s *endInProcess) inCode(rip uint64) bool {
	return rip >= s.code[0] && rip < s.code[1] || s.punned != 0 && rip >= s.punned && rip < s.punned+14
}

// remove puts back the instructions the search's jmp overwrote.
func (s *endInProcess) remove(e *engine) error {
	if err := e.mem.WriteAt(s.orig, s.displaced[0]); err != nil {
		return fmt.Errorf("end search: restore %#x: %w", s.displaced[0], err)
	}
	return nil
}

// punInstead moves the search s, whose thread jumped into one of the
// instructions it displaces after the first (at), to a punned jmp that
// displaces the first alone: that jump is likely a loop's, which would
// otherwise make every pass a stop (bc's main loop jumps to the instruction
// after a 3-byte end: 17 million stops). It returns nil, with s taken out,
// when it cannot place that jmp after all. The passes counted and the words
// compared carry over; the thread goes on at at, where the code is the
// program's own again.
func (e *engine) punInstead(s *endInProcess, at uint64) (*endInProcess, error) {
	passes, words := s.passes(), slices.Clone(s.data[idEndWords:idEndWords+16*endWords])
	if err := s.remove(e); err != nil {
		return nil, err
	}
	moved, err := e.patchInProcess(s.goal, at, displaceOne)
	if moved == nil || err != nil {
		return nil, err
	}
	binary.LittleEndian.PutUint64(moved.data[idEndPasses:], uint64(passes))
	copy(moved.data[idEndWords:], words)
	moved.words, moved.ret, moved.redirects = s.words, s.ret, s.redirects+1
	e.logf("a jump to %#x, among the instructions the search in the process displaced: its jmp displaces the one at %#x alone now, punned", at, s.displaced[0])
	return moved, nil
}

// punEndSearch moves the end search to a punned jmp (punInstead), or to a
// breakpoint when it cannot.
func (e *engine) punEndSearch(s *endInProcess, at uint64) error {
	moved, err := e.punInstead(s, at)
	if err != nil || moved != nil {
		e.bp.inproc = moved
		return err
	}
	e.logf("a jump to %#x, among the instructions the end search displaced, and no punned jmp: a stop at each pass from now on", at)
	return e.searchByBreakpoint(s.passes())
}

// searchByBreakpoint goes on with the end search, whose jmp is out of the
// program, by a breakpoint at the goal: a stop at every pass, passes
// already counted.
func (e *engine) searchByBreakpoint(passes int) error {
	e.bp.inproc, e.bp.armed, e.bp.hits = nil, false, passes
	return e.armBreakpoint()
}

// underJmp reports whether addr lies under the size bytes of a search's
// jmp at rip (5, more for a padded punned jmp; a punned one's last bytes
// are the next instruction's).
func underJmp(rip uint64, size int, addr uint64) bool {
	return addr >= rip && addr < rip+uint64(size)
}

// int3UnderJmp reports whether an int3 of the table lies under the size
// bytes of a jmp at rip.
func (e *engine) int3UnderJmp(rip uint64, size int) bool {
	for a := range e.int3s.at {
		if underJmp(rip, size, a) {
			return true
		}
	}
	return false
}

// redirect sends the thread that jumped to the displaced instruction
// interior[k] of s (a debug register trap, regs) to that instruction's copy.
func (s *endInProcess) redirect(tid, k int, regs proc.Regs) error {
	regs.Rip = s.relocated[k+1]
	s.redirects++
	return proc.SetRegs(tid, regs)
}

// searches returns the searches in the process whose jmp is in the code:
// the end search's and a thread's stop search.
func (e *engine) searches() []*endInProcess {
	var live []*endInProcess
	for _, s := range []*endInProcess{e.bp.inproc, e.stopSearch} {
		if s != nil {
			live = append(live, s)
		}
	}
	return live
}

// punBusy returns the ranges a punned jmp may not land in: those the
// window uses, and the landing pages of the searches that run (a page an
// earlier search mapped and left is free to land on again).
func (e *engine) punBusy() [][2]uint64 {
	busy := slices.Clone(e.inproc.used)
	for _, s := range e.searches() {
		if s.punned != 0 {
			busy = append(busy, [2]uint64{pageDown(s.punned), pageDown(s.punned) + pageSize})
		}
	}
	return busy
}

// punJumps lets the end search use punned jmps (tests turn them off to
// test the other way).
var punJumps = true

// punned is where a jmp at the end rip lands whose first bytes are its
// own and whose last ones are the code's (to, 0 when none), its rel32, and
// the prefixes before its 0xe9 (pad).
type punned struct {
	to  uint64
	rel uint32
	pad int
}

// bytes returns the first l bytes of the punned jmp: its prefixes, 0xe9,
// and the low bytes of its rel32.
func (p punned) bytes(l int) []byte {
	// Redundant prefixes, which a near jmp ignores in 64-bit mode: ES
	// overrides, then REX.W (never 0x66, which AMD's processors honour
	// there, cutting rip to 16 bits).
	b := append(bytes.Repeat([]byte{0x26}, max(p.pad-1, 0)), []byte{0x48}[:min(p.pad, 1)]...)
	return append(append(b, 0xe9), u32le(p.rel)...)[:l]
}

// punTarget finds a punned jmp for the end search at rip, whose first
// instruction is l bytes long (code holds the bytes there). The jmp writes
// 0xe9 and the l-1 low bytes of its rel32 over that instruction; the 5-l
// high bytes are those the code has after it, left as they are, so that a
// jump there still finds its instructions, and nothing else is displaced.
// That leaves 256^(l-1) places the jmp can land at, in a range of up to 16
// MiB; one whose page no range of used takes (engine.punBusy) and with room
// for an absolute jmp (14 bytes) is taken. When the code's bytes put that
// range out of the address space (a high byte of 0x80 or more: below
// zero), prefixes before the 0xe9 shift the rel32 onto later bytes of the
// code, each at the cost of one free byte (python3.11's `test rcx, rcx`
// before a `je`: 0x840f as the high bytes without a prefix, 0x53840f with
// one). The ideas are E9Patch's instruction punning and padded jumps (Duck
// et al., PLDI 2020).
func punTarget(rip uint64, code []byte, l int, used [][2]uint64) punned {
	for pad := 0; pad < l && pad+5 <= len(code); pad++ {
		free := uint(8 * (l - 1 - pad))
		var high uint32
		for i := pad + 4; i >= l; i-- {
			high = high<<8 | uint32(code[i])
		}
		high <<= free
		span := uint64(1) << free
		at := func(low uint64) uint64 { return rip + uint64(pad) + 5 + uint64(int64(int32(high|uint32(low)))) }
		lo, hi := at(0), at(span-1)
		if hi < lo {
			continue // the range wraps around zero
		}
		for page := pageDown(lo); page <= hi; page += pageSize {
			to := max(page, lo)
			if to+14 > page+pageSize || to > hi || page < 1<<16 || page+pageSize > 0x7fff_ffff_f000 {
				continue
			}
			if slices.ContainsFunc(used, func(u [2]uint64) bool { return page < u[1] && page+pageSize > u[0] }) {
				continue
			}
			return punned{to: to, rel: high | uint32(to-lo), pad: pad}
		}
	}
	return punned{}
}

// retargetCall makes the direct call that reached the displaced
// instruction interior[k] call its copy instead, when one did: the return
// address is at rsp, and the five bytes before it are a `call rel32` to
// that instruction. A displaced instruction that begins a function (the end
// rip on a function's last `ret`, the next function after its padding) is
// otherwise a stop at every call, which the loop may make millions of
// times (openssl speed). The copy runs the same instructions, so a call
// moved there does what it did, whatever made the stack word look like its
// return address; a call inside the displaced instructions, or on a page
// the end compares, is left alone.
func (e *engine) retargetCall(s *endInProcess, k int, rsp uint64) {
	var ret [8]byte
	if e.mem.ReadAt(ret[:], rsp) != nil {
		return
	}
	after := binary.LittleEndian.Uint64(ret[:])
	site := after - 5
	if after < 5 || site < s.displaced[1] && after > s.displaced[0] {
		return
	}
	var call [5]byte
	if e.mem.ReadAt(call[:], site) != nil || call[0] != 0xe8 {
		return
	}
	if after+uint64(int64(int32(binary.LittleEndian.Uint32(call[1:])))) != s.interior[k] {
		return
	}
	if e.endCompares(site, site+4) {
		return
	}
	moved, ok := rel32At(s.relocated[k+1], site, 0xe8)
	if !ok {
		return
	}
	if e.mem.WriteAt(moved[1:], site+1) == nil {
		s.retargeted++
		e.logf("the call at %#x now calls the end search's copy of %#x", site, s.interior[k])
	}
}

// watchEndWord adds to the in-process search the first word of the end
// page d where the program's memory differs from what the recording ended
// with, when the checkpoint holds that content, the page is readable in the
// process (served, not guarded), and the word lies outside what the end's
// digest leaves out (format.DigestMasked) and what the end comparison does
// not count (the other threads' dead stacks: deadStacksOnly).
func (e *engine) watchEndWord(d format.PageRef) {
	if e.sigSearch != nil || e.dbg != nil && len(e.dbg.watches) > 0 {
		// (A debugger's read watchpoint would fire in the search's code.)
		return
	}
	e.watchWord(e.bp.inproc, d, "the end search")
}

// watchWord adds to the in-process search s the first word of the end page
// d that differs (watchEndWord); who names the search in the line it logs.
func (e *engine) watchWord(s *endInProcess, d format.PageRef, who string) {
	if s == nil || len(s.words) >= endWords {
		return
	}
	if _, guarded := e.guards.find(d.Addr); guarded {
		return
	}
	rec := e.recordedEndPage(d.Addr)
	rsp := e.end.Regs.Rsp
	if rec == nil || format.HashPage(format.DigestMasked(d.Addr, rec, e.rseqs, rsp)) != d.Hash {
		return
	}
	got := make([]byte, pageSize)
	if !e.readableAtEnd(d.Addr) || e.mem.ReadAt(got, d.Addr) != nil {
		return
	}
	ones := make([]byte, pageSize)
	for i := range ones {
		ones[i] = 0xff
	}
	kept := format.DigestMasked(d.Addr, ones, e.rseqs, rsp)
	dead := e.otherDeadStacks()
	le := binary.LittleEndian
	for off := 0; off < pageSize; off += 8 {
		if le.Uint64(kept[off:]) != ^uint64(0) || le.Uint64(rec[off:]) == le.Uint64(got[off:]) {
			continue
		}
		addr := d.Addr + uint64(off)
		if slices.ContainsFunc(dead, func(r format.Span) bool { return r.Contains(addr) }) {
			continue // the end does not compare it (deadStacksOnly)
		}
		if slices.Contains(s.words, addr) {
			return
		}
		k := len(s.words)
		le.PutUint64(s.data[idEndWords+16*k+8:], le.Uint64(rec[off:]))
		le.PutUint64(s.data[idEndWords+16*k:], addr)
		s.words = append(s.words, addr)
		e.logf("%s compares the word at %#x with its recorded value %#x in the process too", who, addr, le.Uint64(rec[off:]))
		return
	}
}

// cmpRIP is the opcode and ModRM of `cmp REG, [rip+disp32]` for register
// number n.
func cmpRIP(n byte) []byte {
	rex := byte(0x48)
	if n >= 8 {
		rex |= 0x04 // REX.R
	}
	return []byte{rex, 0x3b, (n&7)<<3 | 5}
}

// rel32At returns op and the rel32 from an instruction at addr to target.
func rel32At(target, addr uint64, op ...byte) ([]byte, bool) {
	d := int64(target) - int64(addr+uint64(len(op))+4)
	if d != int64(int32(d)) {
		return nil, false
	}
	return append(op, u32le(uint32(int32(d)))...), true
}

// relocatable reports whether inst runs the same moved elsewhere
// (moveInstruction): it does not push its own address (a call), and its
// address is not otherwise part of what it does.
func relocatable(inst x86asm.Inst) bool {
	switch inst.Op {
	case x86asm.CALL:
		// A direct call, or an indirect one through a register or
		// memory that rsp does not address, which moveInstruction
		// rewrites.
		switch a := inst.Args[0].(type) {
		case x86asm.Rel:
			return inst.Len == 5
		case x86asm.Reg:
			return a != x86asm.RSP && a != x86asm.ESP && a >= x86asm.RAX && a <= x86asm.R15
		case x86asm.Mem:
			return a.Segment == 0 && a.Base != x86asm.RSP && a.Index != x86asm.RSP && inst.MemBytes == 8
		}
		return false
	case x86asm.LCALL, x86asm.LJMP, x86asm.LRET,
		x86asm.IRET, x86asm.IRETD, x86asm.IRETQ, x86asm.SYSCALL, x86asm.SYSENTER, x86asm.SYSEXIT, x86asm.SYSRET,
		x86asm.INT, x86asm.INTO, x86asm.UD1, x86asm.UD2, x86asm.HLT, x86asm.XBEGIN, x86asm.XABORT, x86asm.XEND:
		return false
	}
	for _, arg := range inst.Args {
		if m, ok := arg.(x86asm.Mem); ok && m.Base == x86asm.EIP {
			return false
		}
	}
	return true
}

// moveInstruction returns the bytes b of inst, at address from, as they
// run the same at address to: a rip-relative displacement adjusted, a
// jump's target kept (a short jump becomes a near one). ok is false when
// that is out of reach or the form is not one it knows (loop, jrcxz, a
// prefixed jump).
func moveInstruction(b []byte, inst x86asm.Inst, from, to uint64) (moved []byte, ok bool) {
	rel32 := func(target uint64, op ...byte) ([]byte, bool) { return rel32At(target, to, op...) }
	// push rax; mov rax, the return address; xchg [rsp], rax: the stack
	// gets what a call would have pushed, and rax and the flags are as
	// they were. A call then becomes a jmp.
	pushRet := append(append([]byte{0x50, 0x48, 0xb8}, u64le(from+uint64(inst.Len))...), 0x48, 0x87, 0x04, 0x24)
	if _, direct := inst.Args[0].(x86asm.Rel); inst.Op == x86asm.CALL && !direct {
		// call r/m64 (ff /2) becomes jmp r/m64 (ff /4), its operand
		// read with every register as the call would have read it (rsp
		// is not among them: relocatable), a rip-relative displacement
		// adjusted to where the jmp is.
		i := 0
		for i < len(b) && (b[i] == 0x66 || b[i] == 0x67 || b[i]&0xf0 == 0x40) {
			i++
		}
		if i+1 >= len(b) || b[i] != 0xff || b[i+1]>>3&7 != 2 {
			return nil, false
		}
		jmp := append([]byte(nil), b...)
		jmp[i+1] = jmp[i+1]&^0x38 | 4<<3
		jmp, ok = x86.RipRelative(jmp, inst, from, to+uint64(len(pushRet)))
		return append(pushRet, jmp...), ok
	}
	for _, arg := range inst.Args {
		r, ok := arg.(x86asm.Rel)
		if !ok {
			continue
		}
		target := from + uint64(inst.Len) + uint64(int64(r))
		switch {
		case len(b) == 5 && b[0] == 0xe8: // call rel32
			jmp, ok := rel32At(target, to+uint64(len(pushRet)), 0xe9)
			return append(pushRet, jmp...), ok
		case len(b) == 2 && b[0] >= 0x70 && b[0] <= 0x7f: // jcc rel8
			return rel32(target, 0x0f, 0x80+b[0]-0x70)
		case len(b) == 6 && b[0] == 0x0f && b[1] >= 0x80 && b[1] <= 0x8f: // jcc rel32
			return rel32(target, 0x0f, b[1])
		case len(b) == 2 && b[0] == 0xeb, len(b) == 5 && b[0] == 0xe9: // jmp
			return rel32(target, 0xe9)
		}
		return nil, false
	}
	return x86.RipRelative(append([]byte(nil), b...), inst, from, to)
}
