package recorder

import (
	"bytes"
	"debug/elf"
	"os"
	"testing"

	"github.com/tprec/tprec/proc"
)

// testVDSO returns the test process's own [vdso] image and address.
func testVDSO(t *testing.T) ([]byte, uint64) {
	t.Helper()
	lo, _, img, err := targetVDSO(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	return img, lo
}

// The trampoline goes after the end of the vDSO's ELF image when the page
// has room (it does on the kernels here), and overlaps none of its
// sections; with too little room, into a patched function's body past its
// stub; with neither, an error.
func TestTrampolineSite(t *testing.T) {
	img, base := testVDSO(t)
	size := uint64(proc.TrampolineSize())
	at, err := trampolineSite(img, base, nil, size)
	if err != nil {
		t.Fatalf("no room after the image (%d bytes): %v", len(img), err)
	}
	if at%16 != 0 || at+size > base+uint64(len(img)) {
		t.Fatalf("site %#x (+%d) outside the mapping %#x+%d", at, size, base, len(img))
	}
	f, err := elf.NewFile(bytes.NewReader(img))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range f.Sections {
		if s.Type != elf.SHT_NOBITS && base+s.Offset+s.FileSize > at {
			t.Errorf("section %s (file bytes %#x+%#x) reaches the trampoline at offset %#x", s.Name, s.Offset, s.FileSize, at-base)
		}
	}
	if !bytes.Equal(img[at-base:at-base+size], make([]byte, size)) {
		t.Errorf("the bytes at the site are not padding")
	}
	t.Logf("vDSO of %d bytes: trampoline (%d bytes) at offset %#x", len(img), size, at-base)

	// A page without that room: a body of a patched function.
	short := img[:at-base+size-1]
	bodies := []vdsoRange{{base + 0x808, base + 0x808 + size - 1}, {base + 0xaf8, base + 0xaf8 + 8 + size}}
	at, err = trampolineSite(short, base, bodies, size)
	if err != nil || at != base+0xb00 {
		t.Errorf("with no room after the image: %#x, %v; want the second body at %#x", at, err, base+0xb00)
	}
	if _, err := trampolineSite(short, base, bodies[:1], size); err == nil {
		t.Errorf("no room anywhere, and no error")
	}
}
