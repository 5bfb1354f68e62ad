package recorder

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"github.com/tprec/tprec/format"
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
// the recorder maps into the process. The stub calls the vDSO's own code
// (the instructions the jump displaced, moved into the stub, then a jump
// back past them), takes the next index of a counter in the region with
// `lock xadd`, and writes the call and its result into the region's ring
// at that index: the thread (its fs base, read with rdfsbase), the number,
// the arguments, the return value and the bytes written. The entry's stamp
// (index + 1) is written last; the collector reads entries in index order
// as their stamps appear.
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
// wiped on fork holds the switch), and for calls it does not log
// (gettimeofday with a timezone).
//
// This file builds the region's code and installs it in a stopped process.

// Layout of the region: the code page, the header page, the ring; the
// switch page, private and wiped on fork, follows it.
const (
	clkCode      = 0
	clkHead      = format.PageSize
	clkRing      = 2 * format.PageSize
	clkEntries   = 1 << 15
	clkEntrySize = 64
	clkSize      = clkRing + clkEntries*clkEntrySize // the shared part
	clkSwitch    = clkSize                           // one private page
	// clkSlack entries stay free between the collector and the stubs:
	// threads that passed the check for room before one of them took
	// the last index (one each at most).
	clkSlack = 4096

	// the header
	clkCounter  = clkHead      // next index
	clkConsumed = clkHead + 64 // indexes below it read by the collector

	// an entry
	ceStamp   = 0 // index + 1, written last
	ceFS      = 8 // the thread's fs base
	ceNr      = 16
	ceRet     = 24
	ceArg0    = 32
	ceOutAddr = 40 // where the call wrote its 16 bytes (0: nothing written)
	ceOut     = 48 // those bytes
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

// casm assembles the region's code at base.
type casm struct {
	b      []byte
	base   uint64
	labels map[string]int
	rel    []struct {
		at, end int
		label   string
		abs     uint64 // when label is ""
	}
}

func (a *casm) emit(b ...byte) { a.b = append(a.b, b...) }

func (a *casm) label(name string) { a.labels[name] = len(a.b) }

// to emits op, a rel32 to label (or to the absolute address abs when label
// is ""), then tail.
func (a *casm) to(label string, abs uint64, op []byte, tail ...byte) {
	a.emit(op...)
	at := len(a.b)
	a.emit(0, 0, 0, 0)
	a.emit(tail...)
	a.rel = append(a.rel, struct {
		at, end int
		label   string
		abs     uint64
	}{at, len(a.b), label, abs})
}

func (a *casm) resolve() error {
	for _, r := range a.rel {
		target := r.abs
		if r.label != "" {
			off, ok := a.labels[r.label]
			if !ok {
				return fmt.Errorf("clock log: no label %s", r.label)
			}
			target = a.base + uint64(off)
		}
		d := int64(target) - int64(a.base+uint64(r.end))
		if d != int64(int32(d)) {
			return fmt.Errorf("clock log: %#x out of reach of %#x", target, a.base+uint64(r.end))
		}
		binary.LittleEndian.PutUint32(a.b[r.at:], uint32(int32(d)))
	}
	return nil
}

// displaced decodes the first instructions of a function from orig, at
// addr, until they cover the 5 bytes of a jmp, and returns them moved to
// run at to, and how many bytes of orig they were. ok is false when one of
// them cannot run elsewhere.
func displaced(orig []byte, addr, to uint64) (moved []byte, n int, ok bool) {
	for n < 5 {
		inst, err := x86asm.Decode(orig[n:], 64)
		if err != nil || !movable(inst) {
			return nil, 0, false
		}
		b := append([]byte(nil), orig[n:n+inst.Len]...)
		if inst.PCRel == 4 {
			d := int64(int32(binary.LittleEndian.Uint32(b[inst.PCRelOff:]))) + int64(addr+uint64(n)) - int64(to+uint64(len(moved)))
			if d != int64(int32(d)) {
				return nil, 0, false
			}
			binary.LittleEndian.PutUint32(b[inst.PCRelOff:], uint32(int32(d)))
		} else if inst.PCRel != 0 {
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

// clockCode returns the code page of a region at base for fns, and the
// address of each function's stub (by entry). A function whose prologue
// cannot be moved gets no stub: the caller leaves it on the syscall.
func clockCode(base uint64, fns []clockFunc) ([]byte, map[uint64]uint64, error) {
	a := &casm{base: base + clkCode, labels: map[string]int{}}
	abs := func(off int) uint64 { return base + uint64(off) }
	stubs := map[uint64]uint64{}
	for k, f := range fns {
		ptr, ok := clockLoggable[f.nr]
		if !ok {
			continue
		}
		detour := fmt.Sprintf("detour%d", k)
		fallback := fmt.Sprintf("fallback%d", k)
		skip := fmt.Sprintf("skip%d", k)
		start, rels := len(a.b), len(a.rel)
		a.to("", abs(clkSwitch), []byte{0x80, 0x3d}, 0x00) // cmp byte [switch], 0
		a.to(fallback, 0, []byte{0x0f, 0x84})              // je fallback
		if f.nr == unix.SYS_CLOCK_GETTIME {
			// Only the clocks the vDSO reads itself: for the others it
			// makes the syscall, which the syscall log would hold too.
			a.emit(0x83, 0xff, 0x1f)              // cmp edi, 31
			a.to(fallback, 0, []byte{0x0f, 0x87}) // ja fallback (a CPU clock's id is negative)
			a.emit(0xb8)                          // mov eax, imm32
			a.emit(binary.LittleEndian.AppendUint32(nil, vdsoClocks)...)
			a.emit(0x0f, 0xa3, 0xf8)              // bt eax, edi
			a.to(fallback, 0, []byte{0x0f, 0x83}) // jnc fallback
		}
		if f.nr == unix.SYS_GETTIMEOFDAY {
			a.emit(0x48, 0x85, 0xf6)              // test rsi, rsi: a timezone
			a.to(fallback, 0, []byte{0x0f, 0x85}) // jne fallback
		}
		a.to("", abs(clkCounter), []byte{0x48, 0x8b, 0x05})  // mov rax, [counter]
		a.to("", abs(clkConsumed), []byte{0x48, 0x2b, 0x05}) // sub rax, [consumed]
		a.emit(0x48, 0x3d)                                   // cmp rax, imm32
		a.emit(binary.LittleEndian.AppendUint32(nil, clkEntries-clkSlack)...)
		a.to(fallback, 0, []byte{0x0f, 0x83})                           // jae fallback
		a.emit(0x57, 0x56)                                              // push rdi; push rsi
		a.emit(0x48, 0x83, 0xec, 0x08)                                  // sub rsp, 8: aligned as at the entry
		a.to(detour, 0, []byte{0xe8})                                   // call detour
		a.emit(0x48, 0x83, 0xc4, 0x08)                                  // add rsp, 8
		a.emit(0x5e, 0x5f)                                              // pop rsi; pop rdi
		a.emit(0x48, 0x63, 0xc0)                                        // movsxd rax, eax: an int
		a.emit(0xb9, 1, 0, 0, 0)                                        // mov ecx, 1
		a.to("", abs(clkCounter), []byte{0xf0, 0x48, 0x0f, 0xc1, 0x0d}) // lock xadd [counter], rcx
		a.emit(0x89, 0xca)                                              // mov edx, ecx
		a.emit(0x81, 0xe2)                                              // and edx, imm32
		a.emit(binary.LittleEndian.AppendUint32(nil, clkEntries-1)...)
		a.emit(0x48, 0xc1, 0xe2, 0x06)                   // shl rdx, 6
		a.to("", abs(clkRing), []byte{0x4c, 0x8d, 0x05}) // lea r8, [ring]
		a.emit(0x4c, 0x01, 0xc2)                         // add rdx, r8
		a.emit(0xf3, 0x49, 0x0f, 0xae, 0xc0)             // rdfsbase r8
		a.emit(0x4c, 0x89, 0x42, ceFS)                   // mov [rdx+fs], r8
		a.emit(0x48, 0xc7, 0x42, ceNr)                   // mov qword [rdx+nr], imm32
		a.emit(binary.LittleEndian.AppendUint32(nil, uint32(f.nr))...)
		a.emit(0x48, 0x89, 0x42, ceRet)  // mov [rdx+ret], rax
		a.emit(0x48, 0x89, 0x7a, ceArg0) // mov [rdx+arg0], rdi
		// r8 = the pointer the call wrote through, or 0.
		if ptr == 6 {
			a.emit(0x49, 0x89, 0xf0) // mov r8, rsi
		} else {
			a.emit(0x49, 0x89, 0xf8) // mov r8, rdi
		}
		a.emit(0x48, 0x85, 0xc0)            // test rax, rax
		a.emit(0x74, 0x03)                  // je +3
		a.emit(0x45, 0x31, 0xc0)            // xor r8d, r8d: an error wrote nothing
		a.emit(0x4c, 0x89, 0x42, ceOutAddr) // mov [rdx+outaddr], r8
		a.emit(0x4d, 0x85, 0xc0)            // test r8, r8
		a.to(skip, 0, []byte{0x0f, 0x84})   // je skip
		a.emit(0x4d, 0x8b, 0x08)            // mov r9, [r8]
		a.emit(0x4c, 0x89, 0x4a, ceOut)     // mov [rdx+out], r9
		a.emit(0x4d, 0x8b, 0x48, 0x08)      // mov r9, [r8+8]
		a.emit(0x4c, 0x89, 0x4a, ceOut+8)   // mov [rdx+out+8], r9
		a.label(skip)
		a.emit(0x4c, 0x8d, 0x41, 0x01) // lea r8, [rcx+1]
		a.emit(0x4c, 0x89, 0x02)       // mov [rdx], r8: the stamp
		a.emit(0xc3)                   // ret
		a.label(detour)
		moved, n, ok := displaced(f.orig, f.entry, a.base+uint64(len(a.b)))
		if !ok {
			a.b, a.rel = a.b[:start], a.rel[:rels]
			continue
		}
		a.emit(moved...)
		a.to("", f.entry+uint64(n), []byte{0xe9}) // jmp past them
		a.label(fallback)
		a.emit(0xb8) // mov eax, NR; syscall; ret
		a.emit(binary.LittleEndian.AppendUint32(nil, uint32(f.nr))...)
		a.emit(0x0f, 0x05, 0xc3)
		stubs[f.entry] = a.base + uint64(start)
	}
	if len(a.b) > format.PageSize {
		return nil, nil, fmt.Errorf("clock log: %d bytes of code", len(a.b))
	}
	if err := a.resolve(); err != nil {
		return nil, nil, err
	}
	return a.b, stubs, nil
}

// clockLog is a clock log installed in a process.
type clockLog struct {
	base  uint64 // the region in the process
	view  []byte // its shared part, mapped here
	sites []clockSite
}

// clockSite is an entry point pointed at its stub: the bytes written, and
// those they replaced.
type clockSite struct {
	entry         uint64
	orig, patched []byte
}

// installClockLog maps a clock log into a stopped process through thread
// tid's syscalls at insn (a `syscall` instruction the process has), near
// its vDSO [lo, hi) (a rel32 reaches the stubs from the entries, and the
// vDSO's data from the moved instructions), writes its code for fns and
// points their entries at it. zero is the address of a zero byte in the
// process (the memfd's name). Every thread must be stopped outside the
// entries' first 8 bytes. fns whose prologue cannot be moved stay as they
// are.
func installClockLog(tid int, mem *proc.Mem, insn, lo, hi, zero uint64, fns []clockFunc) (*clockLog, error) {
	call := func(what string, nr int, args ...uint64) (uint64, error) {
		res, err := proc.Inject(tid, insn, nr, args...)
		if err == nil && res.Ret < 0 && res.Ret > -4096 {
			err = unix.Errno(-res.Ret)
		}
		if err != nil {
			return 0, fmt.Errorf("clock log: %s: %w", what, err)
		}
		return uint64(res.Ret), nil
	}
	fd, err := call("memfd_create", unix.SYS_MEMFD_CREATE, zero, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	defer call("close", unix.SYS_CLOSE, fd)
	if _, err := call("ftruncate", unix.SYS_FTRUNCATE, fd, clkSize); err != nil {
		return nil, err
	}
	// Below the vDSO, or above it, 16 MiB apart: the first place free.
	var base uint64
	for k := uint64(1); k <= 64 && base == 0; k++ {
		for _, c := range []uint64{lo&^(format.PageSize-1) - k<<24 - clkSize - format.PageSize, hi + k<<24} {
			ret, err := call("mmap", unix.SYS_MMAP, c+clkCode, format.PageSize, unix.PROT_READ|unix.PROT_EXEC,
				unix.MAP_SHARED|unix.MAP_FIXED_NOREPLACE, fd, clkCode)
			if err != nil || ret != c+clkCode {
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
	f, err := os.OpenFile(fmt.Sprintf("/proc/%d/fd/%d", tid, fd), os.O_RDWR, 0)
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
	l := &clockLog{base: base, view: view}
	code, stubs, err := clockCode(base, fns)
	if err == nil {
		copy(view[clkCode:], code)
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
		l.sites = append(l.sites, clockSite{entry: fn.entry, orig: cur, patched: patched})
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

// counter is the next index a stub will take.
func (l *clockLog) counter() uint64 { return atomic.LoadUint64(l.word(clkCounter)) }

// entry returns the entry of index i once its stamp is there.
func (l *clockLog) entry(i uint64) (clockEntry, bool) {
	off := clkRing + int(i%clkEntries)*clkEntrySize
	if atomic.LoadUint64(l.word(off+ceStamp)) != i+1 {
		return clockEntry{}, false
	}
	le := binary.LittleEndian
	e := clockEntry{index: i, fs: le.Uint64(l.view[off+ceFS:]), nr: int(le.Uint64(l.view[off+ceNr:])),
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
