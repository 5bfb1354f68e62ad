package replayer

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tprec/tprec/format"

	"golang.org/x/sys/unix"
)

// crashRecording records the crash fixture with its input file in a fresh
// directory, then puts the directory back as it was before the run.
func crashRecording(t *testing.T) (*recording, string) {
	t.Helper()
	dir := t.TempDir()
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("input", "A first line\n")
	write("keep", "original\n")
	rec := record(t, fixture(t, "crash"), recordOpts{args: []string{dir}})
	if rec.c.End.Kind != format.EndSignal || rec.c.End.Signo != int(unix.SIGSEGV) {
		t.Fatalf("fixture ended with %+v", rec.c.End)
	}
	// The recorded run created "new" and removed "keep": undo it so that the
	// replay can be seen to leave the directory alone.
	os.Remove(filepath.Join(dir, "new"))
	write("keep", "original\n")
	return rec, dir
}

func listing(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		data, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		b.WriteString(e.Name() + "=" + string(data) + ";")
	}
	return b.String()
}

func run(t *testing.T, c *format.Checkpoint, pages format.PageSource, o Options) (*Result, error) {
	t.Helper()
	if testing.Verbose() {
		o.Log, o.Verbose = os.Stderr, true
	}
	if o.Timeout == 0 {
		o.Timeout = 20 * time.Second
	}
	if o.From == 0 {
		o.From = -1
	}
	res, err := Run(context.Background(), c, pages, o)
	if kids := children(t); len(kids) > 0 {
		t.Errorf("processes left behind: %v", kids)
	}
	return res, err
}

func TestReplayCrashVerifies(t *testing.T) {
	needRoot(t)
	rec, dir := crashRecording(t)
	before := listing(t, dir)
	out := t.TempDir()
	fds := countFds(t)
	res, err := run(t, rec.c, rec.pages, Options{OutputDir: out})
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if res.Syscalls != len(rec.c.Syscalls) || res.Rip != rec.c.End.Regs.Rip {
		t.Errorf("result %+v, recorded %d syscalls ending at %#x", res, len(rec.c.Syscalls), rec.c.End.Regs.Rip)
	}
	line := res.Summary()
	t.Log(line)
	if !strings.HasPrefix(line, "verified: ") || !strings.Contains(line, "signal SIGSEGV") || !strings.Contains(line, "in crash_here+0x") {
		t.Errorf("summary %q", line)
	}
	if after := listing(t, dir); after != before {
		t.Errorf("replay changed the host directory:\nbefore %s\nafter  %s", before, after)
	}
	got, _ := os.ReadFile(filepath.Join(out, "fd-1.out"))
	if !bytes.Equal(got, rec.stdout) || len(got) == 0 {
		t.Errorf("captured stdout %q, the fixture printed %q", got, rec.stdout)
	}
	ents, _ := os.ReadDir(out)
	var payload []byte
	for _, e := range ents {
		if e.Name() != "fd-1.out" {
			payload, _ = os.ReadFile(filepath.Join(out, e.Name()))
		}
	}
	if string(payload) != "payload\n" {
		t.Errorf("captured file write %q (files %v)", payload, ents)
	}
	if n := countFds(t); n != fds {
		t.Errorf("file descriptors: %d before, %d after", fds, n)
	}
}

func TestReplayWithoutOutputDirWritesNothing(t *testing.T) {
	needRoot(t)
	rec, dir := crashRecording(t)
	before := listing(t, dir)
	wd, _ := os.Getwd()
	wdBefore := listing(t, wd)
	if _, err := run(t, rec.c, rec.pages, Options{}); err != nil {
		t.Fatalf("replay: %v", err)
	}
	if listing(t, dir) != before || listing(t, wd) != wdBefore {
		t.Error("replay without an output directory wrote to the host")
	}
}

func wantDivergence(t *testing.T, err error, reason string) *Divergence {
	t.Helper()
	var d *Divergence
	if !errors.As(err, &d) {
		t.Fatalf("want a divergence (%s), got %v", reason, err)
	}
	if !strings.Contains(d.Reason, reason) {
		t.Fatalf("divergence %q, want %q", d.Error(), reason)
	}
	t.Logf("%s", d.Report())
	return d
}

