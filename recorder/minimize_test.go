package recorder

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/replayer"
)

// The window is cut after the last interval that is not replayable, at
// interval starts, into pieces of about the same number of calls, none
// under minPieceCalls; a window of one thread, where the debug registers
// work, into pieces of about the same number of intervals.
func TestTrialPieces(t *testing.T) {
	mk := func(calls []uint64, replayable []bool, threads int, inCall ...int) *format.Checkpoint {
		c := &format.Checkpoint{}
		seq := uint64(1)
		for i, n := range calls {
			iv := format.Interval{Index: 10 + i, FirstSeq: seq, Replayable: replayable == nil || replayable[i]}
			for k := range threads {
				iv.Threads = append(iv.Threads, format.Thread{Tid: 100 + k, InSyscall: slices.Contains(inCall, i)})
			}
			c.Intervals = append(c.Intervals, iv)
			seq += n
		}
		c.End.LastSeq = seq - 1
		return c
	}
	for _, tc := range []struct {
		calls      []uint64
		replayable []bool
		n          int
		want       string
		threads    int
		hw         bool
		inCall     []int // intervals that start with the thread in a call
	}{
		{[]uint64{1e5, 1e5, 1e5, 1e5}, nil, 2, "[10 12]", 0, false, nil},
		{[]uint64{1e5, 1e5, 1e5, 1e5}, nil, 1, "[10]", 0, false, nil},
		{[]uint64{1e5, 1e5, 1e5, 1e5}, nil, 8, "[10 11 12 13]", 0, false, nil},
		{[]uint64{3e5, 1e4, 1e4, 1e4, 27e4}, nil, 2, "[10 11]", 0, false, nil},
		{[]uint64{1e4, 1e4, 1e4, 1e4, 3e5}, nil, 2, "[10 14]", 0, false, nil},
		{[]uint64{1e5, 1e5, 1e5, 1e5}, []bool{true, false, true, true}, 4, "[12 13]", 0, false, nil},
		{[]uint64{1e5, 1e5}, []bool{true, false}, 2, "[]", 0, false, nil},
		// Too few calls to pay for a second end search (gzip's windows).
		{[]uint64{400, 400, 400, 400}, nil, 2, "[10]", 0, false, nil},
		{[]uint64{2e4, 2e4, 2e4}, nil, 4, "[10 11]", 0, false, nil},
		{[]uint64{0, 0, 0}, nil, 2, "[10]", 0, false, nil},
		// Several threads: by calls, with or without debug registers.
		{[]uint64{400, 400, 400, 400}, nil, 2, "[10]", 2, true, nil},
		{[]uint64{1e5, 1e5, 1e5, 1e5}, nil, 2, "[10 12]", 2, true, nil},
		// One thread: by intervals where the debug registers work.
		{[]uint64{400, 400, 400, 400}, nil, 2, "[10]", 1, false, nil},
		{[]uint64{400, 400, 400, 400}, nil, 2, "[10 12]", 1, true, nil},
		{[]uint64{3e5, 10, 10, 10, 10, 10}, nil, 2, "[10 13]", 1, true, nil},
		{[]uint64{0, 0, 0}, nil, 2, "[10 11]", 1, true, nil},
		{[]uint64{400}, nil, 2, "[10]", 1, true, nil},
		// Not at a start where the one thread is in a call (a sleep).
		{[]uint64{400, 400, 400, 400}, nil, 2, "[10 11]", 1, true, []int{2}},
		{[]uint64{0, 0, 0, 0, 0}, nil, 2, "[10]", 1, true, []int{1, 2, 3, 4}},
	} {
		got := fmt.Sprint(trialPieces(mk(tc.calls, tc.replayable, tc.threads, tc.inCall...), tc.n, tc.hw))
		if got != tc.want {
			t.Errorf("trialPieces(%v, replayable %v, %d, %d threads, hw %v) = %s, want %s", tc.calls, tc.replayable, tc.n, tc.threads, tc.hw, got, tc.want)
		}
	}
}

