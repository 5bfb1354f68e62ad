package e2e

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// valgrind unmaps the vDSO of the program it runs, and tprec makes its
// calls in the target through a trampoline it writes there: such a process
// cannot be recorded. Attached to, tprec refuses at once; launched, tprec
// records it until the vDSO goes, then says why it stops and detaches. The
// shadows it made must not stay behind alive: one stopped under tprec's
// trace stayed as the target's child while tprec waited for the target to
// end (found by a sweep). They stay as zombies: collecting them is a call
// made in the target, which nothing can make any more.
func TestValgrindWithoutVDSO(t *testing.T) {
	requireRoot(t)
	vg := needTool(t, "valgrind")
	args := []string{"-q", "--tool=none", needTool(t, "sha256sum"), "/dev/zero"}

	t.Run("launched", func(t *testing.T) {
		out := t.TempDir()
		rec := startTprec(t, append([]string{"--output", out, "--", vg}, args...)...)
		pid := 0
		started := regexp.MustCompile(`recording process (\d+) `)
		for deadline := time.Now().Add(30 * time.Second); pid == 0; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("tprec did not start recording:\n%s", rec.quit())
			}
			if m := started.FindStringSubmatch(rec.stderr.String()); m != nil {
				fmt.Sscan(m[1], &pid)
			}
		}
		defer syscall.Kill(pid, syscall.SIGKILL) // tprec waits for it
		said := fmt.Sprintf("process %d unmapped its vDSO, where tprec's calls are made", pid)
		for deadline := time.Now().Add(30 * time.Second); !strings.Contains(rec.stderr.String(), said); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				syscall.Kill(pid, syscall.SIGKILL)
				t.Fatalf("tprec did not say the vDSO went:\n%s", rec.quit())
			}
		}
		rec.waitSaid(t, "detached from process", 10*time.Second)
		if err := syscall.Kill(pid, 0); err != nil {
			t.Fatalf("valgrind did not run on: %v", err)
		}
		for _, c := range childStates(t, pid) {
			if _, state, _ := strings.Cut(c, " "); !strings.HasPrefix(state, "Z") {
				t.Errorf("a child of the target is left %s\n%s", c, rec.stderr)
			}
		}
		syscall.Kill(pid, syscall.SIGKILL)
		rec.wait(t, 30*time.Second)
		if cks := checkpoints(t, out); len(cks) != 0 {
			t.Errorf("checkpoints written: %v", cks)
		}
	})

	t.Run("attached", func(t *testing.T) {
		target, _, done := startTarget(t, vg, args...)
		pid := target.Process.Pid
		for deadline := time.Now().Add(20 * time.Second); hasVDSO(pid); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("valgrind kept its vDSO")
			}
		}
		rec := startTprec(t, "--pid", fmt.Sprint(pid), "--output", t.TempDir())
		if err := rec.wait(t, 30*time.Second); err == nil {
			t.Fatalf("tprec attached to a process without a vDSO:\n%s", rec.stderr)
		}
		if !strings.Contains(rec.stderr.String(), "no [vdso] mapping") {
			t.Errorf("tprec does not say why:\n%s", rec.stderr)
		}
		stillRuns(t, done, "valgrind")
		if c := childStates(t, pid); len(c) != 0 {
			t.Errorf("the target has children: %v", c)
		}
	})
}

// hasVDSO reports whether process pid maps a vDSO.
func hasVDSO(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	return err != nil || strings.Contains(string(b), "[vdso]")
}
