package syscalls

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// sampleArgs are argument vectors that exercise every branch of the Dyn
// functions: each declared request code of ioctl, fcntl, prctl, arch_prctl
// and futex, and a few plain values.
func sampleArgs() [][6]uint64 {
	s := [][6]uint64{{}, {1, 2, 3, 4, 5, 6}, {100, 0x1000, 0x2000, 0x3000, 0x4000, 0x5000}}
	for r := range ioctlRequests {
		s = append(s, [6]uint64{1, uint64(r), 0x1000})
	}
	for c := range fcntlCmds {
		s = append(s, [6]uint64{1, uint64(c), 0x1000})
	}
	for o := range prctlOptions {
		s = append(s, [6]uint64{uint64(o), 0x1000})
	}
	for c := range archPrctlCodes {
		s = append(s, [6]uint64{c, 0x1000})
	}
	for op := uint64(0); op <= futexLockPI2; op++ {
		s = append(s, [6]uint64{0x1000, op, 1, 0, 0x2000, 0})
	}
	return s
}

func TestTableInvariants(t *testing.T) {
	if len(table) < 200 {
		t.Errorf("table has %d entries; expected the common syscalls of real programs", len(table))
	}
	for k := range table {
		d := &table[k]
		if got := Name(d.Nr); got != d.Name {
			t.Errorf("entry %q has number %d, which the kernel calls %q", d.Name, d.Nr, got)
		}
		if got, ok := Lookup(d.Nr); !ok || got != d {
			t.Errorf("Lookup(%d) does not return the %s entry", d.Nr, d.Name)
		}
		if d.NArgs < 0 || d.NArgs > 6 || d.NArgs != len(d.Args) {
			t.Errorf("%s: NArgs %d, %d argument formats", d.Name, d.NArgs, len(d.Args))
		}
		if d.Kind == Unsupported && d.Note == "" {
			t.Errorf("%s is Unsupported without a note saying why", d.Name)
		}
		if d.Dyn != nil && d.Outs != nil {
			t.Errorf("%s has both Outs and Dyn", d.Name)
		}
		check := func(o Out, dyn bool) {
			if o.Arg < 0 || o.Arg >= d.NArgs {
				t.Errorf("%s: output through argument %d of %d", d.Name, o.Arg, d.NArgs)
			}
			switch {
			case o.Kind == OutIovec, o.Size.Kind == SizeArg, o.Size.Kind == SizeArgPtr, o.Size.Kind == SizeArgTimes:
				if o.Size.Arg < 0 || o.Size.Arg >= d.NArgs {
					t.Errorf("%s: size from argument %d of %d", d.Name, o.Size.Arg, d.NArgs)
				}
			}
			if o.Kind == OutPlain && (o.Size.Kind < SizeFixed || o.Size.Kind > SizeArgTimes) {
				t.Errorf("%s: output %d has no size kind", d.Name, o.Arg)
			}
			// A Dyn size follows the arguments, and Outputs bounds it.
			if o.Size.Kind == SizeFixed && !dyn && (o.Size.N <= 0 || o.Size.N > MaxOut) {
				t.Errorf("%s: fixed output of %d bytes", d.Name, o.Size.N)
			}
		}
		for _, o := range d.Outs {
			check(o, false)
		}
		if d.Dyn != nil {
			for _, args := range sampleArgs() {
				for _, o := range d.Dyn(args, 1) {
					check(o, true)
				}
			}
		}
	}
}

func TestAllSorted(t *testing.T) {
	all := All()
	if len(all) != len(table) {
		t.Fatalf("All has %d entries; table %d", len(all), len(table))
	}
	for k := 1; k < len(all); k++ {
		if all[k-1].Nr >= all[k].Nr {
			t.Errorf("All not sorted at %s, %s", all[k-1].Name, all[k].Name)
		}
	}
}

