package e2e

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// pythonWork defines work(each), the loop the python3 test programs run for
// up to two minutes: read a file, hash it with a counter, sleep 2 ms every 50
// rounds, and call each(n) (when given) every round.
const pythonWork = `
import hashlib, time
def work(each=None):
    t0 = time.time(); n = 0; d = {}
    while time.time() - t0 < 120:
        with open("/etc/services", "rb") as f:
            b = f.read(2000)
        d[n % 5000] = hashlib.sha256(b + str(n).encode()).hexdigest()
        n += 1
        if n % 50 == 0:
            time.sleep(0.002)
        if each:
            each(n)
`

// pythonThreads runs a loop of file reads and hashing in one thread while
// two more threads wait on an event, as a server's idle workers do. With
// "main" the loop runs in the main thread; with "worker" in a third thread
// that the main thread joins.
const pythonThreads = pythonWork + `
import sys, threading
ev = threading.Event()
idle = [threading.Thread(target=ev.wait) for _ in range(2)]
for t in idle:
    t.start()
if sys.argv[1] == "main":
    work()
else:
    w = threading.Thread(target=work)
    w.start()
    w.join()
`

// tids lists the threads of a process, lowest first (the leader, then in
// creation order).
func tids(t *testing.T, pid int) []int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, n)
		}
	}
	sort.Ints(out)
	return out
}

// crashThread attaches tprec to a running multi-threaded program, waits,
// sends SIGSEGV to one of its threads (a process-directed kill may land in
// any thread that does not block it, an idle one too), and returns the
// checkpoint tprec wrote, whose trial replay must have succeeded.
func crashThread(t *testing.T, target *exec.Cmd, done chan error, tid int, after time.Duration, extra ...string) string {
	t.Helper()
	ck, log := crashWith(t, target, done, after, func(pid int) error { return unix.Tgkill(pid, tid, unix.SIGSEGV) }, extra...)
	if strings.Contains(log, "trial replay failed") {
		t.Errorf("the trial replay failed:\n%s", log)
	}
	return ck
}

// A process whose other threads wait for work is recorded, crashed in the
// thread that runs (the main one, or a worker the main thread joins), and
// replayed to the verified crash: replay runs that thread alone.
func TestThreadsOneRunning(t *testing.T) {
	requireRoot(t)
	py := "/usr/bin/python3"
	script := pythonScript(t, "threads.py", pythonThreads)
	forBackends(t, func(t *testing.T, backend string) {
		for _, mode := range []string{"main", "worker"} {
			t.Run(mode, func(t *testing.T) {
				target, _, done := startTarget(t, py, "-S", script, mode)
				want := 3
				if mode == "worker" {
					want = 4
				}
				var ts []int
				for i := 0; i < 100 && len(ts) < want; i++ {
					time.Sleep(20 * time.Millisecond)
					ts = tids(t, target.Process.Pid)
				}
				if len(ts) != want {
					t.Fatalf("python3 has threads %v, want %d", ts, want)
				}
				runner := ts[0]
				if mode == "worker" {
					runner = ts[len(ts)-1]
				}
				ck := crashThread(t, target, done, runner, 1500*time.Millisecond, "--backend", backend)
				ivs := intervalsIn(t, ck)
				if len(ivs) < 2 {
					t.Errorf("%d intervals in the checkpoint, want several: %+v", len(ivs), ivs)
				}
				for _, iv := range ivs {
					if iv.Threads != want {
						t.Errorf("interval %d lists %d threads, want %d", iv.Index, iv.Threads, want)
					}
				}
				out := replay(t, ck)
				if !strings.Contains(out, "signal SIGSEGV") {
					t.Errorf("replay did not end at the SIGSEGV:\n%s", out)
				}
			})
		}
	})
}

// threadsVerified requires the verified line of a replay that ran several
// threads and returns how many.
func threadsVerified(t *testing.T, out string) int {
	t.Helper()
	m := verifiedRe.FindStringSubmatch(out)
	if m == nil || m[3] == "" {
		t.Fatalf("want a verified replay of several threads:\n%s", out)
	}
	n, _ := strconv.Atoi(m[3])
	return n
}

// startPipeWorkers starts testdata/pipeworkers.c, built as prog, with args,
// and returns it once its three threads run, with their ids.
func startPipeWorkers(t *testing.T, prog string, args ...string) (*exec.Cmd, chan error, []int) {
	t.Helper()
	target, _, done := startTarget(t, prog, args...)
	var ts []int
	for i := 0; i < 100 && len(ts) < 3; i++ {
		time.Sleep(10 * time.Millisecond)
		ts = tids(t, target.Process.Pid)
	}
	if len(ts) != 3 {
		t.Fatalf("pipeworkers has threads %v, want 3", ts)
	}
	return target, done, ts
}

// Three threads of testdata/pipeworkers.c that all run and hand each other
// work through pipes, crashed in the main thread and, separately, in a
// worker: the trial replay of every thread succeeds and tpreplay runs them
// all to the verified crash.
func TestThreadsPipeWorkers(t *testing.T) {
	requireRoot(t)
	prog := cc(t, "testdata/pipeworkers.c", t.TempDir())
	forBackends(t, func(t *testing.T, backend string) {
		for _, who := range []string{"main", "worker"} {
			t.Run(who, func(t *testing.T) {
				target, done, ts := startPipeWorkers(t, prog)
				victim := ts[0]
				if who == "worker" {
					victim = ts[2]
				}
				ck := crashThread(t, target, done, victim, 1500*time.Millisecond, "--backend", backend)
				if n := threadsVerified(t, replay(t, ck)); n != 3 {
					t.Errorf("the replay ran %d threads, want 3", n)
				}
			})
		}
	})
}

// The three threads of testdata/pipeworkers.c under a 3 ms interval timer:
// SIGALRM lands in any of them, on the way out of a pipe call, interrupting
// one (SA_RESTART), in the main thread's computation between two calls, or
// at the exit of a handler's rt_sigreturn. The crash, sent to the process,
// lands in any thread too. Every interval replays, and tpreplay delivers the
// hundreds of signals of the window, each in its thread, to the verified
// crash.
func TestThreadsTimerSignals(t *testing.T) {
	requireRoot(t)
	prog := cc(t, "testdata/pipeworkers.c", t.TempDir())
	forBackends(t, func(t *testing.T, backend string) {
		target, done, _ := startPipeWorkers(t, prog, "timer")
		ck, log := crashWith(t, target, done, 1500*time.Millisecond, func(pid int) error { return unix.Kill(pid, unix.SIGSEGV) }, "--backend", backend)
		if strings.Contains(log, "trial replay failed") {
			t.Errorf("the trial replay failed:\n%s", log)
		}
		allReplayable(t, ck)
		out := replay(t, ck, "-v")
		if n := threadsVerified(t, out); n != 3 {
			t.Errorf("the replay ran %d threads, want 3", n)
		}
		delivered := strings.Count(out, "SIGALRM delivered after #")
		inUser := strings.Count(out, "SIGALRM: delivery point found in user code")
		t.Logf("%d SIGALRM delivered, %d of them found in user code", delivered, inUser)
		// About one per 3 ms of the window (550-590 in 1.7 s seen).
		if delivered < 200 {
			t.Errorf("the replay delivered %d SIGALRM, want one per 3 ms of the window", delivered)
		}
		// With the eBPF backend the main thread computes for a good part
		// of the time (22-35 of 550 seen in user code); under ptrace, whose
		// calls take longer, a few or none.
		if backend == "ebpf" && inUser == 0 {
			t.Errorf("no SIGALRM delivered in user code")
		}
	})
}

