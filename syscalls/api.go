// Package syscalls is the one declaration of the Linux x86-64 syscalls the
// project understands: for each number, its name, how many arguments it takes,
// how replay treats it, and which arguments point at memory the kernel fills in
// (and how large that memory is). The ptrace recorder, the eBPF capture side
// (through a generated C header) and the replayer are all driven from it.
package syscalls

// Kind says how replay treats a syscall.
type Kind int

const (
	// Unsupported: recording it marks the interval as not replayable, naming it.
	Unsupported Kind = iota
	// Emulate: replay skips it and writes back the recorded return value and outputs.
	Emulate
	// Memory: changes the address space; replay executes it for real at the
	// recorded addresses (mmap, munmap, mremap, mprotect, brk, madvise...).
	Memory
	// Process: per-process or per-thread kernel state the replay re-creates by
	// executing the call for real (arch_prctl, rt_sigaction, rt_sigreturn...),
	// then writes back the recorded return value and outputs.
	Process
	// Exit: exit or exit_group.
	Exit
)
