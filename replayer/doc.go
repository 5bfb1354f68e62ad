// Package replayer re-executes the recorded window of a partial checkpoint and
// verifies that it ends where the recording ended.
//
// The algorithm: a tiny static stub (one page of code built in memory, run from
// a memfd) is started under ptrace and from then on driven only by syscalls
// injected through its `syscall; int3` gadget, or, while the address space is
// rebuilt, through a loop in the same page that makes a table of calls in one
// stop. Its address space is emptied and
// rebuilt from the memory map of the chosen start interval: every recorded
// region is mapped anonymous and private at its recorded address and protection,
// every page of the interval's start state is written through /proc/PID/mem, and
// the pages the checkpoint does not hold are made PROT_NONE so that touching one
// is reported instead of silently reading zeros. A seccomp filter then limits the
// stub to the address-space and signal syscalls replay executes for real. The
// recorded registers are set and the program runs under PTRACE_SYSCALL: at each
// syscall entry the call is compared with the next record of the log (number,
// the arguments that define it, the address after the syscall instruction);
// everything that talks to the world is skipped and its recorded result and
// output buffers are written back at the syscall exit; calls that build the
// address space or process state are executed for real, rewritten to reproduce
// the recorded result (file mappings become anonymous ones at the recorded
// address, brk becomes mmap/munmap), and their result is checked.
//
// After the last recorded syscall the run must reach the recorded end: the same
// exit_group code, the same synchronous fault (signal, code, address, registers),
// or, for a signal sent from outside or a dump request, a point where the
// registers and the digests of the recorded end pages match. Such a point is
// searched with a software breakpoint at the recorded rip, which is needed
// because registers alone repeat across loop iterations. Anything else is a
// *Divergence. The replay never opens, writes, sends or deletes anything on the
// host; the only host writes are the optional copies of the program's output in
// Options.OutputDir.
//
// Session drives the same engine one command at a time for a debugger: step,
// continue to breakpoints (int3s shared with the end search through one table
// and hidden from every read), watchpoints (debug registers), caught
// syscalls, and reverse step and continue by re-execution from the start,
// with positions named by syscall stretch, arrival counts and single steps
// (see Position: there is no branch counter to name them by).
package replayer
