package proc

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// A process that computes gains CPU time; one that sleeps does not.
func TestCPUTicks(t *testing.T) {
	busy := exec.Command("/bin/sh", "-c", "while :; do :; done")
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	defer busy.Process.Kill()
	idle := exec.Command("/bin/sleep", "100")
	if err := idle.Start(); err != nil {
		t.Fatal(err)
	}
	defer idle.Process.Kill()
	time.Sleep(50 * time.Millisecond)
	b0, err := CPUTicks(busy.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	i0, err := CPUTicks(idle.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	b1, _ := CPUTicks(busy.Process.Pid)
	i1, _ := CPUTicks(idle.Process.Pid)
	if b1 <= b0 {
		t.Errorf("a busy loop used no CPU time in 300 ms: %d then %d ticks", b0, b1)
	}
	if i1 != i0 {
		t.Errorf("a sleeping process used CPU time: %d then %d ticks", i0, i1)
	}
	if _, err := CPUTicks(1 << 30); !os.IsNotExist(err) {
		t.Errorf("a missing process: got %v, want a not-exist error", err)
	}
}
