package proc

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// RunOut lets a stopped tracee run on until it is stopped with its rip
// where inside says no: it resumes the thread, lets it run a moment (from
// 20 us, doubling up to 200 us), interrupts it and looks again, at most
// tries times. It reports whether the thread left.
//
// It replaces single steps, which a tracer must never take in a process it
// does not own: a tracer killed while a thread of it is being stepped leaves
// the thread with the trap flag set or a SIGTRAP to take, and without a
// tracer that signal kills the process. A thread run on here is only ever
// running freely or in a stop the kernel releases cleanly: at any instant,
// a tracer gone leaves it running as if nothing had happened.
//
// The thread must be in a stop PTRACE_CONT leaves without a signal to give
// (an event stop, a syscall-exit stop, or a signal-delivery stop whose
// signal the caller means to drop), not in a group stop or at a syscall's
// entry. A stop other than the interrupt's (a signal, an event) is passed
// to other, which says what comes next (RunOn); with other nil RunOut
// returns at once, the thread left in that stop. A signal must not be
// delivered while the thread is inside: its handler's frame would return
// there, into code the caller is about to change. RunOn.Hold takes it from
// its delivery stop instead, with its siginfo, into held, for the caller to
// send again once the thread is out (a tracer killed before that loses
// it).
//
// A thread found inside tries times in a row (a program that does little
// else than what the range holds: a loop on clock_gettime) is single-stepped
// out after all, at most stepMax instructions (StepOut), when stepMax is
// not 0: the one window left where a tracer killed kills the thread.
func RunOut(tid int, inside func(rip uint64) bool, tries, stepMax int, other func(Stop) (RunOn, error)) (out bool, held []HeldSignal, err error) {
	pause := 20 * time.Microsecond
	sig := 0
	for i := 0; ; i++ {
		r, err := GetRegs(tid)
		switch {
		case err != nil:
			return false, held, err
		case !inside(r.Rip):
			return true, held, nil
		case i == tries && stepMax > 0:
			out, err := StepOut(tid, inside, stepMax)
			return out, held, err
		case i == tries:
			return false, held, nil
		}
		if err := Resume(unix.PTRACE_CONT, tid, sig); err != nil {
			return false, held, fmt.Errorf("run out: %w", err)
		}
		sig = 0
		// Interrupted at once, a thread may stop again before it ran an
		// instruction: the kernel takes the interrupt on its way back.
		time.Sleep(pause)
		pause = min(2*pause, 200*time.Microsecond)
		if err := Interrupt(tid); err != nil {
			return false, held, fmt.Errorf("run out: %w", err)
		}
		for {
			st, err := Wait(tid)
			if err != nil {
				return false, held, err
			}
			if st.Exited() {
				return false, held, fmt.Errorf("run out: %v", st)
			}
			if st.Event() == unix.PTRACE_EVENT_STOP && st.Status.StopSignal() == unix.SIGTRAP {
				break // the interrupt's stop
			}
			on := RunOn{Stay: true}
			if other != nil {
				if on, err = other(st); err != nil {
					return false, held, err
				}
			}
			if on.Stay {
				return false, held, nil
			}
			give, err := on.take(tid, st, &held)
			if err != nil {
				return false, held, err
			}
			// A signal or event before the interrupt's stop: resumed,
			// the thread comes to that stop next.
			if err := Resume(unix.PTRACE_CONT, tid, give); err != nil {
				return false, held, fmt.Errorf("run out: %w", err)
			}
		}
	}
}

// RunOn is what RunOut does after a stop that was not its interrupt's.
type RunOn struct {
	// Stay: RunOut returns, the thread left where it is.
	Stay bool
	// Hold: the signal of a delivery stop is taken from it and returned
	// to the caller (RunOut's held).
	Hold bool
	// Otherwise the thread is resumed with Signal (0: none), and RunOut
	// waits for its interrupt's stop.
	Signal int
}

