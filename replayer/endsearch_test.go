package replayer

import (
	"testing"

	"golang.org/x/sys/unix"
)

// The end search in the process finds the end of a loop that makes no
// call, wherever in the loop the recording ended: at each of its nine
// instructions, rip-relative ones and its jmp among them, and where the
// registers repeat every 256 iterations while memory does not (the
// engine's comparison of the digests then turns the false matches down).
// Every replay reaches the same end as a replay that stops at every pass.
func TestEndSearchInProcess(t *testing.T) {
	needRoot(t)
	inProcess := 0
	for steps := 3001; steps < 3010; steps++ {
		rec, res := replayRequestAt(t, "loop", steps)
		if res.EndPasses > 0 {
			inProcess++
		}
		t.Setenv("TPREPLAY_NO_IN_PROCESS", "1")
		plain, err := run(t, rec.c, rec.pages, Options{})
		t.Setenv("TPREPLAY_NO_IN_PROCESS", "")
		if err != nil || plain.Rip != res.Rip || plain.EndPasses != 0 {
			t.Fatalf("%d steps: the replay with a stop per pass: %v, %+v", steps, err, plain)
		}
		t.Logf("%d steps: end at %#x, %d passes compared in the process", steps, res.Rip, res.EndPasses)
	}
	// The loop (gcc -O1): movzbl, movzbl, add, mov, mov rip, add, mov rip,
	// add, jmp.
	if inProcess != 9 {
		t.Errorf("%d of 9 ends searched in the process", inProcess)
	}
}

// A jump to an instruction the end search displaced (the loop of
// testdata/looptail.c is entered at its second instruction, just after the
// end rip when the recording ended at its first) runs that instruction's
// copy, and displaced jumps, a conditional one taken at every other
// iteration among them, go where they went: the replay reaches the end
// from each of the loop's six instructions.
func TestEndSearchInProcessJumpInside(t *testing.T) {
	needRoot(t)
	inProcess, redirected := 0, 0
	for steps := 200; steps < 206; steps++ {
		_, res := replayRequestAt(t, "looptail", steps)
		if res.EndPasses > 0 {
			inProcess++
		}
		if res.endRedirects > 0 {
			redirected++
		}
		t.Logf("%d steps: end at %#x, %d passes, %d jumps moved", steps, res.Rip, res.EndPasses, res.endRedirects)
	}
	// add, add, bt, jb, add, jmp: the first one's 5 bytes cover the
	// loop's entry.
	if inProcess != 6 || redirected != 1 {
		t.Errorf("%d of 6 ends searched in the process, %d with a jump moved; want 6 and 1", inProcess, redirected)
	}
}

// replayRequestAt records fixture name, ending it with a dump request steps
// instructions after its getuid, and replays it to that end.
func replayRequestAt(t *testing.T, name string, steps int) (*recording, *Result) {
	t.Helper()
	rec := record(t, fixture(t, name), recordOpts{requestAfter: unix.SYS_GETUID, requestSteps: steps})
	res, err := run(t, rec.c, rec.pages, Options{})
	if err != nil {
		t.Fatalf("%d steps: replay: %v", steps, err)
	}
	if res.Rip != rec.c.End.Regs.Rip {
		t.Fatalf("%d steps: replay ended at %#x, recorded %#x", steps, res.Rip, rec.c.End.Regs.Rip)
	}
	return rec, res
}
