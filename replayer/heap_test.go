package replayer

import (
	"testing"

	"github.com/tprec/tprec/format"
)

// A process that got its heap from its parent through fork shows two
// [heap] mappings once its break moved (/proc/PID/maps of a tmux server and
// of a daemonized perl): the break is the end of the last, and an interval
// before the heap existed takes the start of the first one a later interval
// shows.
func TestHeapEnd(t *testing.T) {
	heap := func(lo, hi uint64) format.Mapping {
		return format.Mapping{Start: lo, End: hi, Prot: 3, Path: "[heap]"}
	}
	other := format.Mapping{Start: 0x7f0000000000, End: 0x7f0000001000, Prot: 3}
	c := &format.Checkpoint{Intervals: []format.Interval{
		{Maps: []format.Mapping{other}},
		{Maps: []format.Mapping{heap(0x5600_0002_0000, 0x5600_0004_0000), heap(0x5600_0001_0000, 0x5600_0002_0000), other}},
		{Maps: []format.Mapping{heap(0x5600_0001_0000, 0x5600_0002_0000), heap(0x5600_0002_0000, 0x5600_0003_0000), other}},
		{Maps: []format.Mapping{other}},
	}}
	for k, want := range []uint64{0x5600_0001_0000, 0x5600_0004_0000, 0x5600_0003_0000, 0} {
		if got := heapEnd(c, k); got != want {
			t.Errorf("interval %d: heapEnd %#x, want %#x", k, got, want)
		}
	}
}
