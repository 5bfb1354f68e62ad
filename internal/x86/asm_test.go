package x86

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
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

// endbr64 and endbr32, which x86asm takes for a lone rep prefix, decode as
// 4-byte instructions that move anywhere unchanged; what follows them
// decodes as usual; an instruction x86asm does not know after a prefix is
// an error, not a 1-byte instruction.
func TestDecodeEndbr(t *testing.T) {
	code := []byte{0xf3, 0x0f, 0x1e, 0xfa, 0x48, 0x31, 0xc0, 0xf3, 0x0f, 0x1e, 0xfb}
	var lens []int
	for n := 0; n < len(code); {
		inst, err := Decode(code[n:])
		if err != nil {
			t.Fatalf("at %d: %v", n, err)
		}
		if moved, ok := RipRelative(append([]byte(nil), code[n:n+inst.Len]...), inst, 0x1000, 0x7f0000000000); !ok || !bytes.Equal(moved, code[n:n+inst.Len]) {
			t.Errorf("at %d: moved % x, %v", n, moved, ok)
		}
		lens = append(lens, inst.Len)
		n += inst.Len
	}
	if want := []int{4, 3, 4}; !slices.Equal(lens, want) {
		t.Errorf("lengths %v, want %v", lens, want)
	}
	unknown := []byte{0xf3, 0x0f, 0x1e, 0xf9}
	if inst, err := x86asm.Decode(unknown, 64); err != nil || inst.Op != 0 {
		t.Fatalf("x86asm decodes % x as %v (%v): the test needs another instruction it does not know", unknown, inst, err)
	}
	if inst, err := Decode(unknown); err == nil {
		t.Errorf("% x decoded as %v (%d bytes)", unknown, inst, inst.Len)
	}
}

// Every instruction of the C library's code has the length objdump gives
// it, or Decode refuses it (the decoder does not know a few, such as
// rdpkru; the end search and the clock log then leave that place alone).
// A wrong length is worse than a refusal: the instruction moved would take
// a byte of the next one with it. x86asm gave vzeroupper, at the end of
// glibc's AVX string functions, 4 bytes for its 3.
func TestDecodeAgreesWithObjdump(t *testing.T) {
	const libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
	objdump, err := exec.LookPath("objdump")
	if _, serr := os.Stat(libc); err != nil || serr != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("needs objdump (binutils) and %s: %v %v", libc, err, serr)
		}
		t.Skipf("needs objdump (binutils) and %s", libc)
	}
	f, err := elf.Open(libc)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	text := f.Section(".text")
	data, err := text.Data()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(objdump, "-d", "--no-show-raw-insn", "-j", ".text", libc).Output()
	if err != nil {
		t.Fatal(err)
	}
	// Lines "  1139:\tendbr64": each instruction's address.
	var addrs []uint64
	for _, l := range strings.Split(string(out), "\n") {
		a, rest, ok := strings.Cut(l, ":\t")
		if !ok || !strings.HasPrefix(a, " ") || strings.Contains(rest, "(bad)") {
			continue
		}
		if v, err := strconv.ParseUint(strings.TrimSpace(a), 16, 64); err == nil {
			addrs = append(addrs, v)
		}
	}
	decoded, refused, wrong := 0, 0, 0
	for k := 0; k+1 < len(addrs); k++ {
		off, want := addrs[k]-text.Addr, int(addrs[k+1]-addrs[k])
		if want <= 0 || want > 15 || off+uint64(want) > uint64(len(data)) {
			continue // the end of a function, padding up to the next
		}
		inst, err := Decode(data[off:min(off+16, uint64(len(data)))])
		switch {
		case err != nil:
			refused++
		case inst.Len != want:
			if wrong++; wrong <= 10 {
				t.Errorf("%#x: % x decoded as %v, %d bytes; objdump: %d", addrs[k], data[off:off+uint64(want)], inst, inst.Len, want)
			}
		default:
			decoded++
		}
	}
	t.Logf("%d instructions of %s: %d decoded, %d refused, %d with a wrong length", len(addrs), libc, decoded, refused, wrong)
	if decoded < 100000 || refused > decoded/1000 {
		t.Errorf("%d decoded, %d refused: the comparison did not run as meant", decoded, refused)
	}
}
