package e2e

import (
	"strings"
	"testing"
)

// Some virtual machines accept writes to the debug registers and never
// raise the trap (a PVM guest on AMD EPYC: gdb's `hbreak` says "No hardware
// breakpoint support in the target"). tprec and tpreplay find that out with
// a probe and use int3 instead: the entry point stop after an exec, the
// search for where a signal from outside hit the program (also inside a
// `rep movsb`), and gdb's write watchpoints, which then run by single steps.
// TPREC_NO_DEBUG_REGISTERS makes the probe say no, so that these paths run
// on every machine; on one without working debug registers the tests run
// them anyway.
func TestWithoutDebugRegisters(t *testing.T) {
	requireRoot(t)
	t.Setenv("TPREC_NO_DEBUG_REGISTERS", "1")
	t.Run("ProbeSaysNo", func(t *testing.T) {
		dir := t.TempDir()
		ck := recordOne(t, dir, "-o", dir, "--", "/bin/sh", "-c", `i=0; while [ $i -lt 30000 ]; do i=$((i+1)); done; kill -SEGV $$`)
		if out := replay(t, ck, "-v"); !strings.Contains(out, "the debug registers do not work on this machine (TPREC_NO_DEBUG_REGISTERS is set)") {
			t.Fatalf("tpreplay -v does not say it uses int3:\n%s", out)
		}
	})
	for _, c := range []struct {
		name string
		test func(*testing.T)
	}{
		{"CrashInFirstInterval", TestCrashInFirstInterval},
		{"TimerSignalsInComputation", TestTimerSignalsInComputation},
		{"EndInsideRepString", TestEndInsideRepString},
		{"GDBReverseWatch", TestGDBReverseWatch},
	} {
		t.Run(c.name, c.test)
	}
}
