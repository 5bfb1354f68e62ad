// Package prefault makes the memory of a large, new allocation resident in
// one call.
//
// A dump allocates most of its memory fresh (the assembled log: 136 bytes a
// call, 55 MB for a redis-server window), and the first touch of each 4 KiB
// page of it is a page fault: 12-15 us each on a paravirtual VM this project
// runs on, 3-5 us on another (BENCHMARKS.md). Asked for at once, with
// MADV_POPULATE_WRITE, a page costs about half that
// (scripts/bench/pagefault.c). Huge pages would cost far less again (0.3 us
// per 4 KiB there), but with the ranges advised MADV_HUGEPAGE redis dumps
// were no faster in all (BENCHMARKS.md, "Fresh memory in one call").
package prefault

import (
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

const pageSize = 4096

// Slice makes the memory of s resident, and reports whether it did. It
// changes no byte of it. It does not on a kernel without
// MADV_POPULATE_WRITE (before 5.14), where the memory is faulted in on
// first touch as without it, nor for less than 16 pages, whose faults cost
// less than the call.
func Slice[T any](s []T) bool {
	var zero T
	n := uintptr(len(s)) * unsafe.Sizeof(zero)
	if n < 16*pageSize {
		return false
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(s)))
	lo, hi := start&^(pageSize-1), (start+n+pageSize-1)&^(pageSize-1)
	_, _, e := unix.Syscall(unix.SYS_MADVISE, lo, hi-lo, unix.MADV_POPULATE_WRITE)
	runtime.KeepAlive(s)
	return e == 0
}

// Bytes makes the memory of b resident, with one call where the kernel
// takes it, else by touching each page: for a buffer whose faults must be
// taken now rather than where it is first used.
func Bytes(b []byte) {
	if Slice(b) {
		return
	}
	for i := 0; i < len(b); i += pageSize {
		b[i] = 0
	}
}
