package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tprec/tprec/format"
)

// bigFile writes n bytes of text made of random words: compressible, and
// slow enough for gzip (about 30 MB/s here) that it is still running when
// the test crashes it.
func bigFile(t *testing.T, dir string, n int) string {
	t.Helper()
	p := filepath.Join(dir, "big.txt")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := mrand.New(mrand.NewPCG(1, 2))
	words := make([]string, 5000)
	for i := range words {
		w := make([]byte, 2+r.IntN(8))
		for j := range w {
			w[j] = 'a' + byte(r.IntN(16))
		}
		words[i] = string(w)
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	for written := 0; written < n; {
		for i := 0; i < 12; i++ {
			k, _ := bw.WriteString(words[r.IntN(len(words))])
			bw.WriteByte(' ')
			written += k + 1
		}
		bw.WriteByte('\n')
		written++
	}
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
	return p
}

// The bundled example, launched under tprec, crashes by itself; the replay
// reaches the same NULL dereference in crash_here.
func TestDemoCrashLaunched(t *testing.T) {
	requireRoot(t)
	forBackends(t, func(t *testing.T, backend string) {
		testDemoCrashLaunched(t, backend)
	})
}

func testDemoCrashLaunched(t *testing.T, backend string) {
	dir := t.TempDir()
	prog := cc(t, "../../examples/crashy.c", dir)
	ck := recordOne(t, dir, "--backend", backend, "--output", dir, "--", prog, "1.5")
	out := replay(t, ck)
	if !strings.Contains(out, "SIGSEGV") {
		t.Fatalf("replay does not name SIGSEGV:\n%s", out)
	}
}

func TestGzipAttached(t *testing.T) {
	requireRoot(t)
	gz, err := exec.LookPath("gzip")
	if err != nil {
		t.Fatal("gzip is not installed (.ci/run installs it)")
	}
	in := bigFile(t, t.TempDir(), 100<<20)
	forBackends(t, func(t *testing.T, backend string) {
		target, _, done := startTargetToFile(t, gz, "-c", in)
		ck := attachAndCrash(t, target, done, 1500*time.Millisecond, "--backend", backend)
		replay(t, ck)
	})
}

func TestSha256sumAttached(t *testing.T) {
	requireRoot(t)
	bin, err := exec.LookPath("sha256sum")
	if err != nil {
		t.Fatal("sha256sum is not installed")
	}
	// A sparse 16 GiB file: sha256sum reads it at full speed for longer than
	// the test needs, without writing gigabytes to disk.
	in := filepath.Join(t.TempDir(), "sparse.img")
	if err := os.Truncate(in, 0); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	f, err := os.Create(in)
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(16 << 30)
	f.Close()
	forBackends(t, func(t *testing.T, backend string) {
		target, _, done := startTarget(t, bin, in)
		ck := attachAndCrash(t, target, done, 1500*time.Millisecond, "--backend", backend)
		replay(t, ck)
	})
}

const pythonLoop = `
import os, sys, time
d = sys.argv[1]
names = []
for i in range(20):
    p = os.path.join(d, "f%d.txt" % i)
    with open(p, "w") as f:
        f.write(("line %d\n" % i) * 200)
    names.append(p)
total = 0
t0 = time.time()
n = 0
while True:
    for p in names:
        with open(p) as f:
            total += len(f.read())
        n += 1
        if time.time() - t0 > 120:
            sys.exit(0)
`

func TestPython3Attached(t *testing.T) {
	requireRoot(t)
	// Debian's interpreter, not one from a version manager on the PATH.
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Fatal("/usr/bin/python3 is not installed (.ci/run installs it)")
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "loop.py")
	if err := os.WriteFile(script, []byte(pythonLoop), 0o644); err != nil {
		t.Fatal(err)
	}
	forBackends(t, func(t *testing.T, backend string) {
		target, _, done := startTarget(t, py, "-S", script, dir)
		time.Sleep(300 * time.Millisecond) // let it get into its loop
		ck := attachAndCrash(t, target, done, 1500*time.Millisecond, "--backend", backend)
		replay(t, ck)
	})
}

// pythonMmapLoop maps a file, reads it through the mapping and unmaps it,
// over and over: every interval holds file mappings made and removed long
// before the boundary, whose content a replay needs.
const pythonMmapLoop = `
import mmap, os, sys, time
d = sys.argv[1]
p = os.path.join(d, "mapped.bin")
with open(p, "wb") as f:
    f.write(bytes(range(256)) * 64)
print("ready", flush=True)
t0 = time.time()
total = 0
while time.time() - t0 < 120:
    with open(p, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        total += m[1000] + m[9000]
        m.close()
`

