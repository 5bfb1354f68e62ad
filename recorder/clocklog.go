package recorder

import (
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"sync/atomic"
	"unsafe"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/internal/x86"
	"github.com/tprec/tprec/proc"

	"golang.org/x/arch/x86/x86asm"
	"golang.org/x/sys/unix"
)

// The clock log: time calls recorded in the process, without a syscall.
//
// The vDSO patch (vdso.go) makes every clock read a syscall, so that the
// syscall log holds its result: 2.8 of them a request on redis-server,
// more than half of all it records, each costing the kernel entry, the
// syscall tracepoint's program and the collector's decoding (or two ptrace
// stops on the ptrace backend), where unrecorded the vDSO answers in 20 ns.
//
// With the clock log, each patched entry point jumps to a stub in a region
// the recorder maps into the process. The stub takes the next index of a
// counter in the region with `lock xadd`, calls the vDSO's own code (the
// instructions the jump displaced, moved into the stub, then a jump back
// past them) and writes the call and its result into the region's ring at
// that index: the thread (its fs base, read with rdfsbase), the number,
// the arguments, the return value and the bytes written. The entry's stamp
// (index + 1) is written once they are, and a done mark once the stub no
// longer needs the slot; the collector reads entries in index order as
// they are done. The stub leaves the thread as the vDSO patch's stub would
// (clockCode), which is what a replay runs.
//
// The counter orders the entries against the syscall log: the syscall
// program reads it at each call's exit before it takes the call's sequence
// number, so an entry of index i comes after the calls that read a counter
// of i or less and before those that read more. Within a thread that is
// program order; across threads, a thread that saw a value another stored
// after its clock read makes its next call after that read.
//
// The stub falls back to the syscall (a stub of the vDSO patch's kind, in
// the region's code) when the ring is nearly full (the collector behind:
// a loop that reads the clock and nothing else), in a process forked from
// the recorded one (the region is shared memory, and a private page
// wiped on fork holds the switch), and for calls it does not log (a clock
// the vDSO does not read itself, gettimeofday with a timezone).
//
// ARCHITECTURE.md, "The clock log", tells the whole of it. This file
// builds the region's code, installs it in a stopped process, merges its
// entries (clockMerge, with openLog in ebpf.go) and steps threads out of
// it.

// Layout of the region: the code page, the header page, the ring; the
// switch page, private and wiped on fork, follows it.
const (
	clkCode      = 0
	clkHead      = format.PageSize
	clkRing      = 2 * format.PageSize
	clkEntries   = 1 << 13
	clkEntrySize = 256                               // a power of two (the stub shifts)
	clkSize      = clkRing + clkEntries*clkEntrySize // the shared part
	clkSwitch    = clkSize                           // one private page
	// clkSlack entries stay free between the collector and the stubs:
	// threads that passed the check for room before one of them took
	// the last index (one each at most).
	clkSlack = 1024

	// the header
	clkCounter  = clkHead       // next index
	clkConsumed = clkHead + 64  // indexes below it read by the collector
	clkRingAddr = clkHead + 128 // the ring's address in the process

	// an entry: what the collector reads is in its first 64 bytes, one
	// cache line, which it takes from the CPU that wrote it once a read
	ceStamp   = 0  // index + 1, written once the fields are
	ceDone    = 8  // u32: 1 once the stub is done with the slot
	ceNr      = 12 // u32
	ceFS      = 16 // the thread's fs base
	ceRet     = 24
	ceArg0    = 32
	ceOutAddr = 40 // where the call wrote its 16 bytes (0: nothing written)
	ceOut     = 48 // those bytes
	// what the stub keeps there while the function runs
	ceRegs  = 72  // rdi, rsi, rdx, r8, r9, r10, rbx
	ceFlags = 128 // the flags at the entry (lahf; seto al)
	ceNext  = 136 // the stamp to write
	// ceStack keeps the clkStackSaved bytes below the caller's stack
	// pointer: the stub and the function write there, where a replay's
	// call (the vDSO patch's stub: a syscall) writes nothing, and the
	// checkpoint's digests of the stack page would differ.
	ceStack       = 144
	clkStackSaved = clkEntrySize - ceStack // the stub's 16, the function's (48 on Linux 6.18)
)

// clockFunc is a vDSO function the clock log takes over.
type clockFunc struct {
	nr    int
	entry uint64 // its address in the process
	// orig: its first bytes, at least 32, as the vDSO has them.
	orig []byte
}

// vdsoClocks are the clocks the vDSO's clock_gettime reads without a
// syscall (when the kernel's clocksource allows it at all): REALTIME,
// MONOTONIC, MONOTONIC_RAW, REALTIME_COARSE, MONOTONIC_COARSE, BOOTTIME
// and TAI.
const vdsoClocks = 1<<unix.CLOCK_REALTIME | 1<<unix.CLOCK_MONOTONIC | 1<<unix.CLOCK_MONOTONIC_RAW |
	1<<unix.CLOCK_REALTIME_COARSE | 1<<unix.CLOCK_MONOTONIC_COARSE | 1<<unix.CLOCK_BOOTTIME | 1<<unix.CLOCK_TAI

