package syscalls

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Sizes of the structures the kernel writes, taken from golang.org/x/sys/unix
// so that they follow the kernel's uapi headers rather than our memory of them.
// unsafe is used here only for Sizeof and Offsetof.
var (
	sizeofStat       = int(unsafe.Sizeof(unix.Stat_t{}))
	sizeofStatx      = int(unsafe.Sizeof(unix.Statx_t{}))
	sizeofStatfs     = int(unsafe.Sizeof(unix.Statfs_t{}))
	sizeofEpollEvent = int(unsafe.Sizeof(unix.EpollEvent{}))
	sizeofUtsname    = int(unsafe.Sizeof(unix.Utsname{}))
	// x/sys's Termios is the kernel's struct termios2 (TCGETS2); TCGETS
	// copies the older struct termios, which ends where c_ispeed begins
	// (include/uapi/asm-generic/termbits.h).
	sizeofTermios2   = int(unsafe.Sizeof(unix.Termios{}))
	sizeofTermios    = int(unsafe.Offsetof(unix.Termios{}.Ispeed))
	sizeofWinsize    = int(unsafe.Sizeof(unix.Winsize{}))
	sizeofRusage     = int(unsafe.Sizeof(unix.Rusage{}))
	sizeofTimespec   = int(unsafe.Sizeof(unix.Timespec{}))
	sizeofTimeval    = int(unsafe.Sizeof(unix.Timeval{}))
	sizeofRlimit     = int(unsafe.Sizeof(unix.Rlimit{}))
	sizeofSysinfo    = int(unsafe.Sizeof(unix.Sysinfo_t{}))
	sizeofPollFd     = int(unsafe.Sizeof(unix.PollFd{}))
	sizeofTms        = int(unsafe.Sizeof(unix.Tms{}))
	sizeofFlock      = int(unsafe.Sizeof(unix.Flock_t{}))
	sizeofItimerval  = int(unsafe.Sizeof(unix.Itimerval{}))
	sizeofItimerspec = int(unsafe.Sizeof(unix.ItimerSpec{}))
	sizeofSiginfo    = int(unsafe.Sizeof(unix.Siginfo{}))
	sizeofTime       = int(unsafe.Sizeof(unix.Time_t(0)))
	sizeofCapHeader  = int(unsafe.Sizeof(unix.CapUserHeader{}))
	sizeofCapData    = int(unsafe.Sizeof(unix.CapUserData{}))
	sizeofMmsghdr    = int(unsafe.Sizeof(unix.Mmsghdr{}))
	sizeofMsghdr     = int(unsafe.Sizeof(unix.Msghdr{}))
	sizeofIovec      = int(unsafe.Sizeof(unix.Iovec{}))

	// Scalars the kernel writes through a pointer.
	sizeofInt32    = int(unsafe.Sizeof(int32(0)))   // int, pid_t, uid_t, gid_t, socklen_t, timer_t
	sizeofInt64    = int(unsafe.Sizeof(int64(0)))   // loff_t, unsigned long
	sizeofFdPair   = int(unsafe.Sizeof([2]int32{})) // int[2] of pipe and socketpair
	sizeofTimezone = int(unsafe.Sizeof([2]int32{})) // struct timezone: two ints
	// struct f_owner_ex (include/uapi/asm-generic/fcntl.h): int type; pid_t pid.
	sizeofFOwnerEx = int(unsafe.Sizeof([2]int32{}))
)

// Offsets inside struct msghdr, struct mmsghdr and struct iovec, for walking
// them in the tracee's memory.
var (
	offMsgName       = int(unsafe.Offsetof(unix.Msghdr{}.Name))
	offMsgNamelen    = int(unsafe.Offsetof(unix.Msghdr{}.Namelen))
	offMsgIov        = int(unsafe.Offsetof(unix.Msghdr{}.Iov))
	offMsgIovlen     = int(unsafe.Offsetof(unix.Msghdr{}.Iovlen))
	offMsgControl    = int(unsafe.Offsetof(unix.Msghdr{}.Control))
	offMsgControllen = int(unsafe.Offsetof(unix.Msghdr{}.Controllen))
	offMmsgLen       = int(unsafe.Offsetof(unix.Mmsghdr{}.Len))
	offIovBase       = int(unsafe.Offsetof(unix.Iovec{}.Base))
	offIovLen        = int(unsafe.Offsetof(unix.Iovec{}.Len))
	offStatMode      = int(unsafe.Offsetof(unix.Stat_t{}.Mode))
	offStatSize      = int(unsafe.Offsetof(unix.Stat_t{}.Size))
)

// kernelSigaction is the x86-64 kernel's struct sigaction as rt_sigaction
// reads and writes it (arch/x86/include/uapi/asm/signal.h with
// include/linux/signal_types.h): unlike glibc's, its mask is the kernel's
// 64-bit sigset_t. x/sys has no such type; TestKernelSigactionSize checks
// this mirror against the running kernel.
type kernelSigaction struct {
	Handler  uintptr
	Flags    uint64
	Restorer uintptr
	Mask     uint64
}

// kernelStack is stack_t (include/uapi/asm-generic/signal.h): void *ss_sp;
// int ss_flags; size_t ss_size. x/sys has no such type; TestKernelStackSize
// checks it against the running kernel.
type kernelStack struct {
	Sp    uintptr
	Flags int32
	_     int32
	Size  uintptr
}

var (
	sizeofKernelSigaction = int(unsafe.Sizeof(kernelSigaction{}))
	sizeofKernelStack     = int(unsafe.Sizeof(kernelStack{}))
)