// A file mapped and unmapped within one interval is replayed with its
// content. The ptrace backend opens the file at the mmap's exit stop; the
// eBPF programs stop the thread right after the mmap (a SIGURG the recorder
// intercepts) so that it can do the same.
func TestPython3MmapAttached(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "maploop.py")
	if err := os.WriteFile(script, []byte(pythonMmapLoop), 0o644); err != nil {
		t.Fatal(err)
	}
	forBackends(t, func(t *testing.T, backend string) {
		target, out, done := startTarget(t, "/usr/bin/python3", "-S", script, dir)
		waitReady(t, out)
		ck := attachAndCrash(t, target, done, 1200*time.Millisecond, "--backend", backend)
		replay(t, ck)
		// Every interval maps and unmaps the file; each must be replayable.
		ivs := intervalsIn(t, ck)
		if len(ivs) < 3 {
			t.Fatalf("only %d intervals", len(ivs))
		}
		for _, iv := range ivs {
			if !iv.Replayable {
				t.Errorf("interval %d is not replayable", iv.Index)
			}
		}
		calls, _ := runTool(t, "tpinspect", "--syscalls", ck)
		if !regexp.MustCompile(`mmap\(NULL, \d+, PROT_READ, MAP_SHARED, \d+`).MatchString(calls) || !strings.Contains(calls, "munmap(") {
			t.Errorf("the log holds no file mmap and munmap:\n%.3000s", calls)
		}
	})
}

// pythonMmapTwoFiles maps two files in turn, at the same address, computes
// past a boundary, then reads the mapping and makes a call that depends on
// which file it read: most intervals start with a file mapped and its pages
// not yet present, and the thread between two calls (where the trial replay
// may cut its pieces). It crashes itself with the file unmapped, so that the
// final pages have none of it.
const pythonMmapTwoFiles = `
import mmap, os, signal, sys
d = sys.argv[1]
names = []
for c in b"ab":
    p = os.path.join(d, "mapped-%c.bin" % c)
    with open(p, "wb") as f:
        f.write(bytes([c]) * 16384)
    names.append(p)
print("ready", flush=True)
for n in range(12):
    with open(names[n % 2], "rb") as f:
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        x = 0
        for i in range(3000000):
            x += i
        if m[1000] == ord("a"):
            os.getpid()
        else:
            os.getppid()
        m.close()
os.kill(os.getpid(), signal.SIGSEGV)
`

// Intervals that start with a file mapped by the interval before, not yet
// touched, replay from every start with the file's content, also with the
// shadow kept across boundaries. A kept shadow has none of a file mapped
// after its fork, or the other file where the two alternate, and it gave
// such pages no original, or the other file's: the trial replay of the
// kept run took getpid for getppid, and CI saw a replay touch a page no
// start state held (TestPython3MmapAttached/ptrace). A boundary now forks a
// new shadow when a file was mapped since the kept one's fork.
func TestPython3MmapAcrossBoundary(t *testing.T) {
	requireRoot(t)
	script, dir := pythonScript(t, "maptwo.py", pythonMmapTwoFiles), t.TempDir()
	forBackends(t, func(t *testing.T, backend string) {
		for _, shadow := range []string{"forked", "kept"} {
			t.Run(shadow, func(t *testing.T) {
				flags := []string{"--backend", backend, "--all-starts", "--keep-shadow=" + fmt.Sprint(shadow == "kept")}
				if shadow == "kept" {
					t.Setenv("TPREC_DEBUG", "1")
				}
				target, out, done := startTarget(t, "/usr/bin/python3", "-S", script, dir)
				waitReady(t, out)
				ck, log := crashWith(t, target, done, 0, func(int) error { return nil }, flags...)
				wantMinimized(t, ck, log)
				if shadow == "kept" && !strings.Contains(log, "shadow not kept: a file was mapped at") {
					t.Errorf("no boundary forked a new shadow for a file mapped since the kept one's fork:\n%s", log)
				}
				allReplayable(t, ck)
				ivs := intervalsIn(t, ck)
				if len(ivs) < 4 || t.Failed() {
					keepFailed(t, ck)
					t.Fatalf("%d intervals:\n%s", len(ivs), log)
				}
				// From every interval start, most with a file mapped and
				// untouched (the trial, in pieces, starts at some of them).
				for _, iv := range ivs {
					got, code := runTool(t, "tpreplay", "--from", fmt.Sprint(iv.Index), ck)
					if code != 0 || !verifiedRe.MatchString(got) {
						keepFailed(t, ck)
						t.Fatalf("--from %d: exit %d:\n%s", iv.Index, code, got)
					}
				}
			})
		}
	})
}

