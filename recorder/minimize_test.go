package recorder

import (
	"fmt"
	"testing"

	"github.com/tprec/tprec/format"
)

// The window is cut after the last interval that is not replayable, at
// interval starts, into pieces of about the same number of calls, none
// under minPieceCalls; a window of one thread, where the debug registers
// work, into pieces of about the same number of intervals.
func TestTrialPieces(t *testing.T) {
	mk := func(calls []uint64, replayable []bool, threads int) *format.Checkpoint {
		c := &format.Checkpoint{}
		seq := uint64(1)
		for i, n := range calls {
			iv := format.Interval{Index: 10 + i, FirstSeq: seq, Replayable: replayable == nil || replayable[i]}
			for k := range threads {
				iv.Threads = append(iv.Threads, format.Thread{Tid: 100 + k})
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
	}{
		{[]uint64{1e5, 1e5, 1e5, 1e5}, nil, 2, "[10 12]", 0, false},
		{[]uint64{1e5, 1e5, 1e5, 1e5}, nil, 1, "[10]", 0, false},
		{[]uint64{1e5, 1e5, 1e5, 1e5}, nil, 8, "[10 11 12 13]", 0, false},
		{[]uint64{3e5, 1e4, 1e4, 1e4, 27e4}, nil, 2, "[10 11]", 0, false},
		{[]uint64{1e4, 1e4, 1e4, 1e4, 3e5}, nil, 2, "[10 14]", 0, false},
		{[]uint64{1e5, 1e5, 1e5, 1e5}, []bool{true, false, true, true}, 4, "[12 13]", 0, false},
		{[]uint64{1e5, 1e5}, []bool{true, false}, 2, "[]", 0, false},
		// Too few calls to pay for a second end search (gzip's windows).
		{[]uint64{400, 400, 400, 400}, nil, 2, "[10]", 0, false},
		{[]uint64{2e4, 2e4, 2e4}, nil, 4, "[10 11]", 0, false},
		{[]uint64{0, 0, 0}, nil, 2, "[10]", 0, false},
		// Several threads: by calls, with or without debug registers.
		{[]uint64{400, 400, 400, 400}, nil, 2, "[10]", 2, true},
		{[]uint64{1e5, 1e5, 1e5, 1e5}, nil, 2, "[10 12]", 2, true},
		// One thread: by intervals where the debug registers work.
		{[]uint64{400, 400, 400, 400}, nil, 2, "[10]", 1, false},
		{[]uint64{400, 400, 400, 400}, nil, 2, "[10 12]", 1, true},
		{[]uint64{3e5, 10, 10, 10, 10, 10}, nil, 2, "[10 13]", 1, true},
		{[]uint64{0, 0, 0}, nil, 2, "[10 11]", 1, true},
		{[]uint64{400}, nil, 2, "[10]", 1, true},
	} {
		got := fmt.Sprint(trialPieces(mk(tc.calls, tc.replayable, tc.threads), tc.n, tc.hw))
		if got != tc.want {
			t.Errorf("trialPieces(%v, replayable %v, %d, %d threads, hw %v) = %s, want %s", tc.calls, tc.replayable, tc.n, tc.threads, tc.hw, got, tc.want)
		}
	}
}
