package replayer

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// removeLinear is the plain definition of guardSet.remove: every guard
// copied, those overlapping [start, end) cut.
func removeLinear(g []guard, start, end uint64) []guard {
	var out []guard
	for _, x := range g {
		if x.end <= start || x.start >= end {
			out = append(out, x)
			continue
		}
		if x.start < start {
			l := x
			l.end = start
			out = append(out, l)
		}
		if x.end > end {
			r := x
			r.start = end
			out = append(out, r)
		}
	}
	return out
}

// The binary-search remove leaves the same guards as the plain definition,
// through random adds and removes of ranges that overlap, touch, split and
// swallow guards.
func TestGuardSetRemoveMatchesDefinition(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var s guardSet
	var want []guard
	for i := 0; i < 20000; i++ {
		a := uint64(r.IntN(200)) * pageSize
		b := a + uint64(r.IntN(12)+1)*pageSize
		if r.IntN(3) == 0 {
			g := guard{start: a, end: b, prot: uint32(r.IntN(8)), zero: r.IntN(2) == 0}
			s.add(g)
			want = removeLinear(want, a, b)
			k, _ := slices.BinarySearchFunc(want, a, func(x guard, a uint64) int { return int(x.start>>12) - int(a>>12) })
			want = slices.Insert(want, k, g)
		} else {
			s.remove(a, b)
			want = removeLinear(want, a, b)
		}
		if !slices.Equal(s.g, want) {
			t.Fatalf("step %d: got %v, want %v", i, s.g, want)
		}
	}
}
