/* Kernel types for CO-RE, per architecture. Each vmlinux_<arch>.h is
 * generated from a kernel's BTF:
 *   bpftool btf dump file /sys/kernel/btf/vmlinux format c > include/vmlinux_x86.h
 * Field offsets are relocated at load time against the running kernel's BTF,
 * so the header's kernel version only needs to name the fields we use. */
#ifndef TPREC_VMLINUX_H
#define TPREC_VMLINUX_H
#if defined(__TARGET_ARCH_x86)
#include "vmlinux_x86.h"
#else
#error "tprec's eBPF programs support x86-64 only (build with -D__TARGET_ARCH_x86)"
#endif
#endif