// clockLoggable lists the functions the stubs log, by syscall number, with
// the register holding the pointer to the 16 bytes they write: rsi for
// clock_gettime(clockid, ts), rdi for gettimeofday(tv, tz).
var clockLoggable = map[int]byte{
	unix.SYS_CLOCK_GETTIME: 6, // rsi
	unix.SYS_GETTIMEOFDAY:  7, // rdi
}

// displaced decodes the first instructions of a function from orig, at
// addr, until they cover the 5 bytes of a jmp, and returns them moved to
// run at to, and how many bytes of orig they were. ok is false when one of
// them cannot run elsewhere.
func displaced(orig []byte, addr, to uint64) (moved []byte, n int, ok bool) {
	for n < 5 {
		inst, err := x86.Decode(orig[n:])
		if err != nil || !movable(inst) {
			return nil, 0, false
		}
		b, ok := x86.RipRelative(append([]byte(nil), orig[n:n+inst.Len]...), inst, addr+uint64(n), to+uint64(len(moved)))
		if !ok {
			return nil, 0, false
		}
		moved = append(moved, b...)
		n += inst.Len
	}
	return moved, n, true
}

// movable reports whether inst, one of a function's first, runs the same
// at another address once a rip-relative displacement is adjusted: no
// jump, call or return among them (a prologue has none).
func movable(inst x86asm.Inst) bool {
	for _, arg := range inst.Args {
		if _, ok := arg.(x86asm.Rel); ok {
			return false
		}
	}
	switch inst.Op {
	case x86asm.CALL, x86asm.JMP, x86asm.RET, x86asm.LCALL, x86asm.LJMP, x86asm.LRET,
		x86asm.SYSCALL, x86asm.INT, x86asm.UD2, x86asm.LOOP, x86asm.JRCXZ, x86asm.JECXZ:
		return false
	}
	return true
}