// A piece does not end where a thread is in a call (a join's futex wait)
// after a thread that made calls in the interval before ended: the end
// wakes the waiter without a call, which the log cannot order.
func TestTrialPiecesNotAtAJoin(t *testing.T) {
	c := &format.Checkpoint{}
	seq := uint64(1)
	for i := range 4 {
		iv := format.Interval{Index: 10 + i, FirstSeq: seq, Replayable: true,
			Threads: []format.Thread{{Tid: 100, InSyscall: i == 2}}}
		c.Intervals = append(c.Intervals, iv)
		for k := range 100000 {
			tid := 100
			if i == 1 && k%2 == 1 {
				tid = 200 + k%7 // threads started and ended in interval 11
			}
			c.Syscalls = append(c.Syscalls, format.Syscall{Seq: seq, Tid: tid})
			seq++
		}
	}
	c.End.LastSeq = seq - 1
	if got := fmt.Sprint(trialPieces(c, 2, false)); got != "[10 11]" {
		t.Errorf("pieces %s, want [10 11] (as near the middle as 13): not at 12, where thread 100 waits after the threads of 11 ended", got)
	}
	c.Intervals[2].Threads[0].InSyscall = false
	if got := fmt.Sprint(trialPieces(c, 2, false)); got != "[10 12]" {
		t.Errorf("pieces %s, want [10 12] with no thread in a call there", got)
	}
	// Threads that go on (a server's idle workers) do not count.
	c.Intervals[2].Threads[0].InSyscall = true
	for i := range c.Intervals {
		for k := range 7 {
			c.Intervals[i].Threads = append(c.Intervals[i].Threads, format.Thread{Tid: 200 + k, InSyscall: true})
		}
	}
	if got := fmt.Sprint(trialPieces(c, 2, false)); got != "[10 12]" {
		t.Errorf("pieces %s, want [10 12] when every thread lives on", got)
	}
}

// A divergence in the last interval (at the end, where memory differed)
// halves the replayable window, again at each try, until one interval is
// left; one in an earlier interval moves the start past it. So for one
// thread as for several, unless the one thread ran out of time.
func TestCutDivergedHalvesAtTheEnd(t *testing.T) {
	c := &format.Checkpoint{}
	for i := range 8 {
		c.Intervals = append(c.Intervals, format.Interval{Index: 3 + i, FirstSeq: uint64(1 + 100*i), Replayable: true})
	}
	c.End.LastSeq = 800
	starts := func() string {
		var out []int
		for _, iv := range c.Intervals {
			if iv.Replayable {
				out = append(out, iv.Index)
			}
		}
		return fmt.Sprint(out)
	}
	atEnd := &replayer.Divergence{Threads: 5, Seq: 800, Reason: "made a syscall after the last recorded one"}
	for _, want := range []string{"[7 8 9 10]", "[9 10]", "[10]"} {
		if !cutDiverged(c, atEnd, t.Logf) {
			t.Fatalf("no cut, want the window %s", want)
		}
		if got := starts(); got != want {
			t.Fatalf("replayable intervals %s, want %s", got, want)
		}
	}
	if cutDiverged(c, atEnd, t.Logf) {
		t.Fatalf("cut a window of one interval: %s left", starts())
	}
	if r := c.Intervals[0].Reason; !strings.Contains(r, "diverged in the last interval") {
		t.Errorf("the first interval's reason: %q", r)
	}

	reset := func() {
		for i := range c.Intervals {
			c.Intervals[i].Replayable, c.Intervals[i].Reason = true, ""
		}
	}
	// One thread that ran out of time: a later start would spend the
	// trial's time again, no cut.
	reset()
	if cutDiverged(c, &replayer.Divergence{Threads: 1, Seq: 800, Timeout: true}, t.Logf) {
		t.Errorf("a timeout of one thread cut the window to %s", starts())
	}
	// One that ran out of time after it passed the end's rip with other
	// registers or memory (gpg's cipher loop): a divergence of data.
	if !cutDiverged(c, &replayer.Divergence{Threads: 1, Seq: 800, Timeout: true, EndPassed: true}, t.Logf) || starts() != "[7 8 9 10]" {
		t.Errorf("a timeout after the end's rip was passed left the window %s, want [7 8 9 10]", starts())
	}
	reset()
	// One thread that read something the recording did not capture
	// (rdrand, rdtsc): the same cuts as for threads.
	if !cutDiverged(c, &replayer.Divergence{Threads: 1, Seq: 800}, t.Logf) || starts() != "[7 8 9 10]" {
		t.Errorf("a divergence of one thread at the end left the window %s, want [7 8 9 10]", starts())
	}
	if r := c.Intervals[0].Reason; !strings.HasPrefix(r, "the trial replay from here diverged in the last interval") {
		t.Errorf("the first interval's reason: %q", r)
	}
	reset()
	if !cutDiverged(c, &replayer.Divergence{Threads: 1, Seq: 350}, t.Logf) || starts() != "[7 8 9 10]" {
		t.Errorf("a divergence of one thread in interval 6 left the window %s, want [7 8 9 10]", starts())
	}
	// Several threads, in an earlier interval: the window starts after it.
	reset()
	if !cutDiverged(c, &replayer.Divergence{Threads: 2, Seq: 250}, t.Logf) || starts() != "[6 7 8 9 10]" {
		t.Errorf("a divergence in interval 5 left the window %s, want [6 7 8 9 10]", starts())
	}
}

