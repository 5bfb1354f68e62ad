package proc

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"
)

// A Trampoline is a piece of code and a data area in a tracee's memory
// through which the tracer has one of its threads make a syscall, arranged so
// that the thread comes out whole whenever the tracer dies: killed at any
// instant of an injection, the tracer leaves a thread that finishes the call
// and then puts back its own registers and signal mask and goes on where it
// was stopped.
//
// Inject (inject.go) replaces the registers, single-steps the `syscall` and
// only then restores them: a tracer that dies in between leaves the thread
// running injected registers with the trap flag set, and it dies of SIGTRAP.
// Here nothing is single-stepped (the tracer follows the call through its
// syscall-entry and -exit stops), and everything the thread needs to recover
// is in the data area before its registers change:
//
//	T0:  rt_sigprocmask(SIG_SETMASK, &ones, NULL, 8)   block every signal
//	T1:  rax, rdi.. = nr, args from the data area; syscall
//	T2:  if the call is a clone and returned 0:        the child
//	         exit_group(0)
//	     rt_sigprocmask(SIG_SETMASK, &mask, NULL, 8)   the thread's own mask
//	     load every register but rax and rsp; rebuild rflags (DF with
//	     std/cld, OF with an add, the rest with sahf); load rax;
//	     jmp [rip]
//
// The tracer runs only T1's call: it sets the full mask itself and starts the
// thread at T1, and restores mask and registers itself at the exit stop. The
// rest of the code runs only when the tracer is gone. The restore needs no
// stack (rsp is never changed, nothing is pushed: a goroutine stack has no
// room below its pointer), and the registers it loads are those the kernel
// would have resumed with: a call interrupted for the stop is restarted (rip
// back on its `syscall`, rax its number), which the kernel would have done on
// the way out of the stop. A signal that arrives once the thread's mask is
// back is delivered inside the tail of the restore, as it could have been
// anywhere; only its handler sees a rip in the trampoline.
type Trampoline struct {
	Addr  uint64 // the first byte (T0)
	image []byte
	t1    uint64 // the call's setup, after the mask is blocked
	t2    uint64 // after the call's syscall instruction
	data  uint64 // the data area
}

// Slots of the data area, 8 bytes each.
const (
	tsOnes   = 0
	tsMask   = 1
	tsNr     = 2
	tsArg0   = 3 // six arguments
	tsClone  = 9
	tsRax    = 10 // then the registers the thread resumes with
	tsRbx    = 11
	tsRcx    = 12
	tsRdx    = 13
	tsRsi    = 14
	tsRdi    = 15
	tsRbp    = 16
	tsR8     = 17 // r8..r15
	tsRip    = 25
	tsRflags = 26

	tsDataLen = 27 * 8
)

// tasm assembles the few x86-64 instruction forms the trampoline uses, with
// rip-relative operands naming data slots resolved once the code's length is
// known.
type tasm struct {
	b      []byte
	fixups []tfix
	labels map[string]int
	jumps  []tjump
}

type tfix struct{ at, end, slot int } // disp32 at b[at:], instruction ends at end

type tjump struct {
	at    int // rel8 at b[at]
	label string
}

// rip emits an instruction whose last bytes are a rip-relative disp32 to
// slot, followed by tail (an immediate).
func (a *tasm) rip(prefix []byte, slot int, tail ...byte) {
	a.b = append(a.b, prefix...)
	at := len(a.b)
	a.b = append(a.b, 0, 0, 0, 0)
	a.b = append(a.b, tail...)
	a.fixups = append(a.fixups, tfix{at: at, end: len(a.b), slot: slot})
}

func (a *tasm) raw(b ...byte) { a.b = append(a.b, b...) }

func (a *tasm) label(name string) { a.labels[name] = len(a.b) }

// jcc emits a short jump (op: 0xeb jmp, 0x74 je, 0x75 jne, 0x73 jnc) to a label.
func (a *tasm) jcc(op byte, label string) {
	a.b = append(a.b, op, 0)
	a.jumps = append(a.jumps, tjump{at: len(a.b) - 1, label: label})
}