// startTargetToFile is startTarget with stdout into a temp file (gzip output
// is large).
func startTargetToFile(t *testing.T, name string, args ...string) (*exec.Cmd, string, chan error) {
	t.Helper()
	outPath := filepath.Join(t.TempDir(), "stdout")
	f, err := os.Create(outPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout = f
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-done
		}
	})
	return cmd, outPath, done
}

// Killing tprec with SIGKILL in the middle of a recording must not harm the
// target: it finishes with the same output as an unrecorded run, and no shadow
// process survives. tprec's guardian then puts the vDSO back as it was and
// has the target collect the dead shadows (before it, they stayed zombie
// children of the target, and its clock reads syscalls, until it exited).
func TestTargetUnharmedWhenTprecKilled(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	in := bigFile(t, dir, 48<<20)
	gz, err := exec.LookPath("gzip")
	if err != nil {
		t.Fatal("gzip is not installed")
	}
	// gzip -c | sha256 of the output, unrecorded.
	ref, err := exec.Command("sh", "-c", fmt.Sprintf("%s -c %s | sha256sum", gz, in)).Output()
	if err != nil {
		t.Fatal(err)
	}
	target, outPath, done := startTargetToFile(t, gz, "-c", in)
	pid := target.Process.Pid
	orig := vdsoBytes(t, os.Getpid()) // the kernel maps the same image into every process
	rec := startTprec(t, "--pid", fmt.Sprint(pid), "--output", dir, "--interval", "100ms")
	rec.waitRecording(t)
	time.Sleep(730 * time.Millisecond) // mid-interval
	shadows := childrenOf(pid)
	if len(shadows) == 0 {
		t.Fatalf("no shadow process seen while recording (the test would prove nothing)")
	}
	rec.cmd.Process.Kill()
	rec.wait(t, 10*time.Second)
	// The shadow dies with tprec (PTRACE_O_EXITKILL); it may stay a zombie
	// child of the target until the target exits, but never runs again.
	time.Sleep(200 * time.Millisecond)
	for _, s := range shadows {
		if st := procState(s); st != "" && st != "Z" && st != "X" {
			t.Fatalf("shadow %d is alive after tprec was killed (state %s)", s, st)
		}
	}
	if tr := tracerOf(t, pid); tr != "0" {
		t.Fatalf("the target is still traced by %s", tr)
	}
	if err := repaired(pid, orig, true); err != nil {
		t.Fatalf("after tprec was killed: %v\n%s", err, rec.stderr)
	}
	if err := <-done; err != nil {
		t.Fatalf("gzip failed after tprec was killed: %v", err)
	}
	got, err := exec.Command("sh", "-c", "sha256sum < "+outPath).Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Fields(string(got))[0] != strings.Fields(string(ref))[0] {
		t.Fatalf("output differs from an unrecorded run")
	}
	for _, s := range shadows {
		if st := procState(s); st != "" && st != "Z" && st != "X" {
			t.Fatalf("shadow %d survived the target (state %s)", s, st)
		}
	}
}

// repaired waits up to 10 s for the guardian of a killed tprec to restore
// the vDSO of process pid to orig and have it collect every child (the
// programs tested with it have none of their own). A process that ends
// meanwhile passes only if mayEnd.
func repaired(pid int, orig []byte, mayEnd bool) error {
	var err error
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if st := procState(pid); st == "Z" || st == "" {
			if mayEnd {
				return nil // nothing left to see
			}
			return fmt.Errorf("the process ended before it was repaired (%v)", err)
		}
		b, rerr := vdsoOf(pid)
		switch {
		case rerr != nil:
			return fmt.Errorf("the target's vDSO: %v", rerr)
		case !bytes.Equal(b, orig):
			err = fmt.Errorf("the vDSO is still patched")
		case len(childrenOf(pid)) > 0:
			err = fmt.Errorf("the target still has children %v (states %v)", childrenOf(pid), statesOf(childrenOf(pid)))
		default:
			return nil
		}
	}
	return err
}

func statesOf(pids []int) []string {
	var out []string
	for _, p := range pids {
		out = append(out, procState(p))
	}
	return out
}