// gdb on a replay of several threads with signals: testdata/pipeworkers.c
// under its timer, recorded with the ptrace backend. gdb stops in the
// handler in whichever thread a SIGALRM came to, reads that thread's
// thread-local count of alarms before and after the handler adds one
// (qGetTLSAddr: the block sits below the thread pointer), continues to
// the next delivery, goes back to the first one in its thread, steps back
// out of the delivery and into it again, and goes on to the crash.
func TestGDBThreadsSignals(t *testing.T) {
	requireRoot(t)
	prog := cc(t, "testdata/pipeworkers.c", t.TempDir())
	target, done, _ := startPipeWorkers(t, prog, "timer")
	ck, _ := crashWith(t, target, done, 1500*time.Millisecond, func(pid int) error { return unix.Kill(pid, unix.SIGSEGV) }, "--backend", "ptrace")
	script := "echo @@first\\n\nbreak on_alarm\ncontinue\np 1000 + $_thread\n" +
		"echo @@tls\\n\np alarms\np (long)$fs_base - (long)&alarms\nwatch -l alarms\ncontinue\np alarms\np 1500 + $_thread\ndelete 2\n" +
		"echo @@second\\n\ncontinue\np 2000 + $_thread\n" +
		"echo @@back\\n\nreverse-continue\np 3000 + $_thread\n" +
		"echo @@step\\n\np/x $pc\nreverse-stepi\np/x $pc\nstepi\np/x $pc\n" +
		"echo @@end\\n\ndelete\ncontinue\n"
	out := runGDB(t, prog, "| "+filepath.Join(tools(t), "tpreplay")+" --gdb-stdio "+ck, script)
	sec := sections(out)
	first := regexp.MustCompile(`= 100(\d)`).FindStringSubmatch(sec["first"])
	second := regexp.MustCompile(`= 200(\d)`).FindStringSubmatch(sec["second"])
	back := regexp.MustCompile(`= 300(\d)`).FindStringSubmatch(sec["back"])
	if first == nil || second == nil || !strings.Contains(sec["first"], "hit Breakpoint 1, on_alarm") || !strings.Contains(sec["second"], "hit Breakpoint 1, on_alarm") {
		t.Fatalf("gdb did not stop in the handler twice:\n%s", out)
	}
	// The count before the handler's increment, the variable's distance
	// below the thread pointer (a few bytes: the program's block comes
	// last before the thread control block), a watchpoint on that thread's
	// copy, which the increment triggers in the same thread, and the
	// count after it.
	tls := regexp.MustCompile(`\$\d+ = (-?\d+)`).FindAllStringSubmatch(sec["tls"], -1)
	if len(tls) != 4 || !strings.Contains(sec["tls"], "watchpoint 2: -location alarms") {
		t.Errorf("gdb did not print the thread-local count twice and its place, with a watchpoint between:\n%s", out)
	} else {
		before, _ := strconv.Atoi(tls[0][1])
		dist, _ := strconv.Atoi(tls[1][1])
		after, _ := strconv.Atoi(tls[2][1])
		if before < 0 || after != before+1 || dist <= 0 || dist > 4096 || first == nil || tls[3][1] != "150"+first[1] {
			t.Errorf("thread-local alarms: %d then %d, %d bytes below the thread pointer, in thread %s; want one more after the handler's increment in the same thread, a few bytes below:\n%s", before, after, dist, tls[3][1], out)
		}
		t.Logf("thread-local alarms %d -> %d, %d bytes below fs_base:\n%s", before, after, dist, sec["tls"])
	}
	if back == nil || back[1] != first[1] || !strings.Contains(sec["back"], "hit Breakpoint 1, on_alarm") {
		t.Errorf("reverse-continue did not go back to the first delivery, in thread %s:\n%s", first[1], out)
	}
	pcs := regexp.MustCompile(`= (0x[0-9a-f]+)`).FindAllStringSubmatch(sec["step"], -1)
	if len(pcs) != 3 || pcs[0][1] != pcs[2][1] || pcs[0][1] == pcs[1][1] {
		t.Errorf("reverse-stepi out of the delivery then stepi did not come back to the handler:\n%s", out)
	}
	if !strings.Contains(sec["end"], "received signal SIGSEGV") {
		t.Errorf("gdb did not reach the crash:\n%s", out)
	}
}

// gdb on the replay of the three threads of testdata/pipeworkers.c, crashed
// in its main thread: gdb lists the threads, stops at a breakpoint in
// whichever worker reaches it first and shows that worker, stops at a
// watchpoint on the other worker's variable in that worker, goes back to
// that watchpoint's previous trigger (in the same worker: no other thread
// writes there), one instruction back and forward again to the same
// place, then on to the crash, where the main thread is the one that
// stopped.
func TestGDBThreads(t *testing.T) {
	requireRoot(t)
	prog := cc(t, "testdata/pipeworkers.c", t.TempDir())
	target, done, ts := startPipeWorkers(t, prog)
	ck := crashThread(t, target, done, ts[0], 1500*time.Millisecond)
	// The watchpoint goes on the other worker's m.value, that worker
	// selected: the replay's current thread is the first one, and the
	// other one's write must stop it all the same.
	script := "info threads\n" +
		"echo @@worker\\n\nbreak pipeworkers.c:48\ncontinue\nbt 2\np m.job > 0\np 1000 + $_thread\n" +
		"echo @@watch\\n\ndelete\nif $_thread == 2\nthread 3\nelse\nthread 2\nend\nframe function worker\nwatch -l m.value\ncontinue\np 2000 + $_thread\n" +
		"echo @@back\\n\nreverse-continue\np 3000 + $_thread\n" +
		"echo @@step\\n\np/x $pc\nreverse-stepi\np/x $pc\nstepi\np/x $pc\n" +
		"echo @@end\\n\ndelete\ncontinue\nbt\n"
	out := runGDB(t, prog, "| "+filepath.Join(tools(t), "tpreplay")+" --gdb-stdio "+ck, script)
	sec := sections(out)
	for _, tid := range ts {
		if !strings.Contains(sec[""], fmt.Sprintf("Thread %d ", tid)) {
			t.Errorf("info threads does not list thread %d:\n%s", tid, out)
		}
	}
	w := sec["worker"]
	if !strings.Contains(w, "hit Breakpoint 1, worker") || !strings.Contains(w, "$1 = 1") ||
		!(strings.Contains(w, fmt.Sprintf("Thread %d", ts[1])) || strings.Contains(w, fmt.Sprintf("Thread %d", ts[2]))) {
		t.Errorf("gdb did not stop in a worker at the breakpoint:\n%s", out)
	}
	first := regexp.MustCompile(`= 100(\d)`).FindStringSubmatch(w)
	wt := sec["watch"]
	second := regexp.MustCompile(`= 200(\d)`).FindStringSubmatch(wt)
	if !strings.Contains(wt, "Hardware watchpoint 2: -location m.value") || !strings.Contains(wt, "New value") ||
		first == nil || second == nil || first[1] == second[1] {
		t.Errorf("the watchpoint on the other worker did not stop it:\n%s", out)
	}
	back := sec["back"]
	third := regexp.MustCompile(`= 300(\d)`).FindStringSubmatch(back)
	if !strings.Contains(back, "Hardware watchpoint 2: -location m.value") || !strings.Contains(back, "Old value") ||
		third == nil || second == nil || third[1] != second[1] {
		t.Errorf("reverse-continue did not go back to the watchpoint's previous trigger in the same worker:\n%s", out)
	}
	pcs := regexp.MustCompile(`= (0x[0-9a-f]+)`).FindAllStringSubmatch(sec["step"], -1)
	if len(pcs) != 3 || pcs[0][1] != pcs[2][1] || pcs[0][1] == pcs[1][1] {
		t.Errorf("reverse-stepi then stepi did not come back to the same instruction:\n%s", out)
	}
	end := sec["end"]
	if !strings.Contains(end, "received signal SIGSEGV") || !strings.Contains(end, fmt.Sprintf("Thread %d", ts[0])) || !strings.Contains(end, "in main (") {
		t.Errorf("gdb did not reach the crash in the main thread:\n%s", out)
	}
}

// testdata/spawner.c starts a thread per job, joins it, and crashes its
// main thread after 1.5 s: the replay makes every thread the window
// started where its clone3 returns and lets it end where the recording
// says, hundreds of them, to the verified crash.
func TestThreadsStartedInWindow(t *testing.T) {
	requireRoot(t)
	prog := cc(t, "testdata/spawner.c", t.TempDir())
	forBackends(t, func(t *testing.T, backend string) {
		ck, log := recordMinimized(t, backend, prog, "1.5")
		if strings.Contains(log, "diverged") {
			t.Fatalf("want a trial replay that succeeded at once:\n%s", log)
		}
		// Hundreds as a rule; the ptrace backend, under a loaded CI
		// machine, let the program start 96 in the window once.
		if n := threadsVerified(t, replay(t, ck)); n < 50 {
			t.Errorf("the replay ran %d threads, want at least 50 (hundreds as a rule)", n)
		}
	})
}

