package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// An interpreter with a 500 MB heap that, in the recorded window, touches a
// little of it and does I/O: the default checkpoint holds only what the
// window touched (a few MB), --full-pages holds the whole heap, and both
// replay to the recorded crash.
const bigHeapScript = `
import os, sys, time
blob = os.urandom(500 << 20)        # 500 MB that no page deduplication can shrink
d = sys.argv[1]
with open(os.path.join(d, "input.txt"), "w") as f:
    f.write("some input line\n" * 1000)
print("ready", flush=True)
i = 0
total = 0
while True:
    with open(os.path.join(d, "input.txt")) as f:
        total += len(f.read())
    total += blob[(i * 7919) % 1000]
    i += 1
    time.time()
`

func TestPython3LargeHeapCheckpointSize(t *testing.T) {
	requireRoot(t)
	sizes := map[string]int64{}
	for _, mode := range []string{"minimized", "full-pages"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			script := filepath.Join(dir, "heap.py")
			if err := os.WriteFile(script, []byte(bigHeapScript), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("/usr/bin/python3", "-S", script, dir)
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				sc := bufio.NewScanner(stdout)
				for sc.Scan() {
				}
				done <- cmd.Wait()
			}()
			t.Cleanup(func() {
				if cmd.ProcessState == nil {
					cmd.Process.Kill()
					<-done
				}
			})
			// Wait until the heap is built.
			deadline := time.Now().Add(60 * time.Second)
			for {
				if rss := residentMB(cmd.Process.Pid); rss > 500 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("python3 did not build its 500 MB heap")
				}
				time.Sleep(100 * time.Millisecond)
			}
			time.Sleep(300 * time.Millisecond)
			var extra []string
			if mode == "full-pages" {
				extra = []string{"--full-pages"}
			}
			ck := attachAndCrash(t, cmd, done, 1500*time.Millisecond, extra...)
			st, err := os.Stat(ck)
			if err != nil {
				t.Fatal(err)
			}
			sizes[mode] = st.Size()
			t.Logf("%s checkpoint: %.1f MB", mode, float64(st.Size())/1e6)
			replay(t, ck)
		})
	}
	if m := sizes["minimized"]; m == 0 || m >= 5e6 {
		t.Errorf("minimized checkpoint is %d bytes, want under 5 MB", m)
	}
	if f := sizes["full-pages"]; f <= 500e6 {
		t.Errorf("--full-pages checkpoint is %d bytes, want over 500 MB", f)
	}
}

// residentMB reads VmRSS of a process in MB.
func residentMB(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			var kb int
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
			return kb / 1024
		}
	}
	return 0
}

// A python3 that rewrites the same 4 MB of its heap with fresh random bytes
// all the time (in-process, no syscalls), reading a file and the clock in
// between: every interval writes a new version of about 1,000 pages. The
// default checkpoint stores one version of each (the start of the window's
// first interval); --all-starts stores every interval's originals. Both
// verify, and so does a replay asked to start at the last interval: from
// that interval itself with every start stored, from the stored start
// through it otherwise (and tpreplay says so).
const rewriteScript = `
import os, random, sys, time
random.seed(7)
buf = bytearray(4 << 20)
path = os.path.join(sys.argv[1], "input.txt")
with open(path, "w") as f:
    f.write("some input line\n" * 100)
print("ready", flush=True)
off = 0
while True:
    buf[off:off + 65536] = random.randbytes(65536)
    off = (off + 65536) % len(buf)
    with open(path) as f:
        f.read()
    time.time()
`

