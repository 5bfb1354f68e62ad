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
