package syscalls

import "golang.org/x/sys/unix"

// Constructors of output declarations, so that the table reads as a list.

// fixed: n bytes at the address in argument arg.
func fixed(arg, n int) Out { return Out{Arg: arg, Size: Size{Kind: SizeFixed, N: n}} }

// retBuf: as many bytes as the call returned, at the address in argument arg.
func retBuf(arg int) Out { return Out{Arg: arg, Size: Size{Kind: SizeRet}} }

// argBuf: argument sizeArg bytes at the address in argument arg.
func argBuf(arg, sizeArg int) Out { return Out{Arg: arg, Size: Size{Kind: SizeArg, Arg: sizeArg}} }

// argPtr: the socklen_t stored at argument lenArg (after the call) bytes.
func argPtr(arg, lenArg int) Out { return Out{Arg: arg, Size: Size{Kind: SizeArgPtr, Arg: lenArg}} }

// sockaddrStorage is the most the kernel ever writes for a socket address
// (include/linux/socket.h: _K_SS_MAXSIZE, sizeof(struct sockaddr_storage);
// net/socket.c: move_addr_to_user). x/sys's RawSockaddrAny is shorter.
const sockaddrStorage = 128

// sockaddr: a socket address the kernel returns through (addr, *addrlen).
// *addrlen holds the address's full length, which can exceed what was copied;
// the copy never exceeds sockaddrStorage.
func sockaddr(arg, lenArg int) Out {
	return Out{Arg: arg, Size: Size{Kind: SizeArgPtr, Arg: lenArg, Max: sockaddrStorage}}
}

// retTimes: ret*n bytes at argument arg.
func retTimes(arg, n int) Out { return Out{Arg: arg, Size: Size{Kind: SizeRetTimes, N: n}} }

// argTimes: argument countArg times n bytes at argument arg.
func argTimes(arg, countArg, n int) Out {
	return Out{Arg: arg, Size: Size{Kind: SizeArgTimes, Arg: countArg, N: n}}
}

// iovec: the iovec array at argument arg with argument countArg entries, ret bytes filled.
func iovec(arg, countArg int) Out {
	return Out{Arg: arg, Kind: OutIovec, Size: Size{Kind: SizeRet, Arg: countArg}}
}

// onError marks an output the kernel also writes when the call fails.
func onError(o Out) Out { o.OnError = true; return o }

// a lists the argument formats, and so the number of arguments, of a call.
func a(f ...Arg) []Arg { return f }

func outs(o ...Out) []Out { return o }

// Short names for argument formats, to keep the table narrow.
const (
	aInt  = ArgInt
	aUint = ArgUint
	aHex  = ArgHex
	aPtr  = ArgPtr
	aFd   = ArgFd
	aStr  = ArgStr
	aBuf  = ArgBuf
	aOut  = ArgOutPtr
)

// Notes shared by several entries.
const (
	noteSharing = "a child process sharing memory with its parent is not recorded"
	noteExec    = "replaces the program image; the checkpoint would describe a process that no longer exists"
	noteAsync   = "the kernel writes results into memory asynchronously, outside any syscall's return"
	noteSignal  = "a signal the process sends itself is replayed from the signal log, not by this call"
)

