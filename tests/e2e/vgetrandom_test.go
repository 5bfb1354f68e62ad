package e2e

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// newGlibc returns the loader and library directory of a glibc of 2.41 or
// later that scripts/fetch-glibc.sh unpacked (.ci/run runs it).
func newGlibc(t *testing.T) (loader, lib string) {
	t.Helper()
	dir := os.Getenv("TPREC_GLIBC")
	if dir == "" {
		dir = "/var/cache/tprec/glibc"
	}
	lib = filepath.Join(dir, "root/usr/lib/x86_64-linux-gnu")
	loader = filepath.Join(lib, "ld-linux-x86-64.so.2")
	if _, err := os.Stat(loader); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no glibc in %s: .ci/run fetches it with scripts/fetch-glibc.sh", dir)
		}
		t.Skipf("no glibc 2.41 or later in %s (run: bash scripts/fetch-glibc.sh %s)", dir, dir)
	}
	return loader, lib
}

// vdsoHasGetrandom reports whether this kernel's vDSO exports getrandom
// (Linux 6.11 and later).
func vdsoHasGetrandom(t *testing.T) bool {
	t.Helper()
	img, err := vdsoOf(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.NewFile(bytes.NewReader(img))
	if err != nil {
		t.Fatal(err)
	}
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if s.Name == "__vdso_getrandom" {
			return true
		}
	}
	return false
}

// urandomLoop is python3 calling os.urandom (glibc's getrandom) in a loop
// after one call that sets up the thread's random state.
const urandomLoop = `import os, sys, time
os.urandom(16)
print("ready", flush=True)
acc, t0 = 0, time.monotonic()
while sys.argv[1] == "forever" or time.monotonic() - t0 < 0.5:
    acc ^= os.urandom(16)[0]
print("acc", acc, flush=True)
os.kill(os.getpid(), 11)
`

// glibc 2.41 and later make getrandom(3) and arc4random(3) call the vDSO's
// getrandom, which expands a random state in the process's memory without a
// syscall and reads the kernel's generation counter from [vvar]: recorded
// as it was, a replay met [vvar] unmapped and diverged with a SIGSEGV at the
// first call (Debian's python3 on Debian 13's glibc, attached while it
// called os.urandom in a loop). The recorder now turns it into the
// getrandom syscall, whose bytes the log keeps, as it does the time
// functions; a program it launches is told at start-up that the vDSO has no
// random state to offer, and uses the syscall.
func TestVDSOGetrandom(t *testing.T) {
	requireRoot(t)
	loader, lib := newGlibc(t)
	if !vdsoHasGetrandom(t) {
		if os.Getenv("CI") == "true" {
			t.Fatal("this kernel's vDSO has no getrandom (Linux 6.11 and later): CI runs on a kernel that has it")
		}
		t.Skip("this kernel's vDSO has no getrandom (Linux 6.11 and later)")
	}
	script := pythonScript(t, "urandom.py", urandomLoop)
	python := []string{"--library-path", lib, "/usr/bin/python3", "-S", script}

	// The test proves something only if this glibc does call the vDSO:
	// unrecorded, 2,000 calls of os.urandom must make almost no syscall.
	strace := needTool(t, "strace")
	count := pythonScript(t, "count.py", "import os\nfor i in range(2000): os.urandom(16)\n")
	out, err := exec.Command(strace, "-f", "-e", "trace=getrandom", "-o", "/dev/stdout", loader, "--library-path", lib, "/usr/bin/python3", "-S", count).Output()
	if err != nil {
		t.Fatalf("strace: %v\n%s", err, out)
	}
	if n := strings.Count(string(out), "getrandom("); n > 100 {
		t.Fatalf("the glibc in %s made %d getrandom syscalls for 2,000 os.urandom: it does not use the vDSO, so this test proves nothing", lib, n)
	}

	forBackends(t, func(t *testing.T, backend string) {
		t.Run("attached", func(t *testing.T) {
			target, out, done := startTarget(t, loader, append(python, "forever")...)
			waitReady(t, out)
			ck := attachAndCrash(t, target, done, 700*time.Millisecond, "--backend", backend)
			replay(t, ck)
		})
		t.Run("launched", func(t *testing.T) {
			ck, log := recordMinimized(t, backend, loader, append(python, "once")...)
			replayEndsAtFault(t, ck, log)
		})
	})
}
