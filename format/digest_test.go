package format

import "testing"

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
