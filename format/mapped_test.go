package format

import (
	"fmt"
	"testing"
)

// The file mappings the log made that are still in place at a call: a
// munmap cuts one, a later mmap over it (here an anonymous one) replaces
// it, an mremap takes its old range away.
func TestFileMappedBefore(t *testing.T) {
	const pg = PageSize
	file := func(seq, addr, n uint64) Syscall {
		return Syscall{Seq: seq, Nr: nrMmap, Ret: int64(addr), Args: [6]uint64{0, n * pg, 1, 1, 3, 0}}
	}
	log := []Syscall{
		file(1, 0x10000, 8),
		{Seq: 2, Nr: nrMunmap, Args: [6]uint64{0x12000, 2 * pg}},
		file(3, 0x40000, 4),
		{Seq: 4, Nr: nrMmap, Ret: 0x42000, Args: [6]uint64{0x42000, pg, 3, 0x32, ^uint64(0), 0}},
		file(5, 0x80000, 4),
		{Seq: 6, Nr: nrMremap, Ret: 0x90000, Args: [6]uint64{0x80000, 4 * pg, 4 * pg}},
		file(7, 0xa0000, 2),
	}
	got := FileMappedBefore(log, 7)
	want := []MappedSpan{
		{Span{0x10000, 0x12000}, 1}, {Span{0x14000, 0x18000}, 1},
		{Span{0x40000, 0x42000}, 3}, {Span{0x43000, 0x44000}, 3},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("before call 7: %x, want %x", got, want)
	}
	if got := FileMappedBefore(log, 8); len(got) != 5 || got[4] != (MappedSpan{Span{0xa0000, 0xa2000}, 7}) {
		t.Fatalf("before call 8: %x", got)
	}
}
