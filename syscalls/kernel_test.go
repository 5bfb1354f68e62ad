package syscalls

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// These tests run real syscalls with their output buffers inside a probe
// area and compare the bytes the kernel changed with the ranges Outputs
// declares: every changed byte must be declared (else replay would miss it),
// and every declared byte must have changed or have been set up by the test
// (else the table claims memory the kernel does not write).

// area is the probe memory. Each run fills it with a pattern; setup then
// writes the call's inputs, marking them as such.
type area struct {
	b    []byte
	init []bool
}

const areaSize = 8192

func (a *area) base() uint64 { return uint64(uintptr(unsafe.Pointer(&a.b[0]))) }

func (a *area) addr(off int) uint64 { return a.base() + uint64(off) }

func (a *area) put(off int, b []byte) uint64 {
	copy(a.b[off:], b)
	for k := range b {
		a.init[off+k] = true
	}
	return a.addr(off)
}

func (a *area) put32(off int, v uint32) uint64 {
	return a.put(off, binary.LittleEndian.AppendUint32(nil, v))
}

func (a *area) put64(off int, v uint64) uint64 {
	return a.put(off, binary.LittleEndian.AppendUint64(nil, v))
}

func (a *area) cstr(off int, s string) uint64 { return a.put(off, append([]byte(s), 0)) }

func (a *area) get32(off int) uint32 { return binary.LittleEndian.Uint32(a.b[off:]) }

func (a *area) read(addr uint64, n int) ([]byte, error) {
	if addr < a.base() || addr+uint64(n) > a.base()+uint64(len(a.b)) {
		return nil, fmt.Errorf("%#x+%d outside the probe area", addr, n)
	}
	o := addr - a.base()
	return append([]byte(nil), a.b[o:o+uint64(n)]...), nil
}

type liveCase struct {
	name  string
	nr    int
	setup func(t *testing.T, a *area) [6]uint64
	after func(a *area, ret int64) // releases what the call created
}

// padded names the calls whose declared range holds alignment padding the
// kernel skips (getdents64 records), so declared bytes may stay unwritten.
var padded = map[int]bool{unix.SYS_GETDENTS64: true}

func runLive(t *testing.T, c liveCase) {
	t.Helper()
	d := mustLookup(t, c.nr)
	a := &area{b: make([]byte, areaSize), init: make([]bool, areaSize)}
	changed := make([]bool, areaSize)
	wasInit := make([]bool, areaSize)
	var args [6]uint64
	var ret int64
	for _, pat := range []byte{0xaa, 0x55, 0xc3} {
		for k := range a.b {
			a.b[k], a.init[k] = pat, false
		}
		args = c.setup(t, a)
		before := append([]byte(nil), a.b...)
		r, _, errno := unix.Syscall6(uintptr(c.nr), uintptr(args[0]), uintptr(args[1]), uintptr(args[2]),
			uintptr(args[3]), uintptr(args[4]), uintptr(args[5]))
		runtime.KeepAlive(a)
		if errno != 0 {
			t.Fatalf("%s: %v", c.name, errno)
		}
		ret = int64(r)
		for k := range a.b {
			changed[k] = changed[k] || a.b[k] != before[k]
			wasInit[k] = wasInit[k] || a.init[k]
		}
		if c.after != nil {
			c.after(a, ret)
		}
	}
	if ok, why := Check(d, args); !ok {
		t.Fatalf("%s: refused: %s", c.name, why)
	}
	rs, err := Outputs(d, args, ret, a.read)
	if err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	covered := make([]bool, areaSize)
	for _, r := range rs {
		if r.Addr < a.base() || r.Addr+uint64(r.Len) > a.base()+areaSize {
			t.Errorf("%s: range %#x+%d outside the probe area", c.name, r.Addr, r.Len)
			continue
		}
		for k := 0; k < r.Len; k++ {
			covered[int(r.Addr-a.base())+k] = true
		}
	}
	for k := range changed {
		if changed[k] && !covered[k] {
			t.Errorf("%s (%s): kernel wrote byte %d, not declared (ranges %s)", c.name, Format(recOf(c.nr, args, ret)), k, relRanges(a, rs))
			break
		}
	}
	for k := range covered {
		if covered[k] && !changed[k] && !wasInit[k] && !padded[c.nr] {
			t.Errorf("%s (%s): byte %d declared but never written (ranges %s)", c.name, Format(recOf(c.nr, args, ret)), k, relRanges(a, rs))
			break
		}
	}
	if t.Failed() {
		return
	}
	t.Logf("%s = %d: %s", c.name, ret, relRanges(a, rs))
}

