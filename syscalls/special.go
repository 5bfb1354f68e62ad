package syscalls

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/tprec/tprec/format"
)

// This file holds the calls whose outputs depend on an argument's value: a
// request code (ioctl, fcntl, prctl, arch_prctl, futex) or a count. Each
// decoder knows a closed list of codes; a code outside it is refused by the
// matching Accept function rather than guessed.

// Request codes x/sys does not export (include/uapi/asm-generic/ioctls.h).
const (
	ioctlFIONBIO  = 0x5421
	ioctlFIONCLEX = 0x5450
	ioctlFIOCLEX  = 0x5451
	ioctlFIOASYNC = 0x5452
)

// ioctlRequests lists the ioctl requests the table understands and how many
// bytes each writes at the address in argument 2 (0: none).
var ioctlRequests = map[uint32]int{
	unix.TCGETS:         sizeofTermios,
	unix.TIOCGLCKTRMIOS: sizeofTermios,
	unix.TCGETS2:        sizeofTermios2,
	unix.TIOCGWINSZ:     sizeofWinsize,
	unix.TIOCINQ:        sizeofInt32, // FIONREAD
	unix.TIOCOUTQ:       sizeofInt32,
	unix.TIOCGPGRP:      sizeofInt32,
	unix.TIOCGSID:       sizeofInt32,
	unix.TIOCGETD:       sizeofInt32,
	unix.TIOCMGET:       sizeofInt32,
	unix.TIOCGPTN:       sizeofInt32,
	unix.TIOCGPKT:       sizeofInt32,
	unix.TIOCGPTLCK:     sizeofInt32,
	unix.TIOCGEXCL:      sizeofInt32,
	unix.BLKGETSIZE64:   sizeofInt64,

	unix.TCSETS:      0,
	unix.TCSETSW:     0,
	unix.TCSETSF:     0,
	unix.TCSBRK:      0,
	unix.TCXONC:      0,
	unix.TCFLSH:      0,
	unix.TIOCSWINSZ:  0,
	unix.TIOCSPGRP:   0,
	unix.TIOCSCTTY:   0,
	unix.TIOCNOTTY:   0,
	unix.TIOCEXCL:    0,
	unix.TIOCNXCL:    0,
	unix.TIOCSPTLCK:  0,
	unix.TIOCGPTPEER: 0, // returns a file descriptor
	ioctlFIONBIO:     0,
	ioctlFIONCLEX:    0,
	ioctlFIOCLEX:     0,
	ioctlFIOASYNC:    0,
	// A copy that shares the source's blocks (cp of coreutils 9 tries it
	// on every file, and falls back to reading when the file system
	// refuses): nothing is written into the process.
	unix.FICLONE:      0,
	unix.FICLONERANGE: 0,
}

// cloneAccept accepts a clone that makes a thread, a new process sharing
// no memory with the caller and writing nothing into it (a fork: glibc's
// sets only CLONE_CHILD_SETTID and CLONE_CHILD_CLEARTID, which concern the
// child), or a vfork child, which shares the memory while the caller waits:
// the recorder takes what it wrote there as the call's outputs.
func cloneAccept(args [6]uint64) (bool, string) {
	const shared = unix.CLONE_THREAD | unix.CLONE_SIGHAND
	const writes = unix.CLONE_PARENT_SETTID | unix.CLONE_PIDFD
	const thread = unix.CLONE_VM | unix.CLONE_THREAD | unix.CLONE_SIGHAND
	switch f := args[0]; {
	case f&thread == thread && f&(unix.CLONE_PIDFD|unix.CLONE_VFORK) == 0:
		// A thread: replay creates it where the call returns, and writes
		// its id where CLONE_PARENT_SETTID and CLONE_CHILD_SETTID say.
		return true, ""
	case f&shared != 0, f&unix.CLONE_VM != 0 && f&unix.CLONE_VFORK == 0:
		return false, noteSharing
	case f&writes != 0:
		return false, "CLONE_PARENT_SETTID and CLONE_PIDFD are not supported"
	}
	return true, ""
}

func ioctlAccept(args [6]uint64) (bool, string) {
	req := uint32(args[1])
	if _, ok := ioctlRequests[req]; !ok {
		return false, fmt.Sprintf("ioctl request %#x is not declared", req)
	}
	return true, ""
}

func ioctlOuts(args [6]uint64, ret int64) []Out {
	if n := ioctlRequests[uint32(args[1])]; n > 0 {
		return []Out{fixed(2, n)}
	}
	return nil
}