// Calls that write into the process must declare where, or replay would
// leave the recorded results out of memory.
func TestWritersDeclareOutputs(t *testing.T) {
	writers := []string{
		"read", "pread64", "readv", "preadv", "preadv2", "fstat", "stat", "lstat", "newfstatat", "statx",
		"statfs", "fstatfs", "clock_gettime", "clock_getres", "gettimeofday", "time", "getdents64", "getdents",
		"epoll_wait", "epoll_pwait", "epoll_pwait2", "poll", "ppoll", "select", "pselect6", "uname",
		"sysinfo", "getrandom", "getcwd", "readlink", "readlinkat", "recvfrom", "recvmsg", "recvmmsg",
		"accept", "accept4", "getsockname", "getpeername", "getsockopt", "pipe", "pipe2", "socketpair",
		"wait4", "waitid", "rt_sigaction", "rt_sigprocmask", "sigaltstack", "nanosleep", "clock_nanosleep",
		"getrlimit", "prlimit64", "getrusage", "times", "getresuid", "getresgid", "getcpu", "capget",
		"getitimer", "setitimer", "timerfd_gettime", "timerfd_settime", "sched_getaffinity", "getgroups",
		"ioctl", "fcntl", "prctl", "arch_prctl", "sendfile", "splice", "copy_file_range", "getxattr",
		"listxattr", "timer_create", "rt_sigpending", "mincore",
	}
	byName := map[string]*Desc{}
	for _, d := range All() {
		byName[d.Name] = d
	}
	for _, n := range writers {
		d, ok := byName[n]
		if !ok {
			t.Errorf("%s is not declared", n)
			continue
		}
		if d.Kind == Unsupported {
			t.Errorf("%s is Unsupported", n)
		}
		if len(d.Outs) == 0 && d.Dyn == nil {
			t.Errorf("%s writes memory but declares no outputs", n)
		}
	}
}

func TestKinds(t *testing.T) {
	want := map[int]Kind{
		unix.SYS_MMAP: Memory, unix.SYS_MUNMAP: Memory, unix.SYS_MREMAP: Memory, unix.SYS_MPROTECT: Memory,
		unix.SYS_BRK: Memory, unix.SYS_MADVISE: Memory, unix.SYS_PKEY_MPROTECT: Memory,
		unix.SYS_ARCH_PRCTL: Process, unix.SYS_RT_SIGACTION: Process, unix.SYS_RT_SIGPROCMASK: Process,
		unix.SYS_SIGALTSTACK: Process, unix.SYS_RT_SIGRETURN: Process,
		unix.SYS_EXIT: Exit, unix.SYS_EXIT_GROUP: Exit,
		unix.SYS_CLONE: Emulate, unix.SYS_CLONE3: Emulate, unix.SYS_FORK: Emulate,
		unix.SYS_VFORK: Emulate, unix.SYS_EXECVE: Unsupported, unix.SYS_EXECVEAT: Unsupported,
		unix.SYS_IO_URING_SETUP: Unsupported, unix.SYS_IO_URING_ENTER: Unsupported,
		unix.SYS_USERFAULTFD: Unsupported, unix.SYS_PTRACE: Unsupported, unix.SYS_SECCOMP: Unsupported,
		unix.SYS_SHMAT: Unsupported, unix.SYS_VMSPLICE: Unsupported, unix.SYS_PROCESS_VM_WRITEV: Unsupported,
		unix.SYS_READ: Emulate, unix.SYS_WRITE: Emulate, unix.SYS_OPENAT: Emulate, unix.SYS_FUTEX: Emulate,
		unix.SYS_SET_TID_ADDRESS: Emulate, unix.SYS_SET_ROBUST_LIST: Emulate, unix.SYS_RSEQ: Emulate,
	}
	for nr, k := range want {
		d, ok := Lookup(nr)
		if !ok {
			t.Errorf("%s not declared", Name(nr))
			continue
		}
		if d.Kind != k {
			t.Errorf("%s: kind %d; want %d", d.Name, d.Kind, k)
		}
	}
	if d, _ := Lookup(unix.SYS_RSEQ); !strings.Contains(d.Note, "cpu_id") {
		t.Errorf("rseq note does not explain the kernel's later writes: %q", d.Note)
	}
}

