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
	inProcess, _ := searchEnds(t, "loop", 3001, 3010)
	// The loop (gcc -O1): movzbl, movzbl, add, mov, mov rip, add, mov rip,
	// add, jmp.
	if inProcess != 9 {
		t.Errorf("%d of 9 ends searched in the process", inProcess)
	}
}

// The loop of testdata/looptail.c is entered at its second instruction,
// just after the end rip when the recording ended at its first, a 4-byte
// add. The jmp's 5 bytes displace the entry too, and the jump there is
// moved to its copy at a stop. With punned jmps (the default), that stop
// moves the search to a punned jmp that displaces the add alone, its last
// byte being the entry's first, and no later jump there stops; a punned
// jmp is not the first choice, being slower at each pass. Displaced jumps,
// a conditional one taken at every other iteration among them, go where
// they went: the replay reaches the end from each of the loop's six
// instructions, both ways.
func TestEndSearchInProcessJumpInside(t *testing.T) {
	needRoot(t)
	for _, pun := range []bool{true, false} {
		punJumps = pun
		inProcess, redirected, punned := 0, 0, 0
		for steps := 200; steps < 206; steps++ {
			rec, res := replayRequestAt(t, "looptail", steps)
			if res.EndPasses > 0 {
				inProcess++
			}
			if res.endRedirects > 0 {
				redirected++
			}
			if res.endPunned {
				punned++
			}
			sameEndStopping(t, steps, rec, res)
			t.Logf("punned jmps %v, %d steps: end at %#x, %d passes, %d jumps moved, punned %v", pun, steps, res.Rip, res.EndPasses, res.endRedirects, res.endPunned)
		}
		// add, add, bt, jb, add, jmp: the first one's 5 bytes cover the
		// loop's entry, where a punned jmp takes over.
		want := [3]int{6, 1, 1}
		if !pun {
			want = [3]int{6, 1, 0}
		}
		if !debugRegisters(t) {
			// Only the bt (5 bytes) takes a plain jmp; the five
			// shorter ones need a punned one each.
			want = [3]int{6, 0, 5}
			if !pun {
				want = [3]int{1, 0, 0}
			}
		}
		if inProcess != want[0] || redirected != want[1] || punned != want[2] {
			t.Errorf("punned jmps %v: %d of 6 ends searched in the process, %d with a jump moved, %d punned; want %d, %d and %d", pun, inProcess, redirected, punned, want[0], want[1], want[2])
		}
	}
	punJumps = true
}

// debugRegisters reports whether the debug registers work here
// (HardwareBreakpoints). Where they do not (a PVM guest on AMD EPYC), the
// search's jmp displaces one instruction: one of 5 bytes or more, or a
// shorter one under a punned jmp; no debug register watches the
// instructions after it, so no jump into them is moved and no call
// retargeted, and an end the jmp cannot be placed at alone is searched
// with a stop at every pass. Each test says what it expects then, and
// every end must still be the one a replay that stops at every pass
// reaches.
func debugRegisters(t *testing.T) bool {
	ok, why := HardwareBreakpoints()
	if !ok {
		t.Logf("the debug registers do not work here (%s): the search displaces one instruction", why)
	}
	return ok
}

