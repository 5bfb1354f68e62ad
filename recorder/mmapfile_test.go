package recorder

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/tprec/tprec/format"
)

// A file mapped again and again in the window (python3 mapping a 20 MB file
// 480 times in 2 s) is read once per page at the dump: the later mappings
// of the same pages of the same file take the hashes the first read gave,
// without reading again (the content written to the file in between does
// not show: every read of a dump is of the file as it is then).
func TestMappedFilePagesReadOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data")
	content := bytes.Repeat([]byte("0123456789abcdef"), 3*format.PageSize/16)
	if err := os.WriteFile(path, content, 0o600); err != nil {
		t.Fatal(err)
	}
	open := func() *os.File {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	store := format.NewMemStore()
	cache := filePageCache{}
	first := (&mappedFile{f: open(), start: 0x10000, length: 3 * format.PageSize}).pages(nil, store, cache)
	if len(first) != 3 || len(cache) != 3 {
		t.Fatalf("first mapping: %d pages, %d cached; want 3 and 3", len(first), len(cache))
	}
	// The file changes: a mapping read afresh would see it.
	if err := os.WriteFile(path, bytes.Repeat([]byte{'z'}, len(content)), 0o600); err != nil {
		t.Fatal(err)
	}
	again := (&mappedFile{f: open(), start: 0x20000, length: 3 * format.PageSize}).pages(nil, store, cache)
	for i, p := range again {
		if p.Hash != first[i].Hash || p.Addr != 0x20000+uint64(i)*format.PageSize {
			t.Fatalf("second mapping, page %d: %x at %#x, want %x at %#x (read again instead of cached)", i, p.Hash, p.Addr, first[i].Hash, 0x20000+uint64(i)*format.PageSize)
		}
	}
	// Another offset of the same file is its own page: read, with the new content.
	other := (&mappedFile{f: open(), start: 0x30000, length: format.PageSize, offset: format.PageSize}).pages(nil, store, filePageCache{})
	if len(other) != 1 || other[0].Hash != format.HashPage(bytes.Repeat([]byte{'z'}, format.PageSize)) {
		t.Fatalf("a fresh cache reads the file as it is now: %+v", other)
	}
	if h := (&mappedFile{f: open(), start: 0x40000, length: format.PageSize, offset: format.PageSize}).pages(nil, store, cache); len(h) != 1 || h[0].Hash != first[1].Hash {
		t.Fatalf("offset %d through the cache: %+v, want the first read's %x", format.PageSize, h, first[1].Hash)
	}
}
