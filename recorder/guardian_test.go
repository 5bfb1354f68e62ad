package recorder

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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

// returnsUnsafe, on this process's vDSO with clock_gettime's entry patched
// as the recorder patches it: a return to the entry is safe (the original
// function runs from its start), to the stub's syscall or ret, or just past
// the stub, is not; far from the stub, it is.
func TestReturnsUnsafe(t *testing.T) {
	orig, err := ownVDSO()
	if err != nil {
		t.Fatal(err)
	}
	syms, err := vdsoSymbols(orig)
	if err != nil {
		t.Fatal(err)
	}
	entry := -1
	for _, s := range syms {
		if s.Name == "__vdso_clock_gettime" {
			entry = int(s.Off)
		}
	}
	if entry < 0 {
		t.Fatal("no __vdso_clock_gettime in this vDSO")
	}
	cur := append([]byte(nil), orig...)
	copy(cur[entry:], vdsoStub(unix.SYS_CLOCK_GETTIME).code)
	bad := returnsUnsafe(cur, orig)
	for off, want := range map[int]bool{0: false, 5: true, 7: true, 8: true, 20: true, 200: false} {
		if bad[entry+off] != want {
			t.Errorf("a return to clock_gettime+%d: unsafe %v, want %v", off, bad[entry+off], want)
		}
	}
	if slices.Contains(returnsUnsafe(orig, orig), true) {
		t.Errorf("an unpatched vDSO has unsafe returns")
	}
}
