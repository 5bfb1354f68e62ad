package proc

import (
	"encoding/binary"
	"slices"

	"github.com/tprec/tprec/format"
)

// cpuid executes the CPUID instruction (cpuid_amd64.s).
func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)

// xgetbv0 reads XCR0, the XSAVE components the kernel enabled
// (cpuid_amd64.s; user mode may when CPUID says OSXSAVE).
func xgetbv0() (eax, edx uint32)

// LocalXSaveMask is the set of XSAVE components this machine's kernel has
// the CPU save (XCR0), 0 where the CPU has no XSAVE enabled.
func LocalXSaveMask() uint64 {
	if _, _, ecx, _ := cpuid(1, 0); ecx&(1<<27) == 0 { // OSXSAVE
		return 0
	}
	lo, hi := xgetbv0()
	return uint64(hi)<<32 | uint64(lo)
}

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

// XSaveLayout is where a CPU puts each XSAVE component beyond x87 and SSE
// in a standard-format image: Offset and Size by component number (0 for
// one it does not have). CPUs differ: an Intel CPU with AVX-512 puts the
// opmask registers at byte 1088, behind the room of MPX's components, an
// AMD one at 832 (CI met both kinds of machine).
type XSaveLayout [64]struct{ Offset, Size uint32 }

// LocalXSaveLayout is this CPU's layout, for the components this kernel
// saves for user space (mask, an image's feature mask at xsaveUserMask).
func LocalXSaveLayout(mask uint64) XSaveLayout {
	var l XSaveLayout
	for i := 2; i < 64; i++ {
		if mask&(1<<i) != 0 {
			eax, ebx, _, _ := cpuid(0xd, uint32(i))
			l[i].Offset, l[i].Size = ebx, eax
		}
	}
	return l
}

// XSaveComponents is this CPU's layout of the components of mask, for a
// checkpoint's header (format.Header.XSave).
func XSaveComponents(mask uint64) []format.XComponent {
	l := LocalXSaveLayout(mask)
	var cs []format.XComponent
	for i, c := range l {
		if c.Size != 0 {
			cs = append(cs, format.XComponent{Index: uint8(i), Offset: c.Offset, Size: c.Size})
		}
	}
	return cs
}

// XSaveMask is the feature mask an image holds (what its kernel saves for
// user space), 0 for an image too short to have one.
func XSaveMask(x []byte) uint64 {
	if len(x) < xsaveMin {
		return 0
	}
	return binary.LittleEndian.Uint64(x[xsaveUserMask:])
}

// fitXState returns x, an XSAVE image GetXState took on this machine or
// another, laid out for a thread whose image here is local (same size and
// feature mask as the kernel expects for it). A checkpoint is replayed on
// another machine than the one that recorded it: an image of 2,688 bytes
// from a CPU with AVX-512 cannot be written as is where the kernel wants
// 11,008 (PTRACE_SETREGSET fails with EFAULT), nor one holding a component
// this CPU lacks (EINVAL), and an AMD CPU puts AVX-512's components
// elsewhere than an Intel one. The x87/SSE area is copied, then every
// component the image has in use and this CPU saves too, moved from where
// from (the recording CPU's layout) puts it to where here (this CPU's)
// does. Without from (a file older than the layout's record), the image is
// taken to be laid out as here when the end of its last component by
// here's offsets is its size (with components this CPU lacks, the shared
// ones fit in it); else only AVX, which lies at the same place on every
// CPU, is carried. What cannot be carried over stays in its initial state:
// the replay CPU was already checked to have every instruction-set
// extension of the recording one (replayer.CheckCPU), so this is state
// such as the protection-key register of a CPU with protection keys, and a
// register that mattered shows as a divergence.
func fitXState(x, local []byte, from *XSaveLayout, here XSaveLayout) []byte {
	le := binary.LittleEndian
	if len(x) < xsaveMin || len(local) < xsaveMin {
		return x
	}
	recMask, hereMask := le.Uint64(x[xsaveUserMask:]), le.Uint64(local[xsaveUserMask:])
	if len(x) == len(local) && recMask == hereMask && (from == nil || sameLayout(*from, here, recMask)) {
		return x
	}
	bv := le.Uint64(x[xsaveBV:])
	src := from
	if src == nil {
		src = &here
		if rec := recMask | bv; rec&^hereMask == 0 {
			if recMask == 0 || layoutEnd(here, rec) != len(x) {
				src = nil
			}
		} else if end := layoutEnd(here, rec&hereMask); recMask == 0 || end == 0 || end > len(x) {
			// Components this CPU lacks have no offset here: the image
			// must at least hold the shared ones where this CPU puts them.
			src = nil
		}
	}
	out := slices.Clone(local)
	copy(out[:xsaveUserMask], x[:xsaveUserMask])
	kept := bv & xsaveLegacyBV
	for i := 2; i < 63; i++ {
		if bv&(1<<i) == 0 || hereMask&(1<<i) == 0 {
			continue
		}
		to := here[i]
		at := to // AVX: 576 on every CPU
		if src != nil {
			at = src[i]
		} else if i != 2 {
			continue
		}
		size := int(to.Size)
		if size == 0 || int(at.Size) != size || int(to.Offset) < xsaveMin || int(at.Offset) < xsaveMin ||
			int(at.Offset)+size > len(x) || int(to.Offset)+size > len(out) {
			continue
		}
		copy(out[to.Offset:int(to.Offset)+size], x[at.Offset:int(at.Offset)+size])
		kept |= 1 << i
	}
	le.PutUint64(out[xsaveBV:], kept)
	le.PutUint64(out[xsaveCompBV:], 0)
	return out
}

// sameLayout reports whether a and b put every component of mask at the
// same place.
func sameLayout(a, b XSaveLayout, mask uint64) bool {
	for i := 2; i < 64; i++ {
		if mask&(1<<i) != 0 && a[i] != b[i] {
			return false
		}
	}
	return true
}

// layoutEnd is where the last of the components in mask ends, by l's
// offsets (0 when l has no offset for one of them).
func layoutEnd(l XSaveLayout, mask uint64) int {
	end := xsaveMin
	for i := 2; i < 63; i++ {
		if mask&(1<<i) == 0 {
			continue
		}
		if l[i].Size == 0 {
			return 0
		}
		end = max(end, int(l[i].Offset+l[i].Size))
	}
	return end
}
