package format

import (
	"fmt"
	"testing"
)

func TestDigestPageMasks(t *testing.T) {
	page := func(fill func(p []byte)) []byte {
		p := make([]byte, PageSize)
		for i := range p {
			p[i] = byte(i)
		}
		if fill != nil {
			fill(p)
		}
		return p
	}
	const addr = 0x7ffd00010000
	rsp := uint64(addr + 0x800)
	base := DigestPage(addr, page(nil), nil, rsp)
	// Dead stack (below rsp-128) does not count...
	if DigestPage(addr, page(func(p []byte) { p[0x100] ^= 0xff }), nil, rsp) != base {
		t.Error("a byte of the dead stack changed the digest")
	}
	// ...the red zone and the live stack do.
	if DigestPage(addr, page(func(p []byte) { p[0x800-8] ^= 0xff }), nil, rsp) == base {
		t.Error("a byte of the red zone did not change the digest")
	}
	if DigestPage(addr, page(func(p []byte) { p[0x900] ^= 0xff }), nil, rsp) == base {
		t.Error("a byte above rsp did not change the digest")
	}
	// The rseq area does not count either, wherever it is.
	// Nor do those of the other threads.
	rs := []Rseq{{Addr: 0x5000, Len: 32}, {Addr: addr + 0xa00, Len: 32}, {Addr: addr + 0xc00, Len: 32}}
	for _, off := range []int{0xa10, 0xc1f} {
		if DigestPage(addr, page(func(p []byte) { p[off] ^= 0xff }), rs, rsp) != DigestPage(addr, page(nil), rs, rsp) {
			t.Errorf("a byte of an rseq area (offset %#x) changed the digest", off)
		}
	}
	if DigestPage(addr, page(func(p []byte) { p[0xc20] ^= 0xff }), rs, rsp) == DigestPage(addr, page(nil), rs, rsp) {
		t.Error("a byte past the rseq areas did not change the digest")
	}
	// A page far from the stack is hashed as is.
	far := page(nil)
	if DigestPage(0x1000, far, nil, rsp) != HashPage(far) {
		t.Error("a page away from the stack and rseq is not hashed as is")
	}
	if far[0x100] != 0 || far[1] != 1 {
		t.Error("DigestPage changed its input")
	}
}

// DeadStacks gives, for each thread but the one named, the part of its
// stack's mapping below its red zone, at most DeadStack: not a neighbouring
// thread's stack below the mapping, and nothing for a thread whose stack
// pointer lies in no mapping.
func TestDeadStacks(t *testing.T) {
	const mb = 1 << 20
	maps := []Mapping{
		{Start: 0x7f0000000000, End: 0x7f0000000000 + 8*mb}, // thread A's stack
		{Start: 0x7f0000000000 + 8*mb, End: 0x7f0000000000 + 8*mb + 4096},
		{Start: 0x7f0000000000 + 8*mb + 4096, End: 0x7f0000000000 + 16*mb + 4096}, // thread B's
		{Start: 0x7ffd00000000, End: 0x7ffd00000000 + 20*mb},                      // [stack], larger than DeadStack
	}
	thread := func(tid int, rsp uint64) Thread { return Thread{Tid: tid, Regs: Regs{Rsp: rsp}} }
	threads := []Thread{
		thread(1, 0x7ffd00000000+20*mb-0x1000),
		thread(2, 0x7f0000000000+0x5000),
		thread(3, 0x7f0000000000+16*mb),
		thread(4, 0x1000), // in no mapping
	}
	got := DeadStacks(threads, 1, maps)
	want := []Span{
		{0x7f0000000000, 0x7f0000000000 + 0x5000 - 128},
		{0x7f0000000000 + 8*mb + 4096, 0x7f0000000000 + 16*mb - 128},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("thread 1 excepted: %#x, want %#x", got, want)
	}
	got = DeadStacks(threads[:1], 2, maps)
	top := uint64(0x7ffd00000000 + 20*mb - 0x1000)
	if want := []Span{{top - DeadStack, top - 128}}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("the main stack: %#x, want %#x", got, want)
	}
	// DeadStacksAt takes an interval start's threads and map, or at the
	// end the end's threads with the last interval's map.
	c := &Checkpoint{
		Intervals: []Interval{{Threads: threads[:1], Maps: maps}, {Threads: threads[1:2], Maps: maps}},
		End:       EndState{Threads: threads[2:3]},
	}
	for u, want := range [][]Span{DeadStacks(threads[:1], 0, maps), DeadStacks(threads[1:2], 0, maps), DeadStacks(threads[2:3], 0, maps)} {
		if got := c.DeadStacksAt(u, 0); len(got) != 1 || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("DeadStacksAt(%d): %#x, want %#x", u, got, want)
		}
	}
	if got := (&Checkpoint{}).DeadStacksAt(0, 0); got != nil {
		t.Errorf("DeadStacksAt of no interval: %#x", got)
	}
}