// clockCode returns the code page of a region at base for fns, the
// address of each function's stub (by entry) and, for the rip after each
// stub's own `syscall` (its fallback), the rip after the entry's in the
// vDSO patch's stub. A function whose prologue cannot be moved gets no
// stub: the caller leaves it on the syscall.
//
// A stub leaves the thread as the vDSO patch's stub (`mov eax, NR;
// syscall; ret`) would, which a replay runs: rax the result, rcx the rip
// after that stub's `syscall`, r11 the flags, every other register, the
// flags and the stack below the caller's stack pointer as they were. It
// uses rax, rcx and r11 (which that stub changes too) until it has its
// slot, then keeps what it must give back there.
func clockCode(base uint64, fns []clockFunc) (code []byte, stubs, fallbacks map[uint64]uint64, err error) {
	a := x86.New(base + clkCode)
	abs := func(off int) uint64 { return base + uint64(off) }
	le32 := func(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
	stubs, fallbacks = map[uint64]uint64{}, map[uint64]uint64{}
	// rbx-relative accesses to the slot: REX.W (+R for r8-r15), op, modrm
	// [rbx+disp32], disp32.
	slot := func(rex, op byte, reg byte, off int) {
		a.Emit(rex, op, 0x83|(reg&7)<<3)
		a.Emit(le32(uint32(off))...)
	}
	for k, f := range fns {
		ptr, ok := clockLoggable[f.nr]
		if !ok {
			continue
		}
		detour := fmt.Sprintf("detour%d", k)
		fallback := fmt.Sprintf("fallback%d", k)
		skip := fmt.Sprintf("skip%d", k)
		start, mark := a.Here(), a.Mark()
		a.Emit(0x9f)                                      // lahf
		a.Emit(0x0f, 0x90, 0xc0)                          // seto al: rax holds the flags
		a.RelTo(abs(clkSwitch), []byte{0x80, 0x3d}, 0x00) // cmp byte [switch], 0
		a.Rel(fallback, []byte{0x0f, 0x84})               // je fallback
		if f.nr == unix.SYS_CLOCK_GETTIME {
			// Only the clocks the vDSO reads itself: for the others it
			// makes the syscall, which the syscall log would hold too.
			a.Emit(0x83, 0xff, 0x1f)            // cmp edi, 31
			a.Rel(fallback, []byte{0x0f, 0x87}) // ja fallback (a CPU clock's id is negative)
			a.Emit(0x41, 0xbb)                  // mov r11d, imm32
			a.Emit(le32(vdsoClocks)...)
			a.Emit(0x41, 0x0f, 0xa3, 0xfb)      // bt r11d, edi
			a.Rel(fallback, []byte{0x0f, 0x83}) // jnc fallback
		}
		if f.nr == unix.SYS_GETTIMEOFDAY {
			a.Emit(0x48, 0x85, 0xf6)            // test rsi, rsi: a timezone
			a.Rel(fallback, []byte{0x0f, 0x85}) // jne fallback
		}
		a.RelTo(abs(clkCounter), []byte{0x48, 0x8b, 0x0d})  // mov rcx, [counter]
		a.RelTo(abs(clkConsumed), []byte{0x48, 0x2b, 0x0d}) // sub rcx, [consumed]
		a.Emit(0x48, 0x81, 0xf9)                            // cmp rcx, imm32
		a.Emit(le32(clkEntries - clkSlack)...)
		a.Rel(fallback, []byte{0x0f, 0x83})                            // jae fallback
		a.Emit(0xb9, 1, 0, 0, 0)                                       // mov ecx, 1
		a.RelTo(abs(clkCounter), []byte{0xf0, 0x48, 0x0f, 0xc1, 0x0d}) // lock xadd [counter], rcx
		a.Emit(0x41, 0x89, 0xcb)                                       // mov r11d, ecx
		a.Emit(0x41, 0x81, 0xe3)                                       // and r11d, imm32
		a.Emit(le32(clkEntries - 1)...)
		a.Emit(0x49, 0xc1, 0xe3, 0x08)                      // shl r11, 8
		a.RelTo(abs(clkRingAddr), []byte{0x4c, 0x03, 0x1d}) // add r11, [ring]: the slot
		a.Emit(0x49, 0x89, 0x83)                            // mov [r11+flags], rax
		a.Emit(le32(ceFlags)...)
		a.Emit(0x48, 0x8d, 0x41, 0x01) // lea rax, [rcx+1]
		a.Emit(0x49, 0x89, 0x83)       // mov [r11+next], rax
		a.Emit(le32(ceNext)...)
		a.Emit(0x41, 0xc7, 0x43, ceDone, 0, 0, 0, 0) // mov dword [r11+done], 0
		// rdi, rsi, rdx, r8, r9, r10, rbx into the slot (mov [r11+d8], reg)
		for i, r := range []byte{7, 6, 2, 8, 9, 10, 3} {
			rex := byte(0x49)
			if r >= 8 {
				rex |= 0x04
			}
			a.Emit(rex, 0x89, 0x43|(r&7)<<3, byte(ceRegs+8*i))
		}
		a.Emit(0x4c, 0x89, 0xdb) // mov rbx, r11
		// The bytes below the caller's stack pointer, before anything
		// is written there.
		for off := 8; off <= clkStackSaved; off += 8 {
			a.Emit(0x48, 0x8b, 0x84, 0x24) // mov rax, [rsp-off]
			a.Emit(le32(uint32(-off))...)
			slot(0x48, 0x89, 0, ceStack+clkStackSaved-off) // mov [rbx+..], rax
		}
		a.Emit(0x48, 0x83, 0xec, 0x08) // sub rsp, 8: aligned as at an entry
		a.Rel(detour, []byte{0xe8})    // call detour
		a.Emit(0x48, 0x83, 0xc4, 0x08) // add rsp, 8
		a.Emit(0x48, 0x63, 0xc0)       // movsxd rax, eax: an int
		a.Emit(0x48, 0x89, 0x43, ceRet)
		a.Emit(0xf3, 0x48, 0x0f, 0xae, 0xc1) // rdfsbase rcx
		a.Emit(0x48, 0x89, 0x4b, ceFS)       // mov [rbx+fs], rcx
		a.Emit(0xc7, 0x43, ceNr)             // mov dword [rbx+nr], imm32
		a.Emit(le32(uint32(f.nr))...)
		a.Emit(0x48, 0x8b, 0x4b, ceRegs) // mov rcx, [saved rdi]
		a.Emit(0x48, 0x89, 0x4b, ceArg0) // mov [rbx+arg0], rcx
		if ptr == 6 {
			a.Emit(0x4c, 0x8b, 0x5b, ceRegs+8) // mov r11, [saved rsi]
		} else {
			a.Emit(0x4c, 0x8b, 0x5b, ceRegs) // mov r11, [saved rdi]
		}
		a.Emit(0x48, 0x85, 0xc0)            // test rax, rax
		a.Emit(0x74, 0x03)                  // je +3
		a.Emit(0x45, 0x31, 0xdb)            // xor r11d, r11d: an error wrote nothing
		a.Emit(0x4c, 0x89, 0x5b, ceOutAddr) // mov [rbx+outaddr], r11
		a.Emit(0x4d, 0x85, 0xdb)            // test r11, r11
		a.Rel(skip, []byte{0x0f, 0x84})     // je skip
		a.Emit(0x49, 0x8b, 0x0b)            // mov rcx, [r11]
		a.Emit(0x48, 0x89, 0x4b, ceOut)     // mov [rbx+out], rcx
		a.Emit(0x49, 0x8b, 0x4b, 0x08)      // mov rcx, [r11+8]
		a.Emit(0x48, 0x89, 0x4b, ceOut+8)   // mov [rbx+out+8], rcx
		a.Label(skip)
		// Back as they were: the registers, the flags (then r11 as the
		// syscall sets it, through the stack), the stack's bytes.
		for i, r := range []byte{7, 6, 2, 8, 9, 10} {
			rex := byte(0x48)
			if r >= 8 {
				rex |= 0x04
			}
			a.Emit(rex, 0x8b, 0x43|(r&7)<<3, byte(ceRegs+8*i)) // mov reg, [rbx+..]
		}
		a.Emit(0x48, 0x8b, 0x83) // mov rax, [rbx+flags]
		a.Emit(le32(ceFlags)...)
		a.Emit(0x04, 0x7f) // add al, 0x7f: OF as seto found it
		a.Emit(0x9e)       // sahf
		a.Emit(0x9c)       // pushfq
		a.Emit(0x41, 0x5b) // pop r11
		// Without the trap flag, set while a boundary single-steps the
		// thread out (clockStepOut), which a replay's call does not see;
		// the and changes the flags: set them again.
		a.Emit(0x49, 0x81, 0xe3) // and r11, imm32
		a.Emit(le32(^uint32(0x100))...)
		a.Emit(0x48, 0x8b, 0x83) // mov rax, [rbx+flags]
		a.Emit(le32(ceFlags)...)
		a.Emit(0x04, 0x7f) // add al, 0x7f
		a.Emit(0x9e)       // sahf
		for off := 8; off <= clkStackSaved; off += 8 {
			slot(0x48, 0x8b, 1, ceStack+clkStackSaved-off) // mov rcx, [rbx+..]
			a.Emit(0x48, 0x89, 0x8c, 0x24)                 // mov [rsp-off], rcx
			a.Emit(le32(uint32(-off))...)
		}
		a.Emit(0x48, 0x8b, 0x43, ceRet) // mov rax, [rbx+ret]
		a.Emit(0x48, 0x8b, 0x8b)        // mov rcx, [rbx+next]
		a.Emit(le32(ceNext)...)
		a.Emit(0x48, 0x89, 0x0b)                     // mov [rbx], rcx: the stamp
		a.Emit(0x48, 0x89, 0xd9)                     // mov rcx, rbx
		a.Emit(0x48, 0x8b, 0x59, ceRegs+6*8)         // mov rbx, [rcx+saved rbx]
		a.Emit(0xc7, 0x41, ceDone, 1, 0, 0, 0)       // mov dword [rcx+done], 1: the slot is free
		a.RelTo(f.entry+7, []byte{0x48, 0x8d, 0x0d}) // lea rcx, [entry+7]
		a.Emit(0xc3)                                 // ret
		a.Label(detour)
		moved, n, ok := displaced(f.orig, f.entry, a.Here())
		if !ok {
			a.Undo(mark)
			continue
		}
		a.Emit(moved...)
		a.RelTo(f.entry+uint64(n), []byte{0xe9}) // jmp past them
		a.Label(fallback)
		a.Emit(0x04, 0x7f) // add al, 0x7f
		a.Emit(0x9e)       // sahf: the flags back
		a.Emit(0xb8)       // mov eax, NR; syscall
		a.Emit(le32(uint32(f.nr))...)
		a.Emit(0x0f, 0x05)
		fallbacks[a.Here()] = f.entry + 7
		a.RelTo(f.entry+7, []byte{0x48, 0x8d, 0x0d}) // lea rcx, [entry+7]
		a.Emit(0xc3)                                 // ret
		stubs[f.entry] = start
	}
	if len(a.B) > format.PageSize {
		return nil, nil, nil, fmt.Errorf("clock log: %d bytes of code", len(a.B))
	}
	if err := a.Resolve(); err != nil {
		return nil, nil, nil, fmt.Errorf("clock log: %w", err)
	}
	return a.B, stubs, fallbacks, nil
}

// clockLog is a clock log installed in a process.
type clockLog struct {
	base  uint64 // the region in the process
	view  []byte // its shared part, mapped here
	sites []clockSite
	// fallbacks: for the rip after each stub's own `syscall`, the rip
	// after the entry's in the vDSO patch's stub (entry + 7), which is
	// what a replay runs: the checkpoint's vDSO holds that stub again
	// (unpatch).
	fallbacks map[uint64]uint64
	lo, hi    uint64 // the vDSO
}

// region is the range the clock log takes in the process, hidden from
// the recording: its code page, its shared part and its switch page.
func (l *clockLog) region() (lo, hi uint64) { return l.base, l.base + clkSize + format.PageSize }

// inside reports whether a thread at rip is inside the clock log's code
// or the vDSO (which a stub calls): a boundary steps it out first.
func (l *clockLog) inside(rip uint64) bool {
	return rip >= l.base && rip < l.base+format.PageSize || rip >= l.lo && rip < l.hi
}

// unpatch gives, in page (at addr), each of sites' entries the bytes it
// held before the clock log (the vDSO patch's stub): the checkpoint holds
// them, so that a replay makes every clock read a call at the entry, which
// the log's records name.
func unpatch(sites []clockSite, addr uint64, page []byte) {
	for _, s := range sites {
		if s.entry >= addr && s.entry+uint64(len(s.orig)) <= addr+uint64(len(page)) {
			copy(page[s.entry-addr:], s.orig)
		}
	}
}

// clockMerge is the state of merging a clock log's entries into the
// syscall log, across intervals.
type clockMerge struct {
	l     *clockLog
	next  uint64         // the next index to merge
	first uint64         // the first index merged
	g     uint64         // the largest counter a merged call read
	fsTid map[uint64]int // threads by fs base
	// the last thread looked up, and a record's output: the log copies
	// what it is given
	lastFS  uint64
	lastTid int
	out     [1]format.OutBuf
	buf     [16]byte
	rec     format.Syscall // the record of the entry merged last (record)
}

// thread notes the fs base of a call's thread, as the call goes into the
// log: in the log's order, because a new thread may get the thread block
// (and fs base) of one that ended, whose last clock reads are merged after
// the new one's first calls came in. A thread makes calls of its own
// (glibc's start_thread: rseq, set_robust_list) before it can read the
// clock.
func (cm *clockMerge) thread(fs uint64, tid int) {
	if fs != 0 && (fs != cm.lastFS || tid != cm.lastTid) {
		cm.fsTid[fs] = tid
		cm.lastFS, cm.lastTid = fs, tid
	}
}

// call looks at a call before it is logged: it gives a stub's own fallback call the rip a replay has for it, and
// reports a call to drop: a logged function's own syscall inside the vDSO
// (the kernel's clock not readable in user space), whose result the entry
// holds.
func (cm *clockMerge) call(rec *format.Syscall) bool {
	if rip, ok := cm.l.fallbacks[rec.Rip]; ok {
		rec.Rip = rip
		return false
	}
	if _, logged := clockLoggable[rec.Nr]; logged && rec.Rip >= cm.l.lo && rec.Rip < cm.l.hi {
		for _, s := range cm.l.sites {
			if rec.Rip == s.entry+7 {
				return false
			}
		}
		return true
	}
	return false
}

// record makes the log's record of an entry in cm.rec, or says why there
// is none.
func (cm *clockMerge) record(en *clockEntry) string {
	tid := cm.lastTid
	if en.fs != cm.lastFS || tid == 0 {
		var ok bool
		if tid, ok = cm.fsTid[en.fs]; !ok {
			return fmt.Sprintf("clock read %d was made by a thread the recorder does not know (fs base %#x)", en.index, en.fs)
		}
		cm.lastFS, cm.lastTid = en.fs, tid
	}
	var rip uint64
	for _, s := range cm.l.sites {
		if s.nr == en.nr {
			rip = s.entry + 7
		}
	}
	cm.rec = format.Syscall{Tid: tid, Nr: en.nr, Ret: en.ret, Rip: rip}
	cm.rec.Args[0] = en.arg0
	if en.nr == unix.SYS_CLOCK_GETTIME {
		cm.rec.Args[1] = en.outAddr
	}
	if en.outAddr != 0 {
		cm.buf = en.out
		cm.out[0] = format.OutBuf{Addr: en.outAddr, Data: cm.buf[:]}
		cm.rec.Out = cm.out[:]
	}
	return ""
}

// clockSite is an entry point pointed at its stub: the bytes written, and
// those they replaced.
type clockSite struct {
	entry         uint64
	nr            int
	orig, patched []byte
}

// installClockLog maps a clock log into stopped process pid through the
// calls inject makes it make (returning the call's result), near
// its vDSO [lo, hi) (a rel32 reaches the stubs from the entries, and the
// vDSO's data from the moved instructions), writes its code for fns and
// points their entries at it. zero is the address of a zero byte in the
// process (the memfd's name). Every thread must be stopped outside the
// entries' first 8 bytes. fns whose prologue cannot be moved stay as they
// are.
func installClockLog(pid int, mem *proc.Mem, inject func(nr int, args ...uint64) (int64, error), lo, hi, zero uint64, fns []clockFunc) (*clockLog, error) {
	call := func(what string, nr int, args ...uint64) (uint64, error) {
		ret, err := inject(nr, args...)
		if err == nil && ret < 0 && ret > -4096 {
			err = unix.Errno(-ret)
		}
		if err != nil {
			return 0, fmt.Errorf("clock log: %s: %w", what, err)
		}
		return uint64(ret), nil
	}
	fd, err := call("memfd_create", unix.SYS_MEMFD_CREATE, zero, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	defer call("close", unix.SYS_CLOSE, fd)
	if _, err := call("ftruncate", unix.SYS_FTRUNCATE, fd, clkSize); err != nil {
		return nil, err
	}
	// Below the vDSO, or above it, 16 MiB apart: the first place free for
	// the whole region, taken at once (MAP_FIXED_NOREPLACE fails on any
	// mapping in the range); its parts then replace that reservation
	// only. (Mapping the parts one by one with MAP_FIXED replaced a
	// library's pages that lay in the range: python3 died.)
	var base uint64
	for k := uint64(1); k <= 64 && base == 0; k++ {
		for _, c := range clockPlaces(lo, hi, k) {
			ret, err := call("mmap", unix.SYS_MMAP, c, clkSize+format.PageSize, unix.PROT_NONE,
				unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED_NOREPLACE, ^uint64(0), 0)
			if err != nil || ret != c {
				if err == nil {
					call("munmap", unix.SYS_MUNMAP, ret, clkSize+format.PageSize) // an old kernel's hint
				}
				continue
			}
			base = c
			break
		}
	}
	if base == 0 {
		return nil, fmt.Errorf("clock log: no room near the vDSO at %#x", lo)
	}
	undo := func() { call("munmap", unix.SYS_MUNMAP, base, clkSize+format.PageSize) }
	if _, err := call("mmap", unix.SYS_MMAP, base+clkCode, format.PageSize, unix.PROT_READ|unix.PROT_EXEC,
		unix.MAP_SHARED|unix.MAP_FIXED, fd, clkCode); err != nil {
		undo()
		return nil, err
	}
	if _, err := call("mmap", unix.SYS_MMAP, base+clkHead, clkSize-clkHead, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_SHARED|unix.MAP_FIXED, fd, clkHead); err != nil {
		undo()
		return nil, err
	}
	// The syscall program reads the counter at every call, where it cannot
	// fault a page in: the header page stays in memory.
	if _, err := call("mlock", unix.SYS_MLOCK, base+clkHead, format.PageSize); err != nil {
		undo()
		return nil, err
	}
	if _, err := call("mmap", unix.SYS_MMAP, base+clkSwitch, format.PageSize, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED, ^uint64(0), 0); err != nil {
		undo()
		return nil, err
	}
	if _, err := call("madvise", unix.SYS_MADVISE, base+clkSwitch, format.PageSize, unix.MADV_WIPEONFORK); err != nil {
		undo()
		return nil, err
	}
	f, err := os.OpenFile(fmt.Sprintf("/proc/%d/fd/%d", pid, fd), os.O_RDWR, 0)
	if err != nil {
		undo()
		return nil, fmt.Errorf("clock log: %w", err)
	}
	view, err := unix.Mmap(int(f.Fd()), 0, clkSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	f.Close()
	if err != nil {
		undo()
		return nil, fmt.Errorf("clock log: map the region: %w", err)
	}
	l := &clockLog{base: base, view: view, lo: lo, hi: hi}
	code, stubs, fallbacks, err := clockCode(base, fns)
	l.fallbacks = fallbacks
	if err == nil {
		copy(view[clkCode:], code)
		binary.LittleEndian.PutUint64(view[clkRingAddr:], base+clkRing)
		err = mem.WriteAt([]byte{1}, base+clkSwitch)
	}
	for _, fn := range fns {
		stub, ok := stubs[fn.entry]
		if err != nil || !ok {
			continue
		}
		jmp := binary.LittleEndian.AppendUint32([]byte{0xe9}, uint32(int32(int64(stub)-int64(fn.entry+5))))
		// The entry may hold a stub of the vDSO patch, longer than the
		// jmp: the moved instructions go on with the original bytes.
		patched := append(jmp, fn.orig[5:8]...)
		cur := make([]byte, len(patched))
		if err = mem.ReadAt(cur, fn.entry); err == nil {
			err = mem.WriteAt(patched, fn.entry)
		}
		l.sites = append(l.sites, clockSite{entry: fn.entry, nr: fn.nr, orig: cur, patched: patched})
	}
	if err != nil {
		l.remove(mem)
		undo()
		return nil, err
	}
	return l, nil
}

// remove points the entries back at what they held before, and unmaps
// the view here (not the region in the process).
func (l *clockLog) remove(mem *proc.Mem) error {
	var first error
	for _, s := range l.sites {
		if err := mem.WriteAt(s.orig, s.entry); err != nil && first == nil {
			first = err
		}
	}
	l.sites = nil
	if l.view != nil {
		unix.Munmap(l.view)
		l.view = nil
	}
	return first
}

// clockEntry is one logged call.
type clockEntry struct {
	index   uint64
	fs      uint64 // the thread's fs base
	nr      int
	ret     int64
	arg0    uint64
	outAddr uint64 // 0: nothing written
	out     [16]byte
}

func (l *clockLog) word(off int) *uint64 { return (*uint64)(unsafe.Pointer(&l.view[off])) }

func (l *clockLog) word32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&l.view[off])) }

