package replayer

import (
	"encoding/binary"
	"fmt"
	"sort"

	"github.com/tprec/tprec/syscalls"

	"golang.org/x/sys/unix"
)

// realSyscalls lists the syscalls the replay lets the kernel execute: those the
// table says are executed for real, and those the replayer itself issues
// (mmap/munmap/mprotect/mremap/madvise for the address space).
func realSyscalls() []uint32 {
	set := map[uint32]bool{
		unix.SYS_MMAP: true, unix.SYS_MUNMAP: true, unix.SYS_MPROTECT: true,
		unix.SYS_MREMAP: true, unix.SYS_MADVISE: true,
		unix.SYS_RT_SIGRETURN: true, unix.SYS_EXIT: true, unix.SYS_EXIT_GROUP: true,
	}
	for _, d := range syscalls.All() {
		switch d.Kind {
		case syscalls.Memory, syscalls.Process, syscalls.Exit:
			set[uint32(d.Nr)] = true
		}
	}
	delete(set, unix.SYS_BRK) // replayed as mmap/munmap
	out := make([]uint32, 0, len(set)+1)
	for nr := range set {
		out = append(out, nr)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	// A syscall the tracer skipped (orig_rax = -1) still passes through the
	// filter with that number (kernel/entry/common.c: seccomp runs after the
	// ptrace entry stop).
	return append(out, 0xffffffff)
}

// seccompProgram builds a classic BPF filter: x86-64 only, the listed numbers
// allowed, clone allowed from the instruction before cloneIP only, everything
// else kills the process. Layout of struct sock_filter:
// u16 code, u8 jt, u8 jf, u32 k (include/uapi/linux/filter.h).
func seccompProgram(allow []uint32, cloneIP uint64) ([]byte, error) {
	if len(allow) > 250 {
		return nil, fmt.Errorf("seccomp filter: %d syscalls do not fit short jumps", len(allow))
	}
	const (
		ldAbs   = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeqK    = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		retK    = unix.BPF_RET | unix.BPF_K
		auditX8 = 0xc000003e // AUDIT_ARCH_X86_64
		kill    = 0x80000000 // SECCOMP_RET_KILL_PROCESS
		allowK  = 0x7fff0000 // SECCOMP_RET_ALLOW
		offNr   = 0          // struct seccomp_data.nr
		offArch = 4          // struct seccomp_data.arch
		offIP   = 8          // struct seccomp_data.instruction_pointer (after the syscall instruction)
	)
	var b []byte
	ins := func(code uint16, jt, jf uint8, k uint32) {
		b = binary.LittleEndian.AppendUint16(b, code)
		b = append(b, jt, jf)
		b = binary.LittleEndian.AppendUint32(b, k)
	}
	n := len(allow)
	ins(ldAbs, 0, 0, offArch)
	ins(jeqK, 1, 0, auditX8)
	ins(retK, 0, 0, kill)
	ins(ldAbs, 0, 0, offNr)
	// clone, from the stub's own syscall instruction only: the fork of a
	// snapshot (snapshot.go). The program's own clones are emulated, and
	// never reach the filter under their number.
	ins(jeqK, 0, 6, unix.SYS_CLONE)
	ins(ldAbs, 0, 0, offIP)
	ins(jeqK, 0, 3, uint32(cloneIP))
	ins(ldAbs, 0, 0, offIP+4)
	ins(jeqK, 0, 1, uint32(cloneIP>>32))
	ins(retK, 0, 0, allowK)
	ins(retK, 0, 0, kill)
	ins(ldAbs, 0, 0, offNr)
	for i, nr := range allow {
		ins(jeqK, uint8(n-i), 0, nr)
	}
	ins(retK, 0, 0, kill)
	ins(retK, 0, 0, allowK)
	return b, nil
}

// installSeccomp writes the filter into the stub's scratch space and installs
// it with injected prctl(PR_SET_NO_NEW_PRIVS) and seccomp(SET_MODE_FILTER).
func (e *engine) installSeccomp() error {
	prog, err := seccompProgram(realSyscalls(), e.stub.gadget+2)
	if err != nil {
		return err
	}
	// struct sock_fprog { u16 len; (pad) ; struct sock_filter *filter; }
	fprog := make([]byte, 16)
	binary.LittleEndian.PutUint16(fprog, uint16(len(prog)/8))
	filterAddr := e.stub.base + stubScratchOff + 16
	binary.LittleEndian.PutUint64(fprog[8:], filterAddr)
	if stubScratchOff+16+len(prog) > stubSize {
		return fmt.Errorf("seccomp filter: %d bytes do not fit the stub page", len(prog))
	}
	if err := e.mem.WriteAt(append(fprog, prog...), e.stub.base+stubScratchOff); err != nil {
		return fmt.Errorf("seccomp filter: %w", err)
	}
	if _, err := e.stub.injectOK("set no_new_privs", unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return err
	}
	if _, err := e.stub.injectOK("install seccomp filter", unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, e.stub.base+stubScratchOff); err != nil {
		return err
	}
	return nil
}
