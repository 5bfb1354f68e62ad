package gdb

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/tprec/tprec/format"
)

// tlsAddress answers qGetTLSAddr: the address of offset in the thread-local
// block of the object whose link_map is at lm, for thread tid (0 or -1: the
// selected one). On x86-64 (TLS variant II) the thread pointer is fs_base;
// an object in the static area has its block at a fixed distance below it
// (l_tls_offset), any other one is found through the thread's DTV, whose
// address glibc keeps in the thread control block at fs_base+8, one 16-byte
// entry per module id, the block's address first.
func (sv *Server) tlsAddress(tid int, offset, lm uint64) (uint64, error) {
	mods := sv.s.Checkpoint().Header.Modules
	if len(mods) == 0 {
		return 0, errors.New("the checkpoint does not list the loader's objects (recorded before format 4.2, or a static program)")
	}
	var mod *format.Module
	for i := range mods {
		if mods[i].LinkMap == lm {
			mod = &mods[i]
		}
	}
	switch {
	case mod == nil:
		return 0, fmt.Errorf("no loaded object has its link_map at %#x", lm)
	case mod.TLSModID == 0:
		return 0, fmt.Errorf("%s: no thread-local storage recorded for it", moduleName(*mod))
	}
	regs, err := sv.s.ThreadRegs(tid)
	if err != nil {
		return 0, err
	}
	tp := regs.FsBase
	if mod.StaticTLS() {
		return tp - uint64(mod.TLSOffset) + offset, nil
	}
	var w [8]byte
	if _, err := sv.s.ReadMemory(tp+8, w[:]); err != nil {
		return 0, fmt.Errorf("read the thread's DTV pointer: %w", err)
	}
	dtv := binary.LittleEndian.Uint64(w[:])
	if _, err := sv.s.ReadMemory(dtv+16*mod.TLSModID, w[:]); err != nil {
		return 0, fmt.Errorf("read the thread's DTV entry %d: %w", mod.TLSModID, err)
	}
	block := binary.LittleEndian.Uint64(w[:])
	if block == ^uint64(0) || block == 0 {
		return 0, fmt.Errorf("%s: this thread has not allocated its thread-local block yet", moduleName(*mod))
	}
	return block + offset, nil
}

func moduleName(m format.Module) string {
	if m.Name == "" {
		return "the program"
	}
	return m.Name
}
