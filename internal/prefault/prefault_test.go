package prefault

import (
	"bytes"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// resident counts the pages of b the kernel has in memory.
func resident(t *testing.T, b []byte) int {
	t.Helper()
	vec := make([]byte, (len(b)+pageSize-1)/pageSize)
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatal(e)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

// anon maps pages of fresh anonymous memory for the test.
func anon(t *testing.T, pages int) []byte {
	t.Helper()
	b, err := unix.Mmap(-1, 0, pages*pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(b) })
	return b
}

func TestSliceMakesResidentAndKeepsContent(t *testing.T) {
	const pages = 256
	b := anon(t, pages)
	// A few pages written before, the rest never touched (a read would
	// map the zero page, which counts as resident).
	want := make([]byte, len(b))
	for _, p := range []int{0, 7, 100, pages - 1} {
		copy(b[p*pageSize+10:], "written before")
		copy(want[p*pageSize+10:], "written before")
	}
	if got := resident(t, b); got != 4 {
		t.Fatalf("%d pages resident before, want the 4 written", got)
	}
	// An unaligned part from page 2 on: the pages it touches become
	// resident, page 1 before it does not.
	if !Slice(b[2*pageSize+100:]) {
		t.Error("Slice reported it did nothing (a kernel before 5.14 lacks MADV_POPULATE_WRITE)")
	}
	if got := resident(t, b); got != pages-1 {
		t.Errorf("%d of %d pages resident after, want all but page 1 (a kernel before 5.14 lacks MADV_POPULATE_WRITE)", got, pages)
	}
	if !bytes.Equal(b, want) {
		t.Error("the content changed")
	}
}

func TestSliceSmallOrEmpty(t *testing.T) {
	Slice([]byte(nil))
	Slice(make([]uint64, 3))
	b := anon(t, 4)
	if Slice(b) {
		t.Error("Slice reported a 4-page slice made resident")
	}
	if got := resident(t, b); got != 0 {
		t.Errorf("%d pages of a 4-page slice made resident: below 16 pages the faults are left to the first touch", got)
	}
}

func TestBytesSmall(t *testing.T) {
	b := anon(t, 4)
	Bytes(b[:2*pageSize+1])
	if got := resident(t, b); got != 3 {
		t.Errorf("%d pages resident after Bytes of 2 pages and a byte, want 3: a slice too small for the call is touched", got)
	}
}
