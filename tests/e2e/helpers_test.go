// Package e2e runs the built tools against real programs: record with tprec,
// replay with tpreplay, look inside with tpinspect.
package e2e

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// requireRoot skips on a developer's machine without privilege, and fails in
// CI, where every kernel-dependent test must run.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("this test needs root (ptrace of unrelated processes, page frame numbers) and CI runs as root")
	}
	t.Skip("needs root: ptrace of unrelated processes and page frame numbers in /proc/PID/pagemap")
}

// TestMain removes the directory the tools were built into (tools).
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// tools builds tprec, tpreplay and tpinspect once per test binary, into a
// directory TestMain removes.
func tools(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "tprec-e2e-bin")
		if buildErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", binDir+"/", "../../tools/tprec", "../../tools/tpreplay", "../../tools/tpinspect")
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("build tools: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

// cc compiles a C program from testdata (or examples) into dir.
func cc(t *testing.T, src, dir string) string {
	t.Helper()
	out := filepath.Join(dir, strings.TrimSuffix(filepath.Base(src), ".c"))
	if b, err := exec.Command("gcc", "-g", "-O1", "-o", out, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc %s: %v\n%s", src, err, b)
	}
	return out
}

// recording is a tprec run in the background.
type recording struct {
	cmd    *exec.Cmd
	stderr *output
	done   chan error
}

func startTprec(t *testing.T, args ...string) *recording {
	t.Helper()
	bin := tools(t)
	r := &recording{stderr: &output{}, done: make(chan error, 1)}
	r.cmd = exec.Command(filepath.Join(bin, "tprec"), args...)
	r.cmd.Stderr = r.stderr
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.done <- r.cmd.Wait() }()
	t.Cleanup(func() {
		if r.cmd.ProcessState == nil {
			r.cmd.Process.Kill()
			<-r.done
		}
	})
	return r
}

// wait waits for tprec to exit and returns its error.
func (r *recording) wait(t *testing.T, timeout time.Duration) error {
	t.Helper()
	select {
	case err := <-r.done:
		return err
	case <-time.After(timeout):
		r.cmd.Process.Kill()
		t.Fatalf("tprec did not exit within %v; stderr:\n%s", timeout, r.stderr)
		return nil
	}
}

// quit ends a tprec that seems stuck with SIGQUIT, which makes the Go
// runtime print every goroutine, and returns its stderr.
func (r *recording) quit() string {
	r.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-r.done:
	case <-time.After(5 * time.Second):
		r.cmd.Process.Kill()
		<-r.done
	}
	return r.stderr.String()
}

// threadStates describes the threads of process pid: state, where each
// waits in the kernel, and its tracer.
func threadStates(pid int) string {
	var b strings.Builder
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, e := range ents {
		dir := fmt.Sprintf("/proc/%d/task/%s/", pid, e.Name())
		comm, _ := os.ReadFile(dir + "comm")
		wchan, _ := os.ReadFile(dir + "wchan")
		status, _ := os.ReadFile(dir + "status")
		var state, tracer string
		for _, l := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(l, "State:"); ok {
				state = strings.TrimSpace(v)
			}
			if v, ok := strings.CutPrefix(l, "TracerPid:"); ok {
				tracer = strings.TrimSpace(v)
			}
		}
		fmt.Fprintf(&b, "  %s %s: %s, wchan %s, tracer %s\n", e.Name(), strings.TrimSpace(string(comm)), state, wchan, tracer)
	}
	return b.String()
}

// sendEvery sends process pid a signal every period, sigs in turn, until
// the function it returns is called, which says how many were sent.
func sendEvery(pid int, period time.Duration, sigs ...unix.Signal) func() int {
	stop := make(chan struct{})
	sent := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				sent <- n
				return
			case <-time.After(period):
				if unix.Kill(pid, sigs[n%len(sigs)]) == nil {
					n++
				}
			}
		}
	}()
	return func() int {
		close(stop)
		return <-sent
	}
}

