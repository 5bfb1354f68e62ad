package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tprec/tprec/format"
)

const seed = "../../format/testdata/small.tpc"

func runCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(append([]string{"tpinspect"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

func TestSummary(t *testing.T) {
	code, out, errs := runCmd(t, seed)
	if code != 0 || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	for _, want := range []string{"pid", "4242", "/usr/local/bin/server", "build-id", "SIGSEGV (11)", "fault address  0xdead0",
		"si_code", "io_uring_enter", "stored (distinct)", "PAGES", "SYSCL", "syscalls"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
}

func TestSyscallListing(t *testing.T) {
	f, err := format.Open(seed)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	code, out, _ := runCmd(t, "--syscalls", seed)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	var lines, sigs []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(l, "-- ") {
			sigs = append(sigs, l)
		} else {
			lines = append(lines, l)
		}
	}
	if len(lines) != len(f.Checkpoint.Syscalls) {
		t.Fatalf("%d lines for %d syscalls", len(lines), len(f.Checkpoint.Syscalls))
	}
	// The seed's signal, delivered after a call.
	if len(sigs) != len(f.Checkpoint.Signals) || len(sigs) == 0 || !strings.Contains(sigs[0], " delivered ") {
		t.Errorf("signal lines %q for %d signals", sigs, len(f.Checkpoint.Signals))
	}
	for i, l := range lines {
		sc := f.Checkpoint.Syscalls[i]
		if !strings.HasPrefix(l, fmt.Sprintf("%d %d ", sc.Seq, sc.Tid)) || !strings.Contains(l, ") = ") {
			t.Errorf("line %q", l)
		}
	}
}

func TestJSON(t *testing.T) {
	code, out, _ := runCmd(t, "--json", "--syscalls", seed)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	var s summary
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("output is not JSON: %v", err)
	}
	if s.Process.Pid != 4242 || s.End.Signal != "SIGSEGV" || s.End.FaultAddr != "0xdead0" || len(s.Syscalls) == 0 || len(s.Intervals) != 2 {
		t.Errorf("summary %+v", s)
	}
}

func TestUnusableFiles(t *testing.T) {
	dir := t.TempDir()
	b, err := os.ReadFile(seed)
	if err != nil {
		t.Fatal(err)
	}
	trunc := filepath.Join(dir, "trunc.tpc")
	os.WriteFile(trunc, b[:len(b)/2], 0o600)
	flipped := filepath.Join(dir, "flip.tpc")
	b[500] ^= 4
	os.WriteFile(flipped, b, 0o600)
	foreign := filepath.Join(dir, "elf")
	exe, _ := os.ReadFile("/proc/self/exe")
	os.WriteFile(foreign, exe[:4096], 0o600)
	for _, path := range []string{trunc, flipped, foreign, filepath.Join(dir, "missing.tpc"), dir} {
		code, out, errs := runCmd(t, path)
		if code != 2 || out != "" || !strings.HasPrefix(errs, "tpinspect: ") || strings.Count(errs, "\n") != 1 {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", path, code, out, errs)
		}
	}
	if code, _, _ := runCmd(t); code != 1 {
		t.Errorf("no argument: exit %d, want 1", code)
	}
}
