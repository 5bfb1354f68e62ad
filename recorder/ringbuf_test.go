package recorder

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
)

// fakeRing is a ring buffer in plain memory laid out as the kernel maps it:
// the data twice in a row, so a record that wraps is contiguous.
type fakeRing struct {
	ringRing
	cons, prod uint64
	size       uint64
}

func newFakeRing(size uint64) *fakeRing {
	f := &fakeRing{size: size}
	f.consPos, f.prodPos = &f.cons, &f.prod
	f.data = make([]byte, 2*size)
	f.mask = size - 1
	return f
}

// put writes a record as a producer does: header with the busy bit, data,
// then (unless busy) the header without it, and moves the producer position.
// It returns the record's position.
func (f *fakeRing) put(payload []byte, discard, busy bool) uint64 {
	pos := f.prod
	hdr := uint32(len(payload))
	if discard {
		hdr |= ringDiscardBit
	}
	if busy {
		hdr |= ringBusyBit
	}
	var h [8]byte
	binary.LittleEndian.PutUint32(h[:], hdr)
	f.write(pos, h[:])
	f.write(pos+ringHdrSize, payload)
	f.prod += (uint64(len(payload)) + ringHdrSize + 7) &^ 7
	return pos
}

func (f *fakeRing) commit(pos uint64) {
	off := pos & f.mask
	hdr := binary.LittleEndian.Uint32(f.data[off:]) &^ ringBusyBit
	var h [4]byte
	binary.LittleEndian.PutUint32(h[:], hdr)
	f.write(pos, h[:])
}

func (f *fakeRing) write(pos uint64, b []byte) {
	for i, c := range b {
		q := (pos + uint64(i)) & f.mask
		f.data[q] = c
		f.data[q+f.size] = c
	}
}

func TestRingDrain(t *testing.T) {
	f := newFakeRing(256)
	var got [][]byte
	take := func(b []byte) { got = append(got, append([]byte(nil), b...)) }
	var want [][]byte
	rec := func(i, n int) []byte { return bytes.Repeat([]byte{byte(i)}, n) }

	// Records of odd lengths, going round the 256-byte ring several times;
	// every third one discarded.
	for round := 0; round < 20; round++ {
		got, want = nil, nil
		for i := 0; i < 5; i++ {
			p := rec(round*5+i, 1+(round*7+i*13)%40)
			discard := (round+i)%3 == 0
			f.put(p, discard, false)
			if !discard {
				want = append(want, p)
			}
		}
		n, err := f.drain(100, take)
		if err != nil {
			t.Fatal(err)
		}
		if n != len(want) || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("round %d: drained %d records %v, want %v", round, n, got, want)
		}
		if f.cons != f.prod {
			t.Fatalf("round %d: consumer position %d, producer %d", round, f.cons, f.prod)
		}
	}

	// A record still being written stops the drain; what follows it waits.
	got = nil
	f.put(rec(1, 10), false, false)
	busy := f.put(rec(2, 10), false, true)
	f.put(rec(3, 10), false, false)
	if n, err := f.drain(100, take); err != nil || n != 1 || f.cons != busy {
		t.Fatalf("with a busy record: drained %d (%v), consumer at %d, want 1 and %d", n, err, f.cons, busy)
	}
	if f.pending() == 0 {
		t.Fatal("pending() is 0 with two records left")
	}
	f.commit(busy)
	if n, err := f.drain(100, take); err != nil || n != 2 || f.cons != f.prod {
		t.Fatalf("after the commit: drained %d (%v), consumer %d, producer %d", n, err, f.cons, f.prod)
	}

	// The limit.
	got = nil
	for i := 0; i < 4; i++ {
		f.put(rec(i, 8), false, false)
	}
	if n, _ := f.drain(3, take); n != 3 {
		t.Fatalf("limit 3: drained %d", n)
	}
	if n, _ := f.drain(3, take); n != 1 || len(got) != 4 {
		t.Fatalf("after the limit: drained %d, %d in all", n, len(got))
	}

	// A header claiming more than was written is an error, not a read past
	// the producer.
	pos := f.put(rec(9, 8), false, false)
	var h [4]byte
	binary.LittleEndian.PutUint32(h[:], 200)
	f.write(pos, h[:])
	if _, err := f.drain(100, take); !errors.Is(err, errRingCorrupt) {
		t.Fatalf("corrupt header: %v, want errRingCorrupt", err)
	}
}
