package proc

import (
	"bytes"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// waitSleeping waits until process pid sits in clock_nanosleep or
// nanosleep, so that a test sees it past its loader (or in restart_syscall:
// its sleep resumed after a stop).
func waitSleeping(tb testing.TB, pid int) {
	tb.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/syscall", pid))
		if f := strings.Fields(string(b)); len(f) > 0 && (f[0] == "230" || f[0] == "35" || f[0] == "219") {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("process %d did not reach its sleep: %q", pid, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startSleeper starts Debian's sleep, killed when the test ends, and waits
// until it sleeps.
func startSleeper(tb testing.TB) int {
	tb.Helper()
	cmd := exec.Command("/bin/sleep", "300")
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitSleeping(tb, cmd.Process.Pid)
	return cmd.Process.Pid
}

// seizeStopped seizes process pid, stops it and opens its memory; it runs
// on the tracer thread.
func seizeStopped(pid int) (*Mem, error) {
	if err := Seize(pid, unix.PTRACE_O_TRACESYSGOOD|unix.PTRACE_O_TRACECLONE); err != nil {
		return nil, err
	}
	if err := Interrupt(pid); err != nil {
		return nil, err
	}
	if _, err := Wait(pid); err != nil {
		return nil, err
	}
	return OpenMem(pid)
}

// placeTrampoline writes a trampoline into the last bytes of the vDSO
// mapping, which are padding after its ELF image on the kernels this runs on
// (the recorder chooses its place with more care: recorder/vdso.go).
func placeTrampoline(pid int, mem *Mem) (*Trampoline, error) {
	maps, err := ReadMaps(pid)
	if err != nil {
		return nil, err
	}
	for _, m := range maps {
		if m.Path != "[vdso]" {
			continue
		}
		at := (m.End - uint64(TrampolineSize())) &^ 15
		old := make([]byte, m.End-at)
		if err := mem.ReadAt(old, at); err != nil {
			return nil, err
		}
		if !bytes.Equal(old, make([]byte, len(old))) {
			return nil, fmt.Errorf("the end of the vDSO at %#x is not padding on this kernel", at)
		}
		tr := NewTrampoline(at)
		return tr, mem.WriteAt(tr.Image(), at)
	}
	return nil, fmt.Errorf("no [vdso] in process %d", pid)
}

// TestTrampolineInject injects a call into Debian's sleep, stopped in its
// clock_nanosleep, and checks the result and that registers and signal mask
// come back unchanged, the sleep still to be restarted by the kernel.
func TestTrampolineInject(t *testing.T) {
	pid := onStoppedSleeper(t, func(pid int, mem *Mem) error {
		tr, err := placeTrampoline(pid, mem)
		if err != nil {
			return err
		}
		before, err := GetRegs(pid)
		if err != nil {
			return err
		}
		if int64(before.Rax) != -516 || before.OrigRax != unix.SYS_CLOCK_NANOSLEEP {
			t.Errorf("sleep stopped with rax %d, orig_rax %d: not in its interrupted clock_nanosleep", int64(before.Rax), before.OrigRax)
		}
		mask, _ := GetSigmask(pid)
		res, err := tr.Inject(mem, pid, Call{Nr: unix.SYS_GETPID})
		if err != nil {
			return err
		}
		if res.Ret != int64(pid) {
			t.Errorf("getpid returned %d, want %d", res.Ret, pid)
		}
		after, _ := GetRegs(pid)
		if after != before {
			t.Errorf("registers changed:\n%+v\n%+v", before, after)
		}
		if m, _ := GetSigmask(pid); m != mask {
			t.Errorf("mask %#x, was %#x", m, mask)
		}
		return nil
	})
	waitSleeping(t, pid)
}

// onStoppedSleeper starts sleep, seizes and stops it on a tracer thread,
// runs body there with its memory open, detaches, and returns its pid.
func onStoppedSleeper(t *testing.T, body func(pid int, mem *Mem) error) int {
	t.Helper()
	pid := startSleeper(t)
	tracer := NewTracer()
	defer tracer.Close()
	err := tracer.Do(func() error {
		mem, err := seizeStopped(pid)
		if err != nil {
			return err
		}
		defer mem.Close()
		if err := body(pid, mem); err != nil {
			return err
		}
		return Detach(pid, 0)
	})
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// The tracer-death test runs the test binary again as the tracer
// (trampolineHelper), so that it can be killed.
const helperEnv = "TPREC_TRAMPOLINE_HELPER"

func TestMain(m *testing.M) {
	if v := os.Getenv(helperEnv); v != "" {
		helper, out, _ := strings.Cut(v, ":")
		run := trampolineHelper
		switch helper {
		case "runout":
			run = runOutHelper
		case "rdfsbase":
			run = func(string) error { return CheckRdfsbase() }
		}
		if err := run(out); err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// hashLoop is the target: Debian's python3 on a sha256 chain, with short
// sleeps, writing the last digest to the file named by its argument.
const hashLoop = `import hashlib, sys, time
h = b''
for i in range(150000):
    h = hashlib.sha256(h).digest()
    if i % 1500 == 0:
        time.sleep(0.0005)
open(sys.argv[1] + '.tmp', 'w').write(h.hex())
import os
os.rename(sys.argv[1] + '.tmp', sys.argv[1])
`

// trampolineHelper starts the target, prints its pid and injects calls into
// it without end, as the recorder does at its boundaries: a clone (a shadow,
// killed at once, then reaped by an injected wait4) and a few getpid, the
// target running a little in between. The test kills it at a random moment.
func trampolineHelper(out string) error {
	pid, err := tracedPython(hashLoop, out)
	if err != nil {
		return err
	}
	time.Sleep(50 * time.Millisecond)
	mem, err := OpenMem(pid)
	if err != nil {
		return err
	}
	var tr *Trampoline
	for {
		st, err := stopTarget(pid)
		if err != nil || st.Exited() {
			return err
		}
		if sig := st.Signal(); sig != 0 {
			if err := Resume(unix.PTRACE_CONT, pid, sig); err != nil {
				return err
			}
			continue
		}
		if tr == nil {
			if tr, err = placeTrampoline(pid, mem); err != nil {
				return err
			}
		}
		res, err := tr.Inject(mem, pid, Call{Nr: unix.SYS_CLONE, Args: []uint64{unix.CLONE_FILES, 0x1000}, Clone: true})
		if err != nil {
			return err
		}
		if res.Child > 0 {
			if _, err := Wait(res.Child); err != nil {
				return err
			}
			if err := SetOptions(res.Child, unix.PTRACE_O_EXITKILL); err != nil {
				return err
			}
			unix.Kill(res.Child, unix.SIGKILL)
			for {
				st, err := Wait(res.Child)
				if err != nil || st.Exited() {
					break
				}
			}
			if _, err := tr.Inject(mem, pid, Call{Nr: unix.SYS_WAIT4, Args: []uint64{uint64(res.Child), 0, unix.WNOHANG | unix.WALL}}); err != nil {
				return err
			}
		}
		for range 3 {
			if _, err := tr.Inject(mem, pid, Call{Nr: unix.SYS_GETPID}); err != nil {
				return err
			}
		}
		if err := Resume(unix.PTRACE_CONT, pid, 0); err != nil {
			return err
		}
		time.Sleep(time.Duration(rand.Intn(300)) * time.Microsecond)
	}
}

// stopTarget interrupts the helpers' target and waits for its stop.
func stopTarget(pid int) (Stop, error) {
	if err := Interrupt(pid); err != nil {
		return Stop{}, err
	}
	return Wait(pid)
}

// tracedPython starts Debian's python3 on script with argument out, seizes
// it from this thread (locked to it) and prints its pid, for the test.
func tracedPython(script, out string) (int, error) {
	runtime.LockOSThread()
	cmd := exec.Command("/usr/bin/python3", "-S", "-c", script, out)
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	pid := cmd.Process.Pid
	if err := Seize(pid, unix.PTRACE_O_TRACESYSGOOD|unix.PTRACE_O_TRACECLONE); err != nil {
		return 0, err
	}
	fmt.Println(pid)
	return pid, nil
}

// TestTrampolineSurvivesTracerDeath kills the tracer (SIGKILL, nothing of it
// runs after) at random moments while it injects calls back to back into
// python3, and checks each time that the target finishes with the digest an
// untraced run computes, and that no child the injected clones made is left
// running. Single-stepped injections (proc.Inject) fail this in a few runs
// of twenty: the target dies of SIGTRAP.
func TestTrampolineSurvivesTracerDeath(t *testing.T) {
	survivesTracerDeath(t, "trampoline", hashLoop)
}

// survivesTracerDeath runs helper (the test binary again, as a tracer of
// python3 running script) twenty times, kills it at a random moment, and
// requires that python3 finish with the digest an untraced run computes.
func survivesTracerDeath(t *testing.T, helperName, script string) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs Debian's python3, which .ci/run installs")
		}
		t.Skip("needs Debian's python3")
	}
	dir := t.TempDir()
	ref := filepath.Join(dir, "ref")
	if b, err := exec.Command("/usr/bin/python3", "-S", "-c", script, ref).CombinedOutput(); err != nil {
		t.Fatalf("untraced run: %v\n%s", err, b)
	}
	want, _ := os.ReadFile(ref)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for run := range 20 {
		out := filepath.Join(dir, strconv.Itoa(run))
		helper := exec.Command(self)
		helper.Env = append(os.Environ(), helperEnv+"="+helperName+":"+out)
		var stdout, stderr bytes.Buffer
		helper.Stdout, helper.Stderr = &stdout, &stderr
		if err := helper.Start(); err != nil {
			t.Fatal(err)
		}
		var pid int
		for deadline := time.Now().Add(5 * time.Second); pid == 0; time.Sleep(time.Millisecond) {
			pid, _ = strconv.Atoi(strings.TrimSpace(stdout.String()))
			if time.Now().After(deadline) {
				helper.Process.Kill()
				helper.Wait()
				t.Fatalf("run %d: the helper gave no pid: %s", run, stderr.String())
			}
		}
		time.Sleep(time.Duration(20+rand.Intn(200)) * time.Millisecond)
		helper.Process.Kill()
		helper.Wait()
		if strings.Contains(stderr.String(), "helper:") {
			t.Fatalf("run %d: the helper failed before it was killed: %s", run, stderr.String())
		}
		// A child the tracer had not yet set PTRACE_O_EXITKILL on runs
		// on alone into its bad stack and dies of SIGSEGV: on a busy
		// machine that took more than the 20 ms this once waited.
		var left []int
		for wait := time.Now().Add(2 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if left = liveChildren(pid); len(left) == 0 || time.Now().After(wait) {
				break
			}
		}
		if len(left) > 0 {
			t.Errorf("run %d: children of the target still running 2 s after the tracer died: %v (state %s)", run, left, procState(left[0]))
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			got, err := os.ReadFile(out)
			if err == nil {
				if !bytes.Equal(got, want) {
					t.Fatalf("run %d: digest %s, an untraced run computed %s", run, got, want)
				}
				break
			}
			if _, serr := os.Stat(fmt.Sprintf("/proc/%d", pid)); serr != nil || procState(pid) == "Z" {
				t.Fatalf("run %d: python3 (pid %d) ended without writing its digest: killed by the tracer's death", run, pid)
			}
			if time.Now().After(deadline) {
				t.Fatalf("run %d: python3 (pid %d) did not finish (state %s)", run, pid, procState(pid))
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// procState is the state letter of process pid, "" when it is gone.
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2 : i+3]
	}
	return ""
}

// liveChildren lists the children of pid that are not zombies.
func liveChildren(pid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c))
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+2:])
		if len(f) > 1 && f[1] == strconv.Itoa(pid) && f[0] != "Z" && f[0] != "X" {
			out = append(out, c)
		}
	}
	return out
}

