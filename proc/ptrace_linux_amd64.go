package proc

import (
	"errors"
	"fmt"
	"sync"
	"syscall"
	"unsafe"

	"github.com/tprec/tprec/format"
	"golang.org/x/sys/unix"
)

// ptrace requests and constants x/sys/unix does not name (include/uapi/linux/ptrace.h).
const (
	ptraceGetSigmask = 0x420a
	ptraceSetSigmask = 0x420b
	ntX86XState      = 0x202 // NT_X86_XSTATE, include/uapi/linux/elf.h
	xstateMax        = 16384 // larger than any XSAVE area a CPU reports today
)

// ptrace issues one request. Callers pass Go pointers converted to uintptr
// (a register buffer, an iovec); go:uintptrescapes makes the compiler move
// those objects to the heap and keep them alive for the call. Without it a
// buffer on the goroutine stack can move (stack growth) while the kernel
// writes into its old address: GETREGS then "succeeds" with all zeros.
//
//go:uintptrescapes
func ptrace(req int, pid int, addr, data uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_PTRACE, uintptr(req), uintptr(pid), addr, data, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// Seize attaches to pid with PTRACE_SEIZE and the given options, without stopping it.
func Seize(pid int, options int) error {
	if err := ptrace(unix.PTRACE_SEIZE, pid, 0, uintptr(options)); err != nil {
		return fmt.Errorf("ptrace seize %d: %w", pid, err)
	}
	return nil
}

// SetOptions replaces the ptrace options of a stopped tracee.
func SetOptions(pid int, options int) error {
	return ptrace(unix.PTRACE_SETOPTIONS, pid, 0, uintptr(options))
}

// regsBufs holds the heap buffers GetRegs and SetRegs pass the kernel. A
// buffer of their own frame would be moved to the heap at every call
// (go:uintptrescapes on ptrace): two allocations of 216 bytes for each call
// a replay emulates, which under a trial replay of half a million calls
// kept the garbage collector marking the recorder's large heap for a third
// of its CPU time.
var regsBufs = sync.Pool{New: func() any { return new(format.Regs) }}

// GetRegs reads the general registers of a stopped tracee.
func GetRegs(tid int) (format.Regs, error) {
	b := regsBufs.Get().(*format.Regs)
	defer regsBufs.Put(b)
	// format.Regs has the layout of struct user_regs_struct.
	err := ptrace(unix.PTRACE_GETREGS, tid, 0, uintptr(unsafe.Pointer(b)))
	return *b, err
}

// SetRegs writes the general registers of a stopped tracee.
func SetRegs(tid int, r format.Regs) error {
	b := regsBufs.Get().(*format.Regs)
	defer regsBufs.Put(b)
	*b = r
	return ptrace(unix.PTRACE_SETREGS, tid, 0, uintptr(unsafe.Pointer(b)))
}

// raxOffset is rax's offset in struct user_regs_struct (format.Regs).
const raxOffset = 10 * 8

// SetRax writes rax alone (PTRACE_POKEUSER): a replay that gives an
// emulated call its result changes nothing else, and the kernel then
// checks one register instead of the 27 PTRACE_SETREGS writes.
func SetRax(tid int, v uint64) error {
	return ptrace(unix.PTRACE_POKEUSR, tid, raxOffset, uintptr(v))
}

// GetXState reads the XSAVE image (x87, SSE, AVX...) of a stopped tracee.
func GetXState(tid int) ([]byte, error) {
	buf := make([]byte, xstateMax)
	iov := unix.Iovec{Base: &buf[0]}
	iov.SetLen(len(buf))
	if err := ptrace(unix.PTRACE_GETREGSET, tid, ntX86XState, uintptr(unsafe.Pointer(&iov))); err != nil {
		return nil, fmt.Errorf("read xstate of %d: %w", tid, err)
	}
	return buf[:iov.Len], nil
}

// SetXState writes an XSAVE image taken by GetXState, on this machine or
// another whose CPU lays it out as from says (nil: unknown, as in a file
// older than the layout's record): the image is first fitted to what this
// kernel takes for the thread (fitXState).
func SetXState(tid int, x []byte, from *XSaveLayout) error {
	if len(x) == 0 {
		return nil
	}
	local, err := GetXState(tid)
	if err != nil {
		return fmt.Errorf("write xstate of %d: %w", tid, err)
	}
	b := fitXState(x, local, from, LocalXSaveLayout(XSaveMask(local)))
	if &b[0] == &x[0] {
		b = append([]byte(nil), x...)
	}
	iov := unix.Iovec{Base: &b[0]}
	iov.SetLen(len(b))
	if err := ptrace(unix.PTRACE_SETREGSET, tid, ntX86XState, uintptr(unsafe.Pointer(&iov))); err != nil {
		return fmt.Errorf("write xstate of %d: %w", tid, err)
	}
	return nil
}

// GetSigmask reads the blocked-signal mask of a stopped tracee.
func GetSigmask(tid int) (uint64, error) {
	var m uint64
	err := ptrace(ptraceGetSigmask, tid, 8, uintptr(unsafe.Pointer(&m)))
	return m, err
}

// SetSigmask sets the blocked-signal mask of a stopped tracee (SIGKILL and
// SIGSTOP stay unblockable, the kernel drops them from the mask).
func SetSigmask(tid int, m uint64) error {
	return ptrace(ptraceSetSigmask, tid, 8, uintptr(unsafe.Pointer(&m)))
}

// GetSiginfo returns the raw 128-byte siginfo of the signal a tracee is stopped for.
func GetSiginfo(tid int) ([]byte, error) {
	buf := make([]byte, 128)
	err := ptrace(unix.PTRACE_GETSIGINFO, tid, 0, uintptr(unsafe.Pointer(&buf[0])))
	return buf, err
}

// SetSiginfo sets the siginfo of the signal a tracee stopped in a
// signal-delivery stop gets when resumed with one (128 bytes).
func SetSiginfo(tid int, info []byte) error {
	if len(info) < 128 {
		return fmt.Errorf("set siginfo: %d bytes", len(info))
	}
	return ptrace(unix.PTRACE_SETSIGINFO, tid, 0, uintptr(unsafe.Pointer(&info[0])))
}

// Resume restarts a stopped tracee with one of PTRACE_CONT, PTRACE_SYSCALL,
// PTRACE_SINGLESTEP, PTRACE_SYSEMU, delivering sig (0 for none).
func Resume(req int, tid int, sig int) error {
	return ptrace(req, tid, 0, uintptr(sig))
}

// Interrupt asks a seized tracee to stop (PTRACE_EVENT_STOP).
func Interrupt(tid int) error { return ptrace(unix.PTRACE_INTERRUPT, tid, 0, 0) }

// Detach detaches from a stopped tracee, delivering sig.
func Detach(tid int, sig int) error { return ptrace(unix.PTRACE_DETACH, tid, 0, uintptr(sig)) }

// EventMsg returns PTRACE_GETEVENTMSG (new pid at a clone event, status at exit).
func EventMsg(tid int) (uint64, error) {
	var m uint64
	err := ptrace(unix.PTRACE_GETEVENTMSG, tid, 0, uintptr(unsafe.Pointer(&m)))
	return m, err
}

// Gone reports whether err means the thread no longer exists.
func Gone(err error) bool { return errors.Is(err, syscall.ESRCH) }

// SyscallInfo is what PTRACE_GET_SYSCALL_INFO reports at a syscall stop
// (include/uapi/linux/ptrace.h: struct ptrace_syscall_info).
type SyscallInfo struct {
	Op   uint8 // SyscallEntry, SyscallExit, or 0 when not at a syscall stop
	Rip  uint64
	Rsp  uint64
	Nr   uint64    // entry only
	Args [6]uint64 // entry only
	Ret  int64     // exit only
}

// PTRACE_SYSCALL_INFO_* op values.
const (
	SyscallEntry = 1
	SyscallExit  = 2
)

const ptraceGetSyscallInfo = 0x420e

// GetSyscallInfo tells a syscall-entry stop from a syscall-exit stop without
// the tracer having to keep count (injections and exec would confuse a count).
func GetSyscallInfo(tid int) (SyscallInfo, error) {
	var raw [88]byte
	if err := ptrace(ptraceGetSyscallInfo, tid, uintptr(len(raw)), uintptr(unsafe.Pointer(&raw[0]))); err != nil {
		return SyscallInfo{}, err
	}
	le := func(off int) uint64 {
		return uint64(raw[off]) | uint64(raw[off+1])<<8 | uint64(raw[off+2])<<16 | uint64(raw[off+3])<<24 |
			uint64(raw[off+4])<<32 | uint64(raw[off+5])<<40 | uint64(raw[off+6])<<48 | uint64(raw[off+7])<<56
	}
	si := SyscallInfo{Op: raw[0], Rip: le(8), Rsp: le(16)}
	switch si.Op {
	case SyscallEntry:
		si.Nr = le(24)
		for i := range si.Args {
			si.Args[i] = le(32 + 8*i)
		}
	case SyscallExit:
		si.Ret = int64(le(24))
	}
	return si, nil
}

// Listen lets a tracee in group-stop stay stopped while still reporting
// events (PTRACE_LISTEN), so SIGCONT from elsewhere resumes it.
func Listen(tid int) error { return ptrace(unix.PTRACE_LISTEN, tid, 0, 0) }

const ptraceGetRseqConfiguration = 0x420f

// GetRseq returns a thread's rseq registration (address, length, signature);
// a zero length means none.
func GetRseq(tid int) (addr uint64, length, sig uint32, err error) {
	// struct ptrace_rseq_configuration: u64 rseq_abi_pointer; u32 rseq_abi_size;
	// u32 signature; u32 flags; u32 pad.
	var raw [24]byte
	if err := ptrace(ptraceGetRseqConfiguration, tid, uintptr(len(raw)), uintptr(unsafe.Pointer(&raw[0]))); err != nil {
		return 0, 0, 0, err
	}
	le32 := func(o int) uint32 {
		return uint32(raw[o]) | uint32(raw[o+1])<<8 | uint32(raw[o+2])<<16 | uint32(raw[o+3])<<24
	}
	return uint64(le32(0)) | uint64(le32(4))<<32, le32(8), le32(12), nil
}