// take carries out on for stop st of thread tid, Stay aside: with Hold, the
// stop's signal is taken, with its siginfo, into held. It returns the
// signal to resume the thread with.
func (on RunOn) take(tid int, st Stop, held *[]HeldSignal) (int, error) {
	if !on.Hold || st.Signal() == 0 {
		return on.Signal, nil
	}
	info, err := GetSiginfo(tid)
	if err != nil {
		return 0, err
	}
	*held = append(*held, HeldSignal{Signo: st.Signal(), Siginfo: info})
	return 0, nil
}

// A HeldSignal is a signal RunOut took from its delivery stop.
type HeldSignal struct {
	Signo   int
	Siginfo []byte
}

// DeliverStopped resumes a thread stopped in the delivery of signal sig
// with it, and stops it again in an event stop once the kernel has done the
// delivery: at the first instruction of the handler, the signal's frame
// written. The interrupt is asked for before the thread runs; the kernel
// delivers the signal, then takes the interrupt on its way back to the
// program, before any instruction of it. Unlike a single step into the
// handler, nothing is left to harm the thread if the tracer dies at any
// point: it runs its handler as it would have.
//
// A delivery the kernel could not make (no room for the frame: a SIGSEGV
// is forced instead) stops the thread with its stack pointer unchanged;
// the caller tells the two apart by it.
func DeliverStopped(tid, sig int) (Stop, error) {
	if err := Interrupt(tid); err != nil {
		return Stop{}, fmt.Errorf("deliver signal %d: %w", sig, err)
	}
	if err := Resume(unix.PTRACE_CONT, tid, sig); err != nil {
		return Stop{}, fmt.Errorf("deliver signal %d: %w", sig, err)
	}
	return Wait(tid)
}

// SendAgain sends thread tid of process pid, stopped, signal h again, and
// resumes it until it stops in that signal's delivery, where it gives the
// signal the siginfo it first came with: the thread can then be resumed
// with it (or detached with it) as if it had never been held. The stops
// that come first are passed to other as RunOut does, but for Stay, which
// ends SendAgain with an error; with other nil, a signal is given to the
// kernel and an event passed over.
func SendAgain(pid, tid int, h HeldSignal, other func(Stop) (RunOn, error)) (held []HeldSignal, err error) {
	if err := unix.Tgkill(pid, tid, unix.Signal(h.Signo)); err != nil {
		return nil, fmt.Errorf("send signal %d again: %w", h.Signo, err)
	}
	give := 0
	for {
		if err := Resume(unix.PTRACE_CONT, tid, give); err != nil {
			return held, fmt.Errorf("send signal %d again: %w", h.Signo, err)
		}
		st, err := Wait(tid)
		switch {
		case err != nil:
			return held, err
		case st.Exited() || st.Event() == unix.PTRACE_EVENT_EXIT:
			return held, fmt.Errorf("send signal %d again: %v", h.Signo, st)
		case st.Signal() == h.Signo:
			return held, SetSiginfo(tid, h.Siginfo)
		}
		on := RunOn{Signal: st.Signal()}
		if other != nil {
			if on, err = other(st); err != nil {
				return held, err
			}
		}
		if on.Stay {
			return held, fmt.Errorf("send signal %d again: stopped at %v", h.Signo, st)
		}
		if give, err = on.take(tid, st, &held); err != nil {
			return held, err
		}
	}
}

// DetachGiving detaches thread tid of process pid, stopped, giving it back
// the signals held (RunOut): the first with the detach, with the siginfo it
// came with (SendAgain), any other sent again after it.
func DetachGiving(pid, tid int, held []HeldSignal) error {
	if len(held) == 0 {
		return Detach(tid, 0)
	}
	sig := 0
	if _, err := SendAgain(pid, tid, held[0], nil); err == nil {
		sig = held[0].Signo
	}
	err := Detach(tid, sig)
	for _, h := range held[1:] {
		unix.Tgkill(pid, tid, unix.Signal(h.Signo))
	}
	return err
}
