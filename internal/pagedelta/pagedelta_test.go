package pagedelta

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// Deltas of pages changed in a few words, in many, or not at all rebuild
// the page exactly; one over the limit is refused; a damaged one is an
// error, not a panic.
func TestAppendApply(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	base := make([]byte, 4096)
	for i := range base {
		base[i] = byte(rng.IntN(256))
	}
	for _, changes := range []int{0, 1, 3, 40, 600} {
		page := bytes.Clone(base)
		for range changes {
			page[rng.IntN(len(page))] ^= byte(1 + rng.IntN(255))
		}
		d, ok := Append([]byte("prefix"), page, base, 1024)
		if !ok {
			if changes < 100 {
				t.Fatalf("%d changed bytes: delta refused", changes)
			}
			if string(d) != "prefix" {
				t.Fatalf("a refused delta left %q", d)
			}
			continue
		}
		if changes >= 600 {
			t.Fatalf("%d changed bytes: a delta of %d bytes within 1024", changes, len(d)-6)
		}
		got := bytes.Clone(base)
		if err := Apply(got, d[6:]); err != nil || !bytes.Equal(got, page) {
			t.Fatalf("%d changed bytes: rebuilt page differs (%v)", changes, err)
		}
	}
	for _, bad := range [][]byte{{0x80}, {0}, {0x80, 0x04, 1, 2, 3, 4, 5, 6, 7, 8}} {
		if err := Apply(bytes.Clone(base), bad); err == nil {
			t.Fatalf("damaged delta %x applied", bad)
		}
	}
}

// A page rewritten in a few words, as a server's heap page between two
// boundaries: the recorder's ring deltas thousands of them a second.
func BenchmarkAppendFewWords(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	base := make([]byte, 4096)
	for i := range base {
		base[i] = byte(rng.IntN(256))
	}
	page := bytes.Clone(base)
	for range 6 {
		page[rng.IntN(len(page))] ^= 0x5a
	}
	dst := make([]byte, 0, 1024)
	b.SetBytes(4096)
	for b.Loop() {
		dst, _ = Append(dst[:0], page, base, 1024)
	}
}

// Append gives the bytes of the plain word-by-word encoding, whatever the
// length and wherever the changes are (at a block's edges, at the ends).
func TestAppendSameAsWordByWord(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for n := range 2000 {
		size := 8 * (1 + rng.IntN(600))
		base := make([]byte, size)
		for i := range base {
			base[i] = byte(rng.IntN(256))
		}
		page := bytes.Clone(base)
		for range rng.IntN(8) {
			at := rng.IntN(size)
			switch rng.IntN(3) {
			case 0:
				at = size - 1
			case 1:
				at = (at / block) * block
			}
			page[at] ^= byte(1 + rng.IntN(255))
		}
		got, ok := Append(nil, page, base, 1<<20)
		if want, _ := appendDelta(nil, page, base, 1<<20, false); !ok || !bytes.Equal(got, want) {
			t.Fatalf("case %d (%d bytes): delta %x, want %x", n, size, got, want)
		}
	}
}
