package recorder

import (
	"bytes"
	"testing"

	"github.com/tprec/tprec/format"
)

func sharedOf(pages map[uint64]byte) *sharedPages {
	p := &sharedPages{}
	for _, a := range []uint64{0x1000, 0x2000, 0x3000, 0x4000, 0x9000} {
		if b, ok := pages[a]; ok {
			p.addrs = append(p.addrs, a)
			p.data = append(p.data, bytes.Repeat([]byte{b}, format.PageSize)...)
		}
	}
	return p
}

// A shared page that changed gets its start copy as original, one listed in
// written (its mapping went away) too, instead of the shadow's; other
// written pages stay with the shadow; a page the start copy lacks is
// reported.
func TestSharedOriginals(t *testing.T) {
	start := sharedOf(map[uint64]byte{0x1000: 1, 0x2000: 2, 0x3000: 3})
	end := sharedOf(map[uint64]byte{0x1000: 1, 0x2000: 7, 0x4000: 4})
	never := func(uint64) bool { return false }
	orig, rest, appeared := start.originals(end, []uint64{0x3000, 0x9000}, never)
	if len(rest) != 1 || rest[0] != 0x9000 {
		t.Errorf("rest %x, want [9000]", rest)
	}
	if appeared != 0x4000 {
		t.Errorf("appeared %#x, want 0x4000", appeared)
	}
	got := map[uint64]byte{}
	for _, p := range orig {
		got[p.addr] = p.data[0]
	}
	if len(got) != 2 || got[0x2000] != 2 || got[0x3000] != 3 {
		t.Errorf("originals %v, want 0x2000 with its start content 2 and 0x3000 with 3", got)
	}
	// No shared memory: written passes through.
	var none *sharedPages
	if orig, rest, appeared := none.originals(nil, []uint64{0x9000}, never); len(orig) != 0 || len(rest) != 1 || appeared != 0 {
		t.Errorf("without shared pages: %v %v %#x", orig, rest, appeared)
	}
	// A page of shared anonymous memory mapped in the interval where
	// nothing was is not unknown: it began as zeros.
	if _, _, appeared := start.originals(end, nil, func(a uint64) bool { return a == 0x4000 }); appeared != 0 {
		t.Errorf("a fresh shared page reported as appeared: %#x", appeared)
	}
}

// freshShared: only shared anonymous memory, only where the interval's
// start had no mapping.
func TestFreshShared(t *testing.T) {
	start := []format.Mapping{{Start: 0x1000, End: 0x3000, Path: "/dev/zero (deleted)", Shared: true}}
	end := []format.Mapping{
		{Start: 0x1000, End: 0x3000, Path: "/dev/zero (deleted)", Shared: true},
		{Start: 0x5000, End: 0x6000, Path: "/dev/zero (deleted)", Shared: true},
		{Start: 0x7000, End: 0x8000, Path: "/tmp/f", Shared: true},
	}
	fresh := freshShared(start, end)
	for a, want := range map[uint64]bool{0x1000: false, 0x5000: true, 0x7000: false, 0x9000: false} {
		if got := fresh(a); got != want {
			t.Errorf("freshShared(%#x) = %v, want %v", a, got, want)
		}
	}
}
