package e2e

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Real programs that crash themselves, as the servers users are called for
// do, rather than being sent a signal from outside: the checkpoint ends at
// the faulting instruction, and the replay reaches it with the same signal.

// redis-server under load, told to crash by DEBUG SEGFAULT: it writes to a
// read-only page it mapped, its SIGSEGV handler writes the bug report (a
// backtrace, the clients, a dump of the code around the fault), then raises
// SIGSEGV again to die. The checkpoint is of the first fault, in
// debugCommand; the second signal writes none. The report's memory test is
// turned off (crash-memcheck-enabled no): it reads every anonymous mapping
// while the background threads may unmap some, and recorded, hence slower,
// it faulted on one in about one run in four (never in six runs without
// tprec), a second crash of the handler's own. That was tprec's doing:
// the test writes patterns over the thread's own rseq area, and a thread
// stopped or preempted then is killed by the kernel on its way back.
// Since tprec leaves a crashed process alone while its handler may run
// (crashQuiet, cpuYield, no dump shadow), the sweep's scenario (an
// append-only file, a background save, the memory test on) cut the report
// off in 1 of about 20 runs instead of 3 of 8, by hand and in CI; not
// never, so this test keeps the memory test off.
func TestRedisDebugSegfault(t *testing.T) {
	requireRoot(t)
	cli := needTool(t, "redis-cli")
	forBackends(t, func(t *testing.T, backend string) {
		port := map[string]string{"ebpf": "6441", "ptrace": "6442"}[backend]
		target, log, done := redisUnderLoadLog(t, nil, port, "--enable-debug-command", "yes", "--crash-memcheck-enabled", "no")
		ck, stderr := crashWith(t, target, done, 2*time.Second, func(int) error {
			// The server dies before it answers: the error is the point.
			exec.Command(cli, "-p", port, "debug", "segfault").Run()
			return nil
		}, "--backend", backend)
		// One checkpoint (crashWith requires it), of the first fault: the
		// handler's own SIGSEGV writes none, whether tprec saw the handler
		// run (it says so) or the process died before its next stop.
		if n := strings.Count(stderr, "writing checkpoint"); n != 1 {
			t.Errorf("tprec started %d checkpoints, want the first fault's only:\n%s", n, stderr)
		}
		// The handler (installed with SA_RESETHAND) wrote its whole
		// report, as without tprec.
		if !strings.Contains(log.String(), "REDIS BUG REPORT END") {
			t.Errorf("redis-server's crash report did not reach its end; its log:\n%s", log.String())
		}
		out := replay(t, ck)
		if !strings.Contains(out, "in debugCommand") || !strings.Contains(out, "signal SIGSEGV") {
			t.Fatalf("replay does not end at the fault in debugCommand:\n%s", out)
		}
	})
}

// python3 dereferencing NULL through ctypes in the middle of a loop that
// reads a file and the clock: the fault is in libc's strlen (its symbol is
// not exported, so the test compares addresses), and nothing sends a
// signal from outside.
const ctypesCrashScript = `
import ctypes, os, sys, time
d = sys.argv[1]
path = os.path.join(d, "input.txt")
with open(path, "w") as f:
    f.write("a line of input\n" * 200)
print("ready", flush=True)
n = 0
while not os.path.exists(os.path.join(d, "crash-now")):
    with open(path) as f:
        n += len(f.read())
    time.time()
ctypes.string_at(0)
`

// ctypesCrash records ctypesCrashScript with tprec's extra arguments until
// it crashes, and returns the checkpoint and tprec's stderr.
func ctypesCrash(t *testing.T, extra ...string) (string, string) {
	t.Helper()
	dir := t.TempDir()
	script := pythonScript(t, "ctypescrash.py", ctypesCrashScript)
	target, _, done := startTarget(t, "/usr/bin/python3", "-S", script, dir)
	waitFile(t, filepath.Join(dir, "input.txt"), 16*200)
	return crashWith(t, target, done, 1500*time.Millisecond, func(int) error {
		return os.WriteFile(filepath.Join(dir, "crash-now"), nil, 0o644)
	}, extra...)
}

func TestPython3CrashesItself(t *testing.T) {
	requireRoot(t)
	forBackends(t, func(t *testing.T, backend string) {
		ck, stderr := ctypesCrash(t, "--backend", backend)
		// The faulting instruction tprec saw is the one the replay ends at.
		replayEndsAtFault(t, ck, stderr)
	})
}

