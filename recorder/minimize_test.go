package recorder

import (
	"fmt"
	"testing"

	"github.com/tprec/tprec/format"
)

// The window is cut after the last interval that is not replayable, at
// interval starts, into pieces of about the same number of calls.
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
		{[]uint64{100, 100, 100, 100}, nil, 2, "[10 12]"},
		{[]uint64{100, 100, 100, 100}, nil, 1, "[10]"},
		{[]uint64{100, 100, 100, 100}, nil, 8, "[10 11 12 13]"},
		{[]uint64{300, 10, 10, 10, 270}, nil, 2, "[10 11]"},
		{[]uint64{10, 10, 10, 10, 300}, nil, 2, "[10 14]"},
		{[]uint64{100, 100, 100, 100}, []bool{true, false, true, true}, 4, "[12 13]"},
		{[]uint64{100, 100}, []bool{true, false}, 2, "[]"},
		{[]uint64{0, 0, 0}, nil, 2, "[10 11]"},
	} {
		got := fmt.Sprint(trialPieces(mk(tc.calls, tc.replayable), tc.n))
		if got != tc.want {
			t.Errorf("trialPieces(%v, replayable %v, %d) = %s, want %s", tc.calls, tc.replayable, tc.n, got, tc.want)
		}
	}
}
