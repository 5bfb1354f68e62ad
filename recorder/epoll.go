package recorder

import (
	"github.com/tprec/tprec/proc"
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
// while the recorder's interrupt is pending (bpf/tprec.c, sys_exit). At the
// interrupt's stop, the recorder turns that EINTR into -ERESTARTNOHAND, the
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

// restartEpoll is called at every interrupt stop of thread tid, before
// anything reads its registers.
func (s *session) restartEpoll(tid int) {
	regs, err := proc.GetRegs(tid)
	if err != nil || int64(regs.Rax) != -int64(unix.EINTR) {
		return
	}
	nr := int64(regs.OrigRax)
	switch {
	case nr == unix.SYS_EPOLL_WAIT || nr == unix.SYS_EPOLL_PWAIT:
	case nr == unix.SYS_EPOLL_PWAIT2 && regs.R10 == 0:
	default:
		return
	}
	t0, known, ok := s.src.epollStart(tid)
	if !ok {
		return
	}
	if timeout := int64(int32(regs.R10)); nr != unix.SYS_EPOLL_PWAIT2 && timeout > 0 && known {
		var now unix.Timespec
		if unix.ClockGettime(unix.CLOCK_MONOTONIC, &now) == nil {
			waited := (uint64(now.Nano()) - t0) / 1e6
			left := timeout - int64(min(waited, uint64(timeout)))
			regs.R10 = uint64(left)
		}
	}
	regs.Rax = uint64(-erestartNoHand)
	if err := proc.SetRegs(tid, regs); err != nil && !proc.Gone(err) {
		s.logf("restart the epoll wait of thread %d: %v", tid, err)
	}
}
