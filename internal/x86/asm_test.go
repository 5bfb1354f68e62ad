package x86

import (
	"bytes"
	"testing"

	"golang.org/x/arch/x86/x86asm"
)

// Rel32 operands to a label (forward and back) and to an address resolve
// to what the decoder reads back; an address out of reach, a missing label
// and an undone instruction are refused or gone.
func TestAsmResolves(t *testing.T) {
	const base = 0x7f0000001000
	a := New(base)
	a.Label("top")
	a.Rel("end", []byte{0x0f, 0x84})              // je end
	a.RelTo(base+0x800, []byte{0x48, 0x8b, 0x05}) // mov rax, [rip+..]
	a.RelTo(base+0x10, []byte{0x80, 0x3d}, 0x01)  // cmp byte [rip+..], 1
	m := a.Mark()
	a.Rel("nowhere", []byte{0xe9})
	a.Undo(m)
	a.Rel("top", []byte{0xe9}) // jmp top
	a.Label("end")
	a.Emit(0xc3)
	if err := a.Resolve(); err != nil {
		t.Fatal(err)
	}
	want := []uint64{base + uint64(len(a.B)) - 1, base + 0x800, base + 0x10, base}
	for i, at := 0, 0; at < len(a.B)-1; i++ {
		inst, err := x86asm.Decode(a.B[at:], 64)
		if err != nil {
			t.Fatalf("at %d: %v", at, err)
		}
		next := base + uint64(at+inst.Len)
		var got uint64
		switch arg := inst.Args[0].(type) {
		case x86asm.Rel:
			got = next + uint64(int64(arg))
		case x86asm.Mem:
			got = next + uint64(arg.Disp)
		default:
			if m, ok := inst.Args[1].(x86asm.Mem); ok {
				got = next + uint64(m.Disp)
			}
		}
		if got != want[i] {
			t.Errorf("instruction %d (%v): target %#x, want %#x", i, inst, got, want[i])
		}
		at += inst.Len
	}
	far := New(base)
	far.RelTo(base+1<<40, []byte{0xe9})
	if err := far.Resolve(); err == nil {
		t.Error("a target 1 TiB away resolved")
	}
	none := New(base)
	none.Rel("missing", []byte{0xe9})
	if err := none.Resolve(); err == nil {
		t.Error("a missing label resolved")
	}
}

// A rip-relative load moved elsewhere reads the same address; one moved
// out of reach is refused, and an instruction without one is unchanged.
func TestRipRelative(t *testing.T) {
	b := []byte{0x48, 0x8b, 0x05, 0x10, 0x00, 0x00, 0x00} // mov rax, [rip+0x10]
	inst, err := x86asm.Decode(b, 64)
	if err != nil {
		t.Fatal(err)
	}
	const from, to = 0x1000, 0x5000
	moved, ok := RipRelative(bytes.Clone(b), inst, from, to)
	if !ok {
		t.Fatal("refused")
	}
	mi, _ := x86asm.Decode(moved, 64)
	if got := to + uint64(mi.Len) + uint64(mi.Args[1].(x86asm.Mem).Disp); got != from+7+0x10 {
		t.Errorf("moved reads %#x, want %#x", got, from+7+0x10)
	}
	if _, ok := RipRelative(bytes.Clone(b), inst, from, from+1<<33); ok {
		t.Error("moved 8 GiB away and accepted")
	}
	nop := []byte{0x48, 0x89, 0xd8} // mov rax, rbx
	ni, _ := x86asm.Decode(nop, 64)
	if got, ok := RipRelative(bytes.Clone(nop), ni, from, to); !ok || !bytes.Equal(got, nop) {
		t.Errorf("mov rax, rbx: %x %v", got, ok)
	}
}