func TestReplayTamperedOutputDiverges(t *testing.T) {
	needRoot(t)
	rec, _ := crashRecording(t)
	tampered := false
	for i := range rec.c.Syscalls {
		s := &rec.c.Syscalls[i]
		if s.Nr == unix.SYS_READ && len(s.Out) > 0 && s.Out[0].Data[0] == 'A' {
			s.Out[0].Data[0] = 'B'
			tampered = true
		}
	}
	if !tampered {
		t.Fatal("no read of the input in the log")
	}
	_, err := run(t, rec.c, rec.pages, Options{})
	d := wantDivergence(t, err, "different syscall")
	if !strings.Contains(d.Expected, "getpid") || !strings.Contains(d.Actual, "getuid") {
		t.Errorf("expected/actual %q / %q", d.Expected, d.Actual)
	}
}

func TestReplayTamperedArgumentDiverges(t *testing.T) {
	needRoot(t)
	rec, _ := crashRecording(t)
	var seq uint64
	for i := range rec.c.Syscalls {
		s := &rec.c.Syscalls[i]
		if s.Nr == unix.SYS_WRITE && s.Args[2] == 8 {
			s.Args[2] = 9
			seq = s.Seq
		}
	}
	_, err := run(t, rec.c, rec.pages, Options{})
	d := wantDivergence(t, err, "argument 3 of write differs")
	if d.Seq != seq {
		t.Errorf("divergence at #%d, tampered #%d", d.Seq, seq)
	}
}

func TestReplayTamperedResultDiverges(t *testing.T) {
	needRoot(t)
	rec, _ := crashRecording(t)
	// The program prints n, the result of read: a different result changes
	// the bytes it writes, hence the write's length argument.
	for i := range rec.c.Syscalls {
		s := &rec.c.Syscalls[i]
		if s.Nr == unix.SYS_READ && s.Ret > 1 {
			s.Ret = 9 // one digit fewer in what the program prints
		}
	}
	_, err := run(t, rec.c, rec.pages, Options{})
	wantDivergence(t, err, "argument")
}

func TestReplayMissingPageDiverges(t *testing.T) {
	needRoot(t)
	rec, _ := crashRecording(t)
	var kept []format.PageRef
	for _, p := range rec.c.Final {
		if p.Addr != rec.marker {
			kept = append(kept, p)
		}
	}
	if len(kept) == len(rec.c.Final) {
		t.Fatalf("page %#x not in the recording", rec.marker)
	}
	rec.c.Final = kept
	// A checkpoint of every present page would say the page was not present
	// (zeros); a minimized one lacks it.
	rec.c.Header.FullPages = false
	_, err := run(t, rec.c, rec.pages, Options{})
	d := wantDivergence(t, err, "not in the checkpoint")
	if !strings.Contains(d.Reason, "touched page ") {
		t.Errorf("reason %q", d.Reason)
	}
}

func TestReplayExit(t *testing.T) {
	needRoot(t)
	rec := record(t, fixture(t, "exit"), recordOpts{})
	if rec.c.End.Kind != format.EndExit || rec.c.End.ExitCode != 3 {
		t.Fatalf("fixture ended with %+v", rec.c.End)
	}
	res, err := run(t, rec.c, rec.pages, Options{})
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if line := res.Summary(); !strings.Contains(line, "exit status 3") {
		t.Errorf("summary %q", line)
	}
	// A different exit code is a divergence.
	rec.c.End.ExitCode = 4
	_, err = run(t, rec.c, rec.pages, Options{})
	wantDivergence(t, err, "did not exit")
}

func TestReplayRequestInLoop(t *testing.T) {
	needRoot(t)
	rec := record(t, fixture(t, "loop"), recordOpts{requestAfter: unix.SYS_GETUID, requestSteps: 3001})
	res, err := run(t, rec.c, rec.pages, Options{})
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if line := res.Summary(); !strings.Contains(line, "dump request") || res.Rip != rec.c.End.Regs.Rip {
		t.Errorf("summary %q", line)
	}
	// The same end as a kill from outside (si_code SI_USER).
	rec.c.End.Kind, rec.c.End.Signo, rec.c.End.Siginfo = format.EndSignal, int(unix.SIGTERM), make([]byte, 128)
	res, err = run(t, rec.c, rec.pages, Options{})
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if line := res.Summary(); !strings.Contains(line, "signal SIGTERM") {
		t.Errorf("summary %q", line)
	}
}