func relRanges(a *area, rs []Range) string {
	s := ""
	for _, r := range rs {
		s += fmt.Sprintf("[%d,+%d) ", int64(r.Addr-a.base()), r.Len)
	}
	return s
}

func closeFds(a *area, ret int64) {
	unix.Close(int(a.get32(0)))
	unix.Close(int(a.get32(4)))
}

// at0 builds a setup from fixed arguments, buf0 standing for the probe area.
func at0(args ...uint64) func(t *testing.T, a *area) [6]uint64 {
	return func(t *testing.T, a *area) [6]uint64 {
		var r [6]uint64
		for k, v := range args {
			r[k] = v
			if v == ^uint64(0) { // placeholder: the probe area
				r[k] = a.addr(0)
			}
		}
		return r
	}
}

const buf0 = ^uint64(0)

func TestKernelWrites(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "probe")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.WriteString("some content")
	fd := uint64(f.Fd())

	var pfd [2]int
	if err := unix.Pipe2(pfd[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pfd[0])
	defer unix.Close(pfd[1])
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(sp[0])
	defer unix.Close(sp[1])
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ep)
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, sp[1], &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(sp[1])}); err != nil {
		t.Fatal(err)
	}
	tfd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(tfd)
	if err := unix.TimerfdSettime(tfd, 0, &unix.ItimerSpec{Value: unix.Timespec{Sec: 100}}, nil); err != nil {
		t.Fatal(err)
	}
	atcwd := uint64(0xffffffffffffff9c)
	send := func(s string) {
		if _, err := unix.Write(sp[0], []byte(s)); err != nil {
			t.Fatal(err)
		}
	}

	cases := []liveCase{
		{"fstat", unix.SYS_FSTAT, at0(fd, buf0), nil},
		{"newfstatat", unix.SYS_NEWFSTATAT, func(t *testing.T, a *area) [6]uint64 {
			return [6]uint64{atcwd, a.cstr(4000, "/"), a.addr(0), 0}
		}, nil},
		{"stat", unix.SYS_STAT, func(t *testing.T, a *area) [6]uint64 {
			return [6]uint64{a.cstr(4000, "/"), a.addr(0)}
		}, nil},
		{"statx", unix.SYS_STATX, func(t *testing.T, a *area) [6]uint64 {
			return [6]uint64{atcwd, a.cstr(4000, "/"), 0, unix.STATX_ALL, a.addr(0)}
		}, nil},
		{"fstatfs", unix.SYS_FSTATFS, at0(fd, buf0), nil},
		{"uname", unix.SYS_UNAME, at0(buf0), nil},
		{"sysinfo", unix.SYS_SYSINFO, at0(buf0), nil},
		{"times", unix.SYS_TIMES, at0(buf0), nil},
		{"getrusage", unix.SYS_GETRUSAGE, at0(unix.RUSAGE_SELF, buf0), nil},
		{"getrlimit", unix.SYS_GETRLIMIT, at0(unix.RLIMIT_NOFILE, buf0), nil},
		{"prlimit64", unix.SYS_PRLIMIT64, at0(0, unix.RLIMIT_NOFILE, 0, buf0), nil},
		{"clock_gettime", unix.SYS_CLOCK_GETTIME, at0(unix.CLOCK_REALTIME, buf0), nil},
		{"clock_getres", unix.SYS_CLOCK_GETRES, at0(unix.CLOCK_MONOTONIC, buf0), nil},
		{"gettimeofday", unix.SYS_GETTIMEOFDAY, func(t *testing.T, a *area) [6]uint64 {
			return [6]uint64{a.addr(0), a.addr(100)}
		}, nil},
		{"time", unix.SYS_TIME, at0(buf0), nil},
		{"pipe2", unix.SYS_PIPE2, at0(buf0, unix.O_CLOEXEC), closeFds},
		{"socketpair", unix.SYS_SOCKETPAIR, func(t *testing.T, a *area) [6]uint64 {
			return [6]uint64{unix.AF_UNIX, unix.SOCK_DGRAM | unix.SOCK_CLOEXEC, 0, a.addr(0)}
		}, closeFds},
		{"rt_sigaction", unix.SYS_RT_SIGACTION, at0(uint64(unix.SIGUSR2), 0, buf0, 8), nil},
		{"rt_sigprocmask", unix.SYS_RT_SIGPROCMASK, at0(unix.SIG_BLOCK, 0, buf0, 8), nil},
		{"rt_sigpending", unix.SYS_RT_SIGPENDING, at0(buf0, 8), nil},
		{"sigaltstack", unix.SYS_SIGALTSTACK, at0(0, buf0), nil},
		{"getresuid", unix.SYS_GETRESUID, func(t *testing.T, a *area) [6]uint64 {
			return [6]uint64{a.addr(0), a.addr(100), a.addr(200)}
		}, nil},
		{"getcpu", unix.SYS_GETCPU, func(t *testing.T, a *area) [6]uint64 {
			return [6]uint64{a.addr(0), a.addr(100), 0}
		}, nil},
		{"getitimer", unix.SYS_GETITIMER, at0(unix.ITIMER_PROF, buf0), nil},
		{"timerfd_gettime", unix.SYS_TIMERFD_GETTIME, at0(uint64(tfd), buf0), nil},
		{"prctl PR_GET_NAME", unix.SYS_PRCTL, at0(unix.PR_GET_NAME, buf0), nil},
		{"capget", unix.SYS_CAPGET, func(t *testing.T, a *area) [6]uint64 {
			a.put32(0, unix.LINUX_CAPABILITY_VERSION_3)
			a.put32(4, 0)
			return [6]uint64{a.addr(0), a.addr(100)}
		}, nil},
		{"fcntl F_GETLK", unix.SYS_FCNTL, func(t *testing.T, a *area) [6]uint64 {
			a.put(0, make([]byte, sizeofFlock))
			a.put(0, []byte{unix.F_WRLCK, 0})
			return [6]uint64{fd, unix.F_GETLK, a.addr(0)}
		}, nil},
		{"getrandom", unix.SYS_GETRANDOM, at0(buf0, 64, 0), nil},
		{"getcwd", unix.SYS_GETCWD, at0(buf0, 1024), nil},
		{"readlink", unix.SYS_READLINK, func(t *testing.T, a *area) [6]uint64 {
			return [6]uint64{a.cstr(4000, "/proc/self/exe"), a.addr(0), 1024}
		}, nil},
		{"sched_getaffinity", unix.SYS_SCHED_GETAFFINITY, at0(0, 1024, buf0), nil},
		{"pread64", unix.SYS_PREAD64, at0(fd, buf0, 100, 5), nil},
		{"getdents64", unix.SYS_GETDENTS64, func(t *testing.T, a *area) [6]uint64 {
			dfd, err := unix.Open("/", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			a.put32(8000, uint32(dfd))
			return [6]uint64{uint64(dfd), a.addr(0), 2048}
		}, func(a *area, ret int64) { unix.Close(int(a.get32(8000))) }},
		{"readv", unix.SYS_READV, func(t *testing.T, a *area) [6]uint64 {
			if _, err := unix.Write(pfd[1], []byte("0123456789abcdef")); err != nil {
				t.Fatal(err)
			}
			a.put64(4000, a.addr(0))
			a.put64(4008, 5)
			a.put64(4016, a.addr(100))
			a.put64(4024, 0)
			a.put64(4032, a.addr(200))
			a.put64(4040, 64)
			return [6]uint64{uint64(pfd[0]), a.addr(4000), 3}
		}, nil},
		{"ioctl FIONREAD", unix.SYS_IOCTL, func(t *testing.T, a *area) [6]uint64 {
			send("xyz")
			return [6]uint64{uint64(sp[1]), unix.TIOCINQ, a.addr(0)}
		}, func(a *area, ret int64) { unix.Read(sp[1], make([]byte, 16)) }},
		{"epoll_wait", unix.SYS_EPOLL_WAIT, func(t *testing.T, a *area) [6]uint64 {
			send("x")
			return [6]uint64{uint64(ep), a.addr(0), 8, 0}
		}, func(a *area, ret int64) { unix.Read(sp[1], make([]byte, 16)) }},
		{"poll", unix.SYS_POLL, func(t *testing.T, a *area) [6]uint64 {
			a.put32(0, uint32(pfd[1]))
			a.put32(4, unix.POLLOUT)
			a.put32(8, uint32(sp[1]))
			a.put32(12, unix.POLLIN)
			return [6]uint64{a.addr(0), 2, 0}
		}, nil},
		{"select", unix.SYS_SELECT, func(t *testing.T, a *area) [6]uint64 {
			a.put64(0, 1<<uint(pfd[1]))
			a.put(100, make([]byte, 16))
			return [6]uint64{uint64(pfd[1] + 1), 0, a.addr(0), 0, a.addr(100)}
		}, nil},
		{"getsockname", unix.SYS_GETSOCKNAME, func(t *testing.T, a *area) [6]uint64 {
			return [6]uint64{uint64(sp[0]), a.addr(0), a.put32(1000, 128)}
		}, nil},
		{"recvfrom", unix.SYS_RECVFROM, func(t *testing.T, a *area) [6]uint64 {
			send("hello")
			return [6]uint64{uint64(sp[1]), a.addr(0), 64, 0, a.addr(500), a.put32(1000, 128)}
		}, nil},
		{"recvmsg", unix.SYS_RECVMSG, func(t *testing.T, a *area) [6]uint64 {
			send("hello world")
			a.put(2000, make([]byte, sizeofMsghdr))
			a.put64(2000+offMsgName, a.addr(500))
			a.put32(2000+offMsgNamelen, 128)
			a.put64(2000+offMsgIov, a.addr(3000))
			a.put64(2000+offMsgIovlen, 2)
			a.put64(2000+offMsgControl, a.addr(600))
			a.put64(2000+offMsgControllen, 64)
			a.put64(3000, a.addr(0))
			a.put64(3008, 4)
			a.put64(3016, a.addr(100))
			a.put64(3024, 64)
			return [6]uint64{uint64(sp[1]), a.addr(2000), 0}
		}, nil},
		{"wait4", unix.SYS_WAIT4, func(t *testing.T, a *area) [6]uint64 {
			cmd := exec.Command("/bin/true")
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			return [6]uint64{uint64(cmd.Process.Pid), a.addr(0), 0, a.addr(100)}
		}, nil},
	}
	if ptm, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0); err == nil {
		defer ptm.Close()
		for _, req := range []uint64{unix.TCGETS, unix.TCGETS2, unix.TIOCGWINSZ, unix.TIOCGPTN} {
			cases = append(cases, liveCase{fmt.Sprintf("ioctl %#x", req), unix.SYS_IOCTL, at0(uint64(ptm.Fd()), req, buf0), nil})
		}
	} else {
		t.Logf("no pseudo-terminal here (%v): terminal ioctls not checked against the kernel", err)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { runLive(t, c) })
	}
}

// The kernel's sigset_t, which rt_sigaction's struct and rt_sigprocmask use,
// is 8 bytes: any other size is refused. kernelSigaction.Mask relies on it.
func TestKernelSigsetSize(t *testing.T) {
	var old kernelSigaction
	for _, size := range []uintptr{4, 16, 128} {
		_, _, errno := unix.Syscall6(unix.SYS_RT_SIGACTION, uintptr(unix.SIGUSR2), 0,
			uintptr(unsafe.Pointer(&old)), size, 0, 0)
		if errno != unix.EINVAL {
			t.Errorf("rt_sigaction with a %d-byte sigset: %v; want EINVAL", size, errno)
		}
	}
	if unsafe.Sizeof(old.Mask) != 8 || sizeofKernelSigaction != 32 || sizeofKernelStack != 24 {
		t.Errorf("mirrors: sigaction %d bytes, stack_t %d", sizeofKernelSigaction, sizeofKernelStack)
	}
}
