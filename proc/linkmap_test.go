package proc

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// TestLinkMap reads the loader's list of objects of a dynamically linked
// Debian program (sleep) and checks it names the program first, then the C
// library with its thread-local storage placed in the static area.
func TestLinkMap(t *testing.T) {
	// Read once sleep sleeps: the loader is done by then (while it loads,
	// libc is in the list before its thread-local storage is placed).
	pid := startSleeper(t)
	maps, err := ReadMaps(pid)
	if err != nil {
		t.Fatal(err)
	}
	mods, err := LinkMap(pid, maps)
	if err != nil {
		t.Fatal(err)
	}
	libc := -1
	for i, m := range mods {
		if strings.HasPrefix(filepath.Base(m.Name), "libc.so") {
			libc = i
		}
	}
	if libc < 0 {
		t.Fatalf("no libc in the link map of sleep: %+v", mods)
	}
	if mods[0].Name != "" || mods[0].LD == 0 {
		t.Errorf("first object is not the program: %+v", mods[0])
	}
	c := mods[libc]
	if c.LAddr == 0 || c.LD <= c.LAddr || c.LinkMap == 0 {
		t.Errorf("libc entry: %+v", c)
	}
	t.Logf("libc: %+v", c)
	if c.TLSModID == 0 || !c.StaticTLS() {
		t.Errorf("libc has no static thread-local block: %+v", c)
	}
}

// GlibcRseq, the way to the rseq area where the kernel cannot be asked
// (before Linux 5.13), finds the area the kernel reports for a Debian
// program (sleep, on glibc 2.36).
func TestGlibcRseqAgreesWithKernel(t *testing.T) {
	onStoppedSleeper(t, func(pid int, _ *Mem) error {
		addr, n, sig, err := GetRseq(pid)
		if err != nil {
			return fmt.Errorf("the kernel's rseq registration: %w", err)
		}
		if n == 0 {
			return fmt.Errorf("sleep registered no rseq area: this test needs a glibc of 2.35 or later")
		}
		regs, err := GetRegs(pid)
		if err != nil {
			return err
		}
		maps, err := ReadMaps(pid)
		if err != nil {
			return err
		}
		off, size, ok := GlibcRseq(pid, maps)
		if !ok || regs.FsBase+uint64(off) != addr || size != n || sig != RseqSig {
			return fmt.Errorf("glibc's rseq: fs_base %#x + offset %d, %d bytes (found: %v), signature %#x; the kernel's: %#x, %d bytes, signature %#x",
				regs.FsBase, off, size, ok, uint32(RseqSig), addr, n, sig)
		}
		return nil
	})
}
