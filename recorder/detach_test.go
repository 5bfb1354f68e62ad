package recorder

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/proc"
	"golang.org/x/sys/unix"
)

// detach must leave the target running when tprec already holds it in a
// stop it took (an error between a stop and its resume: a boundary that
// failed with the target stopped for it). It used to interrupt the stopped
// leader and wait for a stop that no interrupt makes: tprec hung, and the
// target stayed in a tracing stop until tprec was killed. Each case takes
// one kind of stop of Debian's sleep(1) and detaches from it.
func TestDetachFromATakenStop(t *testing.T) {
	requireKernel(t)
	cases := map[string]func(pid int) error{
		"event stop": func(pid int) error { return proc.Interrupt(pid) },
		// SIGWINCH, which sleep ignores by default, still stops a tracee
		// at its delivery.
		"signal-delivery stop": func(pid int) error { return unix.Tgkill(pid, pid, unix.SIGWINCH) },
	}
	for name, stop := range cases {
		t.Run(name, func(t *testing.T) {
			sl := exec.Command("/bin/sleep", "100")
			if err := sl.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { sl.Process.Kill(); sl.Wait() }()
			pid := sl.Process.Pid
			tr := proc.NewTracer()
			defer tr.Close()
			s := &session{pid: pid, tr: tr, src: &ptraceSource{}, threads: map[int]*thread{pid: {tid: pid}},
				waiters: newWaiters(), o: Options{Log: io.Discard, Errors: io.Discard}}
			err := tr.Do(func() error {
				if err := proc.Seize(pid, targetOptions); err != nil {
					return err
				}
				if err := stop(pid); err != nil {
					return err
				}
				st, err := proc.Wait(pid)
				if err != nil {
					return err
				}
				if _, ok := proc.StoppedAt(pid); !ok {
					return fmt.Errorf("StoppedAt does not see the stop taken (%v)", st)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- tr.Do(func() error { return s.detach("test") }) }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("detach: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("detach did not return in 10 s; the target: %s", status(pid))
			}
			deadline := time.Now().Add(5 * time.Second)
			for st := status(pid); !strings.Contains(st, "TracerPid:\t0") || !strings.Contains(st, "State:\tS"); st = status(pid) {
				if time.Now().After(deadline) {
					t.Fatalf("the target is still traced or stopped after detach:\n%s", st)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

func status(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	var keep []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "State:") || strings.HasPrefix(l, "TracerPid:") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// TestStartTimeNamesOneProcess checks the identity killStray relies on: a
// process's start time stays the same, another process's differs (a later
// one started at least a clock tick after), and a gone one has none.
func TestStartTimeNamesOneProcess(t *testing.T) {
	me := startTime(os.Getpid())
	if me == "" || startTime(os.Getpid()) != me {
		t.Fatalf("own start time %q, then %q", me, startTime(os.Getpid()))
	}
	time.Sleep(20 * time.Millisecond)
	c := exec.Command("sleep", "10")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	child := startTime(c.Process.Pid)
	c.Process.Kill()
	c.Wait()
	if child == "" || child == me {
		t.Errorf("a child started 20 ms later: start time %q, own %q", child, me)
	}
	if got := startTime(c.Process.Pid); got != "" {
		t.Errorf("a collected child still has a start time: %q", got)
	}
}

// TestResolveFromGoneProcess checks that the final pages of a checkpoint
// whose process is gone (a dump's shadow killed under it) are an error,
// not a file without them.
func TestResolveFromGoneProcess(t *testing.T) {
	c := exec.Command("true")
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	src := &liveSource{pid: c.Process.Pid, store: format.NewMemStore()}
	refs := []format.PageRef{{Addr: 0x10000, Hash: liveHash(0x10000)}, {Addr: 0x11000, Hash: liveHash(0x11000)}}
	if got, err := src.resolve(refs); err == nil {
		t.Fatalf("resolved %d pages of a process that is gone", len(got))
	}
	// Pages that are not read from the process pass as they are.
	stored := []format.PageRef{{Addr: 0x10000, Hash: format.ZeroHash}}
	if got, err := src.resolve(stored); err != nil || len(got) != 1 {
		t.Fatalf("stored pages: %v, %v", got, err)
	}
}
