package replayer

import (
	"fmt"
	"strings"
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
}

func (d *Divergence) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "replay diverged at syscall #%d (thread %d, rip %#x): %s", d.Seq, d.Tid, d.Rip, d.Reason)
	if d.Expected != "" || d.Actual != "" {
		fmt.Fprintf(&b, ": expected %s, got %s", d.Expected, d.Actual)
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
	return b.String()
}
