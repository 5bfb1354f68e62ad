package proc

import (
	"errors"
	"fmt"

	"github.com/tprec/tprec/format"

	"golang.org/x/sys/unix"
)

// Injection is the result of one injected syscall.
type Injection struct {
	Ret   int64
	Child int // pid reported by a PTRACE_EVENT_CLONE/FORK during the call, else 0
	// Requeued says the signal the thread was stopped for went back to
	// its queue (Call.Signal): it is delivered when the thread next runs.
	Requeued bool
	// Stopped says a SIGSTOP (which no mask blocks) came during the call
	// and was held back: the caller sends it again once the thread is
	// its own again.
	Stopped bool
}

// ErrExiting reports a tracee that stopped on its way out
// (PTRACE_EVENT_EXIT) during an injection.
var ErrExiting = errors.New("the thread is exiting")

// Inject makes a stopped tracee execute one syscall through the syscall
// instruction at insn (2 bytes: 0f 05) and puts its registers back afterwards.
// The tracee must be in a stop it can be single-stepped from (event, group or
// signal-delivery stop; not a syscall-entry stop). orig_rax is set to -1 so the
// kernel's syscall-restart logic leaves the injected call alone. Signals stay
// pending: the caller blocks them with SetSigmask for the duration when it
// cannot afford a signal stop here; a signal stop that still arrives is
// reported as an error and the signal is left pending.
func Inject(tid int, insn uint64, nr int, args ...uint64) (Injection, error) {
	saved, err := GetRegs(tid)
	if err != nil {
		return Injection{}, fmt.Errorf("inject syscall %d: %w", nr, err)
	}
	res, err := injectWith(tid, saved, insn, nr, args)
	if rerr := SetRegs(tid, saved); rerr != nil && err == nil {
		err = fmt.Errorf("inject syscall %d: restore registers: %w", nr, rerr)
	}
	return res, err
}

func injectWith(tid int, base Regs, insn uint64, nr int, args []uint64) (Injection, error) {
	r := base
	r.Rip = insn
	r.Rax = uint64(nr)
	r.OrigRax = ^uint64(0)
	dst := []*uint64{&r.Rdi, &r.Rsi, &r.Rdx, &r.R10, &r.R8, &r.R9}
	for i, a := range args {
		*dst[i] = a
	}
	if err := SetRegs(tid, r); err != nil {
		return Injection{}, fmt.Errorf("inject syscall %d: %w", nr, err)
	}
	var res Injection
	for {
		if err := Resume(unix.PTRACE_SINGLESTEP, tid, 0); err != nil {
			return res, fmt.Errorf("inject syscall %d: step: %w", nr, err)
		}
		st, err := Wait(tid)
		if err != nil {
			return res, err
		}
		if st.Exited() {
			return res, fmt.Errorf("inject syscall %d: %v", nr, st)
		}
		if event, err := injectionEvent(tid, nr, st, &res); event || err != nil {
			if err != nil {
				return res, err
			}
			continue
		}
		if st.Status.StopSignal() != unix.SIGTRAP {
			return res, fmt.Errorf("inject syscall %d: unexpected stop %v", nr, st)
		}
		cur, err := GetRegs(tid)
		if err != nil {
			return res, err
		}
		if cur.Rip != insn+2 {
			return res, fmt.Errorf("inject syscall %d: stopped at %#x, expected %#x", nr, cur.Rip, insn+2)
		}
		res.Ret = int64(cur.Rax)
		return res, nil
	}
}

// injectionEvent handles an event stop st of thread tid during an injected
// syscall nr: a PTRACE_EVENT_CLONE/FORK/VFORK notes the child in res, any
// other event but the thread's exit is passed over (a trap asked for before
// the injection). It reports whether st was an event; the exit is the error
// ErrExiting.
func injectionEvent(tid, nr int, st Stop, res *Injection) (bool, error) {
	switch st.Event() {
	case 0:
		return false, nil
	case unix.PTRACE_EVENT_EXIT:
		// The process is going away (a fatal signal, another thread's
		// exit_group): resumed, the thread would end, and the end of a
		// first thread is not reported while others live. It stays in
		// this stop for the caller.
		return true, fmt.Errorf("inject syscall %d: %w", nr, ErrExiting)
	case unix.PTRACE_EVENT_CLONE, unix.PTRACE_EVENT_FORK, unix.PTRACE_EVENT_VFORK:
		msg, err := EventMsg(tid)
		if err != nil {
			return true, err
		}
		res.Child = int(msg)
	}
	return true, nil
}

// Regs is format.Regs, named here for brevity.
type Regs = format.Regs
