package proc

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ReadPages gives each page at its place in dst, whether the addresses are
// runs (read as one range), scattered, repeated or in descending order, over
// more than one batch; a page unmapped inside a run fails the call naming it.
func TestReadPages(t *testing.T) {
	const n = 1500
	mem, err := unix.Mmap(-1, 0, n*pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	base := uint64(uintptr(unsafe.Pointer(&mem[0])))
	for i := range n {
		copy(mem[i*pageSize:], fmt.Sprintf("page %d", i))
	}
	var addrs []uint64
	for i := range 1200 { // a run across the batch of 1024
		addrs = append(addrs, base+uint64(i)*pageSize)
	}
	for _, i := range []int{1300, 1302, 1302, 1499, 1498, 1497, 5} {
		addrs = append(addrs, base+uint64(i)*pageSize)
	}
	dst := bytes.Repeat([]byte{0xee}, len(addrs)*pageSize)
	if err := ReadPages(os.Getpid(), addrs, dst); err != nil {
		t.Fatal(err)
	}
	for k, a := range addrs {
		i := int(a-base) / pageSize
		if got, want := dst[k*pageSize:(k+1)*pageSize], mem[i*pageSize:(i+1)*pageSize]; !bytes.Equal(got, want) {
			t.Fatalf("page %d of the list (page %d of the mapping) reads %q", k, i, got[:12])
		}
	}
	hole := base + 700*pageSize
	if err := unix.MunmapPtr(unsafe.Pointer(&mem[700*pageSize]), pageSize); err != nil {
		t.Fatal(err)
	}
	err = ReadPages(os.Getpid(), addrs[:1000], dst)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%#x", hole)) {
		t.Fatalf("a read over an unmapped page: %v, want an error naming %#x", err, hole)
	}
}