// fcntlCmds lists the fcntl commands the table understands and how many bytes
// each writes at the address in argument 2 (0: none; the others pass a value
// or read a structure).
var fcntlCmds = map[int32]int{
	unix.F_GETLK:            sizeofFlock,
	unix.F_OFD_GETLK:        sizeofFlock,
	unix.F_GETOWN_EX:        sizeofFOwnerEx,
	unix.F_GET_RW_HINT:      sizeofInt64,
	unix.F_GET_FILE_RW_HINT: sizeofInt64,

	unix.F_DUPFD:            0,
	unix.F_DUPFD_CLOEXEC:    0,
	unix.F_GETFD:            0,
	unix.F_SETFD:            0,
	unix.F_GETFL:            0,
	unix.F_SETFL:            0,
	unix.F_SETLK:            0,
	unix.F_SETLKW:           0,
	unix.F_OFD_SETLK:        0,
	unix.F_OFD_SETLKW:       0,
	unix.F_GETOWN:           0,
	unix.F_SETOWN:           0,
	unix.F_SETOWN_EX:        0,
	unix.F_GETSIG:           0,
	unix.F_SETSIG:           0,
	unix.F_GETLEASE:         0,
	unix.F_SETLEASE:         0,
	unix.F_NOTIFY:           0,
	unix.F_GETPIPE_SZ:       0,
	unix.F_SETPIPE_SZ:       0,
	unix.F_ADD_SEALS:        0,
	unix.F_GET_SEALS:        0,
	unix.F_SET_RW_HINT:      0,
	unix.F_SET_FILE_RW_HINT: 0,
}

func fcntlAccept(args [6]uint64) (bool, string) {
	cmd := int32(args[1])
	if _, ok := fcntlCmds[cmd]; !ok {
		return false, fmt.Sprintf("fcntl command %d is not declared", cmd)
	}
	return true, ""
}

func fcntlOuts(args [6]uint64, ret int64) []Out {
	if n := fcntlCmds[int32(args[1])]; n > 0 {
		return []Out{fixed(2, n)}
	}
	return nil
}

// taskCommLen is the size of a task's name (include/linux/sched.h:
// TASK_COMM_LEN); PR_GET_NAME always writes that many bytes.
const taskCommLen = 16

// prctlOptions lists the prctl options the table understands and how many
// bytes each writes at the address in argument 1 (0: none).
var prctlOptions = map[int32]int{
	unix.PR_GET_NAME:            taskCommLen,
	unix.PR_GET_PDEATHSIG:       sizeofInt32,
	unix.PR_GET_CHILD_SUBREAPER: sizeofInt32,
	unix.PR_GET_TSC:             sizeofInt32,
	unix.PR_GET_TID_ADDRESS:     sizeofInt64,

	unix.PR_SET_NAME:             0,
	unix.PR_SET_PDEATHSIG:        0,
	unix.PR_GET_DUMPABLE:         0,
	unix.PR_SET_DUMPABLE:         0,
	unix.PR_GET_KEEPCAPS:         0,
	unix.PR_SET_KEEPCAPS:         0,
	unix.PR_GET_NO_NEW_PRIVS:     0,
	unix.PR_SET_NO_NEW_PRIVS:     0,
	unix.PR_CAPBSET_READ:         0,
	unix.PR_CAPBSET_DROP:         0,
	unix.PR_CAP_AMBIENT:          0,
	unix.PR_GET_SECUREBITS:       0,
	unix.PR_SET_SECUREBITS:       0,
	unix.PR_GET_TIMERSLACK:       0,
	unix.PR_SET_TIMERSLACK:       0,
	unix.PR_SET_CHILD_SUBREAPER:  0,
	unix.PR_GET_THP_DISABLE:      0,
	unix.PR_SET_THP_DISABLE:      0,
	unix.PR_SET_PTRACER:          0,
	unix.PR_MCE_KILL:             0,
	unix.PR_MCE_KILL_GET:         0,
	unix.PR_GET_SECCOMP:          0,
	unix.PR_GET_SPECULATION_CTRL: 0,
	unix.PR_SET_SPECULATION_CTRL: 0,
	// Names an anonymous mapping; only /proc/pid/maps shows it.
	unix.PR_SET_VMA: 0,
}

// Options refused with a reason: they change how the process executes in a
// way replay cannot reproduce by skipping them.
var prctlRefused = map[int32]string{
	unix.PR_SET_SECCOMP: "a seccomp filter cannot be removed and would apply to the replay",
	unix.PR_SET_MM:      "rewrites the memory map's description (brk, stack, auxv)",
	unix.PR_SET_TSC:     "the recorder itself controls rdtsc trapping",
}

func prctlAccept(args [6]uint64) (bool, string) {
	opt := int32(args[0])
	if why, ok := prctlRefused[opt]; ok {
		return false, fmt.Sprintf("option %d: %s", opt, why)
	}
	if _, ok := prctlOptions[opt]; !ok {
		return false, fmt.Sprintf("option %d is not declared", opt)
	}
	return true, ""
}

func prctlOuts(args [6]uint64, ret int64) []Out {
	if n := prctlOptions[int32(args[0])]; n > 0 {
		return []Out{fixed(1, n)}
	}
	return nil
}

