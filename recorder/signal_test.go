package recorder

import (
	"os"
	"os/exec"
	"os/signal"
	"testing"

	"golang.org/x/sys/unix"
)

func TestIgnoredSignal(t *testing.T) {
	signal.Ignore(unix.SIGUSR2)
	defer signal.Reset(unix.SIGUSR2)
	if !ignoredSignal(os.Getpid(), int(unix.SIGUSR2)) {
		t.Error("SIGUSR2 set to SIG_IGN is not seen as ignored")
	}
	// sleep(1) leaves every disposition at its default: SIGWINCH and
	// SIGCHLD are ignored by default, SIGTERM and SIGUSR1 are not.
	sl := exec.Command("sleep", "10")
	if err := sl.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sl.Process.Kill(); sl.Wait() }()
	for sig, want := range map[unix.Signal]bool{unix.SIGWINCH: true, unix.SIGCHLD: true, unix.SIGTERM: false, unix.SIGUSR1: false} {
		if got := ignoredSignal(sl.Process.Pid, int(sig)); got != want {
			t.Errorf("sleep ignores %v: %v, want %v", sig, got, want)
		}
	}
	if ignoredSignal(999999999, int(unix.SIGUSR2)) {
		t.Error("a missing process ignores nothing")
	}
}
