package recorder

import (
	"fmt"
	"slices"
	"testing"

	"github.com/tprec/tprec/format"
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
