package proc

import (
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A mapping marked MADV_DONTFORK is listed, and no other.
func TestDontForkRanges(t *testing.T) {
	const size = 3 << 12
	b, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(b)
	lo := uint64(unsafePointer(b))
	// The middle page only: the mapping splits in three.
	if err := unix.Madvise(b[1<<12:2<<12], unix.MADV_DONTFORK); err != nil {
		t.Fatal(err)
	}
	rs, err := DontForkRanges(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range rs {
		if r[0] < lo+size && lo < r[1] {
			if r != [2]uint64{lo + 1<<12, lo + 2<<12} {
				t.Fatalf("got %#x, want the middle page of %#x", r, lo)
			}
			found = true
		}
	}
	if !found {
		t.Fatalf("the page marked MADV_DONTFORK is not among %#x", rs)
	}
}

func unsafePointer(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }
