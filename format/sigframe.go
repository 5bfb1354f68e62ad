package format

import "encoding/binary"

// Offsets in the x86-64 signal frame (the kernel's struct rt_sigframe): the
// return address, then struct ucontext (uc_mcontext at 40 within it, whose
// fpstate pointer is at 184), then siginfo; the FPU state lies above.
const (
	sigframeFPStateOff = 8 + 40 + 184
	// SigframeBaseSize is the frame up to the end of its siginfo.
	SigframeBaseSize = 8 + 304 + 128
	fxSwBytesOff     = 464 // struct _fpx_sw_bytes in the fxsave image
	fpXStateMagic1   = 0x46505853
	fxsaveSize       = 512
)

// SigframeEnd returns where the signal frame at frame ends: after its
// siginfo, or after the FPU state its ucontext points to, whichever is
// further. read reads the process's memory; what it cannot read ends the
// frame at what was read.
func SigframeEnd(frame uint64, read func(addr uint64, b []byte) error) uint64 {
	end := frame + SigframeBaseSize
	var b [8]byte
	if read(frame+sigframeFPStateOff, b[:]) != nil {
		return end
	}
	fp := binary.LittleEndian.Uint64(b[:])
	if fp == 0 {
		return end
	}
	size := uint64(fxsaveSize)
	if read(fp+fxSwBytesOff, b[:]) == nil && binary.LittleEndian.Uint32(b[:]) == fpXStateMagic1 {
		size = uint64(binary.LittleEndian.Uint32(b[4:]))
	}
	return max(end, fp+size)
}
