package proc

import (
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// RunOut takes a thread out of a range by letting it run: Debian's sleep,
// made to run `mov eax, SYS_getpid; syscall; jmp +0` placed in its vDSO's
// padding and then spin on `jmp $` right after, is stopped on the spin, with
// getpid's result in rax.
func TestRunOutLeavesRange(t *testing.T) {
	code := []byte{0xb8, unix.SYS_GETPID, 0, 0, 0, 0x0f, 0x05, 0xeb, 0x00, 0xeb, 0xfe}
	onPaddingCode(t, code, func(pid int, at uint64) error {
		spin := at + uint64(len(code)) - 2
		others := 0
		out, _, err := RunOut(pid, func(rip uint64) bool { return rip >= at && rip < spin }, 10, 0, func(Stop) (RunOn, error) {
			others++
			return RunOn{Stay: true}, nil
		})
		if err != nil || !out {
			return fmt.Errorf("run out: %v, %v (%d other stops)", out, err, others)
		}
		after, err := GetRegs(pid)
		if err != nil {
			return err
		}
		if after.Rip != spin || int64(after.Rax) != int64(pid) {
			t.Errorf("after the run: rip %#x rax %d; want rip %#x, rax %d (getpid)", after.Rip, int64(after.Rax), spin, pid)
		}
		if after.Eflags&trapFlag != 0 || after.R11&trapFlag != 0 {
			t.Errorf("the trap flag is set: flags %#x r11 %#x", after.Eflags, after.R11)
		}
		return nil
	})
}

// signalLoop is hashLoop with a SIGUSR1 handler that counts, for the
// run-out helper to send signals to.
const signalLoop = `import signal
n = 0
def on(sig, frame):
    global n
    n += 1
signal.signal(signal.SIGUSR1, on)
` + hashLoop

// runOutHelper starts python3 on signalLoop, prints its pid, and without
// end: stops it, lets it run out of a range that holds it for three rounds
// (RunOut, which holds back the signals that come meanwhile), sends it
// SIGUSR1 and delivers the signals into their handler (SendAgain for those
// held back, DeliverStopped), the target running a little in between. The test kills
// it at a random moment.
func runOutHelper(out string) error {
	pid, err := tracedPython(signalLoop, out)
	if err != nil {
		return err
	}
	caught := false
	deliver := func(sig int) error {
		st, err := DeliverStopped(pid, sig)
		if err != nil || st.Exited() {
			return err
		}
		if st.Event() != unix.PTRACE_EVENT_STOP {
			return fmt.Errorf("after delivering signal %d: %v", sig, st)
		}
		return nil
	}
	for {
		st, err := stopTarget(pid)
		if err != nil || st.Exited() {
			return err
		}
		if sig := st.Signal(); sig != 0 {
			if err := deliver(sig); err != nil {
				return err
			}
		} else {
			rounds := 0
			_, held, err := RunOut(pid, func(uint64) bool { rounds++; return rounds <= 3 }, 10, 0, func(st Stop) (RunOn, error) {
				if st.Signal() != 0 {
					return RunOn{Hold: true}, nil
				}
				return RunOn{Stay: true}, nil
			})
			if err != nil {
				return err
			}
			for _, h := range held {
				if _, err := SendAgain(pid, pid, h, nil); err != nil {
					return err
				}
				if err := deliver(h.Signo); err != nil {
					return err
				}
			}
		}
		if !caught {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
			caught = sigCaught(string(b), unix.SIGUSR1)
		}
		if caught {
			unix.Tgkill(pid, pid, unix.SIGUSR1)
		}
		if err := Resume(unix.PTRACE_CONT, pid, 0); err != nil {
			return err
		}
		time.Sleep(time.Duration(rand.Intn(300)) * time.Microsecond)
	}
}

// sigCaught reports whether a /proc/PID/status text shows a handler for sig.
func sigCaught(status string, sig unix.Signal) bool {
	for _, l := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(l, "SigCgt:"); ok {
			m, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && m&(1<<(sig-1)) != 0
		}
	}
	return false
}

// TestRunOutSurvivesTracerDeath kills a tracer that runs python3 out of
// ranges and delivers its signals into their handler back to back, at
// random moments: python3 must finish with the digest an untraced run
// computes. Single steps in their place (what the recorder once did) fail
// this: the target dies of the step's SIGTRAP.
func TestRunOutSurvivesTracerDeath(t *testing.T) {
	survivesTracerDeath(t, "runout", signalLoop)
}