// movRegSlot loads a 64-bit register (0 rax .. 15 r15) from a slot.
func (a *tasm) movRegSlot(reg, slot int) {
	rex := byte(0x48)
	if reg >= 8 {
		rex |= 0x04 // REX.R
	}
	a.rip([]byte{rex, 0x8b, byte(reg&7)<<3 | 0x05}, slot)
}

// sigprocmask emits rt_sigprocmask(SIG_SETMASK, &slot, NULL, 8).
func (a *tasm) sigprocmask(slot int) {
	a.raw(0xb8, unix.SYS_RT_SIGPROCMASK, 0, 0, 0) // mov eax, 14
	a.raw(0xbf, unix.SIG_SETMASK, 0, 0, 0)        // mov edi, 2
	a.rip([]byte{0x48, 0x8d, 0x35}, slot)         // lea rsi, [rip+slot]
	a.raw(0x31, 0xd2)                             // xor edx, edx
	a.raw(0x41, 0xba, 8, 0, 0, 0)                 // mov r10d, 8
	a.raw(0x0f, 0x05)                             // syscall
}

// x86-64 register numbers.
const (
	rAX, rCX, rDX, rBX, rSP, rBP, rSI, rDI = 0, 1, 2, 3, 4, 5, 6, 7
	r8, r9, r10                            = 8, 9, 10
)

// NewTrampoline assembles a trampoline to be placed at addr.
func NewTrampoline(addr uint64) *Trampoline {
	a := &tasm{labels: map[string]int{}}
	a.sigprocmask(tsOnes)
	a.label("t1")
	a.movRegSlot(rAX, tsNr)
	for i, r := range []int{rDI, rSI, rDX, r10, r8, r9} {
		a.movRegSlot(r, tsArg0+i)
	}
	a.raw(0x0f, 0x05) // syscall
	a.label("t2")
	a.rip([]byte{0x48, 0x83, 0x3d}, tsClone, 0) // cmp qword [rip+clone], 0
	a.jcc(0x74, "restore")                      // je
	a.raw(0x48, 0x85, 0xc0)                     // test rax, rax
	a.jcc(0x75, "restore")                      // jne: the parent
	a.raw(0xb8, unix.SYS_EXIT_GROUP, 0, 0, 0)   // mov eax, 231
	a.raw(0x31, 0xff)                           // xor edi, edi
	a.raw(0x0f, 0x05)                           // syscall
	a.raw(0x0f, 0x0b)                           // ud2
	a.label("restore")
	a.sigprocmask(tsMask)
	for _, r := range []struct{ reg, slot int }{
		{rBX, tsRbx}, {rCX, tsRcx}, {rDX, tsRdx}, {rSI, tsRsi}, {rDI, tsRdi}, {rBP, tsRbp},
	} {
		a.movRegSlot(r.reg, r.slot)
	}
	for i := range 8 {
		a.movRegSlot(r8+i, tsR8+i)
	}
	// DF (bit 10)
	a.rip([]byte{0x48, 0x0f, 0xba, 0x25}, tsRflags, 10) // bt qword [rip+rflags], 10
	a.jcc(0x73, "cld")                                  // jnc
	a.raw(0xfd)                                         // std
	a.jcc(0xeb, "df")
	a.label("cld")
	a.raw(0xfc) // cld
	a.label("df")
	// OF (bit 11): set by overflowing al, cleared by xor
	a.rip([]byte{0x48, 0x0f, 0xba, 0x25}, tsRflags, 11) // bt qword [rip+rflags], 11
	a.jcc(0x73, "of0")                                  // jnc
	a.raw(0xb0, 0x7f)                                   // mov al, 0x7f
	a.raw(0x04, 0x01)                                   // add al, 1
	a.jcc(0xeb, "of")
	a.label("of0")
	a.raw(0x31, 0xc0) // xor eax, eax
	a.label("of")
	a.rip([]byte{0x8a, 0x25}, tsRflags) // mov ah, [rip+rflags]: SF ZF AF PF CF
	a.raw(0x9e)                         // sahf
	a.movRegSlot(rAX, tsRax)
	a.rip([]byte{0xff, 0x25}, tsRip) // jmp [rip+rip]

	for _, j := range a.jumps {
		a.b[j.at] = byte(int8(a.labels[j.label] - (j.at + 1)))
	}
	dataOff := (len(a.b) + 7) &^ 7
	for _, f := range a.fixups {
		binary.LittleEndian.PutUint32(a.b[f.at:], uint32(int32(dataOff+8*f.slot-f.end)))
	}
	img := make([]byte, dataOff+tsDataLen)
	copy(img, a.b)
	return &Trampoline{
		Addr:  addr,
		image: img,
		t1:    addr + uint64(a.labels["t1"]),
		t2:    addr + uint64(a.labels["t2"]),
		data:  addr + uint64(dataOff),
	}
}