func TestPython3OneStoredStart(t *testing.T) {
	requireRoot(t)
	type result struct {
		ck   string
		size int64
	}
	res := map[string]result{}
	for _, mode := range []string{"default", "all-starts"} {
		dir := t.TempDir()
		script := filepath.Join(dir, "rewrite.py")
		if err := os.WriteFile(script, []byte(rewriteScript), 0o644); err != nil {
			t.Fatal(err)
		}
		target, out, done := startTarget(t, "/usr/bin/python3", "-S", script, dir)
		waitReady(t, out)
		var extra []string
		if mode == "all-starts" {
			extra = []string{"--all-starts"}
		}
		ck := attachAndCrash(t, target, done, 1500*time.Millisecond, extra...)
		st, err := os.Stat(ck)
		if err != nil {
			t.Fatal(err)
		}
		res[mode] = result{ck, st.Size()}
		t.Logf("%s: %.1f MB", mode, float64(st.Size())/1e6)
		// The trial replay must have succeeded: a fallback to every
		// present page would make both files large and prove nothing.
		if note := pageSetNote(t, ck); !strings.HasPrefix(note, "pages touched by a trial replay") {
			t.Fatalf("%s: not minimized: %s", mode, note)
		}
		replay(t, ck)
		idx := intervalsOf(t, ck)
		if len(idx) < 3 {
			t.Fatalf("%s: only %d replayable intervals", mode, len(idx))
		}
		last := idx[len(idx)-1]
		got, code := runTool(t, "tpreplay", "--from", fmt.Sprint(last), ck)
		note := fmt.Sprintf("does not store the start of interval %d; replayed from interval %d", last, idx[0])
		switch {
		case code != 0 || !verifiedRe.MatchString(got):
			t.Errorf("%s: --from %d: exit %d:\n%s", mode, last, code, got)
		case mode == "default" && !strings.Contains(got, note):
			t.Errorf("default: --from %d does not say %q:\n%s", last, note, got)
		case mode == "all-starts" && (strings.Contains(got, "does not store") || !strings.Contains(got, " 1 intervals,")):
			t.Errorf("--all-starts: --from %d did not start there:\n%s", last, got)
		}
	}
	if d, a := res["default"].size, res["all-starts"].size; d*2 > a {
		t.Errorf("one stored start: %d bytes, every start: %d bytes; want at most half", d, a)
	}
}

// pageSetNote is the checkpoint's note on its page set (tpinspect --json).
func pageSetNote(t *testing.T, ckpt string) string {
	t.Helper()
	var v struct {
		Process struct {
			Note string `json:"page_set_note"`
		} `json:"process"`
	}
	inspectJSON(t, ckpt, &v)
	return v.Process.Note
}

// freshScript reads and then writes one page of a large private anonymous
// mapping per iteration: pages no one touched before, which started the
// interval they are first written in as zeros. A page read as anything else
// makes a call the recording never saw, which a replay reports.
const freshScript = `
import mmap, os, time
buf = mmap.mmap(-1, 64 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
print("ready", flush=True)
i = 0
while True:
    off = (i * 4096) % len(buf)
    v = buf[off]
    if v != 0:
        os.getppid()
    buf[off] = (v + 7) % 256
    i += 1
    time.sleep(0.0005)
`

// A page the program first touches in an interval started that interval as
// zeros: the recorder records it so without reading it from the shadow
// (writtenAndFresh), and a replay from every interval start, each stored
// (--all-starts), still reaches the recorded crash, which it would not if
// such a page had another original or none.
func TestFreshPagesStartAsZeros(t *testing.T) {
	requireRoot(t)
	t.Setenv("TPREC_DEBUG", "1")
	forBackends(t, func(t *testing.T, backend string) {
		dir := t.TempDir()
		script := filepath.Join(dir, "fresh.py")
		if err := os.WriteFile(script, []byte(freshScript), 0o644); err != nil {
			t.Fatal(err)
		}
		target, out, done := startTarget(t, "/usr/bin/python3", "-S", script)
		waitReady(t, out)
		ck, stderr := crashWith(t, target, done, 1500*time.Millisecond,
			func(pid int) error { return syscall.Kill(pid, syscall.SIGSEGV) }, "--backend", backend, "--all-starts")
		fresh := 0
		for _, m := range freshRe.FindAllStringSubmatch(stderr, -1) {
			n, _ := strconv.Atoi(m[1])
			fresh += n
		}
		if fresh == 0 {
			t.Fatalf("no boundary found a fresh page written:\n%s", stderr)
		}
		idx := intervalsOf(t, ck)
		if len(idx) < 3 {
			t.Fatalf("only %d replayable intervals", len(idx))
		}
		for _, k := range idx {
			got, code := runTool(t, "tpreplay", "--from", fmt.Sprint(k), ck)
			if code != 0 || !verifiedRe.MatchString(got) {
				keepFailed(t, ck)
				t.Fatalf("--from %d: exit %d:\n%s", k, code, got)
			}
		}
		t.Logf("%d fresh pages written in the recording; replays from %d interval starts verified", fresh, len(idx))
	})
}