// python3 with faulthandler, crashed from outside: its handler, installed
// with SA_RESETHAND (the signal is back at its default while the handler
// runs, as with redis-server's crash log), writes the Python traceback and
// raises the signal again to die. Recorded, the handler must run to its
// end as without tprec: a second SIGSEGV sent to a process whose signal
// looked uncaught after its crash killed it in the middle of the report.
func TestCrashHandlerWithResetHandRunsToItsEnd(t *testing.T) {
	requireRoot(t)
	forBackends(t, func(t *testing.T, backend string) {
		script := pythonScript(t, "faulthandler.py", `
import time
def work():
    n = 0
    while True:
        n += 1
        time.sleep(0.002)
work()
`)
		var stderr bytes.Buffer // read once the program has ended
		target, _, done := startTargetErr(t, &stderr, "/usr/bin/python3", "-X", "faulthandler", script)
		ck := attachAndCrash(t, target, done, 1500*time.Millisecond, "--backend", backend)
		report := stderr.String()
		for _, want := range []string{"Fatal Python error: Segmentation fault", "most recent call first", "in work"} {
			if !strings.Contains(report, want) {
				t.Errorf("python3's crash report lacks %q; its stderr:\n%s", want, report)
			}
		}
		replay(t, ck)
	})
}

// A crash handler that takes longer than tprec's quiet time (5 s) is left
// alone until it ends: python3's faulthandler, whose report cannot be
// written for 8 s (its stderr is a pipe the script filled and nobody reads
// until then). It puts SIGSEGV back to its default as it starts, as
// redis-server's crash log does, whose memory test takes seconds over a
// large data set or on a machine others keep busy: stopped then to be
// recorded afresh, redis died of a SIGSEGV it had not raised (most likely
// the kernel's, its rseq area holding a test pattern), its report cut off,
// and tprec wrote a second checkpoint of that. Here tprec must say it leaves the handler
// alone and not record the process afresh; the report is whole once read,
// the process dies of its SIGSEGV, and the one checkpoint verifies.
func TestSlowCrashHandlerLeftAlone(t *testing.T) {
	requireRoot(t)
	forBackends(t, func(t *testing.T, backend string) {
		dir := t.TempDir()
		script := pythonScript(t, "slowreport.py", `
import os, sys, time
os.write(2, b"x" * 65500)  # the pipe holds 65,536: the report will wait
open(os.path.join(sys.argv[1], "ready"), "w").write("1")
n = 0
while True:
    n += 1
    time.sleep(0.002)
`)
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		target, _, done := startTargetErr(t, w, "/usr/bin/python3", "-X", "faulthandler", script, dir)
		w.Close()
		waitFile(t, filepath.Join(dir, "ready"), 1)
		pid := target.Process.Pid
		out := t.TempDir()
		rec := startTprec(t, "--pid", fmt.Sprint(pid), "--output", out, "--backend", backend)
		rec.waitRecording(t)
		time.Sleep(time.Second)
		if err := syscall.Kill(pid, syscall.SIGSEGV); err != nil {
			t.Fatal(err)
		}
		time.Sleep(8 * time.Second)
		select {
		case err := <-done:
			t.Fatalf("python3 ended before its report could be written: %v\n%s", err, rec.stderr)
		default:
		}
		report := make(chan []byte, 1)
		go func() { b, _ := io.ReadAll(r); report <- b }()
		diesOfSIGSEGV(t, done, func() string { return "its report was read\n" + rec.quit() })
		ck := rec.oneCheckpoint(t, out)
		log := rec.stderr.String()
		if !strings.Contains(log, "is still in the handler of its SIGSEGV after 5s: left alone until it ends") {
			t.Error("tprec did not say it leaves the running handler alone")
		}
		if strings.Contains(log, "recording it afresh") {
			t.Error("tprec stopped the process to record it afresh while its crash handler ran")
		}
		if b := string(<-report); !strings.Contains(b, "Fatal Python error: Segmentation fault") || !strings.Contains(b, "most recent call first") {
			t.Errorf("python3's report is not whole: %q", b[max(0, len(b)-400):])
		}
		replay(t, ck)
	})
}

// A stack overflow, the crash of a runaway recursion, in two real
// programs: bash recursing into a shell function under a 1 MiB stack
// limit, and python3 taking the repr of a list nested a million deep (C
// recursion in the interpreter). The stack grows during the last interval,
// which no interval start shows: the replay recreated the stack down to
// the last start's extent only and faulted where the recorded stack still
// went on (892 KB higher for bash), so the trial failed and the file did
// not verify. The replay's stack now reaches as far down as the pages of
// the window show, and ends at the recorded fault.
func TestStackOverflow(t *testing.T) {
	requireRoot(t)
	bashScript := "ulimit -s 1024\ns=0; for i in $(seq 1 60000); do s=$((s + i % 7)); done; echo $s\nf(){ f; }; f\n"
	pyScript := "import sys\nsys.setrecursionlimit(10**7)\nl = []\nfor i in range(10**6):\n    l = [l]\nrepr(l)\n"
	for _, p := range []struct{ name, prog, script string }{
		{"bash", "/bin/bash", bashScript},
		{"python3", "/usr/bin/python3", pyScript},
	} {
		t.Run(p.name, func(t *testing.T) {
			forBackends(t, func(t *testing.T, backend string) {
				script := pythonScript(t, "overflow", p.script)
				ck, log := recordMinimized(t, backend, p.prog, script)
				replayEndsAtFault(t, ck, log)
			})
		})
	}
}

