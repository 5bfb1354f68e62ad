package replayer

import (
	"bytes"
	"testing"
)

// A patched xtest reads as xtest, whole or cut by the read's bounds; a
// patch whose bytes changed since (the code rewritten, a snapshot from
// before it) reads as it is.
func TestHideXTests(t *testing.T) {
	e := &engine{xtests: map[uint64]bool{0x1002: true, 0x1010: true}}
	mem := []byte{
		0x90, 0x90, 0x40, 0x39, 0xc0, 0x74, 0x03, 0x90, // patched at 0x1002
		0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90,
		0x0f, 0x01, 0xd6, 0x90, // 0x1010: not patched any more
	}
	read := func(addr uint64, n int) []byte {
		buf := append([]byte(nil), mem[addr-0x1000:addr-0x1000+uint64(n)]...)
		e.hideXTests(buf, addr)
		return buf
	}
	if got, want := read(0x1000, 8), []byte{0x90, 0x90, 0x0f, 0x01, 0xd6, 0x74, 0x03, 0x90}; !bytes.Equal(got, want) {
		t.Errorf("whole: % x, want % x", got, want)
	}
	if got, want := read(0x1003, 3), []byte{0x01, 0xd6, 0x74}; !bytes.Equal(got, want) {
		t.Errorf("cut at its start: % x, want % x", got, want)
	}
	if got, want := read(0x1000, 4), []byte{0x90, 0x90, 0x0f, 0x01}; !bytes.Equal(got, want) {
		t.Errorf("cut at its end: % x, want % x", got, want)
	}
	if got, want := read(0x1010, 4), []byte{0x0f, 0x01, 0xd6, 0x90}; !bytes.Equal(got, want) {
		t.Errorf("changed since: % x, want % x", got, want)
	}
	e.xtests[0x1008] = true // memory there: no patch
	if got, want := read(0x1008, 4), []byte{0x90, 0x90, 0x90, 0x90}; !bytes.Equal(got, want) {
		t.Errorf("never patched there: % x, want % x", got, want)
	}
}

// The patch does what xtest does outside a transaction for the flag code
// branches on: cmp eax, eax sets ZF, and is three bytes, as xtest.
func TestXTestPatchLength(t *testing.T) {
	kind, _ := instructionKind(xtestCode[:])
	if kind != "xtest" {
		t.Fatalf("xtestCode decodes as %q", kind)
	}
	kind, _ = instructionKind(xtestPatch[:])
	if kind != "cmp" {
		t.Fatalf("xtestPatch decodes as %q", kind)
	}
	if !recordedTSX([]string{"sse2", "rtm"}) || !recordedTSX([]string{"hle"}) || recordedTSX([]string{"avx2"}) {
		t.Error("recordedTSX")
	}
}
