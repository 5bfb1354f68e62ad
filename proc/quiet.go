package proc

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// QuietStops keeps the kernel from sending this process a SIGCHLD each time
// one of its tracees or children stops: it sets SA_NOCLDSTOP on the action
// the Go runtime installed for SIGCHLD, and changes nothing else of it. A
// tracer learns of every stop from wait4 anyway; the signal only cost each
// stop a delivery to one of the runtime's threads and its return (a replay
// of a redis-server window: one rt_sigreturn per replayed call). An exit
// still sends SIGCHLD, and wait4 still reports exits, since the action is
// not SIG_IGN.
func QuietStops() error {
	var act struct {
		handler, flags, restorer, mask uint64
	}
	const sigsetSize = 8
	if _, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(unix.SIGCHLD), 0, uintptr(unsafe.Pointer(&act)), sigsetSize, 0, 0); e != 0 {
		return fmt.Errorf("read the SIGCHLD action: %w", e)
	}
	if act.handler == 0 || act.handler == 1 { // SIG_DFL, SIG_IGN: stops send nothing to catch anyway
		return nil
	}
	const saNoCldStop = 1 // SA_NOCLDSTOP
	if act.flags&saNoCldStop != 0 {
		return nil
	}
	act.flags |= saNoCldStop
	if _, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(unix.SIGCHLD), uintptr(unsafe.Pointer(&act)), 0, sigsetSize, 0, 0); e != 0 {
		return fmt.Errorf("set SA_NOCLDSTOP on the SIGCHLD action: %w", e)
	}
	return nil
}