// table declares every syscall the project understands. A number missing here
// is Unsupported. Kinds and outputs follow the kernel's behaviour on x86-64;
// the order is by number.
var table = []Desc{
	{Nr: unix.SYS_READ, Name: "read", Kind: Emulate, Args: a(aFd, aBuf, aUint), Outs: outs(retBuf(1))},
	{Nr: unix.SYS_WRITE, Name: "write", Kind: Emulate, Args: a(aFd, aStr, aUint)},
	{Nr: unix.SYS_OPEN, Name: "open", Kind: Emulate, Args: a(aStr, ArgOpenFlags, ArgMode), Ret: aFd},
	{Nr: unix.SYS_CLOSE, Name: "close", Kind: Emulate, Args: a(aFd)},
	{Nr: unix.SYS_STAT, Name: "stat", Kind: Emulate, Args: a(aStr, ArgStat), Outs: outs(fixed(1, sizeofStat))},
	{Nr: unix.SYS_FSTAT, Name: "fstat", Kind: Emulate, Args: a(aFd, ArgStat), Outs: outs(fixed(1, sizeofStat))},
	{Nr: unix.SYS_LSTAT, Name: "lstat", Kind: Emulate, Args: a(aStr, ArgStat), Outs: outs(fixed(1, sizeofStat))},
	// revents are written back even when the wait is interrupted (fs/select.c: do_sys_poll).
	{Nr: unix.SYS_POLL, Name: "poll", Kind: Emulate, Args: a(aOut, aUint, aInt), Outs: outs(onError(argTimes(0, 1, sizeofPollFd)))},
	{Nr: unix.SYS_LSEEK, Name: "lseek", Kind: Emulate, Args: a(aFd, aInt, aInt)},
	{Nr: unix.SYS_MMAP, Name: "mmap", Kind: Memory, Args: a(aPtr, aUint, ArgProt, ArgMapFlags, aFd, aHex), Ret: aHex,
		Note: "file-backed mappings are rebuilt from recorded pages, not from the file"},
	{Nr: unix.SYS_MPROTECT, Name: "mprotect", Kind: Memory, Args: a(aPtr, aUint, ArgProt)},
	{Nr: unix.SYS_MUNMAP, Name: "munmap", Kind: Memory, Args: a(aPtr, aUint)},
	{Nr: unix.SYS_BRK, Name: "brk", Kind: Memory, Args: a(aPtr), Ret: aHex},
	// The old action is the kernel's struct sigaction; argument 3 must be 8
	// (sizeof the kernel's sigset_t) or the call fails with EINVAL.
	{Nr: unix.SYS_RT_SIGACTION, Name: "rt_sigaction", Kind: Process, Args: a(ArgSignal, aPtr, aOut, aUint),
		Outs: outs(fixed(2, sizeofKernelSigaction))},
	{Nr: unix.SYS_RT_SIGPROCMASK, Name: "rt_sigprocmask", Kind: Process, Args: a(aInt, aPtr, aOut, aUint), Outs: outs(argBuf(2, 3))},
	{Nr: unix.SYS_RT_SIGRETURN, Name: "rt_sigreturn", Kind: Process, Args: a(),
		Note: "restores registers and the signal mask from the signal frame on the stack"},
	{Nr: unix.SYS_IOCTL, Name: "ioctl", Kind: Emulate, Args: a(aFd, aHex, aPtr), Dyn: ioctlOuts, Accept: ioctlAccept,
		Note: "only the requests listed in ioctlRequests are understood"},
	{Nr: unix.SYS_PREAD64, Name: "pread64", Kind: Emulate, Args: a(aFd, aBuf, aUint, aInt), Outs: outs(retBuf(1))},
	{Nr: unix.SYS_PWRITE64, Name: "pwrite64", Kind: Emulate, Args: a(aFd, aStr, aUint, aInt)},
	{Nr: unix.SYS_READV, Name: "readv", Kind: Emulate, Args: a(aFd, aOut, aUint), Outs: outs(iovec(1, 2))},
	{Nr: unix.SYS_WRITEV, Name: "writev", Kind: Emulate, Args: a(aFd, aPtr, aUint)},
	{Nr: unix.SYS_ACCESS, Name: "access", Kind: Emulate, Args: a(aStr, aInt)},
	{Nr: unix.SYS_PIPE, Name: "pipe", Kind: Emulate, Args: a(ArgFdPair), Outs: outs(fixed(0, sizeofFdPair))},
	{Nr: unix.SYS_SELECT, Name: "select", Kind: Emulate, Args: a(aInt, aOut, aOut, aOut, aOut), Dyn: selectOuts(sizeofTimeval)},
	{Nr: unix.SYS_SCHED_YIELD, Name: "sched_yield", Kind: Emulate, Args: a()},
	{Nr: unix.SYS_MREMAP, Name: "mremap", Kind: Memory, Args: a(aPtr, aUint, aUint, aHex, aPtr), Ret: aHex},
	{Nr: unix.SYS_MSYNC, Name: "msync", Kind: Emulate, Args: a(aPtr, aUint, aHex)},
	{Nr: unix.SYS_MINCORE, Name: "mincore", Kind: Emulate, Args: a(aPtr, aUint, aOut), Dyn: mincoreOuts,
		Note: "residency is replayed as recorded, not as it is on the replay machine"},
	{Nr: unix.SYS_MADVISE, Name: "madvise", Kind: Memory, Args: a(aPtr, aUint, aInt),
		Note: "MADV_DONTNEED/MADV_FREE/MADV_WIPEONFORK change contents or fork behaviour; replay executes it"},
	{Nr: unix.SYS_SHMAT, Name: "shmat", Kind: Unsupported, Args: a(aInt, aPtr, aHex), Ret: aHex,
		Note: "System V shared memory can be written by other processes"},
	{Nr: unix.SYS_DUP, Name: "dup", Kind: Emulate, Args: a(aFd), Ret: aFd},
	{Nr: unix.SYS_DUP2, Name: "dup2", Kind: Emulate, Args: a(aFd, aFd), Ret: aFd},
	{Nr: unix.SYS_PAUSE, Name: "pause", Kind: Emulate, Args: a()},
	// The remaining time is written when a signal interrupts the sleep (kernel/time/hrtimer.c).
	{Nr: unix.SYS_NANOSLEEP, Name: "nanosleep", Kind: Emulate, Args: a(aPtr, ArgTimespec),
		Outs: outs(onError(fixed(1, sizeofTimespec)))},
	{Nr: unix.SYS_GETITIMER, Name: "getitimer", Kind: Emulate, Args: a(aInt, aOut), Outs: outs(fixed(1, sizeofItimerval))},
	{Nr: unix.SYS_ALARM, Name: "alarm", Kind: Emulate, Args: a(aUint),
		Note: "the SIGALRM it arms is replayed from the signal log"},
	{Nr: unix.SYS_SETITIMER, Name: "setitimer", Kind: Emulate, Args: a(aInt, aPtr, aOut), Outs: outs(fixed(2, sizeofItimerval)),
		Note: "the signals it arms are replayed from the signal log"},
	{Nr: unix.SYS_GETPID, Name: "getpid", Kind: Emulate, Args: a()},
	{Nr: unix.SYS_SENDFILE, Name: "sendfile", Kind: Emulate, Args: a(aFd, aFd, aOut, aUint), Outs: outs(fixed(2, sizeofInt64))},
	{Nr: unix.SYS_SOCKET, Name: "socket", Kind: Emulate, Args: a(aInt, aHex, aInt), Ret: aFd},
	{Nr: unix.SYS_CONNECT, Name: "connect", Kind: Emulate, Args: a(aFd, aPtr, aUint)},
	{Nr: unix.SYS_ACCEPT, Name: "accept", Kind: Emulate, Args: a(aFd, aOut, aOut), Ret: aFd,
		Outs: outs(sockaddr(1, 2), fixed(2, sizeofInt32))},
	{Nr: unix.SYS_SENDTO, Name: "sendto", Kind: Emulate, Args: a(aFd, aStr, aUint, aHex, aPtr, aUint)},
	{Nr: unix.SYS_RECVFROM, Name: "recvfrom", Kind: Emulate, Args: a(aFd, aBuf, aUint, aHex, aOut, aOut),
		Outs: outs(retBuf(1), sockaddr(4, 5), fixed(5, sizeofInt32))},
	{Nr: unix.SYS_SENDMSG, Name: "sendmsg", Kind: Emulate, Args: a(aFd, aPtr, aHex)},
	{Nr: unix.SYS_RECVMSG, Name: "recvmsg", Kind: Emulate, Args: a(aFd, aOut, aHex), Outs: outs(Out{Arg: 1, Kind: OutMsghdr}),
		Note: "file descriptors passed in SCM_RIGHTS are replayed as numbers only"},
	{Nr: unix.SYS_SHUTDOWN, Name: "shutdown", Kind: Emulate, Args: a(aFd, aInt)},
	{Nr: unix.SYS_BIND, Name: "bind", Kind: Emulate, Args: a(aFd, aPtr, aUint)},
	{Nr: unix.SYS_LISTEN, Name: "listen", Kind: Emulate, Args: a(aFd, aInt)},
	{Nr: unix.SYS_GETSOCKNAME, Name: "getsockname", Kind: Emulate, Args: a(aFd, aOut, aOut),
		Outs: outs(sockaddr(1, 2), fixed(2, sizeofInt32))},
	{Nr: unix.SYS_GETPEERNAME, Name: "getpeername", Kind: Emulate, Args: a(aFd, aOut, aOut),
		Outs: outs(sockaddr(1, 2), fixed(2, sizeofInt32))},
	{Nr: unix.SYS_SOCKETPAIR, Name: "socketpair", Kind: Emulate, Args: a(aInt, aHex, aInt, ArgFdPair), Outs: outs(fixed(3, sizeofFdPair))},
	{Nr: unix.SYS_SETSOCKOPT, Name: "setsockopt", Kind: Emulate, Args: a(aFd, aInt, aInt, aPtr, aUint)},
	// Most options store the length actually written in *optlen.
	{Nr: unix.SYS_GETSOCKOPT, Name: "getsockopt", Kind: Emulate, Args: a(aFd, aInt, aInt, aOut, aOut),
		Outs: outs(argPtr(3, 4), fixed(4, sizeofInt32))},
	// A fork (no shared memory) changes nothing in the parent but its result:
	// the child is another process, not recorded, and what the parent later
	// learns of it comes through its own logged calls (wait4, kill, pipes).
	{Nr: unix.SYS_CLONE, Name: "clone", Kind: Emulate, Args: a(aHex, aPtr, aPtr, aPtr, aPtr), Accept: cloneAccept},
	{Nr: unix.SYS_FORK, Name: "fork", Kind: Emulate, Args: a()},
	// vfork, and clone/clone3 with CLONE_VFORK: the recorder takes what the
	// child wrote into the parent's memory as the call's outputs.
	{Nr: unix.SYS_VFORK, Name: "vfork", Kind: Emulate, Args: a()},
	{Nr: unix.SYS_EXECVE, Name: "execve", Kind: Unsupported, Args: a(aStr, aPtr, aPtr), Note: noteExec},
	{Nr: unix.SYS_EXIT, Name: "exit", Kind: Exit, Args: a(aInt)},
	{Nr: unix.SYS_WAIT4, Name: "wait4", Kind: Emulate, Args: a(aInt, ArgInt32Out, aHex, aOut),
		Outs: outs(fixed(1, sizeofInt32), fixed(3, sizeofRusage))},
	{Nr: unix.SYS_KILL, Name: "kill", Kind: Emulate, Args: a(aInt, ArgSignal), Note: noteSignal},
	{Nr: unix.SYS_UNAME, Name: "uname", Kind: Emulate, Args: a(aOut), Outs: outs(fixed(0, sizeofUtsname))},
	{Nr: unix.SYS_FCNTL, Name: "fcntl", Kind: Emulate, Args: a(aFd, aInt, aHex), Dyn: fcntlOuts, Accept: fcntlAccept, Ret: aHex},
	{Nr: unix.SYS_FLOCK, Name: "flock", Kind: Emulate, Args: a(aFd, aHex)},
	{Nr: unix.SYS_FSYNC, Name: "fsync", Kind: Emulate, Args: a(aFd)},
	{Nr: unix.SYS_FDATASYNC, Name: "fdatasync", Kind: Emulate, Args: a(aFd)},
	{Nr: unix.SYS_TRUNCATE, Name: "truncate", Kind: Emulate, Args: a(aStr, aInt)},
	{Nr: unix.SYS_FTRUNCATE, Name: "ftruncate", Kind: Emulate, Args: a(aFd, aInt)},
	{Nr: unix.SYS_GETDENTS, Name: "getdents", Kind: Emulate, Args: a(aFd, aBuf, aUint), Outs: outs(retBuf(1))},
	// The syscall returns the length of the path including its NUL.
	{Nr: unix.SYS_GETCWD, Name: "getcwd", Kind: Emulate, Args: a(aBuf, aUint), Outs: outs(retBuf(0))},
	{Nr: unix.SYS_CHDIR, Name: "chdir", Kind: Emulate, Args: a(aStr)},
	{Nr: unix.SYS_FCHDIR, Name: "fchdir", Kind: Emulate, Args: a(aFd)},
	{Nr: unix.SYS_RENAME, Name: "rename", Kind: Emulate, Args: a(aStr, aStr)},
	{Nr: unix.SYS_MKDIR, Name: "mkdir", Kind: Emulate, Args: a(aStr, ArgMode)},
	{Nr: unix.SYS_RMDIR, Name: "rmdir", Kind: Emulate, Args: a(aStr)},
	{Nr: unix.SYS_CREAT, Name: "creat", Kind: Emulate, Args: a(aStr, ArgMode), Ret: aFd},
	{Nr: unix.SYS_LINK, Name: "link", Kind: Emulate, Args: a(aStr, aStr)},
	{Nr: unix.SYS_UNLINK, Name: "unlink", Kind: Emulate, Args: a(aStr)},
	{Nr: unix.SYS_SYMLINK, Name: "symlink", Kind: Emulate, Args: a(aStr, aStr)},
	{Nr: unix.SYS_READLINK, Name: "readlink", Kind: Emulate, Args: a(aStr, aBuf, aUint), Outs: outs(retBuf(1))},
	{Nr: unix.SYS_CHMOD, Name: "chmod", Kind: Emulate, Args: a(aStr, ArgMode)},
	{Nr: unix.SYS_FCHMOD, Name: "fchmod", Kind: Emulate, Args: a(aFd, ArgMode)},
	{Nr: unix.SYS_CHOWN, Name: "chown", Kind: Emulate, Args: a(aStr, aInt, aInt)},
	{Nr: unix.SYS_FCHOWN, Name: "fchown", Kind: Emulate, Args: a(aFd, aInt, aInt)},
	{Nr: unix.SYS_LCHOWN, Name: "lchown", Kind: Emulate, Args: a(aStr, aInt, aInt)},
	{Nr: unix.SYS_UMASK, Name: "umask", Kind: Emulate, Args: a(ArgMode), Ret: ArgMode},
	{Nr: unix.SYS_GETTIMEOFDAY, Name: "gettimeofday", Kind: Emulate, Args: a(ArgTimeval, aOut),
		Outs: outs(fixed(0, sizeofTimeval), fixed(1, sizeofTimezone))},
	{Nr: unix.SYS_GETRLIMIT, Name: "getrlimit", Kind: Emulate, Args: a(aInt, aOut), Outs: outs(fixed(1, sizeofRlimit))},
	{Nr: unix.SYS_GETRUSAGE, Name: "getrusage", Kind: Emulate, Args: a(aInt, aOut), Outs: outs(fixed(1, sizeofRusage))},
	{Nr: unix.SYS_SYSINFO, Name: "sysinfo", Kind: Emulate, Args: a(aOut), Outs: outs(fixed(0, sizeofSysinfo))},
	{Nr: unix.SYS_TIMES, Name: "times", Kind: Emulate, Args: a(aOut), Outs: outs(fixed(0, sizeofTms)), Ret: aUint},
	{Nr: unix.SYS_PTRACE, Name: "ptrace", Kind: Unsupported, Args: a(aInt, aInt, aPtr, aPtr),
		Note: "the process traces others (a debugger, strace), and what they do is not recorded"},
	{Nr: unix.SYS_GETUID, Name: "getuid", Kind: Emulate, Args: a()},
	{Nr: unix.SYS_SYSLOG, Name: "syslog", Kind: Emulate, Args: a(aInt, aBuf, aInt), Dyn: syslogOuts},
	{Nr: unix.SYS_GETGID, Name: "getgid", Kind: Emulate, Args: a()},
	{Nr: unix.SYS_SETUID, Name: "setuid", Kind: Emulate, Args: a(aInt)},
	{Nr: unix.SYS_SETGID, Name: "setgid", Kind: Emulate, Args: a(aInt)},
	{Nr: unix.SYS_GETEUID, Name: "geteuid", Kind: Emulate, Args: a()},
	{Nr: unix.SYS_GETEGID, Name: "getegid", Kind: Emulate, Args: a()},
	{Nr: unix.SYS_SETPGID, Name: "setpgid", Kind: Emulate, Args: a(aInt, aInt)},
	{Nr: unix.SYS_GETPPID, Name: "getppid", Kind: Emulate, Args: a()},
	{Nr: unix.SYS_GETPGRP, Name: "getpgrp", Kind: Emulate, Args: a()},
	{Nr: unix.SYS_SETSID, Name: "setsid", Kind: Emulate, Args: a()},
	{Nr: unix.SYS_SETREUID, Name: "setreuid", Kind: Emulate, Args: a(aInt, aInt)},
	{Nr: unix.SYS_SETREGID, Name: "setregid", Kind: Emulate, Args: a(aInt, aInt)},
	// getgroups(0, list) only counts the groups and writes nothing.
	{Nr: unix.SYS_GETGROUPS, Name: "getgroups", Kind: Emulate, Args: a(aInt, aOut), Dyn: getgroupsOuts},
	{Nr: unix.SYS_SETGROUPS, Name: "setgroups", Kind: Emulate, Args: a(aInt, aPtr)},
	{Nr: unix.SYS_SETRESUID, Name: "setresuid", Kind: Emulate, Args: a(aInt, aInt, aInt)},
	{Nr: unix.SYS_GETRESUID, Name: "getresuid", Kind: Emulate, Args: a(ArgInt32Out, ArgInt32Out, ArgInt32Out),
		Outs: outs(fixed(0, sizeofInt32), fixed(1, sizeofInt32), fixed(2, sizeofInt32))},
	{Nr: unix.SYS_SETRESGID, Name: "setresgid", Kind: Emulate, Args: a(aInt, aInt, aInt)},
	{Nr: unix.SYS_GETRESGID, Name: "getresgid", Kind: Emulate, Args: a(ArgInt32Out, ArgInt32Out, ArgInt32Out),
		Outs: outs(fixed(0, sizeofInt32), fixed(1, sizeofInt32), fixed(2, sizeofInt32))},
	{Nr: unix.SYS_GETPGID, Name: "getpgid", Kind: Emulate, Args: a(aInt)},
	{Nr: unix.SYS_SETFSUID, Name: "setfsuid", Kind: Emulate, Args: a(aInt)},
	{Nr: unix.SYS_SETFSGID, Name: "setfsgid", Kind: Emulate, Args: a(aInt)},
	{Nr: unix.SYS_GETSID, Name: "getsid", Kind: Emulate, Args: a(aInt)},
	// The header's version is written back when the caller's is unknown
	// (EINVAL), which is how libcap probes for it. The data is two
	// structs for the 64-bit capability versions 2 and 3; version 1 callers
	// get one, and the second struct is then captured as it already was.
	{Nr: unix.SYS_CAPGET, Name: "capget", Kind: Emulate, Args: a(aOut, aOut),
		Outs: outs(onError(fixed(0, sizeofCapHeader)), fixed(1, 2*sizeofCapData))},
	{Nr: unix.SYS_CAPSET, Name: "capset", Kind: Emulate, Args: a(aPtr, aPtr)},
	{Nr: unix.SYS_RT_SIGPENDING, Name: "rt_sigpending", Kind: Emulate, Args: a(aOut, aUint), Outs: outs(argBuf(0, 1))},
	{Nr: unix.SYS_RT_SIGTIMEDWAIT, Name: "rt_sigtimedwait", Kind: Emulate, Args: a(aPtr, aOut, aPtr, aUint),
		Outs: outs(fixed(1, sizeofSiginfo)), Note: "the signal it dequeues is not delivered; replay returns the recorded one"},
	{Nr: unix.SYS_RT_SIGQUEUEINFO, Name: "rt_sigqueueinfo", Kind: Emulate, Args: a(aInt, ArgSignal, aPtr), Note: noteSignal},
	{Nr: unix.SYS_RT_SIGSUSPEND, Name: "rt_sigsuspend", Kind: Emulate, Args: a(aPtr, aUint),
		Note: "returns EINTR after a handler ran; the handler's delivery comes from the signal log"},
	{Nr: unix.SYS_SIGALTSTACK, Name: "sigaltstack", Kind: Process, Args: a(aPtr, aOut), Outs: outs(fixed(1, sizeofKernelStack))},
	{Nr: unix.SYS_UTIME, Name: "utime", Kind: Emulate, Args: a(aStr, aPtr)},
	{Nr: unix.SYS_MKNOD, Name: "mknod", Kind: Emulate, Args: a(aStr, ArgMode, aHex)},
	{Nr: unix.SYS_PERSONALITY, Name: "personality", Kind: Emulate, Args: a(aHex), Ret: aHex},
	{Nr: unix.SYS_STATFS, Name: "statfs", Kind: Emulate, Args: a(aStr, aOut), Outs: outs(fixed(1, sizeofStatfs))},
	{Nr: unix.SYS_FSTATFS, Name: "fstatfs", Kind: Emulate, Args: a(aFd, aOut), Outs: outs(fixed(1, sizeofStatfs))},
	{Nr: unix.SYS_GETPRIORITY, Name: "getpriority", Kind: Emulate, Args: a(aInt, aInt)},
	{Nr: unix.SYS_SETPRIORITY, Name: "setpriority", Kind: Emulate, Args: a(aInt, aInt, aInt)},
	// struct sched_param is a single int.
	{Nr: unix.SYS_SCHED_SETPARAM, Name: "sched_setparam", Kind: Emulate, Args: a(aInt, aPtr)},
	{Nr: unix.SYS_SCHED_GETPARAM, Name: "sched_getparam", Kind: Emulate, Args: a(aInt, ArgInt32Out), Outs: outs(fixed(1, sizeofInt32))},
	{Nr: unix.SYS_SCHED_SETSCHEDULER, Name: "sched_setscheduler", Kind: Emulate, Args: a(aInt, aInt, aPtr)},
	{Nr: unix.SYS_SCHED_GETSCHEDULER, Name: "sched_getscheduler", Kind: Emulate, Args: a(aInt)},
	{Nr: unix.SYS_SCHED_GET_PRIORITY_MAX, Name: "sched_get_priority_max", Kind: Emulate, Args: a(aInt)},
	{Nr: unix.SYS_SCHED_GET_PRIORITY_MIN, Name: "sched_get_priority_min", Kind: Emulate, Args: a(aInt)},
	{Nr: unix.SYS_SCHED_RR_GET_INTERVAL, Name: "sched_rr_get_interval", Kind: Emulate, Args: a(aInt, ArgTimespec),
		Outs: outs(fixed(1, sizeofTimespec))},
	// Locking pages changes neither contents nor layout.
	{Nr: unix.SYS_MLOCK, Name: "mlock", Kind: Emulate, Args: a(aPtr, aUint)},
	{Nr: unix.SYS_MUNLOCK, Name: "munlock", Kind: Emulate, Args: a(aPtr, aUint)},
	{Nr: unix.SYS_MLOCKALL, Name: "mlockall", Kind: Emulate, Args: a(aHex)},
	{Nr: unix.SYS_MUNLOCKALL, Name: "munlockall", Kind: Emulate, Args: a()},
	{Nr: unix.SYS_MODIFY_LDT, Name: "modify_ldt", Kind: Unsupported, Args: a(aInt, aPtr, aUint),
		Note: "a local descriptor table is CPU state the checkpoint does not hold"},
	{Nr: unix.SYS_PRCTL, Name: "prctl", Kind: Emulate, Args: a(aInt, aHex, aHex, aHex, aHex), Dyn: prctlOuts, Accept: prctlAccept,
		Note: "only the options listed in prctlOptions are understood"},
	{Nr: unix.SYS_ARCH_PRCTL, Name: "arch_prctl", Kind: Process, Args: a(aHex, aHex), Dyn: archPrctlOuts, Accept: archPrctlAccept},
	{Nr: unix.SYS_SETRLIMIT, Name: "setrlimit", Kind: Emulate, Args: a(aInt, aPtr)},
	{Nr: unix.SYS_CHROOT, Name: "chroot", Kind: Emulate, Args: a(aStr)},
	{Nr: unix.SYS_SYNC, Name: "sync", Kind: Emulate, Args: a()},
	{Nr: unix.SYS_GETTID, Name: "gettid", Kind: Emulate, Args: a()},
	{Nr: unix.SYS_READAHEAD, Name: "readahead", Kind: Emulate, Args: a(aFd, aInt, aUint)},
	{Nr: unix.SYS_SETXATTR, Name: "setxattr", Kind: Emulate, Args: a(aStr, aStr, aPtr, aUint, aHex)},
	{Nr: unix.SYS_LSETXATTR, Name: "lsetxattr", Kind: Emulate, Args: a(aStr, aStr, aPtr, aUint, aHex)},
	{Nr: unix.SYS_FSETXATTR, Name: "fsetxattr", Kind: Emulate, Args: a(aFd, aStr, aPtr, aUint, aHex)},
	{Nr: unix.SYS_GETXATTR, Name: "getxattr", Kind: Emulate, Args: a(aStr, aStr, aBuf, aUint), Outs: outs(retBuf(2))},
	{Nr: unix.SYS_LGETXATTR, Name: "lgetxattr", Kind: Emulate, Args: a(aStr, aStr, aBuf, aUint), Outs: outs(retBuf(2))},
	{Nr: unix.SYS_FGETXATTR, Name: "fgetxattr", Kind: Emulate, Args: a(aFd, aStr, aBuf, aUint), Outs: outs(retBuf(2))},
	{Nr: unix.SYS_LISTXATTR, Name: "listxattr", Kind: Emulate, Args: a(aStr, aBuf, aUint), Outs: outs(retBuf(1))},
	{Nr: unix.SYS_LLISTXATTR, Name: "llistxattr", Kind: Emulate, Args: a(aStr, aBuf, aUint), Outs: outs(retBuf(1))},
	{Nr: unix.SYS_FLISTXATTR, Name: "flistxattr", Kind: Emulate, Args: a(aFd, aBuf, aUint), Outs: outs(retBuf(1))},
	{Nr: unix.SYS_REMOVEXATTR, Name: "removexattr", Kind: Emulate, Args: a(aStr, aStr)},
	{Nr: unix.SYS_LREMOVEXATTR, Name: "lremovexattr", Kind: Emulate, Args: a(aStr, aStr)},
	{Nr: unix.SYS_FREMOVEXATTR, Name: "fremovexattr", Kind: Emulate, Args: a(aFd, aStr)},
	{Nr: unix.SYS_TKILL, Name: "tkill", Kind: Emulate, Args: a(aInt, ArgSignal), Note: noteSignal},
	{Nr: unix.SYS_TIME, Name: "time", Kind: Emulate, Args: a(aOut), Outs: outs(fixed(0, sizeofTime))},
	{Nr: unix.SYS_FUTEX, Name: "futex", Kind: Emulate, Args: a(aPtr, aHex, aInt, aPtr, aPtr, aInt), Dyn: futexOuts, Accept: futexAccept,
		Note: "replay runs one thread at a time in the recorded order; waits and wakes return the recorded values"},
	{Nr: unix.SYS_SCHED_SETAFFINITY, Name: "sched_setaffinity", Kind: Emulate, Args: a(aInt, aUint, aPtr)},
	// Returns the size of the kernel's cpumask, which is what it copied.
	{Nr: unix.SYS_SCHED_GETAFFINITY, Name: "sched_getaffinity", Kind: Emulate, Args: a(aInt, aUint, aOut), Outs: outs(retBuf(2))},
	{Nr: unix.SYS_IO_SETUP, Name: "io_setup", Kind: Unsupported, Args: a(aUint, aPtr), Note: noteAsync},
	{Nr: unix.SYS_IO_GETEVENTS, Name: "io_getevents", Kind: Unsupported, Args: a(aHex, aInt, aInt, aPtr, aPtr), Note: noteAsync},
	{Nr: unix.SYS_IO_SUBMIT, Name: "io_submit", Kind: Unsupported, Args: a(aHex, aInt, aPtr), Note: noteAsync},
	{Nr: unix.SYS_EPOLL_CREATE, Name: "epoll_create", Kind: Emulate, Args: a(aInt), Ret: aFd},
	{Nr: unix.SYS_GETDENTS64, Name: "getdents64", Kind: Emulate, Args: a(aFd, aBuf, aUint), Outs: outs(retBuf(1))},
	{Nr: unix.SYS_SET_TID_ADDRESS, Name: "set_tid_address", Kind: Emulate, Args: a(aPtr),
		Note: "returns the tid; the clear_child_tid address matters only when the thread exits"},
	// When a stopped thread resumes a sleep the kernel set up a restart block
	// for (-ERESTART_RESTARTBLOCK), the continuation appears as this call.
	{Nr: unix.SYS_RESTART_SYSCALL, Name: "restart_syscall", Kind: Emulate, Args: a(),
		Note: "its outputs are those of the interrupted call (nanosleep, clock_nanosleep, poll, futex): take them from that call's declaration"},
	{Nr: unix.SYS_FADVISE64, Name: "fadvise64", Kind: Emulate, Args: a(aFd, aInt, aInt, aInt)},
	// timer_t is an int in the kernel's ABI.
	{Nr: unix.SYS_TIMER_CREATE, Name: "timer_create", Kind: Emulate, Args: a(aInt, aPtr, ArgInt32Out), Outs: outs(fixed(2, sizeofInt32)),
		Note: "the signals it arms are replayed from the signal log"},
	{Nr: unix.SYS_TIMER_SETTIME, Name: "timer_settime", Kind: Emulate, Args: a(aInt, aHex, aPtr, aOut), Outs: outs(fixed(3, sizeofItimerspec))},
	{Nr: unix.SYS_TIMER_GETTIME, Name: "timer_gettime", Kind: Emulate, Args: a(aInt, aOut), Outs: outs(fixed(1, sizeofItimerspec))},
	{Nr: unix.SYS_TIMER_GETOVERRUN, Name: "timer_getoverrun", Kind: Emulate, Args: a(aInt)},
	{Nr: unix.SYS_TIMER_DELETE, Name: "timer_delete", Kind: Emulate, Args: a(aInt)},
	{Nr: unix.SYS_CLOCK_GETTIME, Name: "clock_gettime", Kind: Emulate, Args: a(aInt, ArgTimespec), Outs: outs(fixed(1, sizeofTimespec))},
	{Nr: unix.SYS_CLOCK_GETRES, Name: "clock_getres", Kind: Emulate, Args: a(aInt, ArgTimespec), Outs: outs(fixed(1, sizeofTimespec))},
	// Remaining time written on interruption, only for relative sleeps, but
	// capturing it for absolute ones is harmless: the memory is unchanged.
	{Nr: unix.SYS_CLOCK_NANOSLEEP, Name: "clock_nanosleep", Kind: Emulate, Args: a(aInt, aHex, aPtr, ArgTimespec),
		Outs: outs(onError(fixed(3, sizeofTimespec)))},
	{Nr: unix.SYS_EXIT_GROUP, Name: "exit_group", Kind: Exit, Args: a(aInt)},
	{Nr: unix.SYS_EPOLL_WAIT, Name: "epoll_wait", Kind: Emulate, Args: a(aFd, aOut, aInt, aInt), Outs: outs(retTimes(1, sizeofEpollEvent))},
	{Nr: unix.SYS_EPOLL_CTL, Name: "epoll_ctl", Kind: Emulate, Args: a(aFd, aInt, aFd, aPtr)},
	{Nr: unix.SYS_TGKILL, Name: "tgkill", Kind: Emulate, Args: a(aInt, aInt, ArgSignal), Note: noteSignal},
	{Nr: unix.SYS_UTIMES, Name: "utimes", Kind: Emulate, Args: a(aStr, aPtr)},
	{Nr: unix.SYS_WAITID, Name: "waitid", Kind: Emulate, Args: a(aInt, aInt, aOut, aHex, aOut),
		Outs: outs(fixed(2, sizeofSiginfo), fixed(4, sizeofRusage))},
	{Nr: unix.SYS_INOTIFY_INIT, Name: "inotify_init", Kind: Emulate, Args: a(), Ret: aFd},
	{Nr: unix.SYS_INOTIFY_ADD_WATCH, Name: "inotify_add_watch", Kind: Emulate, Args: a(aFd, aStr, aHex)},
	{Nr: unix.SYS_INOTIFY_RM_WATCH, Name: "inotify_rm_watch", Kind: Emulate, Args: a(aFd, aInt)},
	{Nr: unix.SYS_OPENAT, Name: "openat", Kind: Emulate, Args: a(aFd, aStr, ArgOpenFlags, ArgMode), Ret: aFd},
	{Nr: unix.SYS_MKDIRAT, Name: "mkdirat", Kind: Emulate, Args: a(aFd, aStr, ArgMode)},
	{Nr: unix.SYS_MKNODAT, Name: "mknodat", Kind: Emulate, Args: a(aFd, aStr, ArgMode, aHex)},
	{Nr: unix.SYS_FCHOWNAT, Name: "fchownat", Kind: Emulate, Args: a(aFd, aStr, aInt, aInt, aHex)},
	{Nr: unix.SYS_FUTIMESAT, Name: "futimesat", Kind: Emulate, Args: a(aFd, aStr, aPtr)},
	{Nr: unix.SYS_NEWFSTATAT, Name: "newfstatat", Kind: Emulate, Args: a(aFd, aStr, ArgStat, aHex), Outs: outs(fixed(2, sizeofStat))},
	{Nr: unix.SYS_UNLINKAT, Name: "unlinkat", Kind: Emulate, Args: a(aFd, aStr, aHex)},
	{Nr: unix.SYS_RENAMEAT, Name: "renameat", Kind: Emulate, Args: a(aFd, aStr, aFd, aStr)},
	{Nr: unix.SYS_LINKAT, Name: "linkat", Kind: Emulate, Args: a(aFd, aStr, aFd, aStr, aHex)},
	{Nr: unix.SYS_SYMLINKAT, Name: "symlinkat", Kind: Emulate, Args: a(aStr, aFd, aStr)},
	{Nr: unix.SYS_READLINKAT, Name: "readlinkat", Kind: Emulate, Args: a(aFd, aStr, aBuf, aUint), Outs: outs(retBuf(2))},
	{Nr: unix.SYS_FCHMODAT, Name: "fchmodat", Kind: Emulate, Args: a(aFd, aStr, ArgMode)},
	{Nr: unix.SYS_FACCESSAT, Name: "faccessat", Kind: Emulate, Args: a(aFd, aStr, aInt)},
	{Nr: unix.SYS_PSELECT6, Name: "pselect6", Kind: Emulate, Args: a(aInt, aOut, aOut, aOut, aOut, aPtr), Dyn: selectOuts(sizeofTimespec)},
	{Nr: unix.SYS_PPOLL, Name: "ppoll", Kind: Emulate, Args: a(aOut, aUint, aOut, aPtr, aUint),
		Outs: outs(onError(argTimes(0, 1, sizeofPollFd)), onError(fixed(2, sizeofTimespec)))},
	{Nr: unix.SYS_UNSHARE, Name: "unshare", Kind: Unsupported, Args: a(aHex),
		Note: "namespaces and unshared tables are process state the checkpoint does not hold"},
	{Nr: unix.SYS_SET_ROBUST_LIST, Name: "set_robust_list", Kind: Emulate, Args: a(aPtr, aUint),
		Note: "the list matters only when the thread exits"},
	{Nr: unix.SYS_GET_ROBUST_LIST, Name: "get_robust_list", Kind: Unsupported, Args: a(aInt, aOut, aOut),
		Note: "rarely used; its outputs are not declared"},
	// The offsets, when given, are advanced by the amount moved.
	{Nr: unix.SYS_SPLICE, Name: "splice", Kind: Emulate, Args: a(aFd, aOut, aFd, aOut, aUint, aHex),
		Outs: outs(fixed(1, sizeofInt64), fixed(3, sizeofInt64))},
	{Nr: unix.SYS_TEE, Name: "tee", Kind: Emulate, Args: a(aFd, aFd, aUint, aHex)},
	{Nr: unix.SYS_SYNC_FILE_RANGE, Name: "sync_file_range", Kind: Emulate, Args: a(aFd, aInt, aInt, aHex)},
	{Nr: unix.SYS_VMSPLICE, Name: "vmsplice", Kind: Unsupported, Args: a(aFd, aPtr, aUint, aHex),
		Note: "pages gifted to or read from a pipe are shared with the kernel"},
	{Nr: unix.SYS_UTIMENSAT, Name: "utimensat", Kind: Emulate, Args: a(aFd, aStr, aPtr, aHex)},
	{Nr: unix.SYS_EPOLL_PWAIT, Name: "epoll_pwait", Kind: Emulate, Args: a(aFd, aOut, aInt, aInt, aPtr, aUint),
		Outs: outs(retTimes(1, sizeofEpollEvent))},
	{Nr: unix.SYS_SIGNALFD, Name: "signalfd", Kind: Emulate, Args: a(aFd, aPtr, aUint), Ret: aFd},
	{Nr: unix.SYS_TIMERFD_CREATE, Name: "timerfd_create", Kind: Emulate, Args: a(aInt, aHex), Ret: aFd},
	{Nr: unix.SYS_EVENTFD, Name: "eventfd", Kind: Emulate, Args: a(aUint), Ret: aFd},
	{Nr: unix.SYS_FALLOCATE, Name: "fallocate", Kind: Emulate, Args: a(aFd, aHex, aInt, aInt)},
	{Nr: unix.SYS_TIMERFD_SETTIME, Name: "timerfd_settime", Kind: Emulate, Args: a(aFd, aHex, aPtr, aOut),
		Outs: outs(fixed(3, sizeofItimerspec))},
	{Nr: unix.SYS_TIMERFD_GETTIME, Name: "timerfd_gettime", Kind: Emulate, Args: a(aFd, aOut), Outs: outs(fixed(1, sizeofItimerspec))},
	{Nr: unix.SYS_ACCEPT4, Name: "accept4", Kind: Emulate, Args: a(aFd, aOut, aOut, aHex), Ret: aFd,
		Outs: outs(sockaddr(1, 2), fixed(2, sizeofInt32))},
	{Nr: unix.SYS_SIGNALFD4, Name: "signalfd4", Kind: Emulate, Args: a(aFd, aPtr, aUint, aHex), Ret: aFd},
	{Nr: unix.SYS_EVENTFD2, Name: "eventfd2", Kind: Emulate, Args: a(aUint, aHex), Ret: aFd},
	{Nr: unix.SYS_EPOLL_CREATE1, Name: "epoll_create1", Kind: Emulate, Args: a(aHex), Ret: aFd},
	{Nr: unix.SYS_DUP3, Name: "dup3", Kind: Emulate, Args: a(aFd, aFd, aHex), Ret: aFd},
	{Nr: unix.SYS_PIPE2, Name: "pipe2", Kind: Emulate, Args: a(ArgFdPair, ArgOpenFlags), Outs: outs(fixed(0, sizeofFdPair))},
	{Nr: unix.SYS_INOTIFY_INIT1, Name: "inotify_init1", Kind: Emulate, Args: a(aHex), Ret: aFd},
	{Nr: unix.SYS_PREADV, Name: "preadv", Kind: Emulate, Args: a(aFd, aOut, aUint, aInt, aInt), Outs: outs(iovec(1, 2))},
	{Nr: unix.SYS_PWRITEV, Name: "pwritev", Kind: Emulate, Args: a(aFd, aPtr, aUint, aInt, aInt)},
	{Nr: unix.SYS_RT_TGSIGQUEUEINFO, Name: "rt_tgsigqueueinfo", Kind: Emulate, Args: a(aInt, aInt, ArgSignal, aPtr), Note: noteSignal},
	{Nr: unix.SYS_PERF_EVENT_OPEN, Name: "perf_event_open", Kind: Unsupported, Args: a(aPtr, aInt, aInt, aFd, aHex),
		Note: "counters and their ring buffers are filled by the kernel outside any syscall"},
	// Up to ret messages, each filled like recvmsg; the timeout is updated when
	// at least one message arrived (net/socket.c: do_recvmmsg).
	{Nr: unix.SYS_RECVMMSG, Name: "recvmmsg", Kind: Emulate, Args: a(aFd, aOut, aUint, aHex, aOut),
		Outs: outs(Out{Arg: 1, Kind: OutMmsghdr, Size: Size{Kind: SizeRet, Arg: 2}}, fixed(4, sizeofTimespec)),
		Note: "file descriptors passed in SCM_RIGHTS are replayed as numbers only"},
	{Nr: unix.SYS_PRLIMIT64, Name: "prlimit64", Kind: Emulate, Args: a(aInt, aInt, aPtr, aOut), Outs: outs(fixed(3, sizeofRlimit))},
	{Nr: unix.SYS_SYNCFS, Name: "syncfs", Kind: Emulate, Args: a(aFd)},
	// msg_len of each sent message is written back; the whole entries are
	// captured, unchanged apart from it.
	{Nr: unix.SYS_SENDMMSG, Name: "sendmmsg", Kind: Emulate, Args: a(aFd, aOut, aUint, aHex), Outs: outs(retTimes(1, sizeofMmsghdr))},
	{Nr: unix.SYS_GETCPU, Name: "getcpu", Kind: Emulate, Args: a(ArgInt32Out, ArgInt32Out, aPtr),
		Outs: outs(fixed(0, sizeofInt32), fixed(1, sizeofInt32))},
	// The local iovecs receive ret bytes, in order.
	{Nr: unix.SYS_PROCESS_VM_READV, Name: "process_vm_readv", Kind: Emulate, Args: a(aInt, aOut, aUint, aPtr, aUint, aHex), Outs: outs(iovec(1, 2))},
	{Nr: unix.SYS_PROCESS_VM_WRITEV, Name: "process_vm_writev", Kind: Unsupported, Args: a(aInt, aPtr, aUint, aPtr, aUint, aHex),
		Note: "writes memory without faulting; a write into the process itself would be invisible"},
	{Nr: unix.SYS_KCMP, Name: "kcmp", Kind: Emulate, Args: a(aInt, aInt, aInt, aHex, aHex)},
	{Nr: unix.SYS_SCHED_SETATTR, Name: "sched_setattr", Kind: Emulate, Args: a(aInt, aPtr, aHex)},
	// The kernel copies min(size, its own struct size) bytes and stores the
	// latter in attr->size; capturing size bytes covers both.
	{Nr: unix.SYS_SCHED_GETATTR, Name: "sched_getattr", Kind: Emulate, Args: a(aInt, aOut, aUint, aHex), Outs: outs(argBuf(1, 2))},
	{Nr: unix.SYS_RENAMEAT2, Name: "renameat2", Kind: Emulate, Args: a(aFd, aStr, aFd, aStr, aHex)},
	{Nr: unix.SYS_SECCOMP, Name: "seccomp", Kind: Unsupported, Args: a(aInt, aHex, aPtr),
		Note: "a seccomp filter cannot be removed and would apply to the replay"},
	{Nr: unix.SYS_GETRANDOM, Name: "getrandom", Kind: Emulate, Args: a(aBuf, aUint, aHex), Outs: outs(retBuf(0))},
	{Nr: unix.SYS_MEMFD_CREATE, Name: "memfd_create", Kind: Emulate, Args: a(aStr, aHex), Ret: aFd,
		Note: "a MAP_SHARED mapping of it is memory another mapping can change"},
	{Nr: unix.SYS_EXECVEAT, Name: "execveat", Kind: Unsupported, Args: a(aFd, aStr, aPtr, aPtr, aHex), Note: noteExec},
	{Nr: unix.SYS_USERFAULTFD, Name: "userfaultfd", Kind: Unsupported, Args: a(aHex),
		Note: "page contents would be supplied by another thread or process outside any syscall"},
	{Nr: unix.SYS_MEMBARRIER, Name: "membarrier", Kind: Emulate, Args: a(aInt, aHex, aInt)},
	{Nr: unix.SYS_MLOCK2, Name: "mlock2", Kind: Emulate, Args: a(aPtr, aUint, aHex)},
	{Nr: unix.SYS_COPY_FILE_RANGE, Name: "copy_file_range", Kind: Emulate, Args: a(aFd, aOut, aFd, aOut, aUint, aHex),
		Outs: outs(fixed(1, sizeofInt64), fixed(3, sizeofInt64))},
	{Nr: unix.SYS_PREADV2, Name: "preadv2", Kind: Emulate, Args: a(aFd, aOut, aUint, aInt, aInt, aHex), Outs: outs(iovec(1, 2))},
	{Nr: unix.SYS_PWRITEV2, Name: "pwritev2", Kind: Emulate, Args: a(aFd, aPtr, aUint, aInt, aInt, aHex)},
	{Nr: unix.SYS_PKEY_MPROTECT, Name: "pkey_mprotect", Kind: Memory, Args: a(aPtr, aUint, ArgProt, aInt)},
	{Nr: unix.SYS_PKEY_ALLOC, Name: "pkey_alloc", Kind: Unsupported, Args: a(aHex, aHex),
		Note: "protection keys live in the PKRU register and page tables, not in the checkpoint"},
	{Nr: unix.SYS_PKEY_FREE, Name: "pkey_free", Kind: Unsupported, Args: a(aInt),
		Note: "protection keys live in the PKRU register and page tables, not in the checkpoint"},
	{Nr: unix.SYS_STATX, Name: "statx", Kind: Emulate, Args: a(aFd, aStr, aHex, aHex, aOut), Outs: outs(fixed(4, sizeofStatx))},
	{Nr: unix.SYS_IO_PGETEVENTS, Name: "io_pgetevents", Kind: Unsupported, Args: a(aHex, aInt, aInt, aPtr, aPtr, aPtr), Note: noteAsync},
	{Nr: unix.SYS_RSEQ, Name: "rseq", Kind: Emulate, Args: a(aPtr, aUint, aHex, aHex),
		Note: "the kernel later writes cpu_id fields of the rseq area on preemption and migration, outside any syscall; " +
			"replay sees the recorded values and must not register the area (it writes CPU 0 into an area registered in the window)"},
	{Nr: unix.SYS_PIDFD_SEND_SIGNAL, Name: "pidfd_send_signal", Kind: Emulate, Args: a(aFd, ArgSignal, aPtr, aHex), Note: noteSignal},
	{Nr: unix.SYS_IO_URING_SETUP, Name: "io_uring_setup", Kind: Unsupported, Args: a(aUint, aPtr), Note: noteAsync},
	{Nr: unix.SYS_IO_URING_ENTER, Name: "io_uring_enter", Kind: Unsupported, Args: a(aFd, aUint, aUint, aHex, aPtr, aUint), Note: noteAsync},
	{Nr: unix.SYS_IO_URING_REGISTER, Name: "io_uring_register", Kind: Unsupported, Args: a(aFd, aUint, aPtr, aUint), Note: noteAsync},
	{Nr: unix.SYS_PIDFD_OPEN, Name: "pidfd_open", Kind: Emulate, Args: a(aInt, aHex), Ret: aFd},
	{Nr: unix.SYS_CLONE3, Name: "clone3", Kind: Emulate, Args: a(aPtr, aUint)}, // flags in memory: the recorder accepts a vfork child only
	{Nr: unix.SYS_CLOSE_RANGE, Name: "close_range", Kind: Emulate, Args: a(aUint, aUint, aHex)},
	{Nr: unix.SYS_OPENAT2, Name: "openat2", Kind: Emulate, Args: a(aFd, aStr, aPtr, aUint), Ret: aFd},
	{Nr: unix.SYS_PIDFD_GETFD, Name: "pidfd_getfd", Kind: Emulate, Args: a(aFd, aFd, aHex), Ret: aFd},
	{Nr: unix.SYS_FACCESSAT2, Name: "faccessat2", Kind: Emulate, Args: a(aFd, aStr, aInt, aHex)},
	{Nr: unix.SYS_EPOLL_PWAIT2, Name: "epoll_pwait2", Kind: Emulate, Args: a(aFd, aOut, aInt, aPtr, aPtr, aUint),
		Outs: outs(retTimes(1, sizeofEpollEvent))},
	{Nr: unix.SYS_FUTEX_WAITV, Name: "futex_waitv", Kind: Emulate, Args: a(aPtr, aUint, aHex, aPtr, aInt)},
	{Nr: unix.SYS_FCHMODAT2, Name: "fchmodat2", Kind: Emulate, Args: a(aFd, aStr, ArgMode, aHex)},
}
