package proc

import (
	"encoding/binary"
	"slices"
)

// cpuid executes the CPUID instruction (cpuid_amd64.s).
func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)

// The XSAVE image PTRACE_GETREGSET gives (NT_X86_XSTATE) is in the
// standard, non-compacted format: the legacy x87/SSE area, whose software
// bytes hold the kernel's user feature mask (XCR0, the layout gdb reads),
// the XSAVE header with the mask of components in use (XSTATE_BV), then
// each further component at the offset CPUID leaf 0xD gives for it. Its
// size is the kernel's, for the CPU's features: 2,688 bytes on a CPU with
// AVX-512, 11,008 with AMX as well. PTRACE_SETREGSET takes exactly that
// size and no component the CPU lacks.
const (
	xsaveUserMask = 464 // u64: the features the kernel saves for user space
	xsaveBV       = 512 // u64: the components whose state is not the initial one
	xsaveCompBV   = 520 // u64: 0 in the standard format
	xsaveMin      = 576 // legacy area and header
	xsaveLegacyBV = 3   // x87 and SSE, in the legacy area
)

// xsaveComponent returns where component i lies in a standard-format image
// on this CPU (offset and size 0 when the CPU has no such component).
func xsaveComponent(i int) (off, size int) {
	eax, ebx, _, _ := cpuid(0xd, uint32(i))
	return int(ebx), int(eax)
}

// fitXState returns x, an XSAVE image GetXState took on this machine or
// another, laid out for a thread whose image here is local (same size and
// feature mask as the kernel expects for it). A checkpoint is replayed on
// another machine than the one that recorded it: an image of 2,688 bytes
// from a CPU with AVX-512 cannot be written as is where the kernel wants
// 11,008 (PTRACE_SETREGSET fails with EFAULT), nor one holding a component
// this CPU lacks (EINVAL). The x87/SSE area is copied, then every
// component the image has in use and this CPU saves too, at the offset
// this CPU gives it when the image is laid out the same way (the end of
// its last component, by this CPU's offsets, is its size; with components
// this CPU lacks, the shared ones fit in it), else AVX alone, which lies
// at the same place on every CPU (AMD's CPUs with AVX-512 put its
// components elsewhere than Intel's). What cannot be carried over
// stays in its initial state: the replay CPU was already checked to have
// every instruction-set extension of the recording one (replayer.CheckCPU),
// so this is state such as the protection-key register of a CPU with
// protection keys, and a register that mattered shows as a divergence.
func fitXState(x, local []byte) []byte {
	le := binary.LittleEndian
	if len(x) < xsaveMin || len(local) < xsaveMin {
		return x
	}
	recMask, here := le.Uint64(x[xsaveUserMask:]), le.Uint64(local[xsaveUserMask:])
	if len(x) == len(local) && recMask == here {
		return x
	}
	bv := le.Uint64(x[xsaveBV:])
	sameLayout := false
	if rec := recMask | bv; rec&^here == 0 {
		sameLayout = recMask != 0 && layoutEnd(rec) == len(x)
	} else {
		// Components this CPU lacks have no offset here: the image must at
		// least hold the shared ones where this CPU puts them.
		end := layoutEnd(rec & here)
		sameLayout = recMask != 0 && end > 0 && end <= len(x)
	}
	out := slices.Clone(local)
	copy(out[:xsaveUserMask], x[:xsaveUserMask])
	kept := bv & xsaveLegacyBV
	for i := 2; i < 63; i++ {
		if bv&(1<<i) == 0 || here&(1<<i) == 0 || (!sameLayout && i != 2) {
			continue
		}
		off, size := xsaveComponent(i)
		if size == 0 || off < xsaveMin || off+size > len(x) || off+size > len(out) {
			continue
		}
		copy(out[off:off+size], x[off:off+size])
		kept |= 1 << i
	}
	le.PutUint64(out[xsaveBV:], kept)
	le.PutUint64(out[xsaveCompBV:], 0)
	return out
}

// layoutEnd is where the last of the components in mask ends, by this CPU's
// offsets (0 when this CPU has no offset for one of them).
func layoutEnd(mask uint64) int {
	end := xsaveMin
	for i := 2; i < 63; i++ {
		if mask&(1<<i) == 0 {
			continue
		}
		off, size := xsaveComponent(i)
		if size == 0 {
			return 0
		}
		end = max(end, off+size)
	}
	return end
}