// counter is the next index a stub will take.
func (l *clockLog) counter() uint64 { return atomic.LoadUint64(l.word(clkCounter)) }

// entry returns the entry of index i once its stamp is there.
func (l *clockLog) entry(i uint64) (clockEntry, bool) {
	off := clkRing + int(i%clkEntries)*clkEntrySize
	if atomic.LoadUint64(l.word(off+ceStamp)) != i+1 || atomic.LoadUint32(l.word32(off+ceDone)) != 1 {
		return clockEntry{}, false
	}
	le := binary.LittleEndian
	e := clockEntry{index: i, fs: le.Uint64(l.view[off+ceFS:]), nr: int(le.Uint32(l.view[off+ceNr:])),
		ret: int64(le.Uint64(l.view[off+ceRet:])), arg0: le.Uint64(l.view[off+ceArg0:]), outAddr: le.Uint64(l.view[off+ceOutAddr:])}
	copy(e.out[:], l.view[off+ceOut:])
	return e, true
}

// consumed tells the stubs that the entries below i are read: their
// slots may take new ones.
func (l *clockLog) consumed(i uint64) { atomic.StoreUint64(l.word(clkConsumed), i) }

// effectiveClocks returns, for the counters that calls read in sequence
// order, the counter each is placed at: the largest read so far. A call
// reads the counter just before it takes its number, so two calls can
// read it out of their numbers' order (one delayed between the two);
// the running maximum is never more than what the counter held when the
// call took its number, and the clock reads a thread made after a call
// took their indexes later still. An entry of index i goes after every
// call placed at i or below, and before the others.
func effectiveClocks(clocks []uint64) []uint64 {
	out := make([]uint64, len(clocks))
	var g uint64
	for i, c := range clocks {
		g = max(g, c)
		out[i] = g
	}
	return out
}