// A launched program shares tprec's process group, and perl's
// kill "SEGV", 0 (ruby's Process.kill(:SEGV, 0), a shell's kill -SEGV 0)
// signals the whole group, tprec included: tprec died of it with a
// goroutine dump, which killed the program with it, and wrote nothing
// (found by a sweep, ruby and perl, both backends). tprec now ignores such
// signals: the program dies of its SIGSEGV, and the checkpoint replays to
// it. tprec runs in a process group of its own here, as under a shell, so
// that the signal does not reach the test.
func TestGroupSignalDoesNotKillTprec(t *testing.T) {
	requireRoot(t)
	perl := needTool(t, "perl")
	forBackends(t, func(t *testing.T, backend string) {
		dir := t.TempDir()
		var stderr bytes.Buffer
		cmd := exec.Command(filepath.Join(tools(t), "tprec"), "--backend", backend, "-o", dir, "--",
			perl, "-e", `$x = 0; for (1..3000000) { $x += $_ } print STDERR "sum $x\n"; kill "SEGV", 0; sleep 5`)
		cmd.Stderr = &stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		done := make(chan error, 1)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("tprec: %v; stderr:\n%s", err, stderr.String())
			}
		case <-time.After(60 * time.Second):
			cmd.Process.Kill()
			t.Fatalf("tprec did not exit; stderr:\n%s", stderr.String())
		}
		log := stderr.String()
		if !strings.Contains(log, "sum 4500001500000") || !strings.Contains(log, "ignored the SIGSEGV sent to tprec") || !strings.Contains(log, "was killed by SIGSEGV") {
			t.Fatalf("tprec's stderr:\n%s", log)
		}
		cks := checkpoints(t, dir)
		if len(cks) != 1 {
			t.Fatalf("%d checkpoints, want 1; stderr:\n%s", len(cks), log)
		}
		if out := replay(t, cks[0]); !strings.Contains(out, "signal SIGSEGV") {
			t.Fatalf("replay:\n%s", out)
		}
	})
}

// GNU awk catches SIGSEGV, prints "fatal error: internal error: segfault"
// and aborts. A tick that asked for a boundary just before the crash left
// its request standing, and the stop its interrupt brought, in the
// handler, had tprec set recording up again there: the process was stopped
// in its crash handler (for 0.8 s once), and its abort made a second
// checkpoint. That took a tick landing in a narrow window: 2 of 8 runs by
// hand with two shell loops keeping the CPUs busy, none on an idle machine,
// and none in 2 runs of this test with the build before the fix, which it
// therefore does not force; TestNothingWantedWhileCrashHandlerRuns
// (recorder) pins the rule. Here gawk is crashed several times next to CPU
// hogs (eBPF backend, the one it was seen with): never a new recording in
// the handler, one checkpoint each, dying of its own abort, and the crash
// replays.
func TestCrashHandlerNotRecordedAfreshUnderLoad(t *testing.T) {
	requireRoot(t)
	gawk := needTool(t, "gawk")
	startHogs(t, runtime.NumCPU())
	var last string
	for round := range 4 {
		target, _, done := startTarget(t, gawk, "BEGIN { while (1) { n[i++ % 100000] = i; s += length(i) } }")
		out := t.TempDir()
		rec := startTprec(t, "--pid", fmt.Sprint(target.Process.Pid), "--output", out, "--backend", "ebpf")
		rec.waitRecording(t)
		time.Sleep(time.Second)
		if err := syscall.Kill(target.Process.Pid, syscall.SIGSEGV); err != nil {
			t.Fatal(err)
		}
		diesOf(t, done, syscall.SIGABRT, 30*time.Second, rec.quit)
		last = rec.oneCheckpoint(t, out)
		if log := rec.stderr.String(); strings.Contains(log, "recording it afresh") {
			t.Fatalf("round %d: tprec stopped gawk in its crash handler to record it afresh:\n%s", round, log)
		}
	}
	replay(t, last)
}
