package e2e

import (
	"strings"
	"testing"
	"time"
)

// A process killed from outside in the middle of a long `rep movsb` stops
// between two of its iterations. A breakpoint at the instruction fires only
// before the first one, so the replay watches the memory the copy reaches
// shortly before the recorded end with a debug register and single-steps
// the rest; the trial replay at the dump and tpreplay both find that point.
func TestEndInsideRepString(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	prog := cc(t, "testdata/repcopy.c", dir)
	for attempt := 1; ; attempt++ {
		target, _, done := startTarget(t, prog)
		ck := attachAndCrash(t, target, done, time.Second)
		if note := pageSetNote(t, ck); !strings.HasPrefix(note, "pages touched by a trial replay") {
			t.Fatalf("the trial replay failed: %s", note)
		}
		out := replay(t, ck, "-v")
		if strings.Contains(out, "inside a rep string instruction") {
			return
		}
		// The signal landed between two copies (a few instructions out of
		// millions): try again.
		if attempt == 3 {
			t.Fatalf("in 3 attempts the end never fell inside the copy:\n%s", out)
		}
	}
}