// Spare is the address of 16 bytes of the data area that a clone's child
// never reads (the clone's third and fourth arguments): a tracer may put
// bytes there in a child it made through the trampoline, for a call it
// injects in that child.
func (t *Trampoline) Spare() uint64 { return t.data + 8*(tsArg0+2) }

// TrampolineSize is how many bytes a trampoline takes, code and data.
func TrampolineSize() int { return len(NewTrampoline(0).image) }

// Image is what must be written at Addr before the first injection (the
// data area zero).
func (t *Trampoline) Image() []byte { return append([]byte(nil), t.image...) }

// MemWriter writes a tracee's memory (Mem).
type MemWriter interface {
	WriteAt(b []byte, addr uint64) error
}

// Call is one syscall to inject through a trampoline.
type Call struct {
	Nr   int
	Args []uint64
	// Clone says the call creates a process or thread whose copy of the
	// trampoline must not go on: a child that runs it (its tracer gone
	// before it was seen) calls exit_group(0) at once.
	Clone bool
	// Signal, when the thread is stopped in the delivery of that signal,
	// is not lost: the injection resumes the thread with it while every
	// signal is blocked, so the kernel queues it again, with its siginfo,
	// and delivers it once the thread's mask is back (Injection.Requeued).
	Signal int
}

// resumedRegs returns the registers a thread stopped with regs resumes
// with when no signal handler runs: a call that returned one of the
// kernel's restart codes is made again (arch/x86/kernel/signal.c).
func resumedRegs(regs Regs) Regs {
	if int64(regs.OrigRax) < 0 {
		return regs
	}
	switch int64(regs.Rax) {
	case -512, -513, -514: // ERESTARTSYS, ERESTARTNOINTR, ERESTARTNOHAND
		regs.Rax = regs.OrigRax
		regs.Rip -= 2
	case -516: // ERESTART_RESTARTBLOCK
		regs.Rax = unix.SYS_RESTART_SYSCALL
		regs.Rip -= 2
	}
	return regs
}

// dataArea fills the trampoline's data area for one call.
func (t *Trampoline) dataArea(c Call, mask uint64, regs Regs) []byte {
	d := make([]byte, tsDataLen)
	put := func(slot int, v uint64) { binary.LittleEndian.PutUint64(d[8*slot:], v) }
	put(tsOnes, ^uint64(0))
	put(tsMask, mask)
	put(tsNr, uint64(c.Nr))
	for i, a := range c.Args {
		put(tsArg0+i, a)
	}
	if c.Clone {
		put(tsClone, 1)
	}
	r := resumedRegs(regs)
	put(tsRax, r.Rax)
	put(tsRbx, r.Rbx)
	put(tsRcx, r.Rcx)
	put(tsRdx, r.Rdx)
	put(tsRsi, r.Rsi)
	put(tsRdi, r.Rdi)
	put(tsRbp, r.Rbp)
	for i, v := range []uint64{r.R8, r.R9, r.R10, r.R11, r.R12, r.R13, r.R14, r.R15} {
		put(tsR8+i, v)
	}
	put(tsRip, r.Rip)
	put(tsRflags, r.Eflags)
	return d
}