// What the syscall program sends as a call's counter without one
// (tprec.h: TP_CLOCK_NONE, TP_CLOCK_UNREAD).
const (
	clockNone   = ^uint64(0)
	clockUnread = ^uint64(0) - 1
)

// clockFuncs lists the patched functions the clock log takes over.
func (p *vdsoPatch) clockFuncs() []clockFunc {
	var fns []clockFunc
	for _, s := range p.sites {
		if _, ok := clockLoggable[s.nr]; ok && len(s.body) >= 16 {
			fns = append(fns, clockFunc{nr: s.nr, entry: s.addr, orig: s.body})
		}
	}
	return fns
}

// clockLogOff says why a recording goes without a clock log, "" when it
// uses one: --clock-log=false, the eBPF backend (the ptrace backend's
// syscall stops would need the counter read at each of them, not built),
// and a CPU that lets user code read its fs base (the stubs' rdfsbase:
// FSGSBASE, Linux 5.9 and later, or a hypervisor that leaves it on for
// user code without the guest's kernel knowing: proc.ProbeRdfsbase).
func clockLogOff(o *Options, backend string) string {
	switch {
	case o.NoClockLog:
		return "--clock-log=false"
	case backend != "ebpf":
		return "the " + backend + " backend"
	}
	if ok, why := proc.ProbeRdfsbase(o.RdfsbaseProbe); !ok {
		return why
	}
	return ""
}