func TestReplayUnreachableEndTimesOut(t *testing.T) {
	needRoot(t)
	rec := record(t, fixture(t, "loop"), recordOpts{requestAfter: unix.SYS_GETUID, requestSteps: 500})
	rec.c.End.Digests = append(rec.c.End.Digests, format.PageRef{Addr: rec.c.End.Digests[0].Addr, Hash: format.Hash{1}})
	start := time.Now()
	_, err := run(t, rec.c, rec.pages, Options{Timeout: time.Second})
	wantDivergence(t, err, "did not reach the recorded end state")
	if time.Since(start) > 10*time.Second {
		t.Errorf("took %v", time.Since(start))
	}
	// Canceling the context ends the replay with the context's error.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := Run(ctx, rec.c, rec.pages, Options{From: -1}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("canceled replay: %v", err)
	}
	if kids := children(t); len(kids) > 0 {
		t.Errorf("processes left behind: %v", kids)
	}
}

func TestReplayRefusesSignalsInWindow(t *testing.T) {
	rec := &format.Checkpoint{
		Header:    format.Header{Arch: "x86_64"},
		Intervals: []format.Interval{{FirstSeq: 1, Replayable: true, Threads: []format.Thread{{Tid: 1}}}},
		Signals:   []format.SignalEvent{{Seq: 4, Tid: 1, Signo: int(unix.SIGUSR1)}},
		End:       format.EndState{Kind: format.EndExit, Tid: 1},
	}
	_, err := Run(context.Background(), rec, format.NewMemStore(), Options{From: -1})
	if err == nil || !strings.Contains(err.Error(), "SIGUSR1") || !strings.Contains(err.Error(), "#4") {
		t.Fatalf("got %v", err)
	}
	// With what the delivery did, replayed; not in another thread than
	// the one replay runs.
	rec.Signals[0].Handler = &format.Delivery{}
	rec.Signals[0].Tid = 2
	if _, err := Run(context.Background(), rec, format.NewMemStore(), Options{From: -1}); err == nil || !strings.Contains(err.Error(), "replay runs thread 1") {
		t.Fatalf("signal to another thread: got %v", err)
	}
	// A replay of several threads does not deliver a signal to a thread
	// it does not run. A thread that did not exist at the start is not
	// made.
	rec.Intervals[0].Threads = append(rec.Intervals[0].Threads, format.Thread{Tid: 2}, format.Thread{Tid: 3, InSyscall: true})
	rec.Syscalls = []format.Syscall{{Seq: 1, Tid: 2, Nr: unix.SYS_GETPID, Ret: 2}}
	rec.End.LastSeq = 1
	rec.Signals[0].Tid = 3
	if _, err := Run(context.Background(), rec, format.NewMemStore(), Options{From: -1}); err == nil || !strings.Contains(err.Error(), "does not run that thread") {
		t.Fatalf("signal to a thread left out: got %v", err)
	}
	rec.Intervals[0].Threads = rec.Intervals[0].Threads[:2]
	rec.Signals = nil
	rec.Syscalls[0].Tid = 5
	if _, err := Run(context.Background(), rec, format.NewMemStore(), Options{From: -1}); err == nil || !strings.Contains(err.Error(), "thread 5, which did not exist") {
		t.Fatalf("call of a thread made in the window: got %v", err)
	}
	rec.Syscalls, rec.End.LastSeq = nil, 0
	// A second thread waiting in a syscall is fine; the one the
	// checkpoint ends in must be there.
	rec.Intervals[0].Threads[1].InSyscall = true
	rec.End.Tid = 3
	if _, err := Run(context.Background(), rec, format.NewMemStore(), Options{From: -1}); err == nil || !strings.Contains(err.Error(), "no thread 3") {
		t.Fatalf("got %v", err)
	}
}

func countFds(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