// sameEndStopping replays rec again with a stop at every pass of the end
// search, and requires the end res found in the process.
func sameEndStopping(t *testing.T, steps int, rec *recording, res *Result) {
	t.Helper()
	t.Setenv("TPREPLAY_NO_IN_PROCESS", "1")
	plain, err := run(t, rec.c, rec.pages, Options{})
	t.Setenv("TPREPLAY_NO_IN_PROCESS", "")
	if err != nil || plain.Rip != res.Rip || plain.EndPasses != 0 {
		t.Fatalf("%d steps: the replay with a stop per pass: %v, %+v", steps, err, plain)
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

// A loop whose registers are the same at every pass, its count in memory
// only, and a direct call right after a short instruction
// (testdata/loopcall.c: add to memory, xor, mov, call, ret, jmp). Wherever
// the recording ended, the search runs in the process: a call among the
// displaced instructions is moved as a push of its return address and a
// jmp. Where the registers repeat (everywhere but at the xor, whose flags
// come from the add, and may repeat too), the first stop finds memory
// different, and the
// process then also compares the count with its recorded value, so that it
// stops only at the pass that has it. The end is the one a replay that
// stops at every pass reaches.
func TestEndSearchInProcessMemoryWord(t *testing.T) {
	needRoot(t)
	// Without debug registers too: the loop's 2-byte jmp back takes a
	// punned jmp with a prefix (punTarget).
	if inProcess, words := searchEnds(t, "loopcall", 4001, 4007); inProcess != 6 || words < 5 {
		t.Errorf("%d of 6 ends searched in the process, %d with a memory word compared there; want 6 and at least 5", inProcess, words)
	}
}

// As TestEndSearchInProcessMemoryWord, with the call made through a
// pointer (testdata/loopindirect.c: add to memory, xor, mov, `call *%r12`,
// jmp): an indirect call among the displaced instructions is moved as a
// push of its return address and a jmp through the same register. Before,
// the search stopped at every pass wherever the jmp would displace it
// (openssl speed, crashed on the mov before its `call *%r13`: half a
// million stops and a timeout in a CI run).
func TestEndSearchInProcessIndirectCall(t *testing.T) {
	needRoot(t)
	inProcess, _ := searchEnds(t, "loopindirect", 4001, 4006)
	if inProcess != 5 {
		t.Errorf("%d of 5 ends searched in the process, want 5", inProcess)
	}
}

// testdata/loopret.c calls two functions in a loop, the second starting
// right after the first one's `ret` (add, xor, ret, then xor, ret).
//   - Ended at the xor before that `ret`, the end search's jmp displaces
//     the second function's first instruction, which the loop calls at
//     every pass: the first call is moved to the copy at a stop, and the
//     call itself then goes to the copy, so later passes make no stop.
//   - Ended at the `ret`, the search compares where it returns to, with rsp
//     8 higher, and rewinds a match to the `ret`.
//
// Each end is the one a replay that stops at every pass reaches.
//
// With punned jmps (the default), that first call's stop moves the search
// to a punned jmp that displaces the xor alone, the next function's first
// instruction staying where it is: no call is retargeted. The test runs
// both ways.
func TestEndSearchInProcessNearFunctionStart(t *testing.T) {
	needRoot(t)
	drs := debugRegisters(t)
	for _, pun := range []bool{false, true} {
		punJumps = pun
		retargeted, afterRet, notInProcess := 0, 0, 0
		for steps := 4001; steps < 4010; steps++ {
			rec, res := replayRequestAt(t, "loopret", steps)
			if res.endRetargeted > 0 {
				retargeted++
			}
			if res.endAfterRet {
				afterRet++
			}
			if res.EndPasses == 0 {
				notInProcess++
				if drs {
					t.Errorf("%d steps: end at %#x not searched in the process", steps, res.Rip)
				}
			}
			sameEndStopping(t, steps, rec, res)
			t.Logf("punned jmps %v, %d steps: end at %#x, %d passes in the process, %d jumps moved, %d calls retargeted, after the ret %v, punned %v", pun, steps, res.Rip, res.EndPasses, res.endRedirects, res.endRetargeted, res.endAfterRet, res.endPunned)
		}
		// Two rets (bump's and zero's), one xor before a function start.
		want := [3]int{1, 2, 0}
		if pun {
			want = [3]int{0, 2, 0}
		}
		if !drs && !pun {
			// No call retargeted (a debug register's trap moves the
			// first), one of the two rets searched after it returns,
			// and four ends with no jmp of their own. With punned jmps
			// (padded where the code's bytes say so) every end has one,
			// as where the debug registers work.
			want = [3]int{0, 1, 4}
		}
		if retargeted != want[0] || afterRet != want[1] || notInProcess != want[2] {
			t.Errorf("punned jmps %v: %d of 9 ends had a call made to go to the copy, %d were searched after their ret, %d not in the process; want %d, %d and %d", pun, retargeted, afterRet, notInProcess, want[0], want[1], want[2])
		}
	}
	punJumps = true
}

// searchEnds ends a recording of the fixture after each number of steps in
// [from, to), requires each replay to reach the end a replay that stops at
// every pass reaches, and counts the ends searched in the process and those
// where a memory word was compared there too.
func searchEnds(t *testing.T, fixture string, from, to int) (inProcess, words int) {
	t.Helper()
	for steps := from; steps < to; steps++ {
		rec, res := replayRequestAt(t, fixture, steps)
		if res.EndPasses > 0 {
			inProcess++
		}
		if len(res.EndWords) > 0 {
			words++
		}
		sameEndStopping(t, steps, rec, res)
		t.Logf("%d steps: end at %#x, %d passes compared in the process, words %#x", steps, res.Rip, res.EndPasses, res.EndWords)
	}
	return inProcess, words
}

// testdata/loopendbr.c calls, in a loop, a function that begins as
// OPENSSL_cleanse does in Debian's libcrypto, with a 4-byte endbr64, the
// registers at its entry the same at every call. x86asm takes endbr64 for
// a lone rep prefix followed by an instruction it does not know, so an end
// at that entry was searched with a stop at every pass: openssl speed
// crashed there in a CI run stopped 879,960 times in 30 s, and the trial
// replay timed out. The end search now runs in the process at the entry
// and at the instructions after it, with and without punned jmps.
func TestEndSearchInProcessEndbr(t *testing.T) {
	needRoot(t)
	for _, pun := range []bool{true, false} {
		punJumps = pun
		// 4012 steps end at the endbr64, 4013 at the xor after it, 4014
		// at the cmp.
		want := 3
		if !pun && !debugRegisters(t) {
			want = 0 // three instructions shorter than a jmp
		}
		if inProcess, words := searchEnds(t, "loopendbr", 4012, 4015); inProcess != want || words != want {
			t.Errorf("punned jmps %v: %d of 3 ends searched in the process, %d with a memory word compared there; want %d and %d", pun, inProcess, words, want, want)
		}
	}
	punJumps = true
}

// testdata/loopcross.c loops over an add to memory that begins 6 bytes
// before the end of a page and ends in the next, then a xor and a jmp back.
// A jmp over that add needs bytes of the next page, and the displaced
// instructions were read from the end's page only: an end there was
// searched with a stop at every pass (a busyworker replay in CI whose worker
// was to stop at the last 4 bytes of a page). All three ends are now
// searched in the process.
func TestEndSearchInProcessAcrossPages(t *testing.T) {
	needRoot(t)
	if inProcess, _ := searchEnds(t, "loopcross", 4001, 4004); inProcess != 3 {
		t.Errorf("%d of 3 ends searched in the process, want 3", inProcess)
	}
}
