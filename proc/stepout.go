package proc

import (
	"fmt"

	"github.com/tprec/tprec/format"

	"golang.org/x/sys/unix"
)

// StepOut single-steps a stopped tracee until its rip is where inside says
// no, at most maxSteps instructions, with every signal blocked meanwhile so
// that no signal stop comes in between (the mask is put back afterwards).
// It reports whether the thread left. The thread must be in a stop it can
// be stepped from (an event, group or signal-delivery stop, or a
// syscall-exit stop), not at a syscall's entry.
//
// It is the last resort after RunOut, for a thread RunOut keeps finding
// inside (a program that does little else than what the range holds): a
// tracer killed in the middle of it leaves the thread to die of the step's
// SIGTRAP, with its signals blocked.
func StepOut(tid int, inside func(rip uint64) bool, maxSteps int) (bool, error) {
	mask, err := GetSigmask(tid)
	if err != nil {
		return false, fmt.Errorf("step out: %w", err)
	}
	if err := SetSigmask(tid, ^uint64(0)); err != nil {
		return false, fmt.Errorf("step out: block signals: %w", err)
	}
	out, err := stepOut(tid, inside, maxSteps)
	if rerr := SetSigmask(tid, mask); rerr != nil && err == nil {
		err = fmt.Errorf("step out: restore the signal mask: %w", rerr)
	}
	return out, err
}

// trapFlag is TF in rflags.
const trapFlag = 0x100

func stepOut(tid int, inside func(rip uint64) bool, maxSteps int) (bool, error) {
	for i := 0; ; i++ {
		r, err := GetRegs(tid)
		if err == nil && i > 0 {
			err = untrap(tid, &r)
		}
		switch {
		case err != nil:
			return false, err
		case !inside(r.Rip):
			return true, nil
		case i == maxSteps:
			return false, nil
		}
		if err := Resume(unix.PTRACE_SINGLESTEP, tid, 0); err != nil {
			return false, fmt.Errorf("step out: %w", err)
		}
		st, err := Wait(tid)
		if err != nil {
			return false, err
		}
		switch {
		case st.Exited():
			return false, fmt.Errorf("step out: %v", st)
		case st.Event() == unix.PTRACE_EVENT_EXIT:
			return false, fmt.Errorf("step out: %w", ErrExiting)
		case st.Event() != 0:
			continue // an interrupt asked for earlier: no instruction ran
		case st.Status.StopSignal() != unix.SIGTRAP:
			// A fault of the instruction itself (a blocked synchronous
			// signal is forced through). Resumed without it, the thread
			// runs the instruction again and faults again.
			return false, fmt.Errorf("step out: unexpected stop %v", st)
		}
	}
}

// untrap mends r11 after a step that ran a `syscall` (a vDSO's fallback to
// the kernel, a stub's): it took the flags with the trap flag the step had
// set, which the thread running freely would not have. The sign of such a
// step is rcx, the return address the syscall saved, equal to rip.
func untrap(tid int, r *format.Regs) error {
	if r.Rcx != r.Rip || r.R11&trapFlag == 0 {
		return nil
	}
	r.R11 &^= trapFlag
	return SetRegs(tid, *r)
}
