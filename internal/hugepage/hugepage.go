// Package hugepage asks the kernel for transparent huge pages behind a
// large slice that is about to be filled.
//
// A first write to a fresh 4 KiB page costs a page fault: 3-5 us of system
// time each in this project's VM, where a dump that builds 100 MB of
// syscall records took 25,000 of them. With a 2 MiB page the same memory
// takes one fault per 512 pages. The Go runtime does not ask for huge pages
// (it gave up MADV_HUGEPAGE in Go 1.21.1), so on a kernel whose setting is
// "madvise" (Debian's and Ubuntu's) a heap never gets them; under "always"
// it does already, and under "never" nothing can.
package hugepage

import (
	"os"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Size is the x86-64 transparent huge page.
const Size = 2 << 20

// minBytes is the smallest slice worth advising: a range smaller than two
// huge pages may hold none once rounded inward.
const minBytes = 4 * Size

// advised reports whether the kernel gives huge pages only where a range
// asks for them (setting "madvise"): then, and only then, asking changes
// anything.
var advised = sync.OnceValue(func() bool {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	return err == nil && strings.Contains(string(b), "[madvise]")
})

// Make returns make([]T, n), asking for huge pages behind it when it is
// large, and a function to call once the slice is filled: it asks for
// small pages again there, so that once the slice is gone the heap memory
// it leaves behind does not hand out 2 MiB pages to small objects (the
// memory bloat that made Go stop asking). The pages already faulted in keep
// their size until the runtime returns them to the kernel.
func Make[T any](n int) ([]T, func()) {
	s := make([]T, n)
	var zero T
	size := uintptr(n) * unsafe.Sizeof(zero)
	if n == 0 || size < minBytes || !advised() {
		return s, func() {}
	}
	r := inner(unsafe.Pointer(unsafe.SliceData(s)), size)
	if r == nil || unix.Madvise(r, unix.MADV_HUGEPAGE) != nil {
		return s, func() {}
	}
	return s, func() {
		// s stays reachable until now: its range must not go to other
		// objects while it is advised.
		runtime.KeepAlive(s)
		unix.Madvise(r, unix.MADV_NOHUGEPAGE)
	}
}

// inner returns the whole huge pages inside [p, p+size), or nil.
func inner(p unsafe.Pointer, size uintptr) []byte {
	a := uintptr(p)
	lo := (a + Size - 1) &^ (Size - 1)
	hi := (a + size) &^ (Size - 1)
	if hi <= lo {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Add(p, lo-a)), hi-lo)
}

// Bytes returns n zero bytes already faulted in, on huge pages where Make
// gets them: for a buffer that is filled later at a time a fault costs
// more (while a traced process is held).
func Bytes(n int) []byte {
	b, filled := Make[byte](n)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 0
	}
	filled()
	return b
}