var freshRe = regexp.MustCompile(`written, (\d+) of them fresh\)`)

// The trial replay finds where the recording ended after the window's last
// call by the code at the end's rip, and a page nothing ran before in the
// window is served there. An emulated last call completed at its
// PTRACE_SYSEMU entry left the program where no mprotect can be injected,
// and the trial failed ("inject syscall 10: stopped at ..."): the dump then
// wrote every page. lastcall.c reads /dev/zero, then spins on a page of its
// own until a timer's SIGSEGV ends it.
func TestEndPageServedAfterLastCall(t *testing.T) {
	requireRoot(t)
	prog := cc(t, "testdata/lastcall.c", t.TempDir())
	forBackends(t, func(t *testing.T, backend string) {
		ck, _ := recordMinimized(t, backend, prog, "1")
		out := replay(t, ck)
		if !strings.Contains(out, "signal SIGSEGV") {
			t.Errorf("the replay did not end at the timer's SIGSEGV:\n%s", out)
		}
	})
}

// A boundary keeps the interval's shadow for the next interval while the
// pages that no longer share their frame with it are few (kept.go): it
// reads them from the stopped target, and the target then rewrites them
// without a copy-on-write fault. testdata/keptshadow.c rewrites the same
// pages all the time, which keeps the shadow, maps and drops others, and
// drops a page the shadow has, which has it forked again. The recording must do
// both, every interval must stay replayable through the trial replay, and
// a replay from every interval start (each stored, --all-starts) must
// reach the recorded crash. Each of the three rules of a kept shadow's
// originals, left out, failed it (by hand): the diverged pages' content
// from the start, the dropped ones written, none of them zeros.
func TestKeptShadowOriginals(t *testing.T) {
	requireRoot(t)
	t.Setenv("TPREC_DEBUG", "1")
	forBackends(t, func(t *testing.T, backend string) {
		target, out, done := startTarget(t, cc(t, "testdata/keptshadow.c", t.TempDir()))
		waitReady(t, out)
		ck, stderr := crashWith(t, target, done, 2800*time.Millisecond,
			func(pid int) error { return syscall.Kill(pid, syscall.SIGSEGV) }, "--backend", backend, "--all-starts", "--keep-shadow")
		kept, refork := strings.Count(stderr, "shadow kept ("), strings.Count(stderr, "shadow not kept: a diverged page is not in memory")
		if kept < 3 || refork == 0 {
			t.Fatalf("%d boundaries kept the shadow, %d forked it again for a dropped page; want both:\n%s", kept, refork, stderr)
		}
		if note := pageSetNote(t, ck); !strings.HasPrefix(note, "pages touched by a trial replay") {
			t.Fatalf("not minimized: %s", note)
		}
		// Every interval of the window: the trial replay, from its first,
		// would leave out those before one it diverged in.
		allReplayable(t, ck)
		ivs := intervalsIn(t, ck)
		if len(ivs) < 5 || t.Failed() {
			keepFailed(t, ck)
			t.Fatalf("%d intervals", len(ivs))
		}
		for _, iv := range ivs {
			got, code := runTool(t, "tpreplay", "--from", fmt.Sprint(iv.Index), ck)
			if code != 0 || !verifiedRe.MatchString(got) {
				keepFailed(t, ck)
				t.Fatalf("--from %d: exit %d:\n%s", iv.Index, code, got)
			}
		}
		t.Logf("%d boundaries kept the shadow, %d forked it again; replays from %d interval starts verified", kept, refork, len(ivs))
	})
}
