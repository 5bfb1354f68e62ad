package replayer

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/tprec/tprec/format"

	"golang.org/x/sys/unix"
)

// TestCLI runs tools/tpreplay on checkpoints written with format.Write: the
// verified line and status 0, a divergence report and status 1, and status 2
// with a "tpreplay: " message for a file it cannot use.
func TestCLI(t *testing.T) {
	needRoot(t)
	bin := filepath.Join(t.TempDir(), "tpreplay")
	if b, err := exec.Command("go", "build", "-o", bin, "../tools/tpreplay").CombinedOutput(); err != nil {
		t.Fatalf("build tpreplay: %v\n%s", err, b)
	}
	rec, _ := crashRecording(t)
	dir := t.TempDir()
	good := filepath.Join(dir, "good.tpc")
	if err := format.Write(good, rec.c, rec.pages); err != nil {
		t.Fatal(err)
	}
	tpreplay := func(args ...string) (string, string, int) {
		var out, errb bytes.Buffer
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return out.String(), errb.String(), ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return out.String(), errb.String(), 0
	}

	out, stderr, code := tpreplay("--output-dir", filepath.Join(dir, "out"), good)
	re := regexp.MustCompile(`^verified: \d+ syscalls, 1 intervals, end state matches \(rip=0x[0-9a-f]+ in crash_here\+0x[0-9a-f]+, signal SIGSEGV\)\n$`)
	if code != 0 || !re.MatchString(out) {
		t.Fatalf("status %d, stdout %q, stderr %q", code, out, stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "out", "fd-1.out")); !bytes.Equal(b, rec.stdout) {
		t.Errorf("fd-1.out %q, want %q", b, rec.stdout)
	}

	for i := range rec.c.Syscalls {
		if s := &rec.c.Syscalls[i]; s.Nr == unix.SYS_READ && len(s.Out) > 0 {
			s.Out[0].Data[0] ^= 1
		}
	}
	bad := filepath.Join(dir, "bad.tpc")
	if err := format.Write(bad, rec.c, rec.pages); err != nil {
		t.Fatal(err)
	}
	out, _, code = tpreplay(bad)
	if code != 1 || !strings.Contains(out, "divergence: different syscall") || !strings.Contains(out, "expected: getpid()") {
		t.Errorf("status %d, stdout %q", code, out)
	}

	junk := filepath.Join(dir, "junk.tpc")
	os.WriteFile(junk, []byte("not a checkpoint at all"), 0o600)
	out, stderr, code = tpreplay(junk)
	if code != 2 || out != "" || !strings.HasPrefix(stderr, "tpreplay: ") {
		t.Errorf("status %d, stdout %q, stderr %q", code, out, stderr)
	}
	_, stderr, code = tpreplay(filepath.Join(dir, "missing.tpc"))
	if code != 2 || !strings.HasPrefix(stderr, "tpreplay: ") {
		t.Errorf("missing file: status %d, stderr %q", code, stderr)
	}

	for i := range rec.c.Syscalls { // the good log again
		if s := &rec.c.Syscalls[i]; s.Nr == unix.SYS_READ && len(s.Out) > 0 {
			s.Out[0].Data[0] ^= 1
		}
	}
	rec.c.Header.CPUFlags = append(rec.c.Header.CPUFlags, "avx512_imaginary")
	alien := filepath.Join(dir, "alien.tpc")
	if err := format.Write(alien, rec.c, rec.pages); err != nil {
		t.Fatal(err)
	}
	_, stderr, code = tpreplay(alien)
	if code != 2 || !strings.Contains(stderr, "lacks avx512_imaginary") || !strings.Contains(stderr, "--any-cpu") {
		t.Errorf("missing cpu flag: status %d, stderr %q", code, stderr)
	}
	// --any-cpu replays anyway, after saying what is missing; this code
	// uses no such extension, so the replay verifies.
	out, stderr, code = tpreplay("--any-cpu", alien)
	if code != 0 || !re.MatchString(out) || !strings.Contains(stderr, "lacks avx512_imaginary") || !strings.Contains(stderr, "replaying anyway") {
		t.Errorf("--any-cpu: status %d, stdout %q, stderr %q", code, out, stderr)
	}
}
