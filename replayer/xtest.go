package replayer

import (
	"slices"
)

// A replay CPU without TSX.
//
// On a CPU with RTM, glibc's AVX2 string functions are its *_rtm ones, which
// end in xtest (whether the code runs inside a transaction, to leave out
// vzeroupper there), and a program may test it too. On a CPU with neither
// RTM nor HLE (AMD's, qemu's, most Intel client CPUs since 2021) xtest is an
// invalid opcode. Outside a transaction xtest only sets ZF and clears CF,
// OF, SF, AF and PF; a recorded process inside one would have run xbegin
// first, which faults here too and ends the replay with a hint. So at the
// first SIGILL of each xtest the replayer puts `cmp eax, eax` (with an
// empty REX prefix: 40 39 c0, the same three bytes) in its place: ZF set,
// CF, OF, SF and AF clear, as xtest outside a transaction leaves them, but
// PF set. No code reads the parity flag after xtest (glibc branches on ZF
// at once); an end that came between the two would show rflags differing,
// a divergence, never a wrong verification. Reads through readMem see
// xtest, as the program has it.

var (
	xtestCode  = [3]byte{0x0f, 0x01, 0xd6}
	xtestPatch = [3]byte{0x40, 0x39, 0xc0}
)

// recordedTSX reports whether the recording CPU had TSX: its xtest ran.
func recordedTSX(flags []string) bool {
	return slices.Contains(flags, "rtm") || slices.Contains(flags, "hle")
}

// patchXTest puts the patch at rip when the instruction there, as the
// program has it, is xtest, the recording CPU had TSX, and this one raised
// SIGILL at it; it reports whether it did. The replay then runs the
// instruction again.
func (e *engine) patchXTest(rip uint64) (bool, error) {
	if !recordedTSX(e.c.Header.CPUFlags) {
		return false, nil
	}
	var code [3]byte
	if err := e.readMem(code[:], rip); err != nil || code != xtestCode {
		return false, nil
	}
	for i, b := range xtestPatch {
		a := rip + uint64(i)
		if t := e.int3s.at[a]; t != nil {
			// An int3 there keeps its place; lifted or put back, the
			// byte under it is the patch's.
			t.orig = b
			if !t.lifted {
				continue
			}
		}
		if err := e.mem.WriteAt([]byte{b}, a); err != nil {
			return false, err
		}
	}
	if e.xtests == nil {
		e.xtests = map[uint64]bool{}
	}
	if !e.xtests[rip] {
		e.xtests[rip] = true
		e.logf("xtest at %#x: this CPU has no TSX; it runs as cmp eax, eax (ZF set: not in a transaction, as when recorded)", rip)
	}
	return true, nil
}

// hideXTests puts xtest back into buf, read from memory at addr, where a
// patch stands.
func (e *engine) hideXTests(buf []byte, addr uint64) {
	for a := range e.xtests {
		if a+3 <= addr || a >= addr+uint64(len(buf)) {
			continue
		}
		var cur [3]byte
		for i := range cur {
			if j := a + uint64(i); j >= addr && j < addr+uint64(len(buf)) {
				cur[i] = buf[j-addr]
			} else {
				cur[i] = xtestPatch[i] // outside buf: taken as patched
			}
		}
		if cur != xtestPatch {
			continue // the code changed since (or a snapshot from before)
		}
		for i, b := range xtestCode {
			if j := a + uint64(i); j >= addr && j < addr+uint64(len(buf)) {
				buf[j-addr] = b
			}
		}
	}
}