// waitRecording waits until tprec says it is recording.
func (r *recording) waitRecording(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if strings.Contains(r.stderr.String(), "recording process") {
			return
		}
		select {
		case err := <-r.done:
			r.done <- err // for wait; the stderr is complete once tprec is done
			if strings.Contains(r.stderr.String(), "recording process") {
				return
			}
			t.Fatalf("tprec exited before it started recording (%v); stderr:\n%s", err, r.stderr)
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("tprec did not start recording; stderr:\n%s", r.stderr)
}

// waitSaid waits up to limit for tprec to write what on its stderr, and
// ends the test, with tprec ended and its stderr shown, if it does not.
// Meanwhile it calls each look, every few milliseconds.
func (r *recording) waitSaid(t *testing.T, what string, limit time.Duration, look ...func()) {
	t.Helper()
	if !r.saidWithin(what, limit, look...) {
		t.Fatalf("tprec did not say %q within %v:\n%s", what, limit, r.quit())
	}
}

// saidWithin waits up to limit for tprec to write what on its stderr and
// reports whether it did. Meanwhile it calls each look, every few
// milliseconds.
func (r *recording) saidWithin(what string, limit time.Duration, look ...func()) bool {
	for deadline := time.Now().Add(limit); !strings.Contains(r.stderr.String(), what); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
		for _, f := range look {
			f()
		}
	}
	return true
}

// checkpoints lists the checkpoint files in dir.
func checkpoints(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "tp-*.tpc"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

var verifiedRe = regexp.MustCompile(`verified: (\d+) syscalls, (\d+) intervals, (?:(\d+) threads, )?(end state|the state at the start of interval \d+) matches \(rip=0x[0-9a-f]+.*\)`)

// replay runs tpreplay on a checkpoint and requires the verified line.
func replay(t *testing.T, ckpt string, extra ...string) string {
	t.Helper()
	bin := tools(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	args := append(append([]string{}, extra...), ckpt)
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "tpreplay"), args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		keepFailed(t, ckpt)
		t.Fatalf("tpreplay %s: %v\n%s", strings.Join(args, " "), err, clip(out))
	}
	if !verifiedRe.Match(out) {
		t.Fatalf("tpreplay did not verify:\n%s", clip(out))
	}
	t.Logf("tpreplay: %s", clip(bytes.TrimSpace(out)))
	return string(out)
}

// clip shortens a tool's output for the test log to its first and last
// 16 KiB: tpreplay -v writes a line per call, a million of them for some
// windows.
func clip(out []byte) string {
	const keep = 16 << 10
	if len(out) <= 2*keep {
		return string(out)
	}
	return fmt.Sprintf("%s\n[... %d bytes left out ...]\n%s", out[:keep], len(out)-2*keep, out[len(out)-keep:])
}

// startTarget starts a program to be attached to later. Its stdout goes to
// the returned buffer.
func startTarget(t *testing.T, name string, args ...string) (*exec.Cmd, *output, chan error) {
	t.Helper()
	return startTargetErr(t, os.Stderr, name, args...)
}

// startTargetErr is startTarget with the program's stderr into stderr.
func startTargetErr(t *testing.T, stderr io.Writer, name string, args ...string) (*exec.Cmd, *output, chan error) {
	t.Helper()
	cmd := exec.Command(name, args...)
	var out output
	cmd.Stdout = &out
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-done
		}
	})
	return cmd, &out, done
}

// output collects what a program writes while a test reads it: exec copies
// the program's pipe into it from a goroutine of its own.
type output struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.Write(p)
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

// readyWait is how long a program may take to print "ready".
const readyWait = 30 * time.Second

