package replayer

import (
	"fmt"
	"sort"
	"strings"

	"github.com/tprec/tprec/format"
)

// Divergence is returned by Run when the replayed execution leaves the recorded
// one. Seq names the syscall record at (or after) which it happened: the record
// the program should have executed next, or the last one when the program went
// past the end of the log.
type Divergence struct {
	Tid      int
	Seq      uint64
	Expected string
	Actual   string
	Rip      uint64
	Reason   string
	// Hint names a likely cause outside the replay's reach, or is empty.
	Hint string
	// Signal, when set, is the signal delivered in user code whose point
	// the replay was looking for: the replay diverged before it or could
	// not find it (a replay starting after its interval avoids it).
	Signal *format.SignalEvent
	// Threads is the number of threads the replay ran (threads.go).
	Threads int
	// Timeout: the replay was stopped by its deadline (Options.Timeout)
	// before it reached the end.
	Timeout bool
	// EndPassed: the replay passed the rip where the recording ended with
	// other registers or memory, either with every register as recorded,
	// or as fast as the program runs (the search compared in the process),
	// and went on in case a later pass matched. A timeout that comes after
	// it is most likely a divergence of data, not a replay that was merely
	// slow.
	EndPassed bool
}

func (d *Divergence) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "replay diverged at syscall #%d (thread %d, rip %#x): %s", d.Seq, d.Tid, d.Rip, d.Reason)
	if d.Expected != "" || d.Actual != "" {
		fmt.Fprintf(&b, ": expected %s, got %s", d.Expected, d.Actual)
	}
	if d.Hint != "" {
		fmt.Fprintf(&b, " (%s)", d.Hint)
	}
	return b.String()
}

// Report is the multi-line form tpreplay prints.
func (d *Divergence) Report() string {
	var b strings.Builder
	fmt.Fprintf(&b, "divergence: %s\n", d.Reason)
	fmt.Fprintf(&b, "  thread:   %d\n", d.Tid)
	fmt.Fprintf(&b, "  syscall:  #%d\n", d.Seq)
	fmt.Fprintf(&b, "  rip:      %#x\n", d.Rip)
	if d.Expected != "" {
		fmt.Fprintf(&b, "  expected: %s\n", d.Expected)
	}
	if d.Actual != "" {
		fmt.Fprintf(&b, "  actual:   %s\n", d.Actual)
	}
	if d.Hint != "" {
		fmt.Fprintf(&b, "  hint:     %s\n", d.Hint)
	}
	return b.String()
}

// sharedHint says, when the replayed intervals ivs changed shared writable
// memory, that another process writing it would explain a divergence: the
// recorder copies that memory at boundaries, but what another process
// writes between two reads of this one is an input no log holds.
func sharedHint(ivs []format.Interval) string {
	n := 0
	for _, iv := range ivs {
		for _, p := range iv.Written {
			i := sort.Search(len(iv.Maps), func(i int) bool { return iv.Maps[i].End > p.Addr })
			if i == len(iv.Maps) {
				continue
			}
			if m := &iv.Maps[i]; m.Start <= p.Addr && m.Shared && m.Prot&format.ProtWrite != 0 {
				n++
			}
		}
	}
	if n == 0 {
		return ""
	}
	var mapped uint64
	for _, m := range ivs[0].Maps {
		if m.Shared && m.Prot&format.ProtWrite != 0 {
			mapped += m.End - m.Start
		}
	}
	if mapped > format.SharedCopyMax {
		// A python3 growing a 17 MB shared file mapping: the replay
		// started from the final content of the pages beyond the copy,
		// and the sweep that found it read the hint below as blaming a
		// process that did not exist.
		return fmt.Sprintf("the replayed intervals changed %d pages of shared writable memory, of which the process maps %.1f MiB: tprec copies the first %d MiB at a boundary, and the pages beyond start from their final content", n, float64(mapped)/(1<<20), format.SharedCopyMax>>20)
	}
	return fmt.Sprintf("the replayed intervals changed %d pages of shared writable memory: if another process writes that memory too (the workers of a server sharing a counter), what this process read from it is not recorded", n)
}
