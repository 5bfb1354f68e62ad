package syscalls

import "golang.org/x/sys/unix"

// CaptureBound returns outputs that cover, for every possible call of d, the
// memory Outputs may read or return for it, expressed without Go functions:
// the eBPF capture side copies these ranges when the call returns (the C
// header bpf/syscall_table.h is generated from them), and the recorder then
// applies Outputs to the copied memory, so that it keeps exactly what Outputs
// names. For a call without Dyn this is d.Outs; for one with Dyn it is a
// superset derived from the same request lists that Dyn consults. A bound is
// allowed to be larger than what a call wrote (the surplus is dropped) but
// never smaller than what a call the table accepts wrote; bound_test.go
// checks that over every declared request code.
func CaptureBound(d *Desc) []Out {
	if d == nil || d.Kind == Unsupported {
		return nil
	}
	if d.Dyn == nil {
		return d.Outs
	}
	switch d.Nr {
	case unix.SYS_IOCTL:
		return []Out{fixed(2, maxSize(ioctlRequests))}
	case unix.SYS_FCNTL:
		return []Out{fixed(2, maxSize(fcntlCmds))}
	case unix.SYS_PRCTL:
		return []Out{fixed(1, maxSize(prctlOptions))}
	case unix.SYS_ARCH_PRCTL:
		return []Out{fixed(1, maxSize(archPrctlCodes))}
	case unix.SYS_SELECT, unix.SYS_PSELECT6:
		// (nfds+63)/64 longs per set: FD_SETSIZE bits cover every nfds up
		// to 1024, and nfds bytes cover every larger one.
		tv := sizeofTimeval
		if d.Nr == unix.SYS_PSELECT6 {
			tv = sizeofTimespec
		}
		var os []Out
		for arg := 1; arg <= 3; arg++ {
			os = append(os, fixed(arg, fdSetBytes), argTimes(arg, 0, 1))
		}
		return append(os, onError(fixed(4, tv)))
	case unix.SYS_MINCORE:
		// One byte per page: a page of vector covers a 16 MiB range. A
		// larger range is not captured and the recorder says so.
		return []Out{fixed(2, mincoreBound)}
	case unix.SYS_GETGROUPS:
		return []Out{retTimes(1, sizeofInt32)}
	case unix.SYS_SYSLOG:
		return []Out{retBuf(1)}
	case unix.SYS_FUTEX:
		return []Out{onError(fixed(0, sizeofInt32)), onError(fixed(4, sizeofInt32))}
	}
	// A Dyn call without a bound here is captured by nothing: Outputs then
	// finds its memory missing and the recorder marks the call.
	return nil
}

const (
	fdSetBytes   = 1024 / 8
	mincoreBound = 4096
)

func maxSize[K comparable](m map[K]int) int {
	n := 0
	for _, v := range m {
		n = max(n, v)
	}
	return n
}
