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
	act, err := sigchldAction(nil)
	if err != nil {
		return err
	}
	if act.handler == 0 || act.handler == 1 { // SIG_DFL, SIG_IGN: stops send nothing to catch anyway
		return nil
	}
	if act.flags&saNoCldStop != 0 {
		return nil
	}
	act.flags |= saNoCldStop
	_, err = sigchldAction(&act)
	return err
}

const saNoCldStop = 1 // SA_NOCLDSTOP

// kernelSigaction is the kernel's struct sigaction on x86-64.
type kernelSigaction struct {
	handler, flags, restorer, mask uint64
}

// sigchldAction sets SIGCHLD's action to set, when not nil, and returns the
// action before.
func sigchldAction(set *kernelSigaction) (kernelSigaction, error) {
	var old kernelSigaction
	const sigsetSize = 8
	if _, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(unix.SIGCHLD), uintptr(unsafe.Pointer(set)), uintptr(unsafe.Pointer(&old)), sigsetSize, 0, 0); e != 0 {
		return old, fmt.Errorf("SIGCHLD action: %w", e)
	}
	return old, nil
}
