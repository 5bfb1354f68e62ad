package e2e

import (
	"debug/elf"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Debian programs crashed from outside in a loop whose state lies in
// memory: the registers repeat at every pass over the instruction the
// crash hit, and only memory tells the passes apart, millions of them in
// the window.
//   - openssl speed hashes for 30 s without a call and counts the hashes on
//     its stack. The end search compares that counter in the process once a
//     stop has shown it differs, and stops only at the pass that has it.
//     Before, every pass was a stop (664,125 in 35 s, 50 us each): the
//     trial replay timed out and kept every page, and tpreplay could not
//     verify the file.
//   - tclsh runs a Tcl loop in its bytecode interpreter, a call every
//     100,000 iterations; thousands of passes match the registers and
//     differ in memory. Each such stop compared and described every end
//     page, decompressing its recorded content again: 35 s and a timeout,
//     now 2 s.
//   - bc computes pi to 20,000 digits without a call, tens of millions of
//     passes over most of its instructions in the window. One crash in
//     three by hand landed on a 3-byte instruction just before the target
//     of a conditional jump of that loop: the 5-byte jmp of the search
//     displaced the target too, and every pass stopped to move the jump to
//     its copy, 17 million stops and a timeout. The jmp is now a punned
//     one there (replayer/endsearch.go), and the same file verifies in 3 s.
//
// Where the crash lands decides what the search needs (in openssl's own
// loop the registers differ at every pass, in its SHA-256 code they do
// not), so the test asks for what a user needs: the trial replay must find
// the end (the file keeps the touched pages), and tpreplay must verify it.
// The unit tests of replayer/endsearch_test.go end at chosen instructions.
func TestEndSearchStateInMemory(t *testing.T) {
	requireRoot(t)
	tcl := pythonScript(t, "loop.tcl", `set i 0
while 1 {
    incr i
    set a($i) [string repeat x [expr {$i % 50}]]
    if {$i % 100000 == 0} { array unset a; after 1 }
}
`)
	progs := []struct {
		name string
		args []string
	}{
		{"openssl", []string{needTool(t, "openssl"), "speed", "-seconds", "30", "sha256"}},
		{"tclsh", []string{needTool(t, "tclsh8.6"), tcl}},
		{"bc", []string{needTool(t, "bc"), "-l", pythonScript(t, "pi.bc", "scale=20000; 4*a(1)\nquit\n")}},
	}
	forBackends(t, func(t *testing.T, backend string) {
		for _, p := range progs {
			t.Run(p.name, func(t *testing.T) {
				target, _, done := startTarget(t, p.args[0], p.args[1:]...)
				time.Sleep(300 * time.Millisecond)
				ck := crashThread(t, target, done, target.Process.Pid, 1500*time.Millisecond, "--backend", backend)
				t.Log(replay(t, ck))
			})
		}
	})
}

// The end search compares in the process the word that told the last pass
// from the others, when the registers repeat at every pass. It looked the
// word's page up in the map of the last interval's start, so a page that
// interval mapped (the heap brk grew) was never compared: a stop at every
// pass, a trial that ran out of time, every page kept. A ptrace recording
// of Debian's mawk counting in a loop met it (its heap grew in the interval
// a trial piece ended at). testdata/heapcount.c
// grows its heap and counts in the new page; the test crashes it right after.
func TestEndSearchWordInMemoryMappedLast(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	prog := cc(t, "testdata/heapcount.c", dir)
	fifo := filepath.Join(dir, "grown")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	rec := startTprec(t, "-o", dir, "--", prog, fifo)
	f, err := os.Open(fifo)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rec.waitRecording(t)
	if _, err := f.Read(make([]byte, 6)); err != nil {
		t.Fatalf("no message from the program: %v\n%s", err, rec.stderr)
	}
	time.Sleep(5 * time.Millisecond) // into its loop
	ck, log := crashRecorded(t, rec, "", dir)
	wantMinimized(t, ck, log)
	t.Logf("tprec:\n%s", log)
	if out := replay(t, ck); !strings.Contains(out, "in main") {
		t.Fatalf("the crash did not land in the program's loop:\n%s", out)
	}
}

// Debian's python3.11 is linked at a fixed address (0x400000), its heap
// just above it. The views the replayed process compares its passes in were
// placed at 4 GiB and up only, out of a rel32 jump's reach from that code:
// a CPU-bound Python loop crashed from outside was searched with a stop at
// every pass (11,000 a second, against the loop's 30 million), the trial ran
// out of time and the checkpoint kept every page. Both backends.
func TestEndSearchInProgramAtFixedAddress(t *testing.T) {
	requireRoot(t)
	const py = "/usr/bin/python3"
	if f, err := elf.Open(py); err != nil || f.Type != elf.ET_EXEC {
		t.Fatalf("%s is not linked at a fixed address here (%v); this test is about such a program", py, err)
	}
	forBackends(t, func(t *testing.T, backend string) {
		dir := t.TempDir()
		rec := startTprec(t, "--backend", backend, "-o", dir, "--", py, "-S", "-c", "x = 0\nwhile True:\n    x += 1\n")
		rec.waitRecording(t)
		time.Sleep(1500 * time.Millisecond)
		ck, log := crashRecorded(t, rec, "", dir)
		wantMinimized(t, ck, log)
		out := replay(t, ck, "-v")
		if !strings.Contains(out, "compared in the process") {
			t.Fatalf("the end search did not compare the passes in the process:\n%s", out)
		}
	})
}
