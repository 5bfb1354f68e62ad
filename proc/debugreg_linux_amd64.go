package proc

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// debugRegOffset is offsetof(struct user, u_debugreg) on x86-64
// (arch/x86/include/asm/user_64.h): regs (27*8), u_fpvalid and padding (8),
// i387 (512), u_tsize, u_dsize, u_ssize (24), start_code, start_stack (16),
// signal (8), reserved and padding (8), u_ar0, u_fpstate (16), magic (8),
// u_comm (32).
const debugRegOffset = 848

// GetDebugReg reads debug register n (0-7) of a stopped tracee with
// PTRACE_PEEKUSER.
func GetDebugReg(tid int, n int) (uint64, error) {
	var v uint64
	// PTRACE_PEEKUSER's glibc wrapper returns the word; the raw syscall stores
	// it at data.
	if err := ptrace(unix.PTRACE_PEEKUSR, tid, uintptr(debugRegOffset+8*n), uintptr(unsafe.Pointer(&v))); err != nil {
		return 0, fmt.Errorf("read debug register %d: %w", n, err)
	}
	return v, nil
}

// SetDebugReg writes debug register n of a stopped tracee with
// PTRACE_POKEUSER. The kernel validates the value (arch/x86/kernel/ptrace.c:
// ptrace_set_debugreg): DR0-DR3 must be user addresses, DR7 only enables
// lengths and kinds the CPU supports, DR4/DR5 are refused.
func SetDebugReg(tid int, n int, v uint64) error {
	if err := ptrace(unix.PTRACE_POKEUSR, tid, uintptr(debugRegOffset+8*n), uintptr(v)); err != nil {
		return fmt.Errorf("write debug register %d: %w", n, err)
	}
	return nil
}