// A tprec killed with SIGKILL leaves the recorded process as it found it
// once its guardian has seen to it: the vDSO's original code back, so the
// clock is read without a syscall again, and the dead shadows collected, not
// zombie children of the process until it exits. The process, Debian's
// python3 reading the clock in a loop, runs on meanwhile; both backends.
func TestGuardianRepairsAfterTprecKilled(t *testing.T) {
	requireRoot(t)
	orig := vdsoBytes(t, os.Getpid()) // the kernel maps the same image into every process
	forBackends(t, func(t *testing.T, backend string) {
		target, _, done := startTarget(t, "/usr/bin/python3", "-S", "-c", "import time\nwhile True:\n    time.time()\n    time.sleep(0.001)")
		pid := target.Process.Pid
		rec := startTprec(t, "--backend", backend, "--pid", fmt.Sprint(pid), "--output", t.TempDir())
		rec.waitRecording(t)
		time.Sleep(700 * time.Millisecond)
		if bytes.Equal(vdsoBytes(t, pid), orig) || len(childrenOf(pid)) == 0 {
			t.Fatal("the vDSO is not patched, or there is no shadow, while recording: the test would prove nothing")
		}
		killedAndRepaired(t, rec, pid, orig, done)
	})
}

// killedAndRepaired kills tprec with SIGKILL and requires that its guardian
// repair process pid (vDSO as orig, no children, not traced) and say so,
// and that the process, whose end done reports, runs on.
func killedAndRepaired(t *testing.T, rec *recording, pid int, orig []byte, done chan error) {
	t.Helper()
	rec.cmd.Process.Kill()
	if err := repaired(pid, orig, false); err != nil {
		t.Fatalf("after tprec was killed: %v\n%s", err, rec.stderr)
	}
	// The guardian restores the vDSO and collects the shadows, then
	// detaches: a CI run looked between the two.
	tr := tracerOf(t, pid)
	for end := time.Now().Add(10 * time.Second); tr != "0" && time.Now().Before(end); tr = tracerOf(t, pid) {
		time.Sleep(20 * time.Millisecond)
	}
	if tr != "0" {
		t.Fatalf("still traced by %s 10 s after tprec was killed", tr)
	}
	rec.wait(t, 10*time.Second)
	if !strings.Contains(rec.stderr.String(), "tprec guardian: tprec ended without detaching from process") {
		t.Errorf("the guardian did not say what it did:\n%s", rec.stderr)
	}
	stillRuns(t, done, "the target")
}

// stillRuns fails the test if the process whose end done reports has ended.
func stillRuns(t *testing.T, done chan error, name string) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("%s ended: %v", name, err)
	default:
	}
}

// procState is the state letter of a process ("" when it does not exist).
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return ""
	}
	return s[i+2 : i+3]
}

// childrenOf lists the child processes of pid.
func childrenOf(pid int) []int {
	var out []int
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	for _, f := range strings.Fields(string(b)) {
		var c int
		fmt.Sscan(f, &c)
		out = append(out, c)
	}
	return out
}

