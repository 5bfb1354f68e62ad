package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Debian's gpg encrypting a stream with a passphrase, crashed after 1.5 s,
// its whole run in the window. libgcrypt makes the session's random bytes
// from rdrand and rdtsc, instructions that give data without a syscall and
// that tprec does not record, so a replay from the window's first interval
// encrypts with other bytes and ends with other memory. The trial replay
// then starts the window after the interval where the difference showed,
// and again, until a start verifies; the intervals left out say why. The
// checkpoint must be minimized (not every page), verify with tpreplay, and
// its log must say the window was cut. gpg also stirs libgcrypt's pool with
// rdtsc and rdrand as it goes, so how much of the window verifies varies:
// the last one or two intervals, a hundred calls or none (the replay then
// runs the last interval's code from its start to the crash).
func TestUnrecordedRandomCutsTheWindow(t *testing.T) {
	requireRoot(t)
	gpg := needTool(t, "gpg")
	forBackends(t, func(t *testing.T, backend string) {
		// When gpg stirs its pool after the last boundary before the
		// crash, no start verifies, not even the last interval's, and the
		// checkpoint keeps every page (a clean-clone CI run met it once):
		// the recording is made again, up to three times.
		for attempt := 1; ; attempt++ {
			ck, log, dir := recordGPGCrash(t, gpg, backend)
			if attempt < 3 && strings.Contains(log, "trial replay failed") && strings.Contains(log, "diverged in its last interval") {
				t.Logf("attempt %d: the window's last interval diverged too; recording again:\n%s", attempt, log)
				continue
			}
			wantMinimized(t, ck, log)
			if !strings.Contains(log, "the window now starts after interval") {
				keepFailed(t, ck)
				t.Fatalf("the trial replay verified the whole window: gpg's random bytes were replayed after all, and this test no longer shows a cut window:\n%s", log)
			}
			t.Logf("tprec (attempt %d, in %s):\n%s", attempt, dir, log)
			replay(t, ck)
			return
		}
	})
}

// recordGPGCrash records gpg encrypting what a FIFO feeds it, crashes it
// with SIGSEGV after 1.5 s, and returns the checkpoint, tprec's log and the
// directory of both.
func recordGPGCrash(t *testing.T, gpg, backend string) (string, string, string) {
	t.Helper()
	dir := t.TempDir()
	home := filepath.Join(dir, "gnupg")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	// gpg reads a FIFO the test feeds 64 KiB every 20 ms: it
	// encrypts for as long as the test wants.
	in := filepath.Join(dir, "in")
	if err := unix.Mkfifo(in, 0o600); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	fed := make(chan struct{})
	go func() {
		defer close(fed)
		f, err := os.OpenFile(in, os.O_WRONLY, 0)
		if err != nil {
			return
		}
		defer f.Close()
		chunk := bytes.Repeat([]byte("a line of text to encrypt, over and over\n"), 1600)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if _, err := f.Write(chunk); err != nil {
				return
			}
		}
	}()
	defer func() { close(stop); <-fed }()
	rec := startTprec(t, "--backend", backend, "-o", dir, "--",
		gpg, "--homedir", home, "--batch", "--yes", "--passphrase", "a passphrase",
		"--symmetric", "-o", filepath.Join(dir, "out.gpg"), in)
	rec.waitRecording(t)
	time.Sleep(1500 * time.Millisecond)
	ck, log := crashRecorded(t, rec, "/usr/bin/gpg", dir)
	if !strings.Contains(log, "killed by SIGSEGV") {
		t.Fatalf("gpg did not die of the SIGSEGV:\n%s", log)
	}
	return ck, log, dir
}

// testdata/tscspin.c stores rdtsc values in its first interval, then spins
// on a flag until the test crashes it. A trial replay from that interval
// stores other values and then passes the recorded end's rip with a
// register or memory different, over and over, until its time runs out (a
// CI run met this with gpg crashed in its cipher loop). That is
// a divergence of data, not a slow replay: the window must start after the
// interval with the rdtsc, and the checkpoint must verify. Without the cut,
// the trial gives up and the file keeps every page.
func TestUnrecordedValueAtALoopEnd(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	prog := cc(t, "testdata/tscspin.c", dir)
	rec := startTprec(t, "-o", dir, "--", prog)
	rec.waitRecording(t)
	time.Sleep(1500 * time.Millisecond)
	ck, log := crashRecorded(t, rec, "", dir)
	wantMinimized(t, ck, log)
	if !strings.Contains(log, "breakpoint hits") || !strings.Contains(log, "the window now starts after interval") {
		keepFailed(t, ck)
		t.Fatalf("want a trial that timed out passing the end with other values, then a cut window:\n%s", log)
	}
	t.Logf("tprec:\n%s", log)
	replay(t, ck)
}