// installClock installs the clock log in the target, stopped with its
// vDSO patched, when the recording uses one. A failure leaves the clock
// reads to the vDSO patch's syscalls, and says so.
func (s *session) installClock(maps []format.Mapping) {
	if why := clockLogOff(&s.o, s.src.name()); why != "" {
		if debugStops {
			s.logf("no clock log: %s", why)
		}
		return
	}
	e, ok := s.src.(*ebpfSource)
	if !ok {
		return
	}
	var lo, hi uint64
	for _, m := range maps {
		if m.Path == "[vdso]" {
			lo, hi = m.Start, m.End
		}
	}
	inject := func(nr int, args ...uint64) (int64, error) {
		res, err := s.inject(proc.Call{Nr: nr, Args: args})
		return res.Ret, err
	}
	l, err := installClockLog(s.pid, s.mem, inject, lo, hi, lo+9, s.vdso.clockFuncs())
	if err == nil {
		if err = e.useClock(l); err != nil {
			l.remove(s.mem)
		}
	}
	if err != nil {
		s.logf("clock reads stay syscalls: %v", err)
		return
	}
	s.clk = l
}

// clockStepOut takes every stopped thread out of the clock log's code and
// of the vDSO (runOut), before a boundary takes the log: a thread between
// the index it took and the entry's stamp would hold the log back, and one
// inside a clock read would start a replay in code the replay does not
// have.
func (s *session) clockStepOut() {
	if s.clk == nil {
		return
	}
	for tid, t := range s.threads {
		r, err := proc.GetRegs(tid)
		if err != nil || !s.clk.inside(r.Rip) {
			continue
		}
		if debugStops {
			si, _ := proc.GetSyscallInfo(tid)
			s.logf("clock log: thread %d at %#x (listen %v exiting %v fatal %v op %d)", tid, r.Rip, t.listen, t.exiting, t.fatal, si.Op)
		}
		if t.held && t.caught && t.sig != 0 {
			// Held in the delivery of a signal it catches (delivered when
			// released): that signal waits outside the read.
			if info, err := proc.GetSiginfo(tid); err == nil {
				if _, err := s.clockSignalRunOut(t, t.sig, r.Rip, info); err != nil {
					s.logf("%v", err)
				}
			}
			continue
		}
		if !canRunOut(t) {
			continue
		}
		if out, err := s.runOut(t, s.clk.inside); err != nil || !out {
			s.logf("thread %d stays in a clock read at %#x: %v", tid, r.Rip, err)
		}
	}
}

