package format

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// The stored form of a page's words is undone by the same mapping, at the
// edges of both ranges too, for an address anywhere: a page at an address
// whose ranges would meet is stored relative to 0.
func TestPageWordsInvolution(t *testing.T) {
	for _, addr := range []uint64{0, 0x1000, 0x55d0c0de0000, 0x7ffffffff000, 0xffffffffff600000,
		pageWordBase - 3*PageSize, pageWordBase, pageWordBase + 2*PageSize} {
		at := pageWordsAddr(addr)
		page := make([]byte, PageSize)
		words := []uint64{0, 1, at - pageWordWindow, at + pageWordWindow - 1, at - pageWordWindow - 1,
			at + pageWordWindow, pageWordBase - pageWordWindow, pageWordBase + pageWordWindow - 1,
			pageWordBase - pageWordWindow - 1, pageWordBase + pageWordWindow, ^uint64(0), at + 0x40}
		for i := range PageSize / 8 {
			w := words[i%len(words)] + uint64(i/len(words))
			binary.LittleEndian.PutUint64(page[i*8:], w)
		}
		stored := bytes.Clone(page)
		swapPageWords(stored, at)
		if bytes.Equal(stored, page) {
			t.Errorf("address %#x: nothing changed", addr)
		}
		swapPageWords(stored, at)
		if !bytes.Equal(stored, page) {
			t.Errorf("address %#x (stored relative to %#x): the mapping is not its own inverse", addr, at)
		}
	}
}

// Nodes of a list that point at their neighbours, the way an allocator
// lays out objects made one after another, compress to less once their
// words are distances; a file of such pages reads back the same.
func TestPageWordsShrinkPointers(t *testing.T) {
	c, store := richCheckpoint(3, 1, 1, 0)
	c.Intervals[0].Written = nil
	var refs []PageRef
	var plain, mapped []byte
	r := uint64(7)
	for i := range 64 {
		addr := 0x55d0c0de0000 + uint64(i)*PageSize
		p := make([]byte, PageSize)
		for off := 0; off < PageSize; off += 32 {
			r = r*6364136223846793005 + 1442695040888963407
			at := addr + uint64(off)
			binary.LittleEndian.PutUint64(p[off:], at+32)     // next
			binary.LittleEndian.PutUint64(p[off+8:], at-32)   // previous
			binary.LittleEndian.PutUint64(p[off+16:], r>>40)  // a value
			binary.LittleEndian.PutUint64(p[off+24:], at+128) // an object made with it
		}
		refs = append(refs, PageRef{Addr: addr, Hash: store.Put(p)})
		plain = append(plain, p...)
		q := bytes.Clone(p)
		swapPageWords(q, addr)
		mapped = append(mapped, q...)
	}
	z := newWriterCodec()
	a, b := len(z.compress(z.small, plain)), len(z.compress(z.small, mapped))
	t.Logf("list nodes: %d bytes compressed as they are, %d as distances", a, b)
	if b >= a*3/4 {
		t.Errorf("list nodes: %d bytes compressed as they are, %d as distances", a, b)
	}
	c.Final = refs
	var buf bytes.Buffer
	if err := Encode(&buf, c, store); err != nil {
		t.Fatal(err)
	}
	f, err := decodeBytes(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range refs {
		want, _ := store.Page(ref.Hash)
		if got, err := f.Page(ref.Hash); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("page %#x: %v", ref.Addr, err)
		}
	}
}
