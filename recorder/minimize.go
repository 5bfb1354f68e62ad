package recorder

import (
	"context"
	"fmt"
	"time"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/replayer"
)

// minimize cuts a full checkpoint down to the pages its window touches. A
// trial replay on this machine starts with every page inaccessible and serves
// each one on its first access (replayer.Options.Lazy); only the pages served
// are kept: their final content, the originals any interval saved of them, and
// the file content of mappings made in the window. Splicing still works: a
// replay from a later interval runs a suffix of the same execution and touches
// a subset of these pages. The trial also proves, before anything is written,
// that the checkpoint replays to the recorded end. If it does not, the full
// page set is kept and the header says why.
func minimize(c *format.Checkpoint, store format.PageSource, logf func(string, ...any)) {
	t0 := time.Now()
	res, err := replayer.Run(context.Background(), c, store, replayer.Options{From: -1, Lazy: true})
	if err != nil {
		c.Header.FullPages = true
		c.Header.PageSetNote = "every present page kept: the trial replay failed: " + err.Error()
		logf("trial replay failed, keeping every present page: %v", err)
		return
	}
	keep := make(map[uint64]bool, len(res.Served))
	for _, p := range res.Served {
		keep[p] = true
	}
	// The live part of the stack stays whole, touched or not: a debugger
	// walking the call chain from the end (or from an interval start) needs
	// the frames of callers the window never returned to. It is small.
	stacks := 0
	addStack := func(maps []format.Mapping, rsp uint64) {
		for _, m := range maps {
			if m.Path == "[stack]" && rsp >= m.Start && rsp < m.End {
				for a := rsp &^ (format.PageSize - 1); a < m.End; a += format.PageSize {
					if !keep[a] {
						keep[a] = true
						stacks++
					}
				}
			}
		}
	}
	if n := len(c.Intervals); n > 0 {
		addStack(c.Intervals[n-1].Maps, c.End.Regs.Rsp)
	}
	for _, iv := range c.Intervals {
		for _, t := range iv.Threads {
			addStack(iv.Maps, t.Regs.Rsp)
		}
	}
	c.Final = filterPages(c.Final, keep)
	for i := range c.Intervals {
		c.Intervals[i].Written = filterPages(c.Intervals[i].Written, keep)
	}
	for i := range c.Syscalls {
		c.Syscalls[i].Pages = filterPages(c.Syscalls[i].Pages, keep)
	}
	c.Header.FullPages = false
	c.Header.PageSetNote = fmt.Sprintf("pages touched by a trial replay from interval %d (%d pages, %v), and %d more pages of the live stack",
		res.From, len(res.Served), time.Since(t0).Round(time.Millisecond), stacks)
}

// filterPages returns a new list with the references whose page is kept.
func filterPages(refs []format.PageRef, keep map[uint64]bool) []format.PageRef {
	var out []format.PageRef
	for _, p := range refs {
		if keep[p.Addr] {
			out = append(out, p)
		}
	}
	return out
}
