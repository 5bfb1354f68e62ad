package recorder

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// A guardian that ends while tprec records (killed by someone) is replaced,
// and the new one is told the shadows alive, not those reaped; after
// maxGuardianRestarts, tprec says that nothing guards the process any
// more. The guardian here is a shell that copies what tprec tells it into
// a file named after its pid.
func TestGuardianRestarted(t *testing.T) {
	dir := t.TempDir()
	var mu sync.Mutex
	var said []string
	logf := func(f string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		said = append(said, fmt.Sprintf(f, args...))
	}
	lines := func() string {
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(said, "\n")
	}
	g := startGuardian([]string{"/bin/sh", "-c", `exec cat > "` + dir + `/$$"`, "sh"}, 4242, logf)
	if g == nil {
		t.Fatalf("no guardian: %s", lines())
	}
	defer g.finish(true)
	g.made(111)
	g.made(222)
	g.reaped(111)
	current := func() (int, chan struct{}) {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.cmd == nil {
			return 0, nil
		}
		return g.cmd.Process.Pid, g.ended
	}
	told := func(pid int) string {
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if b, err := os.ReadFile(filepath.Join(dir, fmt.Sprint(pid))); err == nil && len(b) > 0 {
				return string(b)
			}
		}
		return ""
	}
	first, ended := current()
	if got := told(first); got != "shadow 111\nshadow 222\nreaped 111\n" {
		t.Fatalf("the first guardian was told %q", got)
	}
	for i := 1; i <= maxGuardianRestarts+1; i++ {
		pid, _ := current()
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-ended
		var next int
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if n, e := current(); n != pid && n != 0 {
				next, ended = n, e
				break
			}
			if strings.Contains(lines(), "nothing puts process 4242's vDSO back") {
				break
			}
		}
		if i > maxGuardianRestarts {
			if next != 0 {
				t.Fatalf("guardian %d started after %d restarts", next, maxGuardianRestarts)
			}
			break
		}
		if next == 0 {
			t.Fatalf("no guardian started after guardian %d ended:\n%s", pid, lines())
		}
		if want := fmt.Sprintf("tprec's guardian (process %d) ended (signal: killed): started another one (process %d)", pid, next); !strings.Contains(lines(), want) {
			t.Fatalf("tprec did not say %q:\n%s", want, lines())
		}
		if got := told(next); got != "shadow 222\n" {
			t.Fatalf("guardian %d was told %q, want the one shadow alive", next, got)
		}
	}
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(lines(), "nothing puts process 4242's vDSO back"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after %d restarts, tprec did not say the process is unguarded:\n%s", maxGuardianRestarts, lines())
		}
	}
}