// The replayed program creates, writes and unlinks files; the replay must not
// touch the host: the directory it used stays as it is, and with --output-dir
// its writes land there instead.
func TestReplayNeverTouchesHost(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	prog := cc(t, "testdata/fileio.c", dir)
	work := filepath.Join(dir, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	ck := recordOne(t, dir, "--output", dir, "--", prog, work, "1.5")
	// Leave a file where the program creates and unlinks its files: a replay
	// that really ran open(O_TRUNC) or unlink would change or remove it.
	sentinel := filepath.Join(work, "round-0.txt")
	if err := os.WriteFile(sentinel, []byte("host file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := listDir(t, work)
	outDir := filepath.Join(dir, "replay-out")
	replay(t, ck, "--output-dir", outDir)
	if after := listDir(t, work); after != before {
		t.Fatalf("replay changed the host directory:\nbefore %s\nafter  %s", before, after)
	}
	if b, _ := os.ReadFile(sentinel); string(b) != "host file\n" {
		t.Fatalf("replay changed a host file: %q", b)
	}
	// stdout of the program (fd 1) was captured from the replay.
	b, err := os.ReadFile(filepath.Join(outDir, "fd-1.out"))
	if err != nil || !strings.Contains(string(b), "round ") {
		t.Fatalf("no captured stdout: %v %q", err, b)
	}
}

func listDir(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range ents {
		info, _ := e.Info()
		fmt.Fprintf(&b, "%s:%d:%v ", e.Name(), info.Size(), info.ModTime().UnixNano())
	}
	return b.String()
}

// A program launched by tprec that crashes within its first interval:
// the dynamic loader's start-up reads the time stamp counter and cpuid,
// which the log cannot hold, so the interval ends at the program's entry
// point and the replay starts there. Debian's /bin/sh counts in a loop and
// kills itself with SIGSEGV, a fraction of a second after its exec.
func TestCrashInFirstInterval(t *testing.T) {
	requireRoot(t)
	forBackends(t, func(t *testing.T, backend string) {
		dir := t.TempDir()
		script := `i=0; while [ $i -lt 30000 ]; do i=$((i+1)); done; kill -SEGV $$`
		ck := recordOne(t, dir, "--backend", backend, "-o", dir, "--", "/bin/sh", "-c", script)
		var info struct {
			Intervals []struct {
				Index      int    `json:"index"`
				Replayable bool   `json:"replayable"`
				Reason     string `json:"reason"`
			} `json:"intervals"`
		}
		out := inspectJSON(t, ck, &info)
		if len(info.Intervals) < 2 || info.Intervals[0].Replayable || !strings.Contains(info.Intervals[0].Reason, "dynamic loader") {
			t.Fatalf("want a first interval ending at the entry point, not replayable because of the loader:\n%s", out)
		}
		replay(t, ck)
	})
}

// python3 maps an 8 MB file again and again, reading 64 KiB of each MiB, a
// different 64 KiB each time, and unmaps it. The minimized checkpoint keeps,
// for each mapping, the pages the trial touched in that mapping, not every
// page of it at an address touched in any of them: it kept all 2,048 pages
// of each mapping, and a 20 MB file mapped 480 times in 2 s made a tpreplay
// of 35 s. The dump reads each page of the file once, not once a mapping.
func TestFileMappedAgainAndAgain(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	data := make([]byte, 8<<20)
	for i := range data {
		data[i] = byte(i*7 + i>>12)
	}
	if err := os.WriteFile(filepath.Join(dir, "data"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	forBackends(t, func(t *testing.T, backend string) {
		ck := crashRemapLoop(t, dir, 65536, backend)
		f, err := format.Open(ck)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		maps, most, kept := 0, 0, 0
		for _, rec := range f.Checkpoint.Syscalls {
			if rec.Nr == syscall.SYS_MMAP && rec.Args[1] == uint64(len(data)) {
				maps++
				most = max(most, len(rec.Pages))
				kept += len(rec.Pages)
			}
		}
		t.Logf("%d mappings of the file in the window, %d of their pages kept in all, at most %d of one", maps, kept, most)
		if maps < 16 {
			t.Fatalf("%d mappings of the file in the window; the test wants at least 16", maps)
		}
		// Each mapping has 16 pages of each of its 8 MiB read: 128. The
		// mapping a piece of the trial ends in may also keep the pages the
		// end's digests compare.
		if kept > 2*128*maps {
			t.Errorf("the mappings kept %d pages, %.0f each; each touched 128 of its 2,048", kept, float64(kept)/float64(maps))
		}
		replay(t, ck)
	})
}

// A file mapping larger than the dump reads whole (64 MiB), made and
// unmapped in the window: the trial reads the pages of it the replay
// touches, and the checkpoint keeps them with the mapping's record. Before,
// only the pages of the final page set went in, and a replay reached a page
// the checkpoint lacked ("content not recorded"): python3 here, glibc's
// iconv over large inputs, which maps each whole.
func TestLargeFileMappedInWindow(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	const size = 72 << 20
	f, err := os.Create(filepath.Join(dir, "data"))
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	for i := 0; i < size>>20; i++ {
		for j := range chunk {
			chunk[j] = byte(i + j*13 + j>>12)
		}
		if _, err := f.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	forBackends(t, func(t *testing.T, backend string) {
		ck := crashRemapLoop(t, dir, 4096, backend)
		f, err := format.Open(ck)
		if err != nil {
			t.Fatal(err)
		}
		// A mapping the replay runs through reads 72 pages (one of each
		// MiB); those before the replay's start keep none.
		maps, whole := 0, 0
		for _, rec := range f.Checkpoint.Syscalls {
			if rec.Nr == syscall.SYS_MMAP && rec.Args[1] == size {
				maps++
				if len(rec.Pages) >= 72 {
					whole++
				}
			}
		}
		f.Close()
		t.Logf("%d mappings of the file in the window, %d of them with the 72 pages they read", maps, whole)
		if whole < 4 {
			t.Fatalf("%d of %d mappings of the file keep the 72 pages each reads: want at least 4", whole, maps)
		}
		replay(t, ck)
	})
}

// crashRemapLoop runs python3 mapping dir/data again and again, reading n
// bytes of each MiB of it at an offset that moves by 64 KiB each time, and
// unmapping it; records it with backend, crashes it with SIGSEGV and
// returns its checkpoint, which the trial minimized.
func crashRemapLoop(t *testing.T, dir string, n int, backend string) string {
	t.Helper()
	script := pythonScript(t, "remap.py", fmt.Sprintf(`
import hashlib, mmap, os, sys
path = os.path.join(sys.argv[1], "data")
h = hashlib.md5()
i = 0
while True:
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        for off in range((i %% 16) << 16, len(m), 1 << 20):
            h.update(m[off:off + %d])
        m.close()
    i += 1
`, n))
	target, _, done := startTarget(t, "/usr/bin/python3", "-S", script, dir)
	time.Sleep(300 * time.Millisecond)
	ck, log := crashWith(t, target, done, 1500*time.Millisecond, func(pid int) error { return syscall.Kill(pid, syscall.SIGSEGV) }, "--backend", backend)
	wantMinimized(t, ck, log)
	return ck
}

// largeReadScript reads a 12 MB file whole, one read(2) of its size, again
// and again for a second (python3's f.read()), then crashes.
const largeReadScript = `import ctypes, os, sys, time, zlib
path = os.path.join(sys.argv[1], "big.txt")
with open(path, "wb") as f:
    for i in range(12 * 1024):
        f.write(("%07d " % i).encode() * 128)
t = 0
end = time.time() + 1.0
while time.time() < end:
    with open(path, "rb") as f:
        data = f.read()
    t = zlib.crc32(data[-4096:], t)
print(t, len(data), flush=True)
ctypes.string_at(0)
`

// One call that returns 12 MB: the eBPF programs copied at most 1 MiB of a
// call's output, so python3 reading a file whole (and sort's 1.5 MB reads, a
// 4 MB getrandom) made the interval unreplayable under eBPF, not under
// ptrace. They now copy up to a quarter of the ring buffer (16 MiB by
// default), and the reader joins the call's 32 KiB pieces in one copy
// (appending them one by one took it 2.4 s for such a read, the process
// held for it at the crash: recorder.TestCapturedMemJoinsManyPieces).
func TestLargeReadsReplay(t *testing.T) {
	requireRoot(t)
	forBackends(t, func(t *testing.T, backend string) {
		script := pythonScript(t, "bigread.py", largeReadScript)
		ck, log := recordMinimized(t, backend, "/usr/bin/python3", "-S", script, t.TempDir())
		replayableToCrash(t, ck, log, "not captured")
	})
}

// A guardian killed while tprec records (a pkill matching its name, or, in
// a sweep, a crash signal meant for the target) left tprec recording
// without its safety net. tprec now starts another one, tells it the
// shadows alive, and says so: when tprec is then killed with SIGKILL, the
// new guardian puts Debian's python3 back as it was (vDSO, shadows) and it
// runs on. Before the kill, recording went on: a requested dump verifies.
func TestGuardianRestarted(t *testing.T) {
	requireRoot(t)
	orig := vdsoBytes(t, os.Getpid()) // the kernel maps the same image into every process
	target, _, done := startTarget(t, "/usr/bin/python3", "-S", "-c", "import time\nwhile True:\n    time.time()\n    time.sleep(0.001)")
	pid := target.Process.Pid
	out := t.TempDir()
	rec := startTprec(t, "--pid", fmt.Sprint(pid), "--output", out)
	rec.waitRecording(t)
	guardianOf := func() int {
		for _, c := range childStates(t, rec.cmd.Process.Pid) { // of every thread: any may have started it
			id, _, _ := strings.Cut(c, " ")
			if b, _ := os.ReadFile("/proc/" + id + "/cmdline"); strings.HasPrefix(string(b), "tprec-guardian\x00") {
				var g int
				fmt.Sscan(id, &g)
				return g
			}
		}
		return 0
	}
	guardian := guardianOf()
	if guardian == 0 {
		t.Fatalf("no guardian among tprec's children")
	}
	time.Sleep(600 * time.Millisecond) // shadows made before the restart, which the next guardian must hear of
	if err := syscall.Kill(guardian, syscall.SIGSEGV); err != nil {
		t.Fatal(err)
	}
	said := regexp.MustCompile(fmt.Sprintf(`tprec's guardian \(process %d\) ended \([^)]*\): started another one \(process (\d+)\)`, guardian))
	var m []string
	for deadline := time.Now().Add(10 * time.Second); m == nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("tprec did not report its guardian's end and a new one:\n%s", rec.quit())
		}
		m = said.FindStringSubmatch(rec.stderr.String())
	}
	if g := guardianOf(); fmt.Sprint(g) != m[1] {
		t.Fatalf("tprec says guardian %s took over; its guardian child is %d", m[1], g)
	}
	time.Sleep(600 * time.Millisecond)
	if err := rec.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	rec.waitSaid(t, " wrote ", 30*time.Second)
	cks := checkpoints(t, out)
	if len(cks) != 1 {
		t.Fatalf("checkpoints %v after one SIGUSR2", cks)
	}
	if bytes.Equal(vdsoBytes(t, pid), orig) || len(childrenOf(pid)) == 0 {
		t.Fatal("the vDSO is not patched, or there is no shadow, while recording: the test would prove nothing")
	}
	killedAndRepaired(t, rec, pid, orig, done)
	replay(t, cks[0])
}

// A shadow goes by its own name, not the target's: `pgrep -x python3` meant
// for the recorded process must not find its stopped copies (`pgrep -n`
// found the newest shadow alone), neither the interval's shadow nor the
// dump shadow that outlives a requested dump's stop.
func TestShadowsNamed(t *testing.T) {
	requireRoot(t)
	forBackends(t, func(t *testing.T, backend string) {
		target, _, done := startTarget(t, "/usr/bin/python3", "-S", "-c", "import time\nd = {}\nwhile True:\n    d[len(d) % 4096] = time.time()\n    time.sleep(0.001)")
		pid := target.Process.Pid
		out := t.TempDir()
		rec := startTprec(t, "--backend", backend, "--pid", fmt.Sprint(pid), "--output", out)
		rec.waitRecording(t)
		// Every child of the target, by name; a child named as the
		// target fails the test at once.
		shadows := map[string]bool{}
		look := func(when string) {
			t.Helper()
			for _, c := range childStates(t, pid) {
				id, state, _ := strings.Cut(c, " ")
				switch name := commOf(id); name {
				case "":
					// gone meanwhile
				case "tprec-shadow":
					if strings.HasPrefix(state, "t") {
						shadows[id] = true
					}
				default:
					// A new shadow is renamed as soon as the
					// target runs again: look once more.
					time.Sleep(50 * time.Millisecond)
					if commOf(id) == name {
						st, _ := os.ReadFile("/proc/" + id + "/status")
						t.Fatalf("%s: child %s of the target (%s) is named %q, not tprec-shadow:\n%s\n%s", when, id, state, name, st, rec.quit())
					}
				}
			}
		}
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			look("while recording")
		}
		if len(shadows) < 2 {
			t.Fatalf("saw %d stopped shadows in 2 s of recording (boundaries every 250 ms): the test proves nothing:\n%s", len(shadows), rec.quit())
		}
		found, _ := exec.Command("pgrep", "-x", "python3").Output()
		for _, f := range strings.Fields(string(found)) {
			if shadows[f] {
				t.Fatalf("pgrep -x python3 found shadow %s", f)
			}
		}
		if !slices.Contains(strings.Fields(string(found)), fmt.Sprint(pid)) {
			t.Fatalf("pgrep -x python3 = %q does not find the target %d", found, pid)
		}
		// The dump shadow lives from the request's stop to the file.
		before := len(shadows)
		if err := rec.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
			t.Fatal(err)
		}
		rec.waitSaid(t, " wrote ", 30*time.Second, func() { look("during a requested dump") })
		if len(shadows) == before {
			t.Fatalf("no new shadow seen during the dump: the test proves nothing")
		}
		cks := checkpoints(t, out)
		if len(cks) != 1 {
			t.Fatalf("checkpoints %v after one SIGUSR2", cks)
		}
		if err := rec.cmd.Process.Signal(os.Interrupt); err != nil {
			t.Fatal(err)
		}
		if err := rec.wait(t, 30*time.Second); err != nil {
			t.Fatalf("tprec after Ctrl-C: %v\n%s", err, rec.stderr)
		}
		stillRuns(t, done, "python3")
		replay(t, cks[0])
	})
}

// commOf is the name process id goes by (/proc/ID/comm), "" when it is gone.
func commOf(id string) string {
	b, err := os.ReadFile("/proc/" + id + "/comm")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// A process whose heap came from its parent through fork (a daemon, a
// server's worker, a tmux server) shows two [heap] mappings once its break
// moves: the kernel does not merge the growth with the inherited part.
// Replay took the end of the first for the break, and the window's first
// brk that grew the heap diverged ("brk executed for real gave another
// result ... file exists"). Debian's perl, daemonized, its heap growing and
// shrinking (glibc trims at every free here).
func TestBrkInHeapInheritedThroughFork(t *testing.T) {
	requireRoot(t)
	forBackends(t, func(t *testing.T, backend string) {
		dir := t.TempDir()
		pidFile := filepath.Join(dir, "pid")
		script := `my $x = "y" x 300000; exit 0 if fork(); open(my $f, ">", $ARGV[0]) or die; print $f "$$\n"; close $f;
my @keep; while (1) { my $s = "x" x 500000; undef $s; push @keep, "z" x 100 if @keep < 5000; select(undef, undef, undef, 0.001); }`
		cmd := exec.Command(needTool(t, "perl"), "-e", script, pidFile)
		cmd.Env = append(os.Environ(), "GLIBC_TUNABLES=glibc.malloc.trim_threshold=0:glibc.malloc.mmap_threshold=4194304")
		if err := cmd.Run(); err != nil { // the parent exits at once
			t.Fatalf("perl: %v", err)
		}
		var pid int
		for deadline := time.Now().Add(10 * time.Second); pid == 0; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the daemonized perl wrote no pid")
			}
			b, _ := os.ReadFile(pidFile)
			fmt.Sscan(string(b), &pid)
		}
		t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
		time.Sleep(300 * time.Millisecond)
		maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(maps), "[heap]"); n < 2 {
			t.Fatalf("%d [heap] mappings in the daemon: the test proves nothing\n%s", n, maps)
		}
		rec := startTprec(t, "--backend", backend, "--pid", fmt.Sprint(pid), "--output", dir)
		rec.waitRecording(t)
		time.Sleep(1500 * time.Millisecond)
		if err := syscall.Kill(pid, syscall.SIGSEGV); err != nil {
			t.Fatal(err)
		}
		ck := rec.oneCheckpoint(t, dir)
		calls := inspectCalls(t, ck)
		if n := strings.Count(calls, " brk("); n < 10 {
			t.Fatalf("%d brk calls in the window: the test proves nothing", n)
		}
		allReplayable(t, ck)
		if out := replay(t, ck); !strings.Contains(out, "signal SIGSEGV") {
			t.Fatalf("replay does not end at the crash:\n%s", out)
		}
	})
}