func TestLookupAndName(t *testing.T) {
	for _, nr := range []int{-1, 380, 999, unix.SYS_MOUNT, unix.SYS_KEXEC_LOAD} {
		if d, ok := Lookup(nr); ok {
			t.Errorf("Lookup(%d) = %s; want not declared", nr, d.Name)
		}
	}
	cases := map[int]string{
		0: "read", 60: "exit", 231: "exit_group", 262: "newfstatat", 332: "statx", 435: "clone3",
		unix.SYS_MOUNT: "mount", 380: "syscall_380", -3: "syscall_-3", 100000: "syscall_100000",
	}
	for nr, want := range cases {
		if got := Name(nr); got != want {
			t.Errorf("Name(%d) = %q; want %q", nr, got, want)
		}
	}
}

func TestCheck(t *testing.T) {
	ioctl, _ := Lookup(unix.SYS_IOCTL)
	for _, req := range []uint64{unix.TCGETS, unix.TIOCGWINSZ, unix.TIOCINQ, unix.TIOCGPGRP, unix.TCSETS, ioctlFIONBIO, unix.FICLONE, unix.FICLONERANGE} {
		if ok, why := Check(ioctl, [6]uint64{0, req, 0x1000}); !ok {
			t.Errorf("ioctl %#x refused: %s", req, why)
		}
	}
	for _, req := range []uint64{0xdead, 0xc0186201 /* a DRM request */, unix.FIDEDUPERANGE /* writes its results back */} {
		ok, why := Check(ioctl, [6]uint64{0, req, 0x1000})
		if ok {
			t.Errorf("unknown ioctl %#x accepted", req)
		}
		if !strings.Contains(why, "ioctl") || !strings.Contains(why, "0x") {
			t.Errorf("reason %q does not name the request", why)
		}
	}
	// The upper half of the register is not part of an ioctl request.
	if ok, _ := Check(ioctl, [6]uint64{0, 0xffffffff00000000 | unix.TCGETS}); !ok {
		t.Error("TCGETS with garbage in the upper half refused")
	}

	fcntl, _ := Lookup(unix.SYS_FCNTL)
	if ok, _ := Check(fcntl, [6]uint64{3, unix.F_GETFL}); !ok {
		t.Error("fcntl F_GETFL refused")
	}
	if ok, _ := Check(fcntl, [6]uint64{3, 9999}); ok {
		t.Error("fcntl 9999 accepted")
	}
	prctl, _ := Lookup(unix.SYS_PRCTL)
	if ok, _ := Check(prctl, [6]uint64{unix.PR_SET_NAME}); !ok {
		t.Error("prctl PR_SET_NAME refused")
	}
	if ok, why := Check(prctl, [6]uint64{unix.PR_SET_SECCOMP}); ok || !strings.Contains(why, "seccomp") {
		t.Errorf("prctl PR_SET_SECCOMP: ok=%v why=%q", ok, why)
	}
	arch, _ := Lookup(unix.SYS_ARCH_PRCTL)
	if ok, _ := Check(arch, [6]uint64{archSetFS, 0x1000}); !ok {
		t.Error("arch_prctl ARCH_SET_FS refused")
	}
	if ok, _ := Check(arch, [6]uint64{0x1012, 0}); ok {
		t.Error("arch_prctl ARCH_SET_CPUID accepted")
	}
	futex, _ := Lookup(unix.SYS_FUTEX)
	if ok, _ := Check(futex, [6]uint64{0x1000, 128 | 0}); !ok {
		t.Error("FUTEX_WAIT_PRIVATE refused")
	}
	if ok, _ := Check(futex, [6]uint64{0x1000, futexFd}); ok {
		t.Error("FUTEX_FD accepted")
	}

	clone, _ := Lookup(unix.SYS_CLONE)
	thread := uint64(unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_THREAD |
		unix.CLONE_SYSVSEM | unix.CLONE_SETTLS | unix.CLONE_PARENT_SETTID | unix.CLONE_CHILD_CLEARTID)
	if ok, why := Check(clone, [6]uint64{thread}); !ok {
		t.Errorf("clone of a thread refused: %q", why)
	}
	if ok, why := Check(clone, [6]uint64{unix.CLONE_VM | unix.CLONE_SIGHAND | uint64(unix.SIGCHLD)}); ok || !strings.HasPrefix(why, "clone: ") {
		t.Errorf("clone of a process sharing memory: ok=%v why=%q", ok, why)
	}
	if ok, why := Check(clone, [6]uint64{unix.CLONE_PARENT_SETTID | uint64(unix.SIGCHLD)}); ok {
		t.Errorf("clone writing the parent's memory accepted: %q", why)
	}
	fork := uint64(unix.CLONE_CHILD_SETTID | unix.CLONE_CHILD_CLEARTID | uint64(unix.SIGCHLD))
	if ok, why := Check(clone, [6]uint64{fork}); !ok {
		t.Errorf("glibc's fork refused: %q", why)
	}
	if ok, _ := Check(nil, [6]uint64{}); ok {
		t.Error("Check(nil) accepted")
	}
	read, _ := Lookup(unix.SYS_READ)
	if ok, why := Check(read, [6]uint64{}); !ok {
		t.Errorf("read refused: %s", why)
	}
}