// BenchmarkInjectGetpid compares one injected getpid through the trampoline
// (three stops: the call's entry and exit, and the trap after it) with the
// single-stepped injection (one stop) it replaced for the target.
func BenchmarkInjectGetpid(b *testing.B) {
	pid := startSleeper(b)
	tracer := NewTracer()
	defer tracer.Close()
	var mem *Mem
	var tr *Trampoline
	err := tracer.Do(func() error {
		var err error
		if mem, err = seizeStopped(pid); err != nil {
			return err
		}
		tr, err = placeTrampoline(pid, mem)
		return err
	})
	if err != nil {
		if os.Getenv("CI") == "true" {
			b.Fatalf("cannot trace: %v (CI runs as root)", err)
		}
		b.Skipf("cannot trace: %v", err)
	}
	b.Run("trampoline", func(b *testing.B) {
		tracer.Do(func() error {
			for b.Loop() {
				if _, err := tr.Inject(mem, pid, Call{Nr: unix.SYS_GETPID}); err != nil {
					b.Fatal(err)
				}
			}
			return nil
		})
	})
	b.Run("single-step", func(b *testing.B) {
		tracer.Do(func() error {
			for b.Loop() {
				if _, err := Inject(pid, tr.t2-2, unix.SYS_GETPID); err != nil {
					b.Fatal(err)
				}
			}
			return nil
		})
	})
}