// Threads started in the window start threads of their own
// (testdata/spawner.c nested). glibc registers a new thread's rseq area only
// when its creator's area holds a CPU number, which the kernel writes after
// a registration; replay, which does not register areas, kept glibc's
// "not registered" value in the area of a thread it started, and the
// thread that one started skipped its recorded rseq call: every trial
// replay diverged there, and the checkpoint kept every page. Now no replay
// of the window meets that. (One run in CI of the ptrace backend found the
// whole window's end state different in a page of thread stacks, and the
// trial kept a later part of the window: not explained yet.)
func TestThreadsStartThreads(t *testing.T) {
	requireRoot(t)
	prog := cc(t, "testdata/spawner.c", t.TempDir())
	forBackends(t, func(t *testing.T, backend string) {
		ck, log := recordMinimized(t, backend, prog, "1.0", "nested")
		if strings.Contains(log, "expected rseq(") {
			t.Fatalf("a trial replay skipped a thread's rseq registration:\n%s", log)
		}
		// Two threads a job: under the ptrace backend's stops, a window
		// holds dozens.
		if n := threadsVerified(t, replay(t, ck)); n < 30 {
			t.Errorf("the replay ran %d threads, want dozens", n)
		}
	})
}

// memcachedLight starts Debian's memcached with four worker threads and no
// background maintainers on port, and one client that stores and reads back a key every 2 ms over one
// connection, as a cache under light traffic sees, until the test ends.
func memcachedLight(t *testing.T, port string) (*exec.Cmd, chan error) {
	t.Helper()
	srv := needTool(t, "memcached")
	// Without the background maintainers (LRU, crawler, hash table, slab
	// mover): they act on what the workers store in memory, between calls,
	// which replay does not order (replayer/threads.go).
	target, _, done := startTarget(t, srv, "-u", "root", "-l", "127.0.0.1", "-p", port, "-U", "0", "-t", "4",
		"-o", "no_lru_maintainer,no_lru_crawler,no_hashexpand,no_slab_reassign")
	var conn net.Conn
	var err error
	for i := 0; i < 100; i++ {
		if conn, err = net.Dial("tcp", "127.0.0.1:"+port); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("memcached did not answer: %v", err)
	}
	stop := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		defer conn.Close()
		buf := make([]byte, 512)
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			v := fmt.Sprint("value-", n)
			req := fmt.Sprintf("set k%d 0 0 %d\r\n%s\r\nget k%d\r\n", n%500, len(v), v, n%500)
			if _, err := conn.Write([]byte(req)); err != nil {
				return
			}
			// STORED, then VALUE, the value and END.
			got := ""
			for !strings.HasSuffix(got, "END\r\n") {
				conn.SetReadDeadline(time.Now().Add(5 * time.Second))
				k, err := conn.Read(buf)
				if err != nil {
					return
				}
				got += string(buf[:k])
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { close(stop); <-finished })
	return target, done
}

// Debian's memcached (a dispatcher thread, four workers, a logger)
// serving a client, crashed in its main thread: the replay runs every
// thread that made calls, the dispatcher and the four workers, to the
// verified crash, the whole window.
//
// memcached's main thread stores its clock once a second right after a
// clock_gettime, and a worker copies it into an item between two of its
// calls. When a worker's call returned just before that clock_gettime, an
// eager replay runs the worker's copy first, and the window ends with the
// item's time stamp one second behind (ARCHITECTURE.md, "Threads"): the
// trial then verifies it under the late schedule, which the whole window
// must still replay under.
func TestMemcachedThreads(t *testing.T) {
	requireRoot(t)
	forBackends(t, func(t *testing.T, backend string) {
		port := map[string]string{"ebpf": "11731", "ptrace": "11732"}[backend]
		target, done := memcachedLight(t, port)
		pid := target.Process.Pid
		if n := len(tids(t, pid)); n != 6 {
			t.Fatalf("memcached has %d threads, want 6", n)
		}
		ck, log := crashWith(t, target, done, 2*time.Second, func(pid int) error { return unix.Tgkill(pid, pid, unix.SIGSEGV) }, "--backend", backend)
		if strings.Contains(log, "trial replay failed") {
			t.Errorf("the trial replay failed:\n%s", log)
		}
		allReplayable(t, ck)
		if n := threadsVerified(t, replay(t, ck)); n != 5 {
			t.Errorf("the replay ran %d threads, want 5", n)
		}
	})
}

// Debian's memcached serving a client while an operator sends it SIGHUP
// every 40 ms (memcached catches it and notes it in a flag). The kernel
// gives each to a thread that does not block it, mostly the dispatcher or
// the logger, waiting in a call the signal interrupts. The replay of the
// threads delivers every SIGHUP of the window to the thread the recording
// saw it in, where it did, and reaches the verified crash of a worker. A
// signal that lands in a thread running user code (a worker between two
// calls) is one a replay of several threads does not search for: the trial
// then starts the window after its interval, which the test allows once.
func TestMemcachedThreadsSignals(t *testing.T) {
	requireRoot(t)
	forBackends(t, func(t *testing.T, backend string) {
		port := map[string]string{"ebpf": "11734", "ptrace": "11735"}[backend]
		target, done := memcachedLight(t, port)
		pid := target.Process.Pid
		ts := tids(t, pid)
		if len(ts) != 6 {
			t.Fatalf("memcached has %d threads, want 6", len(ts))
		}
		stop := sendEvery(pid, 40*time.Millisecond, unix.SIGHUP)
		// The crash goes to the first worker, which serves the client.
		worker := 0
		for _, tid := range ts {
			if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/comm", pid, tid)); worker == 0 && strings.TrimSpace(string(comm)) == "mc-worker" {
				worker = tid
			}
		}
		if worker == 0 {
			t.Fatalf("memcached has no thread named mc-worker")
		}
		// Crashed halfway through an interval: 2 s after the recording
		// began is the 8th boundary, and a crash within milliseconds of
		// a boundary brings the pages the interval before wrote into the
		// end's comparison, where a replay from an earlier interval can
		// find a page of memcached's that its threads wrote in another
		// order (ARCHITECTURE.md, "Limits": memory the threads exchange
		// between calls). This test is about the signals.
		ck := crashThread(t, target, done, worker, 2125*time.Millisecond, "--backend", backend)
		if n := stop(); n < 20 {
			t.Fatalf("only %d SIGHUP sent", n)
		}
		ivs := intervalsIn(t, ck)
		cut := 0
		for _, iv := range ivs {
			if !iv.Replayable {
				cut++
				t.Logf("interval %d: %s", iv.Index, iv.Reason)
			}
		}
		if cut > 1 || len(ivs)-cut < 6 {
			t.Errorf("%d of %d intervals replayable, want all but one at most", len(ivs)-cut, len(ivs))
		}
		out := replay(t, ck, "-v")
		// The dispatcher and the client's worker, and every thread a
		// signal came to: the logger, other workers.
		if n := threadsVerified(t, out); n < 5 {
			t.Errorf("the replay ran %d threads, want at least 5", n)
		}
		if n := strings.Count(out, "SIGHUP delivered after #"); n < 10 {
			t.Errorf("the replay delivered %d SIGHUP, want the dozens sent during the window:\n%s", n, out)
		}
	})
}