func TestDynOutputs(t *testing.T) {
	get := func(nr int, args [6]uint64, ret int64) []Out {
		d, _ := Lookup(nr)
		return OutsOf(d, args, ret)
	}
	if o := get(unix.SYS_IOCTL, [6]uint64{0, unix.TIOCGWINSZ, 0x1000}, 0); len(o) != 1 || o[0].Size.N != 8 || o[0].Arg != 2 {
		t.Errorf("TIOCGWINSZ outputs %+v", o)
	}
	if o := get(unix.SYS_IOCTL, [6]uint64{0, unix.TCGETS, 0x1000}, 0); len(o) != 1 || o[0].Size.N != 36 {
		t.Errorf("TCGETS outputs %+v; the kernel's struct termios is 36 bytes", o)
	}
	if o := get(unix.SYS_IOCTL, [6]uint64{0, unix.TCSETS, 0x1000}, 0); len(o) != 0 {
		t.Errorf("TCSETS outputs %+v", o)
	}
	if o := get(unix.SYS_FCNTL, [6]uint64{0, unix.F_GETLK, 0x1000}, 0); len(o) != 1 || o[0].Size.N != 32 {
		t.Errorf("F_GETLK outputs %+v", o)
	}
	if o := get(unix.SYS_FCNTL, [6]uint64{0, unix.F_SETFL, 0x800}, 0); len(o) != 0 {
		t.Errorf("F_SETFL outputs %+v", o)
	}
	if o := get(unix.SYS_PRCTL, [6]uint64{unix.PR_GET_NAME, 0x1000}, 0); len(o) != 1 || o[0].Size.N != 16 || o[0].Arg != 1 {
		t.Errorf("PR_GET_NAME outputs %+v", o)
	}
	// select(70, ...): two 64-bit words per set, and the timeout.
	o := get(unix.SYS_SELECT, [6]uint64{70, 1, 2, 3, 4}, 1)
	if len(o) != 4 || o[0].Size.N != 16 || o[3].Arg != 4 || o[3].Size.N != 16 || !o[3].OnError {
		t.Errorf("select outputs %+v", o)
	}
	if o := get(unix.SYS_GETGROUPS, [6]uint64{0, 0x1000}, 5); len(o) != 0 {
		t.Errorf("getgroups(0, list) outputs %+v", o)
	}
	if o := get(unix.SYS_FUTEX, [6]uint64{0x1000, futexWakeOp | 128, 1, 1, 0x2000}, 1); len(o) != 1 || o[0].Arg != 4 {
		t.Errorf("FUTEX_WAKE_OP outputs %+v", o)
	}
	if o := get(unix.SYS_FUTEX, [6]uint64{0x1000, 0, 1}, 0); len(o) != 0 {
		t.Errorf("FUTEX_WAIT outputs %+v", o)
	}
	if o := get(unix.SYS_MINCORE, [6]uint64{0x1000, 3*4096 + 1, 0x9000}, 0); len(o) != 1 || o[0].Size.N != 4 {
		t.Errorf("mincore outputs %+v", o)
	}
}
