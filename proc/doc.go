// Package proc owns the low-level control of a Linux process from outside:
// ptrace requests on one pinned OS thread, register and extended-state access,
// syscall injection (through an existing syscall instruction, or through a
// trampoline that leaves the thread whole if the tracer dies), /proc/PID/maps and
// pagemap parsing, and memory access through /proc/PID/mem and process_vm_readv.
// The recorder and the replayer both drive processes only through it.
package proc