// Two python3 threads that both run meet through the interpreter's lock
// and its flags, in memory between their syscalls, where replay does not
// order them. The trial replay says so: it moves the window past the
// intervals where the threads' replay diverged, naming the divergence, or
// keeps every page when none is left; the process dies of its own signal as
// it would have; and whatever the checkpoint keeps, tpreplay either
// verifies it or names the threads in its divergence, never anything else.
// A window the trial verified whole (on a loaded machine one thread may
// hold the interpreter's lock all along while the other waits in one call,
// which replay leaves out; or the late schedule gave the recorded order)
// must verify in tpreplay too, and the test records again, up to three
// times, for a window where the threads met.
func TestThreadsMeetingInMemory(t *testing.T) {
	requireRoot(t)
	py := "/usr/bin/python3"
	prog := `
import threading, time
def spin():
    n = 0
    while True:
        n += 1
        if n % 20000 == 0:
            time.sleep(0.001)
threading.Thread(target=spin, daemon=True).start()
spin()
`
	for attempt := 1; attempt <= 3; attempt++ {
		target, _, done := startTarget(t, py, "-S", "-c", prog)
		time.Sleep(300 * time.Millisecond)
		ck, log := crashWith(t, target, done, 1200*time.Millisecond, func(pid int) error { return unix.Tgkill(pid, pid, unix.SIGSEGV) })
		cut := 0
		for _, iv := range intervalsIn(t, ck) {
			if !iv.Replayable && strings.Contains(iv.Reason, "the trial replay of 2 threads diverged in it") {
				cut++
			}
		}
		failed := strings.Contains(log, "trial replay failed")
		out, code := runTool(t, "tpreplay", ck)
		switch {
		case code == 0:
			threadsVerified(t, out)
			if failed {
				t.Errorf("the trial replay failed but tpreplay verified:\n%s\ntprec:\n%s", out, log)
			}
		case !strings.Contains(out, "divergence") || !strings.Contains(out, "threads ran: replay keeps the recorded order of their syscalls"):
			t.Fatalf("tpreplay: exit %d without a divergence naming the threads:\n%s", code, out)
		case !failed:
			t.Errorf("the trial replay succeeded but tpreplay diverged:\n%s\ntprec:\n%s", out, log)
		}
		if cut > 0 || failed {
			return
		}
		t.Logf("attempt %d: the trial verified the whole window, and so did tpreplay: %s", attempt, strings.TrimSpace(out))
	}
}

// redisUnderLoad starts Debian's redis-server on port, without persistence,
// waits until it answers, and runs redis-benchmark against it (10 clients,
// 100,000 random keys, SET and GET) until the test ends. extra are more
// server arguments.
func redisUnderLoad(t *testing.T, port string, extra ...string) (*exec.Cmd, chan error) {
	t.Helper()
	return redisUnderLoadVia(t, nil, port, extra...)
}

// redisUnderLoadVia is redisUnderLoad with redis-server started by the
// command via, which execs it (its last argument is the server's path).
func redisUnderLoadVia(t *testing.T, via []string, port string, extra ...string) (*exec.Cmd, chan error) {
	t.Helper()
	target, _, done := redisUnderLoadLog(t, via, port, extra...)
	return target, done
}

// redisUnderLoadLog is redisUnderLoadVia that also returns the server's log
// (its stdout), to read once it has ended.
func redisUnderLoadLog(t *testing.T, via []string, port string, extra ...string) (*exec.Cmd, *output, chan error) {
	t.Helper()
	srv := needTool(t, "redis-server")
	bench := needTool(t, "redis-benchmark")
	cli := needTool(t, "redis-cli")
	args := append(append(append([]string{}, via...), srv, "--port", port, "--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", t.TempDir()), extra...)
	target, log, done := startTarget(t, args[0], args[1:]...)
	for i := 0; exec.Command(cli, "-p", port, "ping").Run() != nil; i++ {
		if i == 100 {
			t.Fatal("redis-server did not answer")
		}
		time.Sleep(50 * time.Millisecond)
	}
	load := exec.Command(bench, "-p", port, "-n", "100000000", "-c", "10", "-r", "100000", "-t", "set,get", "-q")
	if err := load.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { load.Process.Kill(); load.Wait() })
	return target, log, done
}

// Debian's redis-server as shipped (three background-job threads and
// jemalloc's background thread besides the main one), under redis-benchmark
// load: recorded, crashed in its main thread, the checkpoint minimized by the
// trial replay and replayed to the verified crash.
func TestRedisServerThreads(t *testing.T) {
	requireRoot(t)
	target, done := redisUnderLoad(t, "6431")
	pid := target.Process.Pid
	if n := len(tids(t, pid)); n < 2 {
		t.Fatalf("redis-server has %d threads; this test is about several", n)
	}
	ck := crashThread(t, target, done, pid, 2*time.Second)
	ivs := intervalsIn(t, ck)
	if len(ivs) < 2 || ivs[0].Threads < 2 {
		t.Errorf("intervals %+v: want several, each with every thread", ivs)
	}
	replay(t, ck)
}

