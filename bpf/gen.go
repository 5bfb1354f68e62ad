// Package bpf holds tprec's eBPF programs (tprec.c, CO-RE, compiled with
// clang into tprec_x86_bpfel.o and embedded) and the Go loader bpf2go
// generates for them. syscall_table.h, the syscall outputs as data, is
// generated from the Go syscall table; include/vmlinux_x86.h from the kernel's
// BTF. `make generate` rebuilds all of them; the results are committed.
package bpf

//go:generate go run ../tools/gensyscalls -cheader syscall_table.h
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3 -D__TARGET_ARCH_x86" -target amd64 -no-global-types -type tp_syscall -type tp_part -type tp_item -type tp_fault -type tp_proc -type tp_counters -type tp_out -type tp_event_type -type tp_item_kind -type tp_rec_flags -type tp_fault_flags -type tp_proc_flags Tprec tprec.c -- -I./include -I.