// hideClock leaves the clock log's region out of maps: the recording
// neither saves nor replays it.
func (s *session) hideClock(maps []format.Mapping) []format.Mapping {
	if s.clk == nil {
		return maps
	}
	lo, hi := s.clk.region()
	return slices.DeleteFunc(maps, func(m format.Mapping) bool { return m.Start >= lo && m.End <= hi })
}

// readMaps reads the target's memory map, without the clock log.
func (s *session) readMaps() ([]format.Mapping, error) {
	maps, err := proc.ReadMaps(s.pid)
	return s.hideClock(maps), err
}

// removeClock points the entries back at the vDSO patch's stubs and
// unmaps the region, at a detach, the threads stepped out of it.
func (s *session) removeClock() {
	if s.clk == nil {
		return
	}
	if e, ok := s.src.(*ebpfSource); ok {
		e.dropClock() // before the view goes
	}
	if err := s.clk.remove(s.mem); err != nil {
		s.logf("clock log: restore the vDSO's entries: %v", err)
	}
	lo, hi := s.clk.region()
	if _, err := s.inject(proc.Call{Nr: unix.SYS_MUNMAP, Args: []uint64{lo, hi - lo}}); err != nil {
		s.logf("clock log: unmap it: %v", err)
	}
	s.dropClock()
}

