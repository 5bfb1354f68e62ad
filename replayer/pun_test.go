package replayer

import (
	"bytes"
	"testing"

	"golang.org/x/arch/x86/x86asm"
)

// A punned jmp over python3.11's `test rcx, rcx` at 0x53f764, before a
// `je rel32` (0f 84 53 01 00 00): without a prefix its rel32's high bytes
// are 0x840f, a range below zero; with one it lands 1.4 GB up, its rel32
// 0x53840fxx. Over a `pop r14` before `pop r15; ret; nop` (the same
// binary, 0x4ff08a), every choice lands below zero: none.
func TestPunTargetPadded(t *testing.T) {
	code := []byte{0x48, 0x85, 0xc9, 0x0f, 0x84, 0x53, 0x01, 0x00, 0x00}
	const rip = 0x53f764
	p := punTarget(rip, code, 3, nil)
	if p.to == 0 || p.pad != 1 || p.rel>>8 != 0x53840f {
		t.Fatalf("punTarget = %+v; want one prefix, rel32 0x53840fxx", p)
	}
	jmp := p.bytes(3)
	if !bytes.Equal(jmp[:2], []byte{0x48, 0xe9}) {
		t.Fatalf("jmp bytes % x; want 48 e9 and a low byte", jmp)
	}
	// What the processor decodes there: the jmp's bytes, then the code's.
	patched := append(append([]byte(nil), jmp...), code[3:]...)
	inst, err := x86asm.Decode(patched, 64)
	if err != nil || inst.Op != x86asm.JMP || inst.Len != 6 {
		t.Fatalf("decoded %v (%v); want a 6-byte jmp", inst, err)
	}
	if to := rip + uint64(inst.Len) + uint64(int64(inst.Args[0].(x86asm.Rel))); to != p.to {
		t.Errorf("the jmp lands at %#x; punTarget said %#x", to, p.to)
	}
	// A page taken where the one-prefix jmp lands: the next choice, two
	// prefixes and no free byte, rel32 0x0153840f.
	busy := [][2]uint64{{pageDown(p.to), pageDown(p.to) + pageSize}}
	if q := punTarget(rip, code, 3, busy); q.pad != 2 || q.rel != 0x0153840f {
		t.Errorf("with %#x taken: %+v; want two prefixes, rel32 0x0153840f", busy[0][0], q)
	}
	if q := punTarget(0x4ff08a, []byte{0x41, 0x5e, 0x41, 0x5f, 0xc3, 0x90, 0x48, 0x83}, 2, nil); q.to != 0 {
		t.Errorf("pop r14 before pop r15; ret: %+v; want none", q)
	}
}