// Inject makes the stopped thread tid execute c through the trampoline,
// which must be in its memory (Image at Addr), and puts it back as it was. The
// thread must be in a stop it can be resumed from into user code (an event,
// signal-delivery or syscall-exit stop) and traced with
// PTRACE_O_TRACESYSGOOD. It ends at the call's syscall-exit stop with its
// own registers and mask, or, when it was stopped in a call the kernel is to
// restart, in a PTRACE_EVENT_STOP after it: the call is then restarted, or
// not, by the kernel on the way out of that stop, exactly as it would have
// been on the way out of the stop it was in.
func (t *Trampoline) Inject(mem MemWriter, tid int, c Call) (Injection, error) {
	if len(c.Args) > 6 {
		return Injection{}, fmt.Errorf("inject syscall %d: %d arguments", c.Nr, len(c.Args))
	}
	saved, err := GetRegs(tid)
	if err != nil {
		return Injection{}, fmt.Errorf("inject syscall %d: %w", c.Nr, err)
	}
	mask, err := GetSigmask(tid)
	if err != nil {
		return Injection{}, fmt.Errorf("inject syscall %d: %w", c.Nr, err)
	}
	if err := mem.WriteAt(t.dataArea(c, mask, saved), t.data); err != nil {
		return Injection{}, fmt.Errorf("inject syscall %d: %w", c.Nr, err)
	}
	// The order matters, each step leaving a thread that recovers alone:
	// first into the trampoline at T0, which blocks the signals itself;
	// then the mask blocked by ptrace, so the traced run cannot stop for a
	// signal; then T1, which skips the block.
	r := saved
	r.Rip, r.OrigRax = t.Addr, ^uint64(0)
	if err := SetRegs(tid, r); err != nil {
		return Injection{}, fmt.Errorf("inject syscall %d: %w", c.Nr, err)
	}
	res, err := t.run(tid, c, r)
	if err != nil && res.stage == 0 {
		// Nothing ran: put the mask (which run may have blocked), then the
		// registers back as they were.
		if rerr := SetSigmask(tid, mask); rerr != nil {
			err = fmt.Errorf("%w (and restoring its signal mask: %v)", err, rerr)
		}
		if rerr := SetRegs(tid, saved); rerr != nil {
			err = fmt.Errorf("%w (and restoring its registers: %v)", err, rerr)
		}
		return res.Injection, err
	}
	if res.stage < 3 {
		// Stopped somewhere before the call's exit (an exiting process):
		// mask and registers go back; the trampoline is not run again.
		SetSigmask(tid, mask)
		SetRegs(tid, saved)
		return res.Injection, err
	}
	// At the call's exit stop: mask, then registers (a tracer gone in
	// between leaves the trampoline's restore to do the same).
	if err := SetSigmask(tid, mask); err != nil {
		return res.Injection, fmt.Errorf("inject syscall %d: restore the signal mask: %w", c.Nr, err)
	}
	if err := SetRegs(tid, saved); err != nil {
		return res.Injection, fmt.Errorf("inject syscall %d: restore registers: %w", c.Nr, err)
	}
	if resumedRegs(saved) == saved {
		return res.Injection, nil
	}
	// The thread was stopped in a call the kernel restarts on the way out
	// of the stop, in the signal path, which a syscall-exit stop does not
	// pass through unless a signal is pending: a trap on the way out stops
	// the thread once more where that path runs for its own registers (a
	// handler delivered there turns the call into EINTR, as it would have).
	if err := Interrupt(tid); err != nil {
		return res.Injection, fmt.Errorf("inject syscall %d: %w", c.Nr, err)
	}
	if err := Resume(unix.PTRACE_SYSCALL, tid, 0); err != nil {
		return res.Injection, fmt.Errorf("inject syscall %d: %w", c.Nr, err)
	}
	st, err := Wait(tid)
	for err == nil && st.Signal() == int(unix.SIGSTOP) {
		// Dequeued on the way out, before the trap: held back too.
		res.Stopped = true
		if err := Resume(unix.PTRACE_SYSCALL, tid, 0); err != nil {
			return res.Injection, fmt.Errorf("inject syscall %d: %w", c.Nr, err)
		}
		st, err = Wait(tid)
	}
	if err != nil {
		return res.Injection, err
	}
	switch {
	case st.Exited():
		return res.Injection, fmt.Errorf("inject syscall %d: %v", c.Nr, st)
	case st.Event() == unix.PTRACE_EVENT_STOP:
		return res.Injection, nil
	case st.Event() == unix.PTRACE_EVENT_EXIT:
		return res.Injection, fmt.Errorf("inject syscall %d: %w", c.Nr, ErrExiting)
	}
	return res.Injection, fmt.Errorf("inject syscall %d: unexpected stop %v on the way out%s", c.Nr, st, stopDetail(tid))
}