// Each replay of a trial gets what is left of the trial's budget, at most
// its own bound; once the budget is spent the trial fails without
// replaying, and the late schedule gets four times what the eager replay
// took. A replay here waits for its whole timeout and diverges on it, as a
// window whose threads spin for one another's stores does.
func TestTrialBudget(t *testing.T) {
	c := &format.Checkpoint{}
	start := time.Now()
	for i := range 4 {
		c.Intervals = append(c.Intervals, format.Interval{Index: i, Start: start.Add(time.Duration(i) * 250 * time.Millisecond), End: start.Add(time.Duration(i+1) * 250 * time.Millisecond), Replayable: true})
	}
	tr := newTrial(context.Background(), c, nil, true)
	if tr.budget != 60*time.Second {
		t.Fatalf("budget %v for a 1 s window, want twice the 30 s a replay may take", tr.budget)
	}
	var timeouts []time.Duration
	tr.replay = func(_ context.Context, _ *format.Checkpoint, _ format.PageSource, _ int, _ bool, o replayer.Options) (*replayer.Result, error) {
		timeouts = append(timeouts, o.Timeout)
		time.Sleep(o.Timeout)
		return nil, &replayer.Divergence{Threads: 2, Timeout: true, Reason: "did not reach the recorded end state"}
	}
	// As if most of the budget were gone.
	tr.budget, tr.deadline = 300*time.Millisecond, time.Now().Add(300*time.Millisecond)
	if _, err := tr.run(1, replayer.Options{}); err == nil {
		t.Fatal("the replay verified")
	}
	if _, err := tr.run(1, replayer.Options{}); err == nil || !strings.Contains(err.Error(), "the trial replay used its 300ms") {
		t.Fatalf("after the budget: %v, want the budget's error", err)
	}
	if len(timeouts) != 1 || timeouts[0] > 300*time.Millisecond || timeouts[0] < 250*time.Millisecond {
		t.Errorf("timeouts %v, want one of at most what was left of 300ms", timeouts)
	}

	timeouts = nil
	tr.deadline = time.Now().Add(time.Hour)
	tr.took = 2 * time.Second
	tr.replay = func(_ context.Context, _ *format.Checkpoint, _ format.PageSource, _ int, _ bool, o replayer.Options) (*replayer.Result, error) {
		timeouts = append(timeouts, o.Timeout)
		if o.Schedule == nil || *o.Schedule != format.ScheduleLate {
			t.Errorf("schedule %v, want late", o.Schedule)
		}
		return &replayer.Result{}, nil
	}
	if _, err := tr.late(1, errors.New("eager diverged"), t.Logf); err != nil || c.Header.Schedule != format.ScheduleLate {
		t.Fatalf("late: %v, schedule %v", err, c.Header.Schedule)
	}
	if len(timeouts) != 1 || timeouts[0] != 8*time.Second {
		t.Errorf("late timeouts %v, want 4 times the eager replay's 2 s", timeouts)
	}
}