// waitReady waits until the program printed "ready" to out, and fails the
// test when it has not within readyWait.
func waitReady(t *testing.T, out *output) {
	t.Helper()
	deadline := time.Now().Add(readyWait)
	for !strings.Contains(out.String(), "ready") {
		if time.Now().After(deadline) {
			t.Fatalf("the program did not print ready within %v; it printed:\n%s", readyWait, out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// attachAndCrash attaches tprec to a running program, waits, sends SIGSEGV
// from outside, and returns the checkpoint tprec wrote.
func attachAndCrash(t *testing.T, target *exec.Cmd, done chan error, after time.Duration, extra ...string) string {
	t.Helper()
	ck, _ := crashWith(t, target, done, after, func(pid int) error { return syscall.Kill(pid, syscall.SIGSEGV) }, extra...)
	return ck
}

// crashWith attaches tprec to a running program, waits, crashes it with
// send (a SIGSEGV to the process or to one thread), requires that it die of
// SIGSEGV and that tprec write one checkpoint, and returns that checkpoint
// and tprec's stderr.
func crashWith(t *testing.T, target *exec.Cmd, done chan error, after time.Duration, send func(pid int) error, extra ...string) (string, string) {
	t.Helper()
	return crashWithin(t, target, done, after, send, 60*time.Second, extra...)
}

// crashWithin is crashWith for a dump that may take up to limit: one whose
// trial replay may spend its whole budget (twice replayer.DefaultTimeout,
// twice that again without debug registers) and then write every page.
func crashWithin(t *testing.T, target *exec.Cmd, done chan error, after time.Duration, send func(pid int) error, limit time.Duration, extra ...string) (string, string) {
	t.Helper()
	dir := t.TempDir()
	pid := target.Process.Pid
	rec := startTprec(t, append([]string{"--pid", fmt.Sprint(pid), "--output", dir}, extra...)...)
	rec.waitRecording(t)
	time.Sleep(after)
	if err := send(pid); err != nil {
		t.Fatalf("send SIGSEGV: %v (the program ended too early?)", err)
	}
	diesOfSIGSEGV(t, done, func() string {
		return fmt.Sprintf("its threads:\n%s\ntprec stderr (with its goroutines):\n%s", threadStates(pid), rec.quit())
	})
	return rec.oneCheckpointWithin(t, dir, limit), rec.stderr.String()
}

// diesOfSIGSEGV requires that the target whose end done reports die of
// SIGSEGV within 30 s; hung says what to show if it does not end.
func diesOfSIGSEGV(t *testing.T, done chan error, hung func() string) {
	t.Helper()
	diesOf(t, done, syscall.SIGSEGV, 30*time.Second, hung)
}

// diesOf requires that the target whose end done reports die of sig within
// limit; hung says what to show if it does not end.
func diesOf(t *testing.T, done chan error, sig syscall.Signal, limit time.Duration, hung func() string) {
	t.Helper()
	select {
	case err := <-done:
		ee, ok := err.(*exec.ExitError)
		if !ok || !ee.Sys().(syscall.WaitStatus).Signaled() || ee.Sys().(syscall.WaitStatus).Signal() != sig {
			t.Fatalf("target did not die of %v: %v", sig, err)
		}
	case <-time.After(limit):
		t.Fatalf("target did not die; %s", hung())
	}
}

// oneCheckpoint waits for tprec to end and requires that it wrote one
// checkpoint into dir, which it returns.
func (r *recording) oneCheckpoint(t *testing.T, dir string) string {
	t.Helper()
	return r.oneCheckpointWithin(t, dir, 60*time.Second)
}

// oneCheckpointWithin is oneCheckpoint for a tprec that may take up to
// limit to end.
func (r *recording) oneCheckpointWithin(t *testing.T, dir string, limit time.Duration) string {
	t.Helper()
	if err := r.wait(t, limit); err != nil {
		t.Fatalf("tprec: %v\n%s", err, r.stderr)
	}
	t.Logf("tprec:\n%s", r.stderr)
	cks := checkpoints(t, dir)
	if len(cks) != 1 {
		t.Fatalf("want one checkpoint, got %v\n%s", cks, r.stderr)
	}
	return cks[0]
}

// pythonScript writes a python3 program into a temporary file and returns
// its path.
func pythonScript(t *testing.T, name, src string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// keepFailed copies a checkpoint that did not replay to $TPREC_KEEP_FAILED
// (default /tmp/tprec-failed), so that it can be examined after the test.
func keepFailed(t *testing.T, ckpt string) {
	dir := os.Getenv("TPREC_KEEP_FAILED")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "tprec-failed")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return
	}
	dst := filepath.Join(dir, t.Name()[strings.LastIndex(t.Name(), "/")+1:]+"-"+filepath.Base(ckpt))
	if b, err := os.ReadFile(ckpt); err == nil && os.WriteFile(dst, b, 0o600) == nil {
		t.Logf("kept the checkpoint as %s", dst)
	}
}

// oneCheckpoint waits up to timeout for tprec to exit and returns the one
// checkpoint it wrote into dir.
func oneCheckpoint(t *testing.T, rec *recording, dir string, timeout time.Duration) string {
	t.Helper()
	if err := rec.wait(t, timeout); err != nil {
		t.Fatalf("tprec: %v\n%s", err, rec.stderr)
	}
	cks := checkpoints(t, dir)
	if len(cks) != 1 {
		t.Fatalf("want one checkpoint, got %v\n%s", cks, rec.stderr)
	}
	return cks[0]
}

// recordMinimized runs prog with args under tprec --backend backend until it
// ends, and returns its one checkpoint and tprec's log. The checkpoint must
// hold the pages a trial replay touched: a trial that failed fails the test.
func recordMinimized(t *testing.T, backend, prog string, args ...string) (string, string) {
	t.Helper()
	return recordMinimizedWith(t, nil, backend, prog, args...)
}

// recordMinimizedWith is recordMinimized with more tprec flags.
func recordMinimizedWith(t *testing.T, flags []string, backend, prog string, args ...string) (string, string) {
	t.Helper()
	dir := t.TempDir()
	rec := startTprec(t, append(append(append([]string{"--backend", backend, "-o", dir}, flags...), "--", prog), args...)...)
	ck := oneCheckpoint(t, rec, dir, 120*time.Second)
	log := rec.stderr.String()
	wantMinimized(t, ck, log)
	return ck, log
}

// wantMinimized fails the test, keeping checkpoint ck, unless tprec's log
// says a trial replay minimized it.
func wantMinimized(t *testing.T, ck, log string) {
	t.Helper()
	if strings.Contains(log, "trial replay failed") || !strings.Contains(log, "touched pages (") {
		keepFailed(t, ck)
		t.Fatalf("want a checkpoint minimized by a trial replay that succeeded:\n%s", log)
	}
}

// crashRecorded sends SIGSEGV to the process tprec says it records, whose
// executable is exe (any, when empty), and returns the one checkpoint tprec
// then writes into dir and tprec's log.
func crashRecorded(t *testing.T, rec *recording, exe, dir string) (string, string) {
	t.Helper()
	pat := `recording process (\d+) \(`
	if exe != "" {
		pat += regexp.QuoteMeta(exe) + `\)`
	}
	m := regexp.MustCompile(pat).FindStringSubmatch(rec.stderr.String())
	if m == nil {
		t.Fatalf("tprec does not record %s:\n%s", cmp.Or(exe, "a process"), rec.stderr)
	}
	pid, _ := strconv.Atoi(m[1])
	if err := syscall.Kill(pid, syscall.SIGSEGV); err != nil {
		t.Fatal(err)
	}
	ck := oneCheckpoint(t, rec, dir, 180*time.Second)
	return ck, rec.stderr.String()
}

// recordOne runs tprec with args (which write into dir) until it exits and
// returns the one checkpoint it wrote there.
func recordOne(t *testing.T, dir string, args ...string) string {
	t.Helper()
	return oneCheckpoint(t, startTprec(t, args...), dir, 120*time.Second)
}

// replayEndsAtFault replays ck and requires it to end at the SIGSEGV whose
// instruction tprec's log names.
func replayEndsAtFault(t *testing.T, ck, log string) {
	t.Helper()
	m := regexp.MustCompile(`received SIGSEGV at rip (0x[0-9a-f]+)`).FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("tprec does not name the faulting instruction:\n%s", log)
	}
	out := replay(t, ck)
	if !strings.Contains(out, "rip="+m[1]) || !strings.Contains(out, "signal SIGSEGV") {
		t.Fatalf("replay does not end at the fault at %s:\n%s", m[1], out)
	}
}

// replayableToCrash requires that tprec's log not say problem, that the
// last interval of ck be replayable, and that ck replay to a SIGSEGV.
func replayableToCrash(t *testing.T, ck, log, problem string) {
	t.Helper()
	if strings.Contains(log, problem) {
		t.Errorf("tprec said %q:\n%s", problem, log)
	}
	ivs := intervalsIn(t, ck)
	if last := ivs[len(ivs)-1]; !last.Replayable {
		t.Errorf("the last interval is not replayable: %s", last.Reason)
	}
	if out := replay(t, ck); !strings.Contains(out, "signal SIGSEGV") {
		t.Fatalf("replay does not end at the crash:\n%s", out)
	}
}

// startHogs keeps n CPU hogs (sha256sum reading /dev/zero) running until
// the test ends.
func startHogs(t *testing.T, n int) {
	t.Helper()
	sum := needTool(t, "sha256sum")
	for range n {
		hog := exec.Command(sum, "/dev/zero")
		if err := hog.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			hog.Process.Kill()
			hog.Wait()
		})
	}
}

// childStates lists each child of every thread of pid, "PID STATE".
func childStates(t *testing.T, pid int) []string {
	t.Helper()
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	if err != nil {
		t.Fatal(err)
	}
	var states []string
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, c := range strings.Fields(string(b)) {
			st, _ := os.ReadFile("/proc/" + c + "/status")
			for _, l := range strings.Split(string(st), "\n") {
				if v, ok := strings.CutPrefix(l, "State:"); ok {
					states = append(states, c+" "+strings.TrimSpace(v))
				}
			}
		}
	}
	return states
}