// A crashed server's descriptors close when it dies, not when its
// checkpoint is written seconds later: its port can be bound again at once
// (a supervisor restarting it) and the pipe its parent reads reaches end of
// file. The dump shadow tprec forks at the crash shares the server's file
// table, and used to keep it alive until the end of the dump. The test
// needs a dump that outlasts the server: with its crash handler's memory
// test on, a loaded CI machine took longer to end the server than tprec to
// write the file (709 ms), so the memory test is off.
func TestCrashedServerReleasesPort(t *testing.T) {
	requireRoot(t)
	const port = "6435"
	target, done := redisUnderLoad(t, port, "--crash-memcheck-enabled", "no")
	pid := target.Process.Pid
	dir := t.TempDir()
	rec := startTprec(t, "--pid", fmt.Sprint(pid), "--output", dir)
	rec.waitRecording(t)
	time.Sleep(2 * time.Second)
	if err := unix.Tgkill(pid, pid, unix.SIGSEGV); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done: // exec waits for the end of the server's stdout pipe too
	case <-time.After(20 * time.Second):
		t.Fatalf("redis-server's parent saw no end of it within 20 s of the crash; tprec:\n%s", rec.stderr)
	}
	var err error
	for i := 0; i < 40; i++ {
		var l net.Listener
		if l, err = net.Listen("tcp", "127.0.0.1:"+port); err == nil {
			l.Close()
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	stillWriting := !strings.Contains(rec.stderr.String(), "wrote ")
	if err != nil {
		t.Fatalf("port %s still bound 2 s after the crash: %v; tprec:\n%s", port, err, rec.stderr)
	}
	if !stillWriting {
		t.Fatalf("tprec had written its checkpoint before the port was free: this test needs a dump that takes longer; tprec:\n%s", rec.stderr)
	}
	if err := rec.wait(t, 120*time.Second); err != nil {
		t.Fatalf("tprec: %v\n%s", err, rec.stderr)
	}
	cks := checkpoints(t, dir)
	if len(cks) == 0 {
		t.Fatalf("no checkpoint; tprec:\n%s", rec.stderr)
	}
	replay(t, cks[0])
}

// A thread that waits for its vfork child sleeps uninterruptibly and does not
// stop for a boundary until the child is done (a second here). The boundary
// then waits for the next interval instead of holding the other threads
// that long: the main thread of testdata/vforkwait.c, which measures its own
// pauses, is never stopped for more than a fraction of that.
func TestThreadInUninterruptibleWait(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	prog := cc(t, "testdata/vforkwait.c", dir)
	forBackends(t, func(t *testing.T, backend string) {
		out := t.TempDir()
		rec := startTprec(t, "--backend", backend, "--output", out, "--", prog, "5")
		if err := rec.wait(t, 60*time.Second); err != nil {
			t.Fatalf("tprec: %v\n%s", err, rec.stderr)
		}
		log := rec.stderr.String()
		var pause float64
		if i := strings.Index(log, "longest pause "); i < 0 {
			t.Fatalf("the program did not finish:\n%s", log)
		} else if _, err := fmt.Sscanf(log[i:], "longest pause %g s", &pause); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(log, "did not stop in time") {
			t.Errorf("no boundary met the waiting thread:\n%s", log)
		}
		if pause > 0.5 {
			t.Errorf("the main thread paused for %.3f s\n%s", pause, log)
		}
		t.Logf("longest pause of the main thread: %.3f s", pause)
	})
}

// pythonThreadedSum computes a hash chain in the main thread while two
// threads wake every 50 ms until it is done, then prints the chain's end.
const pythonThreadedSum = `
import hashlib, threading
ev = threading.Event()
def idle():
    while not ev.wait(0.05):
        pass
ts = [threading.Thread(target=idle) for _ in range(2)]
for t in ts:
    t.start()
h = b""
for i in range(5000000):
    h = hashlib.sha256(h + str(i).encode()).digest()
    if i % 5000 == 0:
        with open("/etc/hostname", "rb") as f:
            f.read()
ev.set()
for t in ts:
    t.join()
print(h.hex())
`

// Killing tprec while it records a multi-threaded process leaves every
// thread untraced and running: the process ends with the output of an
// unrecorded run, and no shadow outlives tprec.
func TestThreadedTargetUnharmedWhenTprecKilled(t *testing.T) {
	requireRoot(t)
	py := "/usr/bin/python3"
	ref, err := exec.Command(py, "-S", "-c", pythonThreadedSum).Output()
	if err != nil {
		t.Fatal(err)
	}
	target, out, done := startTarget(t, py, "-S", "-c", pythonThreadedSum)
	pid := target.Process.Pid
	time.Sleep(200 * time.Millisecond)
	rec := startTprec(t, "--pid", fmt.Sprint(pid), "--output", t.TempDir(), "--interval", "100ms")
	rec.waitRecording(t)
	time.Sleep(630 * time.Millisecond) // mid-interval
	threads := tids(t, pid)
	shadows := childrenOf(pid)
	if len(threads) < 3 || len(shadows) == 0 {
		t.Fatalf("threads %v, shadows %v: the test would prove nothing", threads, shadows)
	}
	rec.cmd.Process.Kill()
	rec.wait(t, 10*time.Second)
	time.Sleep(200 * time.Millisecond)
	select {
	case err := <-done:
		// The loop runs for seconds more: an end now is a death. A kill
		// inside a boundary's injected clone does this (README, "Current
		// limits").
		t.Fatalf("python3 ended right after tprec was killed: %v", err)
	default:
	}
	for _, tid := range threads {
		if tr := tracerOf(t, tid); tr != "0" && tr != "" {
			t.Errorf("thread %d is still traced by %s", tid, tr)
		}
	}
	for _, s := range shadows {
		if st := procState(s); st != "" && st != "Z" && st != "X" {
			t.Errorf("shadow %d is alive after tprec was killed (state %s)", s, st)
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("python3 failed after tprec was killed: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("python3 did not finish after tprec was killed")
	}
	if got := out.String(); got != string(ref) {
		t.Fatalf("output %q, an unrecorded run printed %q", got, ref)
	}
}

// gdb goes back in a replay of Debian's memcached with four workers: from
// the crash in the main thread, reverse-continue to a breakpoint on libc's
// read stops in the worker that made the last read, finish shows the
// request the client sent in the buffer, and continue reaches the crash
// again. info threads names the threads as memcached named them
// (qXfer:threads, from the names tprec read at the dump).
func TestGDBMemcachedReverse(t *testing.T) {
	requireRoot(t)
	srv := needTool(t, "memcached")
	needTool(t, "gdb")
	target, done := memcachedLight(t, "11733")
	pid := target.Process.Pid
	ck := crashThread(t, target, done, pid, 1500*time.Millisecond)
	script := "info threads\ncontinue\n" +
		"echo @@read\\n\nbreak read\nreverse-continue\np 1000 + $_thread\nset $b = (char *) $rsi\nfinish\nx/s $b\n" +
		"echo @@end\\n\ndelete\ncontinue\n"
	out := runGDB(t, srv, "| "+filepath.Join(tools(t), "tpreplay")+" --gdb-stdio "+ck, script)
	sec := sections(out)
	if strings.Count(sec[""], `"mc-worker"`) != 4 {
		t.Errorf("info threads does not name the four workers mc-worker:\n%s", out)
	}
	r := sec["read"]
	th := regexp.MustCompile(`= 100(\d)`).FindStringSubmatch(r)
	// The last arrival at read may be a worker's that the recording
	// ended with it standing there, about to call it: that read never
	// returns in the window, and finish runs on to the crash.
	held := strings.Contains(r, "received signal SIGSEGV")
	if !strings.Contains(r, "hit Breakpoint 1,") || th == nil || th[1] == "1" || !held && !strings.Contains(r, `"set k`) {
		keepFailed(t, ck)
		t.Errorf("reverse-continue did not stop at the last read, in a worker, with the request it returned:\n%s", out)
	}
	end := sec["end"]
	if held {
		end = r
	}
	if !strings.Contains(end, "received signal SIGSEGV") || !strings.Contains(end, fmt.Sprintf("Thread %d", pid)) {
		t.Errorf("continue did not reach the crash in the main thread again:\n%s", out)
	}
}

// Debian's xz compressing with two worker threads, crashed from outside
// (its main thread waits for them in a futex): both workers are in the
// middle of their compression loop where the recording ends, and replay
// must stop each where the recording found it. Every pass over those
// instructions used to be a ptrace stop, hundreds of thousands in the
// window: the trial replay timed out and kept every page, and tpreplay ran
// past its 53 s. The process now compares those passes itself, one
// worker after the other (threads.go, stopInProcess): the trial finds the
// touched pages and tpreplay verifies. Where a worker stopped on an
// instruction that no jmp displaces alone (a short one whose punned jmp
// can only land in mapped pages), its passes still stop each time and the
// trial runs out of time, saying why: the test records again, up to four
// times.
func TestParallelWorkersRunningAtEnd(t *testing.T) {
	requireRoot(t)
	xz := needTool(t, "xz")
	// 48 MiB of text from a small vocabulary: two blocks of xz's default
	// preset (24 MiB each), seconds of work for each worker.
	words := strings.Fields("the of and to in is was that for on with as by at from his her they this had not are but which be or an were all have one their")
	var b strings.Builder
	r := rand.New(rand.NewPCG(1, 2))
	for b.Len() < 48<<20 {
		b.WriteString(words[r.IntN(len(words))])
		if r.IntN(12) == 0 {
			b.WriteByte('\n')
		} else {
			b.WriteByte(' ')
		}
	}
	in := filepath.Join(t.TempDir(), "text")
	if err := os.WriteFile(in, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	forBackends(t, func(t *testing.T, backend string) {
		for attempt := 1; ; attempt++ {
			target, _, done := startTarget(t, xz, "-T2", "-c", in)
			time.Sleep(300 * time.Millisecond)
			// The retry below needs tprec's end: a trial whose worker
			// stops at every pass spends its whole budget (2 x 34 s for
			// this window, twice that without debug registers), then
			// writes every page. A CI run waited 60 s for it and failed.
			ck, log := crashWithin(t, target, done, 1500*time.Millisecond, func(pid int) error { return unix.Tgkill(pid, pid, unix.SIGSEGV) }, 200*time.Second, "--backend", backend)
			if strings.Contains(log, "trial replay failed") {
				// A worker stopped where no jmp could be placed (none of
				// 16 recordings on 2026-11-27 since several instructions
				// may be displaced there too; 1 or 2 before): its passes
				// stop each, and the trial runs out of time; the hint
				// says so.
				if attempt < 4 && strings.Contains(log, "passes there could not be compared in the process") {
					t.Logf("attempt %d: a worker's stop could not be compared in the process; again", attempt)
					continue
				}
				t.Fatalf("the trial replay failed:\n%s", log)
			}
			out := replay(t, ck, "-v")
			if n := threadsVerified(t, out); n != 3 {
				t.Errorf("the replay ran %d threads, want the main thread and two workers", n)
			}
			if n := strings.Count(out, "are compared in the process"); n == 0 {
				t.Errorf("no worker's passes over its stop were compared in the process:\n%s", out[max(0, len(out)-3000):])
			}
			return
		}
	})
}

// testdata/hungloop.c's main thread hangs in a loop that makes no call
// while its heartbeat thread goes on sleeping and waking, and a watchdog's
// SIGSEGV lands in the loop: the end search runs in a replay of two
// threads, hundreds of millions of passes over the end rip in a window of
// 2 s. The process compares them itself (with a stop at each, the trial
// replay ran out of time after 73 s and the checkpoint kept every page);
// the trial replay verifies the window and tpreplay the file.
func TestHungThreadKilledFromOutside(t *testing.T) {
	requireRoot(t)
	prog := cc(t, "testdata/hungloop.c", t.TempDir())
	forBackends(t, func(t *testing.T, backend string) {
		target, _, done := startTarget(t, prog)
		// To the main thread (a kill of the process may land in the
		// heartbeat: a CI run's did, when the main thread was held at a
		// boundary, and its replay then compared the main thread's stop
		// in the process instead).
		ck, log := crashWith(t, target, done, 1500*time.Millisecond, func(pid int) error { return unix.Tgkill(pid, pid, unix.SIGSEGV) }, "--backend", backend)
		if strings.Contains(log, "every present page") {
			keepFailed(t, ck)
			t.Fatalf("the trial replay failed:\n%s", log)
		}
		out := replay(t, ck, "-v")
		if n := threadsVerified(t, out); n != 2 {
			t.Errorf("the replay ran %d threads, want the main thread and the heartbeat", n)
		}
		m := regexp.MustCompile(`end found at breakpoint hit (\d+) \(compared in the process\)`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("the end was not searched in the process:\n%s", out[max(0, len(out)-3000):])
		}
		t.Logf("end found at pass %s over its rip", m[1])
		if backend == "ebpf" {
			hungLoopInGDB(t, prog, ck)
		}
	})
}

// hungLoopInGDB debugs the replay of a hungloop checkpoint. A continue
// reaches the recorded SIGSEGV with the process comparing the passes
// itself (with a stop at each, as a debugger session made every pass
// until 2026-11-27, hours), and the program's code there is its own. With
// a breakpoint at the end rip, every pass is a stop again, as the user
// asked, and a step from there runs the program's instruction.
func hungLoopInGDB(t *testing.T, prog, ck string) {
	t.Helper()
	var v struct {
		End struct {
			Rip string `json:"rip"`
		} `json:"end"`
	}
	inspectJSON(t, ck, &v)
	target, _ := gdbTarget(t, ck)
	out := runGDB(t, prog, target, `echo @@cont\n
continue
echo @@pc\n
p/x $pc
x/i $pc
bt
`)
	sec := sections(out)
	if !strings.Contains(sec["cont"], "SIGSEGV") || !strings.Contains(sec["pc"], "= "+v.End.Rip) {
		t.Fatalf("gdb's continue did not reach the SIGSEGV at %s:\n%s", v.End.Rip, out)
	}
	if strings.Contains(sec["pc"], "jmp") || !strings.Contains(sec["pc"], "main") {
		t.Errorf("the end's code or backtrace is not the program's own:\n%s", sec["pc"])
	}
	out = runGDB(t, prog, target, `break *`+v.End.Rip+`
continue
echo @@hit\n
p/x $pc
stepi
echo @@step\n
p $pc != `+v.End.Rip+`
x/i `+v.End.Rip+`
`)
	sec = sections(out)
	if !strings.Contains(sec["hit"], "= "+v.End.Rip) || !strings.Contains(sec["step"], "= 1") || strings.Contains(sec["step"], "jmp") {
		t.Errorf("a breakpoint at the end rip, then a step:\n%s", out)
	}
}

// testdata/busyworker.c's worker computes between its calls, and the main
// thread is crashed from outside at a moment its worker is seen running
// (its /proc syscall file says "running"): the recording ends with the
// worker between two calls, after its last one. Replay stops it where the
// recording did, with the recorded registers, instead of running it on to
// its next call, so the trial replay and tpreplay verify the end state,
// which holds what the worker wrote on the way; the process compares the
// worker's passes there itself. A moment that turns out to
// have the worker in a call after all, or just back from one (its
// registers those of the call's exit), is recorded again.
func TestThreadRunningAtEnd(t *testing.T) {
	requireRoot(t)
	prog := cc(t, "testdata/busyworker.c", t.TempDir())
	forBackends(t, func(t *testing.T, backend string) { runningAtEnd(t, prog, backend) })
}

func runningAtEnd(t *testing.T, prog, backend string) {
	for attempt := 1; attempt <= 4; attempt++ {
		target, _, done := startTarget(t, prog)
		pid := target.Process.Pid
		var worker int
		for i := 0; i < 100 && worker == 0; i++ {
			time.Sleep(20 * time.Millisecond)
			for _, tid := range tids(t, pid) {
				if tid != pid {
					worker = tid
				}
			}
		}
		if worker == 0 {
			t.Fatal("busyworker did not start its worker")
		}
		ck, log := crashWith(t, target, done, 800*time.Millisecond, func(pid int) error {
			file := fmt.Sprintf("/proc/%d/task/%d/syscall", pid, worker)
			for i := 0; i < 100000; i++ {
				if b, err := os.ReadFile(file); err == nil && strings.HasPrefix(string(b), "running") {
					break
				}
			}
			return unix.Tgkill(pid, pid, unix.SIGSEGV)
		}, "--backend", backend)
		if strings.Contains(log, "trial replay failed") {
			t.Fatalf("the trial replay failed:\n%s", log)
		}
		var info struct {
			End struct {
				Threads []struct {
					Tid       int  `json:"tid"`
					InSyscall bool `json:"in_syscall"`
				} `json:"threads"`
			} `json:"end"`
		}
		inspectJSON(t, ck, &info)
		running := false
		for _, th := range info.End.Threads {
			running = running || th.Tid == worker && !th.InSyscall
		}
		if !running {
			t.Logf("attempt %d: the recording ended with the worker in a call; again", attempt)
			continue
		}
		rep := replay(t, ck, "-v")
		if threadsVerified(t, rep) == 2 && strings.Contains(rep, fmt.Sprintf("thread %d stays at the exit of its last call", worker)) {
			// The worker had just returned from a call: its registers
			// at the end are that call's exit, which replay keeps it at.
			t.Logf("attempt %d: the recording ended with the worker at the exit of its last call; again", attempt)
			continue
		}
		if threadsVerified(t, rep) != 2 || !strings.Contains(rep, fmt.Sprintf("thread %d waits at", worker)) {
			t.Fatalf("the replay did not stop the worker where the recording ended with it running:\n%s", rep)
		}
		// Its thousands of passes there are compared by the process
		// itself, not a ptrace stop each (threads.go, stopInProcess).
		if !strings.Contains(rep, fmt.Sprintf("thread %d: the passes over its stop at", worker)) {
			t.Errorf("the worker's passes over its stop were not compared in the process:\n%s", rep)
		}
		return
	}
	t.Fatal("in 4 recordings the worker was never running where the recording ended")
}

// pythonHashChain is a single-threaded python3 loop that computes, reads
// the clock and sleeps, so a boundary finds its thread in any of them (in a
// clock read often), and takes a timer signal every 100 us, which tprec
// delivers itself while it records (stopping the thread at the handler).
const pythonHashChain = `
import hashlib, signal, time
ticks = 0
def tick(sig, frame):
    global ticks
    ticks += 1
signal.signal(signal.SIGALRM, tick)
signal.setitimer(signal.ITIMER_REAL, 0.0001, 0.0001)
h = b""
for i in range(3000000):
    h = hashlib.sha256(h).digest()
    time.time()
    if i % 30000 == 0:
        time.sleep(0.001)
signal.setitimer(signal.ITIMER_REAL, 0)
print(h.hex(), ticks > 0)
`

// TestTargetUnharmedWhenTprecKilledAtRandom kills tprec with SIGKILL at
// random moments while it records python3 at 10 ms intervals, ten times a
// backend, so that many kills land inside a boundary, in the clone or
// wait4 tprec has the target make (before those went through the vDSO
// trampoline, 12 such kills in 100 killed the target with SIGTRAP), in
// taking a thread out of a clock read, or in the delivery of a timer
// signal (before those two ran the thread on instead of single-stepping
// it, some kills left it to die of SIGTRAP), and the guardian then takes
// the thread out of the vDSO with timer signals coming (delivered during
// that, one returned into the restored vDSO: SIGSEGV).
// Every run must end as an unrecorded one does, with no shadow left running,
// and, once tprec's guardian has seen to it, with its vDSO as it was and no
// zombie shadow (a kill in the middle of a clone leaves one tprec had not
// told the guardian of).
func TestTargetUnharmedWhenTprecKilledAtRandom(t *testing.T) {
	requireRoot(t)
	py := "/usr/bin/python3"
	ref, err := exec.Command(py, "-S", "-c", pythonHashChain).Output()
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	forBackends(t, func(t *testing.T, backend string) {
		for run := range 10 {
			target, out, done := startTarget(t, py, "-S", "-c", pythonHashChain)
			pid := target.Process.Pid
			orig := vdsoBytes(t, os.Getpid()) // the kernel maps the same image into every process
			rec := startTprec(t, "--backend", backend, "--pid", fmt.Sprint(pid), "--output", t.TempDir(), "--interval", "10ms")
			rec.waitRecording(t)
			time.Sleep(time.Duration(rng.IntN(800)) * time.Millisecond)
			shadows := childrenOf(pid)
			if target.ProcessState != nil || procState(pid) == "Z" || len(shadows) == 0 {
				t.Fatalf("run %d: python3 ended (state %q), or had no shadow (%v), before tprec was killed: the run would prove nothing", run, procState(pid), shadows)
			}
			rec.cmd.Process.Kill()
			rec.wait(t, 10*time.Second)
			time.Sleep(50 * time.Millisecond)
			for _, s := range append(shadows, childrenOf(pid)...) {
				if st := procState(s); st != "" && st != "Z" && st != "X" {
					t.Errorf("run %d: child %d of the target is alive after tprec was killed (state %s)", run, s, st)
				}
			}
			if err := repaired(pid, orig, true); err != nil {
				t.Errorf("run %d: %v\n%s", run, err, rec.stderr)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("run %d: python3 failed after tprec was killed: %v", run, err)
				}
			case <-time.After(60 * time.Second):
				t.Fatalf("run %d: python3 did not finish after tprec was killed", run)
			}
			if got := out.String(); got != string(ref) {
				t.Fatalf("run %d: output %q, an unrecorded run printed %q", run, got, ref)
			}
		}
	})
}

// TestSlowHandlerUnharmedWhenTprecKilled kills tprec with SIGKILL while it
// records testdata/slowalarm.c, which reads the clock under a 2 ms timer
// whose handler computes for about 1 ms. A kill at a clock read's stop in
// the vDSO stub lets the kernel deliver the pending SIGALRM there, its frame
// saving the stub's address; the guardian used to put the original vDSO
// back under the running handler, which returned into the middle of
// clock_gettime and died of SIGBUS (with --backend ptrace, 2 to 5 kills in
// 10). The guardian now waits until no stack returns into the patched
// code. Every kill must leave the program running, counting, and repaired.
func TestSlowHandlerUnharmedWhenTprecKilled(t *testing.T) {
	requireRoot(t)
	prog := cc(t, "testdata/slowalarm.c", t.TempDir())
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
	orig := vdsoBytes(t, os.Getpid())
	forBackends(t, func(t *testing.T, backend string) {
		waits := 0
		for run := range 10 {
			target, out, done := startTarget(t, prog)
			pid := target.Process.Pid
			time.Sleep(200 * time.Millisecond)
			rec := startTprec(t, "--backend", backend, "--pid", fmt.Sprint(pid), "--output", t.TempDir())
			rec.waitRecording(t)
			time.Sleep(time.Duration(100+rng.IntN(800)) * time.Millisecond)
			rec.cmd.Process.Kill()
			rec.wait(t, 10*time.Second)
			if err := repaired(pid, orig, false); err != nil {
				t.Fatalf("run %d: %v\n%s", run, err, rec.stderr)
			}
			if strings.Contains(rec.stderr.String(), "once a signal handler had returned out of the patched code") {
				waits++
			}
			before := len(out.String())
			time.Sleep(300 * time.Millisecond)
			select {
			case err := <-done:
				t.Fatalf("run %d: the program ended after tprec was killed: %v\n%s", run, err, rec.stderr)
			default:
			}
			if len(out.String()) == before {
				t.Fatalf("run %d: the program stopped counting after tprec was killed", run)
			}
			target.Process.Kill()
			<-done
		}
		t.Logf("%s: the guardian waited for a handler in %d kills of 10", backend, waits)
	})
}

// testdata/sigafterlast.c: the main thread's last call is followed by a
// SIGALRM delivered in its computation, whose handler it is still running
// when a timer's SIGSEGV ends the worker, the end thread, in its read. After
// delivering that signal, the replay must stop the main thread where the
// recording ended with it running, as it does after a thread's last call;
// it used to look for the end thread's end in the main thread instead, which
// ran on: "still running ...; the recorded end rip was never reached" (a
// one-in-ten failure of TestThreadsTimerSignals, where the end caught the
// main thread at its handler's entry).
func TestSignalAfterLastCallOfAThread(t *testing.T) {
	requireRoot(t)
	prog := cc(t, "testdata/sigafterlast.c", t.TempDir())
	forBackends(t, func(t *testing.T, backend string) {
		ck, _ := recordMinimized(t, backend, prog, "1")
		out := replay(t, ck, "-v")
		if n := threadsVerified(t, out); n != 2 {
			t.Errorf("the replay ran %d threads, want 2", n)
		}
		if !strings.Contains(out, "SIGALRM: delivery point found in user code") {
			t.Errorf("the replay did not deliver SIGALRM in the main thread's computation:\n%s", out)
		}
	})
}

// racingKeep keeps 4 s of history for testdata/racing.c, which runs about
// 1.2 s: under the ptrace backend on a loaded machine its 1 ms sleeps took
// three times as long in one CI run, and the 2 s window began after the
// threads met.
var racingKeep = []string{"--keep", "16"}

// TestStoreRaceCutsTheWindow records two threads that meet through memory
// between their calls in an order replay does not keep, eager or late
// (testdata/racing.c store): a replay from before that moment reaches the end
// with a page that differs there. The dump's trial then keeps the later half
// of the window, which replays to the end, instead of falling back to every
// page with a replay that does not verify.
func TestStoreRaceCutsTheWindow(t *testing.T) {
	requireRoot(t)
	prog := cc(t, "testdata/racing.c", t.TempDir())
	forBackends(t, func(t *testing.T, backend string) {
		ck, log := recordMinimizedWith(t, racingKeep, backend, prog, "store")
		if !strings.Contains(log, "; under the late schedule too: ") {
			t.Errorf("the trial did not try the late schedule, or it verified:\n%s", log)
		}
		if !strings.Contains(log, "diverged in its last interval") {
			t.Errorf("the trial did not meet the race at the end:\n%s", log)
		}
		// The copy the main thread made is the one word that differs, and
		// the divergence says so (the dump's live memory holds the page).
		if !strings.Contains(log, "content (1 byte differs: at 0x") || !strings.Contains(log, "recorded 00 00 00 00 00 00 00 00, replayed 01 00 00 00 00 00 00 00)") {
			t.Errorf("the divergence does not name the byte that differs:\n%s", log)
		}
		cut := 0
		for _, iv := range intervalsIn(t, ck) {
			if strings.Contains(iv.Reason, "diverged in the last interval") {
				cut++
			}
		}
		if cut == 0 {
			t.Errorf("no interval says why the window starts later")
		}
		replay(t, ck)
	})
}

// TestLateScheduleVerifiesTheWindow records two threads whose code between
// calls overlaps in the log (testdata/racing.c late): the other thread's
// read returns, the main thread's sleep returns and it stores a value, and
// the other thread, still spinning, copies it before its next call. The
// eager schedule runs the other thread's copy before the main thread's
// sleep, so the end differs; the dump's trial then tries the late schedule,
// which verifies the whole window, and the file says so. tpreplay replays
// it under that schedule, and under the eager one it diverges.
func TestLateScheduleVerifiesTheWindow(t *testing.T) {
	requireRoot(t)
	prog := cc(t, "testdata/racing.c", t.TempDir())
	forBackends(t, func(t *testing.T, backend string) {
		ck, log := recordMinimizedWith(t, racingKeep, backend, prog, "late")
		if !strings.Contains(log, "it verified under the late schedule") {
			t.Fatalf("the trial did not verify under the late schedule:\n%s", log)
		}
		var info struct {
			Process struct {
				Schedule string `json:"schedule"`
			} `json:"process"`
			Intervals []intervalInfo `json:"intervals"`
		}
		inspectJSON(t, ck, &info)
		if info.Process.Schedule != "late" {
			t.Errorf("the file says schedule %q, want late", info.Process.Schedule)
		}
		// The first interval, the loader's, is never replayable; no
		// other one is left out.
		replayable := 0
		for i, iv := range info.Intervals {
			if iv.Replayable {
				replayable++
			} else if strings.Contains(iv.Reason, "trial replay") {
				t.Errorf("interval %d was cut from the window: %s", i, iv.Reason)
			}
		}
		got := replay(t, ck)
		if !strings.Contains(got, "threads run on the late schedule)") {
			t.Errorf("tpreplay does not say it ran the late schedule:\n%s", got)
		}
		if m := verifiedRe.FindStringSubmatch(got); m == nil || m[2] != fmt.Sprint(replayable) {
			t.Errorf("tpreplay did not replay the %d replayable intervals:\n%s", replayable, got)
		}
		eager, code := runTool(t, "tpreplay", "--schedule", "eager", ck)
		if code != 1 || !strings.Contains(eager, "divergence: ") {
			t.Errorf("tpreplay --schedule eager: exit %d, want a divergence (exit 1):\n%s", code, eager)
		}
		// gdb on the replay follows the file's schedule too: at the
		// other thread's copy the main thread has stored the value, and
		// the crash has the copy the recording made.
		target, _ := gdbTarget(t, ck)
		copyLine := lineOf(t, "testdata/racing.c", "state.seen = clockv;")
		out := runGDB(t, prog, target, fmt.Sprintf(`break racing.c:%d
continue
echo @@atcopy\n
print clockv
delete
continue
echo @@atcrash\n
print state.seen
`, copyLine))
		g := sections(out)
		if !strings.HasPrefix(g["atcopy"], "$1 = 1\n") || !strings.Contains(g["atcopy"], "received signal SIGSEGV") || !strings.HasPrefix(g["atcrash"], "$2 = 1\n") {
			t.Errorf("gdb on the replay: want the stored 1 at the copy and at the crash:\n%s", out)
		}
	})
}

// TestContendedLockNotContendedInReplay records a lock two threads
// contended for (testdata/racing.c lock): the waiter waited in futex and the
// holder's release woke it, calls a replay, which runs the holder's critical
// section at once, does not make. Those futex calls are skipped and the
// whole window replays to the verified crash.
func TestContendedLockNotContendedInReplay(t *testing.T) {
	requireRoot(t)
	prog := cc(t, "testdata/racing.c", t.TempDir())
	forBackends(t, func(t *testing.T, backend string) {
		ck, log := recordMinimizedWith(t, racingKeep, backend, prog, "lock")
		if strings.Contains(log, "diverged") {
			t.Errorf("the trial diverged:\n%s", log)
		}
		// The window holds the contention: its replay skips the calls.
		out := replay(t, ck, "-v")
		if n := strings.Count(out, "not made, the lock was not contended in the replay"); n != 3 {
			t.Errorf("%d futex calls skipped, want 3 (the holder's wake, the waiter's wait and its own wake):\n%s", n, out)
		}
		if n := threadsVerified(t, out); n != 2 {
			t.Errorf("the replay ran %d threads, want 2", n)
		}
	})
}

// The same contention, but replay resumes the lock's holder for the futex
// wake of its release, which it then skips (racing.c lockspin): the
// holder was resumed under PTRACE_SYSEMU, where the kernel skips whatever
// call the thread makes. The call it made instead, one replay executes for
// real, failed the trial ("stopped under SYSEMU but must run for real"),
// or, when the thread was parked there for another one, came back with
// -ENOSYS. The thread now makes its call again. What replay still cannot
// match is the stack below the main thread's end (the recording's lock
// wait left its frames there): the trial keeps a later part of the window.
func TestSkippedWakeUnderSysemu(t *testing.T) {
	requireRoot(t)
	prog := cc(t, "testdata/racing.c", t.TempDir())
	forBackends(t, func(t *testing.T, backend string) {
		ck, log := recordMinimizedWith(t, racingKeep, backend, prog, "lockspin")
		for _, bad := range []string{"stopped under SYSEMU", "executed for real gave another result"} {
			if strings.Contains(log, bad) {
				t.Errorf("the trial met %q:\n%s", bad, log)
			}
		}
		replay(t, ck)
	})
}

// A thread woken through a condition variable's futex waits for the mutex
// its waker holds, but its FUTEX_WAIT comes after the release and returns
// EAGAIN; the release's own wake comes later (testdata/condagain.c). Replay
// held the waker at its signal until the woken thread had run, as for a
// condition variable signalled under its mutex, so the woken thread found
// the mutex still held and waited again: every trial diverged. Seen in a
// soak run of redis-server, its main thread waking jemalloc's background
// thread. The waker now runs on to its release first.
func TestWokenThreadFindsMutexReleased(t *testing.T) {
	requireRoot(t)
	prog := cc(t, "testdata/condagain.c", t.TempDir())
	forBackends(t, func(t *testing.T, backend string) {
		// The exchange is at the start; under a loaded CI the spin and
		// the sleep after it took longer than 8 intervals, and the window
		// held the main thread alone: keep 10 s.
		ck, log := recordMinimizedWith(t, []string{"--keep", "40"}, backend, prog)
		if strings.Contains(log, "diverged") {
			t.Fatalf("want a trial replay that succeeded at once:\n%s", log)
		}
		if n := threadsVerified(t, replay(t, ck)); n != 2 {
			t.Errorf("the replay ran %d threads, want 2", n)
		}
	})
}

// A thread cloned just as its group dies of another thread's crash may
// never be reported to tprec: its parent is killed before it stops at its
// clone event. The new thread is traced all the same and stops at its exit
// event, and the process cannot finish dying until tprec lets it go
// (testdata/clonestorm.c crashes while three threads start threads as fast
// as they can). tprec waited for the process to end forever, in 5 of 6
// runs, with the process a zombie and its listening sockets, had it any,
// still open. Here tprec must end, having written the checkpoint, and the
// process with it, three times in a row.
func TestCrashWhileThreadsStart(t *testing.T) {
	requireRoot(t)
	prog := cc(t, "testdata/clonestorm.c", t.TempDir())
	forBackends(t, func(t *testing.T, backend string) {
		for run := 0; run < 3; run++ {
			dir := t.TempDir()
			rec := startTprec(t, "--backend", backend, "-o", dir, "--", prog, "0.4")
			rec.waitRecording(t)
			var pid int
			for _, l := range strings.Split(rec.stderr.String(), "\n") {
				if _, err := fmt.Sscanf(l, "tprec: recording process %d", &pid); err == nil {
					break
				}
			}
			select {
			case <-rec.done:
			case <-time.After(60 * time.Second):
				states := threadStates(pid)
				t.Fatalf("run %d: tprec did not end within 60 s of a crash; the process's threads:\n%s\ntprec:\n%s", run, states, rec.quit())
			}
			if len(checkpoints(t, dir)) != 1 {
				t.Fatalf("run %d: want one checkpoint:\n%s", run, rec.stderr)
			}
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); pid == 0 || err == nil {
				t.Fatalf("run %d: process %d still there after tprec ended:\n%s", run, pid, threadStates(pid))
			}
		}
	})
}

// testdata/countworker.c: the main thread counts in memory with `lock add`,
// its registers the same at every pass of its loop, and a crash is sent to
// its worker, in a poll. Replay held the main thread at the first pass with
// the recorded registers, where the count was not the recorded one, and the
// worker's end never matched: "made a syscall after the last recorded one",
// and the file kept every page. node met the same (a crash its epoll thread
// took while V8's allocation code ran in the main thread) in CI. The held
// thread now goes on to its next pass until the end matches (threads.go,
// passOnFromEnd), its passes compared in the process with the word that
// differed (the count), whose page the file keeps. Both backends.
func TestCountingThreadAtEnd(t *testing.T) {
	requireRoot(t)
	prog := cc(t, "testdata/countworker.c", t.TempDir())
	forBackends(t, func(t *testing.T, backend string) {
		target, out, done := startTarget(t, prog)
		waitReady(t, out)
		pid := target.Process.Pid
		worker := 0
		for _, tid := range tids(t, pid) {
			if tid != pid {
				worker = tid
			}
		}
		if worker == 0 {
			t.Fatal("countworker did not start its worker")
		}
		ck, log := crashWith(t, target, done, time.Second, func(pid int) error { return unix.Tgkill(pid, worker, unix.SIGSEGV) }, "--backend", backend)
		wantMinimized(t, ck, log)
		rep := replay(t, ck, "-v")
		if threadsVerified(t, rep) != 2 {
			t.Fatalf("want both threads in the replay:\n%s", rep)
		}
		if !strings.Contains(rep, fmt.Sprintf("thread %d's stop search compares the word at", pid)) || !strings.Contains(rep, "had gone on to a later pass") {
			t.Fatalf("the main thread was not taken on from its first pass to the recorded one:\n%s", rep)
		}
		// Under gdb every pass would be a ptrace stop (hours of them): the
		// main thread stays at its first pass, and the divergence says why.
		g := runGDB(t, prog, "| "+filepath.Join(tools(t), "tpreplay")+" --gdb-stdio "+ck, "continue\n")
		if !strings.Contains(g, fmt.Sprintf("under a debugger thread %d stays at the first pass over its stop", pid)) {
			t.Fatalf("gdb's continue did not end in a divergence that names the held thread:\n%s", g)
		}
	})
}
