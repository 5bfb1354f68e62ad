package proc

import (
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"
)

func sigchld(t *testing.T) kernelSigaction {
	a, err := sigchldAction(nil)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// QuietStops adds SA_NOCLDSTOP to the runtime's SIGCHLD action and nothing
// else, and a child's stop and exit still reach wait4.
func TestQuietStops(t *testing.T) {
	before := sigchld(t)
	if err := QuietStops(); err != nil {
		t.Fatal(err)
	}
	after := sigchld(t)
	if after.flags != before.flags|saNoCldStop || after.handler != before.handler || after.restorer != before.restorer || after.mask != before.mask {
		t.Fatalf("SIGCHLD action %+v, was %+v: want SA_NOCLDSTOP added, nothing else", after, before)
	}
	if err := QuietStops(); err != nil || sigchld(t) != after {
		t.Fatalf("a second call changed the action or failed: %v", err)
	}

	cmd := exec.Command("/bin/sh", "-c", "kill -STOP $$; exit 7")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var ws unix.WaitStatus
	if _, err := unix.Wait4(cmd.Process.Pid, &ws, unix.WUNTRACED, nil); err != nil || !ws.Stopped() || ws.StopSignal() != unix.SIGSTOP {
		t.Fatalf("the child's stop: %v, status %v", err, ws)
	}
	if err := unix.Kill(cmd.Process.Pid, unix.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Wait4(cmd.Process.Pid, &ws, 0, nil); err != nil || !ws.Exited() || ws.ExitStatus() != 7 {
		t.Fatalf("the child's exit: %v, status %v", err, ws)
	}
}
