package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A process killed from outside in the middle of a long `rep movsb` stops
// between two of its iterations. A breakpoint at the instruction fires only
// before the first one, so the replay watches the memory the copy reaches
// shortly before the recorded end with a debug register and single-steps
// the rest; the trial replay at the dump and tpreplay both find that point.
//
// The copy from a file mapped afresh for each copy ("mapped") reads pages
// the trial replay serves on their first touch, some of them while it
// single-steps the last iterations: after serving one it resumed the
// thread instead of stepping it, the copy ran out past the end, and the
// trial kept every page (TestFileMappedAgainAndAgain, 1 CI run in 4).
func TestEndInsideRepString(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	prog := cc(t, "testdata/repcopy.c", dir)
	file := filepath.Join(dir, "data")
	data := make([]byte, 8<<20)
	for i := range data {
		data[i] = byte(i*7 + i>>12)
	}
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Run("heap", func(t *testing.T) { endInsideRepString(t, prog) })
	t.Run("mapped", func(t *testing.T) {
		for attempt := 1; ; attempt++ {
			target, out, done := startTarget(t, prog, file)
			waitReady(t, out)
			pid := target.Process.Pid
			dir := t.TempDir()
			rec := startTprec(t, "--pid", fmt.Sprint(pid), "--output", dir)
			rec.waitRecording(t)
			if err := syscall.Kill(pid, syscall.SIGUSR1); err != nil {
				t.Fatal(err)
			}
			diesOfSIGSEGV(t, done, func() string { return rec.quit() })
			ck := rec.oneCheckpoint(t, dir)
			if note := pageSetNote(t, ck); !strings.HasPrefix(note, "pages touched by a trial replay") {
				t.Fatalf("the trial replay failed: %s", note)
			}
			res := replay(t, ck, "-v")
			if strings.Contains(res, "inside a rep string instruction") {
				return
			}
			// The signal landed between two copies (a map or an unmap,
			// microseconds against milliseconds): try again.
			if attempt == 3 {
				t.Fatalf("in 3 attempts the end never fell inside the copy:\n%s", res)
			}
		}
	})
}

func endInsideRepString(t *testing.T, prog string, args ...string) {
	for attempt := 1; ; attempt++ {
		target, _, done := startTarget(t, prog, args...)
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