// arch_prctl codes (arch/x86/include/uapi/asm/prctl.h); x/sys does not export them.
const (
	archSetGS         = 0x1001
	archSetFS         = 0x1002
	archGetFS         = 0x1003
	archGetGS         = 0x1004
	archGetCPUID      = 0x1011
	archGetXcompSupp  = 0x1021
	archGetXcompPerm  = 0x1022
	archReqXcompPerm  = 0x1023
	archGetUntagMask  = 0x4001
	archGetMaxTagBits = 0x4003
	archShstkStatus   = 0x5005
)

// archPrctlCodes lists the arch_prctl codes the table understands and how
// many bytes each writes at the address in argument 1. The others (CPUID
// faulting, shadow stacks, LAM, vDSO mapping) change how code executes.
var archPrctlCodes = map[uint64]int{
	archSetFS:         0,
	archSetGS:         0,
	archGetFS:         sizeofInt64,
	archGetGS:         sizeofInt64,
	archGetCPUID:      0, // answers in the return value
	archGetXcompSupp:  sizeofInt64,
	archGetXcompPerm:  sizeofInt64,
	archReqXcompPerm:  0,
	archGetUntagMask:  sizeofInt64,
	archGetMaxTagBits: sizeofInt64,
	archShstkStatus:   sizeofInt64,
}

func archPrctlAccept(args [6]uint64) (bool, string) {
	if _, ok := archPrctlCodes[args[0]]; !ok {
		return false, fmt.Sprintf("code %#x is not declared", args[0])
	}
	return true, ""
}

func archPrctlOuts(args [6]uint64, ret int64) []Out {
	if n := archPrctlCodes[args[0]]; n > 0 {
		return []Out{fixed(1, n)}
	}
	return nil
}

// selectOuts returns the outputs of select (tvSize: struct timeval) or
// pselect6 (struct timespec): each non-NULL fd_set is rewritten with
// (nfds+63)/64 longs on success (fs/select.c: core_sys_select), and the
// timeout is updated with the time left, also when interrupted
// (poll_select_finish).
func selectOuts(tvSize int) func(args [6]uint64, ret int64) []Out {
	return func(args [6]uint64, ret int64) []Out {
		nfds := int64(int32(args[0]))
		var os []Out
		if nfds > 0 {
			n := int((nfds + 63) / 64 * 8)
			os = append(os, fixed(1, n), fixed(2, n), fixed(3, n))
		}
		return append(os, onError(fixed(4, tvSize)))
	}
}

// mincoreOuts: one byte per page of the range (mm/mincore.c).
func mincoreOuts(args [6]uint64, ret int64) []Out {
	length := args[1]
	if length > MaxOut*format.PageSize {
		// Reported by Outputs as too large rather than wrapped around.
		return []Out{fixed(2, MaxOut+1)}
	}
	return []Out{fixed(2, int((length+format.PageSize-1)/format.PageSize))}
}

// getgroupsOuts: getgroups(0, list) returns the count and writes nothing.
func getgroupsOuts(args [6]uint64, ret int64) []Out {
	if int32(args[0]) == 0 {
		return nil
	}
	return []Out{retTimes(1, sizeofInt32)}
}

// syslog actions that copy the log into the buffer (kernel/printk/printk.c:
// SYSLOG_ACTION_READ, READ_ALL, READ_CLEAR).
func syslogOuts(args [6]uint64, ret int64) []Out {
	switch int32(args[0]) {
	case 2, 3, 4:
		return []Out{retBuf(1)}
	}
	return nil
}

// futex operations (include/uapi/linux/futex.h); x/sys does not export them.
const (
	futexCmdMask       = 0x7f // without FUTEX_PRIVATE_FLAG (128) and FUTEX_CLOCK_REALTIME (256)
	futexWait          = 0
	futexFd            = 2
	futexWakeOp        = 5
	futexLockPI        = 6
	futexUnlockPI      = 7
	futexTrylockPI     = 8
	futexWaitRequeuePI = 11
	futexCmpRequeuePI  = 12
	futexLockPI2       = 13
)

func futexAccept(args [6]uint64) (bool, string) {
	cmd := args[1] & futexCmdMask
	if cmd > futexLockPI2 || cmd == futexFd {
		return false, fmt.Sprintf("operation %d is not declared", cmd)
	}
	return true, ""
}

// futexOuts: most operations only compare the futex word, but FUTEX_WAKE_OP
// modifies the second word, and the priority-inheritance operations write
// the owner's tid and the waiters bit into the word, also when they fail
// (kernel/futex/pi.c).
func futexOuts(args [6]uint64, ret int64) []Out {
	switch args[1] & futexCmdMask {
	case futexWakeOp:
		return []Out{fixed(4, sizeofInt32)}
	case futexLockPI, futexLockPI2, futexUnlockPI, futexTrylockPI:
		return []Out{onError(fixed(0, sizeofInt32))}
	case futexWaitRequeuePI, futexCmpRequeuePI:
		return []Out{onError(fixed(0, sizeofInt32)), onError(fixed(4, sizeofInt32))}
	}
	return nil
}
