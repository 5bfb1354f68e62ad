package replayer

import (
	"fmt"
	"slices"
	"testing"

	"github.com/tprec/tprec/format"
	"golang.org/x/sys/unix"
)

// A lazy replay serves exactly the pages the window touches: far fewer than
// the full set, including the marker page the fixture reads, and a checkpoint
// cut down to them replays to the same end.
func TestLazyReplayServesTouchedPages(t *testing.T) {
	needRoot(t)
	rec, _ := crashRecording(t)
	res, err := run(t, rec.c, rec.pages, Options{Lazy: true})
	if err != nil {
		t.Fatalf("lazy replay: %v", err)
	}
	served := map[uint64]bool{}
	for _, p := range res.Served {
		served[p] = true
	}
	if !served[rec.marker] {
		t.Errorf("the marker page %#x the fixture reads was not served", rec.marker)
	}
	if len(res.Served) == 0 || len(res.Served) >= len(rec.c.Final) {
		t.Fatalf("served %d pages of %d", len(res.Served), len(rec.c.Final))
	}
	t.Logf("served %d of %d pages", len(res.Served), len(rec.c.Final))

	var kept []format.PageRef
	for _, p := range rec.c.Final {
		if served[p.Addr] {
			kept = append(kept, p)
		}
	}
	rec.c.Final = kept
	for i := range rec.c.Intervals {
		var w []format.PageRef
		for _, p := range rec.c.Intervals[i].Written {
			if served[p.Addr] {
				w = append(w, p)
			}
		}
		rec.c.Intervals[i].Written = w
	}
	if _, err := run(t, rec.c, rec.pages, Options{}); err != nil {
		t.Fatalf("replay of the minimized checkpoint: %v", err)
	}
	// Serving lazily from the minimized checkpoint touches the same pages.
	res2, err := run(t, rec.c, rec.pages, Options{Lazy: true})
	if err != nil {
		t.Fatalf("lazy replay of the minimized checkpoint: %v", err)
	}
	if len(res2.Served) != len(res.Served) {
		t.Errorf("second lazy replay served %d pages, first %d", len(res2.Served), len(res.Served))
	}
}

// Writing the pages the window writes up front (Options.WrittenFirst)
// leaves the set a lazy replay serves as it was: the window touches every
// page it writes.
func TestLazyWrittenFirstServesTheSamePages(t *testing.T) {
	needRoot(t)
	rec, _ := crashRecording(t)
	// The harness lists the pages that changed by the end as the window's
	// written pages, with their content at the start.
	if len(rec.c.Intervals[0].Written) == 0 {
		t.Fatal("the harness recorded no written page")
	}
	res, err := run(t, rec.c, rec.pages, Options{Lazy: true})
	if err != nil {
		t.Fatalf("lazy replay: %v", err)
	}
	first, err := run(t, rec.c, rec.pages, Options{Lazy: true, WrittenFirst: true})
	if err != nil {
		t.Fatalf("lazy replay with the written pages first: %v", err)
	}
	if first.WrittenFirst == 0 {
		t.Fatal("no page written up front: the fixture's window writes pages of its start")
	}
	if res.WrittenFirst != 0 {
		t.Errorf("%d pages written up front without WrittenFirst", res.WrittenFirst)
	}
	if !slices.Equal(first.Served, res.Served) {
		t.Errorf("served %d pages with the written ones first, %d without; they differ", len(first.Served), len(res.Served))
	}
	t.Logf("%d pages served, %d of them written up front", len(first.Served), first.WrittenFirst)
}

// The file mappings the log made that are still in place at a call: a
// munmap cuts one, a later mmap over it replaces it, an mremap takes its
// old range away; an anonymous mmap or one without recorded pages counts
// for nothing but what it covers.
func TestFileMappedBefore(t *testing.T) {
	const pg = pageSize
	mmap := func(seq, addr, n uint64, pages bool) format.Syscall {
		s := format.Syscall{Seq: seq, Nr: unix.SYS_MMAP, Ret: int64(addr), Args: [6]uint64{0, n * pg}}
		if pages {
			s.Pages = []format.PageRef{{Addr: addr}}
		}
		return s
	}
	e := &engine{c: &format.Checkpoint{Syscalls: []format.Syscall{
		mmap(1, 0x10000, 8, true),
		{Seq: 2, Nr: unix.SYS_MUNMAP, Args: [6]uint64{0x12000, 2 * pg}},
		mmap(3, 0x40000, 4, true),
		mmap(4, 0x40000+2*pg, 1, false),
		mmap(5, 0x80000, 4, true),
		{Seq: 6, Nr: unix.SYS_MREMAP, Ret: 0x90000, Args: [6]uint64{0x80000, 4 * pg, 4 * pg}},
		mmap(7, 0xa0000, 2, true),
	}}}
	got := e.fileMappedBefore(7)
	want := []mappedSpan{
		{0x10000, 0x12000, 1}, {0x14000, 0x18000, 1},
		{0x40000, 0x42000, 3}, {0x43000, 0x44000, 3},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("before call 7: %x, want %x", got, want)
	}
	if got := e.fileMappedBefore(8); len(got) != 5 || got[4] != (mappedSpan{0xa0000, 0xa2000, 7}) {
		t.Fatalf("before call 8: %x", got)
	}
}
