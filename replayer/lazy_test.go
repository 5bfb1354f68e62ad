package replayer

import (
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/tprec/tprec/format"
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

// Options.Stub is told of the replay's process once it exists and again
// before it is killed, while it is still there (unreaped, so its pid names
// no other process): the recorder sets its trial replays' scheduling
// policy through it.
func TestStubHook(t *testing.T) {
	needRoot(t)
	rec, _ := crashRecording(t)
	type call struct {
		pid          int
		alive, there bool
	}
	var calls []call
	o := Options{Lazy: true, Stub: func(pid int, alive bool) {
		_, err := os.Stat(fmt.Sprintf("/proc/%d/task/%d", pid, pid))
		calls = append(calls, call{pid, alive, err == nil})
	}}
	if _, err := run(t, rec.c, rec.pages, o); err != nil {
		t.Fatalf("replay: %v", err)
	}
	if len(calls) != 2 || calls[0].pid != calls[1].pid || !calls[0].alive || calls[1].alive || !calls[0].there || !calls[1].there {
		t.Fatalf("Stub calls %+v, want the replay's pid alive, then not, the process there both times", calls)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", calls[0].pid)); err == nil {
		t.Errorf("process %d still there after the replay", calls[0].pid)
	}
}