// dropClock forgets the clock log (an exec took the memory it was in).
func (s *session) dropClock() {
	if s.clk == nil {
		return
	}
	if e, ok := s.src.(*ebpfSource); ok {
		e.dropClock()
	}
	if s.clk.view != nil {
		unix.Munmap(s.clk.view)
		s.clk.view = nil
	}
	s.clk = nil
}

// clockSignalRunOut moves a thread a signal found at rip, inside a clock
// read, out of the read before the signal is taken: a replay has neither
// the clock log's code nor the vDSO's, only the call the vDSO patch's stub
// makes, and could not stop, or enter a handler, where the thread stood;
// and a handler's own clock reads, nested in one that holds an index not
// yet stamped, would hold the log back until the handler returned. Only
// for a signal the read did not raise itself (readFault): one sent by
// kill, tgkill or sigqueue, a timer's, a child's, which could as well have
// come a few hundred instructions later. A fault of the read (a bad
// pointer) stays where it is.
//
// The signal is dropped from its delivery stop, the thread run out of the
// read (runOut), and the signal sent to the thread again, with tgkill; the
// thread is stopped in its delivery once more, given the siginfo it came
// with. (A tprec killed in between loses that one signal; single steps out
// of the read, as once done, killed the process instead.) It reports
// whether it moved the thread (its registers are to be read again), also
// when it failed to take it out.
func (s *session) clockSignalRunOut(t *thread, sig int, rip uint64, info []byte) (bool, error) {
	if s.clk == nil || !s.clk.inside(rip) || readFault(sig, info) {
		return false, nil
	}
	// The signals that come meanwhile are held back, and sent again
	// after this one.
	held := t.held
	t.held = false
	_, err := s.runOut(t, s.clk.inside)
	t.held = held
	var again []proc.HeldSignal
	again, serr := proc.SendAgain(s.pid, t.tid, proc.HeldSignal{Signo: sig, Siginfo: info}, func(st proc.Stop) (proc.RunOn, error) {
		return s.heldOn(t, st)
	})
	s.sendAgain(t, again)
	s.clockSignals++
	if serr != nil && err == nil && !proc.Gone(serr) {
		err = fmt.Errorf("clock log: %w", serr)
	}
	return true, err
}

// readFault reports whether a signal is one an instruction raises: a
// synchronous fault, trap or seccomp's SIGSYS, with a positive si_code
// (the kernel's own). Those are the signals a clock read can raise itself.
func readFault(sig int, info []byte) bool {
	if len(info) < 16 || int32(binary.LittleEndian.Uint32(info[8:])) <= 0 {
		return false
	}
	switch unix.Signal(sig) {
	case unix.SIGSEGV, unix.SIGBUS, unix.SIGILL, unix.SIGFPE, unix.SIGTRAP, unix.SIGSYS:
		return true
	}
	return false
}

// clockPlaces are where the region may go in the k-th try: 16 MiB times k
// below the vDSO [lo, hi), or as far above.
func clockPlaces(lo, hi, k uint64) []uint64 {
	return []uint64{lo&^(format.PageSize-1) - k<<24 - clkSize - format.PageSize, hi + k<<24}
}
