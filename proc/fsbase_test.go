package proc

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// rdfsbaseWitness is the same check as CheckRdfsbase written in C: rdfsbase
// against arch_prctl(ARCH_GET_FS). Where the CPU does not let user code
// use the instruction it dies of SIGILL.
const rdfsbaseWitness = `
#include <asm/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(void) {
	unsigned long want = 0, got;
	if (syscall(SYS_arch_prctl, ARCH_GET_FS, &want) != 0)
		return 2;
	__asm__ volatile("rdfsbase %0" : "=r"(got));
	return got == want ? 0 : 1;
}
`

// ProbeRdfsbase's answer must be what the CPU does: a C program that
// executes rdfsbase (and dies of SIGILL where user code may not) is the
// witness. The probe's own process must agree with it, a probe command
// that fails must say no with the reason, and a kernel that announces
// FSGSBASE must be taken at its word.
func TestProbeRdfsbase(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "witness.c")
	if err := os.WriteFile(src, []byte(rdfsbaseWitness), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "witness")
	if out, err := exec.Command("gcc", "-O2", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	werr := exec.Command(bin).Run()
	works := werr == nil
	t.Logf("the kernel announces FSGSBASE: %v; rdfsbase in the C witness: %v", KernelAnnouncesFSGSBase(), werr)
	if KernelAnnouncesFSGSBase() && !works {
		t.Fatalf("the kernel announces FSGSBASE, and the witness failed: %v", werr)
	}

	t.Setenv(helperEnv, "rdfsbase:")
	got, why := probe([]string{os.Args[0]})
	if got != works {
		t.Fatalf("probe says %v (%s), the witness %v (%v)", got, why, works, werr)
	}
	if ok, why := ProbeRdfsbase([]string{os.Args[0]}); ok != works {
		t.Fatalf("ProbeRdfsbase says %v (%s), the witness %v", ok, why, works)
	}

	if KernelAnnouncesFSGSBase() {
		if ok, why := ProbeRdfsbase(nil); !ok {
			t.Fatalf("the kernel announces FSGSBASE, and ProbeRdfsbase without a command says no: %s", why)
		}
	} else if ok, why := ProbeRdfsbase(nil); ok {
		t.Fatalf("the kernel does not announce FSGSBASE, and ProbeRdfsbase without a command says yes: %s", why)
	}
	got, why = probe([]string{"/bin/false"})
	if got || !strings.Contains(why, "FSGSBASE") {
		t.Fatalf("a probe that fails gives %v, %q", got, why)
	}
}
