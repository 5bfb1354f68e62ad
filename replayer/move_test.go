package replayer

import (
	"debug/elf"
	"os"
	"testing"

	"github.com/tprec/tprec/internal/x86"

	"golang.org/x/arch/x86/x86asm"
)

// Every instruction of the C library's code that the end search may
// displace (relocatable) runs the same moved 1 GB up or down: its
// operation is the same (a call becomes a push of its return address and
// a jmp), a jump goes where it went, and a rip-relative operand reads the
// same address. Forms moveInstruction refuses (loop, jrcxz, prefixed
// jumps) are counted and must stay rare.
func TestMoveInstructionLibc(t *testing.T) {
	const libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
	f, err := elf.Open(libc)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skipf("needs %s: %v", libc, err)
	}
	defer f.Close()
	text := f.Section(".text")
	data, err := text.Data()
	if err != nil {
		t.Fatal(err)
	}
	// Where an operand points when inst, at addr, runs.
	target := func(inst x86asm.Inst, addr uint64) (uint64, bool) {
		for _, arg := range inst.Args {
			switch a := arg.(type) {
			case x86asm.Rel:
				return addr + uint64(inst.Len) + uint64(int64(a)), true
			case x86asm.Mem:
				if a.Base == x86asm.RIP {
					return addr + uint64(inst.Len) + uint64(a.Disp), true
				}
			}
		}
		return 0, false
	}
	moved, refused, wrong := 0, 0, 0
	for off := 0; off < len(data); {
		code := data[off:min(off+16, len(data))]
		inst, err := x86.Decode(code)
		if err != nil {
			off++
			continue
		}
		addr := text.Addr + uint64(off)
		b := code[:inst.Len]
		off += inst.Len
		if !relocatable(inst) {
			continue
		}
		want, pointed := target(inst, addr)
		for _, to := range []uint64{addr + 1<<30, addr - 1<<30} {
			got, ok := moveInstruction(b, inst, addr, to)
			if !ok {
				refused++
				continue
			}
			moved++
			why := ""
			// The last instruction of the moved bytes does the work (a
			// call's is the jmp after the push of its return address).
			at, last := to, x86asm.Inst{}
			for n := 0; n < len(got); {
				i, err := x86.Decode(got[n:])
				if err != nil {
					why = "does not decode: " + err.Error()
					break
				}
				at, last = to+uint64(n), i
				n += i.Len
			}
			switch {
			case why != "":
			case inst.Op == x86asm.CALL && last.Op != x86asm.JMP, inst.Op != x86asm.CALL && last.Op != inst.Op:
				why = "operation " + last.Op.String()
			case pointed:
				if p, ok := target(last, at); !ok || p != want {
					why = "points elsewhere"
				}
			}
			if why != "" {
				if wrong++; wrong <= 10 {
					t.Errorf("%#x: % x (%v) moved to %#x: % x: %s", addr, b, inst, to, got, why)
				}
			}
		}
	}
	t.Logf("%d moves of instructions of %s, %d refused, %d wrong", moved, libc, refused, wrong)
	if moved < 100000 || refused > moved/100 {
		t.Errorf("%d moved, %d refused: the test did not run as meant", moved, refused)
	}
}
