// Package x86 holds the x86-64 code generation that the recorder (the clock
// log's stubs) and the replayer (the in-process syscall sites and the end
// search) share: a small assembler whose rel32 operands name a label or an
// address, and the moving of an instruction to another address.
package x86

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/arch/x86/x86asm"
)

// Asm assembles code that runs at Base. Instructions are emitted as bytes;
// those with a rel32 operand (a jump, a call, a rip-relative access) take
// it as a label or an address, resolved at the end.
type Asm struct {
	Base   uint64 // the address of B[0] when the code runs
	B      []byte
	labels map[string]int
	refs   []ref
}

type ref struct {
	at, end int    // the rel32, and the end of its instruction
	label   string // a label, or "" for abs
	abs     uint64
}

// New returns an assembler for code at base.
func New(base uint64) *Asm { return &Asm{Base: base, labels: map[string]int{}} }

// Emit appends bytes as they are.
func (a *Asm) Emit(b ...byte) { a.B = append(a.B, b...) }

// Label names the address of the next byte.
func (a *Asm) Label(name string) { a.labels[name] = len(a.B) }

// Here is the address of the next byte.
func (a *Asm) Here() uint64 { return a.Base + uint64(len(a.B)) }

// Rel emits op, a rel32 to label, then tail (an immediate after the
// displacement).
func (a *Asm) Rel(label string, op []byte, tail ...byte) { a.rel(ref{label: label}, op, tail) }

// RelTo emits op, a rel32 to the address abs, then tail.
func (a *Asm) RelTo(abs uint64, op []byte, tail ...byte) { a.rel(ref{abs: abs}, op, tail) }

func (a *Asm) rel(r ref, op, tail []byte) {
	a.Emit(op...)
	r.at = len(a.B)
	a.Emit(0, 0, 0, 0)
	a.Emit(tail...)
	r.end = len(a.B)
	a.refs = append(a.refs, r)
}

// Mark is a point of the code to go back to (Undo).
type Mark struct{ b, refs int }

// Mark returns the present end of the code.
func (a *Asm) Mark() Mark { return Mark{len(a.B), len(a.refs)} }

// Undo drops what was emitted after m. Labels set meanwhile must not be
// used again.
func (a *Asm) Undo(m Mark) { a.B, a.refs = a.B[:m.b], a.refs[:m.refs] }

// Resolve writes every rel32. It fails on a label never set and on a
// target out of a rel32's reach.
func (a *Asm) Resolve() error {
	for _, r := range a.refs {
		target := r.abs
		if r.label != "" {
			off, ok := a.labels[r.label]
			if !ok {
				return fmt.Errorf("x86: no label %s", r.label)
			}
			target = a.Base + uint64(off)
		}
		from := a.Base + uint64(r.end)
		d := int64(target) - int64(from)
		if d != int64(int32(d)) {
			return fmt.Errorf("x86: %#x out of a rel32's reach from %#x", target, from)
		}
		binary.LittleEndian.PutUint32(a.B[r.at:], uint32(int32(d)))
	}
	return nil
}

// RipRelative adjusts in b, the bytes of inst at address from, a
// rip-relative displacement so that b reads the same memory at address to;
// ok is false when that is out of reach or the displacement is not a
// 32-bit one. b is changed in place.
func RipRelative(b []byte, inst x86asm.Inst, from, to uint64) ([]byte, bool) {
	if inst.PCRel == 4 {
		d := int64(int32(binary.LittleEndian.Uint32(b[inst.PCRelOff:]))) + int64(from) - int64(to)
		if d != int64(int32(d)) {
			return nil, false
		}
		binary.LittleEndian.PutUint32(b[inst.PCRelOff:], uint32(int32(d)))
	} else if inst.PCRel != 0 {
		return nil, false
	}
	return b, true
}

// Decode decodes the instruction at the start of b as x86asm.Decode does,
// and also the landing pads of Intel's CET, which that decoder does not
// know: endbr64 and endbr32 (f3 0f 1e fa/fb), the first instruction of
// every function built with -fcf-protection and of OpenSSL's assembly
// (OPENSSL_cleanse). Outside CET they do nothing, so they come back as a
// 4-byte NOP that runs the same anywhere. x86asm returns an instruction it
// does not know after a prefix as that prefix alone, a 1-byte instruction
// with no operation: that is an error here, not an instruction. And it
// gives vzeroupper and vzeroall (c5 f8 77, c5 fc 77: the last instruction
// but one of glibc's AVX string functions) a ModRM byte they do not have,
// one byte too many: moved so, the next instruction's first byte would run
// twice. TestDecodeAgreesWithObjdump compares every length in libc.
func Decode(b []byte) (x86asm.Inst, error) {
	if len(b) >= 4 && b[0] == 0xf3 && b[1] == 0x0f && b[2] == 0x1e && (b[3] == 0xfa || b[3] == 0xfb) {
		return x86asm.Inst{Op: x86asm.NOP, Len: 4, Mode: 64}, nil
	}
	inst, err := x86asm.Decode(b, 64)
	if err == nil && inst.Op == 0 {
		return inst, fmt.Errorf("x86: % x: an instruction the decoder does not know", b[:min(len(b), 4)])
	}
	if err == nil && (inst.Op == x86asm.VZEROUPPER || inst.Op == x86asm.VZEROALL) {
		// The VEX prefix (2 or 3 bytes, after any other prefixes), then
		// the opcode, and nothing more.
		i := 0
		for i < inst.Len && b[i] != 0xc5 && b[i] != 0xc4 {
			i++
		}
		switch {
		case i < inst.Len && b[i] == 0xc5:
			inst.Len = i + 3
		case i < inst.Len && b[i] == 0xc4:
			inst.Len = i + 4
		default:
			return inst, fmt.Errorf("x86: % x: %v without a VEX prefix", b[:inst.Len], inst.Op)
		}
		inst.Args = x86asm.Args{}
	}
	return inst, err
}
