package replayer

import "testing"

// The region's view goes within reach of a rel32 jump from the vDSO, clear
// of every range the replayed program uses and of the stub's page.
func TestInProcessPlace(t *testing.T) {
	const vdso = 0x7ffd_1234_5000
	const stub = 0x1000_0000_0000
	used := [][2]uint64{{0x7ffd_0000_0000, 0x7ffd_2000_0000}, {0x7ffd_1234_5000, 0x7ffd_1234_7000}}
	a, ok := ipPlace(vdso, used, stub)
	if !ok {
		t.Fatal("no place found")
	}
	if d := int64(a) - int64(vdso); d > 1<<30+ipSize || d < -(1<<30) {
		t.Fatalf("region at %#x is %d bytes from the vDSO: out of a rel32 jump's reach with room to spare", a, d)
	}
	for _, u := range used {
		if a+ipSize+64<<20 > u[0] && a < u[1]+64<<20 {
			t.Fatalf("region at %#x within 64 MiB of the used range %#x-%#x", a, u[0], u[1])
		}
	}
	// Everything within reach taken: no place, and the replay runs without.
	if a, ok := ipPlace(vdso, [][2]uint64{{vdso - 2<<30, vdso + 2<<30}}, stub); ok {
		t.Fatalf("placed at %#x inside a used range", a)
	}
	// Near the top of the user address space, only below.
	top := uint64(0x7fff_ff00_0000)
	if a, ok := ipPlace(top, nil, stub); !ok || a > top {
		t.Fatalf("near the top: %#x, %v", a, ok)
	}
	// A program linked at 0x400000 (Debian's python3.11), its heap just
	// above: a place above the heap, within reach, and never in the low
	// pages below 16 MiB.
	const code, heap = 0x52_eb8e, 0xac_5000
	low := [][2]uint64{{0x40_0000, 0x80_0000}, {0x90_0000, heap + 8<<20}}
	a, ok = ipPlace(code, low, stub)
	if !ok {
		t.Fatal("no place near a program linked at 0x400000")
	}
	if a < 16<<20 || a+ipSize > code+1<<30 {
		t.Fatalf("region at %#x for code at %#x", a, uint64(code))
	}
	for _, u := range low {
		if a+ipSize+64<<20 > u[0] && a < u[1]+64<<20 {
			t.Fatalf("region at %#x within 64 MiB of the used range %#x-%#x", a, u[0], u[1])
		}
	}
}
