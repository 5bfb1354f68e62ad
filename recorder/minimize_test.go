package recorder

import (
	"fmt"
	"testing"

	"github.com/tprec/tprec/format"
)

// The window is cut after the last interval that is not replayable, at
// interval starts, into pieces of about the same number of calls, none
// under minPieceCalls.
func TestTrialPieces(t *testing.T) {
	mk := func(calls []uint64, replayable []bool) *format.Checkpoint {
		c := &format.Checkpoint{}
		seq := uint64(1)
		for i, n := range calls {
			c.Intervals = append(c.Intervals, format.Interval{Index: 10 + i, FirstSeq: seq, Replayable: replayable == nil || replayable[i]})
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
	}{
		{[]uint64{1e5, 1e5, 1e5, 1e5}, nil, 2, "[10 12]"},
		{[]uint64{1e5, 1e5, 1e5, 1e5}, nil, 1, "[10]"},
		{[]uint64{1e5, 1e5, 1e5, 1e5}, nil, 8, "[10 11 12 13]"},
		{[]uint64{3e5, 1e4, 1e4, 1e4, 27e4}, nil, 2, "[10 11]"},
		{[]uint64{1e4, 1e4, 1e4, 1e4, 3e5}, nil, 2, "[10 14]"},
		{[]uint64{1e5, 1e5, 1e5, 1e5}, []bool{true, false, true, true}, 4, "[12 13]"},
		{[]uint64{1e5, 1e5}, []bool{true, false}, 2, "[]"},
		// Too few calls to pay for a second end search (gzip's windows).
		{[]uint64{400, 400, 400, 400}, nil, 2, "[10]"},
		{[]uint64{2e4, 2e4, 2e4}, nil, 4, "[10 11]"},
		{[]uint64{0, 0, 0}, nil, 2, "[10]"},
	} {
		got := fmt.Sprint(trialPieces(mk(tc.calls, tc.replayable), tc.n))
		if got != tc.want {
			t.Errorf("trialPieces(%v, replayable %v, %d) = %s, want %s", tc.calls, tc.replayable, tc.n, got, tc.want)
		}
	}
}
