package recorder

import (
	"fmt"

	"github.com/tprec/tprec/proc"
	"github.com/tprec/tprec/syscalls"
	"golang.org/x/sys/unix"
)

// A boundary stops every thread with PTRACE_INTERRUPT. A thread blocked in a
// call the kernel restarts (a futex wait, read, poll) goes back into it when
// resumed. An epoll wait does not: epoll_wait returns EINTR when its thread
// has something pending, and EINTR is never restarted. So a thread waiting
// in epoll_wait for the next connection (memcached's main thread, while its
// worker serves) was back in user code at every interval start, and no
// interval was replayable (replay runs one thread).
//
// The eBPF programs leave out of the log an epoll wait that returns EINTR
// while the recorder's interrupt is pending (JOBCTL_TRAP_STOP), and mark the
// thread (bpf/tprec.c, sys_exit). At the thread's next stop, an event stop,
// the recorder finds the mark and turns that EINTR into -ERESTARTNOHAND, the
// code the kernel itself uses for calls to restart when no handler runs:
// resumed, the thread re-enters the wait, and at the interval start it
// counts as waiting. A signal with a handler that arrives meanwhile still
// ends the wait with EINTR, as it would have (the kernel turns the code into
// EINTR before running a handler, and the delivery is recorded as
// interrupting the call). The timeout is shortened by the time already
// waited (the programs note when each epoll wait begins), so a timer the
// program waits for fires when it would have; epoll_pwait2, whose timeout is
// in memory, is restarted only without one. The ptrace backend does not do
// this: there the program sees the EINTR, and it is logged.

// erestartNoHand is ERESTARTNOHAND (include/linux/errno.h).
var erestartNoHand int64 = 514

// restartEpoll is called at every event stop of thread tid (the interrupt's
// stop, or a group stop that came with it), before anything reads its
// registers. It restarts the wait exactly when the programs left its EINTR
// out of the log.
func (s *session) restartEpoll(tid int) {
	cut, t0, known := s.src.epollCut(tid)
	if !cut {
		return
	}
	regs, err := proc.GetRegs(tid)
	if err != nil {
		return
	}
	nr := int64(regs.OrigRax)
	if int64(regs.Rax) != -int64(unix.EINTR) || (nr != unix.SYS_EPOLL_WAIT && nr != unix.SYS_EPOLL_PWAIT && nr != unix.SYS_EPOLL_PWAIT2) {
		// Cannot happen: the mark is set at the call's exit and this is
		// the thread's next stop. Said, since the log now lacks a call
		// the program saw.
		s.logf("thread %d: an epoll wait left out of the log, but its registers say %s = %d", tid, syscalls.Name(int(nr)), int64(regs.Rax))
		s.notReplayable(fmt.Sprintf("thread %d: an epoll wait cut short by a boundary could not be restarted", tid))
		return
	}
	if timeout := int64(int32(regs.R10)); nr != unix.SYS_EPOLL_PWAIT2 && timeout > 0 && known {
		var now unix.Timespec
		if unix.ClockGettime(unix.CLOCK_MONOTONIC, &now) == nil {
			waited := (uint64(now.Nano()) - t0) / 1e6
			regs.R10 = uint64(timeout - int64(min(waited, uint64(timeout))))
		}
	}
	regs.Rax = uint64(-erestartNoHand)
	if err := proc.SetRegs(tid, regs); err != nil && !proc.Gone(err) {
		s.logf("restart the epoll wait of thread %d: %v", tid, err)
		s.notReplayable(fmt.Sprintf("thread %d: an epoll wait cut short by a boundary could not be restarted: %v", tid, err))
	}
}
