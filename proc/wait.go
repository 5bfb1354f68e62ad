package proc

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"
)

// Stop describes what wait4 reported for one tracee.
type Stop struct {
	Tid    int
	Status unix.WaitStatus
}

// Exited reports whether the thread is gone (exited or killed).
func (s Stop) Exited() bool { return s.Status.Exited() || s.Status.Signaled() }

// SyscallStop reports a syscall-entry or -exit stop (PTRACE_O_TRACESYSGOOD).
func (s Stop) SyscallStop() bool {
	return s.Status.Stopped() && s.Status.StopSignal() == unix.SIGTRAP|0x80
}

// Event returns the PTRACE_EVENT_* of an event stop, or 0. A group stop
// of a seized tracee (SIGSTOP, SIGTSTP...) is a PTRACE_EVENT_STOP whose
// stop signal is the stopping one, not SIGTRAP (unix.WaitStatus.TrapCause
// says -1 for it): taken for a SIGSTOP's delivery, it was resumed with
// that signal, and the process ran on as if never stopped.
func (s Stop) Event() int {
	if !s.Status.Stopped() {
		return 0
	}
	return int(s.Status>>16) & 0xff
}

// Signal returns the signal of a signal-delivery stop, or 0 for every other stop.
func (s Stop) Signal() int {
	if !s.Status.Stopped() || s.SyscallStop() || s.Event() != 0 {
		return 0
	}
	return int(s.Status.StopSignal())
}

func (s Stop) String() string {
	switch {
	case s.Status.Exited():
		return fmt.Sprintf("tid %d exited %d", s.Tid, s.Status.ExitStatus())
	case s.Status.Signaled():
		return fmt.Sprintf("tid %d killed by %v", s.Tid, s.Status.Signal())
	case s.SyscallStop():
		return fmt.Sprintf("tid %d syscall stop", s.Tid)
	case s.Event() != 0:
		return fmt.Sprintf("tid %d event %d", s.Tid, s.Event())
	default:
		return fmt.Sprintf("tid %d signal %v", s.Tid, s.Status.StopSignal())
	}
}

// Wait waits for the next stop of tid (-1: any tracee or child).
func Wait(tid int) (Stop, error) {
	var ws unix.WaitStatus
	for {
		got, err := unix.Wait4(tid, &ws, unix.WALL, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return Stop{}, fmt.Errorf("wait for %d: %w", tid, err)
		}
		return Stop{Tid: got, Status: ws}, nil
	}
}

// WaitOwn waits for the next stop or end of any tracee or child of the
// calling thread (__WNOTHREAD: not of the other threads of this process,
// which may trace processes of their own). The caller must be locked to
// its thread.
func WaitOwn() (Stop, error) {
	var ws unix.WaitStatus
	for {
		got, err := unix.Wait4(-1, &ws, unix.WALL|unix.WNOTHREAD, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return Stop{}, fmt.Errorf("wait: %w", err)
		}
		return Stop{Tid: got, Status: ws}, nil
	}
}

// WaitNoHang returns a pending stop of tid, or ok=false when none is ready.
func WaitNoHang(tid int) (Stop, bool, error) {
	var ws unix.WaitStatus
	got, err := unix.Wait4(tid, &ws, unix.WALL|unix.WNOHANG, nil)
	if err != nil {
		return Stop{}, false, err
	}
	if got == 0 {
		return Stop{}, false, nil
	}
	return Stop{Tid: got, Status: ws}, true, nil
}

// StoppedAt returns the ptrace stop tid is in now, rebuilt as the status a
// wait for it returned, when the tracer already took that stop and has not
// resumed the tracee since; ok is false when tid runs (or is in
// PTRACE_LISTEN, which ptrace requests treat as running). A tracer that
// lost track of whether it holds a thread (an error between a stop and its
// resume) asks this instead of waiting for a stop that will not come: a
// PTRACE_INTERRUPT of a tracee already stopped makes no new stop.
func StoppedAt(tid int) (st Stop, ok bool) {
	si, err := GetSyscallInfo(tid)
	if err != nil {
		return Stop{}, false
	}
	stopped := func(sig, cause int) Stop {
		return Stop{Tid: tid, Status: unix.WaitStatus(0x7f | sig<<8 | cause<<16)}
	}
	if si.Op == SyscallEntry || si.Op == SyscallExit {
		return stopped(int(unix.SIGTRAP)|0x80, 0), true
	}
	info, err := GetSiginfo(tid)
	if err != nil {
		return Stop{}, false
	}
	signo := int(int32(binary.LittleEndian.Uint32(info[0:])))
	code := int(int32(binary.LittleEndian.Uint32(info[8:])))
	// The kernel gives an event stop the siginfo si_code (event<<8 | signal)
	// (ptrace_do_notify); no signal's own si_code has that form.
	if event := code >> 8; code&0xff == signo && (event == unix.PTRACE_EVENT_STOP || event >= unix.PTRACE_EVENT_FORK && event <= unix.PTRACE_EVENT_SECCOMP) {
		return stopped(signo, event), true
	}
	return stopped(signo, 0), true
}