type trampRun struct {
	Injection
	stage int // 0 nothing ran, 1 resumed, 2 at the call's entry, 3 at its exit
}

// run blocks the signals, starts the thread at T1 and follows the call to
// its exit stop.
func (t *Trampoline) run(tid int, c Call, r Regs) (trampRun, error) {
	var res trampRun
	if err := SetSigmask(tid, ^uint64(0)); err != nil {
		return res, fmt.Errorf("inject syscall %d: block signals: %w", c.Nr, err)
	}
	r.Rip = t.t1
	if err := SetRegs(tid, r); err != nil {
		return res, fmt.Errorf("inject syscall %d: %w", c.Nr, err)
	}
	sig := c.Signal
	for {
		if err := Resume(unix.PTRACE_SYSCALL, tid, sig); err != nil {
			return res, fmt.Errorf("inject syscall %d: resume: %w", c.Nr, err)
		}
		if res.stage == 0 {
			res.stage = 1
			res.Requeued = sig != 0
		}
		sig = 0
		st, err := Wait(tid)
		if err != nil {
			return res, err
		}
		if st.Exited() {
			return res, fmt.Errorf("inject syscall %d: %v", c.Nr, st)
		}
		if !st.SyscallStop() {
			if st.Signal() == int(unix.SIGSTOP) {
				res.Stopped = true // held back: sent again by the caller
				continue
			}
			event, err := injectionEvent(tid, c.Nr, st, &res.Injection)
			if err != nil {
				return res, err
			}
			if !event {
				return res, fmt.Errorf("inject syscall %d: unexpected stop %v%s", c.Nr, st, stopDetail(tid))
			}
			continue
		}
		si, err := GetSyscallInfo(tid)
		if err != nil {
			return res, err
		}
		switch si.Op {
		case SyscallEntry:
			if si.Nr != uint64(c.Nr) || si.Rip != t.t2 {
				return res, fmt.Errorf("inject syscall %d: entered syscall %d at %#x, expected at %#x", c.Nr, si.Nr, si.Rip, t.t2)
			}
			res.stage = 2
		case SyscallExit:
			if res.stage != 2 {
				// The exit of the call the thread was stopped at, before
				// the trampoline ran.
				continue
			}
			res.stage = 3
			res.Ret = si.Ret
			return res, nil
		}
	}
}

// stopDetail says where a thread stopped and, for a signal, its si_code.
func stopDetail(tid int) string {
	d := ""
	if r, err := GetRegs(tid); err == nil {
		d = fmt.Sprintf(" at %#x", r.Rip)
	}
	if info, err := GetSiginfo(tid); err == nil && len(info) >= 12 {
		d += fmt.Sprintf(" (si_code %d)", int32(binary.LittleEndian.Uint32(info[8:])))
	}
	return d
}
