package proc

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// A process may run under seccomp filters (a sandboxed daemon, a systemd
// unit's SystemCallFilter=). A call the recorder injects into it passes
// through them like the program's own: one they answer with SIGSYS or a kill
// would kill the target. Seccomp reads a thread's filters and tells, for a
// call, what they would do with it, so that the recorder injects only what
// they allow.

const ptraceSeccompGetFilter = 0x420c

// Seccomp actions (the high 16 bits of a filter's return value,
// linux/seccomp.h), in the kernel's order of precedence.
const (
	SeccompKillProcess = 0x80000000
	SeccompKillThread  = 0x00000000
	SeccompTrap        = 0x00030000
	SeccompErrno       = 0x00050000
	SeccompUserNotif   = 0x7fc00000
	SeccompTrace       = 0x7ff00000
	SeccompLog         = 0x7ffc0000
	SeccompAllow       = 0x7fff0000

	seccompActionFull = 0xffff0000
	auditArchX86_64   = 0xc000003e
)

// SeccompFilters are the filters of one thread, newest first (the order in
// which PTRACE_SECCOMP_GET_FILTER numbers them). Strict is seccomp's strict
// mode, which allows only read, write, _exit and sigreturn.
type SeccompFilters struct {
	Strict  bool
	Filters []*bpf.VM
}

// ReadSeccomp reads the seccomp state of stopped tracee tid: mode is the
// Seccomp field of its /proc status (0 none, 1 strict, 2 filters). Reading
// filters needs CAP_SYS_ADMIN and a kernel built with
// CONFIG_CHECKPOINT_RESTORE.
func ReadSeccomp(tid, mode int) (*SeccompFilters, error) {
	switch mode {
	case 0:
		return &SeccompFilters{}, nil
	case 1:
		return &SeccompFilters{Strict: true}, nil
	}
	var sf SeccompFilters
	for i := 0; ; i++ {
		n, _, e := unix.Syscall6(unix.SYS_PTRACE, ptraceSeccompGetFilter, uintptr(tid), uintptr(i), 0, 0, 0)
		if e == unix.ENOENT && i > 0 {
			return &sf, nil
		}
		if e != 0 {
			return nil, fmt.Errorf("read seccomp filter %d of thread %d: %w", i, tid, e)
		}
		raw := make([]unix.SockFilter, n)
		if n > 0 {
			if _, _, e = unix.Syscall6(unix.SYS_PTRACE, ptraceSeccompGetFilter, uintptr(tid), uintptr(i), uintptr(unsafe.Pointer(&raw[0])), 0, 0); e != 0 {
				return nil, fmt.Errorf("read seccomp filter %d of thread %d: %w", i, tid, e)
			}
		}
		vm, err := seccompVM(raw)
		if err != nil {
			return nil, fmt.Errorf("seccomp filter %d of thread %d: %w", i, tid, err)
		}
		sf.Filters = append(sf.Filters, vm)
	}
}

func seccompVM(raw []unix.SockFilter) (*bpf.VM, error) {
	ins := make([]bpf.Instruction, len(raw))
	for i, r := range raw {
		ins[i] = bpf.RawInstruction{Op: r.Code, Jt: r.Jt, Jf: r.Jf, K: r.K}.Disassemble()
		if _, ok := ins[i].(bpf.RawInstruction); ok {
			return nil, fmt.Errorf("instruction %d (%#x) is not classic BPF", i, r.Code)
		}
	}
	return bpf.NewVM(ins)
}

// Action is what the filters do with call nr(args) made at instruction
// pointer ip (the address after its syscall instruction): the action of
// highest precedence among all filters' answers, with its data (the errno
// of SeccompErrno) in the low 16 bits.
func (sf *SeccompFilters) Action(nr uint64, args [6]uint64, ip uint64) (uint32, error) {
	if sf.Strict {
		switch nr {
		case unix.SYS_READ, unix.SYS_WRITE, unix.SYS_EXIT, unix.SYS_RT_SIGRETURN:
			return SeccompAllow, nil
		}
		return SeccompKillThread, nil
	}
	// The filters load 32-bit words of struct seccomp_data, native (little)
	// endian; the VM loads them in network order, so each word goes in
	// big-endian.
	var in [64]byte
	words := []uint32{uint32(nr), auditArchX86_64, uint32(ip), uint32(ip >> 32)}
	for _, a := range args {
		words = append(words, uint32(a), uint32(a>>32))
	}
	for i, w := range words {
		binary.BigEndian.PutUint32(in[4*i:], w)
	}
	verdict := uint32(SeccompAllow)
	for _, vm := range sf.Filters {
		r, err := vm.Run(in[:])
		if err != nil {
			return 0, err
		}
		// The lowest action, taken as signed, wins (kernel/seccomp.c).
		if int32(uint32(r)&seccompActionFull) < int32(verdict&seccompActionFull) {
			verdict = uint32(r)
		}
	}
	return verdict, nil
}

// SeccompActionName names an action for messages.
func SeccompActionName(a uint32) string {
	switch a & seccompActionFull {
	case SeccompKillProcess:
		return "kill the process"
	case SeccompKillThread:
		return "kill the thread"
	case SeccompTrap:
		return "send SIGSYS"
	case SeccompErrno:
		return fmt.Sprintf("fail it with errno %d", a&0xffff)
	case SeccompUserNotif:
		return "refer it to a supervisor process"
	case SeccompTrace:
		return "refer it to a tracer (it fails with ENOSYS under tprec)"
	case SeccompLog:
		return "log and allow it"
	case SeccompAllow:
		return "allow it"
	}
	return fmt.Sprintf("action %#x", a)
}
