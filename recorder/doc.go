// Package recorder owns recording: attaching to (or launching) a process,
// cutting its execution into intervals, keeping a stopped copy-on-write
// "shadow" fork per interval so the original of every page written in it can be
// saved, logging syscall results, holding the last intervals in a memory ring,
// and writing a checkpoint when the process crashes, exits or the user asks.
//
// An interval boundary stops the target, saves its registers, compares the
// target's page frames with the shadow's (a page the target wrote is no longer
// shared with the shadow: /proc/PID/pagemap shows a different frame) to find the
// pages written since the previous boundary, copies their originals out of the
// shadow, kills the shadow and creates the next one by injecting clone() into
// the target through a trampoline in the patched vDSO (proc.Trampoline), which
// leaves the target whole whatever instant tprec dies at. The shadow is created
// with CLONE_FILES (it holds no extra file references) and exit signal 0
// (invisible to the target's SIGCHLD handler and to waitpid(-1)), inherits a
// fully blocked signal mask and an unusable stack pointer, exits at once if
// tprec died before it could set PTRACE_O_EXITKILL on it (the trampoline sends
// a clone child to exit_group), and dies with tprec through PTRACE_O_EXITKILL.
//
// The ptrace backend gets every syscall result from PTRACE_SYSCALL stops and
// reads the output buffers the syscall table names.
package recorder