// A process doing its I/O through Linux AIO or io_uring, whose results the
// kernel writes into memory outside any syscall's return, cannot be replayed
// while it does. tprec recorded fio's libaio engine silently for as long as
// one liked, and the checkpoint had no replayable interval: it now says, as
// the interval closes, which calls no replay can make, once per call.
func TestAsyncIOSaidWhileRecording(t *testing.T) {
	requireRoot(t)
	forBackends(t, func(t *testing.T, backend string) {
		dir := t.TempDir()
		rec := startTprec(t, "--backend", backend, "--output", dir, "--", needTool(t, "fio"), "--name=t", "--filename="+filepath.Join(dir, "data"),
			"--size=8M", "--rw=randrw", "--bs=4k", "--ioengine=libaio", "--iodepth=4", "--time_based", "--runtime=30", "--thread", "--output=/dev/null")
		rec.waitSaid(t, "io_submit (seq ", 20*time.Second)
		time.Sleep(600 * time.Millisecond)
		if out, err := exec.Command("pkill", "-SEGV", "-x", "fio").CombinedOutput(); err != nil {
			t.Fatalf("pkill: %v %s", err, out)
		}
		ck := rec.oneCheckpoint(t, dir)
		log := rec.stderr.String()
		said := regexp.MustCompile(`made calls no replay can make: [^\n]*io_setup \(seq \d+\), io_submit \(seq \d+\)[^\n]*: the kernel writes results into memory asynchronously`)
		if !said.MatchString(log) || strings.Count(log, "io_submit (seq ") != 1 {
			t.Fatalf("tprec did not say once that io_submit cannot be replayed:\n%s", log)
		}
		out, code := runTool(t, "tpreplay", ck)
		if code != 2 || !strings.Contains(out, "no replayable interval") || !strings.Contains(out, "asynchronously") {
			t.Fatalf("tpreplay: exit %d, want 2 naming the asynchronous call:\n%s", code, out)
		}
	})
}
