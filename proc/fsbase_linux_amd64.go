package proc

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

func rdfsbase() uint64

// hwcap2FSGSBase is bit 1 of the auxiliary vector's AT_HWCAP2 (entry 26):
// the kernel has let user code use the FSGSBASE instructions. archGetFS is
// arch_prctl's ARCH_GET_FS.
const (
	hwcap2FSGSBase = 2
	atHWCAP2       = 26
	archGetFS      = 0x1003
)

// KernelAnnouncesFSGSBase reports whether the kernel says user code may use
// rdfsbase (AT_HWCAP2, Linux 5.9 and later on a CPU that has it).
func KernelAnnouncesFSGSBase() bool {
	b, err := os.ReadFile("/proc/self/auxv")
	if err != nil {
		return false
	}
	for i := 0; i+16 <= len(b); i += 16 {
		if binary.LittleEndian.Uint64(b[i:]) == atHWCAP2 {
			return binary.LittleEndian.Uint64(b[i+8:])&hwcap2FSGSBase != 0
		}
	}
	return false
}

// CheckRdfsbase executes rdfsbase on the calling thread and compares what
// it reads with the kernel's fs base of that thread (arch_prctl). Where the
// CPU does not let user code use the instruction it raises SIGILL, which
// ends the process: run it in a process of its own (ProbeRdfsbase).
func CheckRdfsbase() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var want uint64
	if _, _, e := unix.RawSyscall(unix.SYS_ARCH_PRCTL, archGetFS, uintptr(unsafe.Pointer(&want)), 0); e != 0 {
		return fmt.Errorf("arch_prctl(ARCH_GET_FS): %w", e)
	}
	if got := rdfsbase(); got != want {
		return fmt.Errorf("rdfsbase read %#x, the kernel says the fs base is %#x", got, want)
	}
	return nil
}

// ProbeRdfsbase reports whether user code can read its fs base with
// rdfsbase, which the clock log's stubs do: yes when the kernel announces
// FSGSBASE; else it runs argv (a process that calls CheckRdfsbase and
// exits 0 when it passed), once per tprec. A hypervisor can leave the
// instruction enabled for user code while the guest's kernel, which sees
// no FSGSBASE in CPUID, does not announce it: the value read is still the
// thread's fs base, the one every %fs access of the program uses. The
// second result says how it was decided.
func ProbeRdfsbase(argv []string) (bool, string) {
	if KernelAnnouncesFSGSBase() {
		return true, "the kernel announces FSGSBASE"
	}
	if len(argv) == 0 {
		return false, "the CPU or the kernel does not let programs read their fs base (FSGSBASE)"
	}
	probeOnce.Do(func() { probeOK, probeWhy = probe(argv) })
	return probeOK, probeWhy
}

var (
	probeOnce sync.Once
	probeOK   bool
	probeWhy  string
)

func probe(argv []string) (bool, string) {
	cmd := exec.Command(argv[0], argv[1:]...)
	out, err := cmd.CombinedOutput()
	if err == nil {
		return true, "the kernel does not announce FSGSBASE, but rdfsbase reads the fs base (checked in a process of its own)"
	}
	why := err.Error()
	if len(out) > 0 {
		why = string(out)
	}
	return false, "the CPU or the kernel does not let programs read their fs base (FSGSBASE; rdfsbase in a process of its own: " + strings.TrimSpace(why) + ")"
}
