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
	t.Run("heap", func(t *testing.T) {
		endInsideRepString(t, func() string {
			target, _, done := startTarget(t, prog)
			return attachAndCrash(t, target, done, time.Second)
		})
	})
	t.Run("mapped", func(t *testing.T) {
		endInsideRepString(t, func() string {
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
			return rec.oneCheckpoint(t, dir)
		})
	})
}

// endInsideRepString crashes a copying program (crash, which returns the
// checkpoint) until the end falls inside its copy, up to 3 times: the
// signal may land between two copies (a few instructions, or a map and an
// unmap, against the copy's milliseconds). The trial must have verified,
// and tpreplay must find the end inside the instruction.
func endInsideRepString(t *testing.T, crash func() string) {
	for attempt := 1; ; attempt++ {
		ck := crash()
		if note := pageSetNote(t, ck); !strings.HasPrefix(note, "pages touched by a trial replay") {
			t.Fatalf("the trial replay failed: %s", note)
		}
		out := replay(t, ck, "-v")
		if strings.Contains(out, "inside a rep string instruction") {
			return
		}
		if attempt == 3 {
			t.Fatalf("in 3 attempts the end never fell inside the copy:\n%s", out)
		}
	}
}
